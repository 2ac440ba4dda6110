"""Cost-aware best-of-N: reward - λ·cost, λ chosen on validation tasks for a token budget, and the
orchestrator ranking by it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from orchrm.errors import ConfigError
from orchrm.evaluation.cost_aware import (
    choose_cost_weight,
    cost_weight_curve,
    cost_weight_picks,
    normalised_rewards,
    plan_costs,
)
from orchrm.evaluation.pool import CandidatePool
from orchrm.execution.executor import MultiAgentExecutor
from orchrm.execution.tasks import load_tasks
from orchrm.execution.tasks.base import plan_cost
from orchrm.ops.serving import TestTimeScalableOrchestrator
from orchrm.plans import Plan

CHEAP = '<agent id="a" type="CoT" model="small"/>'
MID = '<agent id="a" type="SelfConsistency" model="small" k="3"/>'
DEAR = '<agent id="a" type="SelfConsistency" model="large" k="5"/>'


def test_plan_costs_are_the_heuristics_cost_of_each_text():
    assert plan_costs([CHEAP, MID, DEAR, CHEAP]).tolist() == [1.0, 3.0, 25.0, 1.0]


def hand_frame() -> pd.DataFrame:
    """Two tasks, three candidates each: the dearest plan is the model's favourite and the best."""
    rows = []
    for t, qualities in enumerate(([0.2, 0.6, 0.9], [0.5, 0.5, 0.6])):
        for i, (plan, reward, tokens) in enumerate(zip((CHEAP, MID, DEAR), (0.0, 1.0, 2.0), (100, 300, 2500), strict=True)):
            rows.append({"pool_seed": 0, "task_id": f"t{t}", "domain": "math", "question": f"q{t}", "candidate": i,
                         "plan_id": f"t{t}-p{i}", "plan_text": plan, "plan_chars": len(plan), "answer": "1", "answer_key": "1",
                         "quality": qualities[i], "confidence": 0.5, "tokens": tokens, "cost": float(tokens),
                         "expected_quality": qualities[i], "expected_cost": float(tokens), "reward": reward})
    frame = pd.DataFrame(rows)
    return frame.assign(plan_cost=plan_costs(list(frame["plan_text"])))


def test_a_larger_weight_trades_quality_for_tokens():
    # scores at weight w: CHEAP 0 - w, MID 1 - 3w, DEAR 2 - 25w
    curve = cost_weight_curve(hand_frame(), 3, weights=(0.0, 0.05, 0.2, 1.0)).set_index("weight")
    assert curve.loc[0.0, "tokens"] == 2500 and curve.loc[0.0, "expected"] == pytest.approx(0.75)  # the reward alone
    assert curve.loc[0.05, "tokens"] == 300 and curve.loc[0.05, "expected"] == pytest.approx(0.55)  # DEAR 0.75 < MID 0.85
    assert curve.loc[0.2, "tokens"] == 300  # MID 0.4 > CHEAP -0.2
    assert curve.loc[1.0, "tokens"] == 100 and curve.loc[1.0, "expected"] == pytest.approx(0.35)
    assert curve["tokens"].is_monotonic_decreasing
    # best-of-2 sees only the first two candidates
    picks = cost_weight_picks(hand_frame(), 2, weights=(0.0,))
    assert set(picks["plan_cost"]) == {3.0}


def test_cost_weight_picks_names_what_the_frame_lacks():
    with pytest.raises(ConfigError, match="no plan_cost column"):
        cost_weight_picks(hand_frame().drop(columns="plan_cost"), 3)
    with pytest.raises(ConfigError, match="cost_weight must be a finite number >= 0"):
        cost_weight_picks(hand_frame(), 3, weights=(-1.0,))


class TableModel:
    """A reward model as the evaluation takes one (any object with ``score``): rewards from a table of
    plan texts, with the training-reward statistics a BradleyTerryModel records."""

    reward_mean, reward_std = 1.0, 2.0

    def score(self, prompts, actions, **_):
        import torch

        return torch.tensor([{CHEAP: 1.0, MID: 3.0, DEAR: 5.0}[a] for a in actions])


def test_choose_cost_weight_takes_the_best_quality_within_the_budget():
    pool = CandidatePool(hand_frame().drop(columns=["reward", "plan_cost"]))
    model = TableModel()
    assert normalised_rewards(model, np.array([1.0, 3.0, 5.0])).tolist() == [0.0, 1.0, 2.0]
    rich = choose_cost_weight(model, pool, budget_tokens=10_000, n=3)
    assert rich.weight == 0.0 and rich.tokens == 2500 and rich.within_budget
    tight = choose_cost_weight(model, pool, budget_tokens=500, n=3)
    assert tight.tokens <= 500 and tight.quality == pytest.approx(0.55) and tight.weight > 0
    # the smallest weight of the best quality: the curve at that weight is the pick
    row = tight.curve.set_index("weight").loc[tight.weight]
    assert row["tokens"] == tight.tokens
    poor = choose_cost_weight(model, pool, budget_tokens=50, n=3)
    assert not poor.within_budget and poor.tokens == 100
    with pytest.raises(ConfigError, match="budget_tokens must be a number > 0"):
        choose_cost_weight(model, pool, budget_tokens=0)


def test_the_orchestrator_ranks_by_reward_minus_weighted_cost(trained_model):
    executor = MultiAgentExecutor(orchestrator="default")
    (task,) = load_tasks("math", 1, seed=0)
    plain = TestTimeScalableOrchestrator(reward_model=trained_model, num_candidates=8, executor=executor, seed=0)
    _, by_reward, _ = plain.rank(task)
    assert [c.score for c in by_reward] == sorted((c.score for c in by_reward), reverse=True)
    assert all(c.cost is None and c.reward == c.score for c in by_reward)

    frugal = TestTimeScalableOrchestrator(reward_model=trained_model, num_candidates=8, executor=executor, seed=0,
                                          cost_weight=100.0)
    _, by_cost, _ = frugal.rank(task)
    # the same candidates; at a weight this large the cheapest plan wins
    assert {c.text for c in by_cost} == {c.text for c in by_reward}
    assert by_cost[0].cost == min(plan_cost(Plan.parse(c.text)) for c in by_reward)
    for c in by_cost:
        z = (c.reward - trained_model.reward_mean) / trained_model.reward_std
        assert c.score == pytest.approx(z - 100.0 * c.cost, rel=1e-6)
    run = frugal.execute(task)
    assert run.plan.render() == by_cost[0].text
    with pytest.raises(ValueError, match="cost_weight must be a finite number >= 0"):
        TestTimeScalableOrchestrator(reward_model=trained_model, cost_weight=-0.5)
