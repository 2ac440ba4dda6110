"""configs/own_traces.yaml, the nightly deployment's config, learns a user's own system: its pair,
model and training settings, on a support desk's traces (the plan that resolves a ticket depends on
its category and urgency, both in the question), rank the held-out tickets' plans by their expected
quality. Shorter training (6 epochs, patience 3) did not learn such a desk.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchrm.config import TrainConfig, load_config
from orchrm.data.ingest import ingest_traces
from orchrm.data.pairs import build_pairs
from orchrm.execution.support_desk import make_tickets, traces_of, true_pair_accuracy
from orchrm.model.trainer import fit

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "own_traces.yaml"
SEED = 11  # neither the sweep's tuning seed (101) nor test_defaults_learn's (7)


def test_own_traces_config_trains_with_the_built_in_defaults_and_replays_its_own_tasks():
    config = load_config(CONFIG)
    assert config.train == TrainConfig()
    assert config.evaluate.pool_kind(ingests=True) == "replay"


@pytest.mark.slow
def test_own_traces_config_learns_which_plan_a_ticket_needs():
    config = load_config(CONFIG)
    tickets = make_tickets(120, seed=SEED)
    pairs = build_pairs(ingest_traces(traces_of(tickets, seed=SEED)), config.pairs)
    model = fit(pairs, config.model, config.train, progress=False).model.eval()

    held_out = set(pairs.task_id[pairs.split == "test"])
    accuracy = true_pair_accuracy(lambda q, plans: model.score(q, plans).tolist(),
                                  [t for t in tickets if t.task_id in held_out])
    assert len(held_out) >= 20
    # chance is 0.5; on 2 CPU cores these settings reached 0.76 here (27 held-out tickets, 16 epochs;
    # 0.771 on 160 tickets), so the test holds them to that with a margin for the trainer's noise
    assert accuracy >= 0.65, f"held-out accuracy on pairs whose plans truly differ: {accuracy:.3f}"
