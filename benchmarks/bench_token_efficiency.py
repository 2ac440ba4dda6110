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

    nice python benchmarks/bench_token_efficiency.py          # results/token_efficiency.{json,md,png}
    nice python benchmarks/bench_token_efficiency.py --tasks 2 5 --branch-tasks 1 2 --ablation-tasks \\
        --pool-tasks 5 --repeats 2 --out /tmp/te                  # a quick look
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from results_io import command_line, machine, provenance, write_json, write_text  # noqa: E402

from orchrm.util.fileio import atomic_write_bytes  # noqa: E402

RESULTS = Path(__file__).parent / "results"
N = 5  # best-of-N read for the primary figure
FRACTION = 1 / 5  # the target's token fraction
MIN_PAIR_VISITS = 4800  # 150 optimiser steps of 32 pairs
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


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    styles = {"correct-over-incorrect": ("C0", "o", "-"), "intermediate": ("C3", "s", "-"),
              "intermediate (node content)": ("C2", "^", "--")}
    for k, (source, (color, marker, line)) in enumerate(styles.items()):
        rows = sorted([r for r in result["curve"] + result["ablation"] if r["source"] == source], key=lambda r: r["collection_tokens"])
        if not rows:
            continue
        x = [r["collection_tokens"] * (1 + 0.04 * k) for r in rows]  # nudged apart where budgets coincide
        y = np.array([r["quality"] for r in rows])
        err = np.array([[r["quality"] - r["ci_low"] for r in rows], [r["ci_high"] - r["quality"] for r in rows]])
        ax.errorbar(x, y, yerr=err, color=color, marker=marker, linestyle=line, capsize=3, label=source)
    refs = result["references"]
    for name, label, style in (("random", "random plan", ":"), ("cost_only", f"cost-only, best-of-{N}", "-."),
                               ("expected_oracle", f"expected oracle, best-of-{N}", "--")):
        ax.axhline(refs[name], color="grey", linestyle=style, linewidth=1)
        ax.text(0.01, refs[name], label, transform=ax.get_yaxis_transform(), va="bottom", fontsize=8, color="grey")
    ax.set_xscale("log")
    ax.set_xlabel("collection tokens (prompt + completion)")
    ax.set_ylabel(f"best-of-{N} expected quality (held-out)")
    ax.set_title("Held-out plan selection vs collection tokens (95% intervals over tasks)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    atomic_write_bytes(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    plt.close(fig)


def reading(r: dict) -> list[str]:
    """What the curve says, in figures computed from it (so a rerun rewrites them)."""
    curve, refs = r["curve"], r["references"]
    by = {s: sorted((x for x in curve if x["source"] == s), key=lambda x: x["collection_tokens"])
          for s in ("correct-over-incorrect", "intermediate")}
    if not all(by.values()):
        return []
    coi, inter = by["correct-over-incorrect"], by["intermediate"]
    span = lambda rows, k: f"{min(x[k] for x in rows):.3f} to {max(x[k] for x in rows):.3f}"  # noqa: E731
    low, high = max(x["ci_low"] for x in curve), min(x["ci_high"] for x in curve)
    out = ["## Reading", "",
           f"- Best-of-{N} expected quality: correct-over-incorrect {span(coi, 'quality')}, intermediate "
           f"{span(inter, 'quality')} across their budgets"
           + (f"; every 95% interval of both curves contains {low:.3f} to {high:.3f}, so these single-seed curves do not "
              "resolve a rise with the budget, nor a gap between the sources. " if low <= high else ". ")
           + f"The cost-only selector scores {refs['cost_only']:.3f} on the same pool, a random plan {refs['random']:.3f}."]
    ref = coi[-1]
    reach = next((x for x in inter if x["pairwise_accuracy"] >= ref["pairwise_accuracy"]), None)
    line = (f"- Held-out pairwise accuracy: correct-over-incorrect {span(coi, 'pairwise_accuracy')}, intermediate "
            f"{span(inter, 'pairwise_accuracy')}.")
    if reach:
        line += (f" Intermediate pairs from {reach['collection_tokens']:,} tokens ({reach['tasks_per_domain']} task(s) per "
                 f"domain, {100 * reach['collection_tokens'] / ref['collection_tokens']:.1f}% of the largest "
                 f"correct-over-incorrect budget) score {reach['pairwise_accuracy']:.3f} "
                 f"[{reach['pairwise_ci_low']:.3f}, {reach['pairwise_ci_high']:.3f}], at least that budget's "
                 f"{ref['pairwise_accuracy']:.3f} [{ref['pairwise_ci_low']:.3f}, {ref['pairwise_ci_high']:.3f}]: on this "
                 "secondary figure the 1/5 target would be met (point estimates, overlapping intervals).")
    out.append(line)
    for a in r.get("ablation", []):
        twin = next((x for x in inter if x["tasks_per_domain"] == a["tasks_per_domain"]), None)
        if twin:
            out.append(f"- Node-content actions at {a['tasks_per_domain']} task(s) per domain: quality {a['quality']:.3f} and "
                       f"pairwise {a['pairwise_accuracy']:.3f} in {a['train_seconds']:.0f} s of training, against "
                       f"{twin['quality']:.3f} and {twin['pairwise_accuracy']:.3f} in {twin['train_seconds']:.0f} s for "
                       "plan-prefix actions on the same artifacts.")
    return [*out, ""]


def end_load(r: dict) -> str:
    end = r.get("machine_at_end")
    return f", {end['load_average'][0]} at the end" if end else ""


def markdown(r: dict) -> str:
    s, t, refs = r["settings"], r["target"], r["references"]
    lines = [
        "# Token efficiency: intermediate (prefix) pairs vs correct-over-incorrect pairs",
        "",
        f"Generated by `{r['command']}` at commit `{r['commit']}` in {r['seconds']['total'] / 60:.1f} min "
        f"({r['machine']['cpus']} CPU cores, {r['machine']['cpu']}, shared; load average {r['machine']['load_average'][0]} "
        f"at the start{end_load(r)}; {r['machine']['torch_threads']} torch thread). Numbers are measured, not targets.",
        "",
        "## Method",
        "",
        f"- **correct-over-incorrect**: `collect(mode=\"full\")`, {s['plans_per_task']} plans per task (half base, half "
        "specialized sampler) run to their final answers; pairs of final artifacts, actions the plan texts.",
        f"- **intermediate**: `collect(mode=\"branch\", branches={s['branches']}, branch_depth=0)`: per task "
        f"{s['branches']} plans with distinct first steps, the same samplers and shares, only the first step (the depth-0 "
        "nodes) run; pairs of two first steps of one task labelled by their intermediate artifacts' quality, actions "
        "the steps as plans of their own (`pairs.intermediate_action: plan_prefix`), prompt the question.",
        "- **intermediate (node content)**, an ablation: the same branch collections, default node actions (the "
        "`<agent .../>` line plus the agent's output, which a plan scorer never sees), at a few budgets.",
        f"- Budgets: the first T tasks per domain of one collection (seed {s['collect_seed']}, 4 domains); "
        "`collection tokens` = every prompt + completion token that collection spent on them.",
        "- Training: the default scratch model (`ModelConfig()`: 256 wide, 3 layers, lr 3e-4, batch 32), "
        f"ceil({MIN_PAIR_VISITS} / training pairs) epochs clamped to [4, 20] (at least 150 steps), early stopping with "
        "patience 3 on the validation tasks' loss (10% of tasks by hash), 1 torch thread, model seed "
        f"{s['model_seed']}; all pairs of a budget, no per-task cap.",
        f"- Held-out: `orchrm.evaluation.build_pool`, seed {s['seed']}, {s['pool_tasks']} tasks per domain "
        f"({s['pool_tasks_total']} tasks), {s['candidates']} base-sampler candidates, pool seeds {s['pool_seeds']}, "
        f"{s['repeats']} re-runs per candidate. **quality** = best-of-{N} expected quality of the reward model's pick "
        "(mean over tasks and pool seeds; 95% bootstrap interval over tasks). **pairwise** = accuracy on "
        f"{s['held_out_pairs']} held-out plan pairs of the pool (expected qualities at least {HELD_OUT_MARGIN} apart).",
        f"- References on this pool, best-of-{N}: random plan {refs['random']:.3f}, cost-only {refs['cost_only']:.3f}, "
        f"length-only {refs['length_only']:.3f}, expected oracle {refs['expected_oracle']:.3f}.",
        "",
        "## Curve",
        "",
        "| source | tasks/domain | collection tokens | pairs | epochs run | train s | quality [95% CI] | pairwise [95% CI] | gap closed |",
        "|---|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for row in sorted(r["curve"] + r["ablation"], key=lambda x: (x["source"], x["collection_tokens"])):
        lines.append(
            f"| {row['source']} | {row['tasks_per_domain']} | {row['collection_tokens']:,} | {row['pairs']:,} | "
            f"{row['epochs_run']} | {row['train_seconds']:.0f} | {row['quality']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}] | "
            f"{row['pairwise_accuracy']:.3f} [{row['pairwise_ci_low']:.3f}, {row['pairwise_ci_high']:.3f}] | {row['gap_closed']:.2f} |"
        )
    lines += ["", "![quality vs collection tokens](token_efficiency.png)", "", *reading(r), "## Target", ""]
    if t.get("intermediate_tokens") is None:
        lines.append(f"**Not met**: {t.get('note', 'no intermediate point')}.")
    else:
        verdict = "met" if t["met"] else "not met"
        lines.append(
            f"Intermediate pairs reach the held-out quality of full-rollout pairs with at most 1/5 of the collection tokens: "
            f"**{verdict}**. Correct-over-incorrect at {t['reference_tasks_per_domain']} tasks/domain "
            f"({t['reference_tokens']:,} tokens) scores {t['reference_quality']:.3f}; intermediate at "
            f"{t['intermediate_tasks_per_domain']} tasks/domain ({t['intermediate_tokens']:,} tokens, "
            f"{100 * t['token_fraction']:.1f}% of them) scores {t['intermediate_quality']:.3f}: a paired difference of "
            f"{t['difference']:+.3f} [95% CI {t['difference_ci_low']:+.3f}, {t['difference_ci_high']:+.3f}] over held-out tasks."
        )
    lines += ["", "The same check against every correct-over-incorrect budget:", "",
              "| c-o-i tasks/domain | c-o-i tokens | c-o-i quality | intermediate tasks/domain | tokens (share) | quality | difference [95% CI] | reached |",
              "|---:|---:|---:|---:|---:|---:|---|---|"]
    for c in t["against_every_budget"]:
        if c.get("intermediate_tokens") is None:
            lines.append(f"| {c.get('reference_tasks_per_domain', '-')} | {c['reference_tokens']:,} | {c['reference_quality']:.3f} | - | - | - | - | no |")
            continue
        lines.append(
            f"| {c['reference_tasks_per_domain']} | {c['reference_tokens']:,} | {c['reference_quality']:.3f} | "
            f"{c['intermediate_tasks_per_domain']} | {c['intermediate_tokens']:,} ({100 * c['token_fraction']:.0f}%) | "
            f"{c['intermediate_quality']:.3f} | {c['difference']:+.3f} [{c['difference_ci_low']:+.3f}, {c['difference_ci_high']:+.3f}] | "
            f"{'yes' if c['met'] else 'no'} |"
        )
    pc = r["pair_counts"]
    lines += [
        "",
        f"## Pair counts per {s['count_tasks']} tasks per domain",
        "",
        f"Before: a full collection ({s['plans_per_task']} plans per task), node pairs whose two artifacts are both below "
        "the sink (the prefix pairs of benchmarks/results/pairs.md), and every node pair. After: the branch collection, "
        "plan-prefix pairs (all; and those whose two artifacts are neither final, i.e. not a one-step plan's answer) "
        "and node-action pairs. Tokens per pair: the whole collection's tokens over its pairs.",
        "",
        "| domain | before: prefix pairs | before: all node pairs | c-o-i pairs | c-o-i tokens/pair | after: plan-prefix pairs | of them neither final | after: node pairs | after tokens/pair |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for d, c in pc.items():
        lines.append(
            f"| {d} | {c['before_prefix_pairs']} | {c['before_intermediate_pairs_all_depths']} | {c['correct_over_incorrect_pairs']} | "
            f"{c['correct_over_incorrect_tokens_per_pair']:,.0f} | {c['after_plan_prefix_pairs']} | "
            f"{c['after_plan_prefix_pairs_neither_final']} | {c['after_node_pairs']} | {c['after_tokens_per_pair']:,.0f} |"
        )
    lines += ["", "## Command", "", f"    nice {r['command']}", ""]
    return "\n".join(lines)


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
    ap.add_argument("--render", type=Path, default=None, metavar="JSON",
                    help="only rewrite token_efficiency.md and .png in --out from an existing token_efficiency.json")
    args = ap.parse_args(argv)
    if args.render:
        result = json.loads(args.render.read_text())
        write_text(args.out / "token_efficiency.md", markdown(result))
        plot(result, args.out / "token_efficiency.png")
        return 0
    started = time.perf_counter()

    import torch

    from orchrm.config import CollectConfig, EvaluateConfig, PairsConfig, PipelineConfig
    from orchrm.data.pairs import PairwiseComparator
    from orchrm.evaluation.pool import build_pool
    from orchrm.execution.collect import collect

    torch.set_num_threads(args.threads)
    # the commit and command of the code that runs, taken before the (long) run
    origin = provenance(command_line("benchmarks/bench_token_efficiency.py", ap, args), torch=torch.__version__,
                        torch_threads=torch.get_num_threads())
    largest = max([*args.tasks, *args.branch_tasks, *args.ablation_tasks, args.count_tasks])
    evaluate_cfg = EvaluateConfig(tasks_per_domain=args.pool_tasks, candidates=args.candidates, best_of=(1, N),
                                  pool_seeds=tuple(args.pool_seeds), repeats=args.repeats, seed=args.seed,
                                  bootstrap=args.bootstrap, gates={"best_of": N})
    config = PipelineConfig(collect=CollectConfig(tasks_per_domain=largest, plans_per_task=args.plans, seed=args.collect_seed),
                            evaluate=evaluate_cfg)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    pool = build_pool(config, progress=False, workers=args.workers)
    seconds["pool"] = round(time.perf_counter() - t0, 1)
    held_out = held_out_pairs(pool)
    print(f"pool: {pool.tasks} tasks in {seconds['pool']} s; {len(held_out)} held-out plan pairs", file=sys.stderr, flush=True)

    common = dict(domains=config.collect.domains, tasks_per_domain=largest, seed=args.collect_seed, workers=args.workers, progress=False)
    t0 = time.perf_counter()
    tables = {"full": collect(plans_per_task=args.plans, **common)}
    seconds["collect_full"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    tables["branch"] = collect(mode="branch", branches=args.branches, branch_depth=0, **common)
    seconds["collect_branch"] = round(time.perf_counter() - t0, 1)
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
    out = args.out
    write_json(out / "token_efficiency.json", result)
    write_text(out / "token_efficiency.md", markdown(result))
    plot(result, out / "token_efficiency.png")
    print((out / "token_efficiency.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
