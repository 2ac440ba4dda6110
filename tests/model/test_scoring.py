"""orchrm.model.scoring: the tokens a reward model reads, one count for serving and the evaluation.

A joint model encodes the prompt again with every action; a shared-prompt model encodes each
distinct prompt once. Serving used to count the prompt once for both (too few for a joint model).
"""

from __future__ import annotations

import pandas as pd
import pytest

from orchrm import BradleyTerryModel
from orchrm.config import EvaluateConfig, GatesConfig
from orchrm.evaluation.harness import evaluate
from orchrm.evaluation.pool import CandidatePool
from orchrm.execution.executor import MultiAgentExecutor
from orchrm.execution.tasks import load_tasks
from orchrm.model.scoring import scoring_tokens
from orchrm.ops.serving import TestTimeScalableOrchestrator
from tests.fixtures.tables import PLANS

QUESTIONS = ("Who founded the city of Avalon?", "Mia has 12 pears and buys 30 more. How many pears does Mia have now?")
CANDIDATES = tuple(PLANS.values())[:4]


@pytest.fixture(scope="module", params=["joint", "shared_prompt"])
def model(request, tiny_model_kwargs, pairs) -> BradleyTerryModel:
    m = BradleyTerryModel(architecture=request.param, **tiny_model_kwargs)
    m.fit_tokenizer([*pairs["prompt"], *pairs["chosen"], *pairs["rejected"], *QUESTIONS])
    return m.eval()


def by_hand(model: BradleyTerryModel, question: str, plans) -> int:
    """Every plan's tokens, and the question's once per plan (joint) or once in all (shared)."""
    (q,) = model.tokenize([question])
    reads = len(plans) if model.config.architecture == "joint" else 1
    return reads * len(q) + sum(len(ids) for ids in model.tokenize(list(plans)))


def test_a_joint_model_reads_the_prompt_with_every_action_a_shared_prompt_model_once(model):
    read = scoring_tokens(model, QUESTIONS[0], CANDIDATES)
    assert read.total == by_hand(model, QUESTIONS[0], CANDIDATES)
    (q,) = model.tokenize([QUESTIONS[0]])
    plans = [len(ids) for ids in model.tokenize(list(CANDIDATES))]
    if model.shared_prompt:
        assert read.per_action.tolist() == plans and read.per_prompt.tolist() == [len(q)] * len(plans)
    else:
        assert read.per_action.tolist() == [len(q) + n for n in plans] and read.per_prompt.tolist() == [0] * len(plans)


def test_each_distinct_prompt_is_paid_once_by_a_shared_prompt_model(model):
    prompts = [QUESTIONS[0], QUESTIONS[1], QUESTIONS[0]]
    read = scoring_tokens(model, prompts, CANDIDATES[:3])
    q0, q1 = (len(ids) for ids in model.tokenize(list(QUESTIONS)))
    plans = sum(len(ids) for ids in model.tokenize(list(CANDIDATES[:3])))
    assert read.total == plans + (q0 + q1 if model.shared_prompt else 2 * q0 + q1)


def test_one_prompt_per_action_or_one_for_all():
    with pytest.raises(ValueError, match="got 2 prompts for 1 actions; give one prompt, or one per action"):
        scoring_tokens(object(), ["a", "b"], ["c"])


def test_an_ensemble_reads_every_text_once_per_member(model, tiny_model_kwargs):
    ensemble = BradleyTerryModel(architecture=model.config.architecture, **tiny_model_kwargs, members=3)
    for k in range(3):
        ensemble.set_member(k, model)
    one, three = scoring_tokens(model, QUESTIONS[0], CANDIDATES), scoring_tokens(ensemble, QUESTIONS[0], CANDIDATES)
    assert three.total == 3 * one.total == 3 * by_hand(model, QUESTIONS[0], CANDIDATES)
    assert three.per_action.tolist() == [3 * n for n in one.per_action] and three.per_prompt.tolist() == [3 * n for n in one.per_prompt]


def test_serving_counts_the_tokens_the_model_reads(model):
    executor = MultiAgentExecutor(orchestrator="default")
    (task,) = load_tasks("math", 1, seed=0)
    _, ranked, tokens = TestTimeScalableOrchestrator(reward_model=model, num_candidates=4, executor=executor).rank(task)
    assert tokens == by_hand(model, task.question, [c.text for c in ranked])


def test_the_evaluation_charges_the_reward_model_selector_the_same_count(model):
    rows = [
        {"pool_seed": 0, "task_id": f"t{t}", "domain": "math", "question": q, "candidate": i, "plan_id": f"t{t}-p{i}",
         "plan_text": plan, "plan_chars": len(plan), "answer": "1", "answer_key": "1", "quality": 1.0, "confidence": 0.5,
         "tokens": 10, "cost": 10.0, "expected_quality": 1.0, "expected_cost": 10.0}
        for t, q in enumerate(QUESTIONS) for i, plan in enumerate(CANDIDATES)
    ]
    config = EvaluateConfig(candidates=4, best_of=(2, 4), pool_seeds=(0,), repeats=0, bootstrap=0, gates=GatesConfig(best_of=4))
    report = evaluate(model, pairs=pd.DataFrame(), pool=CandidatePool(pd.DataFrame(rows)), config=config)
    for n in (2, 4):
        expected = sum(by_hand(model, q, CANDIDATES[:n]) for q in QUESTIONS) / len(QUESTIONS)
        assert report.metrics[f"tokens_scoring.best_of_{n}.reward_model"] == pytest.approx(expected)
