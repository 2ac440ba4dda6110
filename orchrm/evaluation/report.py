"""The evaluation report: the flat metrics, the tables behind them and their markdown.

Metric names are flat, with N inside (``best_of_4.reward_model.math``): the gates and promotion
read them by name. :func:`best_of_n_curves` gives the same figures once more as one series per
selector (``best_of_n.reward_model.math``) with N as the step, for a plot of quality against N.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from orchrm.config import EvaluateConfig
from orchrm.evaluation.gates import (
    CHAMPION_DELTA,
    CHAMPION_PREFIX,
    champion_delta_key,
    describe_delta,
)
from orchrm.evaluation.metrics import fmt_number
from orchrm.evaluation.plots import plot_report
from orchrm.evaluation.selectors import SELECTORS
from orchrm.util.fileio import atomic_write_bytes

#: a flat best-of-N name: what comes before ``best_of_<N>`` (``expected.``, ``tokens.``,
#: ``champion_delta.``...), N, and what follows (``.<selector>[.<domain>]``, ``.ci_low``...)
_BEST_OF_N_NAME = re.compile(r"^(?P<head>(?:[\w\-]+\.)*)best_of_(?P<n>\d+)(?P<tail>(?:\.[\w\-]+)*)$")
#: bookkeeping of a paired difference, not a figure to plot against N
_NOT_CURVES = (".tasks", ".resamples")
#: the metrics measured on the held-out pairs (split ``test``); every other one on the candidate pool
PAIR_METRICS = frozenset({"pairwise_accuracy", "bt_loss", "ece", "reward_mean", "reward_std", "pairs"})


def best_of_n_curves(metrics: Mapping[str, float]) -> dict[str, dict[int, float]]:
    """The flat best-of-N metrics as curves: ``{name: {N: value}}``, the name the flat one with
    ``best_of_<N>`` read as ``best_of_n`` (the paired differences' ``.tasks`` and ``.resamples``
    left out). Logged with step N, they let the MLflow UI draw quality against N.

    >>> best_of_n_curves({"best_of_1.random": 0.4, "best_of_4.reward_model.math": 0.7, "best_of_1.reward_model.math": 0.4})
    {'best_of_n.random': {1: 0.4}, 'best_of_n.reward_model.math': {1: 0.4, 4: 0.7}}
    """
    curves: dict[str, dict[int, float]] = {}
    for key, value in metrics.items():
        match = _BEST_OF_N_NAME.match(key)
        if match is None or key.endswith(_NOT_CURVES):
            continue
        name = f"{match['head']}best_of_n{match['tail']}"
        curves.setdefault(name, {})[int(match["n"])] = value
    return {name: dict(sorted(points.items())) for name, points in sorted(curves.items())}


def measured_on(key: str) -> str:
    """``"pairs"`` for a metric measured on the held-out pairs (pairwise accuracy, BT loss,
    calibration, reward statistics, and the champion's and the paired difference's of them),
    ``"pool"`` for every other one (best-of-N, gap closed, latency...): the data set a metric
    is linked to in MLflow.

    >>> measured_on("champion.pairwise_accuracy.plan.math"), measured_on("champion_delta.pairwise_accuracy.ci_low"), measured_on("best_of_4.random")
    ('pairs', 'pairs', 'pool')
    """
    head = key.removeprefix(CHAMPION_PREFIX).removeprefix(f"{CHAMPION_DELTA}.").split(".")[0]
    return "pairs" if head in PAIR_METRICS or head.startswith("pairwise_accuracy_") else "pool"


@dataclass
class EvaluationReport:
    """What :func:`evaluate` measured: flat :attr:`metrics` (MLflow-safe names, see the module
    docstring of the contract), the champion's when one was evaluated, and the :attr:`tables`
    (``pairwise``, ``calibration``, ``best_of_n``, ``gap_closed``, ``latency``; ``champion_*``)."""

    metrics: dict[str, float]
    champion_metrics: dict[str, float] | None
    tables: dict[str, pd.DataFrame]
    config: EvaluateConfig | None = None
    pool_meta: dict[str, Any] = field(default_factory=dict)
    #: what the pool left out (N values, selectors), as sentences (:func:`orchrm.evaluation.harness.read_pool`)
    notes: tuple[str, ...] = ()
    #: the N the gates read (a replay pool's may be below ``config.gates.best_of``); None: the config's
    gates_best_of: int | None = None

    @property
    def gates_n(self) -> int:
        if self.gates_best_of is not None:
            return self.gates_best_of
        return self.config.gates.best_of if self.config else int(self.tables["latency"]["N"].iloc[0])

    @property
    def pool_kind(self) -> str:
        """``sandbox`` (fresh sandbox tasks) or ``replay`` (a user's own held-out traces)."""
        return str(self.pool_meta.get("kind", "sandbox"))

    def pool_line(self) -> str:
        """One sentence naming the pool: its kind, tasks, candidates and where it came from."""
        meta = self.pool_meta
        tasks, candidates = meta.get("tasks", "?"), meta.get("candidates", "?")
        if self.pool_kind == "replay":
            single = meta.get("single_plan_tasks", 0)
            left = f"; {single} held-out task(s) with a single plan left out" if single else ""
            return (f"pool: replay of {tasks} held-out task(s) of {meta.get('source', 'the ingested traces')} "
                    f"(split test, never trained on), {candidates}+ logged plans each{left}")
        return f"pool: sandbox, {tasks} fresh held-out task(s) (seed {meta.get('seed', '?')}), {candidates} candidates each"

    def write(self, out_dir: str | os.PathLike) -> dict[str, Path]:
        """``metrics.json`` (metrics, champion metrics, pool), one CSV per table, and the plots
        ``quality_vs_n.png``, ``quality_vs_tokens.png``, ``reliability.png``, each written
        atomically; returns ``{name: path}``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths: dict[str, Path] = {}
        data = {"metrics": self.metrics, "champion_metrics": self.champion_metrics, "pool": self.pool_meta,
                "notes": list(self.notes), "gates_best_of": self.gates_n,
                "config": self.config.model_dump(mode="json") if self.config else None}
        paths["metrics"] = atomic_write_bytes(out / "metrics.json", lambda tmp: Path(tmp).write_text(json.dumps(data, indent=2) + "\n"))
        for name, table in self.tables.items():
            paths[name] = atomic_write_bytes(out / f"{name}.csv", lambda tmp, t=table: t.to_csv(tmp, index=False))
        paths |= plot_report(self, out)
        return paths

    def curves(self) -> dict[str, dict[int, float]]:
        """Best-of-N curves (:func:`best_of_n_curves`) of this model, of the paired differences
        (``champion_delta.best_of_n``...) and, prefixed ``champion.``, of the champion's figures on
        the same pool: ``best_of_n.reward_model`` beside ``champion.best_of_n.reward_model``."""
        curves = best_of_n_curves(self.metrics)
        if self.champion_metrics:
            curves |= {f"{CHAMPION_PREFIX}{name}": points for name, points in best_of_n_curves(self.champion_metrics).items()}
        return curves

    def champion_difference(self) -> str | None:
        """The paired difference the ``beats_champion`` gate reads, as one sentence: candidate
        minus champion, its 95% paired bootstrap interval and the tasks (None without a champion
        or without the difference)."""
        m = self.metrics
        key = champion_delta_key(m, self.gates_n, no_pool=m.get("pool_tasks") == 0)
        if self.champion_metrics is None or key not in m:
            return None
        lo, hi = m.get(f"{key}.ci_low", math.nan), m.get(f"{key}.ci_high", math.nan)
        how = ("no bootstrap (evaluate.bootstrap 0): the interval is the mean itself" if m.get(f"{key}.resamples") == 0
               else "95% paired bootstrap interval over tasks")
        margin = self.config.gates.champion_margin if self.config else None
        bar = f"; replaces the champion only when the lower bound exceeds the margin {margin:.3f}" if margin is not None else ""
        return (f"this model - champion, {describe_delta(key)}: {m[key]:+.3f} [{lo:+.3f}, {hi:+.3f}] "
                f"({how}; {int(m.get(f'{key}.tasks', 0))} tasks){bar}")

    def _champion_difference_table(self) -> list[str]:
        """Markdown rows of the paired difference at every evaluated N (empty for a pool without
        best-of-N, whose one difference the sentence above gives)."""
        m = self.metrics
        rows = []
        for kind, prefix in (("expected", f"{CHAMPION_DELTA}.expected.best_of_"), ("realised", f"{CHAMPION_DELTA}.best_of_")):
            ns = sorted(int(k.removeprefix(prefix)) for k in m if k.startswith(prefix) and k.removeprefix(prefix).isdigit())
            rows += [f"| {n} | {kind} | {m[f'{prefix}{n}']:+.3f} [{m.get(f'{prefix}{n}.ci_low', math.nan):+.3f}, "
                     f"{m.get(f'{prefix}{n}.ci_high', math.nan):+.3f}] | {int(m.get(f'{prefix}{n}.tasks', 0))} |" for n in ns]
        if not rows:
            return []
        return ["| N | quality | this model - champion [95% paired CI] | tasks |", "|---:|---|---:|---:|", *rows, ""]

    def _best_of_n(self, domain: str = "all") -> pd.DataFrame:
        t = self.tables["best_of_n"]
        return t[t["domain"] == domain]

    def summary(self) -> str:
        """The tables a person reads in a terminal."""
        m = self.metrics
        lines = [f"pairwise accuracy {fmt_number(m.get('pairwise_accuracy', math.nan))} "
                 f"[{fmt_number(m.get('pairwise_accuracy_ci_low', math.nan), 2)}, {fmt_number(m.get('pairwise_accuracy_ci_high', math.nan), 2)}]"
                 f"  BT loss {fmt_number(m.get('bt_loss', math.nan))}  ECE {fmt_number(m.get('ece', math.nan))}"
                 f"  reward mean {fmt_number(m.get('reward_mean', math.nan))} std {fmt_number(m.get('reward_std', math.nan))}"]
        pw = self.tables["pairwise"]
        lines.append(pw.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        if self.pool_meta:  # a report rebuilt from metrics alone does not know its pool
            lines += ["", self.pool_line(), *(f"  {note}" for note in self.notes)]
        difference = self.champion_difference()
        t = self._best_of_n()
        if t.empty:
            return "\n".join(lines + ([] if difference is None else ["", difference]))
        q = t.pivot(index="selector", columns="N", values="quality").reindex([s for s in SELECTORS if s in set(t["selector"])])
        lines += ["", "best-of-N, mean realised quality over held-out tasks (all domains):",
                  q.to_string(float_format=lambda x: f"{x:.3f}")]
        n = self.gates_n
        at = t[t["N"] == n].set_index("selector").reindex([s for s in SELECTORS if s in set(t["selector"])])
        lines += ["", f"best-of-{n}: quality [95% interval over tasks] (std over pool seeds), expected quality, tokens per task:"]
        lines.append(f"{'selector':<16}{'quality':>8} {'interval':>15}{'seeds':>7}{'expected':>9}{'execution':>11}{'scoring':>9}{'judging':>8}")
        for s, r in at.iterrows():
            lines.append(f"{s:<16}{r.quality:>8.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}]{r.seed_std:>7.3f}{r.expected:>9.3f}"
                         f"{r.tokens_execution:>11.0f}{r.tokens_scoring:>9.0f}{r.tokens_judging:>8.0f}")
        g = self.tables["gap_closed"]
        g = g[g["N"] == n]
        lines += ["", f"gap closed at N = {n} (random -> expected oracle, in expected quality):"]
        lines += [f"  {r.domain:<10}{fmt_number(r.gap_closed)} [{fmt_number(r.ci_low, 2)}, {fmt_number(r.ci_high, 2)}]  "
                  f"(random {r.random:.3f}, reward model {r.reward_model:.3f}, oracle {r.expected_oracle:.3f}; {r.tasks} tasks)"
                  for r in g.itertuples()]
        lines += ["", f"scoring latency p50: {fmt_number(m.get('scoring_latency_ms_p50', math.nan), 1)} ms for {n} candidates"]
        if self.champion_metrics is not None:
            key = f"expected.best_of_{n}.reward_model"
            lines.append(f"champion on the same pool: best-of-{n} expected quality {fmt_number(self.champion_metrics.get(key, math.nan))} "
                         f"(this model {fmt_number(m.get(key, math.nan))})")
        if difference is not None:
            lines.append(difference)
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """The report as Markdown: pairwise accuracy, best-of-N per domain, gap closed, latency."""
        m = self.metrics
        n = self.gates_n
        lines = []
        if self.pool_meta:  # a report rebuilt from metrics alone does not know its pool
            line = self.pool_line()
            lines += ["## Pool", "", line[0].upper() + line[1:] + ".", "", *(f"- {note}" for note in self.notes), ""]
        lines += ["## Pairwise accuracy (held-out pairs)", "",
                 "| granularity | domain | pairs | tasks | accuracy [95% CI] | BT loss |", "|---|---|---:|---:|---:|---:|"]
        for r in self.tables["pairwise"].itertuples():
            lines.append(f"| {r.granularity} | {r.domain} | {r.pairs} | {r.tasks} | {r.accuracy:.3f} "
                         f"[{fmt_number(r.ci_low, 2)}, {fmt_number(r.ci_high, 2)}] | {r.bt_loss:.3f} |")
        lines += ["", f"ECE {fmt_number(m.get('ece', math.nan))}; reward mean {fmt_number(m.get('reward_mean', math.nan))}, "
                  f"std {fmt_number(m.get('reward_std', math.nan))}.", ""]
        difference = self.champion_difference()
        if difference is not None:
            lines += ["## Against the champion (same pool)", "", difference[0].upper() + difference[1:] + ".", "",
                      *self._champion_difference_table()]
        t = self.tables["best_of_n"]
        if t.empty:
            return "\n".join(lines)
        for domain in ["all", *sorted(d for d in t["domain"].unique() if d != "all")]:
            sub = t[t["domain"] == domain]
            ns = sorted(sub["N"].unique())
            lines += [f"## Best-of-N: {domain}", "",
                      "Mean realised quality [95% interval over tasks]; tokens per task at N = "
                      f"{n} (execution / scoring / judging).", "",
                      "| selector | " + " | ".join(f"N = {k}" for k in ns) + f" | tokens at N = {n} |",
                      "|---|" + "---:|" * (len(ns) + 1)]
            for s in SELECTORS:
                rows = sub[sub["selector"] == s].set_index("N")
                if rows.empty:
                    continue
                cells = [f"{rows.loc[k, 'quality']:.3f} [{fmt_number(rows.loc[k, 'ci_low'], 2)}, {fmt_number(rows.loc[k, 'ci_high'], 2)}]" for k in ns]
                tok = rows.loc[n] if n in rows.index else None
                tok_cell = "" if tok is None else f"{tok.tokens_execution:.0f} / {tok.tokens_scoring:.0f} / {tok.tokens_judging:.0f}"
                lines.append(f"| {s} | " + " | ".join(cells) + f" | {tok_cell} |")
            lines.append("")
        g = self.tables["gap_closed"]
        g = g[g["N"] == n]
        lines += [f"## Gap closed at N = {n}", "", "Fraction of the random -> expected-oracle gap (expected quality) closed by the reward model.", "",
                  "| domain | tasks | random | reward model | expected oracle | gap closed [95% CI] |", "|---|---:|---:|---:|---:|---:|"]
        for r in g.itertuples():
            lines.append(f"| {r.domain} | {r.tasks} | {r.random:.3f} | {r.reward_model:.3f} | {r.expected_oracle:.3f} | "
                         f"{fmt_number(r.gap_closed)} [{fmt_number(r.ci_low, 2)}, {fmt_number(r.ci_high, 2)}] |")
        lines += ["", f"Scoring latency p50: {fmt_number(m.get('scoring_latency_ms_p50', math.nan), 1)} ms for {n} candidates.", ""]
        return "\n".join(lines)


