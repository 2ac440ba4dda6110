"""What a sandbox domain provides to the generic agent semantics in :mod:`.engine`.

The engine implements the agent types once (SelfConsistency votes, Debate converges, Reflexion
critiques, WebSearch retrieves); a domain supplies the primitive acts: one reasoning
``attempt``, one ``critique`` (check-and-maybe-repair), ``retrieve`` over its corpus, the
``vote_key`` that decides agreement, and the ``quality`` of an answer. Everything random goes
through the ``rng`` handed in, so a seed fixes the whole execution.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchrm.execution.sandbox.config import NoiseConfig
from orchrm.execution.tasks.base import (  # Doc is re-exported: a corpus document is task data
    Doc,
    Task,
)


@dataclass(frozen=True)
class Retrieval:
    """A WebSearch result: the queries the agent wrote and the documents kept (deduplicated)."""

    queries: tuple[str, ...]
    docs: tuple[Doc, ...]


@dataclass(frozen=True)
class Attempt:
    """One reasoning run. ``text`` is what the agent wrote; ``answer`` what it concluded;
    ``correct_prob`` the domain's own estimate of its chance of being right (feeds the agent's
    noisy self-reported confidence); ``detail`` is domain-private (steps, program, chain)."""

    text: str
    answer: str | None
    correct_prob: float = 0.5
    detail: Any = field(default=None, compare=False)


@dataclass
class Context:
    """What a node sees: the task, its parents' retrievals and answers, and a per-execution
    dict shared by all nodes (for correlated effects)."""

    task: Task
    state: Any
    docs: tuple[Doc, ...] = ()
    drafts: tuple[Attempt, ...] = ()
    shared: dict = field(default_factory=dict)


class SandboxDomain(ABC):
    """Base class of the four built-in domains (and the generic free-text one)."""

    name: str = ""

    def __init__(self, noise: NoiseConfig) -> None:
        self.noise = noise
        self._prepared: dict[str, Any] = {}

    def state(self, task: Task) -> Any:
        """Parsed, cached per-task state (``prepare`` runs once per task and process)."""
        st = self._prepared.get(task.task_id)
        if st is None:
            st = self._prepared[task.task_id] = self.prepare(task)
            if len(self._prepared) > 20_000:
                self._prepared.pop(next(iter(self._prepared)))
        return st

    @abstractmethod
    def prepare(self, task: Task) -> Any:
        """Parse the task once (solution steps, knowledge path, program...)."""

    @abstractmethod
    def attempt(self, ctx: Context, tier: str, rng: random.Random) -> Attempt:
        """One independent reasoning run by ``tier``, using ``ctx.docs`` and ``ctx.drafts``."""

    @abstractmethod
    def critique(self, ctx: Context, attempt: Attempt, tier: str, rng: random.Random, *, tools: bool) -> Attempt:
        """Check ``attempt`` and maybe repair it (or, by over-correction, break it). ``tools``
        is True for Reflexion (it may run code / a calculator / re-read documents) and False for
        a debater re-thinking its own answer. The returned text is the critique itself."""

    @abstractmethod
    def retrieve(self, ctx: Context, queries: int, top_k: int, tier: str | None, rng: random.Random) -> Retrieval:
        """Write ``queries`` search queries and keep ``top_k`` documents for each (real BM25)."""

    def vote_key(self, ctx: Context, attempt: Attempt) -> Hashable:
        """Answers with equal keys agree (normalised answer by default)."""
        return None if attempt.answer is None else " ".join(attempt.answer.lower().split())

    @abstractmethod
    def quality(self, task: Task, answer: str | None) -> float | None:
        """Quality of a final or intermediate answer against ``task.reference`` (None if unknown)."""

    def retrieval_quality(self, task: Task, retrieval: Retrieval) -> float | None:
        """Quality of a retrieval (e.g. recall of the gold documents); None if not defined."""
        return None

    def instruction(self, agent: str) -> str:
        """The role instruction that prefixes every prompt of ``agent`` (counted as tokens)."""
        return f"You are a {agent} agent solving a {self.name} task. Think step by step and end with 'Answer: <answer>'."

    def render_docs(self, docs: Sequence[Doc]) -> list[str]:
        """Prompt pieces for retrieved documents (what a downstream agent reads)."""
        return [f"[{d.title}] {d.text}" for d in docs]
