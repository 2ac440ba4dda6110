"""Telemetry off and no downloads, defined once.

``offline.env`` (beside this file) lists the settings as ``KEY=VALUE`` lines: Prefect's, MLflow's
and Great Expectations' usage reports off, Hugging Face offline (nothing may be downloaded at run
time), tokenizers single-threaded. The Makefile includes that file; the CLI, the tests and the
benchmarks call :func:`apply_offline_env` before they import the libraries that read them.

>>> settings = offline_settings()
>>> settings["HF_HUB_OFFLINE"], settings["MLFLOW_DISABLE_TELEMETRY"]
('1', 'true')
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

ENV_FILE = Path(__file__).with_name("offline.env")


def offline_settings() -> dict[str, str]:
    """The settings of ``offline.env``, in file order (comments and blank lines skipped)."""
    settings: dict[str, str] = {}
    for number, line in enumerate(ENV_FILE.read_text(encoding="utf-8").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{ENV_FILE}:{number}: expected KEY=VALUE, got {line!r}")
        settings[key.strip()] = value.strip()
    return settings


def apply_offline_env(environ: MutableMapping[str, str] | None = None) -> Mapping[str, str]:
    """Set each setting of ``offline.env`` that ``environ`` (default ``os.environ``) lacks; a
    value already set wins, so a user can turn one back on. Returns the settings applied."""
    env = os.environ if environ is None else environ
    applied = {}
    for key, value in offline_settings().items():
        if key not in env:
            env[key] = value
            applied[key] = value
    return applied
