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

MAS-Orchestra's schema is read and written too, so traces of such a system get structure:
``Plan.parse`` takes it whenever the text has an ``<agent>``, ``<agent_id>`` or ``<agent_name>``
tag, and ``plan.render(style="mas-orchestra")`` writes it::

    <agent>
      <agent_id>a2</agent_id>
      <agent_name>SCAgent</agent_name>
      <agent_description>k independent runs, answer by majority vote</agent_description>
      <required_arguments>
        <agent_input>${a1}</agent_input>
        <model>small</model>
        <k>5</k>
      </required_arguments>
    </agent>
    <edge>
      <from>a1</from><to>a2</to>
    </edge>

- ``<agent_name>`` CoTAgent, SCAgent, DebateAgent, ReflexionAgent, WebSearchAgent is our CoT,
  SelfConsistency, Debate, Reflexion, WebSearch; ``<agent_id>`` the node id, checked as ours are;
  ``<from>``/``<to>`` pairs in the ``<edge>`` block the edges.
- ``<required_arguments>`` holds one ``<name>value</name>`` per argument (what render writes); a
  JSON object or ``name: value`` lines are read too. Names: ``model``, the type's parameters,
  ``role``, or an alias (:data:`MAS_ARGUMENT_ALIASES`: ``samples`` for ``k``, ...). A parameter
  left out takes MAS-Orchestra's own setting (:data:`MAS_DEFAULTS`; ``model`` the first tier, as it
  runs every sub-agent on one model; a DebateAgent has one debater per ``<debate_roles>`` entry).
  Any other argument is an error, as an unknown attribute is in our form.
- ``<agent_input>`` (the sub-task, citing other agents as ``${id}``), ``<debate_roles>`` and
  ``<agent_description>`` stay on the node (``text_args``, ``description``) to be written back, but
  are not part of the plan: equality, the canonical text and ``plan_id`` ignore them. A node
  without them is written with its parents' ``${id}`` as input and its type's doc as description.
- ``<thinking>`` is dropped; other text outside the blocks is an error. Element text loses its
  surrounding whitespace and is XML-unescaped; render escapes it, so
  ``Plan.parse(plan.render(style="mas-orchestra")) == plan``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from xml.sax.saxutils import escape, unescape

from orchrm.errors import PlanError

DEFAULT_TIERS: tuple[str, ...] = ("small", "large")
#: the samplers (orchestrators) a collection can share its plans among (``CollectConfig.orchestrators``;
#: :mod:`orchrm.execution.samplers` implements them)
SAMPLERS: tuple[str, ...] = ("base", "panel", "specialized")
#: samplers whose plans do not read the question (the "base" side of specialized-over-base pairs)
QUESTION_BLIND: tuple[str, ...] = ("base", "panel")


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
    """One agent call. ``params`` holds ``model`` (tier), the type's integer parameters, ``role``.

    ``description`` and ``text_args`` (``agent_input``, ``debate_roles``) are what a MAS-Orchestra
    plan says about the node beyond its parameters. They ride along for
    ``render(style="mas-orchestra")`` but are not part of the plan: equality, hashing, the canonical
    text and ``plan_id`` ignore them.
    """

    id: str
    agent: str
    params: Mapping[str, str | int] = field(default_factory=dict)
    description: str | None = field(default=None, compare=False, repr=False)
    text_args: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def model(self) -> str | None:
        value = self.params.get("model")
        return None if value is None else str(value)

    @property
    def role(self) -> str | None:
        value = self.params.get("role")
        return None if value is None else str(value)

    def __reduce__(self):  # MappingProxyType does not pickle; rebuild from plain dicts
        return (_rebuild_node, (self.id, self.agent, dict(self.params), self.description, dict(self.text_args)))

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
        """Parse plan text and validate it: our ``<agent id=".." type=".."/>`` form (attribute
        order, quotes and whitespace are free) or MAS-Orchestra's ``<agent>`` blocks, told apart
        by an ``<agent>``, ``<agent_id>`` or ``<agent_name>`` tag (see the module docstring)."""
        if not isinstance(text, str) or not text.strip():
            raise PlanError("empty plan text: a plan needs at least one <agent .../> element")
        tiers = tuple(tiers)
        if _MAS_DETECT.search(text):
            mas_nodes, mas_edges = _parse_mas(text, tiers)
            return cls.build(mas_nodes, mas_edges, tiers=tiers)
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
                description, text_args = n.description, dict(n.text_args)
            else:
                if "id" not in n:
                    raise PlanError(f'node {dict(n)!r} has no id; give it id="a1" (a letter, then letters, digits, "_" or "-")')
                if "agent" not in n:
                    raise PlanError(f"node {n['id']!r} has no agent type; give it agent= one of {', '.join(AGENT_TYPES)}")
                raw_id, agent, params = n["id"], n["agent"], dict(n.get("params", {}))
                description, text_args = n.get("description"), dict(n.get("text_args", {}))
            _check_id(raw_id)
            built_nodes.append(
                PlanNode(
                    raw_id,
                    agent,
                    MappingProxyType(_coerce_params(raw_id, agent, params)),
                    _check_description(raw_id, description),
                    MappingProxyType(_check_text_args(raw_id, text_args)),
                )
            )
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
    def render(self, style: str = "orchrm") -> str:
        """Canonical text: same plan, same bytes. ``style="mas-orchestra"`` writes MAS-Orchestra's
        ``<agent>`` blocks and ``<edge>`` block instead (module docstring); ``plan_id`` and the
        reward model read the default style."""
        if style == "mas-orchestra":
            return _render_mas(self)
        if style != "orchrm":
            raise PlanError(f"unknown plan style {style!r}; use 'orchrm' (the default) or 'mas-orchestra'")
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


def _rebuild_node(node_id: str, agent: str, params: dict, description: str | None = None, text_args: dict | None = None) -> PlanNode:
    return PlanNode(node_id, agent, MappingProxyType(params), description, MappingProxyType(text_args or {}))


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


def _check_description(node_id: str, description: object) -> str | None:
    if description is None or description == "":
        return None
    if not isinstance(description, str):
        raise PlanError(f"node {node_id!r}: description {description!r} is not text; give a string or None")
    return description


def _check_text_args(node_id: str, text_args: dict) -> dict:
    for key, value in text_args.items():
        if key not in MAS_TEXT_ARGS:
            raise PlanError(f"node {node_id!r}: unknown text argument {key!r}; text_args holds only {', '.join(MAS_TEXT_ARGS)}")
        if not isinstance(value, str):
            raise PlanError(f"node {node_id!r}: text argument {key}={value!r} is not text; give a string")
    return text_args


# MAS-Orchestra's schema ---------------------------------------------------------------------
#: MAS-Orchestra's ``<agent_name>`` -> our agent type
MAS_AGENT_NAMES: Mapping[str, str] = MappingProxyType(
    {
        "CoTAgent": "CoT",
        "SCAgent": "SelfConsistency",
        "DebateAgent": "Debate",
        "ReflexionAgent": "Reflexion",
        "WebSearchAgent": "WebSearch",
    }
)
_MAS_NAME_OF = {ours: theirs for theirs, ours in MAS_AGENT_NAMES.items()}
_MAS_AGENT_OF = {theirs.lower(): ours for theirs, ours in MAS_AGENT_NAMES.items()}

#: MAS-Orchestra's arguments that are text, not parameters (kept on ``PlanNode.text_args``)
MAS_TEXT_ARGS: tuple[str, ...] = ("agent_input", "debate_roles")

#: What MAS-Orchestra's own agents run with, for a block that does not set a parameter: SCAgent
#: votes over 5 samples; DebateAgent runs 5 rounds, the opening and 4 exchanges; ReflexionAgent
#: up to 5 critique rounds; WebSearchAgent up to 5 search iterations of 5 results each.
MAS_DEFAULTS: Mapping[str, Mapping[str, int]] = MappingProxyType(
    {
        "SelfConsistency": MappingProxyType({"k": 5}),
        "Debate": MappingProxyType({"rounds": 4}),
        "Reflexion": MappingProxyType({"iterations": 5}),
        "WebSearch": MappingProxyType({"queries": 5, "top_k": 5}),
    }
)

#: other names accepted in ``<required_arguments>`` -> our parameter (used where the type takes it)
MAS_ARGUMENT_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "tier": "model",
        "samples": "k",
        "num_samples": "k",
        "num_repeated_samples": "k",
        "num_agents": "agents",
        "debaters": "agents",
        "num_rounds": "rounds",
        "debate_rounds": "rounds",
        "max_iterations": "iterations",
        "num_iterations": "iterations",
        "reflections": "iterations",
        "num_queries": "queries",
        "num_results": "top_k",
        "max_results": "top_k",
    }
)

_MAS_DETECT = re.compile(r"<\s*(?:agent|agent_id|agent_name)\s*>", re.I)
_MAS_BLOCK = re.compile(r"<\s*(thinking|agent|edge)\s*>(.*?)<\s*/\s*\1\s*>|<\s*(edge)\s*/\s*>", re.S | re.I)
_MAS_ELEMENT = re.compile(r"<\s*([A-Za-z_][\w\-]*)\s*>(.*?)<\s*/\s*\1\s*>|<\s*([A-Za-z_][\w\-]*)\s*/\s*>", re.S | re.I)
_MAS_OPEN_AGENT = re.compile(r"<\s*agent\s*>", re.I)
_MAS_FIELDS = ("agent_id", "agent_name", "agent_description", "required_arguments")
_MAS_LINE = re.compile(r"([A-Za-z_][\w\-]*)\s*[:=]\s*(.*)")


def _mas_text(raw: str) -> str:
    """An element's text: surrounding whitespace dropped (as MAS-Orchestra's parser does), entities read."""
    return unescape(raw.strip(), _UNQUOTES)


def _mas_elements(body: str) -> tuple[list[tuple[str, str]], str]:
    """``(name, raw text)`` of each child element of ``body`` in order (names in lower case), and
    what is left between them."""
    elements = [((m.group(1) or m.group(3)).lower(), m.group(2) or "") for m in _MAS_ELEMENT.finditer(body)]
    return elements, _MAS_ELEMENT.sub("", body).strip()


def _parse_mas(text: str, tiers: tuple[str, ...]) -> tuple[list[PlanNode], list[Edge]]:
    """MAS-Orchestra plan text -> our nodes and edges (validated by :meth:`Plan.build` after)."""
    leftover = _MAS_BLOCK.sub("", text).strip()
    if leftover:
        raise PlanError(
            f"unexpected text in MAS-Orchestra plan: {leftover[:60]!r}; it holds only a <thinking> block, "
            "<agent>...</agent> blocks and one <edge>...</edge> block"
        )
    nodes: list[PlanNode] = []
    edges: list[Edge] = []
    for m in _MAS_BLOCK.finditer(text):
        kind = (m.group(1) or m.group(3)).lower()
        if kind == "agent":
            nodes.append(_mas_node(len(nodes) + 1, m.group(2), tiers))
        elif kind == "edge":
            edges += _mas_edges(m.group(2) or "")
    if not nodes:
        raise PlanError("MAS-Orchestra plan has no <agent>...</agent> block: a plan needs at least one agent")
    return nodes, edges


def _mas_node(index: int, body: str, tiers: tuple[str, ...]) -> PlanNode:
    block = f"<agent> block {index}"
    if _MAS_OPEN_AGENT.search(body):
        raise PlanError(f"{block} is not closed: add </agent> before the next <agent>")
    elements, leftover = _mas_elements(body)
    if leftover:
        raise PlanError(f"unexpected text in {block}: {leftover[:60]!r}; it holds only {', '.join(f'<{f}>' for f in _MAS_FIELDS)}")
    first_id = next((_mas_text(raw) for name, raw in elements if name == "agent_id"), "")
    named = f"{block} ({first_id!r})" if first_id else block
    fields: dict[str, str] = {}
    for name, raw in elements:
        if name not in _MAS_FIELDS:
            raise PlanError(f"unexpected <{name}> in {named}; an agent block holds {', '.join(f'<{f}>' for f in _MAS_FIELDS)}")
        if name in fields:
            raise PlanError(f"<{name}> twice in {named}: keep one")
        fields[name] = raw
    node_id = _mas_text(fields.get("agent_id", ""))
    if not node_id:
        raise PlanError(f"{block} has no <agent_id>; add <agent_id>A1</agent_id> (a letter, then letters, digits, '_' or '-')")
    if not _ID.fullmatch(node_id):
        raise PlanError(
            f"{block}: agent_id {node_id!r} is invalid; use an id that starts with a letter, then letters, "
            "digits, '_' or '-' (max 32), and use the same id in <edge> and ${...} references"
        )
    block = f"{block} ({node_id!r})"
    name = _mas_text(fields.get("agent_name", ""))
    known = ", ".join(f"{theirs} ({ours})" for theirs, ours in MAS_AGENT_NAMES.items())
    if not name:
        raise PlanError(f"{block} has no <agent_name>; use one of {known}")
    agent = _MAS_AGENT_OF.get(name.lower())
    if agent is None:
        raise PlanError(f"{block}: unknown agent_name {name!r}; use one of {known}")
    where = f"<agent> block {index} ({node_id!r}, {name})"
    params, text_args = _mas_arguments(fields.get("required_arguments", ""), where, agent, tiers)
    return PlanNode(node_id, agent, params, _mas_text(fields.get("agent_description", "")) or None, text_args)


def _mas_raw_arguments(body: str, where: str) -> list[tuple[str, object]]:
    """``(name, value)`` pairs of a ``<required_arguments>`` body: ``<name>value</name>`` elements,
    then whatever is left as a JSON object or as ``name: value`` (or ``name = value``) lines."""
    elements, rest = _mas_elements(body)
    pairs: list[tuple[str, object]] = [(name, _mas_text(raw)) for name, raw in elements]
    if rest.startswith("{"):
        try:
            obj = json.loads(unescape(rest, _UNQUOTES))
        except json.JSONDecodeError as e:
            raise PlanError(f"{where}: <required_arguments> is not valid JSON ({e.msg} at char {e.pos}); write one <name>value</name> per argument") from None
        if not isinstance(obj, dict):
            raise PlanError(f"{where}: <required_arguments> JSON must be an object of name: value")
        return pairs + list(obj.items())
    for line in filter(None, (ln.strip() for ln in rest.splitlines())):
        m = _MAS_LINE.fullmatch(line)
        if m is None:
            raise PlanError(
                f"{where}: cannot read {line[:60]!r} in <required_arguments>; write one <name>value</name> "
                "element (or one name: value line) per argument"
            )
        value = _mas_text(m.group(2))
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        pairs.append((m.group(1), value))
    return pairs


def _mas_roles(value: object, where: str) -> list[str]:
    roles = value
    if isinstance(value, str):
        try:
            roles = json.loads(value)
        except json.JSONDecodeError:
            try:
                roles = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                roles = None
    if not isinstance(roles, list | tuple) or not all(isinstance(r, str) and r.strip() for r in roles):
        raise PlanError(f'{where}: debate_roles {value!r} is not a list of role names; write <debate_roles>["Role 1", "Role 2"]</debate_roles>')
    return [r.strip() for r in roles]


def _mas_arguments(body: str, where: str, agent: str, tiers: tuple[str, ...]) -> tuple[dict, dict]:
    """``<required_arguments>`` -> (params, text_args), with MAS-Orchestra's defaults filled in."""
    spec = AGENT_TYPES[agent]
    takes = {"model", "role", *(p.name for p in spec.params)}
    params: dict[str, str | int] = {}
    text_args: dict[str, str] = {}
    for raw_name, value in _mas_raw_arguments(body, where):
        name = raw_name.lower()
        if name == "agent_input" or (name == "debate_roles" and agent == "Debate"):
            if name in text_args:
                raise PlanError(f"{where}: argument {name!r} twice in <required_arguments>: keep one")
            if name == "agent_input":
                text = "" if value is None else value if isinstance(value, str) else json.dumps(value)
                text_args[name] = "" if text == '""' else text  # "" is MAS-Orchestra's "the question itself"
            else:
                text_args[name] = json.dumps(_mas_roles(value, where), ensure_ascii=False)
            continue
        key = name if name in takes else MAS_ARGUMENT_ALIASES.get(name)
        if key not in takes:
            allowed = ", ".join(["agent_input", *(["debate_roles"] if agent == "Debate" else []), *sorted(takes)])
            raise PlanError(f"{where}: unknown argument {raw_name!r} in <required_arguments>; {_MAS_NAME_OF[agent]} takes {allowed}")
        if key in params:
            raise PlanError(f"{where}: argument {key!r} twice in <required_arguments> (perhaps under another name): keep one")
        if key in ("model", "role"):
            params[key] = str(value)
            continue
        p = spec.param(key)
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()))):
            raise PlanError(f"{where}: {raw_name}={value!r} is not an integer; write <{key}>{p.low}</{key}> ({p.doc}, {p.low}..{p.high})")
        params[key] = int(value)
    if "debate_roles" in text_args:
        n_roles = len(json.loads(text_args["debate_roles"]))
        if params.setdefault("agents", n_roles) != n_roles:
            raise PlanError(f"{where}: agents={params['agents']} but {n_roles} debate_roles; give one role per debater")
    elif agent == "Debate" and "agents" not in params:
        raise PlanError(f'{where}: no debaters; add <debate_roles>["Role 1", "Role 2"]</debate_roles> or <agents>2</agents>')
    if spec.model_required:
        params.setdefault("model", tiers[0])  # MAS-Orchestra runs every sub-agent on one model
    for key, value in MAS_DEFAULTS.get(agent, {}).items():
        params.setdefault(key, value)
    return params, text_args


def _mas_edges(body: str) -> list[Edge]:
    elements, leftover = _mas_elements(body)
    if leftover:
        raise PlanError(f"unexpected text in the <edge> block: {leftover[:60]!r}; write <from>X</from><to>Y</to> pairs")
    edges, pending = [], None
    for name, raw in elements:
        end = _mas_text(raw)
        if name == "from" and pending is None:
            pending = end
        elif name == "to" and pending is not None:
            edges.append(Edge(pending, end))
            pending = None
        elif name in ("from", "to"):
            after = f"<from>{pending}</from>" if pending is not None else "the previous pair"
            raise PlanError(f"<edge> block: <{name}>{end}</{name}> after {after}; write <from>X</from><to>Y</to> pairs")
        else:
            raise PlanError(f"unexpected <{name}> in the <edge> block; it holds only <from>X</from><to>Y</to> pairs")
    if pending is not None:
        raise PlanError(f"<edge> block: <from>{pending}</from> has no <to> after it; write <from>X</from><to>Y</to> pairs")
    return edges


def _render_mas(plan: Plan) -> str:
    """MAS-Orchestra's schema; a node without an ``agent_input`` reads its parents' outputs (``${id}``)."""
    lines = []
    for n in plan.nodes:
        spec = AGENT_TYPES[n.agent]
        refs = "\n".join(f"${{{p}}}" for p in plan.parents(n.id))
        args = [("agent_input", n.text_args.get("agent_input", refs))]
        if "debate_roles" in n.text_args:
            args.append(("debate_roles", n.text_args["debate_roles"]))
        if n.model is not None:
            args.append(("model", n.model))
        args += [(p.name, str(n.params[p.name])) for p in spec.params]
        if n.role is not None:
            args.append(("role", n.role))
        lines += [
            "<agent>",
            f"  <agent_id>{n.id}</agent_id>",
            f"  <agent_name>{_MAS_NAME_OF[n.agent]}</agent_name>",
            f"  <agent_description>{escape(n.description or spec.doc)}</agent_description>",
            "  <required_arguments>",
            *(f"    <{k}>{escape(v)}</{k}>" for k, v in args),
            "  </required_arguments>",
            "</agent>",
        ]
    if plan.edges:
        lines += ["<edge>", *(f"  <from>{e.source}</from><to>{e.target}</to>" for e in plan.edges), "</edge>"]
    return "\n".join(lines)
