"""Held-out plan-level pairwise accuracy per domain and encoder, on the sandbox (issue 4).

Collects ``--tasks`` tasks per domain with 8 candidate plans each (``orchrm.execution.collect.collect``),
builds pairs (``orchrm.data.pairs.build_pairs``: plan and node pairs, splits by task), trains a reward
model per encoder on the ``train`` split (early stopping on ``val``), and reports the pairwise
accuracy on the **test tasks** (never seen in training), per domain, for plan-level pairs (the
figure of interest) and node-level pairs, with the number of pairs and tasks behind each figure
and a bootstrap 95% interval over test tasks. For context it also reports two baselines that need
no learning: *length* (the longer plan text wins) and *cost* (the plan with more agent calls and
the large tier wins) -- what a "more compute is better" rule scores on the same pairs.

Run niced on a shared machine (collection and pairs are cached under ``.orchrm/bench``:
:mod:`benchmarks.common.steps`)::

    nice python -m benchmarks.accuracy                      # writes results/accuracy.json
    nice python -m benchmarks.accuracy --encoders scratch,scratch-joint,minilm-frozen
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common.results_io import RESULTS, command_line, provenance, write_json
from benchmarks.common.steps import pair_table
from orchrm.config import CollectConfig
from orchrm.evaluation.metrics import accuracy_table

#: encoder name -> (BradleyTerryModel keyword arguments, Trainer keyword arguments)
ENCODERS: dict[str, tuple[dict, dict]] = {
    "scratch": ({}, {"lr": 3e-4}),
    "scratch-joint": ({"architecture": "joint"}, {"lr": 3e-4}),
    "minilm-frozen": ({"encoder": "minilm", "train_layers": 0, "dropout": 0.0}, {"lr": 1e-3}),
    "minilm-top2": ({"encoder": "minilm", "train_layers": 2, "dropout": 0.0, "max_length": 160}, {"lr": 1e-4}),
}


def _calls(plan: str) -> float:
    """Agent calls a plan makes, with the large tier counted 3x: the 'cost' baseline."""
    total = 0.0
    for node in re.findall(r"<agent [^>]*/>", plan):
        n = 1
        for key in ("k", "agents"):
            m = re.search(rf'\b{key}="(\d+)"', node)
            if m:
                n *= int(m.group(1))
        m = re.search(r'\brounds="(\d+)"', node)
        n *= 1 + int(m.group(1)) if m else 1
        m = re.search(r'\biterations="(\d+)"', node)
        n *= 1 + int(m.group(1)) if m else 1
        total += n * (3 if 'model="large"' in node else 1)
    return total


def accuracy_rows(test: pd.DataFrame, correct: np.ndarray, method: str) -> list[dict]:
    """Rows of accuracy.json for one method: accuracy per (granularity, domain) with its 95%
    bootstrap interval over test tasks (``orchrm.evaluation.accuracy_table``)."""
    table = accuracy_table(test, correct, bootstrap=1000, seed=0)
    table = table[(table["granularity"] != "all") & (table["domain"] != "all")]
    return [{"method": method, "granularity": r.granularity, "domain": r.domain, "accuracy": float(r.accuracy),
             "ci95": [float(r.ci_low), float(r.ci_high)], "pairs": int(r.pairs), "tasks": int(r.tasks)}
            for r in table.itertuples()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=160, help="tasks per domain (default 160: about 30 test tasks per domain)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=6, help="at most this many epochs (default 6)")
    ap.add_argument("--encoders", default="scratch,scratch-joint,minilm-frozen", help=f"any of {','.join(ENCODERS)}")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from orchrm import BradleyTerryModel, Trainer
    from orchrm.evaluation.metrics import score_pairs

    pairs = pair_table(CollectConfig(tasks_per_domain=args.tasks, plans_per_task=8, seed=args.seed)).frame
    test = pairs[pairs["split"] == "test"].reset_index(drop=True)
    print(f"{len(pairs)} pairs; splits {pairs['split'].value_counts().to_dict()}", file=sys.stderr)

    rows = []
    longer = test["chosen"].str.len() > test["rejected"].str.len()
    ties = test["chosen"].str.len() == test["rejected"].str.len()
    rows += accuracy_rows(test, np.where(ties, 0.5, longer.astype(float)), "baseline: longer plan wins")
    cost_c, cost_r = test["chosen"].map(_calls), test["rejected"].map(_calls)
    rows += accuracy_rows(test, np.where(cost_c == cost_r, 0.5, (cost_c > cost_r).astype(float)), "baseline: costlier plan wins")

    runs = []
    for name in args.encoders.split(","):
        model_kwargs, train_kwargs = ENCODERS[name]
        torch.manual_seed(args.seed)
        model = BradleyTerryModel(**model_kwargs)
        t0 = time.perf_counter()
        result = Trainer(model=model, batch_size=32, patience=2, progress=False, seed=args.seed, **train_kwargs).train(
            pairs=pairs, epochs=args.epochs
        )
        seconds = time.perf_counter() - t0
        r_c, r_r = score_pairs(lambda p, a, m=model: m.score(p, a, batch_size=128), test)
        rows += accuracy_rows(test, (r_c > r_r).astype(float), name)
        runs.append({"encoder": name, "model": model.config.model_dump(mode="json"), "train": train_kwargs,
                     "epochs_run": len(result.history), "best_epoch": result.best_epoch,
                     "best_val_accuracy": result.best_val_accuracy, "train_pairs": result.train_pairs,
                     "seconds": seconds, "pairs_per_second": result.pairs_per_second})
        plan = [r for r in rows if r["method"] == name and r["granularity"] == "plan"]
        print(f"{name}: " + ", ".join(f"{r['domain']} {r['accuracy']:.3f}" for r in plan) + f" ({seconds:.0f} s)", file=sys.stderr)

    result = {
        "benchmark": "held-out pairwise accuracy per domain and encoder (sandbox)",
        **provenance(command_line("benchmarks.accuracy", ap, args), torch=torch.__version__),
        "collection": {"tasks_per_domain": args.tasks, "plans_per_task": 8, "seed": args.seed,
                       "pairs": int(len(pairs)), "splits": {k: int(v) for k, v in pairs["split"].value_counts().items()}},
        "epochs": args.epochs,
        "runs": runs,
        "rows": rows,
    }
    print(f"wrote {write_json(args.out / 'accuracy.json', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
