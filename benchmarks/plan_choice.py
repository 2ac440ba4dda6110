"""Does plan choice matter in the sandbox, and not only as "more compute wins"? (DESIGN §4)

For each domain: tasks the noise model was not tuned on (the built-in generator at a fresh seed,
and the real data set when it is present), 8 candidate plans per task from the base sampler, and
each candidate's expected quality estimated by re-running it ``--repeats`` times (the candidate
pool of ``orchrm.evaluation.build_pool``). Prints and writes, per domain:

- ``mean``: the mean candidate's expected quality (what a random pick of the 8 gets);
- ``oracle``: the expected-quality oracle (the best of the 8 in expectation) and the gap;
- ``top shape``: the plan shape (agent types and wiring; tiers and parameters dropped) that is the
  expected-best on most tasks, and its share (target: at most 40%);
- ``priciest best``: how often the most expensive candidate is the expected-best (target: under
  half);
- the accuracy of the small and large tier as single CoT, for scale.

The expected-best is the candidate with the highest estimated expected quality; ties (common on
easy tasks where several plans always succeed) go to the cheaper plan, as a cost-aware selector
would choose. The ``strict`` columns count a shape (or the most expensive plan) for a task whenever
it is among the tied best, which is the least favourable reading.

    python -m benchmarks.plan_choice            # all domains, 20 repeats
    python -m benchmarks.plan_choice --domains math --tasks 30
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from benchmarks.common.results_io import (
    RESULTS,
    command_line,
    provenance,
    use_sibling_data,
    write_json,
)
from benchmarks.common.targets import PLAN_CHOICE

# tasks of these seeds were never looked at while the noise model was set
HELD_OUT_SEED = 2026
REAL_SOURCES = {"math": "gsm8k", "multihop": "strategyqa", "webqa": "squad"}


def _cot_baselines(task, repeats: int, seed: int) -> dict[str, float]:
    """Expected quality of a single CoT call on each tier (``orchrm.evaluation.expected_quality``)."""
    from orchrm.evaluation.pool import expected_quality
    from orchrm.execution.executor import MultiAgentExecutor
    from orchrm.plans import Plan

    global _EX
    _EX = _EX or MultiAgentExecutor()
    return {tier: expected_quality(_EX, task, Plan.parse(f'<agent id="a1" type="CoT" model="{tier}"/>'), repeats=repeats, seed=seed)
            for tier in ("small", "large")}


_EX = None


def evaluate_tasks(tasks, n_plans: int, repeats: int, seed: int, workers: int, pool) -> list[dict]:
    """Per task: each of ``n_plans`` base-sampler candidates with its expected quality and cost
    from ``repeats`` re-runs (``orchrm.evaluation.build_pool``), and the CoT baselines."""
    from orchrm.config import config_from_dict
    from orchrm.evaluation.pool import build_pool
    from orchrm.plans import Plan

    cfg = config_from_dict({"collect": {"workers": workers},
                            "evaluate": {"seed": seed, "candidates": n_plans, "repeats": repeats, "pool_seeds": [0],
                                         "best_of": [1], "gates": {"best_of": min(2, n_plans)}}})
    frame = build_pool(cfg, tasks=tasks, progress=False).frame
    cot = dict(zip([t.task_id for t in tasks], pool.map(_cot_baselines, tasks, [repeats] * len(tasks), [seed] * len(tasks)), strict=True))
    results = []
    for task_id, g in frame.groupby("task_id", sort=False):
        cands = [{"plan_id": r.plan_id, "shape": Plan.parse(r.plan_text).shape(), "eq": r.expected_quality, "cost": r.expected_cost}
                 for r in g.itertuples()]
        results.append({"task_id": task_id, "candidates": cands, "cot": cot[task_id]})
    return results


def summarize_domain(results: list[dict], tol: float = 1e-9) -> dict:
    n = len(results)
    mean_c = sum(sum(c["eq"] for c in r["candidates"]) / len(r["candidates"]) for r in results) / n
    oracle = sum(max(c["eq"] for c in r["candidates"]) for r in results) / n
    best_shapes, strict, priciest, priciest_tied = Counter(), Counter(), 0, 0
    for r in results:
        cands = r["candidates"]
        top = max(c["eq"] for c in cands)
        tied = [c for c in cands if c["eq"] >= top - tol]
        best = min(tied, key=lambda c: (c["cost"], c["plan_id"]))
        best_shapes[best["shape"]] += 1
        for shape in {c["shape"] for c in tied}:
            strict[shape] += 1
        most_expensive = max(cands, key=lambda c: c["cost"])["plan_id"]
        priciest += best["plan_id"] == most_expensive
        priciest_tied += any(c["plan_id"] == most_expensive for c in tied)
    shape, count = best_shapes.most_common(1)[0]
    sshape, scount = strict.most_common(1)[0]
    return {
        "tasks": n,
        "mean_candidate": round(mean_c, 4),
        "oracle": round(oracle, 4),
        "gap_points": round(100 * (oracle - mean_c), 1),
        "top_shape": shape,
        "top_shape_share": round(count / n, 3),
        "top_shape_strict": sshape,
        "top_shape_share_strict": round(scount / n, 3),
        "priciest_best_share": round(priciest / n, 3),
        "priciest_among_tied_best_share": round(priciest_tied / n, 3),
        "distinct_best_shapes": len(best_shapes),
        "cot_small": round(sum(r["cot"]["small"] for r in results) / n, 3),
        "cot_large": round(sum(r["cot"]["large"] for r in results) / n, 3),
        "passes": bool(100 * (oracle - mean_c) >= PLAN_CHOICE.gap_points and count / n <= PLAN_CHOICE.top_shape_share
                       and priciest / n < PLAN_CHOICE.priciest_best_share),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--domains", nargs="+", default=["math", "code", "multihop", "webqa"])
    ap.add_argument("--tasks", type=int, default=50, help="tasks per domain and source (code: at most 30 by default)")
    ap.add_argument("--plans", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--seed", type=int, default=HELD_OUT_SEED)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-real", action="store_true", help="skip the real data sets")
    ap.add_argument("--out", type=Path, default=RESULTS / "plan_choice.json")
    args = ap.parse_args(argv)
    use_sibling_data()

    from orchrm.errors import TaskError
    from orchrm.execution.tasks import load_tasks

    report: dict = {**provenance(command_line("benchmarks.plan_choice", ap, args)), "repeats": args.repeats, "plans": args.plans, "seed": args.seed, "domains": {}}
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=get_context("spawn")) as pool:
        for domain in args.domains:
            sources = ["builtin"] + ([] if args.no_real or domain not in REAL_SOURCES else [REAL_SOURCES[domain]])
            for source in sources:
                n = min(args.tasks, 30) if domain == "code" and args.tasks == 50 else args.tasks
                try:
                    tasks = load_tasks(domain, n, seed=args.seed, source=source)
                except TaskError as exc:
                    print(f"skip {domain}:{source}: {exc}", file=sys.stderr)
                    continue
                t0 = time.perf_counter()
                results = evaluate_tasks(tasks, args.plans, args.repeats, args.seed, args.workers, pool)
                summary = summarize_domain(results)
                summary["seconds"] = round(time.perf_counter() - t0, 1)
                report["domains"][f"{domain}:{source}"] = summary
                print(f"{domain}:{source}: {json.dumps(summary)}", flush=True)

    print(f"wrote {write_json(args.out, report)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
