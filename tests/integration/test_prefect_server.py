"""A real Prefect server on PostgreSQL, a process work pool and a worker: one deployment run of the
pipeline (prefect.yaml's ``on-demand``) on the tiny config, and its champion in MLflow afterwards.

Needs PostgreSQL at 127.0.0.1:5432 (user postgres, trust auth, the pg_trgm extension available);
skipped when it cannot be reached, except under ``CI=true``, where it fails: CI's machines run
PostgreSQL, so a skip there would hide a broken setup. Every wait is bounded and every process is
stopped.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from tests.integration.mlflow_server import free_port
from tests.integration.prefect_server import (
    BIN,
    ROOT,
    _prefect,
    _process,
    _wait_for_flow_run,
    _wait_healthy,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: gates a two-epoch tiny model can pass: this test is about the deployment, not the model's skill
LENIENT = {"min_pairwise_accuracy": 0.0, "min_best_of_n_gain": -1.0, "beat_cost_only": False, "max_scoring_latency_ms": 1e9}


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

