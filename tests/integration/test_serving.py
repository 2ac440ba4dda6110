"""Serving: best-of-N and step-by-step orchestration under a loaded reward model, and the
registered pyfunc over HTTP (`mlflow models serve`), the reward-model server RL loops call."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import torch

from orchrm.ops import tracking
from tests.integration.mlflow_server import running_mlflow
from tests.integration.test_registry import Store, build_store

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    import mlflow

    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        before = mlflow.get_tracking_uri()
        yield build_store(tmp_path_factory.mktemp("serving"))
        mlflow.set_tracking_uri(before)


@pytest.fixture(scope="module")
def executor():
    from orchrm import MultiAgentExecutor

    return MultiAgentExecutor(orchestrator="default", seed=3)


@pytest.fixture(scope="module")
def math_task():
    from orchrm.execution.tasks.base import load_tasks

    return load_tasks("math", 1, seed=11)[0]


# --------------------------------------------------------------------------------------------
# best-of-N


def test_design_section_12_best_of_n_runs_as_written(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from orchrm import BradleyTerryModel, TestTimeScalableOrchestrator

    store.good.save("orchrm_reward_model.pt")
    model = BradleyTerryModel.load("orchrm_reward_model.pt")
    orch = TestTimeScalableOrchestrator(reward_model=model, num_candidates=5)
    result = orch.execute(task="Answer: what is the capital of France?")
    print(result.score)
    assert isinstance(result.score, float)
    assert len(result.candidates) == 5


def test_best_of_n_scores_every_candidate_and_executes_only_the_best(store, executor, math_task):
    from orchrm import TestTimeScalableOrchestrator

    orch = TestTimeScalableOrchestrator(reward_model=store.good, num_candidates=5, executor=executor)
    result = orch.execute(task=math_task)
    texts = [c.plan.render() for c in result.candidates]
    rewards = store.good.score(math_task.question, texts).tolist()
    assert [c.score for c in result.candidates] == rewards == sorted(rewards, reverse=True)
    assert result.plan == result.candidates[0].plan and result.score == max(rewards)
    assert {r["plan_id"] for r in result.run.rows} == {result.plan.plan_id}  # only the best ran
    assert result.quality is not None and 0.0 <= result.quality <= 1.0  # the task has a reference
    assert result.answer == result.run.answer
    assert result.execution_tokens == result.run.tokens > 0
    assert result.scoring_tokens > 0 and result.tokens == result.scoring_tokens + result.execution_tokens


def test_best_of_n_loads_the_champion_by_alias(store, executor, math_task):
    from orchrm import TestTimeScalableOrchestrator

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", tracking.tracking_uri(store.config))
        orch = TestTimeScalableOrchestrator(reward_model="models:/orchrm-reward@champion", num_candidates=4, executor=executor)
    direct = TestTimeScalableOrchestrator(reward_model=store.good, num_candidates=4, executor=executor)
    assert [c.score for c in orch.rank(math_task)[1]] == [c.score for c in direct.rank(math_task)[1]]


def test_free_text_tasks_have_no_quality(store, executor):
    from orchrm import TestTimeScalableOrchestrator

    result = TestTimeScalableOrchestrator(reward_model=store.good, num_candidates=3, executor=executor).execute(
        task="Answer: what is the capital of France?"
    )
    assert result.quality is None


# --------------------------------------------------------------------------------------------
# step by step


def test_reward_guided_orchestrator_keeps_the_best_scored_step_at_each_depth(store, executor, math_task):
    from orchrm import RewardGuidedOrchestrator

    orch = RewardGuidedOrchestrator(reward_model=store.good, num_candidates=6, executor=executor)
    result = orch.execute(task=math_task)
    assert orch.steps, "no step was taken"
    for step in orch.steps:
        scores = dict(step.options)
        assert scores[step.chosen] == max(scores.values())
    sampled = {p.plan_id for p in executor.sample_plans(math_task, 6)}
    assert result.plan.plan_id in sampled
    assert result.run.final is not None and result.answer == result.run.answer
    assert result.quality is not None
    assert result.execution_tokens >= result.run.tokens and result.scoring_tokens > 0


def test_reward_guided_scores_nodes_in_the_intermediate_pairs_format(store, executor, math_task):
    """The depth-0 step is scored R(question, "<agent .../>\\n" + its output), the format of the
    node-level pairs (orchrm.data.pairs)."""
    from orchrm import RewardGuidedOrchestrator

    orch = RewardGuidedOrchestrator(reward_model=store.good, num_candidates=6, executor=executor)
    orch.execute(task=math_task)
    first = orch.steps[0]
    plans = executor.sample_plans(math_task, 6)
    by_line = {}
    for plan in plans:
        roots = [n for n, d in plan.depths().items() if d == 0]
        if len(roots) == 1:
            by_line.setdefault(plan.node(roots[0]).render(), plan)
    checked = 0
    for key, score in first.options:
        if key in by_line:
            plan = by_line[key]
            run = executor.run_plan(math_task, plan, stop_after_depth=0)
            (row,) = run.rows
            expected = store.good.score([math_task.question], [key + "\n" + row["content"]])
            assert score == pytest.approx(float(expected[0]), abs=1e-5)
            checked += 1
    assert checked >= 1


# --------------------------------------------------------------------------------------------
# the pyfunc over HTTP


@pytest.mark.slow
def test_mlflow_models_serve_scores_candidates_like_model_score(store, tmp_path):
    env = {"MLFLOW_TRACKING_URI": tracking.tracking_uri(store.config), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    args = ["models", "serve", "-m", "models:/orchrm-reward@champion", "--env-manager", "local"]
    with running_mlflow(args, tmp_path / "serve.log", ready_path="/ping", env=env) as url:
        rows = store.pairs.head(8)
        body = {"dataframe_split": {"columns": ["prompt", "action"], "data": rows[["prompt", "chosen"]].values.tolist()}}
        answer = httpx.post(f"{url}/invocations", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        rewards = [p["reward"] for p in answer.json()["predictions"]]
        expected = store.good.score(rows["prompt"].tolist(), rows["chosen"].tolist())
        assert torch.tensor(rewards, dtype=torch.float32).tolist() == expected.tolist()
