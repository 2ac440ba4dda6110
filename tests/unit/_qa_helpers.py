"""Helpers shared by the multihop and webqa tests: plan snippets, a node-by-node plan runner on
one sandbox backend, and the real data sets (StrategyQA, SQuAD) when they are present."""

from __future__ import annotations

import os
import random
import statistics
from pathlib import Path

import pytest

from orchrm.execution.backend import node_cost
from orchrm.execution.sandbox.engine import SandboxBackend
from orchrm.execution.sandbox.noise import NoiseConfig
from orchrm.execution.tasks import load_tasks
from orchrm.plans import Plan

COT_S = '<agent id="a" type="CoT" model="small"/>'
COT_L = '<agent id="a" type="CoT" model="large"/>'
SC7_S = '<agent id="a" type="SelfConsistency" model="small" k="7"/>'
COT_REFLECT_S = (
    '<agent id="a" type="CoT" model="small"/><agent id="r" type="Reflexion" model="small" iterations="2"/>'
    '<edge from="a" to="r"/>'
)
# parsed plans for the heuristic tests
CLOSED = Plan.parse(COT_S)
LARGE = Plan.parse(COT_L)
VOTE = Plan.parse('<agent id="a" type="SelfConsistency" model="small" k="5"/>')


def search(reasoner: str, *, queries: int = 1, top_k: int) -> str:
    """``reasoner`` (node id ``a``) fed by a WebSearch node."""
    return f'<agent id="s" type="WebSearch" queries="{queries}" top_k="{top_k}"/>{reasoner}<edge from="s" to="a"/>'


BACKEND = SandboxBackend(NoiseConfig())


def execute(task, plan_text: str, seed: int):
    """Run a plan node by node in topological order; returns (final output, cost)."""
    plan = Plan.parse(plan_text)
    rng = random.Random(seed)
    shared: dict = {}
    done = {}
    cost = 0.0
    for node in plan.nodes:
        out = BACKEND.run_node(
            task, node, [done[p] for p in plan.parents(node.id)], rng=rng, shared=shared
        )
        done[node.id] = out
        cost += node_cost(BACKEND, node, out)
    return done[plan.sink], cost


def mean_quality(tasks, plan_text: str, reps: int) -> float:
    """Mean final quality of ``plan_text`` over ``tasks``, ``reps`` seeded executions each."""
    scores = []
    for i, task in enumerate(tasks):
        for r in range(reps):
            out, _ = execute(task, plan_text, seed=1000 * i + r)
            scores.append(BACKEND.quality(task, out))
    return statistics.mean(scores)


def assert_builtin_deterministic_per_seed(domain: str) -> None:
    """The built-in generator of ``domain`` gives the same tasks for a seed, others for another."""
    a = load_tasks(domain, 40, seed=3)
    b = load_tasks(domain, 40, seed=3)
    c = load_tasks(domain, 40, seed=4)
    assert [t.to_row() for t in a] == [t.to_row() for t in b]
    assert {t.task_id for t in a} != {t.task_id for t in c}


# real data ---------------------------------------------------------------------------------------
DATA = Path(
    os.environ.get(
        "ORCHRM_DATA_DIR", Path(__file__).resolve().parents[2].parent / "shared" / "data"
    )
)


def use_real_data(monkeypatch: pytest.MonkeyPatch, file: str, name: str) -> None:
    """Point ``ORCHRM_DATA_DIR`` at :data:`DATA`, or skip the test when ``file`` is not there."""
    if not (DATA / file).is_file():
        pytest.skip(f"{name} not found under {DATA} (set ORCHRM_DATA_DIR)")
    monkeypatch.setenv("ORCHRM_DATA_DIR", str(DATA))
