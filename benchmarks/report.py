"""``docs/results.md`` from ``benchmarks/results/*.json``: every figure formatted from a results
file, none typed by hand.

One section per results file: what the benchmark measures, its headline table, the command,
commit and machine the file records (or a line saying it records none), and its plots. The
best-of-N headline (N = 5, every selector, per domain, and the targets) is also quoted in
``README.md`` between ``<!-- results:headline:start -->`` and ``<!-- results:headline:end -->``.

    python benchmarks/report.py              # docs/results.md, docs/*.png and the README block
    python benchmarks/report.py --check      # exit 1, naming the stale file, when either differs

Same JSON, same Markdown bytes (the PNGs are redrawn and may differ by a byte).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_best_of_n import TARGET_N  # noqa: E402
from results_io import write_text  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
START, END = "<!-- results:headline:start -->", "<!-- results:headline:end -->"
CAPTIONS = {"quality_vs_n": "quality against N", "quality_vs_tokens": "quality against tokens per task",
            "curve": "intermediate-pair curve", "reliability": "reliability diagram"}
NOT_RECORDED = "not recorded: measured before results recorded their {what}"


class ResultsError(ValueError):
    """A results file that is not JSON, or lacks a key the report needs; the message names both."""


class Record:
    """A JSON object from a results file whose missing keys raise :class:`ResultsError` naming the
    file and the key's path (``best_of_n.json: missing key 'best_of_n[3].quality'``)."""

    def __init__(self, data: Any, file: str, trail: str = "") -> None:
        if not isinstance(data, dict):
            raise ResultsError(f"{file}: expected an object at {trail or 'the top level'}, found {type(data).__name__}")
        self._data, self.file, self._trail = data, file, trail

    def _path(self, key: str) -> str:
        return f"{self._trail}.{key}" if self._trail else key

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def __getitem__(self, key: str) -> Any:
        if key not in self._data:
            raise ResultsError(f"{self.file}: missing key {self._path(key)!r}")
        value = self._data[key]
        return Record(value, self.file, self._path(key)) if isinstance(value, dict) else value

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self._data else default

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def rows(self, key: str) -> list[Record]:
        """The list of objects under ``key``, each a :class:`Record`."""
        value = self[key]
        if not isinstance(value, list):
            raise ResultsError(f"{self.file}: expected a list at {self._path(key)!r}, found {type(value).__name__}")
        return [Record(v, self.file, f"{self._path(key)}[{i}]") for i, v in enumerate(value)]


def load_results(results_dir: Path) -> dict[str, Record]:
    """Every ``*.json`` of ``results_dir`` by file stem, in name order."""
    out = {}
    for path in sorted(Path(results_dir).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ResultsError(f"{path}: not a readable JSON file ({exc}); rerun its benchmark or restore it from git") from exc
        out[path.stem] = Record(data, str(path))
    return out


# ---------------------------------------------------------------------------------------------
# formatting


def num(x: Any, spec: str = ".3f") -> str:
    """``x`` formatted with ``spec``; ``n/a`` for a missing or NaN figure."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return format(x, spec)


def ci(value: Any, low: Any, high: Any) -> str:
    """``0.873 [0.81, 0.93]``: a quality with its 95% interval."""
    return f"{num(value)} [{num(low, '.2f')}, {num(high, '.2f')}]"


def yes(flag: Any) -> str:
    return "n/a" if flag is None else ("yes" if flag else "no")


def table(header: list[str], rows: Iterable[list[str]], *, right: int = 1) -> list[str]:
    """A Markdown table; every column from the ``right``-th on is right-aligned."""
    align = ["---" if i < right else "---:" for i in range(len(header))]
    return ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|", *("| " + " | ".join(r) + " |" for r in rows)]


def machine_line(res: Record) -> str:
    if "machine" not in res:
        return "Machine: not recorded."
    m = res["machine"]
    load = m.get("load_average")
    extras = [f"{k} {m[k]}" for k in m if k not in ("cpu", "cpus", "load_average", "platform", "python")]
    rest = [*([m["platform"]] if "platform" in m else []), *([f"Python {m['python']}"] if "python" in m else []), *extras]
    return (f"Machine: {m.get('cpus', '?')} CPUs ({m.get('cpu', 'CPU not recorded')}), load average "
            f"{' / '.join(map(str, load)) if isinstance(load, list) else 'not recorded'}"
            + (f"; {', '.join(rest)}." if rest else "."))


def script_of(stem: str) -> str:
    for name in (f"bench_{stem}.py", f"{stem}.py"):
        if (HERE / name).is_file():
            return f"benchmarks/{name}"
    return f"benchmarks/bench_{stem}.py"


def provenance_lines(stem: str, res: Record) -> list[str]:
    """Command, commit and machine as the file records them, or a line saying it does not."""
    commands = res.get("commands") or ([res["command"]] if "command" in res else [])
    rerun = commands[-1] if commands else f"python {script_of(stem)}"
    lines = [f"Command: `{c}`  " for c in commands] or [
        f"Command: {NOT_RECORDED.format(what='command')} (the script: `{script_of(stem)}`)  "]
    lines.append(f"Commit: `{res['commit']}`  " if res.get("commit") else
                 f"Commit: {NOT_RECORDED.format(what='commit')}; rerun `{rerun}`  ")
    return [*lines, machine_line(res)]


# ---------------------------------------------------------------------------------------------
# best-of-N


def _rows_at(rows: list[Record], n: int) -> dict[tuple[str, str], Record]:
    return {(r["selector"], r["domain"]): r for r in rows if r["N"] == n}


def _domains(rows: list[Record], declared: list[str] | None = None) -> list[str]:
    """The domains of ``rows`` (``declared`` when the file lists them), without ``all``."""
    return list(declared) if declared else sorted({r["domain"] for r in rows} - {"all"})


def best_of_n_table(rows: list[Record], domains: list[str], n: int, *, lead: str | None = None) -> list[str]:
    """Selectors (rows, in file order) x domains and ``all`` at ``n``: quality [95% interval] and the
    tokens per task of the ``all`` row; ``lead``: a key (``encoder``, ``source``) shown first."""
    at = [r for r in rows if r["N"] == n]
    groups = list(dict.fromkeys(r[lead] for r in at)) if lead else [None]
    out = []
    for group in groups:
        mine = [r for r in at if lead is None or r[lead] == group]
        cells = _rows_at(mine, n)
        for sel in dict.fromkeys(r["selector"] for r in mine):
            a = cells.get((sel, "all"))
            quality = [ci(c["quality"], c["ci_low"], c["ci_high"]) if (c := cells.get((sel, d))) else "n/a"
                       for d in [*domains, "all"]]
            tokens = [num(a["tokens_execution"], ".0f"), num(a["tokens_scoring"], ".0f")] if a else ["n/a", "n/a"]
            out.append(([str(group)] if lead else []) + [sel, *quality, *tokens])
    header = ([lead] if lead else []) + ["selector", *domains, "all", "execution tokens / task", "scoring tokens / task"]
    return table(header, out, right=2 if lead else 1)


def targets_table(res: Record) -> list[str]:
    t = res["targets"]
    rows = [[d, num(t[d]["gain_over_n1_points"], "+.1f"), yes(t[d]["gain_met"]), yes(t[d]["beats_cost_only"]),
             yes(t[d]["beats_length_only"]), num(t[d]["gap_closed"], ".3f"), yes(t[d]["gap_met"]),
             f"{num(t[d]['token_ratio_trajectory_over_rm'], '.2f')}x", yes(t[d]["tokens_met"])] for d in t]
    return table(["domain", "gain over N = 1 (points)", ">= 7", "beats cost-only", "beats length-only", "gap closed",
                  ">= 0.60", "trajectory / RM tokens", ">= 5x at equal quality"], rows, right=1)


def gap_line(res: Record, domains: list[str]) -> list[str]:
    if "gap_closed" not in res:
        return []
    at = {g["domain"]: g for g in res.rows("gap_closed") if g["N"] == TARGET_N}
    parts = [f"{d} {ci(at[d]['gap_closed'], at[d]['ci_low'], at[d]['ci_high'])}" for d in ["all", *domains] if d in at]
    return [f"Share of the random -> expected-oracle gap the reward model closes at N = {TARGET_N} (expected quality): "
            + "; ".join(parts) + ".", ""] if parts else []


def best_of_n_settings(res: Record) -> list[str]:
    if "settings" not in res:
        return []
    s, model = res["settings"], res.get("model")
    trained = (f" The model: trained on the `train` split of {model.get('pairs', '?')} pairs ({model.get('trained', 'training not recorded')})."
               if model else "")
    return [f"Pool: {s.get('tasks', '?')} held-out tasks per domain from seed {s.get('seed', '?')}, "
            f"{s.get('candidates', '?')} base-sampler candidates each, executed once per pool seed "
            f"{s.get('pool_seeds', '?')} and re-run {s.get('repeats', '?')} times for the expected quality.{trained}", ""]


def best_of_n_headline(res: Record) -> list[str]:
    """What README.md quotes: the N = 5 table, the gap closed and the targets."""
    rows = res.rows("best_of_n")
    domains = _domains(rows, res.get("domains"))
    return [*best_of_n_settings(res),
            f"Best-of-{TARGET_N}, mean realised quality of the pick [95% bootstrap interval over tasks]:", "",
            *best_of_n_table(rows, domains, TARGET_N), "", *gap_line(res, domains),
            f"Targets at N = {TARGET_N} (issue 17):", "", *targets_table(res), ""]


def best_of_n_section(res: Record) -> list[str]:
    rows = res.rows("best_of_n")
    ns = sorted({r["N"] for r in rows})
    every = []
    for sel in dict.fromkeys(r["selector"] for r in rows):
        cells = {r["N"]: r for r in rows if r["selector"] == sel and r["domain"] == "all"}
        every.append([sel, *(f"{num(cells[n]['quality'])}; {num(_tokens(cells[n]), '.0f')} tok" if n in cells else "n/a"
                             for n in ns)])
    lines = [*best_of_n_headline(res), "Every N, all domains: mean realised quality; tokens per task (execution + "
             "scoring + judging).", "", *table(["selector", *(f"N = {n}" for n in ns)], every), ""]
    if "metrics" in res and "pairwise_accuracy" in res["metrics"]:
        m = res["metrics"]
        lines += [f"Held-out pairwise accuracy {ci(m['pairwise_accuracy'], m.get('pairwise_accuracy_ci_low'), m.get('pairwise_accuracy_ci_high'))}"
                  f", ECE {num(m.get('ece'))}.", ""]
    for lead in ("encoder", "source"):
        key = f"by_{lead}"
        if key in res:
            sub = res.rows(key)
            lines += [f"### Best-of-{TARGET_N} by {lead}", "", *best_of_n_table(sub, _domains(sub), TARGET_N, lead=lead), ""]
    return lines


def _tokens(r: Record) -> float:
    if "tokens_total" in r:
        return r["tokens_total"]
    return r["tokens_execution"] + r["tokens_scoring"] + r.get("tokens_judging", 0.0)


# ---------------------------------------------------------------------------------------------
# the other benchmarks


def token_efficiency_section(res: Record) -> list[str]:
    rows = res.rows("curve")
    order = {s: i for i, s in enumerate(dict.fromkeys(r["source"] for r in rows))}
    curve = sorted(rows, key=lambda r: (order[r["source"]], r["collection_tokens"]))
    extra = [k for k in ("pairs", "N") if all(k in r for r in curve)]
    rows = [[r["source"], num(r["collection_tokens"], ",.0f"), *(str(r[k]) for k in extra),
             ci(r["quality"], r["ci_low"], r["ci_high"])] for r in curve]
    return table(["pair source", "collection tokens", *extra, "quality [95% interval]"], rows) + [""]


def plan_choice_section(res: Record) -> list[str]:
    d = res["domains"]
    rows = [[k, str(d[k]["tasks"]), num(d[k]["mean_candidate"]), num(d[k]["oracle"]), num(d[k]["gap_points"], ".1f"),
             num(100 * d[k]["top_shape_share"], ".0f") + "%", num(100 * d[k]["priciest_best_share"], ".0f") + "%",
             yes(d[k]["passes"])] for k in d]
    return [f"{res.get('plans', '?')} candidates per task, {res.get('repeats', '?')} re-runs each, seed {res.get('seed', '?')}. "
            "Targets: gap >= 15 points, no shape best on more than 40% of tasks, the priciest plan best on fewer than half.",
            "", *table(["domain:source", "tasks", "mean candidate", "expected-quality oracle", "gap (points)",
                        "top shape share", "priciest plan best", "targets met"], rows), ""]


def collect_section(res: Record) -> list[str]:
    d = res["domains"]
    rows = [[k, str(d[k]["tasks"]), num(d[k]["single_process_per_s"], ".0f"), num(d[k]["parallel_per_s"], ".0f"),
             str(d[k]["target_per_s"]), yes(d[k]["meets_target"])] for k in d]
    return [f"{res.get('workers', '?')} workers, {res.get('plans_per_task', '?')} plans per task.", "",
            *table(["domain", "tasks", "one process (plans/s)", "parallel, end to end (plans/s)", "target (plans/s)", "met"], rows), ""]


def pairs_section(res: Record) -> list[str]:
    b, v = res["build"], res["validate"]
    lines = table(["measurement", "result", "target", "met"], [
        [f"build pairs from {num(b['artifacts'], ',')} artifacts ({num(b['tasks'], ',')} tasks)",
         f"{num(b['pairs'], ',')} pairs in {num(b['seconds_best_of_3'], '.3f')} s", f"100k pairs < {num(b['target_seconds_for_100k_pairs'], 'g')} s",
         yes(b["meets_target"])],
        [f"Great Expectations validation of {num(v['pairs'], ',')} pairs ({v['expectations']} expectations)",
         f"{num(v['seconds_warm_best_of_2'], '.3f')} s warm, {num(v['seconds_first_call_with_gx_import'], '.2f')} s first call",
         f"< {num(v['target_seconds'], 'g')} s", yes(v["meets_target"])],
    ], right=9) + [""]
    if "collection_tokens" in res:
        c = res["collection_tokens"]
        lines += ["Collection tokens per usable pair, intermediate (prefix) against correct-over-incorrect:", "",
                  *table(["domain", "intermediate pairs", "tokens / pair", "correct-over-incorrect pairs", "tokens / pair", "ratio"],
                         [[k, str(c[k]["intermediate_pairs"]), num(c[k]["intermediate_tokens_per_pair"], ".1f"),
                           str(c[k]["correct_over_incorrect_pairs"]), num(c[k]["correct_over_incorrect_tokens_per_pair"], ".1f"),
                           num(c[k]["token_ratio_correct_over_intermediate"], ".2f")] for k in c]), ""]
    return lines


def accuracy_section(res: Record) -> list[str]:
    rows = [r for r in res.rows("rows") if r["granularity"] == "plan"]
    domains = sorted({r["domain"] for r in rows})
    cells = {(r["method"], r["domain"]): r for r in rows}
    body = [[m, *(ci(c["accuracy"], c["ci95"][0], c["ci95"][1]) if (c := cells.get((m, d))) else "n/a" for d in domains)]
            for m in dict.fromkeys(r["method"] for r in rows)]
    return ["Plan-level pairs of held-out test tasks, accuracy [95% interval over tasks]; chance is 0.5.", "",
            *table(["method", *domains], body), ""]


def train_section(res: Record) -> list[str]:
    rows = [[r["method"], num(r["pairs_per_second"], ".2f"), num(r["speedup_vs_trl"], ".2f") + "x",
             num(r["train_seconds"], ".0f"), num(r["test_accuracy"]), num(r["accuracy_minus_trl"], "+.3f")]
            for r in res.rows("rows")]
    target = res["target"]
    lines = [*table(["trainer", "pairs/s", "speed-up vs TRL", "train s", "test accuracy", "vs TRL"], rows), "",
             f"Target (the default `shared_prompt`): >= {num(target['speedup'], 'g')}x TRL's pairs/s at "
             f"{target.get('accuracy', 'equal or better')} accuracy: {'met' if res['default_meets_target'] else 'not met'}.", ""]
    if "gpu" in res:
        g = res["gpu"]
        lines += [f"GPU ({g['device']}):", "", *table(["architecture", "precision", "pairs/s", "peak MiB", "test accuracy"], [
            [r["architecture"], r.get("precision", "?"), num(r["pairs_per_second"], ".1f"), num(r.get("peak_memory_mib"), ".0f"),
             num(r["test_accuracy"])] for r in g.rows("rows")]), ""]
    return lines


def latency_section(res: Record) -> list[str]:
    rows = [[r["model"], str(r["candidates"]), num(r["tokens"], ".0f"), num(r["p50_ms"], ".1f"), num(r["p95_ms"], ".1f"),
             num(r["limit_ms"], ".2f")] for r in res.rows("rows")]
    t = res["target"]
    return [*table(["model", "N", "tokens", "p50 ms", "p95 ms", "compute limit ms"], rows), "",
            f"Target: p50 <= {num(t['default_p50_ms'], 'g')} ms for {t['candidates']} candidates with the default model: "
            f"{'met' if t['met'] else 'not met'}.", ""]


def registry_section(res: Record) -> list[str]:
    m, tp, t = res["cold_start"]["median"], res["throughput"], res["target"]
    return [*table(["measurement", "median s"], [
        ["process start to exit", num(m["wall_s"], ".2f")], ["imports (torch, transformers, orchrm)", num(m["import_s"], ".2f")],
        ["import mlflow", num(m["mlflow_import_s"], ".2f")], ["resolve the alias, download, load", num(m["load_s"], ".2f")],
        ["first score", num(m["score_s"], ".3f")]]), "",
        *table(["scorer", "rows/s"], [["`model.score`", num(tp["model_score_rows_per_s"], ".0f")],
                                      ["`pyfunc.predict`", num(tp["pyfunc_rows_per_s"], ".0f")]]), "",
        f"Pyfunc / model.score time: {num(tp['pyfunc_over_score'], '.3f')}x (target <= {num(t['pyfunc_over_score'], 'g')}x: "
        f"{'met' if t['met'] else 'not met'}); identical rewards: {yes(tp.get('identical_rewards'))}.", ""]


def sweep_defaults_section(res: Record) -> list[str]:
    rows = [[r["name"], _model_name(r["model"]), num(r["train"]["lr"], "g"), str(r["train"].get("patience", "?")),
             f"{r['epochs_run']} ({r['best_epoch']})", num(r["best_val_loss"], ".4f"), num(r["test_pair_accuracy"]),
             num(r["true_pair_accuracy"]), num(r["seconds"], ".0f")] for r in res.rows("runs_out")]
    return [*table(["run", "encoder", "lr", "patience", "epochs run (best)", "best val loss", "test acc", "true-pair acc",
                    "train s"], rows, right=2), ""]


def _model_name(model: Record) -> str:
    """``minilm (train_layers 0)``: the encoder and any other setting the run names."""
    rest = ", ".join(f"{k} {model[k]}" for k in model if k != "encoder")
    return f"{model['encoder']} ({rest})" if rest else str(model["encoder"])


@dataclass(frozen=True)
class Section:
    """How one results file is reported: ``plots`` are file names in the output folder."""

    title: str
    measures: str
    render: Callable[[Record], list[str]]
    plots: tuple[str, ...] = ()


SECTIONS: dict[str, Section] = {
    "best_of_n": Section(
        "Best-of-N plan selection",
        "The default reward model picks one of N base-sampler plans per held-out task (a seed never collected or "
        "tuned on), beside every other selector on the same candidates: the mean realised quality of the pick with "
        "a 95% bootstrap interval over tasks, and the tokens each selector spends per task.",
        best_of_n_section, ("best_of_n.quality_vs_n.png", "best_of_n.quality_vs_tokens.png")),
    "token_efficiency": Section(
        "Intermediate-pair curve",
        "Best-of-N quality of reward models trained on intermediate pairs or on correct-over-incorrect pairs, "
        "against the collection tokens their pairs cost.",
        token_efficiency_section, ("token_efficiency.curve.png",)),
    "plan_choice": Section(
        "Plan choice", "How much the choice among sampled plans matters: the mean candidate's expected quality against "
        "the best candidate's, how often one plan shape is best, and how often the priciest plan is.", plan_choice_section),
    "collect": Section("Collection speed", "Plan executions per second, one process and with parallel workers end to end.",
                       collect_section),
    "pairs": Section("Pairs and data gates", "Building win/loss pairs from artifacts, validating them with Great Expectations, "
                     "and the collection tokens each usable pair costs.", pairs_section),
    "accuracy": Section("Held-out pairwise accuracy", "How often each encoder (and two baselines) orders a held-out pair right.",
                        accuracy_section),
    "train": Section("Training speed", "OrchRM's Trainer against TRL's RewardTrainer on the same pairs: throughput and "
                     "held-out accuracy.", train_section),
    "latency": Section("Scoring latency", "`model.score(question, plans)` for N candidates of one question, end to end.",
                       latency_section),
    "registry": Section("Serving from the registry", "Loading the champion in a cold process, and the pyfunc's throughput "
                        "against `model.score`.", registry_section),
    "sweep_defaults": Section("Training defaults sweep", "Encoder x learning rate x early stopping on a support desk's traces, "
                              "judged on held-out tickets.", sweep_defaults_section),
}


# ---------------------------------------------------------------------------------------------
# the report


@dataclass(frozen=True)
class Report:
    """What the results give: the Markdown of ``results.md``, the README block (markers included)
    and the plots to draw (file name in the output folder -> writer of that path)."""

    markdown: str
    readme_block: str
    plots: dict[str, Callable[[Path], None]]


def _rel(target: Path, start: Path) -> str:
    """``target`` relative to the folder ``start`` (a link's path)."""
    return Path(os.path.relpath(Path(target).resolve(), Path(start).resolve())).as_posix()


def _shown(path: Path) -> str:
    """``path`` as the text shows it: from the project's root when inside it."""
    path = Path(path).resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.as_posix()


def _title(stem: str) -> str:
    return SECTIONS[stem].title if stem in SECTIONS else stem


def _contents(order: list[str], results: dict[str, Record]) -> list[str]:
    """The table at the top: each section, its results file and the commit it records."""
    def commit(stem: str) -> str:
        if stem not in results:
            return "-"
        return f"`{results[stem]['commit'][:12]}`" if results[stem].get("commit") else "not recorded"

    return table(["benchmark", "results file", "commit"],
                 [[f"[{_title(s)}](#{_anchor(_title(s))})", f"`{s}.json`" if s in results else "not measured yet", commit(s)]
                  for s in order], right=3)


def _section(stem: str, res: Record | None, *, results_dir: Path, out_dir: Path,
             plots: dict[str, Callable[[Path], None]]) -> list[str]:
    """One section of results.md; adds the plots it links to ``plots``."""
    lines = [f"## {_title(stem)}", ""]
    if res is None:
        return [*lines, f"Not measured yet: `{_shown(Path(results_dir) / f'{stem}.json')}` does not exist "
                f"(`{script_of(stem)}` writes it).", ""]
    section = SECTIONS.get(stem)
    if section is None:
        lines += [f"No headline table is defined for `{stem}.json` in `benchmarks/report.py`; its keys: "
                  + ", ".join(f"`{k}`" for k in res) + ".", ""]
    else:
        lines += [section.measures, "", *section.render(res)]
        for name in section.plots:
            plots[name] = _plotter(name, res)
            lines += [f"![{CAPTIONS[name.split('.')[1]]}]({name})", ""]
        reliability = Path(results_dir) / f"{stem}.reliability.png"  # drawn by the benchmark from tables the JSON lacks
        if stem == "best_of_n" and reliability.is_file():
            plots[reliability.name] = lambda path, src=reliability: shutil.copyfile(src, path)
            lines += [f"![{CAPTIONS['reliability']}]({reliability.name})", ""]
    detail = Path(results_dir) / f"{stem}.md"
    if detail.is_file():
        lines += [f"Details: [{_shown(detail)}]({_rel(detail, out_dir)})  "]
    return [*lines, *provenance_lines(stem, res), ""]


def _readme_block(best_of_n: Record | None, *, out_dir: Path, readme: Path) -> str:
    lines = [START, "<!-- generated by `python benchmarks/report.py` from benchmarks/results/best_of_n.json: rerun it, "
             "do not edit these lines -->", ""]
    if best_of_n is None:
        lines += ["Not measured yet: `benchmarks/results/best_of_n.json` does not exist.", ""]
    else:
        results_md = Path(out_dir) / "results.md"
        lines += [*best_of_n_headline(best_of_n),
                  f"All of it, with the plots, the command and the commit: [{_shown(results_md)}]"
                  f"({_rel(results_md, Path(readme).parent)}#{_anchor(SECTIONS['best_of_n'].title)}).", ""]
    return "\n".join([*lines, END])


def build_report(results_dir: Path, out_dir: Path, readme: Path) -> Report:
    """Read every results file of ``results_dir`` and render the report for ``out_dir`` and the
    block for ``readme`` (links are relative to them); writes nothing."""
    results = load_results(results_dir)
    order = [s for s in SECTIONS if s in results or s == "token_efficiency"] + [s for s in results if s not in SECTIONS]
    lines = ["# Measured results", "",
             "Generated by `python benchmarks/report.py` (`make report`) from `benchmarks/results/*.json`: do not edit by "
             "hand; `python benchmarks/report.py --check` fails when this file is stale. Each section names the command, "
             "commit and machine its results file records.", "", *_contents(order, results), ""]
    plots: dict[str, Callable[[Path], None]] = {}
    for stem in order:
        lines += _section(stem, results.get(stem), results_dir=results_dir, out_dir=out_dir, plots=plots)
    block = _readme_block(results.get("best_of_n"), out_dir=out_dir, readme=readme)
    return Report("\n".join(lines).rstrip("\n") + "\n", block, plots)


def _anchor(title: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return "".join(c for c in title.lower().replace(" ", "-") if c.isalnum() or c in "-_")


def readme_with_block(text: str, block: str, readme: Path) -> str:
    """``text`` with the part between the markers (included) replaced by ``block``."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ResultsError(f"{readme}: no `{START}` ... `{END}` block; put the two marker lines where the "
                           "best-of-N headline goes")
    return text[:start] + block + text[end + len(END):]


def stale(report: Report, out_dir: Path, readme: Path) -> list[str]:
    """What differs from what the results give: one line per stale or missing file."""
    problems = []
    md = Path(out_dir) / "results.md"
    if not md.is_file() or md.read_text() != report.markdown:
        problems.append(f"{md} is stale: it differs from what benchmarks/results/*.json give")
    text = Path(readme).read_text()
    if readme_with_block(text, report.readme_block, readme) != text:
        problems.append(f"{readme} is stale: its results:headline block differs from benchmarks/results/best_of_n.json")
    problems += [f"{Path(out_dir) / name} is missing" for name in report.plots if not (Path(out_dir) / name).is_file()]
    return problems


def write_report(report: Report, out_dir: Path, readme: Path) -> None:
    """``results.md`` and the plots into ``out_dir``; the block into ``readme``; each file atomically."""
    from orchrm.util.fileio import atomic_write_bytes

    for name, draw in report.plots.items():
        atomic_write_bytes(Path(out_dir) / name, draw)
    write_text(Path(out_dir) / "results.md", report.markdown)
    text = Path(readme).read_text()
    new = readme_with_block(text, report.readme_block, readme)
    if new != text:
        write_text(readme, new)


# ---------------------------------------------------------------------------------------------
# plots (matplotlib, Agg)


def _plotter(name: str, res: Record) -> Callable[[Path], None]:
    kind = name.split(".")[1]
    draw = {"quality_vs_n": plot_quality_vs_n, "quality_vs_tokens": plot_quality_vs_tokens, "curve": plot_curve}[kind]
    return lambda path: draw(res, path)


def _figure(*, nrows: int = 1, ncols: int = 1, **kw: Any):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt, *plt.subplots(nrows, ncols, **kw)


def _save(plt, fig, path: Path) -> None:
    fig.savefig(path, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot_quality_vs_n(res: Record, path: Path) -> None:
    """One panel per domain and ``all``: each selector's quality against N, with its 95% band."""
    rows = res.rows("best_of_n")
    panels = [*_domains(rows, res.get("domains")), "all"]
    cols = min(3, len(panels))
    nrows = -(-len(panels) // cols)
    ns = sorted({r["N"] for r in rows})
    plt, fig, axes = _figure(nrows=nrows, ncols=cols, figsize=(4.2 * cols, 3.6 * nrows), sharey=True, squeeze=False,
                             layout="constrained")
    for ax, domain in zip(axes.flat, panels, strict=False):
        for sel in dict.fromkeys(r["selector"] for r in rows):
            r = sorted((x for x in rows if x["selector"] == sel and x["domain"] == domain), key=lambda x: x["N"])
            if r:
                ax.plot([x["N"] for x in r], [x["quality"] for x in r], marker="o", markersize=3, label=sel,
                        linewidth=2.5 if sel == "reward_model" else 1.2)
                ax.fill_between([x["N"] for x in r], [x["ci_low"] for x in r], [x["ci_high"] for x in r], alpha=0.08)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.minorticks_off()
        ax.set_title(domain)
        ax.set_xlabel("N (candidates)")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    axes.flat[0].set_ylabel("mean realised quality")
    axes.flat[0].legend(fontsize=7, ncol=2)
    fig.suptitle("Best-of-N on held-out tasks")
    _save(plt, fig, path)


def plot_quality_vs_tokens(res: Record, path: Path) -> None:
    """All domains: each selector's quality against its tokens per task, a point per N."""
    rows = [r for r in res.rows("best_of_n") if r["domain"] == "all"]
    plt, fig, ax = _figure(figsize=(7, 4.5))
    for sel in dict.fromkeys(r["selector"] for r in rows):
        r = sorted((x for x in rows if x["selector"] == sel), key=lambda x: x["N"])
        ax.plot([max(_tokens(x), 1) for x in r], [x["quality"] for x in r], marker="o", markersize=3, label=sel,
                linewidth=2.5 if sel == "reward_model" else 1.2)
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(plt.NullFormatter())
    ax.set_xlabel("tokens per task (execution + scoring + judging)")
    ax.set_ylabel("mean realised quality")
    ax.set_title("Quality against tokens, a point per N (all domains)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    _save(plt, fig, path)


def plot_curve(res: Record, path: Path) -> None:
    """Quality against collection tokens, a line per pair source, with its 95% band."""
    curve = res.rows("curve")
    plt, fig, ax = _figure(figsize=(7, 4.5))
    for source in dict.fromkeys(r["source"] for r in curve):
        r = sorted((x for x in curve if x["source"] == source), key=lambda x: x["collection_tokens"])
        xs = [x["collection_tokens"] for x in r]
        ax.plot(xs, [x["quality"] for x in r], marker="o", label=source)
        ax.fill_between(xs, [x["ci_low"] for x in r], [x["ci_high"] for x in r], alpha=0.15)
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(plt.NullFormatter())
    ax.set_xlabel("collection tokens")
    ax.set_ylabel("best-of-N quality")
    ax.set_title("Intermediate pairs against correct-over-incorrect pairs")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    _save(plt, fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=HERE / "results", help="folder of the results JSON files")
    ap.add_argument("--out", type=Path, default=ROOT / "docs", help="folder of results.md and its plots")
    ap.add_argument("--readme", type=Path, default=ROOT / "README.md", help="the README whose headline block is rewritten")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when results.md or the README block is stale")
    args = ap.parse_args(argv)
    try:
        report = build_report(args.results, args.out, args.readme)
        if args.check:
            problems = stale(report, args.out, args.readme)
            for p in problems:
                print(f"report.py --check: {p}; run `python benchmarks/report.py` (make report)", file=sys.stderr)
            return 1 if problems else 0
        write_report(report, args.out, args.readme)
    except ResultsError as exc:
        print(f"report.py: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out / 'results.md'}, {len(report.plots)} plots and the headline block of {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
