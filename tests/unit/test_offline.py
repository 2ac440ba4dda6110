"""Telemetry off and no downloads, defined once (orchrm/util/offline.env) and used by every entry point."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from orchrm.util.offline import ENV_FILE, apply_offline_env, offline_settings

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "1",
    "GX_ANALYTICS_ENABLED": "false",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def test_the_env_file_turns_every_telemetry_and_download_switch_off():
    assert offline_settings() == EXPECTED


def test_apply_sets_only_what_the_environment_lacks():
    env = {"DO_NOT_TRACK": "0", "PATH": "/bin"}
    applied = apply_offline_env(env)
    assert env["DO_NOT_TRACK"] == "0" and env["PATH"] == "/bin"  # a value the user set wins
    assert applied == {k: v for k, v in EXPECTED.items() if k != "DO_NOT_TRACK"}
    assert {k: env[k] for k in applied} == applied
    assert apply_offline_env(env) == {}


def test_a_malformed_line_is_named(tmp_path, monkeypatch):
    bad = tmp_path / "offline.env"
    bad.write_text("# ok\nHF_HUB_OFFLINE\n")
    monkeypatch.setattr("orchrm.util.offline.ENV_FILE", bad)
    with pytest.raises(ValueError, match=r"offline\.env:2: expected KEY=VALUE, got 'HF_HUB_OFFLINE'"):
        offline_settings()


def test_the_cli_applies_them_before_a_command_runs():
    env = {k: v for k, v in os.environ.items() if k not in EXPECTED}
    probe = (
        "import os, sys\n"
        "from orchrm import cli\n"
        "try:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print(all(key in os.environ for key in {sorted(EXPECTED)!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "True"


def test_the_makefile_exports_the_same_file_and_the_wheel_ships_it():
    makefile = (ROOT / "Makefile").read_text()
    assert "include orchrm/util/offline.env" in makefile
    assert not any(f"export {key}=" in makefile for key in EXPECTED)  # no second list to drift
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["orchrm"]
    assert ENV_FILE.relative_to(ROOT / "orchrm").as_posix() in package_data


def test_the_tests_run_with_them():
    """tests/conftest.py applies the file (a value already set in the environment is kept)."""
    assert all(key in os.environ for key in EXPECTED)
