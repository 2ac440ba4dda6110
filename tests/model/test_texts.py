"""orchrm.model.texts: the one place the prompt and action texts are built.

Pair building writes them into the pair table and serving scores with them; these tests pin that
the two read the same bytes, and that the module loads without the simulator or the pipeline.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchrm.config import PairsConfig
from orchrm.data.pairs import PairwiseComparator
from orchrm.data.tables import artifacts_frame
from orchrm.execution.collect import prefix_text
from orchrm.execution.executor import MultiAgentExecutor
from orchrm.execution.tasks import load_tasks
from orchrm.model.texts import (
    node_action,
    node_prompt,
    plan_nodes,
    plan_part_text,
    plan_prompt,
    task_text,
)
from orchrm.ops.serving import RewardGuidedOrchestrator
from orchrm.plans import Plan
from tests.fixtures.executors import FixedPlans
from tests.fixtures.tables import PLANS, execution_rows

ROOT = Path(__file__).resolve().parents[2]
Q = "Tom has 7 apples and eats 3. How many are left?"
SEARCH = '<agent id="s" type="WebSearch" queries="2" top_k="4"/>'
#: two plans that share their depth-0 search and differ in the reasoner reading it
SHARED_SEARCH = [
    Plan.parse(f'{SEARCH}<agent id="r" type="CoT" model="{tier}"/><edge from="s" to="r"/>') for tier in ("small", "large")
]


def node_pairs(artifacts: pd.DataFrame, action: str = "node") -> pd.DataFrame:
    cfg = PairsConfig(sources=("intermediate",), granularity=("node",), intermediate_action=action, max_pairs_per_task=None)
    return PairwiseComparator(config=cfg).build_pairs(artifacts)


def test_node_pairs_are_written_with_the_text_builders():
    a, b = PLANS["cot_then_reflexion"], PLANS["cot_then_sc"]
    rows = [*execution_rows(task_id="t1", question=Q, domain="math", plan_text=a, orchestrator="base", qualities={"a1": 0.2, "a2": 0.9}),
            *execution_rows(task_id="t1", question=Q, domain="math", plan_text=b, orchestrator="base", qualities={"a1": 0.7, "a2": 0.1})]
    artifacts = artifacts_frame(rows)
    pairs = node_pairs(artifacts)
    assert len(pairs) == 2  # one pair at depth 0, one at depth 1 (same prefix a1)
    by_id = {r["artifact_id"]: r for r in rows}
    for pair in pairs.itertuples():
        for side in ("chosen", "rejected"):
            row = by_id[getattr(pair, f"{side}_artifact_id")]
            info = next(i for i in plan_nodes(row["plan_text"]) if i.node_id == row["node_id"])
            assert pair.prompt == node_prompt(Q, info.prefix)
            assert getattr(pair, side) == node_action(info.line, row["content"])
    prefix = node_pairs(artifacts, "plan_prefix")
    assert set(prefix["prompt"]) == {plan_prompt(Q)}
    assert set(prefix["chosen"]) | set(prefix["rejected"]) <= {i.subplan for p in (a, b) for i in plan_nodes(p)}


class _Recorder:
    """A reward model that scores every action 0 and keeps each (prompt, action) it was asked."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def score(self, prompts, actions):
        self.seen += list(zip(prompts, actions, strict=True))
        return np.zeros(len(actions))


def test_serving_scores_exactly_the_texts_pair_building_trained_on():
    (task,) = load_tasks("multihop", 1, seed=0)
    runs = [MultiAgentExecutor(orchestrator="default").run_plan(task, p, seed=0) for p in SHARED_SEARCH]
    artifacts = pd.concat([r.frame() for r in runs], ignore_index=True)
    artifacts["quality"] = np.where(artifacts["plan_text"] == SHARED_SEARCH[1].render(), 1.0, 0.0)
    pairs = node_pairs(artifacts)
    (pair,) = pairs[pairs["prompt"] != task.question].itertuples()  # the two reasoners, under the shared search
    recorder = _Recorder()
    RewardGuidedOrchestrator(reward_model=recorder, num_candidates=2, executor=FixedPlans(SHARED_SEARCH), seed=0).execute(task)
    depth_1 = {(p, a) for p, a in recorder.seen if p != task.question}
    assert depth_1 == {(pair.prompt, pair.chosen), (pair.prompt, pair.rejected)}


def test_task_text_reads_the_question_back_out_of_every_prompt():
    for text in PLANS.values():
        for info in plan_nodes(text):
            assert task_text(node_prompt(Q, info.prefix)) == Q
    assert task_text(plan_prompt(Q)) == Q


def test_plan_parts_render_as_plans_do():
    plan = Plan.parse(PLANS["search_then_debate"])
    assert plan_part_text(plan, {n.id for n in plan.nodes}) == plan.render()
    assert plan_part_text(plan, set()) == ""
    (search, debate) = plan_nodes(plan.render())
    assert (search.prefix, debate.prefix) == ("", plan.nodes[0].render())
    # the branch collection's shared states are plan parts too
    assert prefix_text(plan, 0) == plan_part_text(plan, {"a1"}) and prefix_text(plan, -1) == ""


def test_a_free_form_plan_description_has_no_nodes():
    assert plan_nodes("first search the web, then think hard") is None


@pytest.mark.parametrize("module", ["orchrm.model.texts", "orchrm.model.scoring"])
def test_the_text_and_token_modules_load_without_the_simulator_or_the_pipeline(module):
    probe = (
        f"import {module}, json, sys\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('orchrm', 'prefect', 'great_expectations', 'mlflow', 'torch'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert module in loaded
    assert [m for m in loaded if not m.startswith(("orchrm.model", "orchrm.plans", "orchrm.errors", "orchrm.util"))
            and m != "orchrm"] == []
