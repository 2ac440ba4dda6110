"""The executor over the sandbox backend, on free-text tasks (generic domain) and any backend."""

import random

import pandas as pd
import pytest

from orchrm import MultiAgentExecutor
from orchrm.data.tables import ARTIFACT_COLUMNS
from orchrm.errors import ConfigError, PlanError
from orchrm.execution.backend import NodeOutput
from orchrm.execution.sandbox.engine import RESULTS_MARKER
from orchrm.execution.tasks.base import Task
from orchrm.plans import Plan
from orchrm.util.tokens import count_tokens

CHAIN = (
    '<agent id="a1" type="WebSearch" queries="2" top_k="3"/>\n'
    '<agent id="a2" type="SelfConsistency" model="small" k="3"/>\n'
    '<agent id="a3" type="Reflexion" model="large" iterations="2"/>\n'
    '<edge from="a1" to="a2"/>\n<edge from="a2" to="a3"/>'
)


def test_design_section_12_calls_run_as_written():
    executor = MultiAgentExecutor(agents=["math_parser", "strategy_selector", "calculator"], orchestrator="default")
    artifacts = executor.run(task="Solve: integral of x^2 from 0 to 1")
    assert list(artifacts.columns) == list(ARTIFACT_COLUMNS)
    finals = artifacts[artifacts.is_final]
    assert finals.groupby("plan_id").size().eq(1).all()
    assert finals.plan_id.nunique() == executor.num_plans
    assert set(artifacts.agent) <= {"CoT", "Debate", "Reflexion"}
    assert all('role="' in t for t in artifacts.plan_text)


def test_free_text_arithmetic_is_really_computed():
    executor = MultiAgentExecutor(seed=3)
    run = executor.run_plan("What is 12 * (3 + 4)?", '<agent id="a1" type="Reflexion" model="large" iterations="1"/>')
    assert run.answer == "84"
    assert run.quality is None  # no reference: quality is unknowable, not invented


def test_prefix_execution_runs_only_the_prefix_and_spends_only_its_tokens():
    executor = MultiAgentExecutor(seed=1)
    task = "What is 7 * 6 + 5?"
    full = executor.run_plan(task, CHAIN)
    prefix = executor.run_plan(task, CHAIN, stop_after_depth=1)
    assert [r["node_id"] for r in prefix.rows] == ["a1", "a2"]
    assert prefix.final is None
    # same seed, same outputs for the nodes that ran, and only their tokens
    for a, b in zip(prefix.rows, full.rows[:2], strict=True):
        assert a["content"] == b["content"] and a["prompt_tokens"] == b["prompt_tokens"]
    assert prefix.tokens == sum(r["prompt_tokens"] + r["completion_tokens"] for r in full.rows[:2]) < full.tokens


def test_same_seed_same_artifacts_and_repeat_gives_an_independent_run():
    executor = MultiAgentExecutor(seed=5)
    a = executor.run_plan("What is 123 * 45?", '<agent id="a1" type="SelfConsistency" model="small" k="7"/>').frame()
    b = executor.run_plan("What is 123 * 45?", '<agent id="a1" type="SelfConsistency" model="small" k="7"/>').frame()
    pd.testing.assert_frame_equal(a.drop(columns="created_at"), b.drop(columns="created_at"))
    c = executor.run_plan("What is 123 * 45?", '<agent id="a1" type="SelfConsistency" model="small" k="7"/>', repeat=1).frame()
    assert a.artifact_id.iloc[0] != c.artifact_id.iloc[0]


def test_tokens_are_counted_on_the_text_and_cost_is_tier_weighted():
    executor = MultiAgentExecutor(seed=2)
    run = executor.run_plan("What is 3 + 4 * 2?", CHAIN)
    for row in run.rows:
        produced = row["content"].split(RESULTS_MARKER)[0] if row["agent"] == "WebSearch" else row["content"]
        assert row["completion_tokens"] == count_tokens(produced) > 0
        assert row["prompt_tokens"] > 0
    weights = {"a1": 1.0, "a2": 1.0, "a3": executor.backend.cost_weight("large")}
    for row in run.rows:
        assert row["cost"] == pytest.approx((row["prompt_tokens"] + row["completion_tokens"]) * weights[row["node_id"]])


def test_more_samples_cost_more_tokens():
    executor = MultiAgentExecutor(seed=0)
    k3 = executor.run_plan("What is 9 * 9?", '<agent id="a1" type="SelfConsistency" model="small" k="3"/>')
    k9 = executor.run_plan("What is 9 * 9?", '<agent id="a1" type="SelfConsistency" model="small" k="9"/>')
    assert k9.tokens > 2 * k3.tokens


class _UppercaseBackend:
    """A minimal backend written for this test: proves the executor only uses the Backend protocol."""

    name = "uppercase"
    tiers = ("small", "large")

    def cost_weight(self, tier):
        return 2.0

    def run_node(self, task, node, parents, *, rng: random.Random, shared: dict):
        text = (parents[-1].content if parents else task.question).upper()
        return NodeOutput(node.id, node.agent, text, text, 1, count_tokens(text))

    def quality(self, task, output):
        return float(output.answer == task.reference)


def test_executor_runs_any_backend_object():
    executor = MultiAgentExecutor(backend=_UppercaseBackend())
    task = Task("t1", "custom", "hello there", reference="HELLO THERE")
    run = executor.run_plan(task, '<agent id="a" type="CoT" model="small"/><agent id="b" type="CoT" model="large"/><edge from="a" to="b"/>')
    assert run.answer == "HELLO THERE" and run.quality == 1.0
    assert run.cost == 2.0 * run.tokens


def test_plan_with_a_tier_the_backend_lacks_is_refused():
    plan = Plan.parse('<agent id="a" type="CoT" model="medium"/>', tiers=("small", "medium", "large"))
    with pytest.raises(ValueError, match="unknown to backend sandbox"):
        MultiAgentExecutor().run_plan("What is 1 + 1?", plan)


def test_run_refuses_a_plan_given_twice():
    executor = MultiAgentExecutor()
    text = '<agent id="a1" type="CoT" model="small"/>'
    with pytest.raises(PlanError, match=r'plan [0-9a-f]{12} \(<agent id="a1" .*\) is given 2 times: .* run each plan once'):
        executor.run("What is 2 + 3?", plans=[text, Plan.parse(text)])


@pytest.mark.parametrize("n", [0, -1])
def test_fewer_than_one_candidate_plan_is_refused(n):
    with pytest.raises(ConfigError, match=rf"num_plans must be at least 1, got {n}"):
        MultiAgentExecutor().run("What is 2 + 3?", num_plans=n)
    with pytest.raises(ConfigError, match=rf"num_plans must be at least 1, got {n}"):
        MultiAgentExecutor(num_plans=n)


def test_free_text_arithmetic_beyond_a_float_runs_as_a_generic_task():
    """DESIGN §12: free text is routed to a domain or the generic one, never refused."""
    executor = MultiAgentExecutor(num_plans=2)
    text = "What is 1" + "0" * 400 + " + 1?"
    assert executor.as_task(text).metadata["generic"]
    artifacts = executor.run(text)
    assert artifacts.is_final.sum() == 2 and artifacts.quality.isna().all()


@pytest.mark.parametrize(
    "text",
    [
        "What is 1e5 + 1?",  # read from part of it: 5 + 1 = 6
        "Is 1e300 * 1e300 big?",  # an infinite answer
        "What is " + "+".join(["1"] * 3000) + "?",  # too deep for Python's parser
    ],
)
def test_generic_tasks_give_no_answer_rather_than_a_wrong_one_or_a_crash(text):
    executor = MultiAgentExecutor(num_plans=2)
    assert executor.as_task(text).metadata["generic"]
    finals = executor.run(text).query("is_final")
    assert len(finals) == 2 and finals["answer"].isna().all()


def test_signed_arithmetic_is_routed_to_math():
    task = MultiAgentExecutor(num_plans=1).as_task("What is 5 * -2?")
    assert task.domain == "math" and task.metadata["answer"] == -10.0


def test_fewer_distinct_plans_than_asked_for_are_run_with_a_warning(caplog):
    executor = MultiAgentExecutor(agents=["calculator"])
    with caplog.at_level("WARNING", logger="orchrm.execution.executor"):
        plans = executor.sample_plans("What is 2 + 3?", 5)
    assert 0 < len(plans) < 5 and len({p.plan_id for p in plans}) == len(plans)
    assert f"only {len(plans)} distinct plans found for the roles ['calculator'] (asked for 5)" in caplog.text


@pytest.mark.parametrize(("text", "answer"), [("Compute 2 ^ 3 in total", "8"), ("What is 2 ^ 10 bytes?", "1024")])
def test_generic_arithmetic_followed_by_a_word_is_computed(text, answer):
    executor = MultiAgentExecutor(num_plans=2)
    assert executor.as_task(text).metadata["generic"]
    finals = executor.run(text).query("is_final")
    assert (finals["answer"] == answer).any()  # a tier may slip; some candidate computes it
