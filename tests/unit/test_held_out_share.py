"""A finite task source (HumanEval) keeps a share of its tasks out of collection, by task id, so
every domain is always evaluated; a pool without a collected domain fails the gate ``pool_domains``."""

from __future__ import annotations

import pytest

from orchrm.config import GatesConfig, config_from_dict
from orchrm.evaluation.gates import check_gates
from orchrm.evaluation.pool import build_pool, held_out_tasks
from orchrm.execution.collect import load_domain_tasks
from orchrm.execution.tasks.base import HELD_OUT_SHARE, is_held_out, load_tasks, sources


def ids(tasks) -> set[str]:
    return {t.task_id for t in tasks}


def test_every_data_set_source_is_finite_and_no_generator_is():
    finite = {f"{d}:{s}" for (d, s), src in sources().items() if src.finite}
    assert finite == {"code:builtin", "code:humaneval", "code:jsonl", "math:gsm8k", "multihop:strategyqa", "webqa:squad"}


def test_humaneval_splits_by_task_id_into_a_collect_part_and_a_held_out_part():
    everything = ids(load_tasks("code", 500, seed=0))
    assert len(everything) == 164
    held_out = {t for t in everything if is_held_out(t)}
    assert 0.1 < len(held_out) / 164 < 0.3  # about HELD_OUT_SHARE of them
    for seed in (0, 1, 7):
        collected = ids(load_tasks("code", 500, seed=seed, part="collect"))
        kept = ids(load_tasks("code", 500, seed=seed, part="held_out"))
        # the same split whatever the seed: collection asking for every task never takes a held-out one
        assert collected == everything - held_out and kept == held_out
    # a smaller ask is drawn from its part alone, seeded, and the same twice
    few = load_tasks("code", 10, seed=3, part="collect")
    assert len(few) == 10 and not ids(few) & held_out
    assert [t.task_id for t in few] == [t.task_id for t in load_tasks("code", 10, seed=3, part="collect")]
    assert ids(load_tasks("code", 10, seed=3, part="held_out")) <= held_out


def test_a_generator_ignores_the_part():
    asked = load_tasks("math", 5, seed=2)
    assert [t.task_id for t in load_tasks("math", 5, seed=2, part="collect")] == [t.task_id for t in asked]
    assert [t.task_id for t in load_tasks("math", 5, seed=2, part="held_out")] == [t.task_id for t in asked]


def test_the_held_out_share_is_a_property_of_the_task_alone():
    assert is_held_out("HumanEval/0") == is_held_out("HumanEval/0")
    shares = [is_held_out(f"task-{i}") for i in range(20_000)]
    assert sum(shares) / len(shares) == pytest.approx(HELD_OUT_SHARE, abs=0.01)


def test_a_collection_that_uses_up_humaneval_still_leaves_code_tasks_to_evaluate():
    config = config_from_dict({
        "collect": {"domains": ["code", "math"], "tasks_per_domain": 400, "workers": 1},
        "evaluate": {"tasks_per_domain": 3, "candidates": 2, "best_of": [1, 2], "pool_seeds": [0], "repeats": 1,
                     "gates": {"best_of": 2}},
    })
    collected = ids(load_domain_tasks(config.collect.domains, config.collect.tasks_per_domain, config.collect.seed, None))
    evaluated = held_out_tasks(config)
    assert sorted({t.domain for t in evaluated}) == ["code", "math"]
    assert len([t for t in evaluated if t.domain == "code"]) == 3
    assert not ids(evaluated) & collected


def test_a_pool_without_a_collected_domain_fails_the_gate_and_says_which():
    config = config_from_dict({
        "collect": {"domains": ["code", "math"], "tasks_per_domain": 3, "workers": 1},
        "evaluate": {"tasks_per_domain": 2, "candidates": 2, "best_of": [1, 2], "pool_seeds": [0], "repeats": 1,
                     "gates": {"best_of": 2}},
    })
    math_only = [t for t in held_out_tasks(config) if t.domain == "math"]
    pool = build_pool(config, progress=False, workers=1)
    assert pool.meta["domains"] == ["code", "math"] and set(pool.frame["domain"]) == {"code", "math"}
    # what the harness records for such a pool (per collected domain, 0 where it has no task)
    from orchrm.evaluation.harness import _model_results, read_pool

    class Constant:
        def score(self, prompts, actions, **_):
            import numpy as np

            return np.zeros(len(actions))

    reading = read_pool(config.evaluate, pool)
    from orchrm.data.pairs import empty_pairs

    metrics = _model_results(Constant(), empty_pairs(), pool, reading, config.evaluate)["metrics"]
    assert metrics["pool_tasks.code"] == 2 and metrics["pool_tasks.math"] == 2
    gate = {g.name: g for g in check_gates(metrics, GatesConfig(best_of=2)).gates}["pool_domains"]
    assert gate.passed and "code 2, math 2" in gate.detail

    narrow = build_pool(config, tasks=math_only, progress=False, workers=1)
    narrow.meta["domains"] = ["code", "math"]  # the pool that had to cover both, built from math tasks only
    metrics = _model_results(Constant(), empty_pairs(), narrow, read_pool(config.evaluate, narrow), config.evaluate)["metrics"]
    assert metrics["pool_tasks.code"] == 0
    verdict = check_gates(metrics, GatesConfig(best_of=2))
    gate = {g.name: g for g in verdict.gates}["pool_domains"]
    assert not gate.passed and not verdict.passed
    assert "no held-out task of code in the pool (code 0, math 2 tasks)" in gate.detail


def test_metrics_without_per_domain_counts_have_no_domain_gate():
    verdict = check_gates({"pairwise_accuracy": 0.9, "pool_tasks": 0}, GatesConfig())
    assert "pool_domains" not in {g.name for g in verdict.gates}
