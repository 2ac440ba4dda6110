"""Token efficiency of intermediate (prefix) pairs against correct-over-incorrect pairs (issue 17).

The question: how good a plan scorer do pairs make, per collection token? For several collection
budgets (more tasks) the same reward model is trained twice, once on each pair source, and judged
on held-out plan selection:

- ``correct-over-incorrect``: ``collect(mode="full")``, ``--plans`` candidate plans per task run to
  their final answers; the final artifacts of two plans make a pair (action: the plan text).
- ``intermediate``: ``collect(mode="branch", branch_depth=0)``, ``--branches`` plans with distinct
  first steps per task, of which only the first step runs; two first steps of one task make a pair,
  labelled by their intermediate artifacts' quality, their actions the steps as plans of their own
  (``pairs.intermediate_action: plan_prefix``: what the plan scorer reads).
- ablation, ``intermediate (node content)``: the same branch collections with the default node
  actions (the ``<agent .../>`` line plus the agent's output ``content``, which a plan scorer never
  sees), at a few budgets only: their long texts train several times slower.

A budget of T tasks per domain takes the first T tasks of one collection of the largest T, so the
budgets are nested; ``collection_tokens`` is every token that collection spent on those tasks
(prompt + completion, the artifacts behind no pair included). Every run trains the default scratch
model (``ModelConfig()``: 256 wide, 3 layers) with the default optimiser settings (lr 3e-4, batch
32), for at least 150 optimiser steps (``ceil(4800 / pairs)`` epochs, at least 4 and at most 20),
early stopping with patience 3 on the loss of the validation tasks (10% of the tasks, by hash; no
test split: held-out quality is measured on the pool below), one torch thread.

Held-out quality, through :mod:`orchrm.evaluation` unchanged: a candidate pool from
:func:`orchrm.evaluation.build_pool` on tasks of ``--seed`` 7331 (never a collection seed;
collection tasks excluded), ``--pool-tasks`` tasks per domain, ``--candidates`` base-sampler plans
each, executed once per pool seed and re-run ``--repeats`` times for their expected quality. The
primary figure is best-of-5 (N = 5) expected quality of the reward model's pick, with a 95%
bootstrap interval over tasks; pairwise accuracy is on held-out plan pairs of the same pool (two
candidates of one task whose expected qualities differ by at least 0.1).

Target: intermediate pairs reach the held-out quality of full-rollout pairs with at most 1/5 of the
collection tokens: the intermediate point with the most tokens at or below 1/5 of the largest
correct-over-incorrect budget must score at least that budget's quality (paired difference and its
interval over tasks reported beside it).

The two collections and the pool are cached under ``.orchrm/bench`` (:mod:`benchmarks.common.steps`).

    nice python -m benchmarks.token_efficiency          # writes results/token_efficiency.json
    nice python -m benchmarks.token_efficiency --tasks 2 5 --branch-tasks 1 2 --ablation-tasks \\
        --pool-tasks 5 --repeats 2 --out /tmp/te        # a quick look
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import steps
from benchmarks.common.results_io import RESULTS, command_line, machine, provenance, write_json
from benchmarks.common.targets import TOKEN_EFFICIENCY

N = TOKEN_EFFICIENCY.n  # best-of-N read for the primary figure
FRACTION = TOKEN_EFFICIENCY.fraction  # the target's token fraction
MIN_PAIR_VISITS = TOKEN_EFFICIENCY.min_pair_visits  # 150 optimiser steps of 32 pairs
HELD_OUT_MARGIN = 0.1  # expected-quality gap of a held-out plan pair
SOURCES = {  # label -> (collection mode, pair source, intermediate action)
    "correct-over-incorrect": ("full", "correct-over-incorrect", "node"),
    "intermediate": ("branch", "intermediate", "plan_prefix"),
    "intermediate (node content)": ("branch", "intermediate", "node"),
}


def first_tasks(artifacts: pd.DataFrame, per_domain: int) -> pd.DataFrame:
    """The rows of the first ``per_domain`` tasks of every domain (in collection order)."""
    order = artifacts.drop_duplicates("task_id")
    keep = order.groupby("domain", sort=False).head(per_domain)["task_id"]
    return artifacts[artifacts["task_id"].isin(set(keep))].reset_index(drop=True)


def tokens(artifacts: pd.DataFrame) -> int:
    return int((artifacts["prompt_tokens"] + artifacts["completion_tokens"]).sum())


def held_out_pairs(pool) -> pd.DataFrame:
    """Plan pairs of the pool: two candidates of one task whose expected qualities differ by at
    least :data:`HELD_OUT_MARGIN`, the better one chosen (pool seed 0's rows: every pool seed
    holds the same candidates)."""
    frame = pool.frame[pool.frame["pool_seed"] == pool.frame["pool_seed"].min()]
    rows = []
    for task_id, g in frame.groupby("task_id", sort=True):
        g = g.sort_values("candidate")
        texts, eq = g["plan_text"].tolist(), g["expected_quality"].to_numpy()
        for i in range(len(g)):
            for j in range(i + 1, len(g)):
                if abs(eq[i] - eq[j]) >= HELD_OUT_MARGIN:
                    win, lose = (i, j) if eq[i] > eq[j] else (j, i)
                    rows.append({"pair_id": f"{task_id}-{win}-{lose}", "task_id": task_id, "domain": g["domain"].iloc[0],
                                 "granularity": "plan", "source": "held-out expected quality",
                                 "prompt": g["question"].iloc[0], "chosen": texts[win], "rejected": texts[lose],
                                 "margin": float(abs(eq[i] - eq[j])), "split": "test"})
    return pd.DataFrame(rows)


def per_task_quality(model, pool) -> pd.Series:
    """Best-of-:data:`N` expected quality of the reward model's pick per task (mean over pool
    seeds), through :func:`orchrm.evaluation.best_of_n_picks`: the figure evaluate() reports."""
    from orchrm.evaluation.metrics import score_texts
    from orchrm.evaluation.selectors import best_of_n_picks

    frame = pool.frame.assign(reward=score_texts(model, pool.frame["question"], pool.frame["plan_text"]))
    picks = best_of_n_picks(frame, N)
    rm = picks[picks["selector"] == "reward_model"]
    return rm.groupby("task_id")["expected"].mean()


def train_and_evaluate(pairs: pd.DataFrame, *, pool, held_out: pd.DataFrame, evaluate_cfg, seed: int) -> dict:
    from orchrm.config import ModelConfig, TrainConfig
    from orchrm.evaluation.harness import evaluate
    from orchrm.model.trainer import fit

    train_pairs = int((pairs["split"] == "train").sum())
    epochs = int(min(20, max(4, math.ceil(MIN_PAIR_VISITS / max(train_pairs, 1)))))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as ckpt:
        result = fit(pairs, ModelConfig(seed=seed), TrainConfig(epochs=epochs, patience=3, seed=seed), checkpoint_dir=ckpt,
                     progress=False)
    train_s = time.perf_counter() - t0
    report = evaluate(result.model, pairs=held_out, pool=pool, config=evaluate_cfg)
    t = report.tables["best_of_n"]
    at = t[(t["domain"] == "all") & (t["N"] == N)].set_index("selector")
    rm = at.loc["reward_model"]
    m = report.metrics
    return {
        "row": {
            "train_pairs": train_pairs,
            "epochs": epochs,
            "epochs_run": len(result.history),
            "best_epoch": result.best_epoch,
            "train_seconds": round(train_s, 1),
            "quality": round(float(rm["expected"]), 4),
            "ci_low": round(float(rm["expected_ci_low"]), 4),
            "ci_high": round(float(rm["expected_ci_high"]), 4),
            "realised_quality": round(float(rm["quality"]), 4),
            "pairwise_accuracy": round(m["pairwise_accuracy"], 4),
            "pairwise_ci_low": round(m["pairwise_accuracy_ci_low"], 4),
            "pairwise_ci_high": round(m["pairwise_accuracy_ci_high"], 4),
            "gap_closed": round(m.get("gap_closed", float("nan")), 4),
        },
        "references": {s: round(float(at.loc[s, "expected"]), 4) for s in ("random", "cost_only", "length_only", "expected_oracle")},
        "per_task": per_task_quality(result.model, pool),
    }


def pair_counts(full: pd.DataFrame, branch: pd.DataFrame, per_domain: int) -> dict:
    """Pairs per domain for ``per_domain`` tasks: the prefix pairs a full collection yields today
    (node pairs with neither artifact final) against the branch mode's, with tokens per pair
    (the whole collection's tokens over its pairs)."""
    from orchrm.config import PairsConfig
    from orchrm.data.pairs import PairwiseComparator

    def build(df: pd.DataFrame, source: str, action: str) -> pd.DataFrame:
        cfg = PairsConfig(sources=(source,), intermediate_action=action, max_pairs_per_task=None, test_fraction=0.0)
        return PairwiseComparator(config=cfg).build_pairs(df)

    out = {}
    f, b = first_tasks(full, per_domain), first_tasks(branch, per_domain)
    for domain in sorted(f["domain"].unique()):
        fd, bd = f[f["domain"] == domain], b[b["domain"] == domain]
        final_f = set(fd.loc[fd["is_final"], "artifact_id"])
        final_b = set(bd.loc[bd["is_final"], "artifact_id"])
        node_f = build(fd, "intermediate", "node")
        prefix_f = node_f[~node_f["chosen_artifact_id"].isin(final_f) & ~node_f["rejected_artifact_id"].isin(final_f)]
        coi = build(fd, "correct-over-incorrect", "node")
        plan_b = build(bd, "intermediate", "plan_prefix")
        node_b = build(bd, "intermediate", "node")
        strict_b = plan_b[~plan_b["chosen_artifact_id"].isin(final_b) & ~plan_b["rejected_artifact_id"].isin(final_b)]
        tf, tb = tokens(fd), tokens(bd)
        out[domain] = {
            "full_tokens": tf, "branch_tokens": tb,
            "before_prefix_pairs": len(prefix_f), "before_intermediate_pairs_all_depths": len(node_f),
            "correct_over_incorrect_pairs": len(coi),
            "correct_over_incorrect_tokens_per_pair": round(tf / max(len(coi), 1), 1),
            "after_plan_prefix_pairs": len(plan_b), "after_plan_prefix_pairs_neither_final": len(strict_b),
            "after_node_pairs": len(node_b),
            "after_tokens_per_pair": round(tb / max(len(plan_b), 1), 1),
        }
    return out


def target(curve: list[dict], per_task: dict[tuple[str, int], pd.Series], bootstrap: int) -> dict:
    """Does an intermediate point with at most :data:`FRACTION` of the largest correct-over-incorrect
    budget's tokens reach that budget's quality? Also the same check against every smaller budget."""
    from orchrm.evaluation.metrics import bootstrap_means

    coi = [r for r in curve if r["source"] == "correct-over-incorrect"]
    inter = [r for r in curve if r["source"] == "intermediate"]
    checks = []
    for ref in sorted(coi, key=lambda r: r["collection_tokens"]):
        limit = FRACTION * ref["collection_tokens"]
        below = [r for r in inter if r["collection_tokens"] <= limit]
        if not below:
            checks.append({"reference_tokens": ref["collection_tokens"], "reference_quality": ref["quality"],
                           "token_limit": int(limit), "intermediate_tokens": None, "met": False,
                           "note": "no intermediate budget that small"})
            continue
        best = max(below, key=lambda r: r["collection_tokens"])
        a = per_task[("intermediate", best["tasks_per_domain"])]
        b = per_task[("correct-over-incorrect", ref["tasks_per_domain"])].reindex(a.index)
        diff = (a - b).to_numpy()[:, None]
        means = bootstrap_means(diff, n=bootstrap, seed=0)[:, 0]
        checks.append({
            "reference_tasks_per_domain": ref["tasks_per_domain"], "reference_tokens": ref["collection_tokens"],
            "reference_quality": ref["quality"], "token_limit": int(limit),
            "intermediate_tasks_per_domain": best["tasks_per_domain"], "intermediate_tokens": best["collection_tokens"],
            "intermediate_quality": best["quality"], "token_fraction": round(best["collection_tokens"] / ref["collection_tokens"], 4),
            "difference": round(float(diff.mean()), 4),
            "difference_ci_low": round(float(np.quantile(means, 0.025)), 4),
            "difference_ci_high": round(float(np.quantile(means, 0.975)), 4),
            "met": bool(best["quality"] >= ref["quality"]),
        })
    main = checks[-1] if checks else {"met": False}
    return {"met": bool(main["met"]), "rule": "the intermediate point with the most collection tokens at or below 1/5 of the "
            "largest correct-over-incorrect budget scores at least that budget's best-of-5 expected quality (point "
            "estimates; the paired difference over held-out tasks and its 95% interval beside it)",
            **{k: v for k, v in main.items() if k != "met"}, "against_every_budget": checks}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, nargs="+", default=[2, 5, 10, 20, 40],
                    help="correct-over-incorrect budgets, tasks per domain")
    ap.add_argument("--branch-tasks", type=int, nargs="+", default=[1, 2, 5, 10, 20, 40],
                    help="intermediate budgets, tasks per domain")
    ap.add_argument("--ablation-tasks", type=int, nargs="*", default=[2, 10],
                    help="budgets of the node-content ablation (none: skip it)")
    ap.add_argument("--plans", type=int, default=8, help="plans per task of the full collection")
    ap.add_argument("--branches", type=int, default=16, help="first steps per task of the branch collection")
    ap.add_argument("--collect-seed", type=int, default=0)
    ap.add_argument("--pool-tasks", type=int, default=20, help="held-out tasks per domain")
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--pool-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--seed", type=int, default=7331, help="seed of the held-out tasks")
    ap.add_argument("--model-seed", type=int, default=0)
    ap.add_argument("--count-tasks", type=int, default=20, help="tasks per domain of the pair-count table")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--workers", type=int, default=1, help="collection and pool worker processes")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    started = time.perf_counter()

    import torch

    from orchrm.config import CollectConfig, EvaluateConfig, PairsConfig
    from orchrm.data.pairs import PairwiseComparator

    torch.set_num_threads(args.threads)
    # the commit and command of the code that runs, taken before the (long) run
    origin = provenance(command_line("benchmarks.token_efficiency", ap, args), torch=torch.__version__,
                        torch_threads=torch.get_num_threads())
    largest = max([*args.tasks, *args.branch_tasks, *args.ablation_tasks, args.count_tasks])
    evaluate_cfg = EvaluateConfig(tasks_per_domain=args.pool_tasks, candidates=args.candidates, best_of=(1, N),
                                  pool_seeds=tuple(args.pool_seeds), repeats=args.repeats, seed=args.seed,
                                  bootstrap=args.bootstrap, gates={"best_of": N})
    full = CollectConfig(tasks_per_domain=largest, plans_per_task=args.plans, seed=args.collect_seed, workers=args.workers)
    branch = CollectConfig(tasks_per_domain=largest, seed=args.collect_seed, workers=args.workers, mode="branch",
                           branches=args.branches, branch_depth=0)
    built = steps.held_out_pool(evaluate_cfg, full)
    pool = built.pool
    held_out = held_out_pairs(pool)
    print(f"pool: {pool.tasks} tasks; {len(held_out)} held-out plan pairs", file=sys.stderr, flush=True)
    collections = {"full": steps.collected(full), "branch": steps.collected(branch)}
    tables = {mode: c.frame() for mode, c in collections.items()}
    seconds: dict[str, float] = {"pool": round(built.seconds, 1), "collect_full": round(collections["full"].seconds, 1),
                                 "collect_branch": round(collections["branch"].seconds, 1)}
    print(f"collected {len(tables['full'])} full and {len(tables['branch'])} branch artifacts", file=sys.stderr, flush=True)

    budgets = {"correct-over-incorrect": args.tasks, "intermediate": args.branch_tasks,
               "intermediate (node content)": args.ablation_tasks}
    rows: dict[str, list[dict]] = {"curve": [], "ablation": []}
    per_task: dict[tuple[str, int], pd.Series] = {}
    references: dict = {}
    t_train = time.perf_counter()
    for label, ts in budgets.items():
        mode, source, action = SOURCES[label]
        for t in sorted(ts):
            arts = first_tasks(tables[mode], t)
            cfg = PairsConfig(sources=(source,), intermediate_action=action, max_pairs_per_task=None, test_fraction=0.0)
            pairs = PairwiseComparator(config=cfg).build_pairs(arts)
            got = train_and_evaluate(pairs, pool=pool, held_out=held_out, evaluate_cfg=evaluate_cfg, seed=args.model_seed)
            references = got["references"]
            per_task[(label, t)] = got["per_task"]
            row = {"source": label, "actions": "plan" if mode == "full" else action, "tasks_per_domain": t,
                   "tasks": int(arts["task_id"].nunique()), "collection_tokens": tokens(arts), "pairs": len(pairs), **got["row"]}
            rows["ablation" if label.endswith("(node content)") else "curve"].append(row)
            print(f"{label:<28} T={t:<3} tokens={row['collection_tokens']:>9,} pairs={row['pairs']:>5} "
                  f"quality={row['quality']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}] "
                  f"pairwise={row['pairwise_accuracy']:.3f} train {row['train_seconds']:.0f} s", file=sys.stderr, flush=True)
    seconds["train_and_evaluate"] = round(time.perf_counter() - t_train, 1)
    counts = pair_counts(tables["full"], tables["branch"], args.count_tasks)
    seconds["total"] = round(time.perf_counter() - started, 1)

    result = {
        "benchmark": "held-out plan selection of models trained on intermediate vs correct-over-incorrect pairs, over collection tokens",
        **origin,
        "machine_at_end": machine(torch=torch.__version__, torch_threads=torch.get_num_threads()),
        "settings": {"plans_per_task": args.plans, "branches": args.branches, "branch_depth": 0, "collect_seed": args.collect_seed,
                     "pool_tasks": args.pool_tasks, "pool_tasks_total": pool.tasks, "candidates": args.candidates,
                     "repeats": args.repeats, "pool_seeds": args.pool_seeds, "seed": args.seed, "best_of": N,
                     "model": "ModelConfig() (scratch, hidden 256, 3 layers, max_length 256)", "model_seed": args.model_seed,
                     "train": f"TrainConfig(epochs=clamp(ceil({MIN_PAIR_VISITS} / train pairs), 4, 20), patience=3), lr 3e-4, batch 32",
                     "max_pairs_per_task": None, "held_out_pairs": len(held_out), "held_out_pair_margin": HELD_OUT_MARGIN,
                     "count_tasks": args.count_tasks, "bootstrap": args.bootstrap, "threads": args.threads},
        "seconds": seconds,
        "references": references,
        "curve": rows["curve"],
        "ablation": rows["ablation"],
        "target": target(rows["curve"], per_task, args.bootstrap),
        "pair_counts": counts,
    }
    print(f"wrote {write_json(args.out / 'token_efficiency.json', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
