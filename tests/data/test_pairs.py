"""Pair building (DESIGN §3 pair table, §5): sources, rules, splits, determinism, formats, CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from orchrm.config import PairsConfig
from orchrm.data.pair_engine import ragged_arange, within_group_pairs
from orchrm.data.pair_files import build_pairs_file
from orchrm.data.pairs import (
    MARGIN_SLACK,
    PairwiseComparator,
    assign_split,
    build_pairs,
    read_pairs,
)
from orchrm.data.tables import PAIR_COLUMNS, artifacts_frame, read_table, write_table
from orchrm.errors import TraceSchemaError
from orchrm.plans import Plan
from tests.fixtures.tables import PLANS, execution_rows, make_artifacts

Q = "Tom has 7 apples and eats 3. How many are left?"


def plan(*nodes: tuple[str, str, dict], edges: tuple[tuple[str, str], ...] = ()) -> str:
    return Plan.build([{"id": i, "agent": a, "params": p} for i, a, p in nodes], edges).render()


def run(plan_text: str, qualities: dict, *, task_id: str = "t1", question: str = Q, orchestrator: str = "base", run_id: str = "r1", contents: dict | None = None) -> list[dict]:
    return execution_rows(
        task_id=task_id, question=question, domain="math", plan_text=plan_text, orchestrator=orchestrator,
        qualities=qualities, run_id=run_id, contents=contents,
    )


def table(*runs: list[dict]) -> pd.DataFrame:
    return artifacts_frame([row for r in runs for row in r])


def tokens_of(df: pd.DataFrame, mask: pd.Series) -> int:
    return int((df.loc[mask, "prompt_tokens"] + df.loc[mask, "completion_tokens"]).sum())


COT_SMALL, COT_LARGE, SC = PLANS["cot_small"], PLANS["cot_large"], PLANS["sc_small"]


# plan-level: correct-over-incorrect ---------------------------------------------------------------
def test_plan_pairs_compare_final_artifacts_of_different_plans():
    df = table(run(COT_SMALL, {"a1": 1.0}), run(COT_LARGE, {"a1": 0.0}), run(SC, {"a1": 0.95}))
    pairs = PairwiseComparator(granularity="plan", sources=["correct-over-incorrect"], min_margin=0.1).build_pairs(df)
    got = {(r.chosen, r.rejected): r.margin for r in pairs.itertuples()}
    # 1.0 vs 0.95 is a tie below min_margin: dropped
    assert got == pytest.approx({(COT_SMALL, COT_LARGE): 1.0, (SC, COT_LARGE): 0.95})
    assert set(pairs["prompt"]) == {Q}
    assert set(pairs["granularity"]) == {"plan"} and set(pairs["source"]) == {"correct-over-incorrect"}
    assert list(pairs.columns) == list(PAIR_COLUMNS)


def test_plan_pair_collection_tokens_are_both_full_executions():
    two_step = PLANS["cot_then_reflexion"]
    df = table(run(two_step, {"a1": 0.0, "a2": 1.0}), run(COT_LARGE, {"a1": 0.0}))
    pair = PairwiseComparator(granularity="plan", sources=["correct-over-incorrect"]).build_pairs(df).iloc[0]
    assert pair["chosen"] == two_step
    assert pair["collection_tokens"] == tokens_of(df, df["task_id"] == "t1")


def test_repeated_executions_of_a_plan_count_once_with_mean_quality():
    df = table(
        run(COT_SMALL, {"a1": 1.0}, run_id="r1"),
        run(COT_SMALL, {"a1": 0.5}, run_id="r2"),
        run(COT_LARGE, {"a1": 0.25}),
    )
    pairs = PairwiseComparator(granularity="plan", sources=["correct-over-incorrect"]).build_pairs(df)
    assert len(pairs) == 1
    assert pairs["margin"].iloc[0] == pytest.approx(0.75 - 0.25)


def test_only_artifacts_of_the_same_task_are_compared():
    artifacts = make_artifacts(n_tasks=12, plans_per_task=5, seed=3)
    pairs = build_pairs(artifacts)
    task_of = artifacts.set_index("artifact_id")["task_id"]
    assert len(pairs) > 0
    assert (pairs["chosen_artifact_id"].map(task_of) == pairs["task_id"]).all()
    assert (pairs["rejected_artifact_id"].map(task_of) == pairs["task_id"]).all()
    # the same plans on two tasks never meet across tasks
    df = table(run(COT_SMALL, {"a1": 1.0}, task_id="t1"), run(COT_LARGE, {"a1": 0.0}, task_id="t2"))
    assert build_pairs(df).empty


def test_null_quality_artifacts_never_enter_a_pair():
    df = table(run(COT_SMALL, {"a1": None}), run(COT_LARGE, {"a1": 0.0}), run(SC, {"a1": 1.0}))
    pairs = build_pairs(df)
    unknown = set(df.loc[df["quality"].isna(), "artifact_id"])
    assert unknown and not (set(pairs["chosen_artifact_id"]) | set(pairs["rejected_artifact_id"])) & unknown


@pytest.mark.parametrize("min_margin", [0.0, 0.25, 0.5, 0.9])
def test_ties_below_min_margin_are_dropped(min_margin):
    pairs = build_pairs(make_artifacts(10, 5, seed=1), PairsConfig(min_margin=min_margin, max_pairs_per_task=None))
    observed = pairs[pairs["source"] != "specialized-over-base"]
    assert len(observed) > 0
    assert (observed["margin"] >= min_margin - MARGIN_SLACK).all() and (observed["margin"] > 0).all()


@pytest.mark.parametrize(("high", "low"), [(0.2, 0.1), (0.4, 0.3), (0.7, 0.6), (1.0, 0.9)])
def test_a_gap_of_exactly_min_margin_is_kept_whatever_the_floating_point(high, low):
    # 0.7 - 0.6 is 0.0999... in binary floating point, 0.2 - 0.1 is 0.1
    artifacts = table(run(COT_SMALL, {"a1": high}), run(COT_LARGE, {"a1": low}, run_id="r2"))
    pairs = PairwiseComparator(granularity="plan", sources=["correct-over-incorrect"], min_margin=0.1).build_pairs(artifacts)
    assert len(pairs) == 1 and pairs["margin"].iloc[0] == pytest.approx(0.1)


def test_is_final_must_be_boolean_not_text():
    artifacts = table(run(COT_SMALL, {"a1": 1.0}), run(COT_LARGE, {"a1": 0.0}, run_id="r2"))
    artifacts["is_final"] = artifacts["is_final"].map({True: "true", False: "false"})  # "false" is truthy
    with pytest.raises(TraceSchemaError, match="'is_final' must be boolean"):
        PairwiseComparator().build_pairs(artifacts)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        # chosen and rejected would both point at the one id
        (lambda d: d.assign(artifact_id=d["artifact_id"].where(d.index != 1, d["artifact_id"].iloc[0])),
         r"column 'artifact_id': duplicate ids in rows 0, 1"),
        # every pair of the task would have a blank prompt
        (lambda d: d.assign(question=" \n"), r"column 'question': empty, NaN or not text in rows 0, 1"),
        # one of the two would silently become every pair's prompt
        (lambda d: d.assign(question=[Q, Q + "?"]), r"tasks 't1' have more than one question"),
    ],
)
def test_artifacts_that_would_make_wrong_pairs_are_refused(change, match):
    artifacts = table(run(COT_SMALL, {"a1": 1.0}), run(COT_LARGE, {"a1": 0.0}, run_id="r2"))
    assert len(artifacts) == 2 and len(PairwiseComparator().build_pairs(artifacts)) > 0  # unchanged: fine
    with pytest.raises(TraceSchemaError, match=match):
        PairwiseComparator().build_pairs(change(artifacts))


# node-level: intermediate -------------------------------------------------------------------------
#: the node format (the default is plan_prefix: tests/data/test_prefix_pairs.py)
NODE_ACTIONS = PairsConfig(intermediate_action="node")
REFLEX_A = plan(("a1", "CoT", {"model": "small"}), ("a2", "Reflexion", {"model": "small", "iterations": 2}), edges=(("a1", "a2"),))
REFLEX_B = plan(("a1", "CoT", {"model": "small"}), ("a2", "Reflexion", {"model": "large", "iterations": 1}), edges=(("a1", "a2"),))
REFLEX_OTHER_PREFIX = plan(("a1", "CoT", {"model": "large"}), ("a2", "Reflexion", {"model": "small", "iterations": 3}), edges=(("a1", "a2"),))


def test_intermediate_pairs_share_the_ancestor_prefix():
    df = table(
        run(REFLEX_A, {"a1": 0.5, "a2": 1.0}),
        run(REFLEX_B, {"a1": 0.5, "a2": 0.0}),
        run(REFLEX_OTHER_PREFIX, {"a1": 0.5, "a2": 0.5}),
    )
    pairs = PairwiseComparator(config=NODE_ACTIONS, granularity="node", min_margin=0.1).build_pairs(df)
    # a2 of A vs a2 of B share the prefix "a1 CoT small"; the other plan's prefix differs, and
    # the a1 nodes all have quality 0.5 (ties)
    assert len(pairs) == 1
    pair = pairs.iloc[0]
    prefix = '<agent id="a1" type="CoT" model="small"/>'
    assert pair["prompt"] == Q + "\n" + prefix
    chosen_row = df.set_index("artifact_id").loc[pair["chosen_artifact_id"]]
    assert chosen_row["plan_text"] == REFLEX_A
    assert pair["chosen"] == Plan.parse(REFLEX_A).node("a2").render() + "\n" + chosen_row["content"]
    assert pair["granularity"] == "node" and pair["source"] == "intermediate" and pair["margin"] == pytest.approx(1.0)
    # cost of running both prefixes up to a2: a1 and a2 of both executions
    both = df["plan_text"].isin([REFLEX_A, REFLEX_B])
    assert pair["collection_tokens"] == tokens_of(df, both)


def test_depth_zero_node_pairs_need_only_the_source_nodes():
    df = table(
        run(REFLEX_A, {"a1": 1.0, "a2": None}),
        run(REFLEX_OTHER_PREFIX, {"a1": 0.0, "a2": None}),
    )
    pairs = PairwiseComparator(config=NODE_ACTIONS, granularity="node").build_pairs(df)
    # CoT small vs CoT large at depth 0: same role, empty prefix
    assert len(pairs) == 1
    pair = pairs.iloc[0]
    assert pair["prompt"] == Q
    sources = df["node_id"] == "a1"
    assert pair["collection_tokens"] == tokens_of(df, sources)


def test_node_pairs_need_the_same_role_and_a_different_plan():
    critic = plan(("a1", "CoT", {"model": "small", "role": "critic"}))
    solver = plan(("a1", "CoT", {"model": "large", "role": "solver"}))
    df = table(run(critic, {"a1": 1.0}), run(solver, {"a1": 0.0}))
    assert PairwiseComparator(config=NODE_ACTIONS, granularity="node").build_pairs(df).empty
    # two executions of one plan are not a node pair either
    df = table(run(COT_SMALL, {"a1": 1.0}, run_id="r1"), run(COT_SMALL, {"a1": 0.0}, run_id="r2", contents={"a1": "other"}))
    assert PairwiseComparator(config=NODE_ACTIONS, granularity="node").build_pairs(df).empty


# specialized-over-base ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("q_spec", "q_base", "expected"),
    [
        (0.5, 0.5, {"specialized-over-base"}),  # observed tie: the prior decides
        (None, 0.0, {"specialized-over-base"}),  # quality unknown: the prior decides
        (0.0, 1.0, {"correct-over-incorrect"}),  # contradicted: only the observed pair (base wins)
        (1.0, 0.0, {"correct-over-incorrect"}),  # confirmed: the measured pair stands for it
    ],
)
def test_specialized_over_base_is_a_prior_kept_unless_contradicted(q_spec, q_base, expected):
    df = table(run(COT_LARGE, {"a1": q_spec}, orchestrator="specialized"), run(COT_SMALL, {"a1": q_base}, orchestrator="base"))
    pairs = PairwiseComparator(granularity="plan", prior_margin=0.3).build_pairs(df)
    assert set(pairs["source"]) == expected
    prior = pairs[pairs["source"] == "specialized-over-base"]
    if len(prior):
        assert prior["chosen"].iloc[0] == COT_LARGE and prior["margin"].iloc[0] == pytest.approx(0.3)
        assert prior["collection_tokens"].iloc[0] == 0
    if q_spec == 0.0:
        assert pairs["chosen"].iloc[0] == COT_SMALL


def test_a_panel_plan_is_question_blind_like_a_base_plan():
    df = table(run(COT_LARGE, {"a1": 0.5}, orchestrator="specialized"), run(COT_SMALL, {"a1": 0.5}, orchestrator="panel"))
    pairs = PairwiseComparator(granularity="plan", prior_margin=0.3).build_pairs(df)
    assert list(pairs["source"]) == ["specialized-over-base"] and pairs["chosen"].iloc[0] == COT_LARGE


# duplicates, contradictions, cap ----------------------------------------------------------------
def test_duplicates_are_removed():
    same = {"a1": "the answer is 4"}
    other = {"a1": "the answer is 5"}
    df = table(
        run(COT_SMALL, {"a1": 1.0}, run_id="r1", contents=same),
        run(COT_SMALL, {"a1": 1.0}, run_id="r2", contents=same),
        run(COT_LARGE, {"a1": 0.0}, run_id="r1", contents=other),
        run(COT_LARGE, {"a1": 0.0}, run_id="r2", contents=other),
    )
    pairs = PairwiseComparator(config=NODE_ACTIONS, granularity="node").build_pairs(df)
    # four artifact combinations, one (prompt, chosen, rejected)
    assert len(pairs) == 1
    many = build_pairs(make_artifacts(20, 5, seed=4), PairsConfig(max_pairs_per_task=None))
    assert not many.duplicated(["prompt", "chosen", "rejected"]).any()
    assert many["pair_id"].is_unique


def test_contradictory_pairs_are_dropped():
    # identical texts judged both ways (a noisy quality function): no usable signal
    df = table(
        run(COT_SMALL, {"a1": 1.0}, run_id="r1", contents={"a1": "x = 4"}),
        run(COT_LARGE, {"a1": 0.0}, run_id="r1", contents={"a1": "x = 5"}),
        run(COT_SMALL, {"a1": 0.0}, run_id="r2", contents={"a1": "x = 4"}),
        run(COT_LARGE, {"a1": 1.0}, run_id="r2", contents={"a1": "x = 5"}),
    )
    assert PairwiseComparator(config=NODE_ACTIONS, granularity="node").build_pairs(df).empty


def test_per_task_cap_is_respected():
    pairs = build_pairs(make_artifacts(10, 7, seed=2), PairsConfig(max_pairs_per_task=5))
    assert pairs.groupby("task_id").size().max() <= 5
    uncapped = build_pairs(make_artifacts(10, 7, seed=2), PairsConfig(max_pairs_per_task=None))
    expected = uncapped.groupby("task_id").size().clip(upper=5)
    pd.testing.assert_series_equal(pairs.groupby("task_id").size(), expected)


def test_per_task_cap_is_uniform_not_length_biased():
    # ten plans per task share the prefix "a1 CoT small": 45 candidate node pairs at depth 0 per
    # task, with contents whose length is independent of their quality
    rng = np.random.default_rng(0)
    plans = [
        plan(("a1", "CoT", {"model": "small"}), ("a2", "Reflexion", {"model": tier, "iterations": k}), edges=(("a1", "a2"),))
        for tier in ("small", "large") for k in range(1, 6)
    ]
    runs = []
    for t in range(40):
        for p in plans:
            words = int(rng.integers(1, 300))
            runs.append(run(p, {"a1": float(rng.choice([0.0, 0.5, 1.0])), "a2": None}, task_id=f"t{t}",
                            contents={"a1": "step " * words + f"({t})"}))
    artifacts = table(*runs)
    cfg = dict(granularity=("node",), min_margin=0.1, intermediate_action="node")
    everything = build_pairs(artifacts, PairsConfig(max_pairs_per_task=None, **cfg))
    kept = pd.concat([build_pairs(artifacts, PairsConfig(max_pairs_per_task=3, seed=s, **cfg)) for s in range(5)])
    length = lambda p: p["chosen"].str.len() + p["rejected"].str.len()  # noqa: E731
    assert everything.groupby("task_id").size().min() > 10
    assert (kept.groupby("task_id").size() == 15).all()
    # a sampler that favoured long texts would shift the mean by a good part of a standard deviation
    assert abs(length(kept).mean() - length(everything).mean()) < 0.15 * length(everything).std()
    # and it is a draw: different seeds keep different pairs
    assert kept["pair_id"].nunique() > 3 * 40 * 1.5


# splits and determinism -----------------------------------------------------------------------------
def test_no_task_in_two_splits_on_a_big_random_table():
    artifacts = make_artifacts(600, 5, seed=11)
    cfg = PairsConfig(val_fraction=0.15, test_fraction=0.25, max_pairs_per_task=8)
    pairs = build_pairs(artifacts, cfg)
    assert (pairs.groupby("task_id")["split"].nunique() == 1).all()
    share = pairs.groupby("task_id")["split"].first().value_counts(normalize=True)
    assert share["test"] == pytest.approx(0.25, abs=0.06)
    assert share["val"] == pytest.approx(0.15, abs=0.05)


def test_assign_split_is_a_stable_hash_of_the_task():
    ids = [f"task-{i}" for i in range(500)]
    first = assign_split(ids, 0.1, 0.2)
    # same task, same split: whatever else is in the list, and in any order
    assert list(assign_split(ids[::-1], 0.1, 0.2)) == list(first[::-1])
    assert assign_split(["task-7"], 0.1, 0.2)[0] == first[7]
    assert set(assign_split(ids, 0.0, 0.0)) == {"train"}
    with pytest.raises(ValueError, match="sum below 1"):
        assign_split(ids, 0.5, 0.5)
    with pytest.raises(TraceSchemaError, match="task ids are missing in rows 1"):  # not the last task's split
        assign_split(["task-1", None, "task-2"], 0.1, 0.2)


def test_same_table_gives_the_same_pairs():
    artifacts = make_artifacts(30, 6, seed=8)
    a = build_pairs(artifacts, PairsConfig(max_pairs_per_task=4, seed=3))
    b = build_pairs(artifacts.copy(), PairsConfig(max_pairs_per_task=4, seed=3))
    pd.testing.assert_frame_equal(a, b)
    assert a["pair_id"].is_unique


def test_a_task_keeps_its_capped_pairs_when_other_tasks_change_or_are_added():
    # the per-task draw is a hash of each pair's own identity: one task's verdicts changing (a
    # busy machine timing out a code check) or a night's new traces move no other task's pairs
    artifacts = make_artifacts(30, 7, seed=5)
    cfg = PairsConfig(max_pairs_per_task=4, seed=1)
    flipped_task = artifacts["task_id"].iloc[0]
    flipped = artifacts.copy()
    rows = (flipped["task_id"] == flipped_task) & flipped["quality"].notna()
    flipped.loc[rows, "quality"] = 0.5  # its observed pairs become ties: fewer candidates
    newcomers = make_artifacts(12, 7, seed=6).assign(task_id=lambda d: "new-" + d["task_id"])

    def pair_ids_by_task(artifact_table: pd.DataFrame) -> dict[str, list[str]]:
        pairs = build_pairs(artifact_table, cfg)
        return {task: group["pair_id"].tolist() for task, group in pairs.groupby("task_id")}

    before = pair_ids_by_task(artifacts)
    after_flip = pair_ids_by_task(flipped)
    assert after_flip.get(flipped_task) != before[flipped_task]
    assert {t: p for t, p in after_flip.items() if t != flipped_task} == {t: p for t, p in before.items() if t != flipped_task}
    grown = pair_ids_by_task(pd.concat([artifacts, newcomers], ignore_index=True))
    assert sum(t.startswith("new-") for t in grown) == 12
    assert {t: p for t, p in grown.items() if not t.startswith("new-")} == before
    # the seed still draws: another seed keeps other pairs of the same tasks
    other_seed = build_pairs(artifacts, PairsConfig(max_pairs_per_task=4, seed=2))
    assert set(other_seed["pair_id"]) != {i for ids in before.values() for i in ids}


# inputs --------------------------------------------------------------------------------------------
def test_quality_fn_replaces_the_quality_column():
    df = table(run(COT_SMALL, {"a1": 0.0}), run(COT_LARGE, {"a1": 1.0}))
    # the quality function prefers the small tier, whatever the column says
    pairs = PairwiseComparator(quality_fn=lambda a: 1.0 if 'model="small"' in a["plan_text"] else 0.0).build_pairs(df)
    assert set(pairs.loc[pairs["granularity"] == "plan", "chosen"]) == {COT_SMALL}
    assert PairwiseComparator(quality_fn=lambda a: None).build_pairs(df).empty
    with pytest.raises(TraceSchemaError, match=r"quality_fn returned values outside \[0, 1\]"):
        PairwiseComparator(quality_fn=lambda a: 2.0).build_pairs(df)


def test_accepts_row_dicts_and_planrun_like_objects():
    rows = run(COT_SMALL, {"a1": 1.0}) + run(COT_LARGE, {"a1": 0.0})

    class Run:  # anything with .frame(), like orchrm.execution.executor.PlanRun
        def __init__(self, r):
            self.r = r

        def frame(self):
            return artifacts_frame(self.r)

    expected = build_pairs(artifacts_frame(rows))
    pd.testing.assert_frame_equal(PairwiseComparator().build_pairs(rows), expected)
    pd.testing.assert_frame_equal(PairwiseComparator().build_pairs(Run(rows)), expected)
    pd.testing.assert_frame_equal(PairwiseComparator().build_pairs([Run(rows[:1]), Run(rows[1:])]), expected)


def test_missing_columns_and_non_final_orphan_nodes_are_refused():
    df = table(run(COT_SMALL, {"a1": 1.0}), run(COT_LARGE, {"a1": 0.0}))
    with pytest.raises(TraceSchemaError, match="lacks column.*quality"):
        build_pairs(df.drop(columns=["quality"]))
    two = table(run(PLANS["cot_then_reflexion"], {"a1": 1.0, "a2": 1.0}), run(PLANS["cot_then_sc"], {"a1": 0.0, "a2": 0.0}))
    bad = two.copy()
    bad.loc[0, "node_id"] = "zz"
    assert not bad.loc[0, "is_final"]
    with pytest.raises(TraceSchemaError, match="not in their plan_text"):
        build_pairs(bad)
    # a final reply written by a step after the plan (ingest keeps its own node id) counts in plan pairs only
    both = build_pairs(two, NODE_ACTIONS)
    assert set(both.loc[both["granularity"] == "node", "prompt"]) == {Q, Q + "\n" + '<agent id="a1" type="CoT" model="small"/>'}
    after = two.copy()
    after.loc[after["is_final"], "node_id"] = "final"
    pairs = build_pairs(after, NODE_ACTIONS)
    assert (pairs["granularity"] == "plan").sum() == 1
    assert set(pairs.loc[pairs["granularity"] == "node", "prompt"]) == {Q}


def test_free_form_plan_text_gives_plan_pairs_only():
    # ingested traces may describe a plan in free text: no prefix to compare nodes under
    df = table(run(COT_SMALL, {"a1": 1.0}), run(COT_LARGE, {"a1": 0.0}))
    df["plan_text"] = np.where(df["plan_text"] == COT_SMALL, "retrieve then answer", "answer directly")
    pairs = build_pairs(df)
    assert set(pairs["granularity"]) == {"plan"} and set(pairs["chosen"]) == {"retrieve then answer"}


def test_empty_table_gives_an_empty_pair_table():
    pairs = build_pairs(make_artifacts(1, 1).iloc[0:0])
    assert pairs.empty and list(pairs.columns) == list(PAIR_COLUMNS)


# formats and files -------------------------------------------------------------------------------
def test_read_pairs_round_trips_our_table(tmp_path):
    pairs = build_pairs(make_artifacts(6, 5, seed=9))
    for name in ("pairs.parquet", "pairs.jsonl"):
        write_table(pairs, tmp_path / name)
        back = read_pairs(tmp_path / name)
        pd.testing.assert_frame_equal(back, pairs, check_dtype=False)


def test_read_pairs_accepts_the_orchrm_dataset_format(tmp_path):
    plan_a, plan_b = COT_SMALL, COT_LARGE
    prefix = '<agent id="a1" type="WebSearch" queries="2" top_k="5"/>'
    rows = [
        {"input": Q, "chosen": plan_a, "rejected": plan_b, "source": "correct-over-incorrect"},
        {"input": Q, "chosen": plan_b, "rejected": SC, "source": "specialized-over-base"},
        {"input": Q + "\n" + prefix, "chosen": "<agent .../>\nanswer 4", "rejected": "<agent .../>\nanswer 5", "source": "intermediate"},
        {"input": "Another question?", "chosen": plan_a, "rejected": plan_b, "source": "correct-over-incorrect"},
        {"input": Q, "chosen": plan_a, "rejected": plan_b, "source": "correct-over-incorrect"},  # repeated
    ]
    path = tmp_path / "orchrm.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pairs = read_pairs(path, config=PairsConfig(prior_margin=0.4))
    assert list(pairs.columns) == list(PAIR_COLUMNS)
    assert len(pairs) == 4
    assert pairs["prompt"].tolist()[:3] == [r["input"] for r in rows[:3]]
    assert pairs["granularity"].tolist() == ["plan", "plan", "node", "plan"]
    assert pairs["margin"].tolist() == pytest.approx([1.0, 0.4, 1.0, 1.0])
    # the node pair's prompt carries a plan prefix but belongs to the same task (and split)
    assert pairs["task_id"].nunique() == 2 and pairs["task_id"].iloc[0] == pairs["task_id"].iloc[2]
    assert (pairs.groupby("task_id")["split"].nunique() == 1).all()
    assert pairs["pair_id"].is_unique


def test_read_pairs_fills_missing_ids_and_labels_like_missing_columns(tmp_path):
    rows = [
        {"prompt": Q, "chosen": COT_SMALL, "rejected": COT_LARGE, "task_id": "t1", "granularity": "plan",
         "chosen_artifact_id": "a1", "split": "train"},
        {"prompt": Q, "chosen": SC, "rejected": COT_LARGE, "task_id": None, "granularity": None,
         "chosen_artifact_id": None, "split": "train"},
    ]
    path = tmp_path / "partial.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pairs = read_pairs(path)
    derived = read_pairs(_jsonl(tmp_path / "bare.jsonl", [{k: r[k] for k in ("prompt", "chosen", "rejected")} for r in rows]))
    assert pairs["task_id"].tolist() == ["t1", derived["task_id"].iloc[1]]
    assert pairs["granularity"].tolist() == ["plan", "plan"]
    assert pairs["chosen_artifact_id"].iloc[0] == "a1"
    assert pairs["chosen_artifact_id"].iloc[1] == derived["chosen_artifact_id"].iloc[1]
    assert pairs["pair_id"].notna().all() and pairs["pair_id"].is_unique


def test_read_pairs_reads_a_file_a_frame_and_row_dicts_alike(tmp_path):
    rows = [
        {"prompt": Q, "chosen": COT_SMALL, "rejected": COT_LARGE, "margin": 0.25},
        {"prompt": Q + "\n" + '<agent id="a1" type="WebSearch" queries="2" top_k="5"/>',
         "chosen": "<agent .../>\nanswer 4", "rejected": "<agent .../>\nanswer 5", "margin": 0.5},
        {"prompt": "Another question?", "chosen": COT_SMALL, "rejected": SC, "margin": 1.0},
    ]
    from_file = read_pairs(_jsonl(tmp_path / "trl.jsonl", rows))
    for other in (read_pairs(pd.DataFrame(rows)), read_pairs(rows)):
        pd.testing.assert_frame_equal(other, from_file, check_dtype=False)
    assert from_file["margin"].tolist() == [0.25, 0.5, 1.0]  # a margin column is kept as given
    assert from_file["task_id"].iloc[0] == from_file["task_id"].iloc[1] != from_file["task_id"].iloc[2]
    assert from_file["domain"].tolist() == ["custom"] * 3


def test_read_pairs_of_zero_rows_is_an_empty_table_and_other_objects_are_refused():
    for empty in ([], pd.DataFrame(columns=["prompt", "chosen", "rejected"])):
        pairs = read_pairs(empty)
        assert pairs.empty and list(pairs.columns) == list(PAIR_COLUMNS)
    with pytest.raises(TraceSchemaError, match="pairs must be a pair table .*, not dict"):
        read_pairs({"prompt": "q"})
    with pytest.raises(TraceSchemaError, match=r"column 'prompt' must hold plain text; rows 0 do not"):
        read_pairs([{"prompt": [{"role": "user", "content": "q"}], "chosen": "a", "rejected": "b"}])


def test_ragged_arange_enumerates_each_rows_slots():
    owner, offset = ragged_arange(np.array([2, 0, 3, 1, 0]))
    assert list(zip(owner.tolist(), offset.tolist(), strict=True)) == [(0, 0), (0, 1), (2, 0), (2, 1), (2, 2), (3, 0)]
    left, right = within_group_pairs(np.array([7, 7, 7, 9, 9]))
    assert list(zip(left.tolist(), right.tolist(), strict=True)) == [(0, 1), (0, 2), (1, 2), (3, 4)]
    assert [len(a) for a in ragged_arange(np.array([], dtype=np.int64))] == [0, 0]


def test_read_pairs_refuses_fractional_token_counts(tmp_path):
    path = _jsonl(tmp_path / "t.jsonl", [{"prompt": Q, "chosen": "a", "rejected": "b", "collection_tokens": 1.7}])
    with pytest.raises(TraceSchemaError, match=r"'collection_tokens' must hold whole token counts; rows 0 hold 1.7"):
        read_pairs(path)


def _jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_read_pairs_refuses_a_table_without_preferences(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "a"}) + "\n")
    with pytest.raises(TraceSchemaError, match="not a pair table"):
        read_pairs(path)


def test_build_pairs_file_writes_atomically(tmp_path):
    artifacts = make_artifacts(5, 4, seed=6)
    write_table(artifacts, tmp_path / "a.parquet")
    pairs = build_pairs_file(tmp_path / "a.parquet", tmp_path / "p.parquet", PairsConfig())
    pd.testing.assert_frame_equal(read_table(tmp_path / "p.parquet"), pairs, check_dtype=False)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_cli_pairs(tmp_path, capsys):
    artifacts = make_artifacts(5, 4, seed=6)
    write_table(artifacts, tmp_path / "a.parquet")
    out = tmp_path / "p.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "orchrm.cli", "pairs", "--artifacts", str(tmp_path / "a.parquet"), "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    expected = build_pairs(artifacts)
    assert f"wrote {len(expected)} pairs" in done.stdout
    assert read_table(out)["pair_id"].tolist() == expected["pair_id"].tolist()
    # a missing input: exit code 2 and a message naming the file (in-process, same entry point)
    from orchrm.cli import main

    assert main(["pairs", "--artifacts", str(tmp_path / "nope.parquet"), "--out", str(out)]) == 2
    assert "nope.parquet" in capsys.readouterr().err


def test_cli_pairs_refuses_to_replace_its_input_or_to_read_an_empty_table(tmp_path, capsys):
    from orchrm.cli import main

    source = tmp_path / "a.parquet"
    write_table(make_artifacts(5, 4, seed=6), source)
    before = source.read_bytes()
    assert main(["pairs", "--artifacts", str(source), "--out", str(tmp_path / "." / "a.parquet")]) == 2
    assert "is also the input" in capsys.readouterr().err and source.read_bytes() == before
    write_table(make_artifacts(5, 4, seed=6).iloc[:0], tmp_path / "empty.parquet")
    assert main(["pairs", "--artifacts", str(tmp_path / "empty.parquet"), "--out", str(tmp_path / "p.parquet")]) == 2
    assert "has no rows: collect or ingest artifacts first" in capsys.readouterr().err
    assert not (tmp_path / "p.parquet").exists()
    (tmp_path / "afile").write_text("x")
    assert main(["pairs", "--artifacts", str(source), "--out", str(tmp_path / "afile" / "p.parquet")]) == 2
    err = capsys.readouterr().err
    assert "afile is a file, not a folder" in err and "Traceback" not in err
