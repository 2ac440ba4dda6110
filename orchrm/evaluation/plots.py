"""PNG plots of an evaluation report: quality against N and against tokens, the reliability diagram.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from orchrm.evaluation.metrics import fmt_number
from orchrm.evaluation.selectors import SELECTORS
from orchrm.util.fileio import atomic_write_bytes

if TYPE_CHECKING:
    from orchrm.evaluation.report import EvaluationReport


def plot_report(report: EvaluationReport, out_dir: str | os.PathLike) -> dict[str, Path]:
    """PNG plots of ``report`` (matplotlib, Agg backend): quality against N and against tokens per
    task (one line per selector, all domains) and the reliability diagram."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    paths: dict[str, Path] = {}
    t = report.tables["best_of_n"]
    t = t[t["domain"] == "all"]

    def save(fig, name: str) -> None:
        paths[name] = atomic_write_bytes(out / f"{name}.png", lambda tmp: fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight"))
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s in SELECTORS:
        r = t[t["selector"] == s].sort_values("N")
        if r.empty:
            continue
        ax.plot(r["N"], r["quality"], marker="o", label=s)
        ax.fill_between(r["N"], r["ci_low"], r["ci_high"], alpha=0.1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (candidates)")
    ax.set_ylabel("mean realised quality")
    ax.set_title("Best-of-N on held-out tasks")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    save(fig, "quality_vs_n")

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s in SELECTORS:
        r = t[t["selector"] == s].sort_values("N")
        if r.empty:
            continue
        ax.plot(r["tokens_total"].clip(lower=1), r["quality"], marker="o", label=s)
    ax.set_xscale("log")
    ax.set_xlabel("tokens per task (execution + scoring + judging)")
    ax.set_ylabel("mean realised quality")
    ax.set_title("Quality against tokens, points at each N")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    save(fig, "quality_vs_tokens")

    c = report.tables["calibration"]
    c = c[c["count"] > 0]
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1)
    ax.plot(c["mean_predicted"], c["observed"], marker="o")
    ax.set_xlabel("predicted P(first wins)")
    ax.set_ylabel("observed share")
    ax.set_title(f"Reliability (ECE {fmt_number(report.metrics.get('ece', math.nan))})")
    ax.grid(alpha=0.3)
    save(fig, "reliability")
    return paths


