"""Flow tests: one temporary Prefect API for the session (``prefect_test_harness``), its home in a
temporary folder; every pipeline run on ``configs/tiny.yaml`` with its data in ``tmp_path``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
# before Prefect reads its settings: nothing of these tests lands in ~/.prefect
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="orchrm-prefect-home-"))


@pytest.fixture(scope="session", autouse=True)
def prefect_api():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=60):
        yield


def write_config(folder: Path, name: str = "config.yaml", **sections) -> Path:
    """``configs/tiny.yaml`` with ``data_dir`` in ``folder`` and each section updated by
    ``sections`` (``train={"epochs": 1}``; a value that is not a dict replaces the field)."""
    data = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    data["data_dir"] = str(folder / "data")
    for key, value in sections.items():
        if isinstance(value, dict):
            merged = dict(data.get(key) or {})
            for k, v in value.items():
                merged[k] = {**merged.get(k, {}), **v} if isinstance(v, dict) else v
            data[key] = merged
        else:
            data[key] = value
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def tiny_config(tmp_path) -> Path:
    return write_config(tmp_path)
