"""Shared test setup: offline, no telemetry, real data found beside the project when present."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchrm.offline import apply_offline_env

apply_offline_env()  # orchrm/offline.env, before any test imports MLflow, GX, Prefect or transformers

ROOT = Path(__file__).resolve().parents[1]
# the public data sets (GSM8K, SQuAD, StrategyQA) live beside the project when available
os.environ.setdefault("ORCHRM_DATA_DIR", str(ROOT.parent / "shared" / "data"))


@pytest.fixture
def data_dir() -> Path:
    return Path(os.environ["ORCHRM_DATA_DIR"])
