"""The sweep the training defaults were chosen from: encoder x learning rate, early stopping on the
validation loss, each run judged on held-out tickets of a foreign system's traces.

The data is the support-desk generator of :mod:`orchrm.execution.support_desk` at a *tuning* seed
(``--seed``, 101): ``orchrm ingest`` -> pairs (default :class:`PairsConfig`) -> ``fit``. The
figure of merit is the accuracy on every plan pair of the held-out (``split == "test"``) tickets
whose expected quality differs (the generator knows it), beside the accuracy on the held-out pair
table (noisy labels) and the best validation loss. The test suite then judges the chosen defaults
on another seed (``tests/model/test_defaults_learn.py``), never on this one.

Each run trains on one thread (the machines here have two cores, shared).

    python -m benchmarks.sweep_defaults                      # the whole grid, ~25 min on 2 cores
    python -m benchmarks.sweep_defaults --only scratch-lr3e-4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common.results_io import RESULTS, git_commit, machine, write_json
from orchrm.execution.support_desk import make_tickets, traces_of, true_pair_accuracy
from orchrm.model.callbacks import TrainCallback


@dataclass(frozen=True)
class Run:
    """One point of the grid: a name, the model fields and the train fields it sets."""

    name: str
    model: dict
    train: dict


def grid(epochs: int) -> list[Run]:
    """Scratch first (the default encoder: no download, the write-up's model), then MiniLM frozen
    (features computed once, only the head trains, so it gets twice the epoch budget)."""
    return [
        Run("scratch-lr1e-3", {"encoder": "scratch"}, {"lr": 1e-3, "epochs": epochs, "patience": 3}),
        Run("scratch-lr3e-4", {"encoder": "scratch"}, {"lr": 3e-4, "epochs": epochs, "patience": 3}),
        Run("minilm-frozen-lr1e-3", {"encoder": "minilm", "train_layers": 0}, {"lr": 1e-3, "epochs": 2 * epochs, "patience": 3}),
        Run("minilm-frozen-lr3e-3", {"encoder": "minilm", "train_layers": 0}, {"lr": 3e-3, "epochs": 2 * epochs, "patience": 3}),
        # patience 3 stopped both scratch runs at epoch 6 on a noisy validation loss (30 tickets)
        Run("scratch-lr3e-4-patience6", {"encoder": "scratch"}, {"lr": 3e-4, "epochs": epochs + 5, "patience": 6}),
        Run("scratch-lr1e-4", {"encoder": "scratch"}, {"lr": 1e-4, "epochs": epochs, "patience": 3}),
    ]


class _Echo(TrainCallback):
    """Prints each evaluation (a sweep runs for minutes; this shows it is alive)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def on_eval(self, record, model) -> None:
        print(f"  {self.name} epoch {record.epoch}: train loss {record.train_loss:.4f} val loss {record.val_loss:.4f} "
              f"val acc {record.val_accuracy:.3f} ({record.seconds:.0f} s)", file=sys.stderr, flush=True)


def run_one(run: Run, pairs, tickets) -> dict:
    import numpy as np

    from orchrm.config import ModelConfig, TrainConfig
    from orchrm.model.trainer import fit

    model_config = ModelConfig(**run.model)
    train_config = TrainConfig(**run.train)
    start = time.perf_counter()
    result = fit(pairs, model_config, train_config, callbacks=[_Echo(run.name)], progress=False)
    seconds = time.perf_counter() - start
    model = result.model.eval()
    test = pairs[pairs.split == "test"]
    held_out = {t.task_id for t in tickets} & set(test.task_id)
    chosen = model.score(list(test.prompt), list(test.chosen))
    rejected = model.score(list(test.prompt), list(test.rejected))
    return {
        "name": run.name,
        "model": run.model,
        "train": run.train,
        "true_pair_accuracy": true_pair_accuracy(
            lambda q, plans: model.score(q, plans).tolist(), [t for t in tickets if t.task_id in held_out]
        ),
        "test_pair_accuracy": float((chosen > rejected).float().mean()),
        "best_val_loss": result.best_val_loss,
        "best_val_accuracy": result.best_val_accuracy,
        "best_epoch": result.best_epoch,
        "epochs_run": len(result.history),
        "stopped_early": result.stopped_early,
        "seconds": round(seconds, 1),
        "train_pairs": result.train_pairs,
        "val_losses": [None if v is None else round(v, 4) for v in result.val_losses],
        "held_out_tickets": len(held_out),
        "margin_mean": float(np.mean(test.margin)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=101, help="tuning seed of the generator (the tests use others)")
    parser.add_argument("--tickets", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3, help="runs per (ticket, plan)")
    parser.add_argument("--epochs", type=int, default=15, help="epoch budget of a scratch run (MiniLM frozen: twice)")
    parser.add_argument("--only", nargs="*", default=None, help="run only these names of the grid")
    parser.add_argument("--out", default=str(RESULTS / "sweep_defaults.json"), help="results file")
    parser.add_argument(
        "--reuse", action="store_true",
        help="keep the runs the results file already holds for the same data and settings (a stopped sweep continues)",
    )
    args = parser.parse_args(argv)

    import torch

    from orchrm.data.ingest import ingest_traces
    from orchrm.data.pairs import build_pairs

    torch.set_num_threads(1)
    tickets = make_tickets(args.tickets, seed=args.seed)
    pairs = build_pairs(ingest_traces(traces_of(tickets, seed=args.seed, runs=args.runs)))
    runs = [r for r in grid(args.epochs) if args.only is None or r.name in args.only]
    result = {
        "seed": args.seed, "tickets": args.tickets, "runs": args.runs,
        "pairs": pairs.split.value_counts().to_dict(), "runs_out": [], "commit": git_commit(),
        "command": " ".join(["python -m benchmarks.sweep_defaults", *(sys.argv[1:] if argv is None else argv)]),
    }
    earlier = {}
    path = Path(args.out).with_suffix(".json")
    if args.reuse and path.is_file():
        old = json.loads(path.read_text())
        if (old["seed"], old["tickets"], old["runs"]) == (args.seed, args.tickets, args.runs):
            for r in old["runs_out"]:  # files written before every run named its patience ran at the file's
                r["train"].setdefault("patience", old["patience"])
            earlier = {(r["name"], json.dumps(r["model"]), json.dumps(r["train"])): r for r in old["runs_out"]}
            result["commands"] = [*old.get("commands", [old["command"]]), result["command"]]
    for run in runs:  # the file is rewritten after every run, so a stopped sweep keeps what it measured
        key = (run.name, json.dumps(run.model), json.dumps(run.train))
        result["runs_out"].append(earlier[key] if key in earlier else run_one(run, pairs, tickets))
        r = result["runs_out"][-1]
        print(f"{r['name']:24s} true-pair {r['true_pair_accuracy']:.3f} test {r['test_pair_accuracy']:.3f} "
              f"val loss {r['best_val_loss']:.4f} epochs {r['epochs_run']} ({r['best_epoch']}) {r['seconds']:.0f} s", flush=True)
        result["machine"] = machine(torch=torch.__version__, threads=1)
        write_json(path, result)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
