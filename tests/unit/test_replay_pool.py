"""The replay pool: a user's own held-out tasks, from their ingested traces, as a CandidatePool."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from orchrm.config import EvaluateConfig, GatesConfig, PairsConfig, config_from_dict
from orchrm.data.ingest import ingest_traces
from orchrm.data.splits import assign_split
from orchrm.evaluation.gates import check_gates
from orchrm.evaluation.harness import evaluate, read_pool
from orchrm.evaluation.pool import POOL_COLUMNS, CandidatePool, build_replay_pool
from orchrm.execution.support_desk import make_traces

PLAN_A = '<agent id="a1" type="CoT" model="small" role="first"/>'
PLAN_B = '<agent id="a1" type="CoT" model="large" role="second"/>'
PLAN_C = '<agent id="a1" type="Reflexion" model="large" iterations="2" role="third"/>'


def ids_in(split: str, count: int) -> list[str]:
    """``count`` task ids that :func:`assign_split` puts in ``split`` at the default fractions."""
    candidates = [f"task-{i}" for i in range(400)]
    labels = assign_split(candidates, PairsConfig().val_fraction, PairsConfig().test_fraction)
    return [t for t, s in zip(candidates, labels, strict=True) if s == split][:count]


def trace_rows(task_id: str, runs: dict[str, list[float]], *, answers: dict[str, list[str]] | None = None) -> list[dict]:
    """One row per run of each plan (plan text -> the runs' qualities), answers where given."""
    rows = []
    for plan, qualities in runs.items():
        for r, q in enumerate(qualities):
            row = {"task_id": task_id, "question": f"question of {task_id}", "plan_text": plan, "run_id": f"run-{r}",
                   "content": f"output {r}", "quality": q}
            if answers is not None:
                row["answer"] = answers[plan][r]
            rows.append(row)
    return rows


@pytest.fixture(scope="module")
def tasks() -> dict[str, str]:
    (test_a, test_b, test_single), (train,), (val,) = ids_in("test", 3), ids_in("train", 1), ids_in("val", 1)
    return {"test_a": test_a, "test_b": test_b, "test_single": test_single, "train": train, "val": val}


@pytest.fixture(scope="module")
def artifacts(tasks) -> pd.DataFrame:
    rows = (
        trace_rows(tasks["test_a"], {PLAN_A: [1.0, 0.0, 1.0], PLAN_B: [0.0, 0.5], PLAN_C: [0.25]})
        + trace_rows(tasks["test_b"], {PLAN_A: [0.0, 0.0], PLAN_B: [1.0, 1.0]})
        + trace_rows(tasks["test_single"], {PLAN_A: [1.0, 0.0]})
        + trace_rows(tasks["train"], {PLAN_A: [1.0], PLAN_B: [0.0]})
        + trace_rows(tasks["val"], {PLAN_A: [1.0], PLAN_B: [0.0]})
    )
    return ingest_traces(pd.DataFrame(rows))


def config(**evaluate):
    return config_from_dict({"evaluate": {"candidates": 4, "best_of": [1, 2], "pool_seeds": [0, 1, 2], "bootstrap": 20,
                                          "gates": {"best_of": 2}} | evaluate})


def test_only_held_out_tasks_with_two_plans_enter_the_pool(artifacts, tasks):
    pool = build_replay_pool(artifacts, config(), source="night-1.parquet")
    assert set(pool.frame.task_id) == {tasks["test_a"], tasks["test_b"]}  # no train / val task, no single-plan task
    split = assign_split(pool.frame.task_id, PairsConfig().val_fraction, PairsConfig().test_fraction)
    assert set(split) == {"test"}
    assert pool.meta | {"pool_seeds": None} == {
        "kind": "replay", "source": "night-1.parquet", "seed": 2026, "pool_seeds": None, "repeats": 0, "tasks": 2,
        "held_out_tasks": 3, "single_plan_tasks": 1, "candidates": 2, "max_plans": 3}
    assert pool.candidates == 2 and pool.tasks == 2
    # every pool seed lists every plan of a task (at most evaluate.candidates), in its own order
    a = pool.frame[pool.frame.task_id == tasks["test_a"]]
    assert a.groupby("pool_seed").plan_text.apply(sorted).map(tuple).nunique() == 1
    assert sorted(a[a.pool_seed == 0].plan_text) == sorted([PLAN_A, PLAN_B, PLAN_C])
    assert list(a[a.pool_seed == 0].candidate) == [0, 1, 2]


def test_the_expected_quality_is_the_mean_of_the_logged_runs_and_the_realised_one_a_run(artifacts, tasks):
    frame = build_replay_pool(artifacts, config()).frame
    a = frame[frame.task_id == tasks["test_a"]]
    by_plan = a.groupby("plan_text")
    assert by_plan.expected_quality.first().to_dict() == pytest.approx({PLAN_A: 2 / 3, PLAN_B: 0.25, PLAN_C: 0.25})
    runs = {PLAN_A: {1.0, 0.0}, PLAN_B: {0.0, 0.5}, PLAN_C: {0.25}}
    for plan, realised in by_plan.quality.agg(set).items():
        assert realised <= runs[plan]  # each pool seed drew one of the plan's logged runs
    # the logged tokens (ingest counts them from the texts) and cost, per execution
    logged = artifacts[artifacts.task_id == tasks["test_a"]]
    costs = set((logged.prompt_tokens + logged.completion_tokens).astype(int))
    assert set(a.tokens) <= costs and (a.expected_cost > 0).all()
    assert a.confidence.isna().all() and a.answer.isna().all()  # not logged: not faked


def test_the_same_table_and_config_give_the_same_pool_and_pool_seeds_draw_differently(artifacts):
    one, two = build_replay_pool(artifacts, config()), build_replay_pool(artifacts, config())
    pd.testing.assert_frame_equal(one.frame, two.frame)
    desk = build_replay_pool(ingest_traces(make_traces(48, seed=5)), config(candidates=6))
    seeds = desk.frame.pivot_table(index=["task_id", "plan_text"], columns="pool_seed", values="quality")
    assert (seeds.nunique(axis=1) > 1).any(), "every pool seed drew the same run of every plan"
    orders = desk.frame.groupby(["task_id", "pool_seed"]).plan_text.apply(tuple).unstack()
    assert (orders.nunique(axis=1) > 1).any(), "every pool seed lists the candidates in one order"


def test_a_task_with_more_plans_than_candidates_keeps_a_seeded_subset(artifacts, tasks):
    frame = build_replay_pool(artifacts, config(candidates=2, best_of=[1, 2])).frame
    a = frame[frame.task_id == tasks["test_a"]]
    assert a.groupby("pool_seed").size().eq(2).all()


def test_the_pool_round_trips_through_save_and_load(artifacts, tmp_path):
    pool = build_replay_pool(artifacts, config(), source="traces/night-1.parquet")
    again = CandidatePool.load(pool.save(tmp_path / "pool.parquet"))
    assert again.meta == pool.meta
    assert list(again.frame.columns) == list(POOL_COLUMNS)
    pd.testing.assert_frame_equal(again.frame, pool.frame, check_dtype=False)


class PlanScorer:
    """A scorer that prefers ``best`` wherever it is a candidate (and reads no question)."""

    def __init__(self, best: str) -> None:
        self.best = best

    def score(self, prompts, actions):
        return np.array([1.0 if a == self.best else 0.0 for a in actions])


def test_best_of_n_runs_on_the_replay_pool_without_the_selectors_the_traces_do_not_support(artifacts, tasks):
    cfg = config(best_of=[1, 2, 4], gates={"best_of": 4}).evaluate
    pool = build_replay_pool(artifacts, config(best_of=[1, 2, 4], gates={"best_of": 4}))
    reading = read_pool(cfg, pool)
    assert reading.kind == "replay" and reading.ns == (1, 2) and reading.gates_n == 2
    assert set(reading.unavailable) == {"trajectory", "majority_vote", "weighted_vote"}
    report = evaluate(PlanScorer(PLAN_B), pairs=pd.DataFrame(columns=["split"]), pool=pool, config=cfg)
    table = report.tables["best_of_n"]
    assert set(table.N) == {1, 2}
    assert not {"trajectory", "majority_vote", "weighted_vote"} & set(table.selector)
    assert {"reward_model", "random", "cost_only", "length_only", "oracle", "expected_oracle"} <= set(table.selector)
    # PLAN_B is the best plan of test_b (expected 1.0) and worse than PLAN_A on test_a; at N = 2
    # the reward model picks it wherever it is among the first two candidates
    assert report.metrics["pool_candidates"] == 2 and report.metrics["pool_tasks"] == 2
    assert math.isfinite(report.metrics["expected.best_of_2.reward_model"])
    markdown = report.to_markdown()
    assert "Pool: replay of 2 held-out task(s)" in markdown
    assert "best-of-N for N = [4] left out: the smallest held-out task has 2 distinct plans" in markdown
    assert "trajectory not available: the traces log no confidence" in markdown
    assert "the gates read best-of-2 (gates.best_of = 4" in markdown
    verdict = check_gates(report.metrics, GatesConfig(best_of=4, min_pairwise_accuracy=0.0))
    gain = next(g for g in verdict.gates if g.name == "best_of_n_gain")
    assert gain.applicable and gain.detail.startswith("expected.best_of_2.reward_model")


def test_votes_work_where_the_traces_log_answers(tasks):
    answers = {PLAN_A: ["42", "41"], PLAN_B: ["42", "42"]}
    rows = trace_rows(tasks["test_a"], {PLAN_A: [1.0, 0.0], PLAN_B: [1.0, 1.0]}, answers=answers)
    pool = build_replay_pool(ingest_traces(pd.DataFrame(rows)), config())
    assert set(pool.frame.answer_key) <= {"42", "41"}
    reading = read_pool(config().evaluate, pool)
    assert set(reading.unavailable) == {"trajectory"}
    report = evaluate(PlanScorer(PLAN_A), pairs=pd.DataFrame(columns=["split"]), pool=pool, config=config().evaluate)
    assert {"majority_vote", "weighted_vote"} <= set(report.tables["best_of_n"].selector)


def test_held_out_tasks_with_one_plan_each_give_an_empty_pool_and_pairwise_gates_only(tasks):
    rows = trace_rows(tasks["test_a"], {PLAN_A: [1.0, 0.0]}) + trace_rows(tasks["train"], {PLAN_A: [1.0], PLAN_B: [0.0]})
    pool = build_replay_pool(ingest_traces(pd.DataFrame(rows)), config())
    assert pool.frame.empty and pool.meta["tasks"] == 0 and pool.meta["single_plan_tasks"] == 1
    report = evaluate(PlanScorer(PLAN_A), pairs=pd.DataFrame(columns=["split"]), pool=pool, config=config().evaluate)
    assert report.metrics["pool_tasks"] == 0 and report.tables["best_of_n"].empty
    assert "no best-of-N" in report.to_markdown() and "no best-of-N" in report.summary()
    better = {"champion_delta.pairwise_accuracy": 0.1, "champion_delta.pairwise_accuracy.ci_low": 0.05,
              "champion_delta.pairwise_accuracy.ci_high": 0.15}
    metrics = report.metrics | {"pairwise_accuracy": 0.8} | better
    verdict = check_gates(metrics, EvaluateConfig().gates, champion={"pairwise_accuracy": 0.7})
    marks = {g.name: g.mark for g in verdict.gates}
    assert marks == {"pairwise_accuracy": "pass", "best_of_n_gain": "n/a", "beats_cost_only": "n/a",
                     "scoring_latency": "n/a", "beats_champion": "pass"}
    assert verdict.passed
    why = next(g for g in verdict.gates if g.name == "best_of_n_gain").detail
    assert why.startswith("not applicable: no held-out task has two distinct plans")
    worse = check_gates(metrics | {"champion_delta.pairwise_accuracy.ci_low": -0.05}, EvaluateConfig().gates,
                        champion={"pairwise_accuracy": 0.7})
    assert [g.name for g in worse.failed()] == ["beats_champion"]
    assert "held-out pairwise accuracy on the same pairs (the pool has no best-of-N): mean +0.100 [-0.050, +0.150]" in \
        worse.failed()[0].detail


def three_tasks(tasks_good_for_a: int) -> tuple[list[str], list[dict]]:
    """Three held-out tasks with plans A and B: A is the good plan on the first
    ``tasks_good_for_a`` of them, B on the others."""
    ids = ids_in("test", 3)
    rows = []
    for i, task in enumerate(ids):
        good, bad = (PLAN_A, PLAN_B) if i < tasks_good_for_a else (PLAN_B, PLAN_A)
        rows += trace_rows(task, {good: [1.0, 1.0], bad: [0.0, 0.0]})
    return ids, rows


@pytest.mark.parametrize(("good_for_a", "passes"), [(3, True), (2, False)])
def test_beats_champion_is_the_paired_bootstrap_of_the_best_of_n_pick_on_the_shared_pool(good_for_a, passes):
    # A picks plan A everywhere, the champion plan B: per task the difference is +1 or -1
    _, rows = three_tasks(good_for_a)
    cfg = config(bootstrap=200)
    pool = build_replay_pool(ingest_traces(pd.DataFrame(rows)), cfg)
    report = evaluate(PlanScorer(PLAN_A), pairs=pd.DataFrame(columns=["split"]), pool=pool, config=cfg.evaluate,
                      champion=PlanScorer(PLAN_B))
    m = report.metrics
    mean = (good_for_a - (3 - good_for_a)) / 3
    assert m["champion_delta.expected.best_of_2"] == pytest.approx(mean) and m["champion_delta.expected.best_of_2.tasks"] == 3
    assert m["expected.best_of_2.reward_model"] > report.champion_metrics["expected.best_of_2.reward_model"]  # the means differ
    gate = next(g for g in check_gates(m, cfg.evaluate.gates, champion=report.champion_metrics).gates if g.name == "beats_champion")
    assert gate.passed is passes, gate.detail
    if passes:  # +1 on every task: no resample can say otherwise
        assert (m["champion_delta.expected.best_of_2.ci_low"], m["champion_delta.expected.best_of_2.ci_high"]) == (1.0, 1.0)
    else:  # +1, +1, -1: the interval straddles 0
        assert m["champion_delta.expected.best_of_2.ci_low"] < 0 < m["champion_delta.expected.best_of_2.ci_high"]
        assert "lower bound" in gate.detail and "<= margin 0.000" in gate.detail
    assert "this model - champion, expected quality of the best-of-2 pick on the same pool tasks" in report.summary()
    assert "## Against the champion (same pool)" in report.to_markdown()


def test_without_best_of_n_beats_champion_pairs_held_out_pair_correctness():
    ids, rows = three_tasks(2)
    pool = build_replay_pool(ingest_traces(pd.DataFrame(rows[:2] + rows[4:6] + rows[8:10])), config())  # one plan per task
    assert pool.frame.empty
    pairs = pd.DataFrame({"task_id": ids, "prompt": "p", "chosen": [PLAN_A, PLAN_A, PLAN_B], "rejected": [PLAN_B, PLAN_B, PLAN_A],
                          "split": "test", "granularity": "plan", "domain": "desk"})
    cfg = config(bootstrap=0)
    report = evaluate(PlanScorer(PLAN_A), pairs=pairs, pool=pool, config=cfg.evaluate, champion=PlanScorer(PLAN_B))
    m = report.metrics
    assert m["champion_delta.pairwise_accuracy"] == pytest.approx(1 / 3) and m["champion_delta.pairwise_accuracy.tasks"] == 3
    # bootstrap 0: the interval is the mean itself, and the mean alone decides
    assert m["champion_delta.pairwise_accuracy.ci_low"] == m["champion_delta.pairwise_accuracy.ci_high"] == pytest.approx(1 / 3)
    gate = next(g for g in check_gates(m, cfg.evaluate.gates, champion=report.champion_metrics).gates if g.name == "beats_champion")
    assert gate.passed and "no bootstrap (evaluate.bootstrap 0): the interval is the mean itself" in gate.detail
    assert "the interval is the mean itself" in report.summary()
    with_bootstrap = evaluate(PlanScorer(PLAN_A), pairs=pairs, pool=pool, config=config(bootstrap=200).evaluate,
                              champion=PlanScorer(PLAN_B))
    assert with_bootstrap.metrics["champion_delta.pairwise_accuracy.ci_low"] < 0  # +1, +1, -1 per task: not enough


def test_evaluate_pool_auto_replays_exactly_when_the_run_ingests_traces():
    from orchrm.errors import ConfigError

    assert EvaluateConfig().pool == "auto"
    assert EvaluateConfig().pool_kind(ingests=True) == "replay" and EvaluateConfig().pool_kind(ingests=False) == "sandbox"
    assert EvaluateConfig(pool="sandbox").pool_kind(ingests=True) == "sandbox"
    assert EvaluateConfig(pool="replay").pool_kind(ingests=False) == "replay"
    with pytest.raises(ConfigError, match="evaluate.pool"):
        config_from_dict({"evaluate": {"pool": "fresh"}})
