"""The weekly re-evaluation of a champion trained on a user's traces: a replay of the newest ones.

A support desk (orchrm.execution.support_desk) writes a night's traces; the pipeline trains and
promotes a champion on them (gated on their replay pool). A week later the folder holds a newer
file and a broken one: the re-evaluation measures the champion on the newer file's held-out tasks
and pairs (the training run's folder gone, so nothing of it is read), skips the broken file, and
leaves the folder exactly as it was.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from orchrm.config import config_from_dict
from orchrm.data.ingest import ingest_traces
from orchrm.data.pairs import build_pairs
from orchrm.data.tables import read_table, write_table
from orchrm.evaluation.pool import build_replay_pool
from orchrm.execution.support_desk import make_tickets, traces_of
from orchrm.ops.ledger import seen_digests
from orchrm.ops.pipeline import (
    POOL_SOURCE_TAG,
    reevaluate_champion,
    reevaluation_markdown,
    run_pipeline,
)
from orchrm.ops.stages import POOL_TAG

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: a small, quick model: these tests are about which tasks the champion is measured on, not how well
DESK_CONFIG = {
    "model": {"encoder": "scratch", "hidden_dim": 32, "num_layers": 1, "num_heads": 2, "max_length": 128, "vocab_size": 300},
    "train": {"batch_size": 32, "lr": 3.0e-3, "epochs": 2},
    "evaluate": {"candidates": 6, "best_of": [1, 2, 4], "pool_seeds": [0], "bootstrap": 20,
                 "gates": {"best_of": 4, "min_pairwise_accuracy": 0.0, "min_best_of_n_gain": -1.0, "beat_cost_only": False,
                           "max_scoring_latency_ms": 1e9}},
    # the week's re-evaluation reads the two newest files; night-1 falls outside
    "pipeline": {"max_files": 2},
}


def write_desk(folder: Path, name: str, *, seed: int, age_days: float) -> Path:
    """A night of desk traces written ``age_days`` ago (its modification time)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = write_table(traces_of(make_tickets(90, seed=seed), seed=seed), folder / name)
    when = time.time() - age_days * 86400
    os.utime(path, (when, when))
    return path


def snapshot(root: Path) -> dict[str, tuple[bytes, float]]:
    """Every file under ``root`` with its bytes and modification time."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime) for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_traces_champion_is_reevaluated_on_the_newest_traces_held_out_tasks_read_only(tmp_path):
    from orchrm.ops import tracking

    data_dir, desk = tmp_path / "data", tmp_path / "desk"
    config = config_from_dict(DESK_CONFIG | {"data_dir": str(data_dir)})
    write_desk(desk, "night-1.parquet", seed=13, age_days=7)
    night = run_pipeline(config, traces_dir=desk, run_dir=tmp_path / "night-1")
    assert night.status == "promoted", f"{night.message}\n{night.verdict}"
    assert night.evaluation.pool_kind == "replay"
    shutil.rmtree(night.run_dir)  # nothing of the training run's folder is needed a week later

    newer = write_desk(desk, "night-2.parquet", seed=29, age_days=1)
    (desk / "night-3.jsonl").write_text('{"task_id": "t1", "content": "no plan, no quality"}\n')
    before, ledger = snapshot(tmp_path / "desk"), seen_digests(config)
    said: list[str] = []
    week = reevaluate_champion(config, traces_dir=desk, run_dir=tmp_path / "week", say=said.append)

    # measured on night-2's held-out tasks and pairs: what they give on their own
    artifacts = ingest_traces(read_table(newer))
    own_pool = build_replay_pool(artifacts, config)
    own_pairs = build_pairs(artifacts, config.pairs)
    assert week.champion_version == night.champion_version
    assert week.pool.kind == "replay" and week.evaluation.pool_kind == "replay"
    assert week.pool.tasks == own_pool.tasks > 0
    assert week.evaluation.metrics["pool_tasks"] == own_pool.tasks
    assert len(own_pairs) and set(read_table(tmp_path / "week" / "pairs.parquet").pair_id) == set(own_pairs.pair_id)
    assert f"replay of {own_pool.tasks} held-out tasks of night-2.parquet" in week.message, week.message
    assert "night-1" not in week.message and week.verdict is not None
    assert "Pool: replay of" in reevaluation_markdown(week)

    # the broken file was skipped with its reason, and the folder and the ledger are as they were
    assert any(line.startswith("skipped night-3.jsonl (left where it is)") for line in said), said
    assert snapshot(tmp_path / "desk") == before
    assert not (tmp_path / "rejected").exists()
    assert seen_digests(config) == ledger and len(ledger) == 1  # night-1 only: the weekly run records nothing

    # the MLflow reevaluate run names its pool
    client = tracking.client(tracking.tracking_uri(config))
    runs = client.search_runs([client.get_run(night.run_id).info.experiment_id], filter_string="attributes.run_name = 'reevaluate'")
    assert len(runs) == 1
    assert runs[0].data.tags[POOL_TAG] == "replay"
    assert runs[0].data.tags[POOL_SOURCE_TAG] == f"replay of {own_pool.tasks} held-out tasks of night-2.parquet"

    # the figures land on the champion's version: tags with the date and the verdict, and the
    # evaluate run's metrics on the version's LoggedModel beside those it was promoted on
    from orchrm.ops import registry

    tags = registry.version_info(night.champion_version, config=config)["tags"]
    day = tags["last_reevaluation"]
    assert tags[f"reevaluated.{day}"] == tags["last_reevaluation.verdict"] == registry.reevaluation_verdict(week.verdict)
    assert tags["last_reevaluation.run_id"] == week.evaluation.run_id
    model = client.get_logged_model(registry.version_model_id(night.champion_version, config=config))
    weekly = {m.key: m for m in model.metrics if m.run_id == week.evaluation.run_id}
    assert weekly["pool_tasks"].value == own_pool.tasks and weekly["pool_tasks"].dataset_name == "pool"
    # beside the training run's (MLflow links a run's metrics to the model logged from it) and the promotion's
    assert {m.run_id for m in model.metrics} == {night.model.run_id, night.evaluation.run_id, week.evaluation.run_id}
    assert {m.step for m in model.metrics if m.key == "best_of_n.reward_model" and m.run_id == week.evaluation.run_id} == {1, 2, 4}
    week_inputs = client.get_run(week.evaluation.run_id).inputs
    assert {d.dataset.name for d in week_inputs.dataset_inputs} == {"pairs", "pool"}
    assert [m.model_id for m in week_inputs.model_inputs] == [model.model_id]

    # without a traces folder: a message saying so, nothing evaluated
    nowhere = reevaluate_champion(config, say=said.append)
    assert nowhere.evaluation is None and nowhere.champion_version == night.champion_version
    assert "no traces folder is set (pipeline.traces_dir)" in nowhere.message
