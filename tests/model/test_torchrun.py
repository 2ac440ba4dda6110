"""``torchrun`` on CPU (gloo): two ranks train one model, rank 0 saves it and warns; two nodes of one
process each, as ``pipeline.torchrun`` renders them, train the same model as one node of two."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from orchrm import BradleyTerryModel
from orchrm.config import config_from_dict
from orchrm.data.tables import write_table
from orchrm.model.batching import PairIndex, split_pairs, task_batches, training_pairs
from orchrm.ops.stages import train_command, write_config
from orchrm.util.processes import stop_group

from .conftest import make_pairs

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _torchrun_train(tmp_path: Path, pairs, model_setting: str, *flags: str) -> tuple[Path, subprocess.CompletedProcess]:
    """``orchrm train`` under torchrun, two CPU processes, a tiny model with ``model_setting``, 2 epochs;
    its output folder and the finished process (it must have succeeded)."""
    write_table(pairs, tmp_path / "pairs.parquet")
    (tmp_path / "tiny.yaml").write_text(
        f"model: {{hidden_dim: 32, num_layers: 1, num_heads: 2, max_length: 96, vocab_size: 300, {model_setting}}}\n"
        "train: {batch_size: 16, lr: 3.0e-3}\n"
    )
    torchrun = Path(sys.executable).with_name("torchrun")
    out = tmp_path / "out"
    env = os.environ | {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node=2", "-m", "orchrm.cli", "train",
         "--pairs", str(tmp_path / "pairs.parquet"), "--out", str(out), "--epochs", "2",
         "--config", str(tmp_path / "tiny.yaml"), *flags],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_torchrun_two_cpu_processes_train_and_save_one_model(tmp_path):
    pairs = make_pairs(20, seed=1)
    # no split == "train" row, and --resume with nothing to resume: two warnings, each from rank 0 only
    pairs["split"] = pairs["split"].replace("train", "test")
    out, proc = _torchrun_train(tmp_path, pairs, "dropout: 0.1", "--resume")
    assert proc.stderr.count("no pairs with split == 'train'") == 1, proc.stderr[-3000:]
    assert proc.stderr.count("resume requested but no checkpoint") == 1, proc.stderr[-3000:]

    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "model.safetensors", "train_result.json"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["best.safetensors", "last.safetensors"]
    model = BradleyTerryModel.load(out)
    summary = json.loads((out / "train_result.json").read_text())
    train, _ = split_pairs(training_pairs(pairs), val_fraction=0.1, seed=0)
    n_batches = len(task_batches(PairIndex.build(train), 16, seed=0, epoch=1))
    # each rank ran half of every epoch's steps, and the pair count covers both ranks
    assert summary["steps"] == 2 * math.ceil(n_batches / 2)
    # a repeated step that only evens out the ranks is trained on, not counted: every pair once an epoch
    assert round(summary["pairs_per_second"] * summary["train_seconds"]) == 2 * len(train)
    assert summary["history"][-1]["train_loss"] < summary["history"][0]["train_loss"]
    assert model.manifest["train_pairs"] == len(train)
    r = model.score(list(pairs["prompt"][:3]), list(pairs["chosen"][:3]))
    assert r.shape == (3,)


def test_torchrun_two_cpu_processes_train_an_ensemble_member_by_member_in_one_process_group(tmp_path):
    pairs = make_pairs(12, seed=2)
    out, _ = _torchrun_train(tmp_path, pairs, "members: 2")
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["member-0", "member-1"]
    summary = json.loads((out / "train_result.json").read_text())
    assert [m["world_size"] for m in summary["members"]] == [2, 2]
    model = BradleyTerryModel.load(out)
    assert model.members == 2 and [m["seed"] for m in model.manifest["members"]] == [0, 1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(cmd: list[str], log: Path, env: dict[str, str], cwd: Path) -> subprocess.Popen:
    """A launcher in a session of its own, so stop_group stops it with its workers."""
    with log.open("wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)


def _finish(procs: list[subprocess.Popen], logs: list[Path], timeout_s: float = 240) -> None:
    """Wait for every launcher, bounded; stop all of them (and their workers) whatever happens."""
    try:
        for proc, log in zip(procs, logs, strict=True):
            code = proc.wait(timeout=timeout_s)
            assert code == 0, log.read_text(errors="replace")[-3000:]
    finally:
        for proc in procs:
            stop_group(proc, grace_s=5)


def test_two_nodes_from_the_config_train_the_model_one_node_of_two_processes_trains(tmp_path):
    """pipeline.torchrun with nnodes 2: the two commands train_command renders (node_rank 0 and
    1, one process each, static rendezvous at 127.0.0.1) train as one job of world size 2; only
    node 0 (global rank 0) writes the model, and its weights are those of one node of two
    processes with the same seed (gradients averaged over both ranks alike)."""
    pairs = make_pairs(20, seed=1)
    write_table(pairs, tmp_path / "pairs.parquet")
    tiny = {"model": {"hidden_dim": 32, "num_layers": 1, "num_heads": 2, "max_length": 96, "vocab_size": 300, "dropout": 0.1},
            "train": {"batch_size": 16, "lr": 3.0e-3, "epochs": 2}}
    endpoint = f"127.0.0.1:{_free_port()}"
    two_nodes = config_from_dict(tiny | {"pipeline": {"launcher": "torchrun", "torchrun": {
        "nnodes": 2, "nproc_per_node": 1, "rdzv_endpoint": endpoint, "rdzv_id": "two-nodes"}}})
    one_node = config_from_dict(tiny | {"pipeline": {"launcher": "torchrun", "torchrun": {"nproc_per_node": 2}}})
    env = os.environ | {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}

    # every node runs the same command but for its node_rank; each has its own --out, as machines that share no disk
    commands, logs = [], []
    for rank in (0, 1):
        node = two_nodes.model_copy(update={"pipeline": two_nodes.pipeline.model_copy(
            update={"torchrun": two_nodes.pipeline.torchrun.model_copy(update={"node_rank": rank})})})
        config_path = write_config(node, tmp_path / f"node{rank}" / "config.yaml")
        commands.append(train_command(node, pairs_path=tmp_path / "pairs.parquet", model_dir=tmp_path / f"node{rank}" / "model",
                                      config_path=config_path, run_id=None))
        logs.append(tmp_path / f"node{rank}" / "train.log")
    assert commands[1][3:9] == ["--nproc-per-node=1", "--nnodes=2", "--node-rank=1", "--rdzv-backend=static",
                                f"--rdzv-endpoint={endpoint}", "--rdzv-id=two-nodes"]
    _finish([_launch(cmd, log, env, tmp_path) for cmd, log in zip(commands, logs, strict=True)], logs)

    written = {rank: sorted(p.name for p in (tmp_path / f"node{rank}" / "model").glob("*.*")) for rank in (0, 1)}
    assert written == {0: ["model.safetensors", "train_result.json"], 1: []}
    summary = json.loads((tmp_path / "node0" / "model" / "train_result.json").read_text())
    assert summary["world_size"] == 2 and summary["history"][-1]["train_loss"] < summary["history"][0]["train_loss"]
    # each rank prints what it trained: node 1's process saw the whole world too
    assert "pairs/s, 2 processes" in logs[1].read_text(errors="replace")
    model = BradleyTerryModel.load(tmp_path / "node0" / "model")
    r = model.score(list(pairs["prompt"][:3]), list(pairs["chosen"][:3]))
    assert r.shape == (3,) and torch.isfinite(r).all()

    ref_cmd = train_command(one_node, pairs_path=tmp_path / "pairs.parquet", model_dir=tmp_path / "one" / "model",
                            config_path=write_config(one_node, tmp_path / "one" / "config.yaml"), run_id=None)
    assert "--standalone" in ref_cmd
    ref_log = tmp_path / "one" / "train.log"
    _finish([_launch(ref_cmd, ref_log, env, tmp_path)], [ref_log])
    ref = BradleyTerryModel.load(tmp_path / "one" / "model")
    untimed = lambda history: [{k: v for k, v in r.items() if k != "seconds"} for r in history]  # noqa: E731
    assert untimed(json.loads((tmp_path / "one" / "model" / "train_result.json").read_text())["history"]) == untimed(summary["history"])
    mine, theirs = model.state_dict(), ref.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)
