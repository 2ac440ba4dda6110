"""evaluate(): a model, and optionally the champion, on held-out pairs and one candidate pool.

>>> pool = build_pool(config)                                        # doctest: +SKIP
>>> report = evaluate(model, pairs=test_pairs, pool=pool, config=config.evaluate)  # doctest: +SKIP
>>> check_gates(report.metrics, config.evaluate.gates).passed        # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from orchrm.config import EvaluateConfig
from orchrm.errors import ConfigError
from orchrm.evaluation.gates import CHAMPION_DELTA
from orchrm.evaluation.metrics import calibration, paired_difference, pairwise_metrics, score_texts
from orchrm.evaluation.pool import CandidatePool, log
from orchrm.evaluation.report import EvaluationReport
from orchrm.evaluation.selectors import (
    best_of_n_picks,
    best_of_n_table,
    gap_closed_table,
    scoring_latency,
)
from orchrm.model.scoring import scoring_tokens
from orchrm.model.texts import plan_prompt

# ---------------------------------------------------------------------------------------------
# evaluate


def best_of_ns(config: EvaluateConfig, candidates: int) -> tuple[int, ...]:
    """The N values evaluated: ``config.best_of`` and the gates' N; ConfigError when the pool has
    too few candidates for one of them."""
    ns = tuple(sorted(set(config.best_of) | {config.gates.best_of}))
    too_big = [n for n in ns if n > candidates]
    if too_big:
        raise ConfigError(
            f"best-of-N for N = {too_big} needs that many candidates, but the pool has {candidates} per task; "
            "lower evaluate.best_of / evaluate.gates.best_of or build the pool with more evaluate.candidates"
        )
    return ns


@dataclass(frozen=True)
class PoolReading:
    """How :func:`evaluate` reads one pool: the N values it evaluates (``ns``), the N the gates
    read (``gates_n``), the selectors the pool cannot support (name -> why) and the notes the
    report prints about what was left out."""

    kind: str
    ns: tuple[int, ...]
    gates_n: int
    unavailable: dict[str, str]
    notes: tuple[str, ...]


def read_pool(config: EvaluateConfig, pool: CandidatePool) -> PoolReading:
    """What ``pool`` supports. A sandbox pool must hold every configured N (else ConfigError, see
    :func:`best_of_ns`). A replay pool evaluates the configured N up to the plans its smallest
    task has; the larger ones are dropped, and the gates read ``min(gates.best_of, that)``
    (evaluated too). An
    empty pool (no held-out task with two distinct plans) gives no best-of-N at all. Selectors
    whose inputs the pool never logged are unavailable: ``trajectory`` without a confidence,
    the votes without an answer."""
    kind = str(pool.meta.get("kind", "sandbox"))
    frame, notes = pool.frame, []
    if frame.empty:
        notes.append(f"no best-of-N: none of the {kind} pool's held-out tasks has two distinct plans "
                     "(tasks with one plan each), so the pairwise gates alone decide")
        return PoolReading(kind, (), config.gates.best_of, {}, tuple(notes))
    candidates = pool.candidates
    if kind == "replay":
        wanted = sorted(set(config.best_of) | {config.gates.best_of})
        gates_n = min(config.gates.best_of, candidates)
        ns = tuple(sorted({n for n in wanted if n <= candidates} | {gates_n}))
        dropped = [n for n in wanted if n > candidates]
        if dropped:
            notes.append(f"best-of-N for N = {dropped} left out: the smallest held-out task has {candidates} distinct plans")
        if gates_n != config.gates.best_of:
            notes.append(f"the gates read best-of-{gates_n} (gates.best_of = {config.gates.best_of}, more than the pool's tasks have)")
    else:
        ns, gates_n = best_of_ns(config, candidates), config.gates.best_of
    unavailable = {}
    if frame["confidence"].isna().all():
        unavailable["trajectory"] = "the traces log no confidence"
    if frame["answer_key"].isna().all():
        unavailable |= {"majority_vote": "the traces log no answers", "weighted_vote": "the traces log no answers"}
    notes += [f"{name} not available: {why}" for name, why in unavailable.items()]
    return PoolReading(kind, ns, gates_n, unavailable, tuple(notes))


def _held_out(pairs: pd.DataFrame) -> pd.DataFrame:
    if "split" in pairs.columns and (pairs["split"] != "test").any():
        return pairs[pairs["split"] == "test"].reset_index(drop=True)
    return pairs.reset_index(drop=True)


def _pairwise(model: Any, pairs: pd.DataFrame, config: EvaluateConfig) -> dict[str, Any]:
    """The pairwise table, calibration and metrics of ``model`` on ``pairs`` (none when empty)."""
    if not pairs.empty:
        return pairwise_metrics(model, pairs, bootstrap=config.bootstrap, seed=config.seed, bins=config.calibration_bins)
    # e.g. re-evaluating a champion on a new pool: best-of-N only, the pairwise gate then fails
    log.warning("no held-out pairs: pairwise accuracy, BT loss and calibration are left out")
    _, reliability = calibration(np.zeros(0), np.zeros(0), bins=config.calibration_bins)
    empty = pd.DataFrame(columns=["granularity", "domain", "pairs", "tasks", "accuracy", "ci_low", "ci_high", "bt_loss"])
    return {"table": empty, "calibration": reliability, "metrics": {}}


#: the columns of the best-of-N and gap-closed tables, for a pool without best-of-N
_BEST_OF_N_COLUMNS = ["N", "selector", "domain", "tasks", "quality", "ci_low", "ci_high", "seed_std", "expected",
                      "expected_ci_low", "expected_ci_high", "tokens_execution", "tokens_scoring", "tokens_judging", "tokens_total"]
_GAP_COLUMNS = ["N", "domain", "tasks", "random", "reward_model", "expected_oracle", "gap_closed", "ci_low", "ci_high"]


def _best_of_n(model: Any, pool: CandidatePool, reading: PoolReading, config: EvaluateConfig) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The best-of-N and gap-closed tables of ``model`` on ``pool`` and the picks behind them
    (:func:`best_of_n_picks` with ``N``; all empty without best-of-N); unavailable selectors are
    left out."""
    if not reading.ns:
        return pd.DataFrame(columns=_BEST_OF_N_COLUMNS), pd.DataFrame(columns=_GAP_COLUMNS), pd.DataFrame()
    frame = pool.frame
    prompts = [plan_prompt(q) for q in frame["question"]]
    read = scoring_tokens(model, prompts, frame["plan_text"])
    frame = frame.assign(reward=score_texts(model, prompts, frame["plan_text"]),
                         score_tokens=read.per_action, score_prompt_tokens=read.per_prompt,
                         # a candidate without a logged confidence is never the trajectory selector's pick
                         confidence=frame["confidence"].astype(float).fillna(-math.inf))
    picks = pd.concat([best_of_n_picks(frame, n).assign(N=n) for n in reading.ns], ignore_index=True)
    picks = picks[~picks["selector"].isin(list(reading.unavailable))]
    return (best_of_n_table(picks, bootstrap=config.bootstrap, seed=config.seed),
            gap_closed_table(picks, bootstrap=config.bootstrap, seed=config.seed), picks)


def _model_results(model: Any, pairs: pd.DataFrame, pool: CandidatePool, reading: PoolReading, config: EvaluateConfig) -> dict[str, Any]:
    """Every metric and table of one model on ``pairs`` and ``pool`` (read as ``reading`` says),
    and what :func:`_champion_differences` pairs up: ``picks`` and per-pair ``correct``."""
    pw = _pairwise(model, pairs, config)
    table, gaps, picks = _best_of_n(model, pool, reading, config)
    n = reading.gates_n
    latency = scoring_latency(model, pool, n)
    metrics = dict(pw["metrics"])
    for row in table.itertuples():
        suffix = "" if row.domain == "all" else f".{row.domain}"
        metrics[f"best_of_{row.N}.{row.selector}{suffix}"] = row.quality
        metrics[f"expected.best_of_{row.N}.{row.selector}{suffix}"] = row.expected
        if row.domain == "all":
            metrics[f"tokens.best_of_{row.N}.{row.selector}"] = row.tokens_execution
            if row.tokens_scoring:
                metrics[f"tokens_scoring.best_of_{row.N}.{row.selector}"] = row.tokens_scoring
    for row in gaps[gaps["N"] == n].itertuples():
        metrics["gap_closed" if row.domain == "all" else f"gap_closed.{row.domain}"] = row.gap_closed
    metrics["scoring_latency_ms_p50"] = latency["p50_ms"]
    metrics["scoring_latency_candidates"] = float(n)
    metrics["pool_tasks"] = float(pool.tasks)
    per_domain = pool.frame.groupby("domain")["task_id"].nunique()
    for domain in pool.meta.get("domains", ()):  # the domains the pool had to cover, 0 where it has none
        metrics[f"pool_tasks.{domain}"] = float(per_domain.get(domain, 0))
    metrics["pool_candidates"] = float(pool.candidates)
    metrics = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}
    latency_table = pd.DataFrame([{"N": n, **latency}])
    return {"metrics": metrics, "tables": {"pairwise": pw["table"], "calibration": pw["calibration"], "best_of_n": table,
                                           "gap_closed": gaps, "latency": latency_table},
            "picks": picks, "correct": pw.get("correct", np.zeros(0))}


def _champion_differences(ours: dict[str, Any], theirs: dict[str, Any], pairs: pd.DataFrame, reading: PoolReading,
                          config: EvaluateConfig) -> dict[str, float]:
    """Candidate minus champion, paired on the same tasks, as flat metrics
    (:meth:`orchrm.evaluation.metrics.PairedDifference.metrics`): for every evaluated N the
    quality of the reward-model pick, realised (``champion_delta.best_of_<N>``) and expected where the pool measured it
    (``champion_delta.expected.best_of_<N>``), per (pool seed, task) and resampled over tasks; and
    held-out pairwise correctness per pair, resampled over tasks (``champion_delta.pairwise_accuracy``:
    what the gate reads on a pool without best-of-N). Each comes with ``.ci_low``, ``.ci_high``, ``.tasks``
    and ``.resamples`` (the bootstrap size; 0: the interval is the mean itself)."""
    out: dict[str, float] = {}
    keys = ["N", "pool_seed", "task_id"]
    if reading.ns:
        mine = ours["picks"][ours["picks"]["selector"] == "reward_model"].set_index(keys).sort_index()
        other = theirs["picks"][theirs["picks"]["selector"] == "reward_model"].set_index(keys).reindex(mine.index)
        for n in reading.ns:
            a, b = mine.loc[n], other.loc[n]
            tasks = a.index.get_level_values("task_id").to_numpy()
            for column, key in (("quality", f"{CHAMPION_DELTA}.best_of_{n}"), ("expected", f"{CHAMPION_DELTA}.expected.best_of_{n}")):
                diff = (a[column] - b[column]).to_numpy(dtype=float)
                if np.isfinite(diff).all():
                    out |= paired_difference(diff, tasks, bootstrap=config.bootstrap, seed=config.seed).metrics(key)
    if len(ours["correct"]) and len(ours["correct"]) == len(theirs["correct"]):
        diff = np.asarray(ours["correct"]) - np.asarray(theirs["correct"])
        out |= paired_difference(diff, pairs["task_id"].to_numpy(), bootstrap=config.bootstrap,
                                 seed=config.seed).metrics(f"{CHAMPION_DELTA}.pairwise_accuracy")
    return {k: v for k, v in out.items() if math.isfinite(v)}


def evaluate(
    model: Any, *, pairs: pd.DataFrame, pool: CandidatePool, config: EvaluateConfig, champion: Any | None = None
) -> EvaluationReport:
    """Every metric of ``model`` on held-out ``pairs`` (rows with ``split != "test"`` are
    dropped) and on the candidate ``pool``; ``champion``, when given, is evaluated on the same
    pairs and pool in the same call (its metrics in :attr:`EvaluationReport.champion_metrics`),
    and the paired differences candidate minus champion join the candidate's metrics
    (``champion_delta.*``, see :func:`_champion_differences`: what ``beats_champion`` reads).
    Empty ``pairs`` leave the pairwise metrics out (the ``pairwise_accuracy`` gate then fails).
    The pool is read as :func:`read_pool` says (a replay pool's N capped at what its tasks
    have, unavailable selectors left out); the report names the pool and what was left out.

    ``model``: a :class:`orchrm.model.reward_model.BradleyTerryModel` or any object with ``score(prompts,
    actions)`` (and optionally ``tokenize``, ``shared_prompt`` for the token count,
    :func:`orchrm.model.scoring.scoring_tokens`).
    """
    pairs = _held_out(pairs)
    reading = read_pool(config, pool)
    main = _model_results(model, pairs, pool, reading, config)
    tables = dict(main["tables"])
    champion_metrics = None
    if champion is not None:
        other = _model_results(champion, pairs, pool, reading, config)
        champion_metrics = other["metrics"]
        main["metrics"] |= _champion_differences(main, other, pairs, reading, config)
        tables |= {f"champion_{name}": t for name, t in other["tables"].items() if name in ("pairwise", "best_of_n", "gap_closed")}
    return EvaluationReport(metrics=main["metrics"], champion_metrics=champion_metrics, tables=tables, config=config,
                            pool_meta=dict(pool.meta), notes=reading.notes, gates_best_of=reading.gates_n)


