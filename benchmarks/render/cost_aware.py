"""The cost-aware selection page (``cost_aware.json``): every selector's quality against its
execution tokens, the reward model's ``reward - λ·cost`` curve, and the ``λ`` chosen on validation
tasks for each token budget; its section of ``docs/results.md`` and its Pareto plot."""

from __future__ import annotations

from pathlib import Path

from benchmarks.render.records import Benchmark, Figures, Record, ci, table

PLOT = "cost_aware.pareto.png"


def _selectors_at(res: Record, n: int) -> list[Record]:
    return [r for r in res.rows("selectors") if r["N"] == n]


def budgets_table(res: Record) -> list[str]:
    rows = [[f"{b['budget_tokens']:,.0f} ({100 * b['share']:.0f}%)", f"{b['weight']:g}",
             f"{b['validation_expected']:.3f}", f"{b['validation_tokens']:,.0f}",
             ci(b["test_expected"], b["test_ci_low"], b["test_ci_high"]), f"{b['test_tokens']:,.0f}",
             "yes" if b["within_budget"] else "no (the cheapest λ)"]
            for b in res.rows("budgets")]
    return table(["budget, tokens per task (share of λ = 0)", "λ chosen on validation", "validation quality",
                  "validation tokens", "test quality [95% CI]", "test tokens", "within budget on validation"], rows)


def selectors_table(res: Record, n: int) -> list[str]:
    rows = [[r["selector"], ci(r["expected"], r["expected_ci_low"], r["expected_ci_high"]), f"{r['tokens_execution']:,.0f}"]
            for r in sorted(_selectors_at(res, n), key=lambda r: r["tokens_execution"])]
    return table(["selector", f"best-of-{n} expected quality [95% CI]", "execution tokens per task"], rows)


def page(res: Record) -> list[str]:
    s, m = res["settings"], res["machine"]
    n = s["n"]
    return [
        "# Cost-aware selection: quality against execution tokens", "",
        f"Model: the default (`{s['config']}`), {res['model'].get('pairs', '?'):,} training pairs ({res['model'].get('trained')}). "
        f"Two fresh pools of {s['tasks']} tasks per domain, {s['candidates']} base-sampler candidates each, pool seeds "
        f"{s['pool_seeds']}, {s['repeats']} re-runs per candidate for its expected quality: validation (seed "
        f"{s['validation_seed']}) chooses λ, test (seed {s['seed']}) reports. The reward model ranks by normalised reward "
        "− λ × the plan's cost from its text (reasoning runs, the large tier ×5); λ = 0 is the plain pick. Quality is the "
        "expected quality of the pick (95% bootstrap interval over tasks); tokens are the executed plan's. Measured in "
        f"{res['seconds'] / 60:.1f} min on {m['cpus']} shared CPU cores (load average {m['load_average'][0]:.1f}).", "",
        f"## λ for a token budget (best-of-{n})", "",
        f"The budgets are shares of what the plain pick spends on the validation tasks ({res['plain_validation_tokens']:,.0f} "
        "tokens per task); the chosen λ is the one of best validation quality whose tokens fit.", "",
        *budgets_table(res), "",
        f"## Every selector at N = {n}, on the test tasks", "",
        *selectors_table(res, n), "",
        f"## The cost-aware curve (best-of-{n}, test tasks)", "",
        *table(["λ", "expected quality [95% CI]", "execution tokens", "plan cost"],
               [[f"{c['weight']:g}", ci(c["expected"], c["ci_low"], c["ci_high"]), f"{c['tokens']:,.0f}", f"{c['plan_cost']:.1f}"]
                for c in res.rows("curve")]),
    ]


def section(res: Record) -> list[str]:
    return [*budgets_table(res), ""]


def plot(res: Record, path: Path) -> None:
    """Expected quality against execution tokens per task: every selector at each N (a line through
    its N), the reward model's cost-aware curve at ``n`` over λ, and the budgets' chosen points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from orchrm.util.fileio import atomic_write_bytes

    fig, ax = plt.subplots(figsize=(7.5, 5.0))
    rows = res.rows("selectors")
    for k, name in enumerate(dict.fromkeys(r["selector"] for r in rows)):
        pts = sorted((r for r in rows if r["selector"] == name), key=lambda r: r["N"])
        ax.plot([r["tokens_execution"] for r in pts], [r["expected"] for r in pts], marker="o", markersize=4,
                linewidth=1, color=f"C{k % 10}", label=name)
    curve = sorted(res.rows("curve"), key=lambda c: c["tokens"])
    ax.plot([c["tokens"] for c in curve], [c["expected"] for c in curve], color="black", linewidth=2,
            label=f"reward − λ·cost, best-of-{res['settings']['n']}")
    chosen = res.rows("budgets")
    ax.scatter([b["test_tokens"] for b in chosen], [b["test_expected"] for b in chosen], marker="*", s=120, color="black",
               zorder=5, label="λ chosen on validation, per budget")
    ax.set_xscale("log")
    ax.set_xlabel("execution tokens per task")
    ax.set_ylabel("expected quality of the pick")
    ax.set_title("Quality against tokens, every selector at N = 1, 2, 4, 8")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    atomic_write_bytes(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)


def figures(res: Record, results_dir: Path) -> Figures:
    return Figures({PLOT: "Expected quality against execution tokens: every selector at each N, the reward model's "
                          "cost-aware curve and the λ chosen per budget"},
                   lambda folder: plot(res, Path(folder) / PLOT))


BENCHMARK = Benchmark(
    title="Cost-aware selection",
    measures="quality against execution tokens for every selector, and reward − λ·cost with λ chosen on validation tasks "
             "for a token budget (`python -m benchmarks.cost_aware`)",
    page=page, section=section, figures=figures,
)
