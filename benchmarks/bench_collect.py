"""Collection speed: plan executions per second per domain.

Two figures per domain, measured in one run:

- ``single``: one process, warm (domain state, BM25 indexes, code sandbox ready), executing
  ``--plans`` candidate plans on each of ``--tasks`` tasks, quality included;
- ``parallel``: ``orchrm.execution.collect.collect`` with ``--workers`` processes, end to end (process
  start-up, task loading and building the DataFrame included).

Targets (DESIGN / issue 2, on a 2-core machine): >= 200/s for math, multihop and webqa, >= 20/s
for code.

    python benchmarks/bench_collect.py
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from results_io import command_line, provenance, write_json, write_text  # noqa: E402

RESULTS = Path(__file__).parent / "results"
TARGET = {"math": 200, "code": 20, "multihop": 200, "webqa": 200}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--domains", nargs="+", default=["math", "code", "multihop", "webqa"])
    ap.add_argument("--tasks", type=int, default=100, help="tasks per domain (code: a third of it)")
    ap.add_argument("--plans", type=int, default=8)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=str(RESULTS / "collect.json"))
    args = ap.parse_args(argv)

    from orchrm.execution.collect import collect, plans_for_task
    from orchrm.execution.executor import MultiAgentExecutor
    from orchrm.execution.tasks import load_tasks

    report = {**provenance(command_line("benchmarks/bench_collect.py", ap, args)), "workers": args.workers, "plans_per_task": args.plans, "domains": {}}
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
            "target_per_s": TARGET.get(domain),
            "meets_target": parallel >= TARGET.get(domain, 0),
        }
        print(domain, json.dumps(report["domains"][domain]), flush=True)

    out = Path(args.out)
    write_json(out, report)
    md = [
        f"# Collection speed ({report['machine']['cpus']} CPU cores, {args.workers} workers, {args.plans} plans per task)",
        "",
        f"Machine: {report['machine']['cpus']} CPUs ({report['machine']['cpu']}), load average "
        f"{report['machine']['load_average'][0]} at the start.",
        "",
        "| domain | tasks | single process (plans/s) | parallel, end to end (plans/s) | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for d, r in report["domains"].items():
        md.append(
            f"| {d} | {r['tasks']} | {r['single_process_per_s']:.0f} | {r['parallel_per_s']:.0f} | {r['target_per_s']} | {'yes' if r['meets_target'] else 'no'} |"
        )
    write_text(out.with_suffix(".md"), "\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
