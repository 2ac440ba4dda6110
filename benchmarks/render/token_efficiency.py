"""The token-efficiency page (``token_efficiency.json``): intermediate pairs against
correct-over-incorrect pairs over collection tokens; its section of ``docs/results.md`` and its plot."""

from __future__ import annotations

from pathlib import Path

from benchmarks.common.targets import TOKEN_EFFICIENCY
from benchmarks.render.records import Benchmark, Figures, Record, ci, num, table

PLOT = "token_efficiency.png"
FRACTION = f"1/{round(1 / TOKEN_EFFICIENCY.fraction)}"  # the target's share of the tokens, as the page writes it


def _points(r: Record) -> list[Record]:
    """The curve's points and the ablation's."""
    return [*r.rows("curve"), *(r.rows("ablation") if "ablation" in r else [])]


def reading(r: Record) -> list[str]:
    """What the curve says, in figures computed from it (so a rerun rewrites them)."""
    curve, refs, n = r.rows("curve"), r["references"], r["settings"]["best_of"]
    by = {s: sorted((x for x in curve if x["source"] == s), key=lambda x: x["collection_tokens"])
          for s in ("correct-over-incorrect", "intermediate")}
    if not all(by.values()):
        return []
    coi, inter = by["correct-over-incorrect"], by["intermediate"]
    span = lambda rows, k: f"{min(x[k] for x in rows):.3f} to {max(x[k] for x in rows):.3f}"  # noqa: E731
    low, high = max(x["ci_low"] for x in curve), min(x["ci_high"] for x in curve)
    out = ["## Reading", "",
           f"- Best-of-{n} expected quality: correct-over-incorrect {span(coi, 'quality')}, intermediate "
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
                 f"secondary figure the {FRACTION} target would be met (point estimates, overlapping intervals).")
    out.append(line)
    for a in (r.rows("ablation") if "ablation" in r else []):
        twin = next((x for x in inter if x["tasks_per_domain"] == a["tasks_per_domain"]), None)
        if twin:
            out.append(f"- Node-content actions at {a['tasks_per_domain']} task(s) per domain: quality {a['quality']:.3f} and "
                       f"pairwise {a['pairwise_accuracy']:.3f} in {a['train_seconds']:.0f} s of training, against "
                       f"{twin['quality']:.3f} and {twin['pairwise_accuracy']:.3f} in {twin['train_seconds']:.0f} s for "
                       "plan-prefix actions on the same artifacts.")
    return [*out, ""]


def end_load(r: Record) -> str:
    end = r.get("machine_at_end")
    return f", {end['load_average'][0]} at the end" if end else ""


def page(r: Record) -> list[str]:
    s, t, refs = r["settings"], r["target"], r["references"]
    n, margin, visits = s["best_of"], s["held_out_pair_margin"], TOKEN_EFFICIENCY.min_pair_visits
    lines = [
        "# Token efficiency: intermediate (prefix) pairs vs correct-over-incorrect pairs",
        "",
        f"Measured in {r['seconds']['total'] / 60:.1f} min ({r['machine']['cpus']} CPU cores, {r['machine']['cpu']}, shared; "
        f"load average {r['machine']['load_average'][0]} at the start{end_load(r)}; {r['machine']['torch_threads']} torch "
        "thread). Numbers are measured, not targets.",
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
        f"ceil({visits} / training pairs) epochs clamped to [4, 20] (at least 150 steps), early stopping with "
        "patience 3 on the validation tasks' loss (10% of tasks by hash), 1 torch thread, model seed "
        f"{s['model_seed']}; all pairs of a budget, no per-task cap.",
        f"- Held-out: `orchrm.evaluation.build_pool`, seed {s['seed']}, {s['pool_tasks']} tasks per domain "
        f"({s['pool_tasks_total']} tasks), {s['candidates']} base-sampler candidates, pool seeds {s['pool_seeds']}, "
        f"{s['repeats']} re-runs per candidate. **quality** = best-of-{n} expected quality of the reward model's pick "
        "(mean over tasks and pool seeds; 95% bootstrap interval over tasks). **pairwise** = accuracy on "
        f"{s['held_out_pairs']} held-out plan pairs of the pool (expected qualities at least {margin} apart).",
        f"- References on this pool, best-of-{n}: random plan {refs['random']:.3f}, cost-only {refs['cost_only']:.3f}, "
        f"length-only {refs['length_only']:.3f}, expected oracle {refs['expected_oracle']:.3f}.",
        "",
        "## Curve",
        "",
        "| source | tasks/domain | collection tokens | pairs | epochs run | train s | quality [95% CI] | pairwise [95% CI] | gap closed |",
        "|---|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for row in sorted(_points(r), key=lambda x: (x["source"], x["collection_tokens"])):
        lines.append(
            f"| {row['source']} | {row['tasks_per_domain']} | {row['collection_tokens']:,} | {row['pairs']:,} | "
            f"{row['epochs_run']} | {row['train_seconds']:.0f} | {row['quality']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}] | "
            f"{row['pairwise_accuracy']:.3f} [{row['pairwise_ci_low']:.3f}, {row['pairwise_ci_high']:.3f}] | {row['gap_closed']:.2f} |"
        )
    lines += ["", *reading(r), "## Target", ""]
    if t.get("intermediate_tokens") is None:
        lines.append(f"**Not met**: {t.get('note', 'no intermediate point')}.")
    else:
        verdict = "met" if t["met"] else "not met"
        lines.append(
            f"Intermediate pairs reach the held-out quality of full-rollout pairs with at most {FRACTION} of the collection tokens: "
            f"**{verdict}**. Correct-over-incorrect at {t['reference_tasks_per_domain']} tasks/domain "
            f"({t['reference_tokens']:,} tokens) scores {t['reference_quality']:.3f}; intermediate at "
            f"{t['intermediate_tasks_per_domain']} tasks/domain ({t['intermediate_tokens']:,} tokens, "
            f"{100 * t['token_fraction']:.1f}% of them) scores {t['intermediate_quality']:.3f}: a paired difference of "
            f"{t['difference']:+.3f} [95% CI {t['difference_ci_low']:+.3f}, {t['difference_ci_high']:+.3f}] over held-out tasks."
        )
    lines += ["", "The same check against every correct-over-incorrect budget:", "",
              "| c-o-i tasks/domain | c-o-i tokens | c-o-i quality | intermediate tasks/domain | tokens (share) | quality | difference [95% CI] | reached |",
              "|---:|---:|---:|---:|---:|---:|---|---|"]
    for c in t.rows("against_every_budget"):
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
    for d in pc:
        c = pc[d]
        lines.append(
            f"| {d} | {c['before_prefix_pairs']} | {c['before_intermediate_pairs_all_depths']} | {c['correct_over_incorrect_pairs']} | "
            f"{c['correct_over_incorrect_tokens_per_pair']:,.0f} | {c['after_plan_prefix_pairs']} | "
            f"{c['after_plan_prefix_pairs_neither_final']} | {c['after_node_pairs']} | {c['after_tokens_per_pair']:,.0f} |"
        )
    return lines


def section(res: Record) -> list[str]:
    """The section of ``docs/results.md``: each point of the curve with its quality."""
    rows = res.rows("curve")
    order = {s: i for i, s in enumerate(dict.fromkeys(r["source"] for r in rows))}
    curve = sorted(rows, key=lambda r: (order[r["source"]], r["collection_tokens"]))
    extra = [k for k in ("pairs", "N") if all(k in r for r in curve)]
    rows = [[r["source"], num(r["collection_tokens"], ",.0f"), *(str(r[k]) for k in extra),
             ci(r["quality"], r["ci_low"], r["ci_high"])] for r in curve]
    return table(["pair source", "collection tokens", *extra, "quality [95% interval]"], rows) + [""]


def plot(res: Record, path: Path) -> None:
    """Best-of-N expected quality against collection tokens, a line per pair source with its 95%
    intervals, and the reference selectors on the same pool as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from orchrm.util.fileio import atomic_write_bytes

    n = res["settings"]["best_of"] if "settings" in res else TOKEN_EFFICIENCY.n
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    styles = {"correct-over-incorrect": ("C0", "o", "-"), "intermediate": ("C3", "s", "-"),
              "intermediate (node content)": ("C2", "^", "--")}
    points = _points(res)
    for source in dict.fromkeys(r["source"] for r in points):
        styles.setdefault(source, (f"C{len(styles)}", "o", "-"))
    for k, (source, (color, marker, line)) in enumerate(styles.items()):
        rows = sorted((r for r in points if r["source"] == source), key=lambda r: r["collection_tokens"])
        if not rows:
            continue
        x = [r["collection_tokens"] * (1 + 0.04 * k) for r in rows]  # nudged apart where budgets coincide
        y = np.array([r["quality"] for r in rows])
        err = np.array([[r["quality"] - r["ci_low"] for r in rows], [r["ci_high"] - r["quality"] for r in rows]])
        ax.errorbar(x, y, yerr=err, color=color, marker=marker, linestyle=line, capsize=3, label=source)
    refs = res.get("references") or {}
    for name, label, style in (("random", "random plan", ":"), ("cost_only", f"cost-only, best-of-{n}", "-."),
                               ("expected_oracle", f"expected oracle, best-of-{n}", "--")):
        if name in refs:
            ax.axhline(refs[name], color="grey", linestyle=style, linewidth=1)
            ax.text(0.01, refs[name], label, transform=ax.get_yaxis_transform(), va="bottom", fontsize=8, color="grey")
    ax.set_xscale("log")
    ax.set_xlabel("collection tokens (prompt + completion)")
    ax.set_ylabel(f"best-of-{n} expected quality (held-out)")
    ax.set_title("Held-out plan selection vs collection tokens (95% intervals over tasks)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    atomic_write_bytes(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    plt.close(fig)


def figures(res: Record, results_dir: Path) -> Figures:
    return Figures({PLOT: "quality against collection tokens"}, lambda folder: plot(res, Path(folder) / PLOT))


BENCHMARK = Benchmark(
    "Intermediate-pair curve",
    "Best-of-N quality of reward models trained on intermediate pairs or on correct-over-incorrect pairs, against the "
    "collection tokens their pairs cost.",
    page, section, figures)
