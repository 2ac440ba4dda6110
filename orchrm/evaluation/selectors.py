"""Best-of-N selectors over a candidate pool: which candidate each selector picks, and at what cost.

:func:`best_of_n_picks` applies every selector in :data:`SELECTORS` to the first N candidates of
each task; :func:`best_of_n_table` and :func:`gap_closed_table` aggregate the picks with intervals.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pandas as pd

from orchrm.evaluation.metrics import quantile_interval, score_fn
from orchrm.evaluation.pool import CandidatePool

#: every best-of-N selector, in the order tables list them
SELECTORS: tuple[str, ...] = (
    "reward_model",
    "random",
    "majority_vote",
    "weighted_vote",
    "trajectory",
    "length_only",
    "cost_only",
    "oracle",
    "expected_oracle",
)

# ---------------------------------------------------------------------------------------------
# best-of-N selectors


def _first_max(frame: pd.DataFrame, column: str, keys: list[str]) -> pd.DataFrame:
    """Per group of ``keys``, the row with the largest ``column`` (ties: the earliest candidate;
    ``frame`` is sorted by candidate within each group)."""
    return frame.loc[frame.groupby(keys, sort=True)[column].idxmax()].set_index(keys)


def _vote(frame: pd.DataFrame, weight: str | None, keys: list[str]) -> pd.DataFrame:
    """Per group of ``keys``, the answer with the most votes (``weight`` None) or the largest sum
    of ``weight``; answers beat no answer, ties go to the answer its earliest candidate gave. Its
    ``quality``/``expected_quality`` are the means over the executions that gave it."""
    df = frame.assign(_key=frame["answer_key"].fillna("\x00none"), _has=frame["answer_key"].notna(),
                      _w=1.0 if weight is None else frame[weight])
    votes = df.groupby([*keys, "_key"], sort=False).agg(
        _has=("_has", "first"), _w=("_w", "sum"), _first=("candidate", "min"),
        quality=("quality", "mean"), expected_quality=("expected_quality", "mean"),
    ).reset_index()
    votes = votes.sort_values([*keys, "_has", "_w", "_first"], ascending=[True] * len(keys) + [False, False, True], kind="stable")
    return votes.drop_duplicates(keys).set_index(keys)


def best_of_n_picks(frame: pd.DataFrame, n: int) -> pd.DataFrame:
    """Every selector's pick among the first ``n`` candidates of each (pool_seed, task).

    ``frame``: pool rows (:data:`POOL_COLUMNS`) plus ``reward`` and, for the token count,
    ``score_tokens``/``score_prompt_tokens`` (0 when absent). Returns one row per (pool_seed,
    task_id, selector): ``domain``, ``quality`` (realised quality of the pick), ``expected``
    (expected quality of the pick), ``tokens_execution``, ``tokens_scoring``, ``tokens_judging``.

    Selectors: ``reward_model`` (highest reward; only it is executed), ``random`` (a uniform pick:
    the mean over the n), ``majority_vote`` (all n executed, the most common answer),
    ``weighted_vote`` (all n executed, the answer with the largest sum of softmax(reward) weights:
    rewards made positive, so one more agreeing plan never lowers an answer's weight),
    ``trajectory`` (all n executed, the answer whose final agent reported the highest confidence),
    ``length_only`` (the longest plan text), ``cost_only`` (the plan with the highest *expected*
    cost, the mean tier-weighted tokens over its re-runs: a rule fixed before running), ``oracle``
    (the best realised quality: pass@n, all n executed) and ``expected_oracle`` (the highest
    ``oracle_estimate``, scored by the pick's expected quality: an idealised selector that knows
    each plan's quality from re-runs independent of those that score it; its re-runs are not
    counted as tokens). Ties go to the
    earliest candidate.
    """
    keys = ["pool_seed", "task_id"]
    sub = frame[frame["candidate"] < n].sort_values([*keys, "candidate"], kind="stable")
    sub = sub.assign(
        score_tokens=sub.get("score_tokens", 0),
        score_prompt_tokens=sub.get("score_prompt_tokens", 0),
    )
    shifted = sub["reward"] - sub.groupby(keys)["reward"].transform("max")
    sub = sub.assign(_softmax=np.exp(shifted) / np.exp(shifted).groupby([sub[k] for k in keys]).transform("sum"))
    g = sub.groupby(keys, sort=True)
    base = g.agg(domain=("domain", "first"), mean_q=("quality", "mean"), mean_eq=("expected_quality", "mean"),
                 mean_tok=("tokens", "mean"), sum_tok=("tokens", "sum"),
                 scoring=("score_tokens", "sum"), scoring_prompt=("score_prompt_tokens", "first"))
    rm_tokens = (base["scoring"] + base["scoring_prompt"]).astype(float)
    zeros = pd.Series(0.0, index=base.index)

    def pick(column: str) -> pd.DataFrame:
        return _first_max(sub, column, keys)

    out: dict[str, tuple[pd.Series, pd.Series, pd.Series, pd.Series]] = {}
    p = pick("reward")
    out["reward_model"] = (p["quality"], p["expected_quality"], p["tokens"], rm_tokens)
    out["random"] = (base["mean_q"], base["mean_eq"], base["mean_tok"], zeros)
    v = _vote(sub, None, keys)
    out["majority_vote"] = (v["quality"], v["expected_quality"], base["sum_tok"], zeros)
    v = _vote(sub, "_softmax", keys)
    out["weighted_vote"] = (v["quality"], v["expected_quality"], base["sum_tok"], rm_tokens)
    p = pick("confidence")
    out["trajectory"] = (p["quality"], p["expected_quality"], base["sum_tok"], zeros)
    p = pick("plan_chars")
    out["length_only"] = (p["quality"], p["expected_quality"], p["tokens"], zeros)
    p = pick("expected_cost")
    out["cost_only"] = (p["quality"], p["expected_quality"], p["tokens"], zeros)
    p = pick("quality")
    out["oracle"] = (p["quality"], p["expected_quality"], base["sum_tok"], zeros)
    p = pick("oracle_estimate" if "oracle_estimate" in sub.columns else "expected_quality")
    out["expected_oracle"] = (p["quality"], p["expected_quality"], p["tokens"], zeros)
    parts = []
    for name in SELECTORS:
        quality, expected, execution, scoring = out[name]
        parts.append(pd.DataFrame({
            "domain": base["domain"], "selector": name, "quality": quality.reindex(base.index).astype(float),
            "expected": expected.reindex(base.index).astype(float),
            "tokens_execution": execution.reindex(base.index).astype(float),
            "tokens_scoring": scoring.reindex(base.index).astype(float), "tokens_judging": 0.0,
        }, index=base.index))
    return pd.concat(parts).reset_index()



def best_of_n_table(picks: pd.DataFrame, *, bootstrap: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Aggregate :func:`best_of_n_picks` rows (with an ``N`` column) per (N, selector, domain)
    and over all domains (``domain == "all"``): ``tasks``, mean ``quality`` with its 95% interval
    over tasks (``ci_low``/``ci_high``), ``seed_std`` (standard deviation over pool seeds of the
    mean over tasks), ``expected`` with its interval, and mean tokens per task."""
    values = ["quality", "expected", "tokens_execution", "tokens_scoring", "tokens_judging"]
    per_task = picks.groupby(["N", "selector", "domain", "task_id"], sort=True)[values].mean().reset_index()
    per_seed = picks.groupby(["N", "selector", "domain", "pool_seed"], sort=True)["quality"].mean().reset_index()
    rows = []
    for domain in ["all", *sorted(per_task["domain"].unique())]:
        tasks = per_task if domain == "all" else per_task[per_task["domain"] == domain]
        seeds = per_seed if domain == "all" else per_seed[per_seed["domain"] == domain]
        if domain == "all":  # the mean over all tasks per pool seed
            seeds = picks.groupby(["N", "selector", "pool_seed"])["quality"].mean().reset_index()
        wide_q = tasks.pivot_table(index="task_id", columns=["N", "selector"], values="quality")
        wide_e = tasks.pivot_table(index="task_id", columns=["N", "selector"], values="expected")
        lo_q, hi_q = quantile_interval(wide_q.to_numpy(), n=bootstrap, seed=seed)
        lo_e, hi_e = quantile_interval(wide_e.to_numpy(), n=bootstrap, seed=seed)
        means = tasks.groupby(["N", "selector"])[values].mean()
        spread = seeds.groupby(["N", "selector"])["quality"].agg(lambda s: float(s.std(ddof=1)) if len(s) > 1 else 0.0)
        for j, (n, selector) in enumerate(wide_q.columns):
            m = means.loc[(n, selector)]
            rows.append({
                "N": int(n), "selector": selector, "domain": domain, "tasks": int(wide_q.shape[0]),
                "quality": float(m["quality"]), "ci_low": float(lo_q[j]), "ci_high": float(hi_q[j]),
                "seed_std": float(spread.loc[(n, selector)]), "expected": float(m["expected"]),
                "expected_ci_low": float(lo_e[j]), "expected_ci_high": float(hi_e[j]),
                "tokens_execution": float(m["tokens_execution"]), "tokens_scoring": float(m["tokens_scoring"]),
                "tokens_judging": float(m["tokens_judging"]),
                "tokens_total": float(m["tokens_execution"] + m["tokens_scoring"] + m["tokens_judging"]),
            })
    table = pd.DataFrame(rows)
    order = {s: i for i, s in enumerate(SELECTORS)}
    return table.sort_values(["domain", "N", "selector"], key=lambda c: c.map(order) if c.name == "selector" else c,
                             kind="stable").reset_index(drop=True)


def gap_closed_table(picks: pd.DataFrame, *, bootstrap: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Per N and domain (and ``"all"``): the fraction of the random -> expected-oracle gap that
    the reward model closes, in expected quality, ``sum(EQ_rm - EQ_random) / sum(EQ_oracle -
    EQ_random)`` over tasks (a ratio of sums: tasks where every candidate is equally good add
    nothing to either side), with a 95% bootstrap interval over tasks. NaN where no gap exists."""
    wanted = picks[picks["selector"].isin(["reward_model", "random", "expected_oracle"])]
    per_task = wanted.pivot_table(index=["N", "domain", "task_id"], columns="selector", values="expected").reset_index()
    rows = []
    rng_seed = seed
    for n, by_n in per_task.groupby("N", sort=True):
        for domain in ["all", *sorted(by_n["domain"].unique())]:
            t = by_n if domain == "all" else by_n[by_n["domain"] == domain]
            num = (t["reward_model"] - t["random"]).to_numpy()
            den = (t["expected_oracle"] - t["random"]).to_numpy()
            gap = float(num.sum() / den.sum()) if den.sum() > 1e-12 else math.nan
            lo = hi = math.nan
            if bootstrap > 0 and len(t) and den.sum() > 1e-12:
                draws = np.random.default_rng(rng_seed).integers(0, len(t), size=(bootstrap, len(t)))
                d = den[draws].sum(1)
                ratios = np.where(d > 1e-12, num[draws].sum(1) / np.where(d > 1e-12, d, 1.0), np.nan)
                lo, hi = (float(x) for x in np.nanquantile(ratios, [0.025, 0.975]))
            rows.append({"N": int(n), "domain": domain, "tasks": len(t), "random": float(t["random"].mean()),
                         "reward_model": float(t["reward_model"].mean()),
                         "expected_oracle": float(t["expected_oracle"].mean()),
                         "gap_closed": gap, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows)


def scoring_latency(model: Any, pool: CandidatePool, n: int, *, calls: int = 20) -> dict[str, float]:
    """Milliseconds to score ``n`` candidates of one question (``model.score(question, plans)``),
    timed on up to ``calls`` pool tasks after one untimed warm-up call: ``p50_ms``, ``p90_ms``."""
    score = score_fn(model)
    first = pool.frame[(pool.frame["pool_seed"] == pool.frame["pool_seed"].min()) & (pool.frame["candidate"] < n)]
    groups = [g for _, g in first.groupby("task_id", sort=True)][:calls]
    if not groups:
        return {"calls": 0.0, "p50_ms": math.nan, "p90_ms": math.nan}
    score([groups[0]["question"].iloc[0]] * len(groups[0]), groups[0]["plan_text"].tolist())
    times = []
    for g in groups:
        t0 = time.perf_counter()
        score([g["question"].iloc[0]] * len(g), g["plan_text"].tolist())
        times.append((time.perf_counter() - t0) * 1000.0)
    return {"calls": float(len(times)), "p50_ms": float(np.percentile(times, 50)), "p90_ms": float(np.percentile(times, 90))}


