"""Collection speed: plan executions per second per domain.

Two figures per domain, measured in one run:

- ``single``: one process, warm (domain state, BM25 indexes, code sandbox ready), executing
  ``--plans`` candidate plans on each of ``--tasks`` tasks, quality included;
- ``parallel``: ``orchrm.execution.collect.collect`` with ``--workers`` processes, end to end (process
  start-up, task loading and building the DataFrame included).

Targets (:data:`benchmarks.common.targets.COLLECT`, issue 2, on a 2-core machine): >= 200/s for
math, multihop and webqa, >= 20/s for code.

    python -m benchmarks.collect            # writes results/collect.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from benchmarks.common.results_io import RESULTS, command_line, provenance, write_json
from benchmarks.common.targets import COLLECT


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--domains", nargs="+", default=["math", "code", "multihop", "webqa"])
    ap.add_argument("--tasks", type=int, default=100, help="tasks per domain (code: a third of it)")
    ap.add_argument("--plans", type=int, default=8)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS / "collect.json")
    args = ap.parse_args(argv)

    from orchrm.execution.collect import collect, plans_for_task
    from orchrm.execution.executor import MultiAgentExecutor
    from orchrm.execution.tasks import load_tasks

    report = {**provenance(command_line("benchmarks.collect", ap, args)), "workers": args.workers, "plans_per_task": args.plans, "domains": {}}
    for domain in args.domains:
        n = max(4, args.tasks // 3) if domain == "code" else args.tasks
        tasks = load_tasks(domain, n, seed=args.seed)
        ex = MultiAgentExecutor()
        shares = {"base": 0.5, "specialized": 0.5}
        warm = tasks[0]
        for _, plan in plans_for_task(warm, args.plans, args.seed, shares):
            ex.run_plan(warm, plan, seed=args.seed)
        jobs = [(t, p) for t in tasks[1:] for _, p in plans_for_task(t, args.plans, args.seed, shares)]
        t0 = time.perf_counter()
        for task, plan in jobs:
            ex.run_plan(task, plan, seed=args.seed)
        single = len(jobs) / (time.perf_counter() - t0)

        t0 = time.perf_counter()
        df = collect(domains=[domain], tasks_per_domain=n, plans_per_task=args.plans, seed=args.seed, workers=args.workers, progress=False)
        wall = time.perf_counter() - t0
        executions = int(df["is_final"].sum())
        parallel = executions / wall
        report["domains"][domain] = {
            "tasks": n,
            "single_process_per_s": round(single, 1),
            "parallel_per_s": round(parallel, 1),
            "parallel_executions": executions,
            "parallel_wall_s": round(wall, 2),
            "target_per_s": COLLECT.per_second.get(domain),
            "meets_target": parallel >= COLLECT.per_second.get(domain, 0),
        }
        print(domain, json.dumps(report["domains"][domain]), flush=True)

    print(f"wrote {write_json(args.out, report)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
