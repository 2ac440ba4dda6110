"""A nightly retrain of the default model: ``orchrm train`` on ``--pairs`` pairs, on this machine
(issue 24: under five minutes on 2 CPU cores).

The pairs come from the built-in defaults, no ``--config`` (what ``orchrm collect`` and ``orchrm
pairs`` build for a sandbox night), ``--pairs`` of them drawn at random (seed 0; their ``split``
kept). ``orchrm train`` runs as its own process with the built-in model and training settings,
as the nightly flow's ``process`` launcher runs it: the time is the process's wall-clock time
from start to the saved model (imports, tokenizer, training, validation, checkpoints), ``--runs``
times. Reported beside it: epochs run, the best epoch, training pairs per second (the Trainer's
own figure, ``train_result.json``). ``--members N`` also times, once each, the opt-in ensemble
``orchrm train --members N`` on the same pairs (N models trained one after another), and
``--configs`` a candidate default, ``orchrm train --config <path>`` ``--runs`` times on the same pairs
in the same run (its ``model:`` and ``train:`` sections; the pairs stay the built-in collection's), so
that its time is a ratio to the default's measured beside it.

    nice -n 19 python -m benchmarks.nightly_retrain             # writes results/nightly_retrain.json
    nice -n 19 python -m benchmarks.nightly_retrain --pairs 500 --runs 1 --out /tmp/nr
    nice -n 19 python -m benchmarks.nightly_retrain --members --configs benchmarks/configs/joint_small.yaml --out /tmp/nr
    python -m benchmarks.nightly_retrain --threads 1 --runs 1 --members --configs benchmarks/configs/joint.yaml  # beside other work
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import steps
from benchmarks.common.results_io import RESULTS, command_line, provenance, write_json
from benchmarks.common.targets import NIGHTLY
from orchrm.config import CollectConfig, PairsConfig


def sampled_pairs(n: int, seed: int) -> tuple[object, int]:
    """``n`` pairs drawn from the built-in collection's pair table (all of them when it has fewer),
    and how many the table holds."""
    table = steps.pair_table(CollectConfig(), None, PairsConfig()).frame
    if len(table) < n:
        print(f"the built-in collection gives {len(table)} pairs, fewer than --pairs {n}: training on all of them",
              file=sys.stderr, flush=True)
        return table, len(table)
    return table.sample(n=n, random_state=seed).reset_index(drop=True), len(table)


def within_budget(worst_seconds: float, pairs: int) -> bool:
    """Whether a retrain whose slowest run took ``worst_seconds`` on ``pairs`` pairs meets the nightly target."""
    return bool(worst_seconds < NIGHTLY.seconds and pairs >= NIGHTLY.pairs)


def one_run(pairs_path: Path, out: Path, *, members: int | None = None, config: Path | None = None,
            threads: int | None = None) -> dict:
    """``orchrm train`` (with ``--members`` and ``--config``, when given; at ``threads`` torch threads)
    in a process of its own: its wall-clock seconds and what its ``train_result.json`` says (an
    ensemble's epochs: each member's)."""
    extra = ([] if members is None else ["--members", str(members)]) + ([] if config is None else ["--config", str(config)])
    env = None if threads is None else {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "orchrm.cli", "train", "--pairs", str(pairs_path), "--out", str(out), *extra],
                   check=True, env=env)
    seconds = time.perf_counter() - t0
    result = json.loads((out / "train_result.json").read_text())
    each = result.get("members") or [result]
    return {"seconds": round(seconds, 1), "epochs_run": "+".join(str(len(m["history"])) for m in each),
            "best_epoch": "/".join(str(m["best_epoch"]) for m in each),
            "pairs_per_second": round(result["pairs_per_second"], 1), "train_seconds": round(result["train_seconds"], 1),
            "train_pairs": result["train_pairs"], "val_pairs": result["val_pairs"],
            **({} if members is None else {"members": members})}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=10_000, help="pairs to train on (default 10000)")
    ap.add_argument("--runs", type=int, default=2, help="timed retrains (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the pair sample")
    ap.add_argument("--members", type=int, nargs="*", default=[3],
                    help="also time the opt-in ensemble `orchrm train --members N` once for each N (default 3; none: skip)")
    ap.add_argument("--configs", type=Path, nargs="*", default=[], metavar="YAML",
                    help="also time `orchrm train --config YAML` --runs times for each (a candidate default; default: none)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads of every timed `orchrm train` (OMP_NUM_THREADS; default: torch's, the "
                         "machine's cores). Pin it when anything else runs beside: oversubscribed threads train "
                         "many times slower")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        ap.error(f"--threads {args.threads}: give at least 1")
    missing = [str(c) for c in args.configs if not c.is_file()]
    if missing:
        ap.error(f"--configs: no such file {', '.join(missing)}")
    import torch

    from orchrm.data.tables import write_table

    pairs, available = sampled_pairs(args.pairs, args.seed)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pairs.parquet"
        write_table(pairs, path)
        for i in range(args.runs):
            runs.append(one_run(path, Path(tmp) / f"model-{i}", threads=args.threads))
            print(f"run {i + 1}: {runs[-1]}", file=sys.stderr, flush=True)
        ensembles = []
        for n in args.members:
            ensembles.append(one_run(path, Path(tmp) / f"members-{n}", members=n, threads=args.threads))
            print(f"--members {n}: {ensembles[-1]}", file=sys.stderr, flush=True)
        configs = []
        for c, config in enumerate(args.configs):
            timed = []
            for i in range(args.runs):
                timed.append(one_run(path, Path(tmp) / f"config-{c}-{i}", config=config, threads=args.threads))
                print(f"--config {config}, run {i + 1}: {timed[-1]}", file=sys.stderr, flush=True)
            slowest = max(r["seconds"] for r in timed)
            configs.append({"config": config.as_posix(), "runs": timed, "worst_seconds": slowest,
                            "met": within_budget(slowest, len(pairs))})
    worst = max(r["seconds"] for r in runs)
    result = {
        "benchmark": "nightly retrain of the default model (orchrm train, built-in defaults)",
        **provenance(command_line("benchmarks.nightly_retrain", ap, args), torch=torch.__version__,
                     torch_threads=torch.get_num_threads()),
        "pairs": int(len(pairs)), "pairs_available": int(available),
        "collection": CollectConfig().model_dump(mode="json"),
        "runs": runs,
        "worst_seconds": worst,
        "target": {"seconds": NIGHTLY.seconds, "pairs": NIGHTLY.pairs},
        "met": within_budget(worst, len(pairs)),
        "ensembles": ensembles,
        "configs": configs,
    }
    print(f"wrote {write_json(args.out / 'nightly_retrain.json', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
