"""Promotion that cannot go wrong (issue 25 §3), on a real SQLite MLflow store per test.

Each test builds its own small registry: versions of one untrained tiny model whose runs hold the
evaluation metrics the gates read (as :func:`orchrm.ops.tracking.log_evaluation` stores them), so
what is checked is the registry's bookkeeping: aliases, tags, refusals.
"""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest

from orchrm.config import PipelineConfig
from orchrm.errors import PromotionRejected, RegistryError
from orchrm.evaluation.gates import GateResult, Verdict, check_gates
from orchrm.ops import registry, stages, tracking

pytestmark = pytest.mark.integration

TINY = dict(hidden_dim=32, num_layers=2, num_heads=2, max_length=96, vocab_size=300, dropout=0.0)
PROMPT = "Who founded Avalon?"
ACTIONS = ['<agent id="a1" type="CoT" model="small"/>', '<agent id="a1" type="SelfConsistency" model="small" k="5"/>']


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    from orchrm.model.reward_model import BradleyTerryModel

    model = BradleyTerryModel(**TINY)
    model.fit_tokenizer([PROMPT, *ACTIONS] * 4)
    return model.save(tmp_path_factory.mktemp("model") / "model.safetensors")


@pytest.fixture
def config(tmp_path, monkeypatch) -> PipelineConfig:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    before = mlflow.get_tracking_uri()
    config = PipelineConfig(data_dir=str(tmp_path / "data"))
    tracking.configure(config)
    yield config
    mlflow.set_tracking_uri(before)


def metrics(*, rm: float, accuracy: float = 0.8, random: float = 0.5, cost_only: float = 0.55) -> dict[str, float]:
    """The flat metrics check_gates reads (what log_evaluation stores for a candidate)."""
    return {"pairwise_accuracy": accuracy, "best_of_8.reward_model": rm, "best_of_8.random": random,
            "best_of_8.cost_only": cost_only, "scoring_latency_ms_p50": 10.0}


def paired(values: dict[str, float], champion: dict[str, float], *, half_width: float = 0.02) -> dict[str, float]:
    """The paired difference evaluate() adds beside a champion: best-of-8 candidate minus champion,
    with an interval of ``half_width`` either side (40 tasks, 1000 resamples)."""
    key, mean = "champion_delta.best_of_8", values["best_of_8.reward_model"] - champion["best_of_8.reward_model"]
    return {key: mean, f"{key}.ci_low": mean - half_width, f"{key}.ci_high": mean + half_width, f"{key}.tasks": 40.0,
            f"{key}.resamples": 1000.0}


def candidate(config: PipelineConfig, model_file: Path, values: dict[str, float], *, champion: dict[str, float] | None = None,
              half_width: float = 0.02) -> int:
    """Register a version whose run holds ``values``, evaluated against the current champion
    (whose metrics on the same pool are ``champion``; the paired difference is added to
    ``values``), with the verdict the gates give."""
    uri = tracking.tracking_uri(config)
    run_id = tracking.start_run(config, "candidate")
    against = registry.champion_version(config)
    if against is not None:
        assert champion is not None, "a candidate evaluated against a champion has the champion's metrics"
        values = values | paired(values, champion, half_width=half_width)
    tracking.log_batch(uri, run_id, metrics=tracking.as_metrics(values), what="test")
    if against is not None:
        tracking.log_batch(uri, run_id, metrics=tracking.as_metrics(champion, prefix=tracking.CHAMPION_PREFIX), what="test")
        tracking.client(uri).set_tag(run_id, tracking.CHAMPION_EVALUATED_TAG, str(against))
    verdict = check_gates(values, config.evaluate.gates, champion=champion if against is not None else None)
    model_uri = registry.log_model(model_file, run_id=run_id, config=config)
    return registry.register_candidate(model_uri, run_id=run_id, verdict=verdict, data_digest="test", config=config)


def aliases(config: PipelineConfig) -> dict[str, int]:
    c = tracking.client(tracking.tracking_uri(config))
    return {alias: int(v) for alias, v in c.get_registered_model(config.registry.model_name).aliases.items()}


def two_champions(config: PipelineConfig, model_file: Path) -> tuple[int, int]:
    """v1 promoted, then v2 (which beat it) promoted over it."""
    first = candidate(config, model_file, metrics(rm=0.7))
    registry.promote(first, config=config)
    second = candidate(config, model_file, metrics(rm=0.8), champion=metrics(rm=0.7))
    registry.promote(second, config=config)
    return first, second


# --------------------------------------------------------------------------------------------
# previous and rollback


def test_promotion_keeps_the_replaced_champion_as_previous(config, model_file):
    first = candidate(config, model_file, metrics(rm=0.7))
    registry.promote(first, config=config)
    assert "previous" not in aliases(config)  # the first champion replaced none
    second = candidate(config, model_file, metrics(rm=0.8), champion=metrics(rm=0.7))
    registry.promote(second, config=config)
    assert aliases(config)["champion"] == second and aliases(config)["previous"] == first
    registry.promote(second, config=config)  # a rerun on the champion moves nothing
    assert aliases(config)["previous"] == first


def test_rollback_restores_the_previous_champion_and_records_who_why_when(config, model_file):
    first, second = two_champions(config, model_file)
    done = registry.rollback(config, reason="complaints about v2 answers", who="oncall")
    assert (done.restored, done.demoted, done.who) == (first, second, "oncall")
    assert registry.champion_version(config) == first
    assert "previous" not in aliases(config)
    for version, role in ((first, "restored"), (second, "demoted")):
        tags = registry.version_info(version, config=config)["tags"]
        assert tags["rollback.role"] == role
        assert tags["rollback.reason"] == "complaints about v2 answers" and tags["rollback.by"] == "oncall"
        assert tags["rollback.at"] == done.at and done.at.endswith("+00:00")
        assert (tags["rollback.from"], tags["rollback.to"]) == (str(second), str(first))


def test_a_second_rollback_does_not_bring_back_the_demoted_model(config, model_file):
    two_champions(config, model_file)
    registry.rollback(config, reason="bad answers")
    with pytest.raises(RegistryError, match=r"no previous champion \(alias 'previous'\) to roll back to: .*orchrm promote --version N"):
        registry.rollback(config, reason="again")


def test_rollback_without_a_previous_champion_says_so_and_moves_nothing(config, model_file):
    with pytest.raises(RegistryError, match="has no champion to roll back"):
        registry.rollback(config, reason="nothing yet")
    first = candidate(config, model_file, metrics(rm=0.7))
    registry.promote(first, config=config)
    with pytest.raises(RegistryError, match=rf"no previous champion .*version {first} was the first champion"):
        registry.rollback(config, reason="only one")
    assert registry.champion_version(config) == first


def test_rollback_needs_a_reason(config, model_file):
    two_champions(config, model_file)
    with pytest.raises(RegistryError, match="needs a reason"):
        registry.rollback(config, reason="  ")


def test_cli_rollback(config, model_file, tmp_path, capsys):
    from orchrm.cli import main

    first, second = two_champions(config, model_file)
    path = tmp_path / "config.yaml"
    path.write_text(f"data_dir: {config.data_dir}\n")
    assert main(["rollback", "--reason", "latency spike", "--who", "ana", "--config", str(path)]) == 0
    assert f"rolled back from version {second} to version {first}" in capsys.readouterr().out
    assert main(["rollback", "--reason", "again", "--config", str(path)]) == 2
    assert "no previous champion" in capsys.readouterr().err
    assert registry.champion_version(config) == first


# --------------------------------------------------------------------------------------------
# challenger


def test_a_candidate_failing_an_absolute_gate_never_becomes_challenger(config, model_file):
    good = candidate(config, model_file, metrics(rm=0.7))
    assert aliases(config) == {"challenger": good}
    # best-of-8 gains nothing over a random plan: best_of_n_gain fails
    weak = candidate(config, model_file, metrics(rm=0.5))
    assert registry.version_info(weak, config=config)["tags"]["gate.best_of_n_gain"].startswith("fail: ")
    assert aliases(config) == {"challenger": good}
    slow = candidate(config, model_file, {**metrics(rm=0.7), "scoring_latency_ms_p50": 1e6})
    assert registry.version_info(slow, config=config)["tags"]["gate.scoring_latency"].startswith("fail: ")
    assert aliases(config) == {"challenger": good}


def test_a_candidate_failing_only_beats_champion_is_challenger_not_champion(config, model_file):
    first = candidate(config, model_file, metrics(rm=0.7))
    registry.promote(first, config=config)
    close = candidate(config, model_file, metrics(rm=0.68), champion=metrics(rm=0.7))
    tags = registry.version_info(close, config=config)["tags"]
    assert tags["verdict"] == "rejected" and tags["gate.beats_champion"].startswith("fail: ")
    assert [k for k, v in tags.items() if k.startswith("gate.") and v.startswith("fail: ")] == ["gate.beats_champion"]
    assert aliases(config) == {"champion": first, "challenger": close}


def test_passed_absolute_gates_ignores_only_the_champion_comparison():
    from orchrm.config import GatesConfig

    gates = GatesConfig()
    assert registry.passed_absolute_gates(check_gates(metrics(rm=0.68), gates, champion=metrics(rm=0.7)))
    assert not registry.passed_absolute_gates(check_gates(metrics(rm=0.68, accuracy=0.5), gates, champion=metrics(rm=0.5)))
    assert not registry.passed_absolute_gates(check_gates({}, gates))


# --------------------------------------------------------------------------------------------
# promote re-checks against the recorded gates


def with_gates(config: PipelineConfig, **gates) -> PipelineConfig:
    """``config`` with other gate settings, same store."""
    return PipelineConfig.model_validate({"data_dir": config.data_dir, "evaluate": {"gates": gates}})


def test_the_gate_settings_are_recorded_at_registration(config, model_file):
    strict = with_gates(config, min_pairwise_accuracy=0.7)
    version = candidate(strict, model_file, metrics(rm=0.7))
    assert registry.recorded_gates(version, config=config).min_pairwise_accuracy == 0.7


def test_promote_refuses_gates_looser_than_recorded_without_a_reason(config, model_file):
    # registered under the defaults (0.6), where 0.55 fails; a config at 0.5 would let it through
    version = candidate(config, model_file, metrics(rm=0.7, accuracy=0.55))
    loose = with_gates(config, min_pairwise_accuracy=0.5, beat_cost_only=False)
    with pytest.raises(PromotionRejected, match=rf"version {version} .*looser than those recorded at its registration "
                       r"\(min_pairwise_accuracy 0\.6 -> 0\.5; beat_cost_only True -> False\).*--override-gates REASON"):
        registry.promote(version, config=loose)
    assert registry.champion_version(config) is None
    # under the recorded settings the stored metrics still fail
    with pytest.raises(PromotionRejected, match=r"failed 1 gate\(s\): pairwise_accuracy: held-out pairwise accuracy 0\.550 < 0\.600"):
        registry.promote(version, config=config)
    assert registry.champion_version(config) is None


def test_override_gates_promotes_under_the_looser_settings_and_records_the_reason(config, model_file):
    version = candidate(config, model_file, metrics(rm=0.7, accuracy=0.55))
    loose = with_gates(config, min_pairwise_accuracy=0.5)
    check = registry.promote(version, config=loose, override_gates="desk labels are noisy this week", who="ana")
    assert check.verdict.passed and check.loosened == ("min_pairwise_accuracy 0.6 -> 0.5",)
    assert registry.champion_version(config) == version
    tags = registry.version_info(version, config=config)["tags"]
    assert tags["gates_override.reason"] == "desk labels are noisy this week" and tags["gates_override.by"] == "ana"
    assert tags["gates_override.settings"] == "min_pairwise_accuracy 0.6 -> 0.5" and tags["gates_override.at"]
    assert tags["verdict"] == "promoted"


def test_tighter_gates_need_no_reason_and_are_the_ones_checked(config, model_file):
    version = candidate(config, model_file, metrics(rm=0.7, accuracy=0.65))
    with pytest.raises(PromotionRejected, match=r"pairwise_accuracy: held-out pairwise accuracy 0\.650 < 0\.700"):
        registry.promote(version, config=with_gates(config, min_pairwise_accuracy=0.7))
    registry.promote(version, config=config)
    assert registry.champion_version(config) == version


def test_promote_requires_every_configured_gate(config, model_file):
    # a version whose run holds no evaluation metrics and whose stored verdict has one gate
    run_id = tracking.start_run(config, "candidate-unevaluated")
    verdict = Verdict((GateResult("pairwise_accuracy", True, 0.9, 0.6, "held-out pairwise accuracy 0.900 >= 0.600"),))
    uri = registry.log_model(model_file, run_id=run_id, config=config)
    version = registry.register_candidate(uri, run_id=run_id, verdict=verdict, data_digest="test", config=config)
    with pytest.raises(PromotionRejected, match=rf"version {version} .*no result for gate\(s\) best_of_n_gain, beats_cost_only, "
                       r"beats_champion, scoring_latency.*evaluate it with every configured gate"):
        registry.promote(version, config=config)
    assert registry.champion_version(config) is None


def test_promote_refuses_a_version_without_recorded_gate_settings(config, model_file):
    version = candidate(config, model_file, metrics(rm=0.7))
    tracking.client(tracking.tracking_uri(config)).delete_model_version_tag(config.registry.model_name, str(version), registry.GATES_TAG)
    with pytest.raises(PromotionRejected, match=rf"version {version} .*carries no recorded gate settings \(gates_json\).*register it again"):
        registry.promote(version, config=config)


def test_promote_refuses_when_the_champion_moved_since_the_evaluation(config, model_file):
    first = candidate(config, model_file, metrics(rm=0.7))
    registry.promote(first, config=config)
    late = candidate(config, model_file, metrics(rm=0.8), champion=metrics(rm=0.7))  # evaluated against v1
    second = candidate(config, model_file, metrics(rm=0.9), champion=metrics(rm=0.7))
    registry.promote(second, config=config)
    with pytest.raises(PromotionRejected, match=rf"beats_champion: the champion is now v{second} but this candidate was evaluated "
                       rf"against v{first}: re-evaluate it against v{second}.*champion stays at version {second}"):
        registry.promote(late, config=config)
    assert registry.champion_version(config) == second


def test_promote_regates_beats_champion_from_the_paired_interval_stored_in_the_run(config, model_file):
    first = candidate(config, model_file, metrics(rm=0.7))
    registry.promote(first, config=config)
    # a higher mean (0.72 vs 0.70) whose paired interval [-0.03, +0.07] straddles 0
    unsure = candidate(config, model_file, metrics(rm=0.72), champion=metrics(rm=0.7), half_width=0.05)
    with pytest.raises(PromotionRejected, match=r"beats_champion: candidate - champion, realised quality of the best-of-8 pick .*"
                       rf"mean \+0\.020 \[-0\.030, \+0\.070\].*lower bound -0\.030 <= margin 0\.000 \(champion stays at version {first}\)"):
        registry.promote(unsure, config=config)
    assert registry.champion_version(config) == first
    assert registry.version_info(unsure, config=config)["tags"]["gate.beats_champion"].startswith("fail: candidate - champion")


def test_the_pipeline_promote_stage_rechecks_like_orchrm_promote(config, model_file):
    # the stage is handed a verdict that passed; the metrics stored in the run say otherwise
    version = candidate(config, model_file, metrics(rm=0.5))
    passed = Verdict((GateResult("pairwise_accuracy", True, 0.9, 0.6, "set by the test"),))
    registered = stages.Registered(version=version, model_uri=f"models:/{config.registry.model_name}/{version}", verdict=passed)
    with pytest.raises(PromotionRejected, match=rf"version {version} .*best_of_n_gain: .*there is still no champion"):
        stages.promote_stage(registered, config=config)
    assert registry.champion_version(config) is None


def test_cli_promote_override_gates(config, model_file, tmp_path, capsys):
    from orchrm.cli import main

    version = candidate(config, model_file, metrics(rm=0.7, accuracy=0.55))
    path = tmp_path / "loose.yaml"
    path.write_text(f"data_dir: {config.data_dir}\nevaluate:\n  gates:\n    min_pairwise_accuracy: 0.5\n")
    assert main(["promote", "--version", str(version), "--config", str(path)]) == 1
    assert "--override-gates REASON" in capsys.readouterr().err
    assert main(["promote", "--version", str(version), "--config", str(path), "--override-gates", "noisy labels"]) == 0
    out = capsys.readouterr().out
    assert "verdict: promoted" in out and "gates loosened (min_pairwise_accuracy 0.6 -> 0.5): noisy labels" in out
    assert registry.champion_version(config) == version


# --------------------------------------------------------------------------------------------
# registration is idempotent


def versions_of(config: PipelineConfig) -> list[int]:
    c = tracking.client(tracking.tracking_uri(config))
    return sorted(int(mv.version) for mv in c.search_model_versions(f"name='{config.registry.model_name}'"))


def test_registering_the_same_run_twice_returns_the_first_version(config, model_file):
    uri = tracking.tracking_uri(config)
    run_id = tracking.start_run(config, "candidate")
    tracking.log_batch(uri, run_id, metrics=tracking.as_metrics(metrics(rm=0.7)), what="test")
    verdict = check_gates(metrics(rm=0.7), config.evaluate.gates)
    model_uri = registry.log_model(model_file, run_id=run_id, config=config)
    first = registry.register_candidate(model_uri, run_id=run_id, verdict=verdict, data_digest="test", config=config)
    again = registry.register_candidate(model_uri, run_id=run_id, verdict=verdict, data_digest="test", config=config)
    assert first == again == 1 and versions_of(config) == [1]
    assert registry.version_for_run(run_id, config=config) == 1
    assert aliases(config) == {"challenger": 1}


def test_a_duplicate_made_by_a_retried_request_is_removed(config, model_file):
    # what a POST retried by MLflow's HTTP client after a lost answer leaves: two versions of one run
    run_id = tracking.start_run(config, "candidate")
    model_uri = registry.log_model(model_file, run_id=run_id, config=config)
    verdict = check_gates(metrics(rm=0.7), config.evaluate.gates)
    first = registry.register_candidate(model_uri, run_id=run_id, verdict=verdict, data_digest="test", config=config)
    tracking.client(tracking.tracking_uri(config)).create_model_version(config.registry.model_name, source=model_uri, run_id=run_id)
    assert versions_of(config) == [first, first + 1]
    assert registry.register_candidate(model_uri, run_id=run_id, verdict=verdict, data_digest="test", config=config) == first
    assert versions_of(config) == [first]


def test_the_register_stage_registers_the_train_runs_model_under_the_evaluate_run_once(config, model_file, tmp_path):
    """The model is logged from the training run (its params on the LoggedModel); the version is
    registered from the evaluation run, whose metrics promotion re-checks; a retried stage returns
    the first version and logs no second model."""
    uri = tracking.tracking_uri(config)
    train_run = tracking.start_run(config, "train")
    tracking.log_batch(uri, train_run, params=tracking.as_params({"train": {"lr": 0.003, "epochs": 2}}), what="test")
    model_uri = registry.log_model(model_file, run_id=train_run, config=config, params=tracking.run_params(uri, train_run))
    eval_run = tracking.start_run(config, "evaluate")
    tracking.log_batch(uri, eval_run, metrics=tracking.as_metrics(metrics(rm=0.7)), what="test")
    model = stages.TrainedModel(model_dir=model_file.parent, model_path=model_file, run_id=train_run, epochs=1, best_val_loss=None,
                                train_seconds=0.0, model_uri=model_uri)
    evaluation = stages.Evaluation(run_id=eval_run, report_dir=tmp_path, metrics=metrics(rm=0.7), champion_metrics=None,
                                   champion_version=None, markdown="", summary="")
    pairs = stages.Pairs(path=tmp_path / "pairs.parquet", rows=0, splits={}, digest="test", run_id=eval_run)
    verdict = check_gates(metrics(rm=0.7), config.evaluate.gates)
    first = stages.register_stage(model, evaluation, verdict, pairs, config=config)
    again = stages.register_stage(model, evaluation, verdict, pairs, config=config)
    assert (again.version, again.model_uri) == (first.version, model_uri) and versions_of(config) == [first.version]
    info = registry.version_info(first.version, config=config)
    assert info["run_id"] == eval_run and info["source"] == model_uri
    assert registry.version_model_id(first.version, config=config) == model.model_id
    c = tracking.client(uri)
    (logged,) = c.search_logged_models(experiment_ids=[c.get_run(eval_run).info.experiment_id])
    assert logged.source_run_id == train_run and logged.params == {"train.lr": "0.003", "train.epochs": "2"}
    stages.promote_stage(first, config=config)  # the gates re-checked from the evaluate run's metrics
    assert registry.champion_version(config) == first.version


def test_a_register_stage_given_a_model_without_its_uri_logs_it_from_its_training_run(config, model_file, tmp_path):
    """A TrainedModel persisted before models were logged at training (no model_uri) still registers."""
    uri = tracking.tracking_uri(config)
    train_run, eval_run = tracking.start_run(config, "train"), tracking.start_run(config, "evaluate")
    tracking.log_batch(uri, eval_run, metrics=tracking.as_metrics(metrics(rm=0.7)), what="test")
    model = stages.TrainedModel(model_dir=model_file.parent, model_path=model_file, run_id=train_run, epochs=1, best_val_loss=None,
                                train_seconds=0.0)
    assert model.model_uri == "" and model.model_id is None
    evaluation = stages.Evaluation(run_id=eval_run, report_dir=tmp_path, metrics=metrics(rm=0.7), champion_metrics=None,
                                   champion_version=None, markdown="", summary="")
    pairs = stages.Pairs(path=tmp_path / "pairs.parquet", rows=0, splits={}, digest="test", run_id=eval_run)
    verdict = check_gates(metrics(rm=0.7), config.evaluate.gates)
    registered = stages.register_stage(model, evaluation, verdict, pairs, config=config)
    c = tracking.client(uri)
    (logged,) = c.search_logged_models(experiment_ids=[c.get_run(eval_run).info.experiment_id])
    assert logged.source_run_id == train_run and registered.model_uri == f"models:/{logged.model_id}"
    assert registry.version_info(registered.version, config=config)["run_id"] == eval_run
