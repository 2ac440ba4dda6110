"""Every metric of a reward model, on held-out tasks only (DESIGN §7), and the promotion gates.

The demo, the benchmarks, the pipeline and the gates all import this module; no metric is
computed anywhere else. Three steps:

1. :func:`build_pool`: fresh tasks (a seed never used for collection), candidate plans from the
   base sampler, each executed once per pool seed and re-run for its expected quality.
2. :func:`evaluate`: a model (and optionally the champion) on held-out pairs and on that pool:
   pairwise accuracy, calibration, best-of-N with every selector, tokens, the gap closed, latency.
3. :func:`check_gates`: the promotion verdict, from the flat metrics alone.

>>> pool = build_pool(config)                                        # doctest: +SKIP
>>> report = evaluate(model, pairs=test_pairs, pool=pool, config=config.evaluate)  # doctest: +SKIP
>>> check_gates(report.metrics, config.evaluate.gates).passed        # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchrm.config import EvaluateConfig, GatesConfig, PipelineConfig
from orchrm.errors import CollectionError, ConfigError, DataQualityError
from orchrm.fileio import atomic_write_bytes

log = logging.getLogger(__name__)

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

#: the columns of :attr:`CandidatePool.frame`, one row per (pool_seed, task, candidate)
POOL_COLUMNS: tuple[str, ...] = (
    "pool_seed",  # int: which execution of the pool (candidate order and execution seed)
    "task_id",
    "domain",
    "question",  # the reward model's prompt
    "candidate",  # int: position in this pool seed's order; best-of-N reads candidates < N
    "plan_id",
    "plan_text",  # the reward model's action
    "plan_chars",  # int: length of plan_text (the length-only selector)
    "answer",  # final answer of this execution (None when the plan gave none)
    "answer_key",  # normalised answer: executions with equal keys agree (majority vote)
    "quality",  # realised quality in [0, 1] of this execution
    "confidence",  # the final agent's own confidence in its answer, in [0, 1]
    "tokens",  # execution tokens (prompt + completion) of this execution
    "cost",  # tier-weighted tokens of this execution
    "expected_quality",  # mean quality over the re-runs (DESIGN §4)
    "expected_cost",  # mean cost over the re-runs (the cost-only selector)
)


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


def _score_fn(model: Any) -> Callable[[list[str], list[str]], np.ndarray]:
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
    rewards = _score_fn(model)([u[0] for u in uniq], [u[1] for u in uniq])
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
    "metrics"}``; a pair counts as right when ``r_chosen > r_rejected`` (a tie is wrong). The BT
    loss is ``-log sigmoid(r_c - r_r)`` without the margin: the log-loss of the BT probability."""
    if pairs.empty:
        raise DataQualityError(
            "no held-out pairs to evaluate: the pair table has no split == 'test' rows; collect more tasks or raise "
            "pairs.test_fraction"
        )
    r_c, r_r = score_pairs(model, pairs)
    diff = r_c - r_r
    loss = np.logaddexp(0.0, -diff)  # -log sigmoid(diff), stable
    table = accuracy_table(pairs, (diff > 0).astype(float), bootstrap=bootstrap, seed=seed, loss=loss)
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
    return {"table": table, "calibration": reliability, "metrics": metrics}


# ---------------------------------------------------------------------------------------------
# the candidate pool


def answer_key(domain: str, answer: str | None) -> str | None:
    """The normalised form of a final answer: two executions agree when their keys are equal.
    Math: the last number in canonical form; code: the program with whitespace collapsed; other
    domains: SQuAD normalisation (lowercase, no punctuation or articles)."""
    if answer is None:
        return None
    if domain == "math":
        from orchrm.tasks.math import normalize_number

        key = normalize_number(answer)
        return key if key is not None else " ".join(answer.lower().split())
    if domain == "code":
        return " ".join(answer.split())
    from orchrm.quality import normalize_answer

    return normalize_answer(answer)


def expected_quality(executor: Any, task: Any, plan: Any, *, repeats: int = 20, seed: int | None = None) -> float:
    """Mean final quality of ``plan`` on ``task`` over ``repeats`` independent executions by
    ``executor`` (a :class:`orchrm.executor.MultiAgentExecutor`): the sandbox's estimate of the
    plan's expected quality for this question (DESIGN §4). Re-runs are ``repeat=1..repeats``."""
    task = executor.as_task(task)
    if task.reference is None:
        raise ValueError(f"task {task.task_id!r} has no reference: its expected quality is unknowable")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    total = 0.0
    for r in range(repeats):
        q = executor.run_plan(task, plan, seed=seed, repeat=r + 1).quality
        total += 0.0 if q is None else q
    return total / repeats


def _seed_of(*parts: object) -> int:
    from orchrm.tasks.base import stable_id

    return int(stable_id(*parts, n=12), 16)


def candidate_order(seed: int, pool_seed: int, task_id: str, n: int) -> list[int]:
    """The order in which pool seed ``pool_seed`` lists a task's ``n`` candidates: a seeded
    permutation, so each pool seed's nested prefixes (best-of-2 within best-of-4 ...) are
    different draws of the same candidates."""
    order = list(range(n))
    random.Random(_seed_of("order", seed, pool_seed, task_id)).shuffle(order)
    return order


def _pool_rows(tasks: Sequence[Any], *, candidates: int, seed: int, pool_seeds: Sequence[int], repeats: int, noise: Any) -> list[dict]:
    """Pool rows of ``tasks`` (runs in a worker process; deterministic for its arguments)."""
    from orchrm.collect import plans_for_task, worker_executor

    ex = worker_executor(noise)
    rows: list[dict] = []
    for task in tasks:
        plans = [plan for _, plan in plans_for_task(task, candidates, seed, {"base": 1.0})]
        runs = {}  # plan index -> per pool seed (quality, answer, confidence, tokens, cost)
        stats = []
        for i, plan in enumerate(plans):
            per_seed = []
            for s in pool_seeds:
                run = ex.run_plan(task, plan, seed=_seed_of("pool", seed, s))
                final = run.final
                per_seed.append((run.quality or 0.0, run.answer, final.confidence if final else 0.0, run.tokens, run.cost))
            runs[i] = per_seed
            if repeats:
                reruns = [ex.run_plan(task, plan, seed=_seed_of("repeats", seed), repeat=r + 1) for r in range(repeats)]
                stats.append((float(np.mean([r.quality or 0.0 for r in reruns])), float(np.mean([r.cost for r in reruns]))))
            else:  # no re-runs: the pool's own executions are the only estimate
                stats.append((float(np.mean([x[0] for x in per_seed])), float(np.mean([x[4] for x in per_seed]))))
        for j, s in enumerate(pool_seeds):
            for position, i in enumerate(candidate_order(seed, s, task.task_id, len(plans))):
                quality, answer, confidence, tokens, cost = runs[i][j]
                text = plans[i].render()
                rows.append({
                    "pool_seed": int(s), "task_id": task.task_id, "domain": task.domain, "question": task.question,
                    "candidate": position, "plan_id": plans[i].plan_id, "plan_text": text, "plan_chars": len(text),
                    "answer": answer, "answer_key": answer_key(task.domain, answer), "quality": float(quality),
                    "confidence": float(confidence), "tokens": int(tokens), "cost": float(cost),
                    "expected_quality": stats[i][0], "expected_cost": stats[i][1],
                })
    return rows


def held_out_tasks(config: PipelineConfig) -> list[Any]:
    """``config.evaluate.tasks_per_domain`` tasks per collected domain from ``config.evaluate.seed``
    that the collection (``config.collect``) does not also draw: a real data set sampled with two
    seeds can repeat items, and evaluation never sees a training task. A domain whose data set
    runs out gives fewer tasks, with a warning."""
    from orchrm.tasks.base import load_tasks

    c, e = config.collect, config.evaluate
    tasks: list[Any] = []
    for domain in c.domains:
        source = c.source(domain)
        seen = {t.task_id for t in load_tasks(domain, c.tasks_per_domain, seed=c.seed, source=source)}
        drawn = load_tasks(domain, e.tasks_per_domain + len(seen), seed=e.seed, source=source)
        kept = [t for t in drawn if t.task_id not in seen][: e.tasks_per_domain]
        if len(kept) < e.tasks_per_domain:
            log.warning("%s: only %d held-out tasks that the collection does not use (asked for %d)", domain, len(kept), e.tasks_per_domain)
        tasks.extend(kept)
    return tasks


@dataclass
class CandidatePool:
    """The held-out candidate pool: :attr:`frame` has one row per (pool_seed, task, candidate)
    with the columns of :data:`POOL_COLUMNS`; :attr:`meta` records how it was built."""

    frame: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [c for c in POOL_COLUMNS if c not in self.frame.columns]
        if missing:
            raise DataQualityError(f"candidate pool lacks column(s) {missing}; build it with orchrm.evaluation.build_pool")
        self.frame = self.frame.sort_values(["pool_seed", "domain", "task_id", "candidate"], kind="stable").reset_index(drop=True)

    @property
    def candidates(self) -> int:
        """Candidates per task (the smallest count of any task)."""
        if self.frame.empty:
            return 0
        return int(self.frame.groupby(["pool_seed", "task_id"]).size().min())

    @property
    def tasks(self) -> int:
        return int(self.frame["task_id"].nunique())

    def save(self, path: str | os.PathLike) -> Path:
        """Write the pool to a Parquet file atomically (``meta`` in the file's key-value metadata)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(self.frame, preserve_index=False)
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"orchrm.pool": json.dumps(self.meta).encode()})
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return atomic_write_bytes(path, lambda tmp: pq.write_table(table, tmp))

    @classmethod
    def load(cls, path: str | os.PathLike) -> CandidatePool:
        import pyarrow.parquet as pq

        source = Path(path)
        if not source.is_file():
            raise FileNotFoundError(f"candidate pool {source} not found; build one with orchrm.evaluation.build_pool")
        table = pq.read_table(source)
        raw = (table.schema.metadata or {}).get(b"orchrm.pool")
        return cls(table.to_pandas(), json.loads(raw) if raw else {})


def build_pool(
    config: PipelineConfig, *, tasks: Sequence[Any] | None = None, progress: bool = True, workers: int | None = None
) -> CandidatePool:
    """The held-out candidate pool of ``config.evaluate``: tasks from :func:`held_out_tasks` (or
    ``tasks``), ``candidates`` base-sampler plans each, every candidate executed once per pool
    seed and re-run ``repeats`` times for its expected quality and cost.

    Deterministic for a config: plans and executions are seeded from ``(evaluate.seed, task_id,
    plan_id, pool seed or re-run)``, never from the worker or the order the work finishes in.
    ``workers`` (default ``collect.workers``, else one per core) processes share the tasks.
    """
    from orchrm.progress import progress_bar

    e = config.evaluate
    tasks = list(held_out_tasks(config) if tasks is None else tasks)
    if not tasks:
        raise ConfigError("no held-out tasks to build a pool from: raise evaluate.tasks_per_domain")
    missing_reference = [t.task_id for t in tasks if t.reference is None]
    if missing_reference:
        raise DataQualityError(
            f"task(s) {missing_reference[:5]} have no reference: a candidate's quality cannot be measured; evaluate on "
            "tasks with a reference"
        )
    kwargs = dict(candidates=e.candidates, seed=e.seed, pool_seeds=tuple(e.pool_seeds), repeats=e.repeats, noise=config.sandbox)
    workers = workers or config.collect.workers or os.cpu_count() or 1
    chunk = max(1, min(8, len(tasks) // (workers * 4) or 1))
    chunks = [tasks[i : i + chunk] for i in range(0, len(tasks), chunk)]
    bar = progress_bar(total=len(tasks), desc="evaluation pool", unit="task", enabled=progress)
    results: list[list[dict]] = []
    try:
        if workers == 1 or len(chunks) == 1:
            for c in chunks:
                results.append(_pool_rows(c, **kwargs))
                bar.update(len(c))
        else:
            try:
                with ProcessPoolExecutor(max_workers=min(workers, len(chunks)), mp_context=get_context("spawn")) as pool:
                    futures = [pool.submit(_pool_rows, c, **kwargs) for c in chunks]
                    for fut, c in zip(futures, chunks, strict=True):
                        results.append(fut.result())
                        bar.update(len(c))
            except BrokenProcessPool:
                raise CollectionError(
                    f"a worker process building the evaluation pool died ({workers} workers). Called from a script? "
                    "Worker processes start fresh and import the script again: put the call under "
                    '`if __name__ == "__main__":`. Otherwise it may have run out of memory: pass workers=1'
                ) from None
    finally:
        bar.close()
    frame = pd.DataFrame([r for rows in results for r in rows], columns=list(POOL_COLUMNS))
    meta = {"seed": e.seed, "candidates": e.candidates, "pool_seeds": list(e.pool_seeds), "repeats": e.repeats,
            "tasks": len(tasks), "sampler": "base"}
    short = frame.groupby("task_id").size().lt(e.candidates * len(e.pool_seeds))
    if short.any():
        log.warning("%d task(s) have fewer than %d distinct candidate plans", int(short.sum()), e.candidates)
    return CandidatePool(frame, meta)


# ---------------------------------------------------------------------------------------------
# best-of-N selectors


def _scoring_tokens(model: Any, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Reward-model input tokens per row (the action, plus the prompt when each candidate is
    encoded with it) and per row the prompt tokens paid once per task (a shared-prompt model
    encodes a question once for all its candidates)."""
    tokenize = getattr(model, "tokenize", None)
    if tokenize is None:
        from orchrm.tokens import count_tokens

        count = lambda texts: np.array([count_tokens(t) for t in texts])  # noqa: E731
    else:
        count = lambda texts: np.array([len(ids) for ids in tokenize(list(texts))])  # noqa: E731
    questions, q_codes = np.unique(frame["question"].to_numpy(dtype=object), return_inverse=True)
    plans, p_codes = np.unique(frame["plan_text"].to_numpy(dtype=object), return_inverse=True)
    prompt = count(questions)[q_codes]
    action = count(plans)[p_codes]
    if bool(getattr(model, "shared_prompt", False)):
        return action, prompt
    return action + prompt, np.zeros_like(prompt)


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
    expected quality; an idealised selector, its re-runs not counted as tokens). Ties go to the
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
    p = pick("expected_quality")
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


def _interval(per_task: np.ndarray, *, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """2.5% and 97.5% bootstrap quantiles over tasks, per column of ``per_task`` (T, K)."""
    if n <= 0 or per_task.shape[0] == 0:
        nan = np.full(per_task.shape[1], np.nan)
        return nan, nan
    means = bootstrap_means(per_task, n=n, seed=seed)
    return np.quantile(means, 0.025, axis=0), np.quantile(means, 0.975, axis=0)


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
        lo_q, hi_q = _interval(wide_q.to_numpy(), n=bootstrap, seed=seed)
        lo_e, hi_e = _interval(wide_e.to_numpy(), n=bootstrap, seed=seed)
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
    score = _score_fn(model)
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


# ---------------------------------------------------------------------------------------------
# the verdict


@dataclass(frozen=True)
class GateResult:
    """One gate's outcome: ``value`` measured against ``threshold`` (None where the gate compares
    with no number, e.g. a first candidate with no champion to beat)."""

    name: str
    passed: bool
    value: float | None
    threshold: float | None
    detail: str

    def __str__(self) -> str:
        mark = "pass" if self.passed else "FAIL"
        return f"{mark}  {self.name}: {self.detail}"


@dataclass(frozen=True)
class Verdict:
    """Every gate of one candidate. ``passed`` only when every gate passed."""

    gates: tuple[GateResult, ...]

    @property
    def passed(self) -> bool:
        return bool(self.gates) and all(g.passed for g in self.gates)

    @property
    def label(self) -> str:
        return "promoted" if self.passed else "rejected"

    def failed(self) -> tuple[GateResult, ...]:
        return tuple(g for g in self.gates if not g.passed)

    def tags(self) -> dict[str, str]:
        """MLflow version tags: ``gate.<name>`` -> ``"pass: <detail>"`` / ``"fail: <detail>"``, and
        ``verdict``."""
        out = {f"gate.{g.name}": f"{'pass' if g.passed else 'fail'}: {g.detail}" for g in self.gates}
        out["verdict"] = self.label
        return out

    def to_dict(self) -> dict:
        return {
            "verdict": self.label,
            "gates": [
                {"name": g.name, "passed": g.passed, "value": g.value, "threshold": g.threshold, "detail": g.detail}
                for g in self.gates
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> Verdict:
        return cls(tuple(GateResult(**{k: g[k] for k in ("name", "passed", "value", "threshold", "detail")}) for g in data["gates"]))

    def __str__(self) -> str:
        return "\n".join([f"verdict: {self.label}", *(f"  {g}" for g in self.gates)])


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
    score_tokens, prompt_tokens = _scoring_tokens(model, frame)
    frame = frame.assign(reward=score_texts(model, frame["question"], frame["plan_text"]),
                         score_tokens=score_tokens, score_prompt_tokens=prompt_tokens)
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

    ``model``: a :class:`orchrm.model.BradleyTerryModel` or any object with ``score(prompts,
    actions)`` (and optionally ``tokenize``, ``shared_prompt`` for the token count).
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


def _fmt(x: float, digits: int = 3) -> str:
    return "nan" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


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

    @property
    def gates_n(self) -> int:
        return self.config.gates.best_of if self.config else int(self.tables["latency"]["N"].iloc[0])

    def write(self, out_dir: str | os.PathLike) -> dict[str, Path]:
        """``metrics.json`` (metrics, champion metrics, pool), one CSV per table, and the plots
        ``quality_vs_n.png``, ``quality_vs_tokens.png``, ``reliability.png``, each written
        atomically; returns ``{name: path}``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths: dict[str, Path] = {}
        data = {"metrics": self.metrics, "champion_metrics": self.champion_metrics, "pool": self.pool_meta,
                "config": self.config.model_dump(mode="json") if self.config else None}
        paths["metrics"] = atomic_write_bytes(out / "metrics.json", lambda tmp: Path(tmp).write_text(json.dumps(data, indent=2) + "\n"))
        for name, table in self.tables.items():
            paths[name] = atomic_write_bytes(out / f"{name}.csv", lambda tmp, t=table: t.to_csv(tmp, index=False))
        paths |= plot_report(self, out)
        return paths

    def _best_of_n(self, domain: str = "all") -> pd.DataFrame:
        t = self.tables["best_of_n"]
        return t[t["domain"] == domain]

    def summary(self) -> str:
        """The tables a person reads in a terminal."""
        m = self.metrics
        lines = [f"pairwise accuracy {_fmt(m.get('pairwise_accuracy', math.nan))} "
                 f"[{_fmt(m.get('pairwise_accuracy_ci_low', math.nan), 2)}, {_fmt(m.get('pairwise_accuracy_ci_high', math.nan), 2)}]"
                 f"  BT loss {_fmt(m.get('bt_loss', math.nan))}  ECE {_fmt(m.get('ece', math.nan))}"
                 f"  reward mean {_fmt(m.get('reward_mean', math.nan))} std {_fmt(m.get('reward_std', math.nan))}"]
        pw = self.tables["pairwise"]
        lines.append(pw.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        t = self._best_of_n()
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
        lines += [f"  {r.domain:<10}{_fmt(r.gap_closed)} [{_fmt(r.ci_low, 2)}, {_fmt(r.ci_high, 2)}]  "
                  f"(random {r.random:.3f}, reward model {r.reward_model:.3f}, oracle {r.expected_oracle:.3f}; {r.tasks} tasks)"
                  for r in g.itertuples()]
        lines += ["", f"scoring latency p50: {_fmt(m.get('scoring_latency_ms_p50', math.nan), 1)} ms for {n} candidates"]
        if self.champion_metrics is not None:
            key = f"expected.best_of_{n}.reward_model"
            lines.append(f"champion on the same pool: best-of-{n} expected quality {_fmt(self.champion_metrics.get(key, math.nan))} "
                         f"(this model {_fmt(m.get(key, math.nan))})")
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """The report as Markdown: pairwise accuracy, best-of-N per domain, gap closed, latency."""
        m = self.metrics
        n = self.gates_n
        lines = ["## Pairwise accuracy (held-out pairs)", "",
                 "| granularity | domain | pairs | tasks | accuracy [95% CI] | BT loss |", "|---|---|---:|---:|---:|---:|"]
        for r in self.tables["pairwise"].itertuples():
            lines.append(f"| {r.granularity} | {r.domain} | {r.pairs} | {r.tasks} | {r.accuracy:.3f} "
                         f"[{_fmt(r.ci_low, 2)}, {_fmt(r.ci_high, 2)}] | {r.bt_loss:.3f} |")
        lines += ["", f"ECE {_fmt(m.get('ece', math.nan))}; reward mean {_fmt(m.get('reward_mean', math.nan))}, "
                  f"std {_fmt(m.get('reward_std', math.nan))}.", ""]
        t = self.tables["best_of_n"]
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
                cells = [f"{rows.loc[k, 'quality']:.3f} [{_fmt(rows.loc[k, 'ci_low'], 2)}, {_fmt(rows.loc[k, 'ci_high'], 2)}]" for k in ns]
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
                         f"{_fmt(r.gap_closed)} [{_fmt(r.ci_low, 2)}, {_fmt(r.ci_high, 2)}] |")
        lines += ["", f"Scoring latency p50: {_fmt(m.get('scoring_latency_ms_p50', math.nan), 1)} ms for {n} candidates.", ""]
        return "\n".join(lines)


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
    ax.set_title(f"Reliability (ECE {_fmt(report.metrics.get('ece', math.nan))})")
    ax.grid(alpha=0.3)
    save(fig, "reliability")
    return paths


# ---------------------------------------------------------------------------------------------
# gates


def _quality_key(metrics: Mapping[str, float], n: int, selector: str) -> str:
    """The best-of-N figure gates compare: expected quality of the pick when the pool measured it
    (less luck than one realised draw), else the realised quality."""
    key = f"expected.best_of_{n}.{selector}"
    return key if key in metrics else f"best_of_{n}.{selector}"


def _missing(name: str, key: str) -> GateResult:
    return GateResult(name, False, None, None, f"{key} missing from the metrics: evaluate the model again")


def check_gates(metrics: Mapping[str, float], gates: GatesConfig, *, champion: Mapping[str, float] | None = None) -> Verdict:
    """The promotion verdict from flat metrics alone (a stored run can be re-gated).

    Gates: ``pairwise_accuracy`` (>= ``min_pairwise_accuracy``), ``best_of_n_gain`` (reward-model
    best-of-``best_of`` minus the random pick, >= ``min_best_of_n_gain``), ``beats_cost_only``
    (reward model > cost-only selector; when enabled), ``scoring_latency`` (p50 <=
    ``max_scoring_latency_ms``) and ``beats_champion`` (reward model > champion's + margin on the
    same pool; passes with "no champion yet" when ``champion`` is None; when enabled). Best-of-N
    figures are expected quality where measured (see :func:`_quality_key`).
    """
    n = gates.best_of
    results: list[GateResult] = []

    key = "pairwise_accuracy"
    if key in metrics:
        v, t = float(metrics[key]), gates.min_pairwise_accuracy
        results.append(GateResult("pairwise_accuracy", v >= t, v, t, f"held-out pairwise accuracy {v:.3f} {'>=' if v >= t else '<'} {t:.3f}"))
    else:
        results.append(_missing("pairwise_accuracy", key))

    rm, rnd = _quality_key(metrics, n, "reward_model"), _quality_key(metrics, n, "random")
    if rm in metrics and rnd in metrics:
        gain, t = float(metrics[rm]) - float(metrics[rnd]), gates.min_best_of_n_gain
        results.append(GateResult("best_of_n_gain", gain >= t, gain, t,
                                  f"{rm} {metrics[rm]:.3f} - random {metrics[rnd]:.3f} = {gain:+.3f} {'>=' if gain >= t else '<'} {t:+.3f}"))
    else:
        results.append(_missing("best_of_n_gain", rm if rm not in metrics else rnd))

    if gates.beat_cost_only:
        cost = _quality_key(metrics, n, "cost_only")
        if rm in metrics and cost in metrics:
            v, t = float(metrics[rm]), float(metrics[cost])
            results.append(GateResult("beats_cost_only", v > t, v, t,
                                      f"{rm} {v:.3f} {'>' if v > t else '<='} cost-only {t:.3f}"))
        else:
            results.append(_missing("beats_cost_only", rm if rm not in metrics else cost))

    key = "scoring_latency_ms_p50"
    if key in metrics:
        v, t = float(metrics[key]), gates.max_scoring_latency_ms
        scored = int(metrics.get("scoring_latency_candidates", n))
        results.append(GateResult("scoring_latency", v <= t, v, t,
                                  f"p50 {v:.1f} ms to score {scored} candidates {'<=' if v <= t else '>'} {t:.1f} ms"))
    else:
        results.append(_missing("scoring_latency", key))

    if gates.beat_champion:
        if champion is None:
            results.append(GateResult("beats_champion", True, None, None, "no champion yet"))
        else:
            ckey = _quality_key(champion, n, "reward_model")
            if rm in metrics and ckey in champion:
                v, c = float(metrics[rm]), float(champion[ckey])
                t = c + gates.champion_margin
                ok = v > t
                margin = f" + margin {gates.champion_margin:.3f}" if gates.champion_margin else ""
                results.append(GateResult("beats_champion", ok, v, t,
                                          f"{rm} {v:.3f} {'>' if ok else '<='} champion {c:.3f}{margin} (same pool)"))
            else:
                results.append(_missing("beats_champion", rm if rm not in metrics else f"champion {ckey}"))
    return Verdict(tuple(results))
