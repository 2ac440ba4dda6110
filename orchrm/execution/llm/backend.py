"""The agent types as prompts on a real LLM: :class:`LLMBackend` runs any plan on any
:class:`~orchrm.execution.llm.base.LLMClient`.

Agents (DESIGN §3), with the same meaning as in the sandbox (:mod:`orchrm.execution.sandbox.engine`):

- ``CoT``: one greedy step-by-step answer.
- ``SelfConsistency(k)``: ``k`` samples in one ``complete(n=k)`` call (a local model batches
  them), majority vote over the extracted answers; confidence is the winner's vote share.
- ``Debate(agents, rounds)``: ``agents`` opening samples (one call), then every round each
  debater reads the others' latest answers and answers again (the round's debaters in one batch
  where the client batches); the final answer is the majority.
- ``Reflexion(iterations)``: start from the parent's draft (or answer first), then per
  iteration a tool check, a critique and a revision; it stops once a revision keeps the answer.
  The tool: in the code domain the task's docstring examples, run in the code sandbox
  (:mod:`orchrm.execution.sandbox.codeexec`), the checks the sandbox's Reflexion runs (the hidden
  tests stay the quality, never a tool); in math a calculator that recomputes every
  ``a op b = c`` of the draft.
- ``WebSearch(queries, top_k)``: the model writes ``queries`` search queries; each runs against
  the domain's local BM25 corpus (the sandbox's, :mod:`orchrm.execution.sandbox.retrieval`); the
  documents go to the children's prompts. No answer.

Parents feed children: retrieved documents and drafts (a parent's chosen completion) go into the
child's prompt. Answers are read per domain (:mod:`.answers`); a text with none is a parse failure
(``NodeOutput.parse_failed``, the artifact column ``parse_failed``), with answer None and quality 0.
``quality`` is the sandbox's rule of the domain (numeric match, hidden tests executed, EM, F1,
retrieval recall), so an artifact from a real model and one from the sandbox are scored alike.
Tokens are the client's own counts, summed over the node's calls. One model serves every tier
(``cost_weight`` 1): plans sampled for the sandbox's tiers run unchanged.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from orchrm.execution.backend import NodeOutput
from orchrm.execution.llm.answers import Extracted, check_arithmetic, extract_answer, majority
from orchrm.execution.llm.base import Completions, LLMClient, Message
from orchrm.execution.sandbox.config import NoiseConfig
from orchrm.execution.sandbox.domain import Doc, Retrieval
from orchrm.execution.tasks.base import BUILTIN_DOMAINS, Task
from orchrm.plans import DEFAULT_TIERS, PlanNode

#: what separates a WebSearch node's queries from its results in its content (as in the sandbox)
RESULTS_MARKER = "\n--- results ---\n"
#: characters of one retrieved document a child's prompt carries (a SQuAD paragraph fits)
DOC_CHARS = 700

#: how each domain's answer must be written: the instruction every prompt of the domain ends with
ANSWER_FORMATS: dict[str, str] = {
    "math": "Solve the grade-school math word problem. Think step by step, write every calculation out, "
            "and end with a last line 'Answer: <number>'.",
    "code": "Write the Python function that the signature and docstring ask for. Think briefly, then give "
            "the complete function in one ```python block.",
    "multihop": "Answer the question; it may need several facts in a row. Think step by step and end with a "
                "last line 'Answer: <a few words>'.",
    "webqa": "Answer the question, reading the documents when there are any. End with a last line "
             "'Answer: <a short phrase>'.",
    "generic": "Answer the task. Think step by step and end with a last line 'Answer: <answer>'.",
}
YES_NO_FORMAT = "Think step by step and end with a last line 'Answer: yes' or 'Answer: no'."
_YES_NO_QUESTION = re.compile(r"^\s*(is|are|was|were|do|does|did|can|could|would|will|has|have|had|should)\b", re.I)
_QUERY_PREFIX = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)]|query\s*\d*\s*[:.]|search\s*\d*\s*:)\s*", re.I)


@dataclass(frozen=True)
class Draft:
    """What an answering node hands its children: the completion it settled on and its answer."""

    agent: str
    text: str
    answer: str | None


@dataclass
class Usage:
    """Calls and tokens through one backend so far (a benchmark sizes a collection with it)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class _Context:
    task: Task
    domain: str  # the domain whose answer format and corpus apply (a free-text task's routed domain)
    node: PlanNode
    docs: tuple[Doc, ...]
    drafts: tuple[Draft, ...]


class _Calls:
    """The calls of one node: their texts and summed tokens."""

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.completion_tokens = 0


class LLMBackend:
    """Runs every agent type as prompts on ``client`` (see the module docstring).

    - ``tiers``: the tier names plans may use; all run on the one model (cost weight 1).
    - ``max_tokens``: the longest completion of any call.
    - ``temperature``: of the calls whose samples must differ (SelfConsistency, Debate); single
      answers, critiques, revisions and queries are greedy.
    - ``noise``: the sandbox config whose domains supply the quality rules, corpora and code
      sandbox (its noise is never used: nothing is simulated here).

    >>> backend = LLMBackend(make_client(config.backend), max_tokens=256)   # doctest: +SKIP
    >>> MultiAgentExecutor(backend=backend).run_plan(task, plan).rows       # doctest: +SKIP
    """

    def __init__(
        self,
        client: LLMClient,
        *,
        tiers: Sequence[str] = DEFAULT_TIERS,
        max_tokens: int = 256,
        temperature: float = 0.7,
        noise: NoiseConfig | None = None,
    ) -> None:
        from orchrm.execution.sandbox.engine import SandboxBackend

        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.client = client
        self.name = client.name
        self._tiers = tuple(tiers)
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._rules = SandboxBackend(noise)  # the domains' quality rules, corpora, code sandbox
        self.usage = Usage()
        self._lock = threading.Lock()

    # Backend protocol -----------------------------------------------------------------------
    @property
    def tiers(self) -> tuple[str, ...]:
        return self._tiers

    def cost_weight(self, tier: str | None) -> float:
        return 1.0

    def run_node(
        self, task: Task, node: PlanNode, parents: Sequence[NodeOutput], *, rng: random.Random, shared: dict
    ) -> NodeOutput:
        docs: list[Doc] = []
        drafts: list[Draft] = []
        for p in parents:
            if isinstance(p.state, Retrieval):
                docs.extend(d for d in p.state.docs if d not in docs)
            elif isinstance(p.state, Draft):
                drafts.append(p.state)
            elif p.content:  # another backend's output: its text is the draft
                drafts.append(Draft(p.agent, p.content, p.answer))
        domain = task.domain if task.domain in BUILTIN_DOMAINS else "generic"
        ctx = _Context(task, domain, node, tuple(docs), tuple(drafts))
        return getattr(self, f"_run_{node.agent}")(ctx)

    def quality(self, task: Task, output: NodeOutput) -> float | None:
        """The sandbox's quality rule of the task's domain (retrieval recall for a WebSearch)."""
        return self._rules.quality(task, output)

    # calls ----------------------------------------------------------------------------------
    def _complete(self, calls: _Calls, messages: Sequence[Message], *, n: int = 1, sample: bool = False) -> Completions:
        out = self.client.complete(messages, max_tokens=self.max_tokens, temperature=self.temperature if sample else 0.0, n=n)
        self._count(calls, [out])
        return out

    def _complete_each(self, calls: _Calls, conversations: Sequence[Sequence[Message]], *, sample: bool) -> list[Completions]:
        """One completion of each conversation: in one batch where the client batches
        (``complete_many``, a local model), else one call after the other."""
        temperature = self.temperature if sample else 0.0
        many = getattr(self.client, "complete_many", None)
        if callable(many):
            outs = list(many(conversations, max_tokens=self.max_tokens, temperature=temperature))
        else:
            outs = [self.client.complete(c, max_tokens=self.max_tokens, temperature=temperature) for c in conversations]
        self._count(calls, outs)
        return outs

    def _count(self, calls: _Calls, outs: Sequence[Completions]) -> None:
        for out in outs:
            calls.prompt_tokens += out.prompt_tokens
            calls.completion_tokens += out.completion_tokens
        with self._lock:
            self.usage.calls += len(outs)
            self.usage.prompt_tokens += sum(o.prompt_tokens for o in outs)
            self.usage.completion_tokens += sum(o.completion_tokens for o in outs)

    # prompts --------------------------------------------------------------------------------
    def instruction(self, ctx: _Context) -> str:
        """The system prompt: the node's role (if any), then how the domain's answer is written."""
        fmt = ANSWER_FORMATS[ctx.domain]
        if ctx.domain == "multihop" and _YES_NO_QUESTION.match(ctx.task.question):
            fmt = fmt.split(" Think")[0] + " " + YES_NO_FORMAT
        if ctx.node.role:
            from orchrm.execution.roles import roles

            role = roles().get(ctx.node.role)
            if role is not None and role.prompt:
                return f"{role.prompt} {fmt}"
        return fmt

    def _user(self, ctx: _Context) -> str:
        pieces = ["Question:", ctx.task.question.strip()]
        if ctx.docs:
            pieces.append("\nDocuments:")
            pieces += [f"[{d.title}] {d.text[:DOC_CHARS]}" for d in ctx.docs]
        for d in ctx.drafts:
            pieces += [f"\nDraft from a {d.agent} agent:", d.text.strip()]
        return "\n".join(pieces)

    def _messages(self, ctx: _Context) -> list[Message]:
        return [{"role": "system", "content": self.instruction(ctx)}, {"role": "user", "content": self._user(ctx)}]

    def _extract(self, ctx: _Context, text: str, finish_reason: str | None) -> Extracted:
        return extract_answer(
            ctx.domain,
            text,
            finished=finish_reason != "length",
            prompt=ctx.task.question,
            entry_point=ctx.task.metadata.get("entry_point"),
            yes_no=ctx.domain == "multihop" and bool(_YES_NO_QUESTION.match(ctx.task.question)),
        )

    def _vote_key(self, ctx: _Context, answer: str | None):
        """Answers with equal keys agree: the domain's own vote key (the canonical number; a
        program's outputs on the docstring examples; the SQuAD-normalised text)."""
        if answer is None:
            return None
        from orchrm.execution.sandbox.domain import Attempt, Context

        dom = self._rules.domain(ctx.task)
        if dom.name != ctx.domain:  # a free-text task: no simulation state, compare texts
            from orchrm.evaluation.pool import answer_key

            return answer_key(ctx.domain, answer)
        return dom.vote_key(Context(task=ctx.task, state=dom.state(ctx.task)), Attempt(text=answer, answer=answer))

    @staticmethod
    def _texts(out: Completions) -> list[tuple[str, str | None]]:
        reasons = out.finish_reasons or (None,) * len(out.texts)
        return list(zip(out.texts, reasons, strict=True))

    def _output(self, ctx: _Context, calls: _Calls, content: str, found: Extracted, text: str, confidence: float) -> NodeOutput:
        return NodeOutput(
            node_id=ctx.node.id,
            agent=ctx.node.agent,
            content=content,
            answer=found.answer,
            prompt_tokens=calls.prompt_tokens,
            completion_tokens=calls.completion_tokens,
            confidence=0.0 if found.parse_failed else confidence,
            state=Draft(ctx.node.agent, text, found.answer),
            parse_failed=found.parse_failed,
        )

    @staticmethod
    def _answer_line(found: Extracted) -> str:
        return f"Answer: {found.answer}" if not found.parse_failed else "Answer: (none found: parse failure)"

    # agent types ----------------------------------------------------------------------------
    def _run_CoT(self, ctx: _Context) -> NodeOutput:
        calls = _Calls()
        ((text, reason),) = self._texts(self._complete(calls, self._messages(ctx)))
        return self._output(ctx, calls, text, self._extract(ctx, text, reason), text, 0.5)

    def _vote(self, ctx: _Context, samples: Sequence[tuple[str, str | None]]) -> tuple[int, Extracted, int]:
        """(index of the winning sample, its extraction, its votes)."""
        found = [self._extract(ctx, t, r) for t, r in samples]
        keys = [self._vote_key(ctx, f.answer) for f in found]
        winner, votes = majority(keys)
        i = keys.index(winner) if votes else 0
        return i, found[i], votes

    def _run_SelfConsistency(self, ctx: _Context) -> NodeOutput:
        k = ctx.node.int_param("k")
        calls = _Calls()
        samples = self._texts(self._complete(calls, self._messages(ctx), n=k, sample=True))
        i, found, votes = self._vote(ctx, samples)
        lines = [f"Sample {j + 1}:\n{t}" for j, (t, _) in enumerate(samples)]
        lines.append(f"Vote: {found.answer} ({votes}/{k})" if votes else f"Vote: no sample gave an answer (0/{k})")
        return self._output(ctx, calls, "\n".join(lines), found, samples[i][0], votes / k)

    def _run_Debate(self, ctx: _Context) -> NodeOutput:
        n, rounds = ctx.node.int_param("agents"), ctx.node.int_param("rounds")
        calls = _Calls()
        base = self._messages(ctx)
        turns = self._texts(self._complete(calls, base, n=n, sample=True))
        lines = [f"Debater {i + 1} opens:\n{t}" for i, (t, _) in enumerate(turns)]
        for r in range(rounds):
            convos = []
            for i, (own, _) in enumerate(turns):
                others = "\n\n".join(f"Debater {j + 1}:\n{t}" for j, (t, _) in enumerate(turns) if j != i)
                follow = (
                    f"The other debaters answered:\n{others}\n\nWeigh their reasoning against yours, then give your "
                    "own answer again in the same format."
                )
                convos.append([*base, {"role": "assistant", "content": own}, {"role": "user", "content": follow}])
            # every debater answers the same round at once: one batch on a local model
            turns = [self._texts(out)[0] for out in self._complete_each(calls, convos, sample=True)]
            lines += [f"Debater {i + 1}, round {r + 1}:\n{t}" for i, (t, _) in enumerate(turns)]
        i, found, votes = self._vote(ctx, turns)
        lines.append(f"Consensus: {found.answer} ({votes}/{n})" if votes else f"Consensus: no debater gave an answer (0/{n})")
        return self._output(ctx, calls, "\n".join(lines), found, turns[i][0], votes / n)

    def _tool(self, ctx: _Context, found: Extracted, text: str) -> tuple[str, float | None]:
        """The tool's report on a draft and, where the tool grades it, the share it passes."""
        if ctx.domain == "code" and found.answer is not None and "entry_point" in ctx.task.metadata:
            return self._run_examples(ctx, found.answer)
        if ctx.domain == "math":
            wrong = check_arithmetic(text)
            return ("Calculator: " + ("; ".join(wrong) if wrong else "every calculation written out is right."), None)
        return "", None

    def _run_examples(self, ctx: _Context, program: str) -> tuple[str, float | None]:
        """The docstring examples of a code task, run on ``program`` in the code sandbox."""
        from orchrm.execution.sandbox.code import SandboxUnavailableError

        dom = self._rules.domain(ctx.task)
        checks = [c for c in dom.state(ctx.task).probe_checks if c.expected is not None]
        if not checks:
            return "", None
        res = dom.executor.run(program, checks)
        if res.status == "error":
            raise SandboxUnavailableError(f"the code sandbox could not run the docstring examples ({res.message}); "
                                          "check that a Python subprocess can be started and fork, then run again")
        lines = []
        for c, r in zip(checks, res.results, strict=True):
            got = r.output if r.error is None else f"{r.error}: {r.reason}"
            lines.append(f"{c.source} == {c.expected}: {'passed' if r.passed else f'FAILED, got {got}'}")
        return f"Ran the docstring examples ({res.passed}/{res.total} passed):\n" + "\n".join(lines), res.pass_rate

    def _run_Reflexion(self, ctx: _Context) -> NodeOutput:
        calls = _Calls()
        base = self._messages(ctx)
        lines: list[str] = []
        if ctx.drafts:
            text = ctx.drafts[-1].text
            found = self._extract(ctx, text, None)
            base = [base[0], {"role": "user", "content": self._user(_Context(ctx.task, ctx.domain, ctx.node, ctx.docs, ()))}]
        else:
            ((text, reason),) = self._texts(self._complete(calls, base))
            found = self._extract(ctx, text, reason)
            lines.append(f"Attempt:\n{text}")
        passed = None
        for it in range(ctx.node.int_param("iterations")):
            report, passed = self._tool(ctx, found, text)
            if passed == 1.0:
                lines.append(f"Reflection {it + 1}:\n{report}\nEvery example passes; no change.")
                break
            ask = (report + "\n\n" if report else "") + (
                "Check the answer above step by step and list its mistakes, if any. Do not write a new answer yet."
            )
            convo = [*base, {"role": "assistant", "content": text}, {"role": "user", "content": ask}]
            ((critique, _),) = self._texts(self._complete(calls, convo))
            convo += [{"role": "assistant", "content": critique},
                      {"role": "user", "content": "Now write the corrected answer in full, in the format asked for."}]
            ((revised, reason),) = self._texts(self._complete(calls, convo))
            again = self._extract(ctx, revised, reason)
            lines.append(f"Reflection {it + 1}:\n{report + chr(10) if report else ''}Critique:\n{critique}\nRevision:\n{revised}")
            if again.parse_failed and not found.parse_failed:
                lines.append("The revision gave no answer; keeping the previous one.")
                break
            unchanged = self._vote_key(ctx, again.answer) == self._vote_key(ctx, found.answer)
            text, found = revised, again
            if unchanged:
                break
        if passed is not None and passed < 1.0 and ctx.domain == "code":
            passed = self._tool(ctx, found, text)[1]
        lines.append(self._answer_line(found))
        return self._output(ctx, calls, "\n".join(lines), found, text, 0.5 if passed is None else passed)

    def _index(self, ctx: _Context):
        """The domain's BM25 corpus (None where the task has none: a free-text webqa question)."""
        if ctx.domain == "code":
            from orchrm.execution.sandbox.code import docs_index

            return docs_index()
        if ctx.domain == "math":
            from orchrm.execution.sandbox.engine import make_domain

            return make_domain("math", self._rules.noise).index()
        dom = self._rules.domain(ctx.task)
        return getattr(dom.state(ctx.task), "index", None) if dom.name == ctx.domain else None

    def _run_WebSearch(self, ctx: _Context) -> NodeOutput:
        queries, top_k = ctx.node.int_param("queries"), ctx.node.int_param("top_k")
        calls = _Calls()
        ask = (
            f"Write {queries} web search {'query' if queries == 1 else 'queries'} that would find the facts needed to "
            f"answer the question below, one per line, nothing else.\n\n{self._user(ctx)}"
        )
        messages = [{"role": "system", "content": "You write search queries."}, {"role": "user", "content": ask}]
        ((text, _),) = self._texts(self._complete(calls, messages))
        written = parse_queries(text, queries) or [ctx.task.question.strip()]
        index = self._index(ctx)
        docs: list[Doc] = []
        for q in written:
            for d in index.search(q, top_k) if index is not None else ():
                if d not in docs:
                    docs.append(d)
        ret = Retrieval(tuple(written), tuple(docs))
        shown = "\n".join(f"Query {i + 1}: {q}" for i, q in enumerate(written))
        results = "\n".join(f"[{d.doc_id}] {d.title}: {d.text}" for d in docs) or "(no results)"
        return NodeOutput(
            node_id=ctx.node.id,
            agent=ctx.node.agent,
            content=shown + RESULTS_MARKER + results,
            answer=None,
            prompt_tokens=calls.prompt_tokens,
            completion_tokens=calls.completion_tokens,
            confidence=0.0,
            state=ret,
        )


def parse_queries(text: str, n: int) -> list[str]:
    """At most ``n`` search queries from a model's reply: one per line, numbering, bullets and
    quotes removed, duplicates and blank lines dropped.

    >>> parse_queries('1. "capital of France"\\n2) Paris population\\n\\n- capital of France', 3)
    ['capital of France', 'Paris population']
    """
    out: list[str] = []
    for line in text.splitlines():
        q = _QUERY_PREFIX.sub("", line).strip().strip("\"'`").strip()
        if q and q not in out:
            out.append(q)
    return out[:n]


def backend_from_config(config, noise: NoiseConfig | None = None):
    """The backend ``config`` (a :class:`orchrm.config.BackendConfig`) names: the sandbox with
    ``noise``, or an :class:`LLMBackend` on the client :func:`make_client` builds."""
    if config is None or config.kind == "sandbox":
        from orchrm.execution.sandbox.engine import SandboxBackend

        return SandboxBackend(noise)
    from orchrm.execution.llm.factory import make_client

    return LLMBackend(make_client(config), max_tokens=config.max_tokens, temperature=config.temperature, noise=noise)


__all__ = ["ANSWER_FORMATS", "Draft", "LLMBackend", "Usage", "backend_from_config", "parse_queries"]
