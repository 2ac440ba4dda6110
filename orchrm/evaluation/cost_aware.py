"""Cost-aware best-of-N: pick the candidate with the highest ``reward - λ·cost``, and choose ``λ``
on validation tasks for a token budget.

``reward`` is the reward model's normalised reward (``(r - reward_mean) / reward_std`` of its
training rewards, so ``λ`` does not depend on the model's scale) and ``cost`` the plan's rough
cost from its text alone (:func:`orchrm.execution.tasks.base.plan_cost`: reasoning runs, a large
tier counting :data:`~orchrm.execution.tasks.base.LARGE_TIER_WEIGHT`), known before anything runs.
``λ = 0`` is the plain reward-model pick; a larger ``λ`` trades quality for tokens.
:class:`orchrm.ops.serving.TestTimeScalableOrchestrator` takes the chosen ``λ`` as
``cost_weight``.

>>> choice = choose_cost_weight(model, validation_pool, budget_tokens=3000, n=8)   # doctest: +SKIP
>>> orch = TestTimeScalableOrchestrator(model, num_candidates=8, cost_weight=choice.weight)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from orchrm.errors import ConfigError

#: the weights :func:`cost_weight_curve` tries by default: 0 (the reward model alone), then a
#: log-spaced range from barely felt to cost dominating (a normalised reward spans a few units;
#: a plan costs 1 to ~100 runs)
DEFAULT_WEIGHTS: tuple[float, ...] = (0.0, *np.round(np.geomspace(1e-3, 1.0, 16), 6).tolist())


def normalised_rewards(model: Any, rewards: np.ndarray) -> np.ndarray:
    """``rewards`` as ``(r - reward_mean) / reward_std`` of ``model``'s training rewards (0 and 1
    for a model that records none)."""
    mean = float(getattr(model, "reward_mean", 0.0) or 0.0)
    std = float(getattr(model, "reward_std", 1.0) or 1.0)
    return (np.asarray(rewards, dtype=float) - mean) / std


def cost_aware_scores(rewards: np.ndarray, costs: np.ndarray, weight: float) -> np.ndarray:
    """``rewards - weight * costs``: what the cost-aware pick maximises (``rewards`` normalised)."""
    if not np.isfinite(weight) or weight < 0:
        raise ConfigError(f"cost_weight must be a finite number >= 0, got {weight!r}")
    return np.asarray(rewards, dtype=float) - weight * np.asarray(costs, dtype=float)


def plan_costs(plan_texts: Sequence[str]) -> np.ndarray:
    """:func:`~orchrm.execution.tasks.base.plan_cost` of each plan text."""
    from orchrm.execution.tasks.base import plan_cost
    from orchrm.plans import Plan

    cache: dict[str, float] = {}
    out = np.empty(len(plan_texts), dtype=float)
    for i, text in enumerate(plan_texts):
        if text not in cache:
            cache[text] = plan_cost(Plan.parse(text))
        out[i] = cache[text]
    return out


def cost_weight_curve(frame: pd.DataFrame, n: int, weights: Sequence[float] = DEFAULT_WEIGHTS) -> pd.DataFrame:
    """Quality and execution tokens of the cost-aware pick among the first ``n`` candidates of every
    (pool_seed, task), for every weight.

    ``frame``: pool rows (:data:`orchrm.evaluation.pool.POOL_COLUMNS`) plus ``reward`` (normalised,
    :func:`normalised_rewards`) and ``plan_cost`` (:func:`plan_costs`). Returns one row per weight:
    ``weight``, ``quality`` (realised, mean over picks), ``expected`` (expected quality of the pick),
    ``tokens`` (execution tokens of the pick), ``plan_cost`` and ``picks``; per domain with
    :func:`cost_weight_picks`."""
    picks = cost_weight_picks(frame, n, weights)
    return (picks.groupby("weight", sort=True)
            .agg(quality=("quality", "mean"), expected=("expected", "mean"), tokens=("tokens", "mean"),
                 plan_cost=("plan_cost", "mean"), picks=("task_id", "size"))
            .reset_index())


def cost_weight_picks(frame: pd.DataFrame, n: int, weights: Sequence[float] = DEFAULT_WEIGHTS) -> pd.DataFrame:
    """The cost-aware pick of every (pool_seed, task) for every weight: one row each, with
    ``weight``, ``pool_seed``, ``task_id``, ``domain``, ``quality``, ``expected``, ``tokens`` and
    ``plan_cost`` of the picked candidate (ties: the earliest candidate)."""
    missing = [c for c in ("reward", "plan_cost") if c not in frame.columns]
    if missing:
        raise ConfigError(f"the pool frame has no {', '.join(missing)} column: add the normalised rewards and plan costs first")
    if not weights:
        raise ConfigError("no cost weights to try")
    keys = ["pool_seed", "task_id"]
    sub = frame[frame["candidate"] < n].sort_values([*keys, "candidate"], kind="stable").reset_index(drop=True)
    if sub.empty:
        raise ConfigError("the pool has no candidates to pick from")
    rewards, costs = sub["reward"].to_numpy(float), sub["plan_cost"].to_numpy(float)
    group = sub.groupby(keys, sort=False).ngroup().to_numpy()
    parts = []
    for w in weights:
        score = cost_aware_scores(rewards, costs, float(w))
        # the first row of the highest score in each group: stable sort by (group, -score)
        order = np.lexsort((-score, group))
        first = order[np.r_[True, group[order][1:] != group[order][:-1]]]
        chosen = sub.iloc[first]
        parts.append(pd.DataFrame({
            "weight": float(w), "pool_seed": chosen["pool_seed"].to_numpy(), "task_id": chosen["task_id"].to_numpy(),
            "domain": chosen["domain"].to_numpy(), "quality": chosen["quality"].to_numpy(float),
            "expected": chosen["expected_quality"].to_numpy(float), "tokens": chosen["tokens"].to_numpy(float),
            "plan_cost": chosen["plan_cost"].to_numpy(float),
        }))
    return pd.concat(parts, ignore_index=True)


@dataclass(frozen=True)
class CostWeightChoice:
    """The weight :func:`choose_cost_weight` chose, what it gave on the validation tasks, and the
    whole curve it chose from (:func:`cost_weight_curve`)."""

    weight: float
    quality: float
    tokens: float
    budget_tokens: float
    curve: pd.DataFrame
    #: False when no weight kept the mean execution tokens within the budget (then the cheapest is chosen)
    within_budget: bool = True


def choose_cost_weight(
    model: Any,
    pool: Any,
    *,
    budget_tokens: float,
    n: int = 8,
    weights: Sequence[float] = DEFAULT_WEIGHTS,
    quality: str = "expected",
) -> CostWeightChoice:
    """The weight ``λ`` whose cost-aware best-of-``n`` pick has the highest ``quality`` (``expected``
    quality of the pick, or realised ``quality``) on the validation ``pool`` (a
    :class:`~orchrm.evaluation.pool.CandidatePool` of tasks the model never trained on, e.g. one
    built with another seed) while its mean execution tokens per task stay within
    ``budget_tokens``; ties go to the smaller weight. When no weight fits, the cheapest one
    (``within_budget`` False, and a log line)."""
    import logging

    from orchrm.evaluation.metrics import score_texts
    from orchrm.model.texts import plan_prompt

    if not np.isfinite(budget_tokens) or budget_tokens <= 0:
        raise ConfigError(f"budget_tokens must be a number > 0, got {budget_tokens!r}")
    if quality not in ("expected", "quality"):
        raise ConfigError(f"quality {quality!r}: use 'expected' or 'quality'")
    frame = pool.frame
    rewards = score_texts(model, [plan_prompt(q) for q in frame["question"]], frame["plan_text"])
    frame = frame.assign(reward=normalised_rewards(model, rewards), plan_cost=plan_costs(list(frame["plan_text"])))
    curve = cost_weight_curve(frame, n, weights)
    fits = curve[curve["tokens"] <= budget_tokens]
    if fits.empty:
        row = curve.sort_values(["tokens", "weight"]).iloc[0]
        logging.getLogger(__name__).warning(
            "no cost weight keeps best-of-%d within %.0f execution tokens per task; the cheapest, weight %g, spends %.0f",
            n, budget_tokens, row["weight"], row["tokens"])
        within = False
    else:
        best = fits[quality].max()
        row = fits[fits[quality] >= best - 1e-12].sort_values("weight").iloc[0]
        within = True
    return CostWeightChoice(weight=float(row["weight"]), quality=float(row[quality]), tokens=float(row["tokens"]),
                            budget_tokens=float(budget_tokens), curve=curve, within_budget=within)
