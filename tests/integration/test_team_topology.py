"""The team topology, natively: what ``docker/compose.yaml`` runs, as processes on this machine.

- ``mlflow server`` on PostgreSQL, its artifacts on an S3-compatible store (moto's server, reached
  through ``MLFLOW_S3_ENDPOINT_URL`` as a MinIO deployment would be), served through the server's
  artifact proxy, so no client needs the store's credentials;
- a Prefect server on PostgreSQL with a process work pool, the cached stages' results in a
  ``RemoteFileSystem`` block on the same S3 store (``pipeline.result_storage``);
- the deployments are made from one checkout and pulled by the worker (a ``git_clone`` pull step)
  into a working directory of its own; a second worker, in a third directory, runs the weekly
  re-evaluation after the first worker's directory is gone; a fourth process, in an empty
  directory, loads the champion by alias.

Every input a stage of the second worker needs reaches it through MLflow's artifact store or Prefect's
result storage, never through a path of the first. Needs PostgreSQL at 127.0.0.1:5432 (skipped
without it, failed under ``CI=true``); every process is stopped and every wait bounded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from tests.integration.mlflow_server import free_port, running_mlflow
from tests.integration.prefect_server import (
    BIN,
    ROOT,
    _process,
    _wait_for_flow_run,
    _wait_healthy,
    postgres_database,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: gates a two-epoch tiny model can pass: this test is about where data lives, not the model's skill
LENIENT = {"min_pairwise_accuracy": 0.0, "min_best_of_n_gain": -1.0, "beat_cost_only": False, "max_scoring_latency_ms": 1e9}
BUCKET = "orchrm"
S3_KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
#: what the checkout that deploys holds: the code and files a flow run needs, nothing it produced
CHECKOUT = ("orchrm", "flows", "configs", "expectations", "pyproject.toml", "prefect.yaml")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_", "AWS_"))}
    return env | {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"} | extra


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's S3 server on a free port, with the bucket made."""
    import boto3

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("s3") / "moto.log"
    with _process([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], env=_clean_env(), log=log):
        for _ in range(120):
            try:
                httpx.get(url, timeout=2)
                break
            except httpx.TransportError:
                import time

                time.sleep(0.5)
        else:
            pytest.fail(f"moto's S3 server did not answer:\n{log.read_text()[-2000:]}")
        boto3.client("s3", endpoint_url=url, **_boto(S3_KEYS)).create_bucket(Bucket=BUCKET)
        yield url


def _boto(keys: dict[str, str]) -> dict[str, str]:
    return {"aws_access_key_id": keys["AWS_ACCESS_KEY_ID"], "aws_secret_access_key": keys["AWS_SECRET_ACCESS_KEY"],
            "region_name": keys["AWS_DEFAULT_REGION"]}


def _objects(s3_url: str, prefix: str) -> list[str]:
    import boto3

    pages = boto3.client("s3", endpoint_url=s3_url, **_boto(S3_KEYS)).get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


@pytest.fixture(scope="module")
def mlflow_server(s3, tmp_path_factory):
    """``mlflow server`` on a fresh PostgreSQL database, artifacts on ``s3://orchrm/mlflow``."""
    with postgres_database("orchrm_mlflow") as url:
        store = url.replace("postgresql+asyncpg://", "postgresql+psycopg://")
        log = tmp_path_factory.mktemp("mlflow") / "mlflow.log"
        env = {"MLFLOW_S3_ENDPOINT_URL": s3, **S3_KEYS}
        args = ["server", "--backend-store-uri", store, "--artifacts-destination", f"s3://{BUCKET}/mlflow"]
        with running_mlflow(args, log, env=env) as server:
            yield server


def _checkout(root: Path, config: dict) -> Path:
    """A git repository of the project's files (as they are now), with the test's config committed
    as ``configs/team.yaml``: what a team's deployment clones."""
    src = root / "orchrm-src"
    src.mkdir()
    for name in CHECKOUT:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(path, src / name)
    (src / "configs" / "team.yaml").write_text(yaml.safe_dump(config))
    git = {"GIT_AUTHOR_NAME": "orchrm", "GIT_AUTHOR_EMAIL": "orchrm@example.org", "GIT_COMMITTER_NAME": "orchrm",
           "GIT_COMMITTER_EMAIL": "orchrm@example.org"}
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "the deployed checkout"]):
        subprocess.run(["git", *cmd], cwd=src, env={**os.environ, **git}, check=True, timeout=60)
    return src


def _deploy(src: Path, env: dict[str, str]) -> None:
    """The project's deployments ``on-demand`` and ``weekly-reevaluation``, on the test's config,
    with a pull step that clones ``src``: each worker runs them in a clone of its own."""
    spec = yaml.safe_load((src / "prefect.yaml").read_text())
    spec["pull"] = [{"prefect.deployments.steps.git_clone": {"repository": src.as_uri(), "clone_directory_name": "orchrm"}}]
    for deployment in spec["deployments"]:
        deployment["parameters"] = {**deployment.get("parameters", {}), "config": "configs/team.yaml"}
        deployment["parameters"].pop("traces_dir", None)
    team = src / "prefect.team.yaml"
    team.write_text(yaml.safe_dump(spec, sort_keys=False))
    cmd = [str(BIN / "prefect"), "--no-prompt", "deploy", "--prefect-file", str(team), "--name", "on-demand", "--name", "weekly-reevaluation"]
    done = subprocess.run(cmd, env=env, cwd=src, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"prefect deploy failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def _run_deployment(name: str, env: dict[str, str], cwd: Path) -> str:
    trigger = f"from prefect.deployments import run_deployment; print(run_deployment({name!r}, timeout=0).id)"
    done = subprocess.run([sys.executable, "-c", trigger], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def _work(pool_dir: Path, flow_run_id: str, *, api: str, env: dict[str, str], logs: tuple[Path, ...]) -> dict:
    """A process worker whose working directory is ``pool_dir``, until the flow run ends."""
    pool_dir.mkdir()
    worker_log = pool_dir.parent / f"{pool_dir.name}.log"
    with _process([str(BIN / "prefect"), "worker", "start", "--pool", "orchrm"], env=env, log=worker_log, cwd=pool_dir):
        state = _wait_for_flow_run(api, flow_run_id, timeout=1500, logs=(worker_log, *logs))
    assert state["type"] == "COMPLETED", f"{state}\n{worker_log.read_text()[-6000:]}"
    return state


@pytest.fixture(scope="module")
def team(s3, mlflow_server, tmp_path_factory):
    """Both deployments run by two workers that share no folder; yields what the test reads."""
    root = tmp_path_factory.mktemp("team")
    data = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    data["data_dir"] = ".orchrm"  # relative: inside each worker's own clone
    data["evaluate"] = {**data.get("evaluate", {}), "gates": {**data.get("evaluate", {}).get("gates", {}), **LENIENT}}
    data["pipeline"] = {**data.get("pipeline", {}), "result_storage": "remote-file-system/orchrm-results"}
    src = _checkout(root, data)

    with postgres_database() as database:
        port = free_port()
        api = f"http://127.0.0.1:{port}/api"
        server_env = _clean_env(PREFECT_HOME=str(root / "prefect-home"), PREFECT_SERVER_ANALYTICS_ENABLED="false",
                                PREFECT_SERVER_UI_ENABLED="false", PREFECT_API_DATABASE_CONNECTION_URL=database)
        # the clients: the Prefect API and the MLflow server, nothing else (no S3 key: MLflow proxies the artifacts)
        client_env = _clean_env(PREFECT_HOME=str(root / "client-home"), PREFECT_API_URL=api, MLFLOW_TRACKING_URI=mlflow_server)
        server_log = root / "prefect-server.log"
        with _process([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)], env=server_env,
                      log=server_log, cwd=root) as server:
            _wait_healthy(api, server, server_log)
            block = (
                "from prefect.filesystems import RemoteFileSystem; "
                f"RemoteFileSystem(basepath='s3://{BUCKET}/prefect-results', settings={{'key': 'testing', 'secret': 'testing', "
                f"'client_kwargs': {{'endpoint_url': {s3!r}, 'region_name': 'us-east-1'}}}}).save('orchrm-results')"
            )
            subprocess.run([sys.executable, "-c", block], env=client_env, cwd=root, check=True, timeout=120)
            subprocess.run([str(BIN / "prefect"), "work-pool", "create", "orchrm", "--type", "process"], env=client_env, cwd=root,
                           check=True, timeout=120, capture_output=True)
            _deploy(src, client_env)

            first = root / "worker-1"
            pipeline_run = _run_deployment("orchrm-pipeline/on-demand", client_env, root)
            _work(first, pipeline_run, api=api, env=client_env, logs=(server_log,))
            first_dir = Path(_run_tag(mlflow_server, "pipeline", "orchrm.run_dir"))
            assert not first_dir.is_relative_to(src), "the worker ran the flow in a clone of its own, not in the deploying checkout"
            # the process worker ran the flow run in a clone in a folder of its own, deleted after the run;
            # nothing of it, nor of the worker's own folder, is left for the second worker
            shutil.rmtree(first)
            assert not first_dir.exists()

            weekly_run = _run_deployment("orchrm-weekly-reevaluation/weekly-reevaluation", client_env, root)
            state = _work(root / "worker-2", weekly_run, api=api, env=client_env, logs=(server_log,))
            yield {"root": root, "env": client_env, "weekly_state": state, "first_dir": first_dir}


def _run_tag(url: str, name: str, tag: str) -> str:
    c = _client(url)
    (run,) = c.search_runs([c.get_experiment_by_name("orchrm").experiment_id], f"attributes.run_name = '{name}'")
    return run.data.tags[tag]


def _client(url: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=url, registry_uri=url)


def test_the_pipeline_run_by_a_worker_registers_a_champion_whose_files_are_on_s3(team, mlflow_server, s3):
    mv = _client(mlflow_server).get_model_version_by_alias("orchrm-reward", "champion")
    assert mv.version == "1" and mv.tags["verdict"] == "promoted"
    keys = _objects(s3, "mlflow/")
    assert any(k.endswith("/pairs/pairs.parquet") for k in keys), keys[:20]
    assert any(k.endswith("MLmodel") for k in keys), keys[:20]


def test_the_cached_stages_results_are_in_the_shared_result_storage(team, s3):
    assert _objects(s3, "prefect-results/"), "no Prefect result was persisted on the S3 block"


def test_the_weekly_reevaluation_on_another_worker_reads_the_champions_pairs_from_mlflow(team, mlflow_server):
    c = _client(mlflow_server)
    mv = c.get_model_version_by_alias("orchrm-reward", "champion")
    assert "still passes every gate" in team["weekly_state"]["message"], team["weekly_state"]
    assert mv.tags.get("last_reevaluation"), mv.tags
    assert _run_tag(mlflow_server, "reevaluate", "orchrm.run_dir") != str(team["first_dir"])


def test_the_champion_loads_by_alias_in_a_process_that_never_saw_either_folder(team, mlflow_server, tmp_path):
    script = (
        "import orchrm; m = orchrm.load_reward_model('models:/orchrm-reward@champion'); "
        "print(m.score(['Solve: 2+3'], ['cot(k=1)']).tolist()[0])"
    )
    done = subprocess.run([sys.executable, "-c", script], env=_clean_env(MLFLOW_TRACKING_URI=mlflow_server), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    float(done.stdout.strip().splitlines()[-1])
