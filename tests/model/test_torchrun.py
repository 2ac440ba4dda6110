"""``torchrun --nproc-per-node=2`` on CPU (gloo): two ranks train one model, rank 0 saves it and warns."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchrm import BradleyTerryModel
from orchrm.data.tables import write_table
from orchrm.model.batching import PairIndex, split_pairs, task_batches, training_pairs

from .conftest import make_pairs

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_torchrun_two_cpu_processes_train_and_save_one_model(tmp_path):
    pairs = make_pairs(20, seed=1)
    # no split == "train" row, and --resume with nothing to resume: two warnings, each from rank 0 only
    pairs["split"] = pairs["split"].replace("train", "test")
    write_table(pairs, tmp_path / "pairs.parquet")
    (tmp_path / "tiny.yaml").write_text(
        "model: {hidden_dim: 32, num_layers: 1, num_heads: 2, max_length: 96, vocab_size: 300, dropout: 0.1}\n"
        "train: {batch_size: 16, lr: 3.0e-3}\n"
    )
    torchrun = Path(sys.executable).with_name("torchrun")
    out = tmp_path / "out"
    env = os.environ | {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node=2", "-m", "orchrm.cli", "train",
         "--pairs", str(tmp_path / "pairs.parquet"), "--out", str(out), "--epochs", "2",
         "--config", str(tmp_path / "tiny.yaml"), "--resume"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
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
