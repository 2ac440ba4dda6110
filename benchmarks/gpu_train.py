"""MiniLM reward-model training on one CUDA GPU in bf16: pairs per second and peak memory.

One prepared script for a machine with a GPU (issue 4): collects sandbox pairs (cached), trains
MiniLM (every layer) with the OrchRM Trainer under bf16 autocast (``precision="auto"`` picks it
on CUDA) in both input layouts, and records training pairs per second, peak GPU memory
(``torch.cuda.max_memory_allocated``) and held-out plan-level accuracy. The figures go into
``results/train.json`` under ``"gpu"`` (the rest of the file left as it is; ``benchmarks.train``
keeps this section when it reruns), which the renderer shows as the GPU part of ``train.md``.

Without CUDA it stops with a message; ``--allow-cpu`` runs the same code on the CPU as a smoke
test (tiny sizes, nothing written unless ``--out`` is given).

    python -m benchmarks.gpu_train                     # on the GPU machine
    python -m benchmarks.gpu_train --allow-cpu --tasks 4 --train-tasks 8 --test-tasks 4 --out /tmp/gpu
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from benchmarks.common.plan_pairs import pairwise_accuracy, sample_tasks
from benchmarks.common.results_io import RESULTS, command_line, provenance, write_section
from benchmarks.common.steps import pair_table
from orchrm.config import CollectConfig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=150, help="collection size: tasks per domain (default 150, cached)")
    ap.add_argument("--train-tasks", type=int, default=400, help="training tasks (default 400)")
    ap.add_argument("--test-tasks", type=int, default=120)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=128, help="pairs per step (default 128)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--allow-cpu", action="store_true", help="run on the CPU as a smoke test")
    ap.add_argument("--out", type=Path, default=None, help="results folder (default: benchmarks/results on CUDA)")
    args = ap.parse_args(argv)

    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        print("gpu_train.py: no CUDA device here; run it on a GPU machine (or --allow-cpu for a smoke test)", file=sys.stderr)
        return 2
    out_dir = args.out or (RESULTS if cuda else None)
    device = torch.device("cuda" if cuda else "cpu")

    from orchrm import BradleyTerryModel, Trainer

    collection = CollectConfig(tasks_per_domain=args.tasks, plans_per_task=8, seed=args.seed)
    train, test = sample_tasks(pair_table(collection).frame, args.train_tasks, args.test_tasks, args.seed)
    rows = []
    for architecture in ("shared_prompt", "joint"):
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        model = BradleyTerryModel(encoder="minilm", architecture=architecture, max_length=args.max_length, dropout=0.0)
        trainer = Trainer(model=model, batch_size=args.batch_size, lr=args.lr, val_fraction=0.0, seed=args.seed,
                          precision="auto", device=device, progress=False)
        t0 = time.perf_counter()
        result = trainer.train(pairs=train, epochs=args.epochs)
        wall = time.perf_counter() - t0
        peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
        acc = pairwise_accuracy(lambda p, a, m=model: m.score(p, a, batch_size=256).numpy(), test)
        rows.append({
            "architecture": architecture, "pairs_per_second": result.pairs_per_second, "train_seconds": result.train_seconds,
            "wall_seconds": wall, "peak_memory_mib": peak, "test_accuracy": acc, "steps": result.steps,
            "precision": "bf16 autocast" if cuda and torch.cuda.is_bf16_supported() else "fp32",
        })
        print(f"{architecture:14s} {result.pairs_per_second:9.1f} pairs/s  peak "
              f"{'-' if peak is None else f'{peak:.0f} MiB'}  test accuracy {acc:.3f}", file=sys.stderr)

    gpu = {
        **provenance(command_line("benchmarks.gpu_train", ap, args), torch=torch.__version__),
        "device": torch.cuda.get_device_name(0) if cuda else "cpu (smoke test)",
        "torch": torch.__version__,
        "train_pairs": len(train), "train_tasks": int(train["task_id"].nunique()), "test_pairs": len(test),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "out"},
        "rows": rows,
    }
    if out_dir is None:
        print(json.dumps(gpu, indent=2))
        return 0
    print(f"wrote the gpu section of {write_section(out_dir / 'train.json', 'gpu', gpu)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
