"""The model registry on a real SQLite store (DESIGN §8): register, gate, promote, load back.

One store per module: a good candidate (trained on the synthetic pairs) and a deliberately weak
one (trained on the same pairs with chosen and rejected swapped, so it learned the opposite).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import torch

from orchrm.config import PipelineConfig
from orchrm.data.tables import pairs_digest
from orchrm.errors import ModelFileError, PromotionRejected, RegistryError
from orchrm.evaluation.gates import Verdict, check_gates
from orchrm.ops import registry, tracking
from orchrm.ops.serving import load_reward_model
from tests.integration.mlflow_server import free_port
from tests.model.conftest import make_pairs

pytestmark = pytest.mark.integration

TINY = dict(hidden_dim=32, num_layers=2, num_heads=2, max_length=96, vocab_size=300, dropout=0.0)


def heldout_accuracy(model, pairs: pd.DataFrame) -> float:
    test = pairs[pairs["split"] == "test"]
    chosen = model.score(test["prompt"].tolist(), test["chosen"].tolist())
    rejected = model.score(test["prompt"].tolist(), test["rejected"].tolist())
    return float((chosen > rejected).float().mean())


def train(pairs: pd.DataFrame, *, run_id: str | None = None):
    from orchrm import BradleyTerryModel, Trainer

    model = BradleyTerryModel(**TINY)
    callbacks = [tracking.MlflowCallback(run_id)] if run_id else []
    Trainer(model=model, batch_size=16, lr=3e-3, progress=False, callbacks=callbacks).train(pairs=pairs, epochs=4)
    return model.eval()


@dataclass
class Store:
    config: PipelineConfig
    pairs: pd.DataFrame
    good: object
    weak: object
    good_file: Path
    parent_run: str
    train_run: str
    good_run: str
    weak_run: str
    good_version: int
    weak_version: int
    digest: str
    good_uri: str
    good_verdict: Verdict
    weak_verdict: Verdict


def build_store(root: Path) -> Store:
    """A registry with a champion (the good model, v1) and a rejected challenger (the weak, v2)."""
    torch.set_num_threads(1)
    config = PipelineConfig(data_dir=str(root / "data"))
    tracking.configure(config)
    pairs = make_pairs(40, seed=0)
    parent = tracking.start_run(config, "orchrm-pipeline")
    train_run = tracking.start_run(config, "train", parent_run_id=parent)
    good = train(pairs, run_id=train_run)
    tracking.end_run(config, train_run)
    swapped = pairs.rename(columns={"chosen": "rejected", "rejected": "chosen"})
    weak = train(swapped)
    pairs_file = root / "pairs.parquet"
    pairs.to_parquet(pairs_file)
    digest = tracking.log_pairs_dataset(pairs, run_id=train_run, source=str(pairs_file))

    versions, uris, runs, verdicts = [], [], [], []
    for name, model in (("good", good), ("weak", weak)):
        run_id = tracking.start_run(config, f"candidate-{name}", parent_run_id=parent)
        file = model.save(root / name / "model.safetensors")
        uri = registry.log_model(file, run_id=run_id, config=config)
        # the held-out pairwise accuracy is measured; the best-of-N figures (which need a candidate
        # pool, see tests/integration/test_pipeline.py) are set to pass, so that accuracy decides
        metrics = {**gate_metrics(rm=0.7 if name == "good" else 0.75), "pairwise_accuracy": heldout_accuracy(model, pairs)}
        champion = registry.champion_version(config)
        if champion:  # the paired difference against the champion, set to pass too
            metrics |= {"champion_delta.best_of_8": 0.05, "champion_delta.best_of_8.ci_low": 0.01, "champion_delta.best_of_8.ci_high": 0.09}
        log_evaluated(config, run_id, metrics, champion=gate_metrics(rm=0.7) if champion else None, champion_version=champion)
        verdict = check_gates(metrics, config.evaluate.gates, champion=gate_metrics(rm=0.7) if champion else None)
        versions.append(registry.register_candidate(uri, run_id=run_id, verdict=verdict, data_digest=digest, config=config))
        uris.append(uri)
        runs.append(run_id)
        verdicts.append(verdict)
        if name == "good":
            registry.promote(versions[-1], config=config)
    tracking.end_run(config, parent)
    return Store(
        config, pairs, good, weak, root / "good" / "model.safetensors", parent, train_run, runs[0], runs[1],
        versions[0], versions[1], digest, uris[0], verdicts[0], verdicts[1],
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        before = mlflow.get_tracking_uri()
        yield build_store(tmp_path_factory.mktemp("registry"))
        mlflow.set_tracking_uri(before)


# --------------------------------------------------------------------------------------------
# the store


def test_store_is_sqlite_under_the_data_dir_with_artifacts_beside_it(store, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    db = (Path(store.config.data_dir) / "mlflow.db").resolve()
    assert tracking.tracking_uri(store.config) == f"sqlite:///{db}"
    assert db.is_file()
    exp = tracking.client(tracking.tracking_uri(store.config)).get_experiment_by_name("orchrm")
    assert exp.artifact_location == (db.parent / "mlartifacts").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert tracking.tracking_uri(store.config) == "http://mlflow.example:5000"


def test_a_second_store_in_the_same_process_is_not_the_first_one(tmp_path, monkeypatch):
    # mlflow.set_tracking_uri exports MLFLOW_TRACKING_URI; configure must not let that env var
    # send the next config's runs and versions into the first config's store
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    first, second = PipelineConfig(data_dir=str(tmp_path / "a")), PipelineConfig(data_dir=str(tmp_path / "b"))
    tracking.configure(first)
    assert "MLFLOW_TRACKING_URI" not in os.environ
    assert tracking.tracking_uri(second) == f"sqlite:///{(tmp_path / 'b' / 'mlflow.db').resolve()}"
    tracking.configure(second)
    assert tracking.client(tracking.tracking_uri(second)).get_experiment_by_name("orchrm") is not None


def test_stage_runs_nest_under_the_pipeline_run(store):
    c = tracking.client(tracking.tracking_uri(store.config))
    for run_id in (store.train_run, store.good_run, store.weak_run):
        assert c.get_run(run_id).data.tags["mlflow.parentRunId"] == store.parent_run
    assert c.get_run(store.parent_run).info.status == "FINISHED"


def test_callback_logs_params_and_per_step_and_per_epoch_metrics(store):
    c = tracking.client(tracking.tracking_uri(store.config))
    run = c.get_run(store.train_run)
    assert run.data.params, "the trainer's params were not logged"
    epochs = c.get_metric_history(store.train_run, "epoch.train_loss")
    assert [m.step for m in epochs] == [1, 2, 3, 4] or [m.step for m in epochs] == [0, 1, 2, 3]
    assert len(c.get_metric_history(store.train_run, "loss")) >= 2
    assert "train.reward_std" in run.data.metrics
    # the model's temperature and its own validation figures (after averaging and calibration)
    assert {"train.temperature", "train.final_val_loss", "train.averaged_epochs"} <= set(run.data.metrics)
    assert run.data.metrics["train.temperature"] > 0


def test_pairs_are_an_mlflow_dataset_with_their_digest(store):
    run = tracking.client(tracking.tracking_uri(store.config)).get_run(store.train_run)
    (ds,) = [d.dataset for d in run.inputs.dataset_inputs]
    assert ds.name == "pairs" and ds.digest == store.digest
    assert set(json.loads(ds.schema)["mlflow_colspec"][0]) >= {"name", "type"}
    assert run.data.tags["orchrm.data_digest"] == store.digest
    # the digest of the pair table, the one the trained model's manifest holds
    assert store.digest == pairs_digest(store.pairs) == store.good.manifest["data_hash"]


# --------------------------------------------------------------------------------------------
# register and promote


def test_a_good_first_candidate_becomes_champion(store):
    assert store.good_verdict.passed
    assert registry.champion_version(store.config) == store.good_version == 1
    info = registry.version_info(store.good_version, config=store.config)
    assert info["tags"]["verdict"] == "promoted"
    assert info["tags"]["gate.pairwise_accuracy"].startswith("pass: ")
    assert info["tags"]["data_digest"] == store.digest
    assert info["tags"]["git_commit"] == tracking.git_commit() != ""
    assert info["run_id"] == store.good_run


def test_a_weak_candidate_is_registered_but_neither_challenger_nor_champion(store):
    assert not store.weak_verdict.passed
    info = registry.version_info(store.weak_version, config=store.config)
    assert store.weak_version == 2
    # it failed an absolute gate: no shadow traffic for it, challenger stays on the good one
    assert "challenger" not in info["aliases"] and "champion" not in info["aliases"]
    assert registry.alias_version(store.config, "challenger") == store.good_version
    assert info["tags"]["verdict"] == "rejected"
    assert info["tags"]["gate.pairwise_accuracy"].startswith("fail: ")
    with pytest.raises(PromotionRejected, match=r"version 2 .* failed 1 gate\(s\): pairwise_accuracy: .*champion stays at version 1"):
        registry.promote(store.weak_version, config=store.config)
    assert registry.champion_version(store.config) == store.good_version


def test_promote_is_idempotent_and_reruns_on_an_existing_version(store):
    assert registry.promote(store.good_version, config=store.config)
    assert registry.promote(store.good_version, config=store.config)
    assert registry.champion_version(store.config) == store.good_version


def test_promoting_an_unknown_version_says_which(store):
    with pytest.raises(RegistryError, match="has no version 99"):
        registry.promote(99, config=store.config)


# --------------------------------------------------------------------------------------------
# load back


def test_the_champion_loads_by_alias_and_scores_exactly_as_the_trained_model(store):
    prompts = store.pairs["prompt"].tolist()[:16]
    actions = store.pairs["chosen"].tolist()[:16]
    expected = store.good.score(prompts, actions)
    for uri in ("models:/orchrm-reward@champion", f"models:/orchrm-reward/{store.good_version}", store.good_uri, str(store.good_file)):
        model = load_reward_model(uri, tracking_uri=tracking.tracking_uri(store.config))
        assert torch.equal(model.score(prompts, actions), expected), uri
    assert not torch.equal(load_reward_model(f"models:/orchrm-reward/{store.weak_version}", tracking_uri=tracking.tracking_uri(store.config)).score(prompts, actions), expected)


def test_pyfunc_predict_on_a_dataframe_equals_model_score(store):
    mlflow.set_tracking_uri(tracking.tracking_uri(store.config))
    pyfunc = mlflow.pyfunc.load_model("models:/orchrm-reward@champion")
    frame = pd.DataFrame({"prompt": store.pairs["prompt"][:12], "action": store.pairs["rejected"][:12]})
    out = pyfunc.predict(frame)
    assert list(out.columns) == ["reward"]
    expected = store.good.score(frame["prompt"].tolist(), frame["action"].tolist()).numpy()
    assert (out["reward"].to_numpy() == expected).all()
    # the signature's parameter `normalize` reaches BradleyTerryModel.score
    normalized = pyfunc.predict(frame, params={"normalize": True})["reward"].to_numpy()
    assert (normalized == store.good.score(frame["prompt"].tolist(), frame["action"].tolist(), normalize=True).numpy()).all()
    assert not (normalized == expected).all()


def test_the_pyfunc_carries_signature_example_and_requirements(store):
    from mlflow.models import Model

    mlflow.set_tracking_uri(tracking.tracking_uri(store.config))
    local = Path(mlflow.artifacts.download_artifacts("models:/orchrm-reward@champion"))
    meta = Model.load(local / "MLmodel")
    assert [c["name"] for c in meta.signature.inputs.to_dict()] == ["prompt", "action"]
    assert [c["name"] for c in meta.signature.outputs.to_dict()] == ["reward"]
    assert meta.signature.params.to_dict() == [{"name": "normalize", "type": "boolean", "default": False, "shape": None}]
    assert meta.saved_input_example_info is not None
    assert (local / "artifacts" / "model.safetensors").is_file()
    # logged from code: the class is the copied source file, no pickled instance
    assert meta.flavors["python_function"]["loader_module"] == "mlflow.pyfunc.loaders.code_model"
    assert (local / "pyfunc_model.py").is_file() and not any(local.rglob("*.pkl"))
    reqs = (local / "requirements.txt").read_text()
    # the lean set (tests/unit/test_extras.py checks the whole list): MLflow's client, not the server
    assert "torch==" in reqs and "mlflow-skinny==" in reqs and "mlflow==" not in reqs
    # orchrm is on no index: it travels as the model's code (tests/integration/test_serving.py loads it without orchrm installed)
    assert "orchrm" not in reqs
    assert meta.flavors["python_function"]["code"] == "code" and (local / "code" / "orchrm" / "model" / "reward_model.py").is_file()


def test_a_missing_alias_says_how_to_get_one(store):
    with pytest.raises(RegistryError, match=r"no version of 'orchrm-reward' has the alias 'nightly'.*orchrm promote --version N"):
        load_reward_model("models:/orchrm-reward@nightly", tracking_uri=tracking.tracking_uri(store.config))


def test_a_version_whose_files_are_gone_or_corrupt_says_what_to_do(store, tmp_path):
    # a third version of its own, so the other tests keep their files
    config = store.config
    run_id = tracking.start_run(config, "candidate-broken")
    file = store.good.save(tmp_path / "model.safetensors")
    uri = registry.log_model(file, run_id=run_id, config=config)
    version = registry.register_candidate(uri, run_id=run_id, verdict=store.good_verdict, data_digest=store.digest, config=config)
    mlflow.set_tracking_uri(tracking.tracking_uri(config))
    where = Path(mlflow.artifacts.download_artifacts(f"models:/orchrm-reward/{version}", dst_path=str(tmp_path / "dl")))
    stored = Path(tracking.client(tracking.tracking_uri(config)).get_logged_model(uri.removeprefix("models:/")).artifact_location.removeprefix("file://"))
    assert (stored / "artifacts" / "model.safetensors").is_file() and where.is_dir()

    (stored / "artifacts" / "model.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(ModelFileError, match=rf"models:/orchrm-reward/{version}: the registered model file is unusable.*re-log and register"):
        load_reward_model(f"models:/orchrm-reward/{version}", tracking_uri=tracking.tracking_uri(config))

    shutil.rmtree(stored)
    with pytest.raises(RegistryError, match=rf"models:/orchrm-reward/{version}: .*(gone|cannot be read).*"):
        load_reward_model(f"models:/orchrm-reward/{version}", tracking_uri=tracking.tracking_uri(config))


def test_an_unreachable_tracking_server_fails_after_bounded_retries():
    uri = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RegistryError, match=r"tracking server at http://127\.0\.0\.1:\d+ is unreachable .* after 4 attempts: start it"):
        load_reward_model("models:/orchrm-reward@champion", tracking_uri=uri)


def test_loading_imports_neither_the_sandbox_nor_the_task_suites(store):
    code = (
        "import sys; from orchrm import load_reward_model; "
        f"m = load_reward_model({str(store.good_file)!r}); m.score('q', ['a']); "
        f"m = load_reward_model('models:/orchrm-reward@champion', tracking_uri={tracking.tracking_uri(store.config)!r}); "
        "bad = sorted(k for k in sys.modules if k.startswith(('orchrm.execution.sandbox.', 'orchrm.execution.tasks')) and k != 'orchrm.execution.sandbox.config'); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


# --------------------------------------------------------------------------------------------
# the CLI


def cli_config(store: Store, tmp_path: Path) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(f"data_dir: {store.config.data_dir}\n")
    return str(path)


def test_cli_promote_rechecks_and_is_idempotent(store, tmp_path, capsys):
    from orchrm.cli import main

    config = cli_config(store, tmp_path)
    assert main(["promote", "--version", str(store.good_version), "--config", config]) == 0
    assert "verdict: promoted" in capsys.readouterr().out
    assert main(["promote", "--version", str(store.weak_version), "--config", config]) == 1
    captured = capsys.readouterr()
    assert "verdict: rejected" in captured.out and "champion stays at version 1" in captured.err
    assert registry.champion_version(store.config) == store.good_version


def test_cli_rank_prints_the_candidates_best_first(store, tmp_path, capsys):
    from orchrm.cli import main

    question = "Mia has 12 apples and buys 30 more. How many apples does Mia have now?"
    args = ["rank", "--model", "models:/orchrm-reward@champion", "--domain", "math", "--question", question, "--n", "4",
            "--config", cli_config(store, tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    scores = [float(line.split("reward ")[1]) for line in out.splitlines() if line.startswith("#")]
    assert len(scores) == 4 and scores == sorted(scores, reverse=True)
    # with a cost weight: scored by normalised reward - weight x cost, best first
    assert main([*args, "--cost-weight", "0.05"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("#")]
    weighed = [float(line.split("score ")[1].split()[0]) for line in lines]
    assert len(weighed) == 4 and weighed == sorted(weighed, reverse=True)
    assert all("normalised reward - 0.05 x cost" in line for line in lines)
    with pytest.raises(SystemExit):
        main([*args, "--cost-weight", "-1"])


# --------------------------------------------------------------------------------------------
# promote re-checks the gates from the run


def gate_metrics(*, rm: float, random: float = 0.5, cost_only: float = 0.55) -> dict[str, float]:
    """The flat metrics check_gates reads (what log_evaluation stores for a candidate)."""
    return {"pairwise_accuracy": 0.8, "best_of_8.reward_model": rm, "best_of_8.random": random,
            "best_of_8.cost_only": cost_only, "scoring_latency_ms_p50": 10.0}


def log_evaluated(config: PipelineConfig, run_id: str, metrics: dict, *, champion: dict | None = None,
                  champion_version: int | None = None) -> None:
    """Store ``metrics`` (and the champion's, with the version evaluated against) in ``run_id``,
    as log_evaluation writes them."""
    uri = tracking.tracking_uri(config)
    tracking.log_batch(uri, run_id, metrics=tracking.as_metrics(metrics), what="test")
    if champion:
        tracking.log_batch(uri, run_id, metrics=tracking.as_metrics(champion, prefix=tracking.CHAMPION_PREFIX), what="test")
    if champion_version is not None:
        tracking.client(uri).set_tag(run_id, tracking.CHAMPION_EVALUATED_TAG, str(champion_version))


def candidate_with_metrics(store: Store, tmp_path: Path, metrics: dict, *, champion: dict | None = None,
                           champion_version: int | None = None) -> int:
    """A version whose run holds ``metrics`` (and the champion's, as log_evaluation writes them),
    registered with a verdict that passed."""
    config = store.config
    run_id = tracking.start_run(config, "candidate-regate")
    log_evaluated(config, run_id, metrics, champion=champion, champion_version=champion_version)
    model_uri = registry.log_model(store.good.save(tmp_path / "model.safetensors"), run_id=run_id, config=config)
    return registry.register_candidate(model_uri, run_id=run_id, verdict=store.good_verdict, data_digest=store.digest, config=config)


def test_promote_rechecks_the_gates_from_the_metrics_stored_in_the_run(store, tmp_path):
    # registered with a passing verdict, but its run says best-of-8 gains nothing over a random plan
    version = candidate_with_metrics(store, tmp_path, gate_metrics(rm=0.5), champion=gate_metrics(rm=0.45),
                                     champion_version=store.good_version)
    with pytest.raises(PromotionRejected, match=rf"version {version} .*best_of_n_gain: .*champion stays at version 1"):
        registry.promote(version, config=store.config)
    tags = registry.version_info(version, config=store.config)["tags"]
    assert tags["verdict"] == "rejected" and tags["gate.best_of_n_gain"].startswith("fail: ")
    assert registry.champion_version(store.config) == store.good_version


def test_promote_refuses_a_candidate_compared_with_a_champion_that_has_since_changed(store, tmp_path):
    # it beat "no champion" when evaluated; the champion is v1 now, which it never met
    version = candidate_with_metrics(store, tmp_path, gate_metrics(rm=0.9))
    with pytest.raises(PromotionRejected, match=r"beats_champion: the champion is now v1 but this candidate was evaluated against no champion"):
        registry.promote(version, config=store.config)
    assert registry.champion_version(store.config) == store.good_version
