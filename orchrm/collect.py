"""Collection: sample candidate plans for many tasks, execute them, and build the artifact table.

Parallel across tasks with worker processes, deterministic for a seed: every task's plans and
every execution are seeded from ``(seed, task_id, plan_id)``, so the table does not depend on
the number of workers or the order in which they finish.

>>> df = collect(domains=["math"], tasks_per_domain=5, plans_per_task=4, seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from datetime import UTC, datetime
from multiprocessing import get_context
from pathlib import Path

import pandas as pd

from orchrm.errors import CollectionError, ConfigError, TaskError
from orchrm.executor import MultiAgentExecutor
from orchrm.orchestrators import get_sampler
from orchrm.plans import Plan
from orchrm.progress import progress_bar
from orchrm.sandbox_config import NoiseConfig
from orchrm.tasks.base import Task, load_tasks, sources, stable_id
from orchrm.traces import artifacts_frame, check_output_table, write_table


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


# one executor per worker process (domain state, BM25 indexes and code sandboxes are reused)
_WORKER: dict[str, MultiAgentExecutor] = {}


def worker_executor(noise: NoiseConfig | None) -> MultiAgentExecutor:
    """This process's executor for ``noise`` (made once, then reused by every task it runs)."""
    key = "default" if noise is None else noise.model_dump_json()
    ex = _WORKER.get(key)
    if ex is None:
        ex = _WORKER[key] = MultiAgentExecutor(noise=noise)
    return ex


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
) -> list[dict]:
    """Artifact rows of all candidate plans of ``tasks`` (runs in a worker process)."""
    ex = worker_executor(noise)
    rows: list[dict] = []
    for task in tasks:
        for name, plan in plans_for_task(task, plans_per_task, seed, shares):
            run = ex.run_plan(
                task,
                plan,
                seed=seed,
                orchestrator=name,
                run_id=run_id,
                created_at=created_at,
                stop_after_depth=stop_after_depth,
            )
            rows.extend(run.rows)
    return rows


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
    """Tasks of every domain. ``source``: one name for all, or ``{domain: name}`` (domains not
    collected now may be named too; a name that is no domain with task sources is refused)."""
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
        tasks.extend(load_tasks(d, n, seed=seed, source=src))
    return tasks


def collection_run_id(
    seed: int, plans_per_task: int, shares: Mapping[str, float], task_ids: Sequence[str], noise: NoiseConfig | None
) -> str:
    """The run id: a hash of everything that changes the rows (artifact ids derive from it).

    The sandbox noise config is hashed only when it differs from the default: naming the default
    explicitly is the same run as leaving it out. ``stop_after_depth`` is left out on purpose: a
    prefix run's rows are exactly the full run's rows for those nodes, so they share ids.
    """
    parts: list = [seed, plans_per_task, sorted(shares.items()), *task_ids]
    if noise is not None and noise != NoiseConfig():
        parts.append(noise.model_dump_json())
    return stable_id("collect", *parts)


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
    progress: bool = True,
) -> pd.DataFrame:
    """Run ``plans_per_task`` candidate plans on each task and return the artifact table.

    ``tasks`` overrides ``domains``/``tasks_per_domain``/``source``; a task id given twice is
    refused (its artifacts would share ids). ``workers`` defaults to the number of CPU cores;
    small jobs run in this process.
    """
    shares = dict(orchestrators or {"base": 0.5, "specialized": 0.5})
    if tasks is None:
        tasks = load_domain_tasks(domains, tasks_per_domain, seed, source)
    tasks = list(tasks)
    repeated = sorted(task_id for task_id, n in Counter(t.task_id for t in tasks).items() if n > 1)
    if repeated:
        raise TaskError(
            f"task id(s) {', '.join(map(repr, repeated))} given more than once: their artifacts would share ids; "
            "pass each task once"
        )
    run_id = collection_run_id(seed, plans_per_task, shares, [t.task_id for t in tasks], noise)
    created_at = datetime.now(UTC)
    kwargs = dict(
        plans_per_task=plans_per_task,
        seed=seed,
        shares=shares,
        run_id=run_id,
        created_at=created_at,
        noise=noise,
        stop_after_depth=stop_after_depth,
    )
    workers = workers or os.cpu_count() or 1
    chunk = max(1, min(16, len(tasks) // (workers * 4) or 1))
    chunks = [tasks[i : i + chunk] for i in range(0, len(tasks), chunk)]
    results: dict[int, list[dict]] = {}
    bar = progress_bar(total=len(tasks), desc="collect", unit="task", enabled=progress)
    try:
        if workers == 1 or len(chunks) == 1:
            for i, c in enumerate(chunks):
                results[i] = run_tasks(c, **kwargs)
                bar.update(len(c))
        else:
            try:
                with ProcessPoolExecutor(max_workers=min(workers, len(chunks)), mp_context=get_context("spawn")) as pool:
                    futures = {pool.submit(run_tasks, c, **kwargs): i for i, c in enumerate(chunks)}
                    for fut in as_completed(futures):
                        i = futures[fut]
                        results[i] = fut.result()
                        bar.update(len(chunks[i]))
            except BrokenProcessPool:
                raise CollectionError(
                    f"a collection worker process died before it finished ({workers} workers). Called from a "
                    "script? Worker processes start fresh and import the script again: put the call under "
                    "`if __name__ == \"__main__\":`. Otherwise it may have run out of memory: use fewer workers "
                    "(workers=1 runs in this process)"
                ) from None
    finally:
        bar.close()
    rows = [r for i in range(len(chunks)) for r in results[i]]
    return artifacts_frame(rows)


def collect_to_file(out: str | os.PathLike, **kwargs) -> pd.DataFrame:
    """:func:`collect`, then write the table atomically to ``out`` (.parquet or .jsonl); a path
    that cannot be written is refused before collecting."""
    check_output_table(out)
    df = collect(**kwargs)
    write_table(df, Path(out))
    return df


def summarize(df: pd.DataFrame) -> str:
    """Per-domain summary: tasks, plans, artifacts, accuracy of the mean and of the best
    candidate, tokens and cost per plan."""
    if df.empty:
        return "no artifacts"
    finals = df[df["is_final"]]
    plan_tokens = df.assign(tokens=df.prompt_tokens + df.completion_tokens).groupby(["domain", "task_id", "plan_id"])[["tokens", "cost"]].sum()
    lines = [
        f"{'domain':<10}{'tasks':>6}{'plans':>7}{'artifacts':>10}{'mean q':>8}{'best q':>8}{'tokens/plan':>12}{'cost/plan':>11}"
    ]
    for domain, g in finals.groupby("domain", sort=True):
        q = g["quality"]
        best = g.groupby("task_id")["quality"].max().mean()
        pt = plan_tokens.loc[domain]
        lines.append(
            f"{domain:<10}{g.task_id.nunique():>6}{len(g):>7}{(df.domain == domain).sum():>10}"
            f"{q.mean():>8.3f}{best:>8.3f}{pt.tokens.mean():>12.0f}{pt.cost.mean():>11.0f}"
        )
    return "\n".join(lines)
