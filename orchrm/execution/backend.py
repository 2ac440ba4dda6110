"""The backend interface: what the executor asks of whatever runs the agents.

A backend runs one plan node at a time (``run_node``) given the outputs of its parents, and says
how good an output is when the task carries a reference (``quality``). The sandbox and the real
LLM backends implement the same interface, so the executor never changes with the backend.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from orchrm.execution.tasks.base import Task
from orchrm.plans import PlanNode


@dataclass(frozen=True)
class NodeOutput:
    """What one agent call produced.

    - ``content``: everything the agent wrote (all samples, debate turns, critiques, retrieved
      results); this is the artifact text.
    - ``answer``: the candidate answer parsed from it (None for retrieval-only nodes).
    - ``prompt_tokens`` / ``completion_tokens``: tokens consumed / produced over all the node's
      LLM calls, counted on the actual texts (``orchrm.util.tokens``).
    - ``confidence``: the agent's own confidence in ``answer`` in [0, 1] (read by the
      trajectory-level selector; never by the reward model).
    - ``state``: backend-private payload handed to child nodes (e.g. retrieved documents).
    - ``parse_failed``: the agent wrote text but no answer could be read from it (a real model's
      format slip: ``answer`` is None and the quality 0, and the artifact's ``parse_failed`` says
      why). Never set by the sandbox, whose agents always write their answer.
    """

    node_id: str
    agent: str
    content: str
    answer: str | None
    prompt_tokens: int
    completion_tokens: int
    confidence: float = 0.5
    state: Any = field(default=None, repr=False, compare=False)
    parse_failed: bool = False


def node_cost(backend: Backend, node: PlanNode, output: NodeOutput) -> float:
    """The ``cost`` of an artifact (DESIGN §3): its tokens, prompt and completion, times the price
    ``backend`` gives the node's tier (``cost_weight``; 1 for a node without one)."""
    return (output.prompt_tokens + output.completion_tokens) * backend.cost_weight(node.model)


@runtime_checkable
class Backend(Protocol):
    """Runs agents. ``tiers`` lists the model tiers it accepts; ``cost_weight(tier)`` prices them."""

    name: str

    @property
    def tiers(self) -> tuple[str, ...]: ...

    def cost_weight(self, tier: str | None) -> float: ...

    def run_node(
        self, task: Task, node: PlanNode, parents: Sequence[NodeOutput], *, rng: random.Random, shared: dict
    ) -> NodeOutput:
        """Run ``node`` on ``task``; ``shared`` is one dict per plan execution (for correlated
        effects across nodes, e.g. a tier that misreads a question misreads it everywhere)."""
        ...

    def quality(self, task: Task, output: NodeOutput) -> float | None:
        """Quality in [0, 1] of ``output`` against ``task.reference``; None when unknowable."""
        ...
