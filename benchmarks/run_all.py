"""Run benchmarks in sequence, each in its own process, then render their pages.

    python -m benchmarks.run_all                 # every benchmark of BENCHES, then the renderer
    python -m benchmarks.run_all collect pairs   # some

Each writes ``benchmarks/results/<name>.json``; :mod:`benchmarks.render` then rebuilds every page,
``docs/results.md`` and the README's block (also after a failure: the others' pages are current).
``registry``, ``serving_load``, ``llm_backend``, ``sweep_defaults`` and ``gpu_train`` are run on their own (``python -m
benchmarks.<name>``). The real data sets (GSM8K, SQuAD, StrategyQA) are read from
``$ORCHRM_DATA_DIR``; when it is unset and a ``shared/data`` folder sits beside the project, that
folder is used; without either, the benchmarks run on the built-in generators only.
"""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.common.results_io import ROOT, use_sibling_data

#: in the order they run
BENCHES = ("collect", "scale_out", "plan_choice", "ingest", "pairs", "accuracy", "latency", "train", "best_of_n", "question_reading",
           "ensemble_reading", "cost_aware", "token_efficiency")


def run(module: str) -> int:
    """``python -m <module>`` from the project's root; its exit status."""
    print(f"== {module}", flush=True)
    t0 = time.perf_counter()
    rc = subprocess.call([sys.executable, "-m", module], cwd=ROOT)
    print(f"== {module}: exit {rc} after {time.perf_counter() - t0:.0f} s", flush=True)
    return rc


def main(argv: list[str]) -> int:
    chosen = argv or list(BENCHES)
    unknown = [c for c in chosen if c not in BENCHES]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; choose from {list(BENCHES)}", file=sys.stderr)
        return 2
    use_sibling_data()  # in this process's environment, which each benchmark's process inherits
    failed = [name for name in chosen if run(f"benchmarks.{name}")]
    if run("benchmarks.render"):
        failed.append("render")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
