"""Orchestrators: who writes the candidate plans.

- :class:`BaseSampler` — a broad prior over plan shapes, tiers and parameters (the "base
  orchestrator" of the paper: it knows the agents but not which fits the question).
- :class:`SpecializedSampler` — a better, still imperfect orchestrator: it draws candidates from
  the same prior and keeps the ones its domain heuristic (which reads only the question text)
  rates highest, with Gumbel noise so it is not an oracle.
- :class:`PanelSampler` — plans from a small panel of base-prior plans shared by every task of a
  domain: pairs among them compare the same plans on different questions, so what sets their
  labels apart is the question (issue 24's "pairs that isolate the question").
- :class:`RoleSampler` — plans over a user's named agent roles (``math_parser``, ...), as
  ``MultiAgentExecutor(agents=[...])`` asks for.

Every sampler is seeded through the ``random.Random`` handed to :meth:`sample` and returns
distinct plans.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchrm.execution.roles import get_role
from orchrm.execution.tasks.base import Task, plan_heuristic
from orchrm.plans import SAMPLERS, Plan, PlanNode
from orchrm.util.digests import stable_id

REASONERS = ("CoT", "SelfConsistency", "Debate", "Reflexion")


@dataclass(frozen=True)
class PriorConfig:
    """The base prior: shape weights and parameter menus (documented defaults)."""

    #: shape -> weight. single: one reasoner; search: WebSearch -> reasoner; reflect: reasoner ->
    #: Reflexion; search_reflect: WebSearch -> reasoner -> Reflexion; fan_in: WebSearch and CoT
    #: both feeding a voting reasoner.
    shapes: tuple[tuple[str, float], ...] = (
        ("single", 4.0),
        ("search", 3.0),
        ("reflect", 2.0),
        ("search_reflect", 1.5),
        ("fan_in", 1.0),
    )
    p_large: float = 0.4
    k: tuple[int, ...] = (3, 5, 7)
    debaters: tuple[int, ...] = (2, 3)
    rounds: tuple[int, ...] = (1, 2)
    iterations: tuple[int, ...] = (1, 2, 3)
    queries: tuple[int, ...] = (1, 2, 3)
    top_k: tuple[int, ...] = (2, 4, 8)


def _reasoner(rng: random.Random, agent: str, prior: PriorConfig) -> dict:
    params: dict = {"model": "large" if rng.random() < prior.p_large else "small"}
    if agent == "SelfConsistency":
        params["k"] = rng.choice(prior.k)
    elif agent == "Debate":
        params["agents"] = rng.choice(prior.debaters)
        params["rounds"] = rng.choice(prior.rounds)
    elif agent == "Reflexion":
        params["iterations"] = rng.choice(prior.iterations)
    return params


def _search(rng: random.Random, prior: PriorConfig) -> dict:
    return {"queries": rng.choice(prior.queries), "top_k": rng.choice(prior.top_k)}


def _weighted(rng: random.Random, items: Sequence[tuple[str, float]]) -> str:
    total = sum(w for _, w in items)
    x = rng.random() * total
    for name, w in items:
        x -= w
        if x < 0:
            return name
    return items[-1][0]


def sample_prior_plan(rng: random.Random, prior: PriorConfig = PriorConfig()) -> Plan:
    """One plan from the base prior."""
    shape = _weighted(rng, prior.shapes)
    nodes: list[PlanNode] = []
    edges: list[tuple[str, str]] = []

    def add(agent: str, params: dict) -> str:
        node_id = f"a{len(nodes) + 1}"
        nodes.append(PlanNode(node_id, agent, params))
        return node_id

    if shape == "single":
        agent = rng.choice(REASONERS)
        add(agent, _reasoner(rng, agent, prior))
    elif shape == "search":
        s = add("WebSearch", _search(rng, prior))
        agent = rng.choice(REASONERS)
        edges.append((s, add(agent, _reasoner(rng, agent, prior))))
    elif shape in ("reflect", "search_reflect"):
        first = None
        if shape == "search_reflect":
            first = add("WebSearch", _search(rng, prior))
        agent = rng.choice(REASONERS[:3])
        r = add(agent, _reasoner(rng, agent, prior))
        if first:
            edges.append((first, r))
        edges.append((r, add("Reflexion", _reasoner(rng, "Reflexion", prior))))
    else:  # fan_in
        s = add("WebSearch", _search(rng, prior))
        c = add("CoT", _reasoner(rng, "CoT", prior))
        agent = rng.choice(("SelfConsistency", "Debate"))
        v = add(agent, _reasoner(rng, agent, prior))
        edges += [(s, v), (c, v)]
    return Plan.build(nodes, edges)


def _distinct(draw: Callable[[], Plan], n: int, *, max_tries: int) -> list[Plan]:
    plans: dict[str, Plan] = {}
    tries = 0
    while len(plans) < n and tries < max_tries:
        p = draw()
        plans.setdefault(p.plan_id, p)
        tries += 1
    return list(plans.values())


class BaseSampler:
    """Broad prior over plans. ``sample(task, n, rng)`` -> n distinct plans."""

    name = "base"

    def __init__(self, prior: PriorConfig = PriorConfig()) -> None:
        self.prior = prior

    def sample(self, task: Task, n: int, rng: random.Random) -> list[Plan]:
        return _distinct(lambda: sample_prior_plan(rng, self.prior), n, max_tries=50 * n)


class SpecializedSampler:
    """Keeps the prior's candidates that a question-reading heuristic rates best.

    Draws ``pool`` plans from the base prior, scores each with the domain's declared
    :class:`~orchrm.execution.tasks.base.PlanHeuristic` (``heuristic.score(heuristic.features(question),
    plan)``, registered by the domain module with :func:`~orchrm.execution.tasks.base.register_heuristic`)
    plus Gumbel noise of scale ``temperature`` (so it is good, not perfect), and returns the top
    ``n`` distinct plans. Falls back to the base prior for domains without a heuristic.
    """

    name = "specialized"

    def __init__(self, pool: int = 48, temperature: float = 0.3, prior: PriorConfig = PriorConfig()) -> None:
        self.pool = pool
        self.temperature = temperature
        self.base = BaseSampler(prior)

    def sample(self, task: Task, n: int, rng: random.Random) -> list[Plan]:
        candidates = self.base.sample(task, max(self.pool, n), rng)
        heuristic = plan_heuristic(task.domain)
        if heuristic is None:
            return candidates[:n]
        features = heuristic.features(task.question)
        scored = []
        for plan in candidates:
            gumbel = -math.log(-math.log(max(rng.random(), 1e-12)))
            scored.append((heuristic.score(features, plan) + self.temperature * gumbel, plan.plan_id, plan))
        scored.sort(key=lambda t: (-t[0], t[1]))
        return [p for _, _, p in scored[:n]]


class PanelSampler:
    """Each task's plans drawn without replacement from its domain's panel: ``size`` distinct plans
    of the base prior, the same for every task of the domain (seeded by the domain's name alone).

    Every plan of the panel then runs on about ``tasks * n / size`` tasks, and every pair of them
    on several: a pair's label changes from task to task only through the question.
    """

    name = "panel"

    def __init__(self, size: int = 16, prior: PriorConfig = PriorConfig()) -> None:
        self.size = size
        self.prior = prior

    def panel(self, domain: str) -> list[Plan]:
        """The domain's ``size`` plans."""
        rng = random.Random(int(stable_id("plan-panel", domain, self.size, n=16), 16))
        return _distinct(lambda: sample_prior_plan(rng, self.prior), self.size, max_tries=50 * self.size)

    def sample(self, task: Task, n: int, rng: random.Random) -> list[Plan]:
        panel = self.panel(task.domain)
        return rng.sample(panel, min(n, len(panel)))


class RoleSampler:
    """Plans over named roles: chains of the roles in the given order, dropping some of the
    earlier ones and varying tiers and parameters. The last role always answers."""

    name = "roles"

    def __init__(self, roles: Sequence[str]) -> None:
        if not roles:
            raise ValueError("RoleSampler needs at least one role")
        self.roles = [get_role(r) for r in roles]

    def _draw(self, rng: random.Random) -> Plan:
        keep = [r for r in self.roles[:-1] if rng.random() < 0.7] + [self.roles[-1]]
        nodes = []
        for i, role in enumerate(keep):
            params = dict(role.params)
            params["role"] = role.name
            if "model" in params and rng.random() < 0.35:
                params["model"] = "large" if params["model"] == "small" else "small"
            for key, options in (("k", (3, 5, 7)), ("iterations", (1, 2)), ("top_k", (3, 5))):
                if key in params and rng.random() < 0.5:
                    params[key] = rng.choice(options)
            nodes.append(PlanNode(f"a{i + 1}", role.agent, params))
        edges = [(f"a{i}", f"a{i + 1}") for i in range(1, len(nodes))]
        return Plan.build(nodes, edges)

    def sample(self, task: Task, n: int, rng: random.Random) -> list[Plan]:
        return _distinct(lambda: self._draw(rng), n, max_tries=50 * n)


def get_sampler(name: str):
    """``base`` | ``panel`` | ``specialized`` (``default`` is the specialized one)."""
    if name == "base":
        return BaseSampler()
    if name == "panel":
        return PanelSampler()
    if name in ("specialized", "default"):
        return SpecializedSampler()
    raise ValueError(f"unknown orchestrator {name!r}; use {', '.join(SAMPLERS)} or default")
