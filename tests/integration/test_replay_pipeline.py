"""A user's own system through the pipeline: gated on a replay of their held-out tickets.

The support desk (orchrm.execution.support_desk: the plan that resolves a ticket depends on its
category and urgency) writes its traces to a folder; run_pipeline ingests them and evaluates the
candidate, and the sandbox champion before it, on the desk's replay pool, not on sandbox tasks.
A model trained on the same desk with its labels reversed is rejected on that same pool.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchrm.config import config_from_dict
from orchrm.data.tables import write_table
from orchrm.execution.support_desk import make_tickets, traces_of
from orchrm.ops.pipeline import Stages, report_markdown, run_pipeline
from orchrm.ops.stages import POOL_TAG, pool_stage
from orchrm.util.digests import source_hash

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SEED = 13  # not the defaults sweep's tuning seed (101)

#: a small model that learns the desk's rule in seconds (measured: held-out pairwise accuracy 0.73,
#: best-of-6 expected quality 0.49 against random 0.25, cost-only 0.26 and the sandbox champion
#: 0.26); the gates are the shipped defaults, their N = 8 capped at the desk's 6 plans
DESK_CONFIG = {
    "model": {"encoder": "scratch", "hidden_dim": 64, "num_layers": 1, "num_heads": 2, "max_length": 128, "vocab_size": 500},
    "train": {"batch_size": 32, "lr": 3.0e-3, "epochs": 30, "patience": 8},
    # as configs/own_traces.yaml: a desk has a few hundred tickets, every pair of one counts
    "pairs": {"max_pairs_per_task": 64},
    "evaluate": {"candidates": 8, "best_of": [1, 2, 4, 8], "pool_seeds": [0, 1, 2], "bootstrap": 100},
}


def sandbox_config(data_dir: Path):
    """configs/tiny.yaml with gates a two-epoch model passes: it only has to become champion."""
    data = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text()) | {"data_dir": str(data_dir)}
    gates = {"min_pairwise_accuracy": 0.0, "min_best_of_n_gain": -1.0, "beat_cost_only": False, "max_scoring_latency_ms": 1e9}
    data["evaluate"] = {**data["evaluate"], "gates": {**data["evaluate"].get("gates", {}), **gates}}
    return config_from_dict(data)


def write_desk(folder: Path, *, reverse: bool = False) -> Path:
    tickets = make_tickets(240, seed=SEED)
    traces = traces_of(tickets, seed=SEED)
    if reverse:
        traces = traces.assign(quality=1.0 - traces["quality"])
    folder.mkdir(parents=True)
    return write_table(traces, folder / "night-1.parquet")


def test_the_desk_model_is_gated_on_the_desks_replay_pool_and_a_reversed_one_is_rejected(tmp_path):
    from orchrm.ops import tracking

    data_dir = tmp_path / "data"
    sandbox = run_pipeline(sandbox_config(data_dir), run_dir=tmp_path / "sandbox")
    assert sandbox.status == "promoted", f"{sandbox.message}\n{sandbox.verdict}"
    assert sandbox.evaluation.pool_kind == "sandbox"

    config = config_from_dict(DESK_CONFIG | {"data_dir": str(data_dir)})
    write_desk(tmp_path / "desk")
    desk = run_pipeline(config, traces_dir=tmp_path / "desk", run_dir=tmp_path / "night-1")
    figures = f"{desk.verdict}\n{desk.evaluation.summary}"
    m, champion = desk.evaluation.metrics, desk.evaluation.champion_metrics

    # evaluated on the desk's own held-out tickets, and the report, MLflow and the markdown say so
    assert desk.evaluation.pool_kind == "replay"
    assert m["pool_tasks"] >= 30 and m["pool_candidates"] == 6, figures  # 39 held-out tickets at this seed
    assert "best_of_8" not in " ".join(m) and "expected.best_of_6.reward_model" in m  # N = 8 dropped, the gates read 6
    assert "Pool: replay of" in report_markdown(desk) and "best-of-N for N = [8] left out" in report_markdown(desk)
    client = tracking.client(desk.tracking_uri)
    assert client.get_run(desk.run_id).data.tags[POOL_TAG] == "replay"
    assert client.get_run(desk.evaluation.run_id).data.params[POOL_TAG] == "replay"

    # the desk model learned the desk: it beats random, cost-only and the sandbox champion on it
    assert desk.status == "promoted", figures
    assert m["expected.best_of_4.reward_model"] - m["expected.best_of_4.random"] >= 0.1, figures
    assert m["expected.best_of_6.reward_model"] > champion["expected.best_of_6.reward_model"] + 0.1, figures
    assert desk.champion_version == desk.registered.version == sandbox.registered.version + 1

    # the same desk with labels reversed, scored on the same replay pool: rejected
    same_pool = pool_stage(config.evaluate, config.collect, config.sandbox, data_dir=config.data_dir,
                           code_version=source_hash(), replay=desk.artifacts, pairs=config.pairs)
    write_desk(tmp_path / "reversed", reverse=True)
    reversed_run = run_pipeline(config, traces_dir=tmp_path / "reversed", run_dir=tmp_path / "night-reversed",
                                stages=Stages(build_pool=lambda *args, **kwargs: same_pool))
    r = reversed_run.evaluation.metrics
    assert reversed_run.evaluation.pool_kind == "replay"
    assert reversed_run.status == "rejected", f"{reversed_run.verdict}\n{reversed_run.evaluation.summary}"
    failed = {g.name for g in reversed_run.verdict.failed()}
    assert {"best_of_n_gain", "beats_champion"} <= failed, str(reversed_run.verdict)
    assert r["expected.best_of_4.reward_model"] < r["expected.best_of_4.random"], reversed_run.evaluation.summary
    assert reversed_run.champion_version == desk.registered.version
