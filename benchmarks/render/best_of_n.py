"""The best-of-N page (``best_of_n.json``), its section of ``docs/results.md``, the README's
headline block and the plots.

The file's tables are those of the :class:`orchrm.evaluation.report.EvaluationReport` the benchmark
measured; :func:`evaluation_report` rebuilds that report from them, so the page ends with the
report's own Markdown and the plots are the evaluation package's (:func:`orchrm.evaluation.plots.plot_report`).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common.targets import BEST_OF_N
from benchmarks.render.records import Benchmark, Figures, Record, ci, num, table, yes

N = BEST_OF_N.n
#: the selectors of the per-encoder and per-data-set tables
GROUP_SELECTORS = ("reward_model", "cost_only", "length_only", "trajectory", "random", "expected_oracle")
PLOTS = {"quality_vs_n": "quality against N", "quality_vs_tokens": "quality against tokens per task",
         "reliability": "reliability diagram"}
BEST_OF_N_COLUMNS = ("N", "selector", "domain", "quality", "ci_low", "ci_high", "tokens_execution", "tokens_scoring")


def evaluation_report(res: Record) -> Any:
    """The :class:`~orchrm.evaluation.report.EvaluationReport` whose tables the file holds. A file
    written before it recorded the reliability table has an empty one (no reliability plot), and
    its gates' N is the N its scoring latency was measured at."""
    import pandas as pd

    from orchrm.evaluation.report import EvaluationReport

    metrics = {k: res["metrics"][k] for k in res["metrics"]}
    calibration = (res.frame("calibration", ("count", "mean_predicted", "observed")) if "calibration" in res
                   else pd.DataFrame(columns=["bin", "lower", "upper", "count", "mean_predicted", "observed"]))
    latency = (res.frame("latency", ("N",)) if "latency" in res else
               pd.DataFrame([{"N": int(metrics["scoring_latency_candidates"]), "p50_ms": metrics["scoring_latency_ms_p50"]}]))
    tables = {"best_of_n": res.frame("best_of_n", BEST_OF_N_COLUMNS), "gap_closed": res.frame("gap_closed", ("N", "domain")),
              "pairwise": res.frame("pairwise", ("granularity", "domain")), "calibration": calibration, "latency": latency}
    return EvaluationReport(metrics=metrics, champion_metrics=None, tables=tables)


def _domains(rows: list[Record], declared: list[str] | None = None) -> list[str]:
    """The domains of ``rows`` (``declared`` when the file lists them), without ``all``."""
    return list(declared) if declared else sorted({r["domain"] for r in rows} - {"all"})


def _tokens(r: Record) -> float:
    if "tokens_total" in r:
        return r["tokens_total"]
    return r["tokens_execution"] + r["tokens_scoring"] + r.get("tokens_judging", 0.0)


def _cell(r: Record | None) -> str:
    return "n/a" if r is None else ci(r["quality"], r["ci_low"], r["ci_high"])


def best_of_n_table(rows: list[Record], domains: list[str], n: int, *, lead: str | None = None) -> list[str]:
    """Selectors (rows, in file order) x domains and ``all`` at ``n``: quality [95% interval] and the
    tokens per task of the ``all`` row; ``lead``: a key (``encoder``, ``source``) shown first."""
    at = [r for r in rows if r["N"] == n]
    groups = list(dict.fromkeys(r[lead] for r in at)) if lead else [None]
    out = []
    for group in groups:
        cells = {(r["selector"], r["domain"]): r for r in at if lead is None or r[lead] == group}
        for sel in dict.fromkeys(s for s, _ in cells):
            a = cells.get((sel, "all"))
            tokens = [num(a["tokens_execution"], ".0f"), num(a["tokens_scoring"], ".0f")] if a else ["n/a", "n/a"]
            out.append(([str(group)] if lead else []) + [sel, *(_cell(cells.get((sel, d))) for d in [*domains, "all"]), *tokens])
    header = ([lead] if lead else []) + ["selector", *domains, "all", "execution tokens / task", "scoring tokens / task"]
    return table(header, out, right=2 if lead else 1)


def targets_table(t: Record) -> list[str]:
    """Issue 17's targets per domain (:data:`benchmarks.common.targets.BEST_OF_N`), each with whether it is met."""
    rows = [[d, num(t[d]["gain_over_n1_points"], "+.1f"), yes(t[d]["gain_met"]), yes(t[d]["beats_cost_only"]),
             yes(t[d]["beats_length_only"]), num(t[d]["gap_closed"], ".3f"), yes(t[d]["gap_met"]),
             f"{num(t[d]['token_ratio_trajectory_over_rm'], '.2f')}x", yes(t[d]["tokens_met"])] for d in t]
    return table(["domain", "gain over N = 1 (points)", f">= {100 * BEST_OF_N.gain:g}", "beats cost-only", "beats length-only",
                  "gap closed", f">= {BEST_OF_N.gap_closed:.2f}", "trajectory / RM tokens",
                  f">= {BEST_OF_N.token_ratio:g}x at equal quality"], rows, right=1)


def gap_line(res: Record, domains: list[str]) -> list[str]:
    if "gap_closed" not in res:
        return []
    at = {g["domain"]: g for g in res.rows("gap_closed") if g["N"] == N}
    parts = [f"{d} {ci(at[d]['gap_closed'], at[d]['ci_low'], at[d]['ci_high'])}" for d in ["all", *domains] if d in at]
    return [f"Share of the random -> expected-oracle gap the reward model closes at N = {N} (expected quality): "
            + "; ".join(parts) + ".", ""] if parts else []


def settings_line(res: Record) -> list[str]:
    if "settings" not in res:
        return []
    s, model = res["settings"], res.get("model")
    trained = (f" The model: trained on the `train` split of {model.get('pairs', '?')} pairs ({model.get('trained', 'training not recorded')})."
               if model else "")
    return [f"Pool: {s.get('tasks', '?')} held-out tasks per domain from seed {s.get('seed', '?')}, "
            f"{s.get('candidates', '?')} base-sampler candidates each, executed once per pool seed "
            f"{s.get('pool_seeds', '?')} and re-run {s.get('repeats', '?')} times for the expected quality.{trained}", ""]


def headline(res: Record) -> list[str]:
    """What README.md quotes: the N = 5 table, the gap closed and the targets."""
    rows = res.rows("best_of_n")
    domains = _domains(rows, res.get("domains"))
    return [*settings_line(res),
            f"Best-of-{N}, mean realised quality of the pick [95% bootstrap interval over tasks]:", "",
            *best_of_n_table(rows, domains, N), "", *gap_line(res, domains),
            f"Targets at N = {N} (issue 17):", "", *targets_table(res["targets"]), ""]


def section(res: Record) -> list[str]:
    """The section of ``docs/results.md``: the headline, every N, and the per-encoder and per-source tables."""
    rows = res.rows("best_of_n")
    ns = sorted({r["N"] for r in rows})
    every = []
    for sel in dict.fromkeys(r["selector"] for r in rows):
        cells = {r["N"]: r for r in rows if r["selector"] == sel and r["domain"] == "all"}
        every.append([sel, *(f"{num(cells[n]['quality'])}; {num(_tokens(cells[n]), '.0f')} tok" if n in cells else "n/a"
                             for n in ns)])
    lines = [*headline(res), "Every N, all domains: mean realised quality; tokens per task (execution + "
             "scoring + judging).", "", *table(["selector", *(f"N = {n}" for n in ns)], every), ""]
    if "metrics" in res and "pairwise_accuracy" in res["metrics"]:
        m = res["metrics"]
        lines += [f"Held-out pairwise accuracy {ci(m['pairwise_accuracy'], m.get('pairwise_accuracy_ci_low'), m.get('pairwise_accuracy_ci_high'))}"
                  f", ECE {num(m.get('ece'))}.", ""]
    for lead in ("encoder", "source"):
        if f"by_{lead}" in res:
            sub = res.rows(f"by_{lead}")
            lines += [f"### Best-of-{N} by {lead}", "", *best_of_n_table(sub, _domains(sub), N, lead=lead), ""]
    return lines


# ---------------------------------------------------------------------------------------------
# the page


def _gap_by_n(res: Record, domains: list[str]) -> list[str]:
    gaps = res.rows("gap_closed")
    at = {(g["N"], g["domain"]): g for g in gaps}
    rows = [[str(n), *("n/a" if (g := at.get((n, d))) is None or g["gap_closed"] is None else
                       ci(g["gap_closed"], g["ci_low"], g["ci_high"], value_spec=".2f") for d in [*domains, "all"])]
            for n in sorted({g["N"] for g in gaps})]
    return ["## Gap closed (random -> expected oracle, expected quality) by N", "", *table(["N", *domains, "all"], rows, right=0)]


def _every_n(res: Record) -> list[str]:
    rows, ns = res.rows("best_of_n"), res["settings"]["best_of"]
    at = {(r["selector"], r["N"]): r for r in rows if r["domain"] == "all"}
    body = [[sel, *(f"{at[(sel, n)]['quality']:.3f} ({at[(sel, n)]['seed_std']:.3f}); "
                    f"{at[(sel, n)]['tokens_execution'] + at[(sel, n)]['tokens_scoring']:.0f} tok" for n in ns)]
            for sel in dict.fromkeys(r["selector"] for r in rows)]
    return ["## Every N, all domains", "", "Mean realised quality (std over pool seeds); tokens per task (execution + scoring).",
            "", *table(["selector", *(f"N = {n}" for n in ns)], body)]


def _group(res: Record, lead: str, title: str, domains: list[str]) -> list[str]:
    """The per-encoder or per-data-set tables at N = 5 (rows of ``by_encoder`` / ``by_source``)."""
    rows = res.rows(f"by_{lead}")
    cells = {(r[lead], r["selector"], r["domain"]): r for r in rows if r["N"] == N}
    names = list(dict.fromkeys(r[lead] for r in rows))
    quality = [[name, sel, *(_cell(cells.get((name, sel, d))) for d in [*domains, "all"])]
               for name in names for sel in GROUP_SELECTORS
               if lead != "encoder" or sel == "reward_model" or name == names[0]]  # the others do not depend on the encoder
    models = res.get(f"models_by_{lead}") or {}
    verdicts = []
    for name in res.get(f"targets_by_{lead}") or {}:
        per_domain, m = res[f"targets_by_{lead}"][name], models.get(name) or {}
        for d in per_domain:
            t = per_domain[d]
            verdicts.append([name, d, f"{t['gain_over_n1_points']:+.1f}", yes(t["beats_cost_only"]), yes(t["beats_length_only"]),
                             "n/a" if t["gap_closed"] is None else str(t["gap_closed"]), f"{t['token_ratio_trajectory_over_rm']:.1f}x",
                             num(m.get("pairwise_accuracy")), num(m.get("scoring_latency_ms_p50"), ".0f")])
    real = res.get("real_sources") if lead == "source" else None
    return [f"## {title}: N = {N}", "",
            *(["real: " + ", ".join(f"{d} = {real[d]}" for d in real) + ".", ""] if real else []),
            *table([lead, "selector", *domains, "all"], quality, right=2), "",
            *table([lead, "domain", "gain over N = 1 (pts)", "beats cost-only", "beats length-only", "gap closed",
                    "trajectory / RM tokens", "pairwise accuracy", "scoring p50 ms"], verdicts, align="llrllrrrr"), ""]


def _report_markdown(res: Record) -> list[str]:
    """The evaluation report's own Markdown (:meth:`EvaluationReport.to_markdown`), one heading level down."""
    text = evaluation_report(res).to_markdown()
    return ["## The evaluation report", "", "The tables `orchrm.evaluation` writes for every evaluation, from the same file.", "",
            *(("#" + line if line.startswith("## ") else line) for line in text.splitlines())]


def page(res: Record) -> list[str]:
    s, model, m, seconds = res["settings"], res["model"], res["metrics"], res["seconds"]
    domains = _domains(res.rows("best_of_n"), res.get("domains"))
    pool_time = f"built in {seconds['pool']:.0f} s" if seconds["pool"] else "from the benchmark cache"
    body = [
        "# Best-of-N plan selection on held-out tasks (sandbox)", "",
        f"The model of `configs/{Path(s['config']).name}` (trained on the `train` split of its collection's {model['pairs']} "
        f"pairs; {model['trained']}). Pool: {s['tasks']} tasks per domain from seed {s['seed']} (never collected or tuned "
        f"on), {s['candidates']} base-sampler candidates each, executed once per pool seed {s['pool_seeds']} and re-run "
        f"{s['repeats']} times for the expected quality; pool {pool_time}, evaluated in {seconds['evaluate']:.0f} s. Cells: "
        "mean realised quality of the pick [95% bootstrap interval over tasks].", "",
        f"## Headline: N = {N}", "", *best_of_n_table(res.rows("best_of_n"), domains, N), "",
        *_gap_by_n(res, domains), "", *_every_n(res), "",
        f"## Targets at N = {N} (issue 17)", "", *targets_table(res["targets"]), "",
    ]
    titles = {"encoder": "By encoder (the same pairs and pool; each encoder trained on them)",
              "source": "Built-in generators against the real data sets (each collected, trained and evaluated on its own tasks)"}
    for lead, title in titles.items():
        if f"by_{lead}" in res:
            body += _group(res, lead, title, domains)
    body += [
        f"Held-out pairwise accuracy {m['pairwise_accuracy']:.3f}, ECE {m['ece']:.3f}; scoring latency p50 "
        f"{m['scoring_latency_ms_p50']:.1f} ms for {N} candidates. The random selector is the expected quality of a uniform "
        "pick among the N (its N = 1 row is one random plan); cost-only picks the plan with the highest expected cost; "
        "the trajectory selector executes all N and keeps the answer whose final agent reported the highest confidence; "
        "judging tokens are 0 (no selector here calls an LLM judge).", "",
        *_report_markdown(res),
    ]
    return body


# ---------------------------------------------------------------------------------------------
# the plots


def figures(res: Record, results_dir: Path) -> Figures:
    """Quality against N and against tokens, and the reliability diagram, as the evaluation package
    draws them (:func:`orchrm.evaluation.plots.plot_report`). A file that predates recording the
    reliability table keeps the diagram the benchmark drew (when ``results_dir`` holds one)."""
    names = {f"best_of_n.{kind}.png": caption for kind, caption in PLOTS.items()}
    reliability = "best_of_n.reliability.png"
    if "calibration" not in res and not (Path(results_dir) / reliability).is_file():
        names.pop(reliability)

    def draw(folder: Path) -> None:
        from orchrm.evaluation.plots import plot_report
        from orchrm.util.fileio import atomic_write_bytes

        with tempfile.TemporaryDirectory() as tmp:
            drawn = plot_report(evaluation_report(res), tmp)
            for kind, path in drawn.items():
                if kind == "reliability" and "calibration" not in res:
                    continue  # no table to draw it from: the benchmark's own diagram stays
                atomic_write_bytes(Path(folder) / f"best_of_n.{kind}.png", lambda out, src=path: shutil.copyfile(src, out))

    return Figures(names, draw)


BENCHMARK = Benchmark(
    "Best-of-N plan selection",
    "The default reward model picks one of N base-sampler plans per held-out task (a seed never collected or tuned on), "
    "beside every other selector on the same candidates: the mean realised quality of the pick with a 95% bootstrap "
    "interval over tasks, and the tokens each selector spends per task.",
    page, section, figures)
