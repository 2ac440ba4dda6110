"""A model's intermediate-pair format (``node`` or ``plan_prefix``) is recorded at training and
read at serving: RewardGuidedOrchestrator and the MLflow pyfunc score a step with the texts the
model was trained on; a model file saved before the format was recorded is read as ``node``.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from orchrm.config import PairsConfig
from orchrm.data.pairs import PairwiseComparator
from orchrm.execution.executor import MultiAgentExecutor
from orchrm.execution.tasks import load_tasks
from orchrm.model.texts import (
    INTERMEDIATE_FORMAT_KEY,
    intermediate_format_of,
    node_action,
    node_prompt,
    plan_nodes,
    plan_prompt,
)
from orchrm.ops.serving import RewardGuidedOrchestrator
from orchrm.plans import Plan
from tests.fixtures.executors import FixedPlans

SEARCH = '<agent id="s" type="WebSearch" queries="2" top_k="4"/>'
#: two plans that share their depth-0 search and differ in the reasoner reading it
SHARED_SEARCH = [
    Plan.parse(f'{SEARCH}<agent id="r" type="CoT" model="{tier}"/><edge from="s" to="r"/>') for tier in ("small", "large")
]
SEED = 0


@pytest.fixture(scope="module")
def tasks():
    return load_tasks("multihop", 8, seed=0)


@pytest.fixture(scope="module")
def artifacts(tasks) -> pd.DataFrame:
    """Both plans run on every task; the large reasoner's outputs are the better ones."""
    executor = MultiAgentExecutor(orchestrator="default")
    frame = pd.concat([executor.run_plan(t, p, seed=SEED).frame() for t in tasks for p in SHARED_SEARCH], ignore_index=True)
    frame["quality"] = np.where(frame["plan_text"] == SHARED_SEARCH[1].render(), 1.0, 0.0)
    return frame


def train_on(artifacts: pd.DataFrame, fmt: str, tiny_model_kwargs: dict):
    from orchrm import BradleyTerryModel, Trainer

    cfg = PairsConfig(sources=("intermediate",), granularity=("node",), intermediate_action=fmt, max_pairs_per_task=None)
    pairs = PairwiseComparator(config=cfg).build_pairs(artifacts).assign(split="train")
    assert intermediate_format_of(pairs["prompt"].tolist(), pairs["chosen"].tolist(), pairs["rejected"].tolist()) == fmt
    model = BradleyTerryModel(**tiny_model_kwargs)
    Trainer(model=model, batch_size=8, lr=3e-3, progress=False).train(pairs=pairs, epochs=2)
    return model.eval()


@pytest.fixture(scope="module", params=["node", "plan_prefix"])
def trained(request, artifacts, tiny_model_kwargs, tmp_path_factory):
    """A model trained on intermediate pairs of one format, saved and loaded back."""
    from orchrm import BradleyTerryModel

    path = train_on(artifacts, request.param, tiny_model_kwargs).save(tmp_path_factory.mktemp(request.param) / "model.safetensors")
    return request.param, BradleyTerryModel.load(path), path


def expected_step_scores(model, fmt: str, task, depth: int) -> list[float]:
    """What each candidate step at ``depth`` must score: the model on that format's texts, written
    here from the text builders (the node texts with the outputs of the prefix run to ``depth``)."""
    executor = MultiAgentExecutor(orchestrator="default")
    scores = []
    for plan in SHARED_SEARCH:
        here = [n for n in plan_nodes(plan.render()) if n.depth == depth]
        if fmt == "plan_prefix":
            prompts, actions = [plan_prompt(task.question)] * len(here), [n.subplan for n in here]
        else:
            run = executor.run_plan(task, plan, stop_after_depth=depth, seed=SEED)
            outputs = {r["node_id"]: r["content"] for r in run.rows}
            prompts = [node_prompt(task.question, n.prefix) for n in here]
            actions = [node_action(n.line, str(outputs.get(n.node_id, ""))) for n in here]
        scores.append(float(model.score(prompts, actions).mean()))
    return sorted(set(scores))


def test_training_records_the_format_and_the_guided_orchestrator_scores_steps_with_it(trained, tasks):
    fmt, model, _ = trained
    assert model.manifest[INTERMEDIATE_FORMAT_KEY] == fmt
    orch = RewardGuidedOrchestrator(reward_model=model, num_candidates=2, executor=FixedPlans(SHARED_SEARCH), seed=SEED)
    assert orch.intermediate_format == fmt
    orch.execute(tasks[0])
    for step in orch.steps:
        assert sorted(s for _, s in step.options) == pytest.approx(expected_step_scores(model, fmt, tasks[0], step.depth), abs=1e-6)
    assert len(orch.steps) == 2 and len(orch.steps[1].options) == 2  # the shared search, then the two reasoners


def _pyfunc(path, where):
    import mlflow.pyfunc

    from orchrm.ops import registry

    signature, example = registry.signature_and_example()
    mlflow.pyfunc.save_model(str(where), python_model=str(registry.PYFUNC_CODE), artifacts={"model": str(path)},
                             signature=signature, input_example=example, pip_requirements=registry.pip_requirements())
    return mlflow.pyfunc.load_model(str(where))


def test_the_pyfunc_reads_the_format_and_scores_a_step_with_its_texts(trained, tasks, tmp_path):
    fmt, model, path = trained
    pyfunc = _pyfunc(path, tmp_path / "pyfunc")
    inner = pyfunc.unwrap_python_model()
    assert inner.intermediate_format == fmt
    task, plan = tasks[0], SHARED_SEARCH[1]
    run = MultiAgentExecutor(orchestrator="default").run_plan(task, plan, stop_after_depth=1, seed=SEED)
    rows = inner.step_rows(task.question, plan.render(), 1, {r["node_id"]: r["content"] for r in run.rows})
    (node,) = [n for n in plan_nodes(plan.render()) if n.depth == 1]
    if fmt == "plan_prefix":
        assert rows.to_dict("records") == [{"prompt": plan_prompt(task.question), "action": node.subplan}]
    else:
        content = next(r["content"] for r in run.rows if r["node_id"] == node.node_id)
        assert rows.to_dict("records") == [{"prompt": node_prompt(task.question, node.prefix), "action": node_action(node.line, content)}]
    rewards = pyfunc.predict(rows)["reward"].to_numpy()
    assert rewards == pytest.approx(model.score(rows["prompt"].tolist(), rows["action"].tolist()).numpy(), abs=1e-6)


def test_a_model_saved_before_the_format_was_recorded_is_read_as_node_and_says_so(artifacts, tiny_model_kwargs, tmp_path, caplog):
    from orchrm import BradleyTerryModel

    model = train_on(artifacts, "plan_prefix", tiny_model_kwargs)
    del model.manifest[INTERMEDIATE_FORMAT_KEY]  # the manifest an older orchrm wrote
    older = BradleyTerryModel.load(model.save(tmp_path / "model.safetensors"))
    with caplog.at_level(logging.INFO, logger="orchrm.model.texts"):
        orch = RewardGuidedOrchestrator(reward_model=older, num_candidates=2, executor=FixedPlans(SHARED_SEARCH), seed=SEED)
        inner = _pyfunc(tmp_path / "model.safetensors", tmp_path / "pyfunc").unwrap_python_model()
    assert orch.intermediate_format == inner.intermediate_format == "node"
    said = [r.getMessage() for r in caplog.records if "records no intermediate-pair format" in r.getMessage()]
    assert len(said) == 2 and all("'node'" in m for m in said), said
