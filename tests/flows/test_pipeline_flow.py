"""The orchrm-pipeline flow on the tiny config: what a run publishes, and how each failure behaves.

One store (MLflow registry and Prefect results) is shared by the tests of this module: the first
run makes a champion, the later ones show what a crash, a failed gate and the weekly
re-evaluation do to it.
"""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from orchrm.config import load_config
from orchrm.errors import TrainingError
from orchrm.ops import registry, tracking
from tests.flows.conftest import write_config

pytestmark = pytest.mark.slow

#: gates a two-epoch tiny model passes on a busy machine: these tests are about the pipeline, not the model
LENIENT = {"min_pairwise_accuracy": 0.0, "min_best_of_n_gain": -1.0, "beat_cost_only": False, "max_scoring_latency_ms": 1e9}


def _versions(cfg) -> list[int]:
    c = MlflowClient(tracking_uri=tracking.tracking_uri(cfg), registry_uri=tracking.tracking_uri(cfg))
    return sorted(int(v.version) for v in c.search_model_versions(f"name='{cfg.registry.model_name}'"))


def _artifacts(key: str):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        return client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A data folder where one pipeline run has happened; its config path and result."""
    from flows.pipeline import orchrm_pipeline

    folder = tmp_path_factory.mktemp("store")
    path = write_config(folder, evaluate={"gates": LENIENT})
    result = orchrm_pipeline(str(path))
    return path, result


def test_a_run_trains_registers_and_promotes_the_first_candidate(store):
    path, result = store
    cfg = load_config(path)
    assert result.status == "promoted", result.message
    assert result.registered.version == 1
    assert registry.champion_version(cfg) == 1
    assert registry.alias_version(cfg, "challenger") == 1
    # one parent run, a nested run per stage, ids passed explicitly
    c = MlflowClient(tracking_uri=tracking.tracking_uri(cfg))
    children = c.search_runs([c.get_run(result.run_id).info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{result.run_id}'")
    assert {r.info.run_name for r in children} >= {"validate-artifacts", "build-pairs", "validate-pairs", "train", "evaluate"}
    train = next(r for r in children if r.info.run_name == "train")
    assert "epoch.train_loss" in train.data.metrics  # logged by the training subprocess


def test_the_pairs_carry_one_digest_from_the_pair_table_to_the_registered_version(store):
    """The model's manifest, the training run, the pairs' MLflow dataset and the registered version
    name the pairs by the same digest: the one of the pair table the run wrote."""
    from orchrm.data.tables import pairs_digest, read_table
    from orchrm.model.reward_model import BradleyTerryModel

    path, result = store
    cfg = load_config(path)
    digest = result.pairs.digest
    assert digest == pairs_digest(read_table(result.pairs.path))
    assert BradleyTerryModel.load(result.model.model_path).manifest["data_hash"] == digest
    c = MlflowClient(tracking_uri=tracking.tracking_uri(cfg))
    pairs_run = c.get_run(result.pairs.run_id)
    (dataset,) = [d.dataset for d in pairs_run.inputs.dataset_inputs]
    assert dataset.digest == pairs_run.data.tags["orchrm.data_digest"] == digest
    assert c.get_run(result.model.run_id).data.tags["orchrm.data_hash"] == digest
    assert registry.version_info(result.registered.version, config=cfg)["tags"]["data_digest"] == digest


def test_every_run_publishes_the_report_and_a_link_to_the_mlflow_run(store):
    _, result = store
    (report,) = [a for a in _artifacts("orchrm-pipeline-report") if result.status in (a.description or "")][:1]
    for gate in result.verdict.gates:
        assert f"| {gate.name} |" in report.data
    assert "Gates" in report.data and "best" in report.data.lower()
    links = _artifacts("orchrm-mlflow-run")
    assert any(result.run_id in (a.data or "") for a in links)


def test_a_crash_in_training_registers_nothing_and_the_next_run_completes(store, tmp_path):
    from flows.pipeline import orchrm_pipeline

    path, _ = store
    cfg = load_config(path)
    before = _versions(cfg)
    crashing = write_config(path.parent, "crash.yaml", evaluate={"gates": LENIENT}, pipeline={"train_timeout_s": 0.5})
    with pytest.raises(TrainingError, match="did not finish within pipeline.train_timeout_s = 0.5 s.*nothing was registered"):
        orchrm_pipeline(str(crashing))
    assert _versions(cfg) == before
    assert registry.champion_version(cfg) == 1

    result = orchrm_pipeline(str(path))
    assert result.registered.version == before[-1] + 1
    assert result.status in ("promoted", "rejected")


def test_a_failed_gate_completes_with_verdict_rejected_and_champion_untouched(store):
    from flows.pipeline import orchrm_pipeline

    path, _ = store
    cfg = load_config(path)
    champion = registry.champion_version(cfg)
    strict = write_config(path.parent, "strict.yaml", evaluate={"gates": {**LENIENT, "max_scoring_latency_ms": 1e-6}})
    state = orchrm_pipeline(str(strict), return_state=True)
    result = state.result()
    assert result.status == "rejected"
    assert "scoring_latency" in [g.name for g in result.verdict.failed()]
    # the verdict and every failing gate are in the flow run's state message, as the API shows it
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        stored = client.read_flow_run(state.state_details.flow_run_id).state
    assert stored.is_completed() and stored.message.startswith("rejected: ")
    assert all(g.name in stored.message for g in result.verdict.failed())
    assert registry.champion_version(cfg) == champion
    # scoring_latency is an absolute gate: no shadow traffic for this version
    assert registry.alias_version(cfg, "challenger") != result.registered.version
    assert result.registered.version != champion


def test_the_weekly_reevaluation_checks_the_champion_on_fresh_tasks(store):
    from flows.pipeline import weekly

    path, _ = store
    cfg = load_config(path)
    result = weekly(str(path), seed=7)
    assert result.champion_version == registry.champion_version(cfg)
    assert result.pool.seed == 7
    assert result.pool.kind == "sandbox" and "fresh held-out tasks (seed 7)" in result.message  # a sandbox champion
    assert "pairwise_accuracy" in result.evaluation.metrics or "best_of_1.reward_model" in result.evaluation.metrics
    assert result.verdict is not None
    assert _artifacts("orchrm-weekly-report")
