"""orchrm.evaluation: every selector on a hand-computed pool, intervals, calibration, the gates."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from orchrm.config import EvaluateConfig, GatesConfig, config_from_dict
from orchrm.errors import ConfigError
from orchrm.evaluation.gates import Verdict, check_gates
from orchrm.evaluation.harness import best_of_ns
from orchrm.evaluation.metrics import accuracy_table, bootstrap_ci, calibration, paired_difference
from orchrm.evaluation.pool import POOL_COLUMNS, CandidatePool, build_pool
from orchrm.evaluation.selectors import (
    SELECTORS,
    best_of_n_picks,
    best_of_n_table,
    gap_closed_table,
)

# One task, four candidates, in pool order. Worked by hand in the tests below.
#   cand reward chars exp.cost conf answer quality expected tokens
#   0     0.1   10   100      0.9  a      0.0     0.20     10
#   1     2.0   30    50      0.2  b      1.0     0.90     20
#   2     0.5   50   300      0.5  a      0.0     0.30     40
#   3    -1.0   60   200      0.6  b      1.0     0.95     30
HAND = dict(
    reward=[0.1, 2.0, 0.5, -1.0],
    plan_chars=[10, 30, 50, 60],
    expected_cost=[100.0, 50.0, 300.0, 200.0],
    confidence=[0.9, 0.2, 0.5, 0.6],
    answer_key=["a", "b", "a", "b"],
    quality=[0.0, 1.0, 0.0, 1.0],
    expected_quality=[0.2, 0.9, 0.3, 0.95],
    tokens=[10, 20, 40, 30],
)


def pool_frame(columns: dict, *, task_id: str = "t1", domain: str = "math", pool_seed: int = 0) -> pd.DataFrame:
    n = len(columns["reward"])
    base = {
        "pool_seed": pool_seed, "task_id": task_id, "domain": domain, "question": f"question {task_id}",
        "candidate": list(range(n)), "plan_id": [f"{task_id}-p{i}" for i in range(n)],
        "plan_text": [f"plan {i}" for i in range(n)], "answer": columns["answer_key"], "cost": columns["expected_cost"],
        "score_tokens": 5, "score_prompt_tokens": 7,
    }
    return pd.DataFrame(base | columns)


def picks_at(n: int) -> pd.DataFrame:
    return best_of_n_picks(pool_frame(HAND), n).set_index("selector")


def test_every_selector_picks_as_worked_by_hand_at_n_4():
    p = picks_at(4)
    assert set(p.index) == set(SELECTORS)
    expect = {  # selector: (realised quality, expected quality, execution tokens)
        "reward_model": (1.0, 0.9, 20),  # highest reward: candidate 1
        "random": (0.5, 0.5875, 25),  # mean over the four
        "majority_vote": (0.0, 0.25, 100),  # a and b have 2 votes each: the answer seen first (a)
        "weighted_vote": (1.0, 0.925, 100),  # softmax weights: b = e^2 + e^-1 > a = e^0.1 + e^0.5
        "trajectory": (0.0, 0.2, 100),  # most confident: candidate 0
        "length_only": (1.0, 0.95, 30),  # longest text: candidate 3
        "cost_only": (0.0, 0.3, 40),  # highest expected cost: candidate 2
        "oracle": (1.0, 0.9, 100),  # best realised: candidate 1 (first of the tie), all four executed
        "expected_oracle": (1.0, 0.95, 30),  # best expected: candidate 3
    }
    for name, (quality, expected, tokens) in expect.items():
        row = p.loc[name]
        assert (row.quality, row.tokens_execution) == (quality, tokens), name
        assert row.expected == pytest.approx(expected), name
        assert row.tokens_judging == 0


def test_reward_model_and_weighted_vote_pay_scoring_tokens_once_per_question_prompt():
    p = picks_at(4)
    # four candidates x 5 action tokens + one shared prompt of 7 tokens
    assert p.loc["reward_model", "tokens_scoring"] == p.loc["weighted_vote", "tokens_scoring"] == 4 * 5 + 7
    assert (p.drop(["reward_model", "weighted_vote"])["tokens_scoring"] == 0).all()


def test_selectors_at_n_2_see_only_the_first_two_candidates():
    p = picks_at(2)
    assert p.loc["reward_model", "quality"] == 1.0
    assert p.loc["random", "quality"] == 0.5
    assert p.loc["majority_vote", "quality"] == 0.0  # one vote each: the earliest candidate's answer
    assert p.loc["weighted_vote", "quality"] == 1.0
    assert p.loc["length_only", "quality"] == 1.0  # 30 chars beat 10
    assert p.loc["cost_only", "quality"] == 0.0  # expected cost 100 beats 50
    assert p.loc["expected_oracle", "expected"] == 0.9
    assert p.loc["oracle", "tokens_execution"] == 30


def test_the_expected_oracle_chooses_on_its_own_reruns_and_is_scored_on_the_pools():
    """Chosen and scored on the same re-runs the oracle would be lucky (the winner's curse): it
    picks by oracle_estimate, a second set of re-runs, and reports the pick's expected quality."""
    frame = pool_frame(HAND | {"oracle_estimate": [0.5, 0.6, 0.1, 0.4]})
    p = best_of_n_picks(frame, 4).set_index("selector")
    assert p.loc["expected_oracle", "expected"] == 0.9  # candidate 1: best on its own re-runs, not candidate 3
    assert p.loc["expected_oracle", "tokens_execution"] == 20


def test_at_n_1_every_plan_picking_selector_takes_the_first_candidate():
    p = picks_at(1)
    assert (p["quality"] == 0.0).all()
    assert p["expected"].tolist() == pytest.approx([0.2] * len(SELECTORS))


def test_an_answer_beats_no_answer_in_a_vote():
    cols = dict(HAND, answer_key=[None, None, None, "b"])
    p = best_of_n_picks(pool_frame(cols), 4).set_index("selector")
    assert p.loc["majority_vote", "quality"] == 1.0  # b's single vote beats three plans with no answer


def random_pool(tasks: int = 6, candidates: int = 8, seeds: int = 2, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    parts = []
    for s in range(seeds):
        for t in range(tasks):
            q = rng.integers(0, 2, candidates).astype(float)
            parts.append(pool_frame(dict(
                reward=rng.normal(size=candidates), plan_chars=rng.integers(10, 90, candidates),
                expected_cost=rng.uniform(10, 500, candidates), confidence=rng.uniform(size=candidates),
                answer_key=[str(k) for k in rng.integers(0, 3, candidates)], quality=q,
                expected_quality=rng.uniform(size=candidates), tokens=rng.integers(10, 200, candidates)),
                task_id=f"t{t}", domain="math" if t % 2 else "webqa", pool_seed=s))
    return pd.concat(parts, ignore_index=True)


def test_best_of_n_reads_only_the_first_n_candidates_nested_prefixes():
    frame = random_pool()
    for n in (1, 2, 4, 8):
        full = best_of_n_picks(frame, n).sort_values(["pool_seed", "task_id", "selector"]).reset_index(drop=True)
        prefix = best_of_n_picks(frame[frame["candidate"] < n], n).sort_values(["pool_seed", "task_id", "selector"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(full, prefix)


def test_the_oracles_never_get_worse_as_n_grows():
    frame = random_pool()
    picks = {n: best_of_n_picks(frame, n).set_index(["pool_seed", "task_id", "selector"]) for n in (1, 2, 4, 8)}
    for small, big in ((1, 2), (2, 4), (4, 8)):
        assert (picks[big].xs("oracle", level="selector")["quality"] >= picks[small].xs("oracle", level="selector")["quality"]).all()
        eo_big = picks[big].xs("expected_oracle", level="selector")["expected"]
        assert (eo_big >= picks[small].xs("expected_oracle", level="selector")["expected"]).all()


def test_best_of_n_table_has_an_interval_around_every_mean_and_a_row_per_domain():
    frame = random_pool(tasks=10)
    picks = pd.concat([best_of_n_picks(frame, n).assign(N=n) for n in (1, 4)])
    table = best_of_n_table(picks, bootstrap=200, seed=0)
    assert set(table["domain"]) == {"all", "math", "webqa"}
    assert len(table) == 3 * 2 * len(SELECTORS)
    assert (table["ci_low"] <= table["quality"] + 1e-12).all() and (table["quality"] <= table["ci_high"] + 1e-12).all()
    assert (table["seed_std"] >= 0).all()
    assert table.loc[table["domain"] == "all", "tasks"].eq(10).all()


def test_gap_closed_is_the_share_of_the_random_to_expected_oracle_gap():
    picks = best_of_n_picks(pool_frame(HAND), 4).assign(N=4)
    gap = gap_closed_table(picks, bootstrap=0).set_index("domain").loc["all"]
    # random 0.5875, reward model 0.9, expected oracle 0.95
    assert gap.gap_closed == pytest.approx((0.9 - 0.5875) / (0.95 - 0.5875))


def test_bootstrap_interval_contains_the_mean_and_resamples_whole_tasks():
    values = np.array([1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    lo, hi = bootstrap_ci(values, np.array(["a", "a", "b", "b", "c", "c"]), n=500, seed=1)
    assert lo <= values.mean() <= hi
    # every task has mean 1/2: any resample of whole tasks gives 1/2 exactly
    assert bootstrap_ci(np.array([1.0, 0.0, 1.0, 0.0]), np.array(["a", "a", "b", "b"]), n=100) == (0.5, 0.5)
    assert all(math.isnan(x) for x in bootstrap_ci(values, n=0))


def test_ece_of_a_model_that_says_80_percent_and_is_always_right_is_0_2():
    logit = math.log(0.8 / 0.2)
    ece, table = calibration(np.full(10, logit), np.zeros(10), bins=10)
    assert ece == pytest.approx(0.2)
    filled = table[table["count"] > 0]
    assert filled["mean_predicted"].round(6).tolist() == [0.2, 0.8]
    assert filled["observed"].tolist() == [0.0, 1.0]


def test_accuracy_table_pools_granularities_and_domains_into_all_rows():
    pairs = pd.DataFrame({"task_id": ["t1", "t1", "t2", "t3"], "granularity": ["plan", "node", "plan", "plan"],
                          "domain": ["math", "math", "code", "code"]})
    table = accuracy_table(pairs, np.array([1.0, 0.0, 1.0, 0.5]), bootstrap=50)
    rows = table.set_index(["granularity", "domain"])
    assert rows.loc[("all", "all"), "accuracy"] == pytest.approx(2.5 / 4)
    assert rows.loc[("plan", "all"), "pairs"] == 3
    assert rows.loc[("all", "code"), "tasks"] == 2
    assert rows.loc[("node", "math"), "accuracy"] == 0.0


GOOD = {
    "pairwise_accuracy": 0.712,
    "expected.best_of_8.reward_model": 0.70,
    "expected.best_of_8.random": 0.60,
    "expected.best_of_8.cost_only": 0.65,
    "best_of_8.reward_model": 0.68,
    "scoring_latency_ms_p50": 12.0,
}


def test_a_useful_model_passes_every_gate_with_figures_and_thresholds_in_the_detail():
    verdict = check_gates(GOOD, GatesConfig())
    assert verdict.passed and verdict.label == "promoted"
    details = {g.name: g.detail for g in verdict.gates}
    assert set(details) == {"pairwise_accuracy", "best_of_n_gain", "beats_cost_only", "scoring_latency", "beats_champion"}
    assert details["pairwise_accuracy"] == "held-out pairwise accuracy 0.712 >= 0.600"
    assert details["best_of_n_gain"] == "expected.best_of_8.reward_model 0.700 - random 0.600 = +0.100 >= +0.050"
    assert "0.700 > cost-only 0.650" in details["beats_cost_only"]
    assert details["scoring_latency"] == "p50 12.0 ms to score 8 candidates <= 250.0 ms"
    assert details["beats_champion"] == "no champion yet"


@pytest.mark.parametrize(
    ("change", "gate", "detail"),
    [
        ({"pairwise_accuracy": 0.55}, "pairwise_accuracy", "0.550 < 0.600"),
        ({"expected.best_of_8.reward_model": 0.61, "expected.best_of_8.cost_only": 0.55}, "best_of_n_gain", r"= \+0.010 < \+0.050"),
        ({"expected.best_of_8.cost_only": 0.72}, "beats_cost_only", "0.700 <= cost-only 0.720"),
        ({"scoring_latency_ms_p50": 400.0}, "scoring_latency", "400.0 ms .* > 250.0 ms"),
    ],
)
def test_each_gate_fails_alone_and_says_why(change, gate, detail):
    verdict = check_gates(GOOD | change, GatesConfig())
    assert not verdict.passed and verdict.label == "rejected"
    assert [g.name for g in verdict.failed()] == [gate]
    assert re.search(detail, verdict.failed()[0].detail), verdict.failed()[0].detail


def delta(mean: float, low: float, high: float, *, key: str = "champion_delta.expected.best_of_8", tasks: int = 40,
          resamples: int = 1000) -> dict[str, float]:
    """The paired-difference metrics evaluate() adds when a champion is evaluated in the same run."""
    return {key: mean, f"{key}.ci_low": low, f"{key}.ci_high": high, f"{key}.tasks": tasks, f"{key}.resamples": resamples}


#: the champion's own metrics of the run (what tells the gates there is a champion)
CHAMPION = {"expected.best_of_8.reward_model": 0.65}


def test_a_clearly_better_candidate_beats_the_champion_on_the_lower_bound_of_the_paired_interval():
    verdict = check_gates(GOOD | delta(0.05, 0.02, 0.08), GatesConfig(), champion=CHAMPION)
    assert verdict.passed
    gate = next(g for g in verdict.gates if g.name == "beats_champion")
    assert (gate.value, gate.threshold) == (0.02, 0.0)
    assert gate.detail == ("candidate - champion, expected quality of the best-of-8 pick on the same pool tasks: mean +0.050 "
                           "[+0.020, +0.080] (95% paired bootstrap over tasks; 40 tasks); lower bound +0.020 > margin 0.000")


def test_better_means_whose_paired_interval_straddles_zero_keep_the_champion():
    # the candidate's mean is higher (0.70 vs 0.65) but the paired interval reaches below 0
    verdict = check_gates(GOOD | delta(0.05, -0.01, 0.11), GatesConfig(), champion=CHAMPION)
    assert [g.name for g in verdict.failed()] == ["beats_champion"]
    assert "mean +0.050 [-0.010, +0.110]" in verdict.failed()[0].detail
    assert verdict.failed()[0].detail.endswith("lower bound -0.010 <= margin 0.000")


def test_the_lower_bound_must_clear_the_margin_and_a_tie_keeps_the_champion():
    margin = check_gates(GOOD | delta(0.08, 0.05, 0.11), GatesConfig(champion_margin=0.1), champion=CHAMPION)
    assert margin.failed()[0].detail.endswith("lower bound +0.050 <= margin 0.100")
    tie = check_gates(GOOD | delta(0.0, 0.0, 0.0), GatesConfig(), champion=CHAMPION)
    assert [g.name for g in tie.failed()] == ["beats_champion"]


def test_without_bootstrap_the_interval_is_the_mean_and_the_detail_says_so():
    verdict = check_gates(GOOD | delta(0.03, 0.03, 0.03, resamples=0), GatesConfig(), champion=CHAMPION)
    assert verdict.passed
    assert "(no bootstrap (evaluate.bootstrap 0): the interval is the mean itself; 40 tasks)" in verdict.gates[-1].detail


def test_beats_champion_reads_the_realised_difference_where_the_pool_has_no_expected_quality():
    realised = delta(0.04, 0.01, 0.07, key="champion_delta.best_of_8")
    verdict = check_gates(GOOD | realised, GatesConfig(), champion=CHAMPION)
    assert verdict.passed and "realised quality of the best-of-8 pick" in verdict.gates[-1].detail


def test_a_run_without_the_paired_difference_fails_beats_champion_as_missing():
    # e.g. metrics stored before the paired difference existed: the champion's means alone decide nothing
    verdict = check_gates(GOOD, GatesConfig(), champion={"expected.best_of_8.reward_model": 0.1})
    assert [g.name for g in verdict.failed()] == ["beats_champion"]
    assert verdict.failed()[0].detail.startswith("champion_delta.expected.best_of_8 missing from the metrics: evaluate the model "
                                                 "again against the champion")


def test_paired_difference_resamples_whole_tasks_and_without_bootstrap_is_its_mean():
    # per task: +1, +1, -1 (two rows each, one per pool seed)
    diff, tasks = np.array([1.0, 1.0, 1.0, 1.0, -1.0, -1.0]), np.array(["a", "a", "b", "b", "c", "c"])
    d = paired_difference(diff, tasks, bootstrap=500, seed=0)
    assert d.mean == pytest.approx(1 / 3) and d.tasks == 3 and d.ci_low < 0 < d.ci_high
    # every draw of three tasks gives a mean in {-1, -1/3, 1/3, 1}
    assert {round(d.ci_low, 6), round(d.ci_high, 6)} <= {-1.0, round(-1 / 3, 6), round(1 / 3, 6), 1.0}
    flat = paired_difference(diff, tasks, bootstrap=0, seed=0)
    assert flat.ci_low == flat.ci_high == flat.mean and flat.metrics("k")["k.resamples"] == 0


def test_gates_fall_back_to_realised_quality_and_fail_on_a_missing_metric():
    realised = {"pairwise_accuracy": 0.7, "best_of_8.reward_model": 0.7, "best_of_8.random": 0.5,
                "best_of_8.cost_only": 0.6, "scoring_latency_ms_p50": 1.0}
    assert check_gates(realised, GatesConfig()).passed
    missing = check_gates({k: v for k, v in realised.items() if k != "scoring_latency_ms_p50"}, GatesConfig())
    assert [g.name for g in missing.failed()] == ["scoring_latency"]
    assert "scoring_latency_ms_p50 missing from the metrics" in missing.failed()[0].detail


def test_disabled_gates_are_left_out_of_the_verdict():
    verdict = check_gates(GOOD, GatesConfig(beat_cost_only=False, beat_champion=False))
    assert {g.name for g in verdict.gates} == {"pairwise_accuracy", "best_of_n_gain", "scoring_latency"}


def test_a_stored_run_is_regated_from_its_metrics_json(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"metrics": GOOD, "champion_metrics": None}))
    stored = json.loads(path.read_text())
    verdict = check_gates(stored["metrics"], GatesConfig(min_pairwise_accuracy=0.75), champion=stored["champion_metrics"])
    assert [g.name for g in verdict.failed()] == ["pairwise_accuracy"]
    again = Verdict.from_dict(json.loads(json.dumps(verdict.to_dict())))
    assert again == verdict and again.tags()["verdict"] == "rejected"


def test_best_of_n_larger_than_the_pool_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="needs that many candidates, but the pool has 4 per task"):
        best_of_ns(EvaluateConfig(candidates=16), candidates=4)
    with pytest.raises(ConfigError, match=r"best-of-N needs 1 <= N <= candidates \(4\)"):
        config_from_dict({"evaluate": {"candidates": 4}})


@pytest.fixture(scope="module")
def small_pool_config():
    return config_from_dict({
        "collect": {"domains": ["math"], "tasks_per_domain": 3, "workers": 1},
        "evaluate": {"tasks_per_domain": 2, "candidates": 4, "best_of": [1, 2, 4], "pool_seeds": [0, 1], "repeats": 2,
                     "gates": {"best_of": 4}},
    })


def test_build_pool_is_deterministic_and_each_pool_seed_orders_the_same_candidates(small_pool_config, tmp_path):
    pool = build_pool(small_pool_config, progress=False, workers=1)
    again = build_pool(small_pool_config, progress=False, workers=1)
    pd.testing.assert_frame_equal(pool.frame, again.frame)
    f = pool.frame
    assert list(f.columns) == list(POOL_COLUMNS)
    assert len(f) == 2 * 2 * 4 and pool.candidates == 4 and pool.tasks == 2
    for _task, g in f.groupby("task_id"):
        plans = [set(s["plan_id"]) for _, s in g.groupby("pool_seed")]
        assert plans[0] == plans[1]  # the same candidates, in each pool seed's own order
        assert sorted(g[g.pool_seed == 0]["candidate"]) == [0, 1, 2, 3]
        # expected quality belongs to the plan, not to the pool seed
        assert g.groupby("plan_id")["expected_quality"].nunique().eq(1).all()
        assert g.groupby("plan_id")["oracle_estimate"].nunique().eq(1).all()
    # the oracle's estimate comes from re-runs of its own, not those of expected_quality
    assert (f["oracle_estimate"] != f["expected_quality"]).any()
    held_out = set(f["task_id"])
    from orchrm.execution.tasks.base import load_tasks

    assert not held_out & {t.task_id for t in load_tasks("math", 3, seed=0)}
    pool.save(tmp_path / "pool.parquet")
    loaded = CandidatePool.load(tmp_path / "pool.parquet")
    pd.testing.assert_frame_equal(loaded.frame, pool.frame)
    assert loaded.meta == pool.meta and loaded.meta["repeats"] == 2
    # a pool saved before the oracle had re-runs of its own still loads, its oracle on the others
    pool.frame.drop(columns="oracle_estimate").to_parquet(tmp_path / "old.parquet")
    old = CandidatePool.load(tmp_path / "old.parquet")
    assert old.frame["oracle_estimate"].equals(old.frame["expected_quality"])


def test_the_pool_built_in_chunks_is_the_pool_built_in_one_call(small_pool_config):
    """What the flows map over chunks (plan, one chunk per call, combine) gives the rows, order and
    meta of build_pool, whatever the chunk size and the order the chunks come back in."""
    from orchrm.evaluation.pool import combine_pool, plan_pool, pool_chunk

    whole = build_pool(small_pool_config, progress=False, workers=1)
    for size in (1, 16):
        config = small_pool_config.model_copy(update={"collect": small_pool_config.collect.model_copy(update={"chunk_tasks": size})})
        plan = plan_pool(config)
        assert len(plan.chunks) == {1: 2, 16: 1}[size] and sum(len(c.task_ids) for c in plan.chunks) == 2
        chunks = [pool_chunk(c, config) for c in reversed(plan.chunks)]
        combined = combine_pool(plan, chunks)
        pd.testing.assert_frame_equal(combined.frame, whole.frame)
        assert combined.meta == whole.meta


def test_a_pool_missing_a_chunk_is_refused_with_the_chunks_named(small_pool_config):
    from orchrm.errors import CollectionError
    from orchrm.evaluation.pool import combine_pool, plan_pool, pool_chunk

    config = small_pool_config.model_copy(update={"collect": small_pool_config.collect.model_copy(update={"chunk_tasks": 1})})
    plan = plan_pool(config)
    first = pool_chunk(plan.chunks[0], config)
    with pytest.raises(CollectionError, match=r"2 chunks; the results lack chunk\(s\) \[1\] and hold unplanned or repeated chunk\(s\) \[0\]"):
        combine_pool(plan, [first, first])


# --------------------------------------------------------------------------------------------
# what MLflow records of an evaluation: curves over N, the data set behind each figure, the pool's digest


def test_flat_best_of_n_metrics_become_one_curve_per_selector_and_domain_with_n_as_the_step():
    from orchrm.evaluation.report import best_of_n_curves

    flat = {"best_of_1.reward_model": 0.4, "best_of_4.reward_model": 0.7, "best_of_2.reward_model": 0.6,
            "best_of_4.reward_model.math": 0.8, "expected.best_of_4.random": 0.5, "tokens.best_of_4.cost_only": 900.0,
            "champion_delta.best_of_4": 0.1, "champion_delta.best_of_4.ci_low": 0.02, "champion_delta.best_of_4.tasks": 40.0,
            "champion_delta.best_of_4.resamples": 1000.0, "pairwise_accuracy": 0.8, "gap_closed": 0.3}
    assert best_of_n_curves(flat) == {
        "best_of_n.reward_model": {1: 0.4, 2: 0.6, 4: 0.7},
        "best_of_n.reward_model.math": {4: 0.8},
        "champion_delta.best_of_n": {4: 0.1},
        "champion_delta.best_of_n.ci_low": {4: 0.02},
        "expected.best_of_n.random": {4: 0.5},
        "tokens.best_of_n.cost_only": {4: 900.0},
    }


@pytest.mark.parametrize("key, on", [
    ("pairwise_accuracy", "pairs"), ("pairwise_accuracy_ci_low", "pairs"), ("bt_loss.node.math", "pairs"), ("ece", "pairs"),
    ("champion.reward_std", "pairs"), ("champion_delta.pairwise_accuracy.ci_high", "pairs"), ("best_of_4.reward_model", "pool"),
    ("champion.best_of_n.random", "pool"), ("gap_closed.math", "pool"), ("scoring_latency_ms_p50", "pool"), ("pool_tasks", "pool"),
])
def test_each_metric_is_linked_to_the_data_set_it_was_measured_on(key, on):
    from orchrm.evaluation.report import measured_on

    assert measured_on(key) == on


def test_the_pool_digest_names_its_candidates_and_executions_and_survives_a_save(tmp_path):
    pool = CandidatePool(random_pool())
    again = CandidatePool.load(pool.save(tmp_path / "pool.parquet"))
    assert again.digest() == pool.digest() and len(pool.digest()) == 16
    frame = pool.frame.copy()
    frame.loc[0, "quality"] = 1.0 - frame.loc[0, "quality"]
    assert CandidatePool(frame).digest() != pool.digest()
    assert CandidatePool(pool.frame.assign(extra=1)).digest() == pool.digest()  # only the pool's own columns count
