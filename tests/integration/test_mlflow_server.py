"""A real `mlflow server` on the registry's SQLite store shows what the pipeline logged: the runs
with their metrics and data set, the logged model, the registered versions and their aliases
(read through its REST API, as the MLflow UI does). Registry calls and loading by alias work
through the server too."""

from __future__ import annotations

import httpx
import pytest
import torch

from orchrm.config import PipelineConfig
from orchrm.ops import registry, tracking
from orchrm.ops.serving import load_reward_model
from tests.integration.mlflow_server import api, running_mlflow
from tests.integration.test_registry import Store, build_store

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    import mlflow

    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        before = mlflow.get_tracking_uri()
        yield build_store(tmp_path_factory.mktemp("server"))
        mlflow.set_tracking_uri(before)


@pytest.fixture(scope="module")
def server(store, tmp_path_factory) -> str:
    """`mlflow server` on the store, on a free loopback port; always stopped."""
    log_path = tmp_path_factory.mktemp("server-log") / "server.log"
    with running_mlflow(["server", "--backend-store-uri", tracking.tracking_uri(store.config)], log_path) as url:
        yield url


def test_the_server_shows_the_runs_with_metrics_and_the_pairs_dataset(store, server):
    (exp,) = [e for e in api(server, "experiments/search", max_results=100)["experiments"] if e["name"] == "orchrm"]
    run = api(server, "runs/get", run_id=store.train_run)["run"]
    metrics = {m["key"] for m in run["data"]["metrics"]}
    assert {"epoch.train_loss", "loss", "train.reward_std"} <= metrics
    assert any(t["key"] == "mlflow.parentRunId" and t["value"] == store.parent_run for t in run["data"]["tags"])
    datasets = run["inputs"]["dataset_inputs"]
    assert [d["dataset"]["digest"] for d in datasets] == [store.digest]
    assert run["info"]["experiment_id"] == exp["experiment_id"]


def test_the_server_shows_the_logged_model_of_each_candidate(store, server):
    answer = httpx.post(f"{server}/api/2.0/mlflow/logged-models/search", json={"experiment_ids": [api(server, "experiments/get-by-name", experiment_name="orchrm")["experiment"]["experiment_id"]]}, timeout=30)
    assert answer.status_code == 200, answer.text
    models = answer.json()["models"]
    sources = {m["info"]["source_run_id"] for m in models}
    assert {store.good_run, store.weak_run} <= sources


def test_the_server_shows_the_registered_versions_and_aliases(store, server):
    model = api(server, "registered-models/get", name="orchrm-reward")["registered_model"]
    aliases = {a["alias"]: int(a["version"]) for a in model["aliases"]}
    assert aliases == {"champion": store.good_version, "challenger": store.good_version}  # the weak one failed a gate
    versions = api(server, "model-versions/search", filter="name='orchrm-reward'")["model_versions"]
    tags = {int(v["version"]): {t["key"]: t["value"] for t in v.get("tags", [])} for v in versions}
    assert tags[store.good_version]["verdict"] == "promoted" and tags[store.weak_version]["verdict"] == "rejected"
    assert tags[store.good_version]["data_digest"] == store.digest
    champion = api(server, "registered-models/alias", name="orchrm-reward", alias="champion")["model_version"]
    assert int(champion["version"]) == store.good_version


def test_registry_calls_and_loading_go_through_the_server(store, server, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    config = PipelineConfig(data_dir=store.config.data_dir)
    assert tracking.tracking_uri(config) == server
    assert registry.champion_version(config) == store.good_version
    assert registry.promote(store.good_version, config=config)  # idempotent through the server too
    model = load_reward_model("models:/orchrm-reward@champion", tracking_uri=server)
    prompts, actions = store.pairs["prompt"].tolist()[:8], store.pairs["chosen"].tolist()[:8]
    assert torch.equal(model.score(prompts, actions), store.good.score(prompts, actions))
