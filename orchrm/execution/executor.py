"""MultiAgentExecutor: run plans on tasks and record every artifact with its token cost.

>>> from orchrm import MultiAgentExecutor                                   # doctest: +SKIP
>>> executor = MultiAgentExecutor(agents=["math_parser", "strategy_selector", "calculator"],
...                               orchestrator="default")
>>> artifacts = executor.run(task="Solve: integral of x^2 from 0 to 1")   # a DataFrame

``run_plan(task, plan, stop_after_depth=d)`` executes only the nodes at depth <= d: the OrchRM
signal needs only a plan prefix to have run, and tokens are spent only on what runs.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from orchrm.config import BackendConfig
from orchrm.errors import ConfigError, PlanError
from orchrm.execution.backend import Backend, NodeOutput, node_cost
from orchrm.execution.sandbox.config import NoiseConfig
from orchrm.execution.tasks.base import Task
from orchrm.plans import Plan
from orchrm.util.digests import stable_id

if TYPE_CHECKING:
    import pandas as pd

    from orchrm.execution.samplers import BaseSampler, RoleSampler, SpecializedSampler

log = logging.getLogger(__name__)


def execution_seed(seed: int, task_id: str, plan_id: str, repeat: int = 0) -> int:
    """The seed of one execution of ``plan`` on ``task`` (independent of worker and order)."""
    return int(stable_id("exec", seed, task_id, plan_id, repeat, n=16), 16)


@dataclass(frozen=True)
class PlanRun:
    """One execution of a plan (or of its prefix) on a task.

    ``rows`` are artifact-table rows (DESIGN §3), one per node that ran, in topological order.
    """

    task: Task
    plan: Plan
    orchestrator: str
    outputs: tuple[NodeOutput, ...]
    rows: tuple[dict, ...]

    @property
    def final(self) -> NodeOutput | None:
        """The sink's output, or None when only a prefix ran."""
        sink = self.plan.sink
        return next((o for o in self.outputs if o.node_id == sink), None)

    @property
    def answer(self) -> str | None:
        return self.final.answer if self.final else None

    @property
    def quality(self) -> float | None:
        return next((r["quality"] for r in self.rows if r["is_final"]), None)

    @property
    def tokens(self) -> int:
        return sum(r["prompt_tokens"] + r["completion_tokens"] for r in self.rows)

    @property
    def cost(self) -> float:
        return sum(r["cost"] for r in self.rows)

    def frame(self) -> pd.DataFrame:
        # imported here: sampling and scoring plans (orchrm rank, best-of-N) need no pandas
        from orchrm.data.tables import artifacts_frame

        return artifacts_frame(list(self.rows))


def _check_num_plans(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"num_plans must be at least 1, got {n!r}: ask for one or more candidate plans per task")
    return n


def _make_backend(backend: str | BackendConfig | Backend, noise: NoiseConfig | None) -> Backend:
    if isinstance(backend, BackendConfig):
        from orchrm.execution.llm.backend import backend_from_config

        return backend_from_config(backend, noise)
    if not isinstance(backend, str):
        return backend
    if backend == "sandbox":
        from orchrm.execution.sandbox.engine import SandboxBackend

        return SandboxBackend(noise)
    if backend in ("transformers", "openai"):
        raise ValueError(f"backend {backend!r} needs a model: pass backend=BackendConfig(kind={backend!r}, model=...) "
                         "(orchrm.config.BackendConfig), or an LLMBackend")
    raise ValueError(f"unknown backend {backend!r}; use 'sandbox', a BackendConfig or a Backend instance")


class MultiAgentExecutor:
    """Runs plans of sub-agents on tasks through a backend (the sandbox by default).

    - ``agents``: optional named roles (``orchrm.execution.roles``); when given, candidate plans are
      chains over these roles. Without it, plans come from ``orchestrator``.
    - ``orchestrator``: ``"default"`` / ``"specialized"`` / ``"base"`` plan sampler.
    - ``num_plans``: candidate plans :meth:`run` executes per task.
    - ``backend``: ``"sandbox"``, a :class:`orchrm.config.BackendConfig` (``kind: transformers |
      openai`` runs the agents on a real model, :class:`orchrm.execution.llm.backend.LLMBackend`),
      or any object implementing :class:`orchrm.execution.backend.Backend`.
    """

    def __init__(
        self,
        agents: Sequence[str] | None = None,
        orchestrator: str = "default",
        *,
        backend: str | BackendConfig | Backend = "sandbox",
        num_plans: int = 4,
        seed: int = 0,
        noise: NoiseConfig | None = None,
    ) -> None:
        # imported here, not at module level: a test-time orchestrator above both modules can
        # then import this one without a cycle (issue 14)
        from orchrm.execution.samplers import RoleSampler, get_sampler

        self.backend = _make_backend(backend, noise)
        self.agents = tuple(agents or ())
        self.sampler: BaseSampler | SpecializedSampler | RoleSampler = (
            RoleSampler(self.agents) if self.agents else get_sampler(orchestrator)
        )
        self.orchestrator = orchestrator
        self.num_plans = _check_num_plans(num_plans)
        self.seed = seed

    # tasks --------------------------------------------------------------------------------
    @staticmethod
    def as_task(task: Task | str) -> Task:
        """A Task as is; free text is routed to a domain (or the generic one)."""
        if isinstance(task, Task):
            return task
        if not isinstance(task, str) or not task.strip():
            raise ValueError("task must be a Task or a non-empty string")
        from orchrm.execution.tasks.router import task_from_text

        return task_from_text(task)

    # plans --------------------------------------------------------------------------------
    def sample_plans(self, task: Task | str, n: int | None = None, *, seed: int | None = None) -> list[Plan]:
        """``n`` (default ``num_plans``) distinct candidate plans for ``task`` from this executor's
        orchestrator; fewer, with a warning, where fewer exist (a small set of roles: one
        ``calculator`` makes few different plans)."""
        n = self.num_plans if n is None else _check_num_plans(n)
        task = self.as_task(task)
        rng = random.Random(int(stable_id("plans", self.seed if seed is None else seed, task.task_id, n=16), 16))
        plans = self.sampler.sample(task, n, rng)
        if len(plans) < n:
            source = f"the roles {list(self.agents)}" if self.agents else f"the {self.orchestrator!r} orchestrator"
            log.warning("only %d distinct plans found for %s (asked for %d); running those", len(plans), source, n)
        return plans

    # execution ----------------------------------------------------------------------------
    def run_plan(
        self,
        task: Task | str,
        plan: Plan | str,
        *,
        stop_after_depth: int | None = None,
        seed: int | None = None,
        repeat: int = 0,
        orchestrator: str = "given",
        run_id: str | None = None,
        created_at: datetime | None = None,
    ) -> PlanRun:
        """Execute ``plan`` on ``task`` node by node; with ``stop_after_depth=d`` only the nodes
        at depth <= d run. ``repeat`` selects an independent re-execution (same seed otherwise
        gives the same outputs)."""
        task = self.as_task(task)
        if isinstance(plan, str):
            plan = Plan.parse(plan, tiers=self.backend.tiers)
        elif set(plan.tiers_used()) - set(self.backend.tiers):
            raise PlanError(f"plan uses tier(s) {sorted(set(plan.tiers_used()) - set(self.backend.tiers))} unknown to backend {self.backend.name}")
        if stop_after_depth is not None and stop_after_depth < 0:
            raise ValueError("stop_after_depth must be >= 0")
        seed = self.seed if seed is None else seed
        plan_id, plan_text = plan.plan_id, plan.render()
        exec_seed = execution_seed(seed, task.task_id, plan_id, repeat)
        rng = random.Random(exec_seed)
        run_id = run_id or stable_id("run", seed, task.task_id)
        created_at = created_at or datetime.now(UTC)
        depths = plan.depths()
        sink = plan.sink
        shared: dict = {}
        done: dict[str, NodeOutput] = {}
        rows: list[dict] = []
        nodes = plan.nodes if stop_after_depth is None else plan.prefix(stop_after_depth)
        for node in nodes:
            parent_ids = plan.parents(node.id)
            out = self.backend.run_node(task, node, [done[p] for p in parent_ids], rng=rng, shared=shared)
            done[node.id] = out
            quality = self.backend.quality(task, out) if task.reference is not None else None
            rows.append(
                {
                    "artifact_id": stable_id(run_id, task.task_id, plan_id, node.id, exec_seed, n=16),
                    "run_id": run_id,
                    "task_id": task.task_id,
                    "domain": task.domain,
                    "question": task.question,
                    "plan_id": plan_id,
                    "plan_text": plan_text,
                    "orchestrator": orchestrator,
                    "node_id": node.id,
                    "agent": node.agent,
                    "depth": depths[node.id],
                    "parent_ids": list(parent_ids),
                    "content": out.content,
                    "answer": out.answer,
                    "prompt_tokens": out.prompt_tokens,
                    "completion_tokens": out.completion_tokens,
                    "cost": node_cost(self.backend, node, out),
                    "is_final": node.id == sink,
                    "quality": quality,
                    "created_at": created_at,
                    "parse_failed": out.parse_failed,
                }
            )
        return PlanRun(task, plan, orchestrator, tuple(done.values()), tuple(rows))

    def run(
        self,
        task: Task | str,
        *,
        plans: Sequence[Plan | str] | None = None,
        num_plans: int | None = None,
        seed: int | None = None,
    ) -> pd.DataFrame:
        """Sample ``num_plans`` candidate plans (or take ``plans``), execute each fully, and return
        the artifact table of all of them. A plan given twice is refused: an artifact's id is
        derived from its plan, and two executions of one plan would share it."""
        task = self.as_task(task)
        if plans is not None:
            chosen = [Plan.parse(p, tiers=self.backend.tiers) if isinstance(p, str) else p for p in plans]
            _refuse_repeated_plans(chosen)
        else:
            chosen = self.sample_plans(task, num_plans, seed=seed)
        label = "given" if plans is not None else (self.sampler.name if not self.agents else "roles")
        created_at = datetime.now(UTC)
        rows: list[dict] = []
        for plan in chosen:
            rows += self.run_plan(task, plan, seed=seed, orchestrator=label, created_at=created_at).rows
        from orchrm.data.tables import artifacts_frame

        return artifacts_frame(rows)


def _refuse_repeated_plans(plans: Sequence[Plan]) -> None:
    counts = Counter(p.plan_id for p in plans)
    text = {p.plan_id: p.render().split("\n")[0] for p in plans}
    repeated = [(plan_id, n) for plan_id, n in counts.items() if n > 1]
    if repeated:
        listed = "; ".join(f"plan {plan_id} ({text[plan_id]}...) is given {n} times" for plan_id, n in repeated)
        raise PlanError(
            f"{listed}: its artifacts would share ids; run each plan once (use run_plan(..., repeat=r) "
            "for independent re-executions)"
        )
