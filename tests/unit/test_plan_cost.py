"""plan_cost: the one rough cost of a plan, the cost term of every domain's heuristic.

The heuristics keep the weights they were tuned with: math charges a search a full run, the QA
domains charge a CoT like a search (0.3 runs). Both copies of the function used to spell this out;
now one function takes the two weights.
"""

from __future__ import annotations

import importlib
import math

import pytest

from orchrm.execution.tasks import load_tasks
from orchrm.execution.tasks.base import LARGE_TIER_WEIGHT, plan_cost, plan_heuristic
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
        (SEARCH, 0.3),
    ],
)
def test_a_plan_costs_its_reasoning_runs_weighted_by_tier(node, runs):
    assert plan_cost(Plan.parse(node)) == pytest.approx(runs)


def test_the_light_nodes_cost_what_the_caller_says():
    assert plan_cost(SEARCH_THEN_COT, search_runs=1.0) == pytest.approx(2.0)
    assert plan_cost(SEARCH_THEN_COT, cot_runs=0.3) == pytest.approx(0.6)


@pytest.mark.parametrize(
    ("domain", "weight", "runs"),
    [("math", 0.03, 1.0 + 1.0), ("multihop", 0.04, 0.3 + 0.3), ("webqa", 0.04, 0.3 + 0.3)],
)
def test_every_domain_heuristic_charges_the_one_plan_cost_with_its_tuned_weights(domain, weight, runs, monkeypatch):
    heuristic = plan_heuristic(domain)
    (task,) = load_tasks(domain, 1, seed=0)
    features = heuristic.features(task.question)
    charged = heuristic.score(features, SEARCH_THEN_COT)
    monkeypatch.setattr(importlib.import_module(f"orchrm.execution.tasks.{domain}"), "plan_cost", lambda plan, **_: 0.0)
    free = heuristic.score(features, SEARCH_THEN_COT)
    assert free - charged == pytest.approx(weight * math.log1p(runs))
