"""Shared test setup: offline, no telemetry, real data found beside the project when present."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchrm.util.offline import apply_offline_env

apply_offline_env()  # orchrm/util/offline.env, before any test imports MLflow, GX, Prefect or transformers

ROOT = Path(__file__).resolve().parents[1]
# the public data sets (GSM8K, SQuAD, StrategyQA) live beside the project when available
os.environ.setdefault("ORCHRM_DATA_DIR", str(ROOT.parent / "shared" / "data"))


#: the MLflow URIs this test session started with (normally unset)
_SESSION_MLFLOW_URIS = {name: os.environ.get(name) for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")}


@pytest.fixture(autouse=True)
def _session_mlflow_uris():
    """Each test starts with the session's MLflow URIs: ``mlflow.set_tracking_uri`` (in a test, or
    in a module fixture's teardown) also exports ``MLFLOW_TRACKING_URI``, which would point every
    later test at that store."""
    for name, value in _SESSION_MLFLOW_URIS.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    yield


@pytest.fixture
def data_dir() -> Path:
    return Path(os.environ["ORCHRM_DATA_DIR"])
