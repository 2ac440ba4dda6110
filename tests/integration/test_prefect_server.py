"""A real Prefect server on PostgreSQL, a process work pool and a worker: one deployment run of the
pipeline (prefect.yaml's ``on-demand``) on the tiny config, and its champion in MLflow afterwards.

Needs PostgreSQL at 127.0.0.1:5432 (user postgres, trust auth, the pg_trgm extension available);
skipped when it cannot be reached, except under ``CI=true``, where it fails: CI's machines run
PostgreSQL, so a skip there would hide a broken setup. Every wait is bounded and every process is
stopped.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from contextlib import closing, contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

from tests.integration.mlflow_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PG_HOST, PG_PORT, PG_USER = "127.0.0.1", 5432, "postgres"
BIN = Path(sys.executable).parent
#: gates a two-epoch tiny model can pass: this test is about the deployment, not the model's skill
LENIENT = {"min_pairwise_accuracy": 0.0, "min_best_of_n_gain": -1.0, "beat_cost_only": False, "max_scoring_latency_ms": 1e9}


def _unavailable(reason: str) -> None:
    """Skip (a developer's machine without PostgreSQL), or fail under ``CI=true``."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI=true: the PostgreSQL-backed tests must run (start PostgreSQL, or run without CI=true)")
    pytest.skip(reason)


def _reachable(host: str, port: int) -> bool:
    with closing(socket.socket()) as s:
        s.settimeout(2)
        return s.connect_ex((host, port)) == 0


async def _admin(sql: str, database: str = "postgres") -> list:
    import asyncpg

    conn = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database=database, timeout=10)
    try:
        return await conn.fetch(sql)
    finally:
        await conn.close()


@pytest.fixture
def database():
    """A fresh PostgreSQL database (with pg_trgm), dropped afterwards."""
    if not _reachable(PG_HOST, PG_PORT):
        _unavailable(f"PostgreSQL is not reachable at {PG_HOST}:{PG_PORT}")
    available = asyncio.run(_admin("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'"))
    if not available:
        _unavailable("PostgreSQL lacks the pg_trgm extension that Prefect's server needs")
    name = f"orchrm_prefect_{uuid.uuid4().hex[:8]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    asyncio.run(_admin("CREATE EXTENSION IF NOT EXISTS pg_trgm", database=name))
    yield f"postgresql+asyncpg://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@contextmanager
def _process(cmd: list[str], *, env: dict, log: Path, cwd: Path = ROOT):
    """A background process in its own session; stopped (TERM, then KILL) on exit."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield proc
        finally:
            for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
                if proc.poll() is not None:
                    break
                os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout=wait)
                except subprocess.TimeoutExpired:
                    continue


def _wait_healthy(api: str, server: subprocess.Popen, log: Path, *, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"prefect server exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"prefect server not healthy after {timeout:g} s:\n{log.read_text()[-3000:]}")


def _prefect(*args: str, env: dict) -> str:
    done = subprocess.run([str(BIN / "prefect"), *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"prefect {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


def test_a_deployment_run_on_a_postgres_backed_server_registers_a_champion(database, tmp_path):
    from mlflow import MlflowClient

    from orchrm.config import load_config
    from orchrm.ops import registry, tracking

    data = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    data["data_dir"] = str(tmp_path / "data")
    data["evaluate"] = {**data.get("evaluate", {}), "gates": {**data.get("evaluate", {}).get("gates", {}), **LENIENT}}
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(data))

    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_TRACKING"))}
    env |= {
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_ENABLED": "false",
        "PREFECT_API_DATABASE_CONNECTION_URL": database,
    }
    client_env = {k: v for k, v in env.items() if k != "PREFECT_API_DATABASE_CONNECTION_URL"} | {"PREFECT_API_URL": api}
    server_log, worker_log = tmp_path / "server.log", tmp_path / "worker.log"
    with _process([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)], env=env, log=server_log) as server:
        _wait_healthy(api, server, server_log)
        _prefect("work-pool", "create", "orchrm", "--type", "process", env=client_env)
        _prefect("--no-prompt", "deploy", "--prefect-file", str(ROOT / "prefect.yaml"), "--name", "on-demand", env=client_env)
        trigger = (
            "from prefect.deployments import run_deployment; import sys; "
            f"print(run_deployment('orchrm-pipeline/on-demand', parameters={{'config': {str(config)!r}}}, timeout=0).id)"
        )
        flow_run_id = subprocess.run([sys.executable, "-c", trigger], env=client_env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True).stdout.strip().splitlines()[-1]
        with _process([str(BIN / "prefect"), "worker", "start", "--pool", "orchrm"], env=client_env, log=worker_log):
            state = _wait_for_flow_run(api, flow_run_id, timeout=1500, logs=(worker_log, server_log))
        assert state["type"] == "COMPLETED", f"{state}\n{worker_log.read_text()[-4000:]}"

    cfg = load_config(config)
    champion = registry.champion_version(cfg)
    assert champion == 1
    mv = MlflowClient(tracking_uri=tracking.tracking_uri(cfg), registry_uri=tracking.tracking_uri(cfg)).get_model_version_by_alias(
        cfg.registry.model_name, "champion"
    )
    assert mv.tags["verdict"] == "promoted"


def _wait_for_flow_run(api: str, flow_run_id: str, *, timeout: float, logs: tuple[Path, ...]) -> dict:
    deadline = time.monotonic() + timeout
    state: dict = {}
    while time.monotonic() < deadline:
        state = httpx.get(f"{api}/flow_runs/{flow_run_id}", timeout=10).json().get("state") or {}
        if state.get("type") in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            return state
        time.sleep(3)
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs)
    pytest.fail(f"flow run {flow_run_id} not finished after {timeout:g} s (state {state.get('type')}):\n{tails}")
