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


def test_an_evaluation_logged_through_the_server_lands_on_the_versions_model_and_page(store, server, monkeypatch, tmp_path):
    """What the weekly re-evaluation writes, through the server: the pool and the pairs as data
    sets, the model as the run's input, every metric linked to the version's LoggedModel and its
    data set, best-of-N as a curve over N; then the version's tags name the day and the verdict."""
    from orchrm.config import config_from_dict
    from orchrm.evaluation.gates import check_gates
    from orchrm.evaluation.harness import evaluate
    from orchrm.evaluation.pool import build_pool

    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    config = config_from_dict({
        "data_dir": store.config.data_dir, "collect": {"domains": ["math"]},
        "evaluate": {"tasks_per_domain": 2, "candidates": 2, "repeats": 0, "pool_seeds": [0], "best_of": [1, 2], "bootstrap": 0,
                     "gates": {"best_of": 2}},
    })
    pool = build_pool(config, progress=False, workers=1)
    pool_file = pool.save(tmp_path / "pool.parquet")
    report = evaluate(store.good, pairs=store.pairs, pool=pool, config=config.evaluate)
    model_id = registry.version_model_id(store.good_version, config=config)
    run_id = tracking.start_run(config, "evaluate")
    datasets = {"pool": tracking.log_pool_dataset(pool, run_ids=(run_id,), source=str(pool_file))}
    digest = tracking.log_pairs_dataset(store.pairs, run_id=run_id, source="pairs.parquet")
    datasets["pairs"] = tracking.DatasetRef(tracking.PAIRS_DATASET, digest, "training")
    tracking.log_model_inputs(run_id, [model_id])
    tracking.log_evaluation(report, run_id=run_id, model_id=model_id, datasets=datasets)
    verdict = check_gates(report.metrics, config.evaluate.gates)
    tags = registry.tag_reevaluation(store.good_version, verdict=verdict, run_id=run_id, config=config)
    tracking.end_run(config, run_id)

    run = api(server, "runs/get", run_id=run_id)["run"]
    contexts = {d["dataset"]["name"]: ({t["key"]: t["value"] for t in d["tags"]}["mlflow.data.context"], d["dataset"]["digest"])
                for d in run["inputs"]["dataset_inputs"]}
    assert contexts == {"pool": ("evaluation", pool.digest()), "pairs": ("training", store.digest)}
    assert [m["model_id"] for m in run["inputs"]["model_inputs"]] == [model_id]
    model = httpx.get(f"{server}/api/2.0/mlflow/logged-models/{model_id}", timeout=30).json()["model"]
    linked = {(m["key"], int(m.get("step", 0))): m for m in model["data"]["metrics"] if m.get("run_id") == run_id}
    for key, ref in (("pairwise_accuracy", datasets["pairs"]), ("best_of_2.reward_model", datasets["pool"])):
        assert linked[(key, 0)]["value"] == report.metrics[key]
        assert (linked[(key, 0)]["dataset_name"], linked[(key, 0)]["dataset_digest"]) == (ref.name, ref.digest), key
    history = api(server, "metrics/get-history", run_id=run_id, metric_key="best_of_n.reward_model")["metrics"]
    assert sorted((int(m.get("step", 0)), m["value"]) for m in history) == [(n, report.metrics[f"best_of_{n}.reward_model"]) for n in (1, 2)]
    version = api(server, "model-versions/get", name="orchrm-reward", version=str(store.good_version))["model_version"]
    on_page = {t["key"]: t["value"] for t in version["tags"]}
    day = on_page["last_reevaluation"]
    assert on_page[f"reevaluated.{day}"] == tags[f"reevaluated.{day}"] == registry.reevaluation_verdict(verdict)
    assert on_page["last_reevaluation.run_id"] == run_id
    assert registry.champion_version(config) == store.good_version  # a re-evaluation moves no alias
