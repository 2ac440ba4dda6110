"""configs/own_traces.yaml, the nightly deployment's config, learns a user's own system: its pair,
model and training settings, on a support desk's traces (the plan that resolves a ticket depends on
its category and urgency, both in the question), rank the held-out tickets' plans by their expected
quality. configs/default.yaml's demo-speed training (6 epochs, patience 3) did not learn such a desk.
"""

from __future__ import annotations

from pathlib import Path

from orchrm.config import TrainConfig, load_config

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "own_traces.yaml"


def test_own_traces_config_trains_with_the_built_in_defaults_and_replays_its_own_tasks():
    config = load_config(CONFIG)
    assert config.train == TrainConfig()
    assert config.evaluate.pool_kind(ingests=True) == "replay"
