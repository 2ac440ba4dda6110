"""Pure metrics of a reward model on held-out pairs: bootstrap intervals, calibration, pairwise accuracy.

Nothing here runs a plan or reads a file; every figure is a function of scores and tables.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from orchrm.errors import DataQualityError

# ---------------------------------------------------------------------------------------------
# small statistics


def bootstrap_ci(
    values: np.ndarray, groups: np.ndarray | None = None, *, n: int = 1000, seed: int = 0, weights: np.ndarray | None = None
) -> tuple[float, float]:
    """95% interval of the (weighted) mean of ``values``, resampling whole ``groups`` (tasks:
    pairs or pool seeds of one task are correlated). ``(nan, nan)`` when ``n`` is 0 or there is
    no value; a single group gives a zero-width interval.

    The statistic is a ratio of sums, ``sum(w * v) / sum(w)`` over the drawn groups, so a task
    with many pairs weighs as much as its pairs.

    >>> bootstrap_ci(np.array([1.0, 1.0]), np.array(["a", "b"]), n=20)
    (1.0, 1.0)
    """
    values = np.asarray(values, dtype=float)
    if n <= 0 or values.size == 0:
        return (math.nan, math.nan)
    w = np.ones_like(values) if weights is None else np.asarray(weights, dtype=float)
    codes, uniq = pd.factorize(pd.Series(groups if groups is not None else np.arange(values.size)))
    sums = np.bincount(codes, weights=values * w, minlength=len(uniq))
    counts = np.bincount(codes, weights=w, minlength=len(uniq))
    draws = np.random.default_rng(seed).integers(0, len(uniq), size=(n, len(uniq)))
    means = sums[draws].sum(1) / counts[draws].sum(1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def bootstrap_means(per_task: np.ndarray, *, n: int, seed: int) -> np.ndarray:
    """``n`` bootstrap means over the rows (tasks) of ``per_task`` (T, K): an (n, K) array, the
    same task draws for every column (so differences between columns are paired)."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, per_task.shape[0], size=(n, per_task.shape[0]))
    return per_task[draws].mean(axis=1)


@dataclass(frozen=True)
class PairedDifference:
    """Candidate minus champion on the same tasks: the ``mean`` difference, its 95% bootstrap
    interval over tasks (``ci_low``, ``ci_high``; the mean itself when ``resamples`` is 0), and
    the number of ``tasks``."""

    mean: float
    ci_low: float
    ci_high: float
    tasks: int
    resamples: int

    def metrics(self, key: str) -> dict[str, float]:
        """Flat metrics: ``key`` (the mean), ``key.ci_low``, ``key.ci_high``, ``key.tasks``,
        ``key.resamples``."""
        return {key: self.mean, f"{key}.ci_low": self.ci_low, f"{key}.ci_high": self.ci_high,
                f"{key}.tasks": float(self.tasks), f"{key}.resamples": float(self.resamples)}


def paired_difference(diff: np.ndarray, tasks: np.ndarray, *, bootstrap: int, seed: int) -> PairedDifference:
    """The mean of ``diff`` (candidate minus champion per row: a pair, or a task of one pool
    seed) with its 95% interval from resampling whole ``tasks`` (:func:`bootstrap_ci`): both models
    are read on the same draws, so the interval is of the paired difference, far narrower than
    two separate intervals when the models agree on most tasks. With ``bootstrap`` 0 the
    interval is the mean itself (no resampling).

    >>> d = paired_difference(np.array([0.1, 0.1, 0.1]), np.array(["a", "b", "c"]), bootstrap=50, seed=0)
    >>> round(d.mean, 3), round(d.ci_low, 3), d.tasks
    (0.1, 0.1, 3)
    """
    diff = np.asarray(diff, dtype=float)
    mean = float(diff.mean()) if diff.size else math.nan
    lo, hi = bootstrap_ci(diff, tasks, n=bootstrap, seed=seed) if bootstrap > 0 else (mean, mean)
    return PairedDifference(mean, lo, hi, int(pd.Series(tasks).nunique()), int(bootstrap))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


def calibration(r_chosen: np.ndarray, r_rejected: np.ndarray, *, bins: int = 10) -> tuple[float, pd.DataFrame]:
    """Expected calibration error of ``P(chosen wins) = sigmoid(r_c - r_r)`` and its reliability
    table (``bin``, ``lower``, ``upper``, ``count``, ``mean_predicted``, ``observed``).

    Every pair is counted in both orientations (chosen first: predicted p, outcome 1; rejected
    first: 1 - p, outcome 0), since a pair's order is an artefact of the table and a one-sided
    table would give every bin the outcome 1. ECE = sum over bins of share * |observed - predicted|.

    >>> ece, _ = calibration(np.array([0.0, 0.0]), np.array([0.0, 0.0]), bins=2)  # p = 0.5: calibrated
    >>> round(ece, 6)
    0.0
    """
    p = sigmoid(np.asarray(r_chosen, dtype=float) - np.asarray(r_rejected, dtype=float))
    pred = np.concatenate([p, 1.0 - p])
    outcome = np.concatenate([np.ones_like(p), np.zeros_like(p)])
    edges = np.linspace(0.0, 1.0, bins + 1)
    idx = np.clip(np.digitize(pred, edges[1:-1], right=False), 0, bins - 1)
    count = np.bincount(idx, minlength=bins)
    sum_pred = np.bincount(idx, weights=pred, minlength=bins)
    sum_out = np.bincount(idx, weights=outcome, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_pred = np.where(count > 0, sum_pred / np.maximum(count, 1), np.nan)
        observed = np.where(count > 0, sum_out / np.maximum(count, 1), np.nan)
    table = pd.DataFrame(
        {"bin": np.arange(bins), "lower": edges[:-1], "upper": edges[1:], "count": count,
         "mean_predicted": mean_pred, "observed": observed}
    )
    total = count.sum()
    ece = float(np.nansum(count * np.abs(observed - mean_pred)) / total) if total else math.nan
    return ece, table


# ---------------------------------------------------------------------------------------------
# pairwise accuracy


def score_fn(model: Any) -> Callable[[list[str], list[str]], np.ndarray]:
    """``model.score`` (a BradleyTerryModel or any scorer) or a plain callable, returning numpy."""
    fn = model.score if hasattr(model, "score") else model

    def score(prompts: list[str], actions: list[str]) -> np.ndarray:
        out = fn(prompts, actions)
        return np.asarray(out.numpy() if hasattr(out, "numpy") else out, dtype=float).reshape(-1)

    return score


def score_texts(model: Any, prompts: Sequence[str], actions: Sequence[str]) -> np.ndarray:
    """Rewards of (prompt, action) texts, each distinct text scored once (a pair table repeats
    its texts many times). ``model``: anything with ``score(prompts, actions)``, or that callable."""
    frame = pd.DataFrame({"prompt": list(prompts), "action": list(actions)})
    if frame.empty:
        return np.zeros(0)
    codes, uniq = pd.factorize(pd.MultiIndex.from_frame(frame))
    rewards = score_fn(model)([u[0] for u in uniq], [u[1] for u in uniq])
    return rewards[codes]


def score_pairs(model: Any, pairs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``(r_chosen, r_rejected)`` for every row of a pair table; each distinct text scored once."""
    n = len(pairs)
    r = score_texts(model, [*pairs["prompt"], *pairs["prompt"]], [*pairs["chosen"], *pairs["rejected"]])
    return r[:n], r[n:]


def accuracy_table(
    pairs: pd.DataFrame,
    correct: np.ndarray,
    *,
    by: Sequence[str] = ("granularity", "domain"),
    bootstrap: int = 1000,
    seed: int = 0,
    loss: np.ndarray | None = None,
) -> pd.DataFrame:
    """Per group of ``by``: ``pairs``, ``tasks``, ``accuracy`` (mean of ``correct``, 1 / 0.5 / 0
    per pair), its 95% bootstrap interval over tasks (``ci_low``, ``ci_high``) and, when ``loss``
    (per pair) is given, ``bt_loss``. Rows with ``granularity``/``domain`` ``"all"`` pool the
    groups."""
    correct = np.asarray(correct, dtype=float)
    frame = pairs.reset_index(drop=True).assign(_correct=correct)
    if loss is not None:
        frame = frame.assign(_loss=np.asarray(loss, dtype=float))
    keys = list(by)
    levels: list[tuple[str, ...]] = [tuple(keys)] + [tuple(k for k in keys if k != drop) for drop in keys[::-1]] + [()]
    rows = []
    for level in dict.fromkeys(levels):
        groups = frame.groupby(list(level), sort=True) if level else [((), frame)]
        for key, g in groups:
            key = key if isinstance(key, tuple) else (key,)
            row = {k: "all" for k in keys} | dict(zip(level, key, strict=True))
            lo, hi = bootstrap_ci(g["_correct"].to_numpy(), g["task_id"].to_numpy(), n=bootstrap, seed=seed)
            row |= {"pairs": len(g), "tasks": int(g["task_id"].nunique()), "accuracy": float(g["_correct"].mean()),
                    "ci_low": lo, "ci_high": hi}
            if loss is not None:
                row["bt_loss"] = float(g["_loss"].mean())
            rows.append(row)
    columns = [*keys, "pairs", "tasks", "accuracy", "ci_low", "ci_high", *(["bt_loss"] if loss is not None else [])]
    return pd.DataFrame(rows, columns=columns)


def pairwise_metrics(model: Any, pairs: pd.DataFrame, *, bootstrap: int = 1000, seed: int = 0, bins: int = 10) -> dict[str, Any]:
    """Pairwise accuracy and BT loss per granularity and domain, calibration and reward stats of
    ``model`` on ``pairs`` (held-out: split == "test"). Returns ``{"table", "calibration",
    "metrics", "correct"}`` (``correct``: 1.0 / 0.0 per pair, in the rows' order); a pair counts as right when ``r_chosen > r_rejected`` (a tie is wrong). The BT
    loss is ``-log sigmoid(r_c - r_r)`` without the margin: the log-loss of the BT probability."""
    if pairs.empty:
        raise DataQualityError(
            "no held-out pairs to evaluate: the pair table has no split == 'test' rows; collect more tasks or raise "
            "pairs.test_fraction"
        )
    r_c, r_r = score_pairs(model, pairs)
    diff = r_c - r_r
    loss = np.logaddexp(0.0, -diff)  # -log sigmoid(diff), stable
    correct = (diff > 0).astype(float)
    table = accuracy_table(pairs, correct, bootstrap=bootstrap, seed=seed, loss=loss)
    ece, reliability = calibration(r_c, r_r, bins=bins)
    overall = table[(table["granularity"] == "all") & (table["domain"] == "all")].iloc[0]
    rewards = np.concatenate([r_c, r_r])
    metrics = {
        "pairwise_accuracy": float(overall["accuracy"]),
        "pairwise_accuracy_ci_low": float(overall["ci_low"]),
        "pairwise_accuracy_ci_high": float(overall["ci_high"]),
        "bt_loss": float(loss.mean()),
        "ece": ece,
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()),
        "pairs": float(len(pairs)),
    }
    for row in table.itertuples():
        if row.granularity != "all" or row.domain != "all":
            metrics[f"pairwise_accuracy.{row.granularity}.{row.domain}"] = float(row.accuracy)
            metrics[f"bt_loss.{row.granularity}.{row.domain}"] = float(row.bt_loss)
    return {"table": table, "calibration": reliability, "metrics": metrics, "correct": correct}


def quantile_interval(per_task: np.ndarray, *, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """2.5% and 97.5% bootstrap quantiles over tasks, per column of ``per_task`` (T, K)."""
    if n <= 0 or per_task.shape[0] == 0:
        nan = np.full(per_task.shape[1], np.nan)
        return nan, nan
    means = bootstrap_means(per_task, n=n, seed=seed)
    return np.quantile(means, 0.025, axis=0), np.quantile(means, 0.975, axis=0)


def fmt_number(x: float | None, digits: int = 3) -> str:
    """``x`` with ``digits`` decimals, or ``"nan"`` when it is missing or not finite."""
    return "nan" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"
