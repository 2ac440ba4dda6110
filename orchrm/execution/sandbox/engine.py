"""The sandbox backend: agent types implemented once, over any :class:`SandboxDomain`.

Semantics (DESIGN §4), with every probability in :mod:`.noise`:

- ``CoT``: one attempt, reading the parents' documents and drafts.
- ``SelfConsistency(k)``: k independent attempts, majority vote by the domain's ``vote_key``
  (ties go to the earliest sample). Votes cannot fix an error every sample shares.
- ``Debate(agents, rounds)``: opening attempts, then per round each debater holding a minority
  answer adopts the majority's with probability ``debate_conform`` and otherwise critiques its
  own answer without tools; the final answer is the majority. It amplifies whatever the
  majority believes after the opening.
- ``Reflexion(iterations)``: take the parent's answer (or attempt one), then critique with tools
  (the domain's check: a calculator, running the docstring examples, re-reading documents),
  stopping early once a critique finds nothing to change. Over-correction lives in the domains'
  critique (``generic.overcorrect``).
- ``WebSearch(queries, top_k)``: real BM25 retrieval over the domain's corpus; no answer.

Tokens: every LLM call's prompt is assembled from pieces (instruction, question, documents,
drafts, peers' turns) and counted with :mod:`orchrm.util.tokens`; ``completion_tokens`` is the count of
the node's ``content`` (for WebSearch, of the query lines only: results are tool output).
"""

from __future__ import annotations

import importlib
import random
from collections import Counter
from collections.abc import Sequence

from orchrm.execution.backend import NodeOutput
from orchrm.execution.sandbox.config import NoiseConfig
from orchrm.execution.sandbox.domain import Attempt, Context, Doc, Retrieval, SandboxDomain
from orchrm.execution.tasks.base import Task
from orchrm.plans import PlanNode
from orchrm.util.tokens import count_joined, count_tokens

RESULTS_MARKER = "\n--- results ---\n"


def _majority(keys: Sequence[object]) -> tuple[object, int]:
    """Most common key (ties: the one seen first) and its count."""
    counts = Counter(keys)
    best = max(counts.values())
    for k in keys:
        if counts[k] == best:
            return k, best
    raise ValueError("no votes")


# domain name -> "module:Class"; imported on first use so nothing heavy loads at import time
DOMAINS: dict[str, str] = {
    "math": "orchrm.execution.sandbox.math:MathDomain",
    "code": "orchrm.execution.sandbox.code:CodeDomain",
    "multihop": "orchrm.execution.sandbox.multihop:MultihopDomain",
    "webqa": "orchrm.execution.sandbox.webqa:WebqaDomain",
    "generic": "orchrm.execution.sandbox.generic:GenericDomain",
}


def make_domain(name: str, noise: NoiseConfig) -> SandboxDomain:
    """The simulator of domain ``name`` (the generic one for a domain the sandbox does not know)."""
    target = DOMAINS.get(name, DOMAINS["generic"])
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)(noise)


class SandboxBackend:
    """Runs plans with no LLM: ``SandboxBackend(noise).run_node(task, node, parents, ...)``."""

    name = "sandbox"

    def __init__(self, noise: NoiseConfig | None = None, domains: dict[str, SandboxDomain] | None = None) -> None:
        self.noise = noise or NoiseConfig()
        self._domains: dict[str, SandboxDomain] = dict(domains or {})

    # Backend protocol -----------------------------------------------------------------------
    @property
    def tiers(self) -> tuple[str, ...]:
        return tuple(self.noise.tiers)

    def cost_weight(self, tier: str | None) -> float:
        return self.noise.tiers[tier].cost_weight if tier else 1.0

    def domain(self, task: Task) -> SandboxDomain:
        # free-text tasks and users' own domains carry no simulation metadata: generic domain
        key = "generic" if task.metadata.get("generic") else task.domain
        dom = self._domains.get(key)
        if dom is None:
            dom = self._domains[key] = make_domain(key, self.noise)
        return dom

    def run_node(
        self, task: Task, node: PlanNode, parents: Sequence[NodeOutput], *, rng: random.Random, shared: dict
    ) -> NodeOutput:
        dom = self.domain(task)
        docs: list[Doc] = []
        drafts: list[Attempt] = []
        for p in parents:
            if isinstance(p.state, Retrieval):
                docs.extend(d for d in p.state.docs if d not in docs)
            elif isinstance(p.state, Attempt):
                drafts.append(p.state)
        ctx = Context(task=task, state=dom.state(task), docs=tuple(docs), drafts=tuple(drafts), shared=shared)
        run = getattr(self, f"_run_{node.agent}")
        return run(dom, ctx, node, parents, rng)

    def quality(self, task: Task, output: NodeOutput) -> float | None:
        dom = self.domain(task)
        if isinstance(output.state, Retrieval):
            return dom.retrieval_quality(task, output.state)
        return dom.quality(task, output.answer)

    # prompts --------------------------------------------------------------------------------
    @staticmethod
    def _instruction(dom: SandboxDomain, node: PlanNode) -> str:
        if node.role:
            from orchrm.execution.roles import roles

            role = roles().get(node.role)
            if role is not None and role.prompt:
                return role.prompt
        return dom.instruction(node.agent)

    def _base_prompt(self, dom: SandboxDomain, ctx: Context, node: PlanNode, parents: Sequence[NodeOutput]) -> list[str]:
        pieces = [self._instruction(dom, node), "Question:", ctx.task.question]
        if ctx.docs:
            pieces.append("Documents:")
            pieces += dom.render_docs(ctx.docs)
        for p in parents:
            if not isinstance(p.state, Retrieval):
                pieces += [f"Draft from {p.agent}:", p.content]
        return pieces

    def _confidence(self, attempt: Attempt, rng: random.Random) -> float:
        c = attempt.correct_prob + rng.gauss(0.0, self.noise.generic.confidence_noise)
        return min(1.0, max(0.0, c))

    @staticmethod
    def _output(node: PlanNode, content: str, answer: str | None, prompt_tokens: int, confidence: float, state) -> NodeOutput:
        return NodeOutput(
            node_id=node.id,
            agent=node.agent,
            content=content,
            answer=answer,
            prompt_tokens=prompt_tokens,
            completion_tokens=count_tokens(content),
            confidence=confidence,
            state=state,
        )

    # agent types ----------------------------------------------------------------------------
    def _run_CoT(self, dom, ctx, node, parents, rng) -> NodeOutput:
        prompt = self._base_prompt(dom, ctx, node, parents)
        a = dom.attempt(ctx, node.model, rng)
        return self._output(node, a.text, a.answer, count_joined(prompt), self._confidence(a, rng), a)

    def _run_SelfConsistency(self, dom, ctx, node, parents, rng) -> NodeOutput:
        k = node.int_param("k")
        prompt = self._base_prompt(dom, ctx, node, parents)
        samples = [dom.attempt(ctx, node.model, rng) for _ in range(k)]
        keys = [dom.vote_key(ctx, s) for s in samples]
        winner, votes = _majority(keys)
        chosen = samples[keys.index(winner)]
        lines = [f"Sample {i + 1}:\n{s.text}" for i, s in enumerate(samples)]
        lines.append(f"Vote: {chosen.answer} ({votes}/{k})")
        conf = 0.5 * self._confidence(chosen, rng) + 0.5 * votes / k
        return self._output(node, "\n".join(lines), chosen.answer, k * count_joined(prompt), conf, chosen)

    def _run_Debate(self, dom, ctx, node, parents, rng) -> NodeOutput:
        n, rounds = node.int_param("agents"), node.int_param("rounds")
        tier = node.model
        conform = self.noise.generic.debate_conform[tier]
        prompt = self._base_prompt(dom, ctx, node, parents)
        prompt_tokens = n * count_joined(prompt)
        debaters = [dom.attempt(ctx, tier, rng) for _ in range(n)]
        lines = [f"Debater {i + 1} opens:\n{a.text}" for i, a in enumerate(debaters)]
        for r in range(rounds):
            turns = [a.text for a in debaters]
            keys = [dom.vote_key(ctx, a) for a in debaters]
            new = []
            for i, a in enumerate(debaters):
                # each debater reads the other debaters' latest turns
                prompt_tokens += count_joined(prompt) + count_joined([t for j, t in enumerate(turns) if j != i])
                others = [k for j, k in enumerate(keys) if j != i]
                major, count = _majority(others)
                if keys[i] != major and count > len(others) / 2 and rng.random() < conform:
                    b = debaters[keys.index(major)]
                    new.append(b)
                    lines.append(f"Debater {i + 1}, round {r + 1}: I now agree with the others: {b.answer}")
                else:
                    c = dom.critique(ctx, a, tier, rng, tools=False)
                    new.append(c)
                    lines.append(f"Debater {i + 1}, round {r + 1}:\n{c.text}")
            debaters = new
        keys = [dom.vote_key(ctx, a) for a in debaters]
        winner, votes = _majority(keys)
        chosen = debaters[keys.index(winner)]
        lines.append(f"Consensus: {chosen.answer} ({votes}/{n})")
        conf = 0.5 * self._confidence(chosen, rng) + 0.5 * votes / n
        return self._output(node, "\n".join(lines), chosen.answer, prompt_tokens, conf, chosen)

    def _run_Reflexion(self, dom, ctx, node, parents, rng) -> NodeOutput:
        tier = node.model
        prompt = self._base_prompt(dom, ctx, node, parents)
        prompt_tokens = 0
        lines: list[str] = []
        if ctx.drafts:
            current = ctx.drafts[-1]
        else:
            current = dom.attempt(ctx, tier, rng)
            prompt_tokens += count_joined(prompt)
            lines.append(f"Attempt:\n{current.text}")
        for it in range(node.int_param("iterations")):
            prompt_tokens += count_joined(prompt) + count_tokens(current.text)
            revised = dom.critique(ctx, current, tier, rng, tools=True)
            lines.append(f"Reflection {it + 1}:\n{revised.text}")
            unchanged = revised.answer == current.answer
            current = revised
            if unchanged:
                break
        lines.append(f"Answer: {current.answer}")
        return self._output(node, "\n".join(lines), current.answer, prompt_tokens, self._confidence(current, rng), current)

    def _run_WebSearch(self, dom, ctx, node, parents, rng) -> NodeOutput:
        queries, top_k = node.int_param("queries"), node.int_param("top_k")
        prompt = [self._instruction(dom, node), "Question:", ctx.task.question]
        for p in parents:
            if not isinstance(p.state, Retrieval):
                prompt += [f"Draft from {p.agent}:", p.content]
        ret = dom.retrieve(ctx, queries, top_k, node.model, rng)
        written = "\n".join(f"Query {i + 1}: {q}" for i, q in enumerate(ret.queries))
        results = "\n".join(f"[{d.doc_id}] {d.title}: {d.text}" for d in ret.docs) or "(no results)"
        out = NodeOutput(
            node_id=node.id,
            agent=node.agent,
            content=written + RESULTS_MARKER + results,
            answer=None,
            prompt_tokens=count_joined(prompt),
            completion_tokens=count_tokens(written),
            confidence=0.0,
            state=ret,
        )
        return out
