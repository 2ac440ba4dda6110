"""The texts the reward model reads: every prompt ``s`` and action ``a`` (DESIGN §3), built here only.

Pair building (:mod:`orchrm.data.pair_table`) writes these texts into the pair table and serving
(:mod:`orchrm.ops.serving`) scores with them, so a model is always asked what it was trained on:

============================  ==========================  ======================================
pair                          prompt ``s``                action ``a``
============================  ==========================  ======================================
plan-level                    :func:`plan_prompt`         the plan's canonical text
node-level (``node``)         :func:`node_prompt`         :func:`node_action`
node-level (``plan_prefix``)  :func:`plan_prompt`         :attr:`NodeInfo.subplan`
============================  ==========================  ======================================

:func:`plan_nodes` parses a plan text once into the pieces of its node-level texts;
:func:`task_text` reads the question back out of any prompt. The module imports nothing but
:mod:`orchrm.plans`: a serving process loads it without the sandbox, Prefect, GX or MLflow.

>>> info = plan_nodes('<agent id="s" type="WebSearch" queries="1" top_k="2"/>'
...                   '<agent id="r" type="CoT" model="small"/><edge from="s" to="r"/>')[1]
>>> print(node_prompt("Who founded Avalon?", info.prefix))
Who founded Avalon?
<agent id="s" type="WebSearch" queries="1" top_k="2"/>
>>> print(node_action(info.line, "Answer: Ada"))
<agent id="r" type="CoT" model="small"/>
Answer: Ada
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from orchrm.errors import PlanError
from orchrm.plans import Plan, PlanNode

#: what joins the parts of a prompt or an action (the question and its prefix, a node's line and
#: its output); plan texts themselves hold one element per line
SEPARATOR = "\n"
#: how the lines of a rendered plan (or plan part) begin
_PLAN_LINE = ("<agent ", "<edge ")


# prompts and actions ----------------------------------------------------------------------------
def plan_prompt(question: str) -> str:
    """The prompt of a plan-level pair and of a plan-prefix action: the question itself (a plan is
    scored before anything runs, so the state is the task alone)."""
    return question


def node_prompt(question: str, prefix: str) -> str:
    """The prompt of a node-level pair: the question, then a newline and the node's rendered
    ancestors (:attr:`NodeInfo.prefix`); the question alone at depth 0 (``prefix`` empty)."""
    return question + SEPARATOR + prefix if prefix else question


def node_action(line: str, content: str) -> str:
    """The action of a node-level pair: the node's own ``<agent .../>`` line (:attr:`NodeInfo.line`),
    a newline, and the output the agent wrote."""
    return line + SEPARATOR + content


def task_text(prompt: str) -> str:
    """The question of any prompt: the prompt without its trailing plan lines (and trailing
    whitespace), the inverse of :func:`node_prompt` (a plan prompt is returned as it is, less
    trailing whitespace).

    >>> task_text('What is 2 + 2?\\n<agent id="a1" type="CoT" model="small"/>')
    'What is 2 + 2?'
    """
    lines = prompt.split(SEPARATOR)
    while len(lines) > 1 and lines[-1].lstrip().startswith(_PLAN_LINE):
        lines.pop()
    return SEPARATOR.join(lines).rstrip()


# plan parts -------------------------------------------------------------------------------------
def plan_part_text(plan: Plan, ids: Collection[str]) -> str:
    """The nodes of ``plan`` whose id is in ``ids`` (in the plan's order), then the edges among
    them, one element per line as :meth:`Plan.render` lays them out; "" when ``ids`` is empty.
    All of a plan's ids give its canonical text."""
    return SEPARATOR.join(
        [n.render() for n in plan.nodes if n.id in ids]
        + [e.render() for e in plan.edges if e.source in ids and e.target in ids]
    )


def subplan_text(plan: Plan, node_id: str, ancestors: Collection[str]) -> str:
    """``node_id`` and its ``ancestors`` as a plan of their own, rendered canonically with ids
    renumbered ``a1, a2, ...`` in the plan's order: the plan prefix that produced the node's
    artifact, as a plan scorer reads plans (the same steps read the same, whatever ids the full
    plan gave them). A sink's sub-plan is its whole plan.

    >>> p = Plan.parse('<agent id="s" type="WebSearch" queries="1" top_k="2"/>'
    ...                '<agent id="r" type="CoT" model="small"/><agent id="v" type="Debate" model="small" agents="2" rounds="1"/>'
    ...                '<edge from="s" to="v"/><edge from="r" to="v"/>')
    >>> subplan_text(p, "r", set())
    '<agent id="a1" type="CoT" model="small"/>'
    """
    keep = [m for m in plan.nodes if m.id in ancestors or m.id == node_id]
    rename = {m.id: f"a{i + 1}" for i, m in enumerate(keep)}
    edges = [(rename[e.source], rename[e.target]) for e in plan.edges if e.source in rename and e.target in rename]
    return Plan.build([PlanNode(rename[m.id], m.agent, dict(m.params)) for m in keep], edges, tiers=plan.tiers).render()


def functional_role(agent: str) -> str:
    """The role of a node without a ``role`` attribute: ``retrieval`` (WebSearch, whose quality is
    recall of the gold documents) or ``reasoning`` (every agent that writes an answer). Two
    reasoning nodes at the same state answer the same question, whatever their agent type, so
    they are comparable: a depth-0 SelfConsistency against a depth-0 CoT of another plan."""
    return "retrieval" if agent == "WebSearch" else "reasoning"


@dataclass(frozen=True)
class NodeInfo:
    """One node of one plan, with the pieces of its node-level texts (:func:`plan_nodes`)."""

    node_id: str
    agent: str
    #: the node's ``role`` attribute, else its :func:`functional_role`
    role: str
    depth: int
    #: the node's own canonical ``<agent .../>`` line (the head of :func:`node_action`)
    line: str
    #: its ancestors rendered by :func:`plan_part_text` (the tail of :func:`node_prompt`); "" at depth 0
    prefix: str
    #: the ancestors' ids, in the plan's order
    ancestors: tuple[str, ...]
    #: :func:`subplan_text` of the node and its ancestors (the plan-prefix action)
    subplan: str


def plan_nodes(text: str) -> tuple[NodeInfo, ...] | None:
    """The :class:`NodeInfo` of every node of a plan text, in the plan's order, or None when the
    text is not a parseable plan (ingested traces may carry a free-form plan description: those
    artifacts only enter plan-level pairs)."""
    try:
        plan = Plan.parse(text)
    except PlanError:
        return None
    depth = plan.depths()
    ancestors: dict[str, set[str]] = {}
    for n in plan.nodes:  # topological order
        acc: set[str] = set()
        for p in plan.parents(n.id):
            acc |= ancestors[p] | {p}
        ancestors[n.id] = acc
    return tuple(
        NodeInfo(
            node_id=n.id,
            agent=n.agent,
            role=n.role or functional_role(n.agent),
            depth=depth[n.id],
            line=n.render(),
            prefix=plan_part_text(plan, ancestors[n.id]),
            ancestors=tuple(m.id for m in plan.nodes if m.id in ancestors[n.id]),
            subplan=subplan_text(plan, n.id, ancestors[n.id]),
        )
        for n in plan.nodes
    )


__all__ = [
    "SEPARATOR",
    "NodeInfo",
    "functional_role",
    "node_action",
    "node_prompt",
    "plan_nodes",
    "plan_part_text",
    "plan_prompt",
    "subplan_text",
    "task_text",
]
