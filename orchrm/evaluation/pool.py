"""Candidate pools: per held-out task, N candidate plans with their executions (DESIGN §7).

:func:`build_pool` draws fresh sandbox tasks (a seed never used for collection), writes candidate
plans with the base sampler, executes each once per pool seed and re-runs it for its expected
quality. :func:`build_replay_pool` replays a user's own held-out tasks from an ingested artifact
table instead: each task's logged plans are its candidates, their logged runs the executions. A
:class:`CandidatePool` is the frame every selector reads, whichever way it was built.

The sandbox pool also builds in chunks, for a task runner to spread (issue 23): :func:`plan_pool`
cuts the held-out tasks into chunks, :func:`pool_chunk` runs one in the calling process and
returns its rows as data, :func:`combine_pool` makes the pool :func:`build_pool` returns.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from orchrm.config import PairsConfig, PipelineConfig
from orchrm.errors import CollectionError, ConfigError, DataQualityError
from orchrm.util.fileio import atomic_write_bytes

if TYPE_CHECKING:
    from orchrm.execution.collect import ChunkRows, TaskChunk

log = logging.getLogger(__name__)

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
    "confidence",  # the final agent's own confidence in its answer, in [0, 1]; NaN where not logged
    "tokens",  # execution tokens (prompt + completion) of this execution
    "cost",  # tier-weighted tokens of this execution
    "expected_quality",  # mean quality over the re-runs (DESIGN §4)
    "expected_cost",  # mean cost over the re-runs (the cost-only selector)
    # mean quality over a second, independent set of re-runs (ORACLE_REPEATS times as many): what
    # the expected-quality oracle selects by, so its pick is scored (by expected_quality) on
    # re-runs it never saw. Selecting and scoring on the same re-runs overstates the oracle (the
    # winner's curse: among 8 noisy means the largest is lucky). Equal to expected_quality where
    # there is no second set.
    "oracle_estimate",
)
#: the expected oracle's own re-runs, as a multiple of ``evaluate.repeats``: it chooses on
#: ``ORACLE_REPEATS * repeats`` re-runs (a choice made on few noisy means is itself noisy) and is
#: scored, like every selector, on the pool's ``repeats``
ORACLE_REPEATS = 3
#: the float columns of :data:`POOL_COLUMNS` (float64 even where a value is missing)
_FLOAT_COLUMNS = ("quality", "confidence", "cost", "expected_quality", "expected_cost", "oracle_estimate")


# ---------------------------------------------------------------------------------------------
# the candidate pool


def answer_key(domain: str, answer: str | None) -> str | None:
    """The normalised form of a final answer: two executions agree when their keys are equal.
    Math: the last number in canonical form; code: the program with whitespace collapsed; other
    domains: SQuAD normalisation (lowercase, no punctuation or articles)."""
    if answer is None:
        return None
    if domain == "math":
        from orchrm.execution.tasks.math import normalize_number

        key = normalize_number(answer)
        return key if key is not None else " ".join(answer.lower().split())
    if domain == "code":
        return " ".join(answer.split())
    from orchrm.data.quality import normalize_answer

    return normalize_answer(answer)


def expected_quality(executor: Any, task: Any, plan: Any, *, repeats: int = 20, seed: int | None = None) -> float:
    """Mean final quality of ``plan`` on ``task`` over ``repeats`` independent executions by
    ``executor`` (a :class:`orchrm.execution.executor.MultiAgentExecutor`): the sandbox's estimate of the
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
    from orchrm.util.digests import stable_id

    return int(stable_id(*parts, n=12), 16)


def candidate_order(seed: int, pool_seed: int, task_id: str, n: int) -> list[int]:
    """The order in which pool seed ``pool_seed`` lists a task's ``n`` candidates: a seeded
    permutation, so each pool seed's nested prefixes (best-of-2 within best-of-4 ...) are
    different draws of the same candidates."""
    order = list(range(n))
    random.Random(_seed_of("order", seed, pool_seed, task_id)).shuffle(order)
    return order


def _pool_rows(
    tasks: Sequence[Any], *, candidates: int, seed: int, pool_seeds: Sequence[int], repeats: int, noise: Any, backend: Any = None
) -> list[dict]:
    """Pool rows of ``tasks`` (runs in a worker process; deterministic for its arguments on the
    sandbox)."""
    from orchrm.execution.collect import plans_for_task, worker_executor

    ex = worker_executor(noise, backend)
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
                second = [ex.run_plan(task, plan, seed=_seed_of("oracle-repeats", seed), repeat=r + 1)
                          for r in range(ORACLE_REPEATS * repeats)]
                stats.append((float(np.mean([r.quality or 0.0 for r in reruns])), float(np.mean([r.cost for r in reruns])),
                              float(np.mean([r.quality or 0.0 for r in second]))))
            else:  # no re-runs: the pool's own executions are the only estimate
                mean_quality = float(np.mean([x[0] for x in per_seed]))
                stats.append((mean_quality, float(np.mean([x[4] for x in per_seed])), mean_quality))
        for j, s in enumerate(pool_seeds):
            for position, i in enumerate(candidate_order(seed, s, task.task_id, len(plans))):
                quality, answer, confidence, tokens, cost = runs[i][j]
                text = plans[i].render()
                rows.append({
                    "pool_seed": int(s), "task_id": task.task_id, "domain": task.domain, "question": task.question,
                    "candidate": position, "plan_id": plans[i].plan_id, "plan_text": text, "plan_chars": len(text),
                    "answer": answer, "answer_key": answer_key(task.domain, answer), "quality": float(quality),
                    "confidence": float(confidence), "tokens": int(tokens), "cost": float(cost),
                    "expected_quality": stats[i][0], "expected_cost": stats[i][1], "oracle_estimate": stats[i][2],
                })
    return rows


def held_out_tasks(config: PipelineConfig) -> list[Any]:
    """``config.evaluate.tasks_per_domain`` tasks per collected domain from ``config.evaluate.seed``
    that the collection (``config.collect``) does not also draw: a finite data set's come from its
    held-out share (:func:`orchrm.execution.tasks.base.is_held_out`), which collection never
    draws from, and a generator's from another seed, with any task the collection also draws left
    out. A domain whose data set runs out gives fewer tasks, with a warning."""
    return [t for domain in config.collect.domains for t in held_out_domain_tasks(config, domain)]


def held_out_domain_tasks(config: PipelineConfig, domain: str, *, warn: bool = True) -> list[Any]:
    """The tasks of :func:`held_out_tasks` of one ``domain``."""
    from orchrm.execution.tasks.base import load_tasks, sources

    c, e = config.collect, config.evaluate
    source = c.source(domain)
    seen = {t.task_id for t in load_tasks(domain, c.tasks_per_domain, seed=c.seed, source=source, part="collect")}
    # a finite source's held-out part holds no collected task; a generator's draw may repeat some
    extra = 0 if sources()[(domain, source)].finite else len(seen)
    drawn = load_tasks(domain, e.tasks_per_domain + extra, seed=e.seed, source=source, part="held_out")
    kept = [t for t in drawn if t.task_id not in seen][: e.tasks_per_domain]
    if warn and len(kept) < e.tasks_per_domain:
        log.warning("%s: only %d held-out tasks that the collection does not use (asked for %d)", domain, len(kept), e.tasks_per_domain)
    return kept


@dataclass
class CandidatePool:
    """The held-out candidate pool: :attr:`frame` has one row per (pool_seed, task, candidate)
    with the columns of :data:`POOL_COLUMNS`; :attr:`meta` records how it was built."""

    frame: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if "oracle_estimate" not in self.frame.columns and "expected_quality" in self.frame.columns:
            # a pool saved before the oracle had its own re-runs: it selects on those that score it
            log.warning("candidate pool has no oracle_estimate column (built by an older OrchRM): the expected "
                        "oracle selects on the re-runs that score it and is overstated; rebuild the pool")
            self.frame = self.frame.assign(oracle_estimate=self.frame["expected_quality"])
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

    def digest(self) -> str:
        """The pool's one digest (:func:`orchrm.util.digests.table_digest` of :data:`POOL_COLUMNS`,
        rows in the pool's own order): the MLflow data set's (context ``evaluation``), so two
        evaluations on the same candidates and executions name the same pool."""
        from orchrm.util.digests import table_digest

        return table_digest(self.frame, POOL_COLUMNS)

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
    With a real model (``config.backend``) every execution and re-run is the model's, at its
    token cost, in this process or on threads (:func:`orchrm.execution.collect.map_chunks`); the
    pool's meta names the backend and model.
    """
    from orchrm.execution.collect import map_chunks, uses_llm
    from orchrm.util.progress import progress_bar

    explicit = tasks
    tasks = _checked_tasks(held_out_tasks(config) if tasks is None else tasks)
    kwargs = _rows_kwargs(config)
    workers = workers or config.collect.workers or os.cpu_count() or 1
    chunk = max(1, min(8, len(tasks) // (workers * 4) or 1))
    chunks = [tasks[i : i + chunk] for i in range(0, len(tasks), chunk)]
    bar = progress_bar(total=len(tasks), desc="evaluation pool", unit="task", enabled=progress)
    results: list[list[dict]] = []
    try:
        if uses_llm(config.backend):  # a real model: in this process, or threads for an endpoint
            results = map_chunks(_pool_rows, chunks, {**kwargs, "backend": config.backend}, workers=workers,
                                 backend=config.backend, what="evaluation-pool", done=lambda i: bar.update(len(chunks[i])))
        elif workers == 1 or len(chunks) == 1:
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
    return _sandbox_pool([r for rows in results for r in rows], _sandbox_meta(config, tasks, explicit=explicit is not None))


def _checked_tasks(tasks: Sequence[Any]) -> list[Any]:
    """``tasks`` as a list; an error when there are none, or when one has no reference."""
    tasks = list(tasks)
    if not tasks:
        raise ConfigError("no held-out tasks to build a pool from: raise evaluate.tasks_per_domain")
    missing_reference = [t.task_id for t in tasks if t.reference is None]
    if missing_reference:
        raise DataQualityError(
            f"task(s) {missing_reference[:5]} have no reference: a candidate's quality cannot be measured; evaluate on "
            "tasks with a reference"
        )
    return tasks


def _rows_kwargs(config: PipelineConfig) -> dict[str, Any]:
    """The settings :func:`_pool_rows` reads from ``config`` (but the backend)."""
    e = config.evaluate
    return dict(candidates=e.candidates, seed=e.seed, pool_seeds=tuple(e.pool_seeds), repeats=e.repeats, noise=config.sandbox)


def _sandbox_meta(config: PipelineConfig, tasks: Sequence[Any], *, explicit: bool) -> dict[str, Any]:
    """The :attr:`CandidatePool.meta` of a sandbox pool of ``tasks`` (``explicit``: given by the
    caller rather than :func:`held_out_tasks`)."""
    from orchrm.execution.collect import uses_llm

    e = config.evaluate
    # the domains the pool must cover: the collected ones (the gate pool_domains fails on one without a task)
    domains = sorted({t.domain for t in tasks} if explicit else set(config.collect.domains))
    meta = {"kind": "sandbox", "seed": e.seed, "candidates": e.candidates, "pool_seeds": list(e.pool_seeds),
            "repeats": e.repeats, "tasks": len(tasks), "sampler": "base", "domains": domains}
    if uses_llm(config.backend):
        meta["backend"] = {"kind": config.backend.kind, "model": config.backend.model}
    return meta


def _sandbox_pool(rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> CandidatePool:
    """The pool of ``rows`` (:func:`_pool_rows`' dicts) and ``meta``; a warning naming the tasks
    short of candidates."""
    frame = pd.DataFrame(list(rows), columns=list(POOL_COLUMNS))
    frame = frame.astype({c: "float64" for c in _FLOAT_COLUMNS})
    short = frame.groupby("task_id").size().lt(meta["candidates"] * len(meta["pool_seeds"]))
    if short.any():
        log.warning("%d task(s) have fewer than %d distinct candidate plans", int(short.sum()), meta["candidates"])
    return CandidatePool(frame, dict(meta))


# ---------------------------------------------------------------------------------------------
# the sandbox pool in chunks (a task runner spreads them; issue 23)


@dataclass(frozen=True)
class PoolPlan:
    """The sandbox pool of a config cut into chunks of its held-out tasks (every one once, in
    :func:`held_out_tasks`' order) and the :attr:`CandidatePool.meta` the pool will carry."""

    chunks: tuple[TaskChunk, ...]
    meta: Mapping[str, Any]


def plan_pool(config: PipelineConfig) -> PoolPlan:
    """The chunks of :func:`build_pool` ``(config)``: its held-out tasks cut by
    :func:`orchrm.execution.collect.chunk_tasks` into chunks of at most ``collect.chunk_tasks``.
    The chunks' rows (:func:`pool_chunk`), combined by :func:`combine_pool`, are the pool
    :func:`build_pool` returns (the same rows in the same order), whatever the chunk size."""
    from orchrm.execution.collect import chunk_tasks

    tasks = _checked_tasks(held_out_tasks(config))
    return PoolPlan(chunks=tuple(chunk_tasks(tasks, config.collect.chunk_tasks)), meta=_sandbox_meta(config, tasks, explicit=False))


def pool_chunk(chunk: TaskChunk, config: PipelineConfig) -> ChunkRows:
    """Build one chunk of :func:`plan_pool` ``(config)`` in this process (no worker processes) and
    return its pool rows as data. Its tasks are drawn again from ``config``, by id."""
    from orchrm.execution.collect import ChunkRows, tasks_of, uses_llm

    tasks = tasks_of(chunk, held_out_domain_tasks(config, chunk.domain, warn=False))
    started, t0 = datetime.now(UTC), time.perf_counter()
    backend = {"backend": config.backend} if uses_llm(config.backend) else {}
    rows = _pool_rows(tasks, **_rows_kwargs(config), **backend)
    return ChunkRows.of(chunk.index, rows, POOL_COLUMNS, started=started, seconds=time.perf_counter() - t0)


def combine_pool(plan: PoolPlan, chunks: Sequence[ChunkRows]) -> CandidatePool:
    """The candidate pool of ``plan`` from the rows of its ``chunks`` (one per chunk, in any order)."""
    from orchrm.execution.collect import in_plan_order

    ordered = in_plan_order(plan.chunks, chunks, what="evaluation pool")
    return _sandbox_pool([row for c in ordered for row in c.records()], plan.meta)




# ---------------------------------------------------------------------------------------------
# the replay pool: a user's own held-out tasks, from their logged traces


def held_out_task_ids(task_ids: pd.Series, pairs: PairsConfig) -> set[str]:
    """The task ids in split ``test``, by the same :func:`orchrm.data.splits.assign_split` (and
    ``pairs``' fractions) that splits the pair table: no task a model trained or validated on."""
    from orchrm.data.splits import assign_split

    ids = pd.Series(pd.unique(task_ids.astype(str)), dtype=object)
    split = assign_split(ids, pairs.val_fraction, pairs.test_fraction)
    return set(ids[split == "test"])


def replay_executions(artifacts: pd.DataFrame) -> pd.DataFrame:
    """One row per logged execution (task, run, plan) of an artifact table (DESIGN §3):
    ``task_id``, ``domain``, ``question``, ``plan_id``, ``plan_text``, ``run_id``, ``quality``
    (its final artifact's; the mean when several rows are final), ``answer`` (the last final
    row's), ``confidence`` (the final rows' ``confidence`` column where the table has one, else
    NaN), ``tokens`` (prompt + completion over all its rows) and ``cost`` (their sum). An
    execution whose final quality is unknown (NaN) is left out."""
    keys = ["task_id", "run_id", "plan_id"]
    df = artifacts.assign(_tokens=artifacts["prompt_tokens"].astype("int64") + artifacts["completion_tokens"].astype("int64"))
    spent = df.groupby(keys, sort=True).agg(tokens=("_tokens", "sum"), cost=("cost", "sum"))
    final = df[df["is_final"].astype(bool)]
    confidence = final["confidence"] if "confidence" in final.columns else pd.Series(np.nan, index=final.index)
    final = final.assign(confidence=pd.to_numeric(confidence, errors="coerce").astype(float),
                         quality=pd.to_numeric(final["quality"], errors="coerce").astype(float))
    runs = final.groupby(keys, sort=True).agg(
        domain=("domain", "last"), question=("question", "last"), plan_text=("plan_text", "last"),
        quality=("quality", "mean"), answer=("answer", "last"), confidence=("confidence", "mean"),
    )
    runs = runs.join(spent, how="left").reset_index()
    return runs[runs["quality"].notna()].reset_index(drop=True)


@dataclass(frozen=True)
class _ReplayPlan:
    """One distinct plan of a held-out task: its logged runs (rows of :func:`replay_executions`,
    in run-id order), their mean quality and cost."""

    plan_id: str
    plan_text: str
    runs: pd.DataFrame
    expected_quality: float
    expected_cost: float


def _replay_plans(runs: pd.DataFrame) -> list[_ReplayPlan]:
    """The distinct plan texts of one task's executions (a plan is what the reward model reads:
    two plan ids with one text are one candidate), in text order."""
    plans = []
    for text, group in runs.groupby("plan_text", sort=True):
        group = group.sort_values("run_id", kind="stable")
        plans.append(_ReplayPlan(str(group["plan_id"].iloc[0]), str(text), group,
                                 float(group["quality"].mean()), float(group["cost"].mean())))
    return plans


def _replay_rows(task_id: str, plans: Sequence[_ReplayPlan], *, seed: int, pool_seeds: Sequence[int], candidates: int) -> list[dict]:
    """Pool rows of one task: per pool seed, its plans in :func:`candidate_order`, the first
    ``candidates`` kept, each with one of its runs drawn (seeded by pool seed, task and plan)."""
    rows = []
    for s in pool_seeds:
        kept = candidate_order(seed, s, task_id, len(plans))[:candidates]
        for position, i in enumerate(kept):
            plan = plans[i]
            run = plan.runs.iloc[random.Random(_seed_of("replay", seed, s, task_id, plan.plan_text)).randrange(len(plan.runs))]
            answer = None if run["answer"] is None or (isinstance(run["answer"], float) and math.isnan(run["answer"])) else str(run["answer"])
            rows.append({
                "pool_seed": int(s), "task_id": task_id, "domain": str(run["domain"]), "question": str(run["question"]),
                "candidate": position, "plan_id": plan.plan_id, "plan_text": plan.plan_text, "plan_chars": len(plan.plan_text),
                "answer": answer, "answer_key": answer_key(str(run["domain"]), answer), "quality": float(run["quality"]),
                "confidence": float(run["confidence"]), "tokens": int(run["tokens"]), "cost": float(run["cost"]),
                "expected_quality": plan.expected_quality, "expected_cost": plan.expected_cost,
                # logged runs only: no independent second estimate
                "oracle_estimate": plan.expected_quality,
            })
    return rows


def build_replay_pool(artifacts: pd.DataFrame, config: PipelineConfig, *, source: str = "artifacts") -> CandidatePool:
    """The replay pool of an artifact table (ingested traces, DESIGN §7): every held-out task
    (split ``test`` by :func:`held_out_task_ids` with ``config.pairs``' fractions, so no task the
    model trained on) with at least two distinct plans becomes one pool task.

    Each of its plans is a candidate: expected quality and cost = the means over the plan's
    logged runs (:func:`replay_executions`), realised quality, answer, confidence, tokens and
    cost = one run's, drawn per pool seed (``config.evaluate.pool_seeds``, seeded with
    ``evaluate.seed``: deterministic for a table and a config). A task with more plans than
    ``evaluate.candidates`` keeps that many, a different seeded subset per pool seed. Tasks
    with a single plan are left out (``meta["single_plan_tasks"]`` counts them); with none left
    the pool is empty (the pairwise gates alone then decide). ``meta``: ``kind="replay"``,
    ``source``, ``tasks``, ``candidates`` (the most every task has), ``max_plans``.
    """
    e = config.evaluate
    missing = [c for c in ("task_id", "run_id", "plan_id", "plan_text", "question", "domain", "is_final", "quality",
                           "prompt_tokens", "completion_tokens", "cost", "answer") if c not in artifacts.columns]
    if missing:
        raise DataQualityError(f"the artifact table lacks column(s) {missing}: ingest the traces with orchrm ingest first")
    held_out = held_out_task_ids(artifacts["task_id"], config.pairs)
    runs = replay_executions(artifacts[artifacts["task_id"].astype(str).isin(held_out)])
    rows: list[dict] = []
    single = 0
    counts: list[int] = []
    for task_id, task_runs in runs.groupby("task_id", sort=True):
        plans = _replay_plans(task_runs)
        if len(plans) < 2:
            single += 1
            continue
        counts.append(len(plans))
        rows += _replay_rows(str(task_id), plans, seed=e.seed, pool_seeds=e.pool_seeds, candidates=e.candidates)
    frame = pd.DataFrame(rows, columns=list(POOL_COLUMNS))
    meta = {"kind": "replay", "source": str(source), "seed": e.seed, "pool_seeds": list(e.pool_seeds), "repeats": 0,
            "tasks": len(counts), "held_out_tasks": len(held_out), "single_plan_tasks": single,
            "candidates": min(min(counts), e.candidates) if counts else 0, "max_plans": max(counts) if counts else 0}
    if single:
        log.warning("replay pool: %d held-out task(s) have a single plan and are left out", single)
    if not counts:
        log.warning("replay pool: none of the %d held-out task(s) has two distinct plans: no best-of-N", len(held_out))
    return CandidatePool(frame, meta)
