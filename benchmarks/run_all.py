"""Run every benchmark in sequence; each writes its results under benchmarks/results/.

    python benchmarks/run_all.py                 # all
    python benchmarks/run_all.py collect pairs   # some

The real data sets (GSM8K, SQuAD, StrategyQA) are read from $ORCHRM_DATA_DIR; when it is unset
and a ``shared/data`` folder sits beside the project, that folder is used; without either, the
benchmarks run on the built-in generators only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_io import use_sibling_data  # noqa: E402

HERE = Path(__file__).resolve().parent
BENCHES = {
    "collect": "bench_collect.py",
    "plan_choice": "bench_plan_choice.py",
    "pairs": "bench_pairs.py",
    "accuracy": "bench_accuracy.py",
    "latency": "bench_latency.py",
    "train": "bench_train.py",
    "best_of_n": "bench_best_of_n.py",
    "token_efficiency": "bench_token_efficiency.py",
}


def main(argv: list[str]) -> int:
    chosen = argv or list(BENCHES)
    unknown = [c for c in chosen if c not in BENCHES]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; choose from {list(BENCHES)}", file=sys.stderr)
        return 2
    use_sibling_data()
    env = dict(os.environ)
    failed = []
    for name in chosen:
        print(f"== {name}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, str(HERE / BENCHES[name])], env=env)
        print(f"== {name}: exit {rc} after {time.perf_counter() - t0:.0f} s", flush=True)
        if rc:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
