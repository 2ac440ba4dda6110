"""plan_cost: the one rough cost of a plan, the cost term of every domain's heuristic.

Two copies used to disagree: the QA domains charged a CoT 0.3 runs (like a search), math charged a
WebSearch a full run. A CoT is one reasoning run; a search costs a fraction of the reasoner that
reads it, in every domain, as the sandbox's own token counts show.
"""

from __future__ import annotations

import importlib
import math

import pytest

from orchrm.execution.executor import MultiAgentExecutor
from orchrm.execution.tasks import load_tasks
from orchrm.execution.tasks.base import LARGE_TIER_WEIGHT, SEARCH_RUNS, plan_cost, plan_heuristic
from orchrm.plans import Plan

SEARCH = '<agent id="s" type="WebSearch" queries="2" top_k="4"/>'
SEARCH_THEN_COT = Plan.parse(f'{SEARCH}<agent id="a" type="CoT" model="small"/><edge from="s" to="a"/>')


@pytest.mark.parametrize(
    ("node", "runs"),
    [
        ('<agent id="a" type="CoT" model="small"/>', 1.0),
        ('<agent id="a" type="CoT" model="large"/>', LARGE_TIER_WEIGHT),
        ('<agent id="a" type="SelfConsistency" model="small" k="5"/>', 5.0),
        ('<agent id="a" type="Debate" model="small" agents="3" rounds="2"/>', 9.0),
        ('<agent id="a" type="Reflexion" model="large" iterations="2"/>', 3 * LARGE_TIER_WEIGHT),
        (SEARCH, SEARCH_RUNS),
    ],
)
def test_a_plan_costs_its_reasoning_runs_weighted_by_tier(node, runs):
    assert plan_cost(Plan.parse(node)) == pytest.approx(runs)


@pytest.mark.parametrize("domain", ["math", "multihop", "webqa", "code"])
def test_a_search_costs_less_than_a_third_of_the_chain_of_thought_reading_it(domain):
    executor = MultiAgentExecutor(orchestrator="default")
    search = cot = 0
    for task in load_tasks(domain, 4, seed=0):
        rows = {r["node_id"]: r for r in executor.run_plan(task, SEARCH_THEN_COT, seed=0).rows}
        search += rows["s"]["prompt_tokens"] + rows["s"]["completion_tokens"]
        cot += rows["a"]["prompt_tokens"] + rows["a"]["completion_tokens"]
    assert search < SEARCH_RUNS * cot


@pytest.mark.parametrize(("domain", "weight"), [("math", 0.03), ("multihop", 0.04), ("webqa", 0.04)])
def test_every_domain_heuristic_charges_the_one_plan_cost(domain, weight, monkeypatch):
    heuristic = plan_heuristic(domain)
    (task,) = load_tasks(domain, 1, seed=0)
    features = heuristic.features(task.question)
    charged = heuristic.score(features, SEARCH_THEN_COT)
    monkeypatch.setattr(importlib.import_module(f"orchrm.execution.tasks.{domain}"), "plan_cost", lambda plan: 0.0)
    free = heuristic.score(features, SEARCH_THEN_COT)
    assert free - charged == pytest.approx(weight * math.log1p(SEARCH_RUNS + 1.0))
