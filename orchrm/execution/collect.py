"""Collection: sample candidate plans for many tasks, execute them, and build the artifact table.

Two modes. ``full`` runs ``plans_per_task`` candidate plans per task to their sink (what
correct-over-incorrect pairs need). ``branch`` runs plan *prefixes* only: per task a tree of
``branches`` alternatives at each shared prefix, down to ``branch_depth`` (:func:`branch_plans`),
so that many same-state intermediate comparisons (DESIGN §5) come out of few tokens (issue 17).

Parallel across tasks with worker processes, deterministic for a seed: every task's plans and
every execution are seeded from ``(seed, task_id, plan_id)``, so the table does not depend on
the number of workers or the order in which they finish.

The same collection also runs in chunks, for a task runner to spread (issue 23):
:func:`plan_collection` cuts a config's tasks into chunks (:class:`TaskChunk`), :func:`collect_chunk`
runs one in the calling process and returns its rows as data (:class:`ChunkRows`, JSON-ready:
the machine that runs a chunk shares no disk with the one that plans it), and
:func:`combine_collection` puts the chunks' rows together into the table
:func:`collect_from_config` returns.

>>> df = collect(domains=["math"], tasks_per_domain=5, plans_per_task=4, seed=0)  # doctest: +SKIP
>>> prefixes = collect(domains=["math"], tasks_per_domain=5, mode="branch", branches=16)  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pandas as pd

from orchrm.config import BackendConfig, CollectConfig
from orchrm.data.tables import ARTIFACT_COLUMNS, artifacts_frame, check_output_table, write_table
from orchrm.errors import CollectionError, ConfigError, TaskError
from orchrm.execution.executor import MultiAgentExecutor
from orchrm.execution.samplers import get_sampler
from orchrm.execution.sandbox.config import NoiseConfig
from orchrm.execution.tasks.base import Task, load_tasks, sources
from orchrm.model.texts import plan_part_text
from orchrm.plans import Plan
from orchrm.util.digests import stable_id
from orchrm.util.progress import progress_bar

log = logging.getLogger(__name__)


def allocate(n: int, shares: Mapping[str, float]) -> dict[str, int]:
    """Split ``n`` plans among samplers by ``shares`` (largest remainder, stable order)."""
    total = sum(shares.values())
    exact = {k: n * v / total for k, v in shares.items()}
    counts = {k: math.floor(x) for k, x in exact.items()}
    for k in sorted(exact, key=lambda k: (counts[k] - exact[k], k))[: n - sum(counts.values())]:
        counts[k] += 1
    return counts


def plans_for_task(task: Task, n: int, seed: int, shares: Mapping[str, float]) -> list[tuple[str, Plan]]:
    """``n`` distinct (sampler name, plan) pairs for ``task``; each sampler gets its share, and a
    plan one sampler already proposed is not repeated by the next."""
    out: dict[str, tuple[str, Plan]] = {}
    for name, count in allocate(n, shares).items():
        if count == 0:
            continue
        sampler = get_sampler(name)
        rng = random.Random(int(stable_id("plans", seed, task.task_id, name, n=16), 16))
        got = 0
        for plan in sampler.sample(task, count + len(out), rng):
            if got == count:
                break
            if plan.plan_id not in out:
                out[plan.plan_id] = (name, plan)
                got += 1
    return list(out.values())


#: collection modes of :func:`collect`
MODES: tuple[str, ...] = ("full", "branch")

#: branch mode: candidate plans each sampler proposes per task, the menu the alternatives of
#: every shared prefix are picked from
BRANCH_CANDIDATES = 64


@dataclass(frozen=True)
class Branch:
    """One execution: ``plan``, written by sampler ``orchestrator``, run to ``stop_after_depth``
    (inclusive; None: to the sink)."""

    orchestrator: str
    plan: Plan
    stop_after_depth: int | None


def prefix_text(plan: Plan, depth: int) -> str:
    """The nodes of ``plan`` at depth <= ``depth`` and the edges among them, rendered: the state
    every alternative branched below it shares ("" below depth 0)."""
    return plan_part_text(plan, {n.id for n in plan.prefix(depth)})


def branch_plans(task: Task, *, branches: int, depth: int, seed: int, shares: Mapping[str, float]) -> list[Branch]:
    """The executions of the branch mode for ``task``: a tree of plan prefixes.

    Each sampler proposes :data:`BRANCH_CANDIDATES` plans (in the order it ranks them). Level 0
    takes ``branches`` plans with distinct depth-0 steps, each sampler its share of them. Level
    ``d`` (1 .. ``depth``) takes, for every distinct level ``d - 1`` prefix that continues, up to
    ``branches`` plans sharing that prefix with distinct depth-``d`` steps: the level above's own
    plan first, then the other candidates (fewer when the candidates hold fewer). Every plan runs
    once, to the deepest level it was taken at; an alternative re-runs its shared prefix with
    its own seed, so its tokens count that prefix too.

    Worked example, ``branches=3, depth=1``: level 0 might take ``CoT``, ``WebSearch(2, 4)`` and
    ``SelfConsistency(k=5)`` (three one-step prefixes, compared with each other at depth 0); only
    the WebSearch plan continues, so level 1 takes it and two more candidates that start with the
    same ``WebSearch(2, 4)`` but call another reasoner next (compared at depth 1).
    """
    candidates: dict[str, tuple[str, Plan]] = {}  # plan_id -> (first sampler proposing it, plan)
    by_sampler: dict[str, list[Plan]] = {}
    for name in shares:
        rng = random.Random(int(stable_id("branch", seed, task.task_id, name, n=16), 16))
        by_sampler[name] = get_sampler(name).sample(task, BRANCH_CANDIDATES, rng)
        for plan in by_sampler[name]:
            candidates.setdefault(plan.plan_id, (name, plan))
    level: list[Plan] = []
    firsts: set[str] = set()
    for name, count in allocate(branches, shares).items():
        fresh = (p for p in by_sampler[name] if prefix_text(p, 0) not in firsts)
        for plan in itertools.islice(fresh, count):
            firsts.add(prefix_text(plan, 0))
            level.append(plan)
    stop = {p.plan_id: 0 for p in level}  # plan_id -> deepest level taken at (insertion order = run order)
    for d in range(1, depth + 1):
        above, level = level, []
        for state in dict.fromkeys(prefix_text(p, d - 1) for p in above if p.max_depth >= d):
            menu = [*above, *(p for _, p in candidates.values())]
            steps: set[str] = set()
            for plan in menu:
                if len(steps) == branches:
                    break
                if plan.max_depth < d or prefix_text(plan, d - 1) != state or prefix_text(plan, d) in steps:
                    continue
                steps.add(prefix_text(plan, d))
                level.append(plan)
                stop[plan.plan_id] = d
    return [Branch(candidates[plan_id][0], candidates[plan_id][1], depth_) for plan_id, depth_ in stop.items()]


# one executor per worker process (domain state, BM25 indexes, code sandboxes and a real model
# are reused); threads collecting from one HTTP endpoint share it
_WORKER: dict[str, MultiAgentExecutor] = {}
_WORKER_LOCK = threading.Lock()


def uses_llm(backend: BackendConfig | None) -> bool:
    """Whether ``backend`` runs the agents on a real model (anything but the sandbox)."""
    return backend is not None and backend.kind != "sandbox"


def backend_identity(backend: BackendConfig) -> str:
    """What of a real backend's settings changes the rows (the model and how it is asked), as JSON;
    never the API key, nor the transport settings (timeouts, retries, concurrency)."""
    return backend.model_dump_json(include={"kind", "model", "gguf_file", "base_url", "max_tokens", "temperature"})


def worker_executor(noise: NoiseConfig | None, backend: BackendConfig | None = None) -> MultiAgentExecutor:
    """This process's executor for ``noise`` and ``backend`` (made once, then reused by every
    task it runs: a transformers model loads once per process)."""
    key = "default" if noise is None else noise.model_dump_json()
    if uses_llm(backend):
        key += "|" + backend.model_dump_json()
    ex = _WORKER.get(key)
    if ex is None:
        with _WORKER_LOCK:
            ex = _WORKER.get(key)
            if ex is None:
                ex = _WORKER[key] = MultiAgentExecutor(noise=noise, backend=backend if uses_llm(backend) else "sandbox")
    return ex


def map_chunks(
    fn, chunks: Sequence, kwargs: Mapping, *, workers: int, backend: BackendConfig | None, what: str, done=None
) -> list[list[dict]]:
    """``fn(chunk, **kwargs)`` for every chunk, results in chunk order; ``done(i)`` after each.

    The sandbox spreads chunks over ``workers`` processes. A real model does not: a transformers
    model per process would load (and hold) one copy each, so its chunks run in this process; an
    OpenAI-compatible endpoint is I/O-bound, so its chunks run on threads (at most
    ``backend.concurrency`` requests are in flight whatever their number).
    """
    results: dict[int, list[dict]] = {}
    done = done or (lambda i: None)
    kind = backend.kind if uses_llm(backend) else "sandbox"
    if kind == "transformers" and workers > 1 and len(chunks) > 1:
        log.info("the %s on a local transformers model runs in this process (asked for %d workers)", what, workers)
    if workers == 1 or len(chunks) == 1 or kind == "transformers":
        for i, c in enumerate(chunks):
            results[i] = fn(c, **kwargs)
            done(i)
    elif kind == "openai":
        with ThreadPoolExecutor(max_workers=min(workers, len(chunks)), thread_name_prefix="orchrm-collect") as pool:
            futures = {pool.submit(fn, c, **kwargs): i for i, c in enumerate(chunks)}
            for fut in as_completed(futures):
                results[futures[fut]] = fut.result()
                done(futures[fut])
    else:
        try:
            with ProcessPoolExecutor(max_workers=min(workers, len(chunks)), mp_context=get_context("spawn")) as pool:
                futures = {pool.submit(fn, c, **kwargs): i for i, c in enumerate(chunks)}
                for fut in as_completed(futures):
                    results[futures[fut]] = fut.result()
                    done(futures[fut])
        except BrokenProcessPool:
            raise CollectionError(
                f"a {what} worker process died before it finished ({workers} workers). Called from a "
                "script? Worker processes start fresh and import the script again: put the call under "
                "`if __name__ == \"__main__\":`. Otherwise it may have run out of memory: use fewer workers "
                "(workers=1 runs in this process)"
            ) from None
    return [results[i] for i in range(len(chunks))]


def run_tasks(
    tasks: Sequence[Task],
    *,
    plans_per_task: int,
    seed: int,
    shares: Mapping[str, float],
    run_id: str,
    created_at: datetime,
    noise: NoiseConfig | None = None,
    stop_after_depth: int | None = None,
    mode: str = "full",
    branches: int = 16,
    branch_depth: int = 0,
    repeats: int = 1,
    backend: BackendConfig | None = None,
) -> list[dict]:
    """Artifact rows of all candidate plans of ``tasks``, each executed ``repeats`` times (runs in
    a worker process)."""
    ex = worker_executor(noise, backend)
    rows: list[dict] = []
    for task in tasks:
        if mode == "branch":
            runs = branch_plans(task, branches=branches, depth=branch_depth, seed=seed, shares=shares)
        else:
            runs = [Branch(name, plan, stop_after_depth) for name, plan in plans_for_task(task, plans_per_task, seed, shares)]
        for b in runs:
            for r in range(repeats):
                run = ex.run_plan(
                    task,
                    b.plan,
                    seed=seed,
                    repeat=r,
                    orchestrator=b.orchestrator,
                    run_id=repeat_run_id(run_id, r),
                    created_at=created_at,
                    stop_after_depth=b.stop_after_depth,
                )
                rows.extend(run.rows)
    return rows


def repeat_run_id(run_id: str, repeat: int) -> str:
    """The run id of execution ``repeat`` of a collection: the first keeps the collection's own
    (a collection with ``repeats=1`` is the first execution of one with more), the others add
    ``-r<repeat>``. Each execution is its own run, so node pairs never mix two executions."""
    return run_id if repeat == 0 else f"{run_id}-r{repeat}"


def parse_sources(text: str) -> str | dict[str, str]:
    """A task-source option: one source name for every domain collected (``"gsm8k"``), or
    ``"DOMAIN:NAME,DOMAIN:NAME,..."`` as ``{domain: name}``."""
    if ":" not in text:
        return text
    parts = [part.split(":", 1) for part in text.split(",")]
    if any(len(p) != 2 or not all(x.strip() for x in p) for p in parts):
        raise ConfigError(f"task sources {text!r}: give one name for every domain, or DOMAIN:NAME,DOMAIN:NAME,...")
    return {domain.strip(): name.strip() for domain, name in parts}


def load_domain_tasks(domains: Sequence[str], n: int, seed: int, source: str | Mapping[str, str] | None) -> list[Task]:
    """Tasks of every domain, for collection: a finite data set's from outside its held-out share
    (:func:`orchrm.execution.tasks.base.load_tasks`, ``part="collect"``). ``source``: one name for
    all, or ``{domain: name}`` (domains not collected now may be named too; a name that is no
    domain with task sources is refused)."""
    if isinstance(source, Mapping):
        known = {d for d, _ in sources()}
        unknown = sorted(set(source) - known)
        if unknown:
            raise TaskError(
                f"task sources given for unknown domain(s) {', '.join(map(repr, unknown))}; domains with task "
                f"sources: {', '.join(sorted(known))}"
            )
    tasks: list[Task] = []
    for d in domains:
        src = source.get(d, "builtin") if isinstance(source, Mapping) else (source or "builtin")
        tasks.extend(load_tasks(d, n, seed=seed, source=src, part="collect"))
    return tasks


def collection_run_id(
    seed: int,
    plans_per_task: int,
    shares: Mapping[str, float],
    task_ids: Sequence[str],
    noise: NoiseConfig | None,
    *,
    branches: int | None = None,
    backend: BackendConfig | None = None,
) -> str:
    """The run id: a hash of everything that changes the rows (artifact ids derive from it).

    The sandbox noise config is hashed only when it differs from the default: naming the default
    explicitly is the same run as leaving it out. A real backend is hashed by
    :func:`backend_identity` (its model and sampling settings), so its rows never share ids with
    the sandbox's. ``stop_after_depth`` (and the branch mode's
    ``branch_depth``) is left out on purpose: a prefix run's rows are exactly the full run's rows
    for those nodes, so they share ids. ``branches`` (given in branch mode only, where
    ``plans_per_task`` is unused) replaces ``plans_per_task``.
    """
    if branches is None:
        parts: list = [seed, plans_per_task, sorted(shares.items()), *task_ids]
    else:
        parts = ["branch", seed, branches, sorted(shares.items()), *task_ids]
    if noise is not None and noise != NoiseConfig():
        parts.append(noise.model_dump_json())
    if uses_llm(backend):
        parts.append(backend_identity(backend))
    return stable_id("collect", *parts)


def check_settings(*, mode: str, stop_after_depth: int | None, branches: int, branch_depth: int, repeats: int) -> None:
    """Refuse a collection mode, stop depth, branching or repeat count that cannot run, with the fix."""
    if mode not in MODES:
        raise ConfigError(f"collection mode {mode!r} is unknown; use one of {', '.join(MODES)}")
    if mode == "branch":
        if stop_after_depth is not None:
            raise ConfigError("stop_after_depth is for mode='full'; the branch mode stops every plan itself: set branch_depth")
        if branches < 2 or branch_depth < 0:
            raise ConfigError(f"branch mode needs branches >= 2 (got {branches}) and branch_depth >= 0 (got {branch_depth})")
    if not (isinstance(repeats, int) and repeats >= 1):
        raise ConfigError(f"repeats must be a whole number >= 1 (executions of every plan), got {repeats!r}")


def refuse_repeated(tasks: Sequence[Task]) -> None:
    """Refuse a task id given twice (its artifacts would share ids)."""
    repeated = sorted(task_id for task_id, n in Counter(t.task_id for t in tasks).items() if n > 1)
    if repeated:
        raise TaskError(
            f"task id(s) {', '.join(map(repr, repeated))} given more than once: their artifacts would share ids; "
            "pass each task once"
        )


def collect(
    domains: Sequence[str] = ("math", "code", "multihop", "webqa"),
    tasks_per_domain: int = 50,
    plans_per_task: int = 8,
    seed: int = 0,
    *,
    source: str | Mapping[str, str] | None = None,
    tasks: Sequence[Task] | None = None,
    workers: int | None = None,
    noise: NoiseConfig | None = None,
    orchestrators: Mapping[str, float] | None = None,
    stop_after_depth: int | None = None,
    mode: str = "full",
    branches: int = 16,
    branch_depth: int = 0,
    repeats: int = 1,
    progress: bool = True,
    backend: BackendConfig | None = None,
) -> pd.DataFrame:
    """Run ``plans_per_task`` candidate plans on each task and return the artifact table.

    ``backend`` (:class:`orchrm.config.BackendConfig`) runs the agents on a real model instead
    of the sandbox (``kind: transformers | openai``); its chunks of tasks then run in this process
    or on threads, never in worker processes (:func:`map_chunks`).

    ``mode="full"`` runs every plan to its sink (or to ``stop_after_depth``). ``mode="branch"``
    runs plan prefixes only: per task, ``branches`` alternatives at every shared prefix down to
    depth ``branch_depth`` (:func:`branch_plans`; ``plans_per_task`` is then unused). Its rows
    are artifact rows like any other (``plan_text`` the whole plan, nodes past the stop depth
    absent), so :func:`orchrm.data.pairs.build_pairs` reads them unchanged.

    ``repeats`` executes every plan (or prefix) that many times, each execution its own run
    (:func:`repeat_run_id`): pairs then compare a plan's mean quality over its executions, so labels
    follow expected rather than lucky quality, for ``repeats`` times the tokens (issue 17).

    ``tasks`` overrides ``domains``/``tasks_per_domain``/``source``; a task id given twice is
    refused (its artifacts would share ids). ``workers`` defaults to the number of CPU cores;
    small jobs run in this process.
    """
    check_settings(mode=mode, stop_after_depth=stop_after_depth, branches=branches, branch_depth=branch_depth, repeats=repeats)
    shares = dict(orchestrators or {"base": 0.5, "specialized": 0.5})
    if tasks is None:
        tasks = load_domain_tasks(domains, tasks_per_domain, seed, source)
    tasks = list(tasks)
    refuse_repeated(tasks)
    run_id = collection_run_id(
        seed, plans_per_task, shares, [t.task_id for t in tasks], noise, branches=branches if mode == "branch" else None,
        backend=backend,
    )
    created_at = datetime.now(UTC)
    kwargs = dict(
        plans_per_task=plans_per_task,
        seed=seed,
        shares=shares,
        run_id=run_id,
        created_at=created_at,
        noise=noise,
        stop_after_depth=stop_after_depth,
        mode=mode,
        branches=branches,
        branch_depth=branch_depth,
        repeats=repeats,
    )
    if uses_llm(backend):
        kwargs["backend"] = backend
    workers = workers or (backend.concurrency if uses_llm(backend) and backend.kind == "openai" else os.cpu_count()) or 1
    chunk = max(1, min(16, len(tasks) // (workers * 4) or 1))
    chunks = [tasks[i : i + chunk] for i in range(0, len(tasks), chunk)]
    bar = progress_bar(total=len(tasks), desc="collect", unit="task", enabled=progress)
    try:
        results = map_chunks(run_tasks, chunks, kwargs, workers=workers, backend=backend, what="collection",
                             done=lambda i: bar.update(len(chunks[i])))
    finally:
        bar.close()
    return artifacts_frame([r for rows in results for r in rows])


def collect_from_config(
    config: CollectConfig, noise: NoiseConfig | None = None, *, progress: bool = True, backend: BackendConfig | None = None
) -> pd.DataFrame:
    """:func:`collect` with every setting of ``config`` (the one place that maps the config's
    fields to its arguments: the pipeline, ``orchrm collect`` and the benchmarks call this);
    ``backend`` as for :func:`collect`."""
    return collect(
        domains=config.domains,
        tasks_per_domain=config.tasks_per_domain,
        plans_per_task=config.plans_per_task,
        seed=config.seed,
        source=dict(config.sources) or None,
        workers=config.workers,
        noise=noise,
        orchestrators=config.orchestrators,
        mode=config.mode,
        branches=config.branches,
        branch_depth=config.branch_depth,
        repeats=config.repeats,
        progress=progress,
        backend=backend,
    )


# --------------------------------------------------------------------------------------------
# the collection in chunks (a task runner spreads them; issue 23)


@dataclass(frozen=True)
class TaskChunk:
    """A contiguous slice of one domain's tasks: what one mapped task run executes. ``index`` is
    its place in its plan: the table is the chunks' rows in index order."""

    index: int
    domain: str
    task_ids: tuple[str, ...]


def _plain(value: Any) -> Any:
    """A row value as JSON holds it: NaN as null (JSON has no NaN)."""
    return None if isinstance(value, float) and math.isnan(value) else value


@dataclass(frozen=True)
class ChunkRows:
    """The rows one chunk produced, as data: a machine that runs a chunk shares no disk with the
    one that combines them, and Prefect persists this as JSON. ``rows[i][j]`` is the value of
    column ``columns[j]`` in row ``i`` (NaN stored as null). ``worker`` (``host:pid``),
    ``started_at`` (ISO 8601, UTC) and ``seconds`` say where, when and for how long it ran."""

    index: int
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    worker: str
    started_at: str
    seconds: float

    @classmethod
    def of(cls, index: int, rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, started: datetime,
           seconds: float) -> ChunkRows:
        """``rows`` (dicts; a key a row lacks is null) of chunk ``index``, run in this process."""
        return cls(index=index, columns=tuple(columns), rows=tuple(tuple(_plain(r.get(c)) for c in columns) for r in rows),
                   worker=f"{socket.gethostname()}:{os.getpid()}", started_at=started.isoformat(), seconds=round(seconds, 3))

    def records(self) -> list[dict[str, Any]]:
        """The rows as dicts, column name to value."""
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def even_parts(n: int, size: int) -> list[int]:
    """The lengths of the fewest contiguous parts of at most ``size`` that ``n`` items cut into,
    as near equal as they go (the longer ones first).

    >>> even_parts(10, 4), even_parts(8, 4), even_parts(3, 16)
    ([4, 3, 3], [4, 4], [3])
    """
    k = max(1, math.ceil(n / size))
    return [n // k + (1 if i < n % k else 0) for i in range(k)] if n else []


def chunk_tasks(tasks: Sequence[Task], size: int) -> list[TaskChunk]:
    """``tasks`` cut into chunks in their order: each run of one domain's tasks into the fewest
    contiguous, near-equal chunks of at most ``size`` (:func:`even_parts`), so a chunk never mixes
    domains (its worker loads one domain's tasks) and no chunk is a small remainder.

    >>> tasks = [Task(f"m{i}", "math", "q") for i in range(5)] + [Task("c0", "code", "q")]
    >>> [(c.index, c.domain, c.task_ids) for c in chunk_tasks(tasks, 2)]  # doctest: +NORMALIZE_WHITESPACE
    [(0, 'math', ('m0', 'm1')), (1, 'math', ('m2', 'm3')), (2, 'math', ('m4',)), (3, 'code', ('c0',))]
    """
    if size < 1:
        raise ConfigError(f"chunks hold at least one task; got a chunk size of {size} (collect.chunk_tasks)")
    chunks: list[TaskChunk] = []
    for domain, run in itertools.groupby(tasks, key=lambda t: t.domain):
        ids = [t.task_id for t in run]
        start = 0
        for length in even_parts(len(ids), size):
            chunks.append(TaskChunk(index=len(chunks), domain=domain, task_ids=tuple(ids[start : start + length])))
            start += length
    return chunks


def tasks_of(chunk: TaskChunk, tasks: Sequence[Task]) -> list[Task]:
    """The tasks of ``chunk``, in its order, from ``tasks`` (the domain's tasks as the config gives
    them in this process); an error when some are not there: the planner and this process load
    different tasks."""
    by_id = {t.task_id: t for t in tasks}
    missing = [i for i in chunk.task_ids if i not in by_id]
    if missing:
        raise CollectionError(
            f"chunk {chunk.index} ({chunk.domain}): task(s) {', '.join(map(repr, missing[:5]))} are not among the tasks "
            "the config gives in this process: the flow that planned the chunks and the worker that runs them load "
            "different tasks. Run both from the same version of orchrm and the same data sets ($ORCHRM_DATA_DIR)"
        )
    return [by_id[i] for i in chunk.task_ids]


def in_plan_order(planned: Sequence[TaskChunk], results: Sequence[ChunkRows], *, what: str) -> list[ChunkRows]:
    """``results`` sorted by chunk index; an error naming the chunks missing or given twice."""
    got = Counter(r.index for r in results)
    missing = [c.index for c in planned if c.index not in got]
    extra = sorted(i for i, n in got.items() if n > 1 or i not in {c.index for c in planned})
    if missing or extra:
        raise CollectionError(
            f"the {what} has {len(planned)} chunks; the results lack chunk(s) {missing} and hold unplanned or repeated "
            f"chunk(s) {extra}: combine the results of exactly the chunks of one plan"
        )
    return sorted(results, key=lambda r: r.index)


@dataclass(frozen=True)
class CollectionPlan:
    """A collection cut into chunks: its ``run_id`` (artifact ids derive from it) and its chunks,
    which hold every task of the config once, in the order :func:`collect` runs them."""

    run_id: str
    chunks: tuple[TaskChunk, ...]

    @property
    def tasks(self) -> int:
        return sum(len(c.task_ids) for c in self.chunks)


#: the columns of a collection chunk's rows: every artifact column but ``created_at``, which
#: :func:`combine_collection` sets (one time for the whole table)
CHUNK_COLUMNS: tuple[str, ...] = tuple(c for c in ARTIFACT_COLUMNS if c != "created_at")


def plan_collection(config: CollectConfig, noise: NoiseConfig | None = None, *, backend: BackendConfig | None = None) -> CollectionPlan:
    """The chunks of :func:`collect_from_config` ``(config, noise, backend=backend)``: its tasks cut
    by :func:`chunk_tasks` into chunks of at most ``config.chunk_tasks``, and its run id.

    Deterministic for its arguments, so the process that plans and the ones that run the chunks
    agree on every task and seed; the chunks' rows (:func:`collect_chunk`), combined by
    :func:`combine_collection`, are the table :func:`collect_from_config` returns (the same rows,
    ids and order), whatever the chunk size."""
    check_settings(mode=config.mode, stop_after_depth=None, branches=config.branches, branch_depth=config.branch_depth,
                   repeats=config.repeats)
    tasks = load_domain_tasks(config.domains, config.tasks_per_domain, config.seed, dict(config.sources) or None)
    refuse_repeated(tasks)
    run_id = collection_run_id(
        config.seed, config.plans_per_task, dict(config.orchestrators), [t.task_id for t in tasks], noise,
        branches=config.branches if config.mode == "branch" else None, backend=backend,
    )
    return CollectionPlan(run_id=run_id, chunks=tuple(chunk_tasks(tasks, config.chunk_tasks)))


def collect_chunk(
    chunk: TaskChunk, config: CollectConfig, noise: NoiseConfig | None = None, *, run_id: str, backend: BackendConfig | None = None
) -> ChunkRows:
    """Run one chunk of :func:`plan_collection` ``(config, noise, backend=backend)`` in this process
    (no worker processes: whoever runs the chunks in parallel, a Dask worker say, is the
    parallelism) and return its rows as data, without ``created_at``. Its tasks are loaded again
    from ``config``, by id; ``run_id`` is the plan's."""
    domain_tasks = load_tasks(chunk.domain, config.tasks_per_domain, seed=config.seed, source=config.source(chunk.domain), part="collect")
    tasks = tasks_of(chunk, domain_tasks)
    started, t0 = datetime.now(UTC), time.perf_counter()
    rows = run_tasks(
        tasks, plans_per_task=config.plans_per_task, seed=config.seed, shares=dict(config.orchestrators), run_id=run_id,
        created_at=started, noise=noise, mode=config.mode, branches=config.branches, branch_depth=config.branch_depth,
        repeats=config.repeats, backend=backend if uses_llm(backend) else None,
    )
    return ChunkRows.of(chunk.index, rows, CHUNK_COLUMNS, started=started, seconds=time.perf_counter() - t0)


def combine_collection(plan: CollectionPlan, chunks: Sequence[ChunkRows]) -> pd.DataFrame:
    """The artifact table of ``plan``: the rows of its ``chunks`` (one :class:`ChunkRows` per
    chunk, in any order) in chunk order, every row's ``created_at`` the time the first chunk
    started (the collection run's time)."""
    ordered = in_plan_order(plan.chunks, chunks, what="collection")
    created_at = min((datetime.fromisoformat(c.started_at) for c in ordered), default=datetime.now(UTC))
    return artifacts_frame([{**row, "created_at": created_at} for c in ordered for row in c.records()])


def collect_to_file(out: str | os.PathLike, **kwargs) -> pd.DataFrame:
    """:func:`collect`, then write the table atomically to ``out`` (.parquet or .jsonl); a path
    that cannot be written is refused before collecting."""
    check_output_table(out)
    df = collect(**kwargs)
    write_table(df, Path(out))
    return df


def summarize(df: pd.DataFrame) -> str:
    """Per-domain summary: tasks, plans, artifacts, accuracy of the mean and of the best
    candidate, tokens and cost per plan. Plans that ran a prefix only (branch mode) count as
    plans and in the tokens; the accuracies are over the plans that reached their sink."""
    if df.empty:
        return "no artifacts"
    finals = df[df["is_final"]]
    plan_tokens = df.assign(tokens=df.prompt_tokens + df.completion_tokens).groupby(["domain", "task_id", "plan_id"])[["tokens", "cost"]].sum()
    lines = [
        f"{'domain':<10}{'tasks':>6}{'plans':>7}{'artifacts':>10}{'mean q':>8}{'best q':>8}{'tokens/plan':>12}{'cost/plan':>11}"
    ]
    for domain, g in df.groupby("domain", sort=True):
        f = finals[finals["domain"] == domain]
        mean_q = f"{f['quality'].mean():>8.3f}" if len(f) else f"{'-':>8}"
        best_q = f"{f.groupby('task_id')['quality'].max().mean():>8.3f}" if len(f) else f"{'-':>8}"
        pt = plan_tokens.loc[domain]
        lines.append(
            f"{domain:<10}{g.task_id.nunique():>6}{len(pt):>7}{len(g):>10}"
            f"{mean_q}{best_q}{pt.tokens.mean():>12.0f}{pt.cost.mean():>11.0f}"
        )
    prefixes = len(plan_tokens) - finals.groupby(["domain", "task_id", "plan_id"]).ngroups
    if prefixes:
        lines.append(f"{prefixes} of {len(plan_tokens)} plans ran a prefix only; mean q / best q: the plans that reached their sink")
    return "\n".join(lines)
