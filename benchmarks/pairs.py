"""Pairs and their data-quality gate: speed, and what a usable pair costs to collect.

Three measurements (issue 3), written to ``benchmarks/results/pairs.json``:

1. **Pair building speed**: ``build_pairs`` on a synthetic artifact table of ``--artifacts`` rows
   (default 1M; numpy-generated, following the artifact schema, with real canonical plan texts),
   capped so that about 100k pairs come out. Target (:data:`benchmarks.common.targets.PAIRS`):
   100k pairs in under 5 s (2 cores).
2. **Validation time**: ``validate_pairs`` (Great Expectations, the ``expectations/pairs.json``
   suite, Data Docs included) on 100k pairs. Target: under 15 s.
3. **Collection tokens per usable pair**, per domain, from real sandbox collections
   (``orchrm.execution.collect.collect``): ``intermediate`` pairs need only plan *prefixes* to run (the
   depth-0 nodes), ``correct-over-incorrect`` pairs need full rollouts. For each source we count
   the tokens of the distinct artifacts the kept pairs rest on (prefix artifacts only for
   ``intermediate`` pairs: the node and its ancestors; every artifact of both executions for
   ``correct-over-incorrect``) and divide by the number of pairs; the mean of the per-pair
   ``collection_tokens`` column (which counts shared artifacts once per pair) is reported beside it.

Run it niced on a shared machine::

    nice python -m benchmarks.pairs            # all three
    nice python -m benchmarks.pairs --skip-collect
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common.results_io import RESULTS, command_line, provenance, write_json
from benchmarks.common.targets import PAIRS


def _plan_pool() -> list[str]:
    """Distinct canonical plans: one or two levels of the five agent types, two tiers."""
    from orchrm.plans import Plan

    first = [
        ("CoT", {"model": "small"}),
        ("CoT", {"model": "large"}),
        ("SelfConsistency", {"model": "small", "k": 5}),
        ("WebSearch", {"queries": 2, "top_k": 5}),
        ("Debate", {"model": "small", "agents": 3, "rounds": 2}),
    ]
    second = [
        ("Reflexion", {"model": "small", "iterations": 2}),
        ("Reflexion", {"model": "large", "iterations": 1}),
        ("SelfConsistency", {"model": "large", "k": 3}),
        ("CoT", {"model": "large"}),
        ("Debate", {"model": "large", "agents": 2, "rounds": 1}),
    ]
    plans = []
    for agent, params in first:
        if agent != "WebSearch":
            plans.append(Plan.build([{"id": "a1", "agent": agent, "params": params}]).render())
        for agent2, params2 in second:
            plans.append(
                Plan.build(
                    [{"id": "a1", "agent": agent, "params": params}, {"id": "a2", "agent": agent2, "params": params2}],
                    [("a1", "a2")],
                ).render()
            )
    return plans


def synthetic_artifacts(n_artifacts: int, *, plans_per_task: int = 8, seed: int = 0) -> pd.DataFrame:
    """An artifact table of about ``n_artifacts`` rows following the schema: tasks with
    ``plans_per_task`` distinct plans each, half from each sampler, qualities on a 5-level grid
    (retrieval nodes: null), contents of random length."""
    from orchrm.plans import Plan

    rng = np.random.default_rng(seed)
    pool = _plan_pool()
    parsed = [Plan.parse(t) for t in pool]
    n_nodes = np.array([len(p.nodes) for p in parsed])
    per_task = plans_per_task * n_nodes.mean()
    n_tasks = max(1, int(round(n_artifacts / per_task)))
    # distinct plans per task: the first plans_per_task of a random permutation
    choice = np.argsort(rng.random((n_tasks, len(pool))), axis=1)[:, :plans_per_task].ravel()
    task_of = np.repeat(np.arange(n_tasks), plans_per_task)
    slot = np.tile(np.arange(plans_per_task), n_tasks)
    sizes = n_nodes[choice]
    rows_plan = np.repeat(choice, sizes)
    rows_task = np.repeat(task_of, sizes)
    rows_slot = np.repeat(slot, sizes)
    node_index = np.arange(len(rows_plan)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    n = len(rows_plan)
    node_ids = np.array(["a1", "a2"], dtype=object)[node_index]
    agent_tab = np.array([[p.nodes[i].agent if i < len(p.nodes) else "" for i in range(2)] for p in parsed], dtype=object)
    agent = agent_tab[rows_plan, node_index]
    is_final = node_index == n_nodes[rows_plan] - 1
    quality = rng.choice(np.array([0.0, 0.25, 0.5, 0.75, 1.0]), size=n)
    quality[agent == "WebSearch"] = np.nan
    lengths = rng.integers(40, 600, size=n)
    filler = "the agent reasons step by step and writes its answer " * 12
    content = [f"{a} step {i}: {filler[:k]}" for i, (a, k) in enumerate(zip(agent, lengths, strict=True))]
    task_ids = np.array([f"task-{i:07d}" for i in range(n_tasks)], dtype=object)
    domains = np.array(["math", "code", "multihop", "webqa"], dtype=object)
    questions = np.array([f"Question {i}: how many widgets remain after {i % 97} are sold?" for i in range(n_tasks)], dtype=object)
    plan_ids = np.array([p.plan_id for p in parsed], dtype=object)
    prompt_tokens = rng.integers(20, 400, size=n)
    completion_tokens = lengths // 4
    return pd.DataFrame(
        {
            "artifact_id": [f"art-{i:08d}" for i in range(n)],
            "run_id": "bench",
            "task_id": task_ids[rows_task],
            "domain": domains[rows_task % 4],
            "question": questions[rows_task],
            "plan_id": plan_ids[rows_plan],
            "plan_text": np.array(pool, dtype=object)[rows_plan],
            "orchestrator": np.where(rows_slot % 2 == 0, "specialized", "base"),
            "node_id": node_ids,
            "agent": agent,
            "depth": node_index,
            "parent_ids": [[] if i == 0 else ["a1"] for i in node_index],
            "content": content,
            "answer": None,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "cost": (prompt_tokens + completion_tokens).astype(float),
            "is_final": is_final,
            "quality": quality,
            "created_at": pd.Timestamp("2026-01-01", tz="UTC"),
        }
    )


def bench_build(n_artifacts: int, target_pairs: int, seed: int) -> tuple[dict, pd.DataFrame]:
    from orchrm.data.pairs import PairwiseComparator

    t0 = time.perf_counter()
    artifacts = synthetic_artifacts(n_artifacts, seed=seed)
    gen_s = time.perf_counter() - t0
    n_tasks = artifacts["task_id"].nunique()
    cap = max(1, int(np.ceil(target_pairs / n_tasks)))
    comparator = PairwiseComparator(max_pairs_per_task=cap, seed=seed)
    comparator.build_pairs(artifacts.head(2000))  # warm imports and caches
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        pairs = comparator.build_pairs(artifacts)
        times.append(time.perf_counter() - t0)
    best = min(times)
    stats = comparator.last_stats
    return {
        "artifacts": len(artifacts),
        "tasks": int(n_tasks),
        "max_pairs_per_task": cap,
        "pairs": len(pairs),
        "pairs_by_source": {k: int(v) for k, v in pairs["source"].value_counts().sort_index().items()},
        "candidates_by_source": dict(stats.candidates),
        "seconds_best_of_3": round(best, 3),
        "seconds_all": [round(t, 3) for t in times],
        "pairs_per_second": round(len(pairs) / best),
        "artifacts_per_second": round(len(artifacts) / best),
        "generate_seconds": round(gen_s, 2),
        "target_seconds_for_100k_pairs": PAIRS.build_seconds,
        "meets_target": bool(best * 100_000 / max(len(pairs), 1) < PAIRS.build_seconds),
    }, pairs


def bench_validate(pairs: pd.DataFrame, n_pairs: int) -> dict:
    """Wall time of ``validate_pairs`` (derived columns, GX, result JSON and Data Docs) on
    ``n_pairs`` pairs: the first call in the process (GX imported inside it) and the best of two
    warm calls."""
    from orchrm.data.validation import validate_pairs

    sample = pairs.head(n_pairs).reset_index(drop=True)
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(3):
            t0 = time.perf_counter()
            report = validate_pairs(sample, out_dir=Path(tmp) / f"run{i}", raise_on_failure=False)
            times.append(time.perf_counter() - t0)
    warm = min(times[1:])
    return {
        "pairs": len(sample),
        "expectations": len(report.outcomes),
        "critical_failures": [o.name for o in report.failures],
        "warnings": [o.name for o in report.warnings],
        "seconds_first_call_with_gx_import": round(times[0], 3),
        "seconds_warm_best_of_2": round(warm, 3),
        "seconds_all": [round(t, 3) for t in times],
        "target_seconds": PAIRS.validate_seconds,
        "meets_target": bool(warm < PAIRS.validate_seconds),
        "meets_target_including_import": bool(times[0] < PAIRS.validate_seconds),
    }


def _distinct_tokens(artifacts: pd.DataFrame, pairs: pd.DataFrame, source: str) -> tuple[int, int]:
    """(tokens of the distinct artifacts behind ``source`` pairs, number of pairs)."""
    from orchrm.plans import Plan

    sub = pairs[pairs["source"] == source]
    if sub.empty:
        return 0, 0
    a = artifacts.assign(tokens=artifacts["prompt_tokens"] + artifacts["completion_tokens"]).set_index("artifact_id")
    used = pd.Index(pd.unique(pd.concat([sub["chosen_artifact_id"], sub["rejected_artifact_id"]])))
    rows = a.loc[used]
    if source == "intermediate":
        # the node and its ancestors in the same execution: the prefix that had to run
        keep = set()
        ancestors_cache: dict[tuple[str, str], set[str]] = {}
        for art_id, r in rows.iterrows():
            key = (r["plan_text"], r["node_id"])
            if key not in ancestors_cache:
                plan = Plan.parse(r["plan_text"])
                todo, anc = list(plan.parents(r["node_id"])), set()
                while todo:
                    p = todo.pop()
                    if p not in anc:
                        anc.add(p)
                        todo.extend(plan.parents(p))
                ancestors_cache[key] = anc
            keep.add(art_id)
            same = a[(a["run_id"] == r["run_id"]) & (a["task_id"] == r["task_id"]) & (a["plan_text"] == r["plan_text"])]
            keep.update(same.index[same["node_id"].isin(ancestors_cache[key])])
        return int(a.loc[list(keep), "tokens"].sum()), len(sub)
    # full rollouts: every artifact of both plans' executions on the task
    execs = rows[["run_id", "task_id", "plan_text"]].drop_duplicates()
    full = a.reset_index().merge(execs, on=["run_id", "task_id", "plan_text"])
    return int(full["tokens"].sum()), len(sub)


def bench_collection_tokens(domains: list[str], tasks: int, plans: int, seed: int) -> dict:
    from orchrm.data.pairs import PairwiseComparator
    from orchrm.execution.collect import collect

    out = {}
    for domain in domains:
        t0 = time.perf_counter()
        artifacts = collect(domains=[domain], tasks_per_domain=tasks, plans_per_task=plans, seed=seed, progress=False)
        collect_s = time.perf_counter() - t0
        # no cap: every usable pair counts; the prior source needs no execution and is left out
        pairs = PairwiseComparator(
            sources=("correct-over-incorrect", "intermediate"), max_pairs_per_task=None, seed=seed
        ).build_pairs(artifacts)
        row = {"tasks": int(artifacts["task_id"].nunique()), "artifacts": len(artifacts), "collect_seconds": round(collect_s, 1)}
        for source, label in (("intermediate", "intermediate"), ("correct-over-incorrect", "correct_over_incorrect")):
            sub = pairs[pairs["source"] == source]
            if source == "intermediate":
                # prefix-only pairs: nodes below the sink (depth-0 nodes of two-level plans)
                final_ids = set(artifacts.loc[artifacts["is_final"], "artifact_id"])
                prefix_only = ~sub["chosen_artifact_id"].isin(final_ids) & ~sub["rejected_artifact_id"].isin(final_ids)
                tokens, n = _distinct_tokens(artifacts, sub, source)
                row["intermediate_all_depths_pairs"] = n
                row["intermediate_all_depths_tokens_per_pair"] = round(tokens / n, 1) if n else None
                sub = sub[prefix_only]
            tokens, n = _distinct_tokens(artifacts, sub, source)
            row[f"{label}_pairs"] = n
            row[f"{label}_tokens_per_pair"] = round(tokens / n, 1) if n else None
            row[f"{label}_mean_collection_tokens"] = round(float(sub["collection_tokens"].mean()), 1) if n else None
        i, c = row["intermediate_tokens_per_pair"], row["correct_over_incorrect_tokens_per_pair"]
        row["token_ratio_correct_over_intermediate"] = round(c / i, 2) if i and c else None
        out[domain] = row
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifacts", type=int, default=1_000_000, help="synthetic artifacts for the speed test")
    ap.add_argument("--pairs", type=int, default=100_000, help="pairs to build and validate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--domains", nargs="+", default=["math", "code", "multihop", "webqa"])
    ap.add_argument("--tasks", type=int, default=20, help="tasks per domain for the collection-token benchmark")
    ap.add_argument("--plans", type=int, default=8, help="plans per task for the collection-token benchmark")
    ap.add_argument("--skip-collect", action="store_true", help="skip the collection-token benchmark")
    ap.add_argument("--out", type=Path, default=RESULTS / "pairs.json")
    args = ap.parse_args(argv)

    report: dict = {
        **provenance(command_line("benchmarks.pairs", ap, args), pandas=pd.__version__, numpy=np.__version__),
    }
    build, pairs = bench_build(args.artifacts, args.pairs, args.seed)
    report["build"] = build
    print(f"build: {build['pairs']} pairs from {build['artifacts']} artifacts in {build['seconds_best_of_3']} s", flush=True)
    report["validate"] = bench_validate(pairs, args.pairs)
    print(f"validate: {report['validate']['pairs']} pairs in {report['validate']['seconds_warm_best_of_2']} s "
          f"(first call {report['validate']['seconds_first_call_with_gx_import']} s)", flush=True)
    if args.skip_collect:
        report["collection_skipped"] = "--skip-collect"
    else:
        report["collection_setup"] = {"tasks_per_domain": args.tasks, "plans_per_task": args.plans, "seed": args.seed}
        report["collection_tokens"] = bench_collection_tokens(args.domains, args.tasks, args.plans, args.seed)
        for d, r in report["collection_tokens"].items():
            print(f"{d}: intermediate {r['intermediate_tokens_per_pair']} vs correct-over-incorrect "
                  f"{r['correct_over_incorrect_tokens_per_pair']} tokens/pair", flush=True)
    print(f"wrote {write_json(args.out, report)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
