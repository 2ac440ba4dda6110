"""Plentiful intermediate pairs (issue 17): the branch collection mode and plan-prefix actions.

``collect(mode="branch")`` runs only plan prefixes, many alternatives per shared prefix;
``PairsConfig(intermediate_action="plan_prefix")`` turns their artifacts into pairs a plan scorer
reads (question, sub-plan). The sandbox tests run real collections (math and multihop: fast).
"""

from __future__ import annotations

import pandas as pd
import pytest

from orchrm.config import CollectConfig, PairsConfig, config_from_dict
from orchrm.data.pairs import PairwiseComparator
from orchrm.data.tables import PAIR_COLUMNS, artifacts_frame
from orchrm.errors import ConfigError
from orchrm.execution.collect import branch_plans, collect, prefix_text
from orchrm.execution.tasks import load_tasks
from orchrm.model.texts import subplan_text
from orchrm.plans import Plan
from tests.fixtures.tables import PLANS, execution_rows

Q = "Tom has 7 apples and eats 3. How many are left?"
DOMAINS = ("math", "multihop")
SHARES = {"base": 0.5, "specialized": 0.5}


def plan(*nodes: tuple[str, str, dict], edges: tuple[tuple[str, str], ...] = ()) -> str:
    return Plan.build([{"id": i, "agent": a, "params": p} for i, a, p in nodes], edges).render()


def run(plan_text: str, qualities: dict, *, task_id: str = "t1", run_id: str = "r1") -> list[dict]:
    return execution_rows(task_id=task_id, question=Q, domain="math", plan_text=plan_text, orchestrator="base",
                          qualities=qualities, run_id=run_id)


def prefix_pairs(artifacts: pd.DataFrame, **kwargs) -> pd.DataFrame:
    cfg = PairsConfig(sources=("intermediate",), intermediate_action="plan_prefix", max_pairs_per_task=None, **kwargs)
    return PairwiseComparator(config=cfg).build_pairs(artifacts)


def tokens(df: pd.DataFrame) -> int:
    return int((df["prompt_tokens"] + df["completion_tokens"]).sum())


@pytest.fixture(scope="module")
def branch_table() -> pd.DataFrame:
    return collect(domains=DOMAINS, tasks_per_domain=4, mode="branch", branches=12, seed=3, workers=1, progress=False)


@pytest.fixture(scope="module")
def full_table() -> pd.DataFrame:
    return collect(domains=DOMAINS, tasks_per_domain=4, plans_per_task=8, seed=3, workers=1, progress=False)


# the branch collection on the sandbox --------------------------------------------------------------
def test_branch_mode_gives_many_prefix_pairs_per_task_for_fewer_tokens_per_pair_than_full_rollouts(branch_table, full_table):
    pairs = prefix_pairs(branch_table)
    per_task = pairs.groupby("task_id").size().reindex(branch_table["task_id"].unique(), fill_value=0)
    assert per_task.mean() >= 5 and (per_task >= 1).all()
    # only first steps ran: no artifact below depth 0
    assert (branch_table["depth"] == 0).all()
    full = PairwiseComparator(config=PairsConfig(sources=("correct-over-incorrect",), max_pairs_per_task=None)).build_pairs(full_table)
    branch_per_pair = tokens(branch_table) / len(pairs)
    full_per_pair = tokens(full_table) / len(full)
    assert branch_per_pair < full_per_pair / 2, (branch_per_pair, full_per_pair)


def test_branch_pairs_never_cross_tasks(branch_table):
    task_of = branch_table.set_index("artifact_id")["task_id"]
    for action in ("plan_prefix", "node"):
        cfg = PairsConfig(sources=("intermediate",), intermediate_action=action, max_pairs_per_task=None)
        pairs = PairwiseComparator(config=cfg).build_pairs(branch_table)
        assert len(pairs)
        assert (task_of.loc[pairs["chosen_artifact_id"]].to_numpy() == pairs["task_id"].to_numpy()).all()
        assert (task_of.loc[pairs["rejected_artifact_id"]].to_numpy() == pairs["task_id"].to_numpy()).all()
        assert pairs.groupby("task_id")["split"].nunique().eq(1).all()


def test_branch_mode_is_deterministic_for_a_seed(branch_table):
    again = collect(domains=DOMAINS, tasks_per_domain=4, mode="branch", branches=12, seed=3, workers=2, progress=False)
    other = collect(domains=DOMAINS, tasks_per_domain=4, mode="branch", branches=12, seed=4, workers=1, progress=False)
    drop = ["created_at"]
    pd.testing.assert_frame_equal(branch_table.drop(columns=drop), again.drop(columns=drop))
    pd.testing.assert_frame_equal(prefix_pairs(branch_table), prefix_pairs(again))
    assert set(other["artifact_id"]).isdisjoint(branch_table["artifact_id"])


def test_branch_alternatives_share_their_prefix_and_differ_in_the_next_step():
    task = load_tasks("multihop", 1, seed=5)[0]
    runs = branch_plans(task, branches=6, depth=1, seed=5, shares=SHARES)
    plan_ids = [b.plan.plan_id for b in runs]
    assert len(plan_ids) == len(set(plan_ids))  # every plan runs once
    deeper = [b for b in runs if b.stop_after_depth == 1]
    assert all(b.plan.max_depth >= b.stop_after_depth for b in runs)
    # level 0 took six distinct first steps; level 1 adds alternatives below them, never a new first step
    assert len({prefix_text(b.plan, 0) for b in runs}) == 6
    assert deeper, "some first step continues, so level 1 branches it"
    by_state: dict[str, list[str]] = {}
    for b in deeper:
        by_state.setdefault(prefix_text(b.plan, 0), []).append(prefix_text(b.plan, 1))
    assert any(len(steps) >= 2 for steps in by_state.values())
    assert all(len(steps) == len(set(steps)) <= 6 for steps in by_state.values())
    # depth 0 alone: exactly `branches` plans with distinct first steps, all stopped at depth 0
    flat = branch_plans(task, branches=6, depth=0, seed=5, shares=SHARES)
    assert len(flat) == 6 and len({prefix_text(b.plan, 0) for b in flat}) == 6
    assert {b.stop_after_depth for b in flat} == {0} and {b.orchestrator for b in flat} == {"base", "specialized"}


def test_branch_depth_one_pairs_compare_next_steps_under_one_prefix():
    artifacts = collect(domains=["multihop"], tasks_per_domain=2, mode="branch", branches=6, branch_depth=1, seed=5,
                        workers=1, progress=False)
    assert set(artifacts["depth"]) == {0, 1}
    pairs = prefix_pairs(artifacts)
    deep = pairs[pairs["chosen"].str.count("<agent ") == 2]
    assert len(deep)
    for row in deep.itertuples():  # both sub-plans of a depth-1 pair start with the same first step
        chosen, rejected = Plan.parse(row.chosen), Plan.parse(row.rejected)
        assert prefix_text(chosen, 0) == prefix_text(rejected, 0) and chosen.render() != rejected.render()


def test_branch_mode_refuses_settings_that_contradict_it():
    with pytest.raises(ConfigError, match="set branch_depth"):
        collect(domains=["math"], tasks_per_domain=1, mode="branch", stop_after_depth=0, workers=1, progress=False)
    with pytest.raises(ConfigError, match="branches >= 2"):
        collect(domains=["math"], tasks_per_domain=1, mode="branch", branches=1, workers=1, progress=False)
    with pytest.raises(ConfigError, match="mode 'tree' is unknown"):
        collect(domains=["math"], tasks_per_domain=1, mode="tree", workers=1, progress=False)
    with pytest.raises(ConfigError, match="collect.mode"):
        config_from_dict({"collect": {"mode": "tree"}})
    assert CollectConfig(mode="branch", branches=4).branch_depth == 0


def test_cli_collect_branch_mode(tmp_path, capsys):
    from orchrm.cli import main
    from orchrm.data.tables import read_table

    out = tmp_path / "prefixes.parquet"
    assert main(["collect", "--domain", "math", "--tasks", "2", "--mode", "branch", "--branches", "5", "--workers", "1",
                 "--quiet", "--out", str(out)]) == 0
    df = read_table(out)
    assert df.groupby("task_id")["plan_id"].nunique().eq(5).all() and (df["depth"] == 0).all()
    assert "plans ran a prefix only" in capsys.readouterr().out


# plan-prefix actions ----------------------------------------------------------------------------------
def test_plan_prefix_pairs_score_sub_plans_under_the_question():
    two_step = PLANS["cot_then_reflexion"]  # a1 CoT small -> a2 Reflexion
    df = artifacts_frame(run(two_step, {"a1": 1.0, "a2": 0.0}) + run(PLANS["sc_small"], {"a1": 0.0}))
    pairs = prefix_pairs(df)
    assert len(pairs) == 1 and list(pairs.columns) == list(PAIR_COLUMNS)
    pair = pairs.iloc[0]
    assert pair["prompt"] == Q  # no prefix in the prompt: the action carries it
    assert pair["chosen"] == PLANS["cot_small"] and pair["rejected"] == PLANS["sc_small"]
    assert pair["granularity"] == "node" and pair["source"] == "intermediate" and pair["margin"] == pytest.approx(1.0)
    depth0 = df["node_id"] == "a1"
    assert pair["collection_tokens"] == tokens(df[depth0])


def test_a_prefix_run_several_times_counts_once_with_its_mean_quality():
    df = artifacts_frame(
        run(PLANS["cot_then_reflexion"], {"a1": 1.0, "a2": None})
        + run(PLANS["cot_then_sc"], {"a1": 0.5, "a2": None})  # the same first step, another continuation
        + run(PLANS["cot_large"], {"a1": 0.0})
    )
    pairs = prefix_pairs(df)
    assert len(pairs) == 1
    assert pairs.iloc[0]["chosen"] == PLANS["cot_small"] and pairs.iloc[0]["margin"] == pytest.approx(0.75)
    assert pairs.iloc[0]["collection_tokens"] == tokens(df[df["node_id"] == "a1"])
    # the same first step in two runs of one plan is one sub-plan: nothing to compare
    alone = artifacts_frame(run(PLANS["cot_small"], {"a1": 1.0}, run_id="r1") + run(PLANS["cot_small"], {"a1": 0.0}, run_id="r2"))
    assert prefix_pairs(alone).empty


def test_plan_prefix_pairs_keep_the_same_state_rule():
    a = PLANS["search_then_cot"]
    b = PLANS["search_then_debate"]  # the same WebSearch first, then another reasoner
    other_prefix = plan(("a1", "WebSearch", {"queries": 1, "top_k": 2}), ("a2", "CoT", {"model": "large"}), edges=(("a1", "a2"),))
    df = artifacts_frame(run(a, {"a1": None, "a2": 1.0}) + run(b, {"a1": None, "a2": 0.0}) + run(other_prefix, {"a1": None, "a2": 0.5}))
    pairs = prefix_pairs(df)
    # depth-1 nodes compare only under the identical first step; a sink's sub-plan is its plan
    assert [(p.chosen, p.rejected) for p in pairs.itertuples()] == [(a, b)]
    # pairs of other tasks never mix in
    df2 = pd.concat([df, artifacts_frame(run(b, {"a1": None, "a2": 1.0}, task_id="t2"))], ignore_index=True)
    assert prefix_pairs(df2)["task_id"].tolist() == ["t1"]


def test_sub_plans_renumber_ids_so_the_same_steps_read_the_same():
    fan_in = Plan.build(
        [{"id": "s", "agent": "WebSearch", "params": {"queries": 1, "top_k": 2}},
         {"id": "c", "agent": "CoT", "params": {"model": "small"}},
         {"id": "v", "agent": "Debate", "params": {"model": "small", "agents": 2, "rounds": 1}}],
        [("s", "v"), ("c", "v")],
    )
    assert subplan_text(fan_in, "c", set()) == PLANS["cot_small"]
    whole = Plan.parse(subplan_text(fan_in, "v", {"s", "c"}))
    assert [n.id for n in whole.nodes] == ["a1", "a2", "a3"] and whole.shape() == fan_in.shape()


def test_plan_prefix_actions_are_the_default_and_node_actions_are_asked_for():
    """The default pairs are what the plan scorer reads (issue 24: one set of defaults)."""
    df = artifacts_frame(run(PLANS["cot_then_reflexion"], {"a1": 1.0, "a2": 0.0}) + run(PLANS["sc_small"], {"a1": 0.0}))
    assert PairsConfig().intermediate_action == "plan_prefix"
    pairs = PairwiseComparator(sources=["intermediate"]).build_pairs(df)
    assert pairs.iloc[0]["chosen"] == '<agent id="a1" type="CoT" model="small"/>'  # a plan of its own, no output
    node = PairwiseComparator(config=PairsConfig(sources=("intermediate",), intermediate_action="node")).build_pairs(df)
    assert node.iloc[0]["chosen"].startswith('<agent id="a1" type="CoT" model="small"/>\n')  # node line + content
