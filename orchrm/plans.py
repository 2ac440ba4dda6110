"""Plans: DAGs of sub-agent calls, in the canonical MAS-Orchestra-style text the reward model reads.

A plan is a set of agent nodes ``{id, agent, params}`` and edges ``(from, to)`` forming a DAG with
exactly one sink, whose output is the final answer. Its canonical text form is::

    <agent id="a1" type="WebSearch" queries="2" top_k="5"/>
    <agent id="a2" type="SelfConsistency" model="small" k="5"/>
    <edge from="a1" to="a2"/>

Rendering is canonical (same plan -> same bytes): nodes in topological order (ties by id),
attributes ``id``, ``type``, ``model``, then the type's parameters in declared order, then ``role``;
edges sorted. Attribute values are XML-escaped (``& " < >``) when rendered and unescaped when
parsed, so ``Plan.parse(plan.render()) == plan`` for any attribute text (a role may hold quotes)
and ``Plan.parse(text).render() == text`` for every canonical text. ``Plan.parse`` rejects
unknown agents, cycles, dangling edges, bad parameters and repeated attributes with a
:class:`PlanError` that names the offending node and the fix.

>>> plan = Plan.parse('<agent id="a1" type="CoT" model="small"/>')
>>> plan.sink, plan.render()
('a1', '<agent id="a1" type="CoT" model="small"/>')
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from xml.sax.saxutils import escape, unescape

from orchrm.errors import PlanError

DEFAULT_TIERS: tuple[str, ...] = ("small", "large")


@dataclass(frozen=True)
class IntParam:
    """An integer parameter with an inclusive range."""

    name: str
    low: int
    high: int
    doc: str


@dataclass(frozen=True)
class AgentType:
    """The contract of one sub-agent type: its parameters and whether it needs a model tier."""

    name: str
    params: tuple[IntParam, ...]
    model_required: bool
    doc: str

    def param(self, name: str) -> IntParam | None:
        return next((p for p in self.params if p.name == name), None)


AGENT_TYPES: Mapping[str, AgentType] = MappingProxyType(
    {
        t.name: t
        for t in (
            AgentType("CoT", (), True, "one chain-of-thought run"),
            AgentType(
                "SelfConsistency",
                (IntParam("k", 2, 16, "independent samples, majority vote"),),
                True,
                "k independent runs, answer by majority vote",
            ),
            AgentType(
                "Debate",
                (
                    IntParam("agents", 2, 5, "debaters"),
                    IntParam("rounds", 1, 4, "rounds of exchange after the opening answers"),
                ),
                True,
                "debaters answer, then read each other and revise for a number of rounds",
            ),
            AgentType(
                "Reflexion",
                (IntParam("iterations", 1, 5, "critique-and-repair iterations"),),
                True,
                "answer (or take the parent's), then critique and repair it",
            ),
            AgentType(
                "WebSearch",
                (
                    IntParam("queries", 1, 5, "search queries written"),
                    IntParam("top_k", 1, 20, "documents kept per query"),
                ),
                False,
                "retrieval over the task's corpus (BM25 in the sandbox); model optional",
            ),
        )
    }
)

_ID = re.compile(r"[A-Za-z][A-Za-z0-9_\-]{0,31}")  # used with fullmatch: "$" would accept "a1\n"
_TAG = re.compile(r"<\s*(agent|edge)\b([^<>]*?)/\s*>", re.S)
_ATTR = re.compile(r"""([A-Za-z_][A-Za-z0-9_\-]*)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_QUOTES = {'"': "&quot;"}
_UNQUOTES = {"&quot;": '"', "&apos;": "'"}


def _attr_text(name: str, value: str) -> str:
    """``name="value"`` with ``& " < >`` escaped (a ``>`` or ``<`` would end the tag)."""
    return f'{name}="{escape(value, _QUOTES)}"'


@dataclass(frozen=True)
class PlanNode:
    """One agent call. ``params`` holds ``model`` (tier), the type's integer parameters, ``role``."""

    id: str
    agent: str
    params: Mapping[str, str | int] = field(default_factory=dict)

    @property
    def model(self) -> str | None:
        value = self.params.get("model")
        return None if value is None else str(value)

    @property
    def role(self) -> str | None:
        value = self.params.get("role")
        return None if value is None else str(value)

    def __reduce__(self):  # MappingProxyType does not pickle; rebuild from a plain dict
        return (_rebuild_node, (self.id, self.agent, dict(self.params)))

    def __hash__(self) -> int:  # MappingProxyType is unhashable; hash what __eq__ compares
        return hash((self.id, self.agent, tuple(sorted(self.params.items()))))

    def int_param(self, name: str) -> int:
        return int(self.params[name])

    def render(self) -> str:
        spec = AGENT_TYPES[self.agent]
        attrs = [("id", self.id), ("type", self.agent)]
        if self.model is not None:
            attrs.append(("model", self.model))
        attrs += [(p.name, str(self.params[p.name])) for p in spec.params]
        if self.role is not None:
            attrs.append(("role", self.role))
        return "<agent " + " ".join(_attr_text(k, v) for k, v in attrs) + "/>"


@dataclass(frozen=True)
class Edge:
    """Output of ``source`` feeds ``target``."""

    source: str
    target: str

    def render(self) -> str:
        return f"<edge {_attr_text('from', self.source)} {_attr_text('to', self.target)}/>"


@dataclass(frozen=True)
class Plan:
    """A validated DAG of agent nodes with one sink. Build with :meth:`parse` or :meth:`build`."""

    nodes: tuple[PlanNode, ...]
    edges: tuple[Edge, ...] = ()
    tiers: tuple[str, ...] = DEFAULT_TIERS

    def __post_init__(self) -> None:
        _validate(self)
        order = _topological_order(self.nodes, self.edges)
        object.__setattr__(self, "nodes", tuple(sorted(self.nodes, key=lambda n: order[n.id])))
        object.__setattr__(
            self, "edges", tuple(sorted(set(self.edges), key=lambda e: (order[e.source], order[e.target])))
        )

    # construction -------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str, *, tiers: Iterable[str] = DEFAULT_TIERS) -> Plan:
        """Parse plan text (attribute order, quotes and whitespace are free) and validate it."""
        if not isinstance(text, str) or not text.strip():
            raise PlanError("empty plan text: a plan needs at least one <agent .../> element")
        nodes: list[PlanNode] = []
        edges: list[Edge] = []
        leftover = _TAG.sub("", text).strip()
        if leftover:
            raise PlanError(
                f"unexpected text in plan: {leftover[:60]!r}; a plan holds only "
                '<agent id=".." type=".." .../> and <edge from=".." to=".."/> elements'
            )
        for kind, body in _TAG.findall(text):
            stripped = _ATTR.sub("", body).strip()
            if stripped:
                raise PlanError(f"cannot read attributes {stripped!r} in <{kind} {body.strip()}/>: write name=\"value\"")
            attrs: dict[str, str] = {}
            for name, double_quoted, single_quoted in _ATTR.findall(body):
                if name in attrs:
                    raise PlanError(f"attribute {name!r} twice in <{kind} {body.strip()}/>: keep one {name}=\"..\"")
                attrs[name] = unescape(double_quoted or single_quoted, _UNQUOTES)
            if kind == "edge":
                unknown = set(attrs) - {"from", "to"}
                if unknown or "from" not in attrs or "to" not in attrs:
                    raise PlanError(f'edge <edge{body}/> must have exactly from=".." and to=".."')
                edges.append(Edge(attrs["from"], attrs["to"]))
            else:
                node_id = attrs.pop("id", None)
                agent = attrs.pop("type", None)
                if node_id is None or agent is None:
                    raise PlanError(f'agent <agent{body}/> needs both id=".." and type=".."')
                nodes.append(PlanNode(node_id, agent, attrs))
        return cls.build(nodes, edges, tiers=tiers)

    @classmethod
    def build(
        cls,
        nodes: Iterable[PlanNode | Mapping],
        edges: Iterable[Edge | tuple[str, str]] = (),
        *,
        tiers: Iterable[str] = DEFAULT_TIERS,
    ) -> Plan:
        """Build from nodes (PlanNode or ``{"id", "agent", "params"}`` dicts) and edges (pairs)."""
        built_nodes = []
        for n in nodes:
            if isinstance(n, PlanNode):
                raw_id, agent, params = n.id, n.agent, dict(n.params)
            else:
                if "id" not in n:
                    raise PlanError(f'node {dict(n)!r} has no id; give it id="a1" (a letter, then letters, digits, "_" or "-")')
                if "agent" not in n:
                    raise PlanError(f"node {n['id']!r} has no agent type; give it agent= one of {', '.join(AGENT_TYPES)}")
                raw_id, agent, params = n["id"], n["agent"], dict(n.get("params", {}))
            _check_id(raw_id)
            built_nodes.append(PlanNode(raw_id, agent, MappingProxyType(_coerce_params(raw_id, agent, params))))
        built_edges = []
        for e in edges:
            if not isinstance(e, Edge):
                pair = tuple(e) if isinstance(e, tuple | list) else ()
                if len(pair) != 2:
                    raise PlanError(f"edge {e!r} is not a pair: give each edge as (from, to)")
                e = Edge(*pair)
            built_edges.append(e)
        return cls(tuple(built_nodes), tuple(built_edges), tuple(tiers))

    # views ----------------------------------------------------------------------------------
    def render(self) -> str:
        """Canonical text: same plan, same bytes."""
        return "\n".join([n.render() for n in self.nodes] + [e.render() for e in self.edges])

    @property
    def plan_id(self) -> str:
        """Stable 12-hex id of the canonical text."""
        return hashlib.sha1(self.render().encode()).hexdigest()[:12]

    @property
    def sink(self) -> str:
        return next(n.id for n in self.nodes if not self.children(n.id))

    def node(self, node_id: str) -> PlanNode:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)

    def parents(self, node_id: str) -> tuple[str, ...]:
        return tuple(e.source for e in self.edges if e.target == node_id)

    def children(self, node_id: str) -> tuple[str, ...]:
        return tuple(e.target for e in self.edges if e.source == node_id)

    def depths(self) -> dict[str, int]:
        """Depth of every node: 0 for sources, else 1 + the deepest parent."""
        depth: dict[str, int] = {}
        for n in self.nodes:  # nodes are in topological order
            ps = self.parents(n.id)
            depth[n.id] = 1 + max(depth[p] for p in ps) if ps else 0
        return depth

    @property
    def max_depth(self) -> int:
        return max(self.depths().values())

    def prefix(self, max_depth: int) -> tuple[PlanNode, ...]:
        """The nodes that run when execution stops after ``max_depth`` (inclusive)."""
        depth = self.depths()
        return tuple(n for n in self.nodes if depth[n.id] <= max_depth)

    def shape(self) -> str:
        """The plan with parameters and tiers dropped: agent types and wiring only.

        Two plans share a shape when they call the same agent types wired the same way, e.g.
        ``WebSearch>SelfConsistency``. Used to ask whether one kind of plan wins everywhere.
        """
        depth = self.depths()
        parts = []
        for n in self.nodes:
            ps = sorted(self.node(p).agent for p in self.parents(n.id))
            parts.append(f"{depth[n.id]}:{'+'.join(ps)}>{n.agent}" if ps else f"{depth[n.id]}:{n.agent}")
        return " ".join(sorted(parts))

    def tiers_used(self) -> tuple[str, ...]:
        return tuple(sorted({n.model for n in self.nodes if n.model}))


def _rebuild_node(node_id: str, agent: str, params: dict) -> PlanNode:
    return PlanNode(node_id, agent, MappingProxyType(params))


# validation ---------------------------------------------------------------------------------
def _check_id(node_id: object) -> None:
    if not isinstance(node_id, str) or not _ID.fullmatch(node_id):
        raise PlanError(
            f"node id {node_id!r} is invalid: use a string that starts with a letter, then letters, "
            "digits, '_' or '-' (max 32)"
        )


def _coerce_params(node_id: str, agent: str, params: dict) -> dict:
    spec = AGENT_TYPES.get(agent) if isinstance(agent, str) else None
    if spec is None:
        raise PlanError(
            f"node {node_id!r}: unknown agent type {agent!r}; use one of {', '.join(AGENT_TYPES)}"
        )
    out: dict[str, str | int] = {}
    for key, value in params.items():
        if key in ("model", "role"):
            out[key] = str(value)
            continue
        p = spec.param(key)
        if p is None:
            allowed = ", ".join(["model", "role", *(q.name for q in spec.params)])
            raise PlanError(f"node {node_id!r} ({agent}): unknown parameter {key!r}; {agent} takes {allowed}")
        try:
            ivalue = int(str(value).strip())
        except ValueError:
            raise PlanError(
                f"node {node_id!r} ({agent}): {key}={value!r} is not an integer; write {key}=\"{p.low}\"..\"{p.high}\""
            ) from None
        out[key] = ivalue
    return out


def _validate(plan: Plan) -> None:
    if not plan.nodes:
        raise PlanError("a plan needs at least one agent node")
    seen: set[str] = set()
    for n in plan.nodes:
        _check_id(n.id)
        if n.id in seen:
            raise PlanError(f"node id {n.id!r} appears twice; give every agent a unique id")
        seen.add(n.id)
        spec = AGENT_TYPES.get(n.agent) if isinstance(n.agent, str) else None
        if spec is None:
            raise PlanError(f"node {n.id!r}: unknown agent type {n.agent!r}; use one of {', '.join(AGENT_TYPES)}")
        if n.model is None and spec.model_required:
            raise PlanError(f'node {n.id!r} ({n.agent}): missing model; add model="{plan.tiers[0]}" (tiers: {", ".join(plan.tiers)})')
        if n.model is not None and n.model not in plan.tiers:
            raise PlanError(f"node {n.id!r} ({n.agent}): unknown model tier {n.model!r}; use one of {', '.join(plan.tiers)}")
        for p in spec.params:
            if p.name not in n.params:
                raise PlanError(f'node {n.id!r} ({n.agent}): missing parameter {p.name}; add {p.name}="{p.low}" ({p.doc}, {p.low}..{p.high})')
            value = n.params[p.name]
            if not isinstance(value, int) or not p.low <= value <= p.high:
                raise PlanError(f"node {n.id!r} ({n.agent}): {p.name}={value!r} is out of range; use {p.low}..{p.high}")
        extra = set(n.params) - {"model", "role"} - {p.name for p in spec.params}
        if extra:
            raise PlanError(f"node {n.id!r} ({n.agent}): unknown parameter(s) {', '.join(sorted(extra))}")
    for e in plan.edges:
        for end in (e.source, e.target):
            if end not in seen:
                raise PlanError(f"edge {e.source!r} -> {e.target!r} is dangling: no node {end!r}; add the node or drop the edge")
        if e.source == e.target:
            raise PlanError(f"edge {e.source!r} -> {e.target!r} is a self-loop: a plan is acyclic")
    _topological_order(plan.nodes, plan.edges)  # raises on cycles
    sinks = [n.id for n in plan.nodes if not any(e.source == n.id for e in plan.edges)]
    if len(sinks) != 1:
        raise PlanError(
            f"a plan needs exactly one sink (a node whose output is the final answer); found {len(sinks)}: "
            f"{', '.join(sinks)}; add edges so that all of them feed one final node"
        )


def _topological_order(nodes: Iterable[PlanNode], edges: Iterable[Edge]) -> dict[str, int]:
    """Kahn's algorithm with ties broken by id; raises PlanError naming the nodes of a cycle."""
    ids = sorted(n.id for n in nodes)
    indeg = {i: 0 for i in ids}
    out: dict[str, list[str]] = {i: [] for i in ids}
    for e in set(edges):
        if e.source in out and e.target in indeg:
            out[e.source].append(e.target)
            indeg[e.target] += 1
    ready = sorted(i for i in ids if indeg[i] == 0)
    order: dict[str, int] = {}
    while ready:
        i = ready.pop(0)
        order[i] = len(order)
        for j in sorted(out[i]):
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
        ready.sort()
    if len(order) != len(ids):
        cyclic = [i for i in ids if i not in order]
        raise PlanError(f"plan has a cycle through nodes {', '.join(cyclic)}; a plan must be a DAG: remove an edge")
    return order
