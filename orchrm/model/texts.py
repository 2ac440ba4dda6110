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
:func:`step_texts` builds a step's texts in either format; :func:`task_text` reads the question
back out of any prompt. A trained model's manifest records the format of its intermediate pairs
(:data:`INTERMEDIATE_FORMAT_KEY`, :func:`intermediate_format_of` at training), and serving reads it
back (:func:`intermediate_format`), so a step is scored with the texts the model learned. The module imports nothing but
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

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchrm.errors import ModelFileError, PlanError
from orchrm.plans import Plan, PlanNode

log = logging.getLogger("orchrm.model.texts")

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


# the format of intermediate pairs ----------------------------------------------------------------
#: the texts of an intermediate (node-level) pair, ``pairs.intermediate_action``: ``node``
#: (:func:`node_prompt`, :func:`node_action`) or ``plan_prefix`` (:func:`plan_prompt`, :attr:`NodeInfo.subplan`)
INTERMEDIATE_FORMATS: tuple[str, ...] = ("node", "plan_prefix")
#: the key of a model's manifest that records the format its intermediate pairs were written in
INTERMEDIATE_FORMAT_KEY = "intermediate_format"
#: the format of a model whose manifest records none: one saved before the format was recorded,
#: when serving always scored steps as ``node`` texts
LEGACY_INTERMEDIATE_FORMAT = "node"


def is_plan_text(text: str) -> bool:
    """Whether ``text`` is a rendered plan (part) alone: every line an ``<agent .../>`` or ``<edge .../>``."""
    return all(line.lstrip().startswith(_PLAN_LINE) for line in text.split(SEPARATOR))


def intermediate_format_of(prompts: Sequence[str], chosen: Sequence[str], rejected: Sequence[str]) -> str | None:
    """The format the node-level pairs ``(prompts, chosen, rejected)`` are written in, read from
    their texts: ``plan_prefix`` when every prompt is a question alone and every action a plan
    text, else ``node`` (an action that ends in an agent's output, or a prompt holding a plan
    prefix). None for no pairs. A table mixing both formats is named by its majority, with a
    warning: the model then learned texts that serving reads only one way."""
    if not len(prompts):
        return None
    prefix = [task_text(p) == p.rstrip() and is_plan_text(c) and is_plan_text(r) for p, c, r in zip(prompts, chosen, rejected, strict=True)]
    n = sum(prefix)
    if 0 < n < len(prefix):
        log.warning("the node-level pairs mix formats: %d of %d plan_prefix, the rest node; recording the majority", n, len(prefix))
    return "plan_prefix" if 2 * n > len(prefix) else "node"


def intermediate_format(manifest: Mapping[str, Any], *, what: str = "the model") -> str:
    """The format ``manifest`` records (:data:`INTERMEDIATE_FORMAT_KEY`); a manifest without it (a
    model saved before it was recorded) reads as :data:`LEGACY_INTERMEDIATE_FORMAT`, with a log line saying so."""
    value = manifest.get(INTERMEDIATE_FORMAT_KEY)
    if value is None:
        log.info("%s records no intermediate-pair format (saved before it was recorded): scoring steps as %r texts, "
                 "as every model of that time was served", what, LEGACY_INTERMEDIATE_FORMAT)
        return LEGACY_INTERMEDIATE_FORMAT
    if value not in INTERMEDIATE_FORMATS:
        raise ModelFileError(f"{what} records intermediate-pair format {value!r}, not one of {list(INTERMEDIATE_FORMATS)}: "
                             "upgrade orchrm, or retrain the model")
    return str(value)


def step_texts(fmt: str, question: str, nodes: Sequence[NodeInfo], outputs: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The prompts and actions that score the ``nodes`` of one step, in format ``fmt`` (what pair
    building wrote for them): ``node``: :func:`node_prompt` and :func:`node_action` with each
    node's output in ``outputs`` (by node id, "" when missing); ``plan_prefix``: the question and
    each node's sub-plan (its output is not part of the text)."""
    if fmt == "plan_prefix":
        return [plan_prompt(question)] * len(nodes), [n.subplan for n in nodes]
    if fmt != "node":
        raise ValueError(f"intermediate-pair format {fmt!r} is not one of {list(INTERMEDIATE_FORMATS)}")
    return [node_prompt(question, n.prefix) for n in nodes], [node_action(n.line, str(outputs.get(n.node_id, ""))) for n in nodes]


__all__ = [
    "INTERMEDIATE_FORMATS",
    "INTERMEDIATE_FORMAT_KEY",
    "LEGACY_INTERMEDIATE_FORMAT",
    "SEPARATOR",
    "NodeInfo",
    "functional_role",
    "intermediate_format",
    "intermediate_format_of",
    "is_plan_text",
    "node_action",
    "node_prompt",
    "plan_nodes",
    "plan_part_text",
    "plan_prompt",
    "step_texts",
    "subplan_text",
    "task_text",
]
