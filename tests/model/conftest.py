"""Fixtures for the reward-model tests: a synthetic pair table with features a model can learn.

Each task is a question of one of two kinds, and which plan is best depends on the kind, as in the
sandbox (DESIGN §4): *lookup* questions ("Who founded ...?") need a WebSearch node; *arithmetic*
questions ("... How many ...?") are hurt by retrieval (distraction) and helped by SelfConsistency
with k >= 5. Node-level pairs teach a second feature: an agent output that reports an error loses
to one that does not. Plans are canonical plan text (orchrm.plans), so the tokens are realistic.
"""

from __future__ import annotations

import itertools
import random

import pandas as pd
import pytest

from orchrm.plans import Plan

CITIES = ["Avalon", "Brask", "Corvin", "Dunmere", "Elstow", "Farhold", "Glenrock", "Harrow", "Ivel", "Jorvik",
          "Kestrel", "Lunden", "Morrow", "Norhaven", "Oakmere", "Pellin", "Quarry", "Rookby", "Sallow", "Tarn"]
ITEMS = ["apples", "pears", "books", "coins", "stamps", "marbles", "cards", "shells"]
TEMPLATES = [
    '<agent id="a1" type="CoT" model="{m}"/>',
    '<agent id="a1" type="SelfConsistency" model="{m}" k="{k}"/>',
    '<agent id="a1" type="WebSearch" queries="2" top_k="5"/>\n<agent id="a2" type="CoT" model="{m}"/>\n<edge from="a1" to="a2"/>',
    '<agent id="a1" type="WebSearch" queries="1" top_k="3"/>\n<agent id="a2" type="SelfConsistency" model="{m}" k="{k}"/>\n<edge from="a1" to="a2"/>',
    '<agent id="a1" type="Reflexion" model="{m}" iterations="2"/>',
]


def question(kind: str, rng: random.Random) -> str:
    if kind == "lookup":
        return f"Who founded the city of {rng.choice(CITIES)} and in which year was its {rng.choice(['harbour', 'castle', 'bridge'])} built?"
    a, b, c = rng.randint(2, 90), rng.randint(2, 90), rng.randint(2, 9)
    item = rng.choice(ITEMS)
    return f"Mia has {a} {item} and buys {b} more, then gives away {c} of them. How many {item} does Mia have now?"


def plan_quality(plan: str, kind: str) -> float:
    search = "WebSearch" in plan
    voting = 'type="SelfConsistency"' in plan and ('k="5"' in plan or 'k="8"' in plan)
    large = 'model="large"' in plan
    if kind == "lookup":
        q = 0.15 + 0.6 * search + 0.15 * large
    else:
        q = 0.3 + 0.45 * voting - 0.25 * search + 0.1 * large
    return min(1.0, max(0.0, q))


def make_pairs(n_tasks: int = 40, *, seed: int = 0, plans_per_task: int = 6, node_pairs: bool = True) -> pd.DataFrame:
    """A pair table in the DESIGN §3 schema; splits by task (70/15/15)."""
    rng = random.Random(seed)
    rows = []
    for t in range(n_tasks):
        kind = "lookup" if t % 2 == 0 else "arith"
        task_id = f"t{seed}-{t:04d}"
        q = question(kind, rng)
        split = "train" if t % 20 < 14 else ("val" if t % 20 < 17 else "test")
        plans = set()
        while len(plans) < plans_per_task:
            text = rng.choice(TEMPLATES).format(m=rng.choice(["small", "large"]), k=rng.choice([3, 5, 8]))
            plans.add(Plan.parse(text).render())
        scored = [(p, plan_quality(p, kind)) for p in sorted(plans)]
        for (p1, q1), (p2, q2) in itertools.combinations(scored, 2):
            if abs(q1 - q2) < 0.1:
                continue
            (cw, qw), (cl, ql) = ((p1, q1), (p2, q2)) if q1 > q2 else ((p2, q2), (p1, q1))
            rows.append(dict(task_id=task_id, domain=kind, granularity="plan", source="correct-over-incorrect",
                             prompt=q, chosen=cw, rejected=cl, margin=round(qw - ql, 3), split=split))
        if node_pairs:
            answer = rng.randint(10, 99)
            node = '<agent id="a1" type="CoT" model="small"/>'
            good = f"{node}\nI add the numbers step by step. The total is {answer}. Answer: {answer}"
            bad = f"{node}\nI add the numbers step by step. Error: the calculator tool failed. Answer: unknown"
            rows.append(dict(task_id=task_id, domain=kind, granularity="node", source="intermediate",
                             prompt=q + "\n" + node, chosen=good, rejected=bad, margin=0.5, split=split))
    df = pd.DataFrame(rows)
    df.insert(0, "pair_id", [f"p{i:05d}" for i in range(len(df))])
    df["chosen_artifact_id"] = "c" + df["pair_id"]
    df["rejected_artifact_id"] = "r" + df["pair_id"]
    df["collection_tokens"] = 100
    return df


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy machine the threads' barriers
    stall for the scheduler (20x slower steps were seen on 2 shared cores)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def pairs() -> pd.DataFrame:
    return make_pairs(40, seed=0)


@pytest.fixture(scope="session")
def tiny_model_kwargs() -> dict:
    """A model small enough to train in seconds on two CPU cores."""
    return dict(hidden_dim=32, num_layers=2, num_heads=2, max_length=96, vocab_size=300, dropout=0.0)


@pytest.fixture(scope="session")
def trained_model(pairs, tiny_model_kwargs):
    """A tiny shared-prompt scratch model trained on the synthetic pairs (module-level cost ~5 s)."""
    from orchrm import BradleyTerryModel, Trainer

    model = BradleyTerryModel(**tiny_model_kwargs)
    Trainer(model=model, batch_size=16, lr=3e-3, progress=False).train(pairs=pairs, epochs=6)
    return model.eval()
