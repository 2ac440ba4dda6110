"""Shared test setup: offline, no telemetry, real data found beside the project when present."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

for _key, _value in {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "1",
    "GX_ANALYTICS_ENABLED": "false",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(_key, _value)

ROOT = Path(__file__).resolve().parents[1]
# the public data sets (GSM8K, SQuAD, StrategyQA) live beside the project when available
os.environ.setdefault("ORCHRM_DATA_DIR", str(ROOT.parent / "shared" / "data"))


@pytest.fixture
def data_dir() -> Path:
    return Path(os.environ["ORCHRM_DATA_DIR"])
