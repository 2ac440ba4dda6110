"""evaluate(): a model, and optionally the champion, on held-out pairs and one candidate pool.

>>> pool = build_pool(config)                                        # doctest: +SKIP
>>> report = evaluate(model, pairs=test_pairs, pool=pool, config=config.evaluate)  # doctest: +SKIP
>>> check_gates(report.metrics, config.evaluate.gates).passed        # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from orchrm.config import EvaluateConfig
from orchrm.errors import ConfigError
from orchrm.evaluation.metrics import calibration, pairwise_metrics, score_texts
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


def _held_out(pairs: pd.DataFrame) -> pd.DataFrame:
    if "split" in pairs.columns and (pairs["split"] != "test").any():
        return pairs[pairs["split"] == "test"].reset_index(drop=True)
    return pairs.reset_index(drop=True)


def _model_results(model: Any, pairs: pd.DataFrame, pool: CandidatePool, config: EvaluateConfig) -> dict[str, Any]:
    """Every metric and table of one model on ``pairs`` and ``pool``."""
    ns = best_of_ns(config, pool.candidates)
    if pairs.empty:  # e.g. re-evaluating a champion on a new pool: best-of-N only, the pairwise gate then fails
        log.warning("no held-out pairs: pairwise accuracy, BT loss and calibration are left out")
        _, reliability = calibration(np.zeros(0), np.zeros(0), bins=config.calibration_bins)
        empty = pd.DataFrame(columns=["granularity", "domain", "pairs", "tasks", "accuracy", "ci_low", "ci_high", "bt_loss"])
        pw = {"table": empty, "calibration": reliability, "metrics": {}}
    else:
        pw = pairwise_metrics(model, pairs, bootstrap=config.bootstrap, seed=config.seed, bins=config.calibration_bins)
    frame = pool.frame
    prompts = [plan_prompt(q) for q in frame["question"]]
    read = scoring_tokens(model, prompts, frame["plan_text"])
    frame = frame.assign(reward=score_texts(model, prompts, frame["plan_text"]),
                         score_tokens=read.per_action, score_prompt_tokens=read.per_prompt)
    picks = pd.concat([best_of_n_picks(frame, n).assign(N=n) for n in ns], ignore_index=True)
    table = best_of_n_table(picks, bootstrap=config.bootstrap, seed=config.seed)
    gaps = gap_closed_table(picks, bootstrap=config.bootstrap, seed=config.seed)
    latency = scoring_latency(model, pool, config.gates.best_of)
    metrics = dict(pw["metrics"])
    for row in table.itertuples():
        suffix = "" if row.domain == "all" else f".{row.domain}"
        metrics[f"best_of_{row.N}.{row.selector}{suffix}"] = row.quality
        metrics[f"expected.best_of_{row.N}.{row.selector}{suffix}"] = row.expected
        if row.domain == "all":
            metrics[f"tokens.best_of_{row.N}.{row.selector}"] = row.tokens_execution
            if row.tokens_scoring:
                metrics[f"tokens_scoring.best_of_{row.N}.{row.selector}"] = row.tokens_scoring
    for row in gaps[gaps["N"] == config.gates.best_of].itertuples():
        metrics["gap_closed" if row.domain == "all" else f"gap_closed.{row.domain}"] = row.gap_closed
    metrics["scoring_latency_ms_p50"] = latency["p50_ms"]
    metrics["scoring_latency_candidates"] = float(config.gates.best_of)
    metrics["pool_tasks"] = float(pool.tasks)
    metrics = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}
    latency_table = pd.DataFrame([{"N": config.gates.best_of, **latency}])
    return {"metrics": metrics, "tables": {"pairwise": pw["table"], "calibration": pw["calibration"], "best_of_n": table,
                                           "gap_closed": gaps, "latency": latency_table}}


def evaluate(
    model: Any, *, pairs: pd.DataFrame, pool: CandidatePool, config: EvaluateConfig, champion: Any | None = None
) -> EvaluationReport:
    """Every metric of ``model`` on held-out ``pairs`` (rows with ``split != "test"`` are
    dropped) and on the candidate ``pool``; ``champion``, when given, is evaluated on the same
    pairs and pool in the same call (its metrics in :attr:`EvaluationReport.champion_metrics`).
    Empty ``pairs`` leave the pairwise metrics out (the ``pairwise_accuracy`` gate then fails).

    ``model``: a :class:`orchrm.model.reward_model.BradleyTerryModel` or any object with ``score(prompts,
    actions)`` (and optionally ``tokenize``, ``shared_prompt`` for the token count,
    :func:`orchrm.model.scoring.scoring_tokens`).
    """
    pairs = _held_out(pairs)
    main = _model_results(model, pairs, pool, config)
    tables = dict(main["tables"])
    champion_metrics = None
    if champion is not None:
        other = _model_results(champion, pairs, pool, config)
        champion_metrics = other["metrics"]
        tables |= {f"champion_{name}": t for name, t in other["tables"].items() if name in ("pairwise", "best_of_n", "gap_closed")}
    return EvaluationReport(metrics=main["metrics"], champion_metrics=champion_metrics, tables=tables, config=config,
                            pool_meta=dict(pool.meta))


