"""The math sandbox domain (DESIGN §4): agents replay a word problem's solution steps.

A reasoning run (``attempt``) replays the task's steps (``orchrm.execution.tasks.math``) and really
computes them: operands come from the question, from facts the run recalls, and from its own
earlier results, so an error carries forward (``48 / 2 = 26`` then ``26 * 3 = 78``). What an
LLM would get wrong is drawn from :class:`~orchrm.execution.sandbox.config.MathNoise`:

- *slips*: each step is wrong with a probability that grows with its operators and the
  length of its numbers and shrinks with the tier's ``skill`` (independent per sample);
- *trap misreads*: a phrasing such as "5 fewer than" or "20% off, then 10% off the reduced
  price" is misread by a tier once per plan execution (memoised in ``ctx.shared``), so every
  sample and debater of that tier computes the step the misread way and voting cannot help;
- *unstated facts*: a step that needs "a gross is 144" uses the tier's recollection, wrong
  once per execution with a probability that grows with the fact's obscurity, unless a
  retrieved document states it;
- *distraction*: retrieved documents that state no needed fact (worked examples of similar
  problems) add errors that copy their numbers into the solution.

``critique`` re-checks some steps (all of a short solution): with ``tools`` (Reflexion's
calculator) it finds slips reliably and misreads only sometimes; without (a debater) it finds
less. Any critique may second-guess a right step (over-correction), and a reviewer that itself
misreads a trap "fixes" a right step into its misreading. ``WebSearch`` is real BM25 over a
corpus of fact documents (units, calendar, counting words) and worked examples (distractors).

Quality is numeric exact match of the answer against ``task.reference``.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from orchrm.errors import ConfigError, TaskError
from orchrm.execution.sandbox.domain import Attempt, Context, Doc, Retrieval, SandboxDomain
from orchrm.execution.tasks.base import Task
from orchrm.execution.tasks.math import (
    FACTS,
    answer_match,
    display_expr,
    facts_in,
    fmt_number,
    from_text,
    generate_problem,
    normalize_number,
    numbers_in,
    parse_solution,
    swap_operator,
)

_CONTINUES = frozenset(" ,.;:)")  # a step text starting so continues the previous line
_SAFE_EXPR = re.compile(r"^[\d\s.+\-*/(){}]+$")
_SLOT = re.compile(r"\{(\d+)\}")
CORPUS_EXAMPLES = 240  # worked-example documents in the search corpus
_CORPUS_SEED = "math-corpus-v1"

# marks: what went wrong at a step of a run (None: nothing)
_TRAP = ("trap",)
_OVER = ("over",)
_OPSLIP = ("opslip",)


@functools.lru_cache(maxsize=4096)
def _compile(expr: str) -> Callable[[Sequence[float]], float] | None:
    """A fast evaluator of a slot expression; only digits, operators, parentheses and slots
    pass the check before compiling, so no metadata can smuggle code in."""
    if not expr:
        return None
    if not _SAFE_EXPR.match(expr):
        raise TaskError(f"math step expression {expr!r} is not plain arithmetic over slots")
    body = _SLOT.sub(lambda m: f"v[{m.group(1)}]", expr)
    return eval(compile(f"lambda v: {body}", "<math-step>", "eval"), {"__builtins__": {}})  # noqa: S307


@dataclass(slots=True)
class _Step:
    comp: bool
    text: str
    fn: Callable | None = None
    alt_fn: Callable | None = None  # the misread (trap) or inverse reading
    swap_fn: Callable | None = None  # a wrong operator, for operator slips
    show: str = ""
    alt_show: str = ""
    swap_show: str = ""
    args: tuple = ()  # (kind, payload): ("s", step) | ("f", fact) | ("v", value)
    result: float = 0.0
    fixup: float = 0.0  # gold annotation minus recomputation (typos in real data)
    trap: str = ""
    facts: tuple[str, ...] = ()
    ops: str = ""
    digits: int = 0
    decimals: bool = False
    literal_slots: tuple[int, ...] = ()


@dataclass(slots=True)
class MathState:
    """A task prepared for simulation (per process, cached by the domain)."""

    task_id: str
    steps: tuple[_Step, ...]
    comp: tuple[int, ...]
    answer_step: int
    reference: float
    facts: tuple[str, ...]  # unstated facts the solution uses
    traps: tuple[tuple[int, str], ...]  # (step, trap kind)
    queries: tuple[str, ...]
    tiers: dict = field(default_factory=dict)  # tier -> (slip probabilities, estimated P(correct))
    texts: dict = field(default_factory=dict)  # (intro, marks, facts) -> rendered text
    calcs: dict = field(default_factory=dict)  # (marks, facts) -> each step's written calculation
    searches: dict = field(default_factory=dict)  # (queries, top_k) -> docs


@dataclass(frozen=True, slots=True)
class MathTrace:
    """What a run did: per-step marks (None | ("slip", delta) | trap | over | opslip |
    ("distract", slot, number)), the wrong fact values it used, its values and answer."""

    marks: tuple
    facts: tuple[tuple[str, float], ...]
    values: tuple[float, ...]
    answer: float
    key: str


class MathDomain(SandboxDomain):
    """GSM8K-style word problems; see the module docstring."""

    name = "math"

    def __init__(self, noise) -> None:
        super().__init__(noise)
        self.p = noise.math
        self._fact_docs = {name: f"fact-{name}" for name in FACTS}
        self._doc_numbers: dict[str, tuple[float, ...]] = {}

    # preparation ---------------------------------------------------------------------------
    def prepare(self, task: Task) -> MathState:
        meta = task.metadata
        if "steps" in meta:
            steps_meta, answer_step = list(meta["steps"]), int(meta.get("answer_step", -1))
        elif meta.get("solution") or (task.reference and "####" in task.reference):
            parsed = parse_solution(task.question, meta.get("solution") or task.reference)
            steps_meta, answer_step = parsed["steps"], parsed["answer_step"]
        else:
            built = from_text(task.question)
            if built is None:
                raise TaskError(
                    f"math task {task.task_id!r} carries no solution steps: give metadata['steps'] or a GSM8K "
                    "solution ('... <<a*b=c>> ... #### N') in metadata['solution'], or mark it generic"
                )
            steps_meta, answer_step = list(built.metadata["steps"]), built.metadata["answer_step"]
        steps = []
        for i, s in enumerate(steps_meta):
            steps.append(self._prepare_step(i, s, steps))
        comp = tuple(i for i, s in enumerate(steps) if s.comp)
        if task.reference is not None:
            from orchrm.data.quality import parse_number

            ref = parse_number(task.reference.split("####")[-1])
        else:
            ref = None
        if ref is None:  # no gold answer (free text): the solution's own value drives the replay
            ref = meta.get("answer", steps[answer_step].result if 0 <= answer_step < len(steps) else 0.0)
        reference = ref
        facts = tuple(sorted({f for s in steps for f in s.facts}))
        traps = tuple((i, steps[i].trap) for i in comp if steps[i].trap)
        return MathState(
            task_id=task.task_id,
            steps=tuple(steps),
            comp=comp,
            answer_step=answer_step if answer_step < len(steps) else -1,
            reference=float(reference),
            facts=facts,
            traps=traps,
            queries=_queries(task.question),
        )

    def _prepare_step(self, i: int, s: dict, earlier: list[_Step]) -> _Step:
        expr = s.get("expr", "")
        if not expr:
            return _Step(comp=False, text=str(s.get("text", "")))
        args = []
        facts = []
        literal_slots = []
        for j, code in enumerate(s["args"]):
            kind, ref = str(code).split(":", 1)
            if kind == "s":
                k = int(ref)
                if not 0 <= k < i or not earlier[k].comp:
                    raise TaskError(f"math step {i} refers to step {k}, which is not an earlier computation")
                args.append(("s", k))
            elif kind == "f":
                if ref not in FACTS:
                    raise TaskError(f"math step {i} uses unknown fact {ref!r}; known: {', '.join(FACTS)}")
                args.append(("f", ref))
                facts.append(ref)
            else:
                args.append(("v", float(ref)))
                if kind == "q":
                    literal_slots.append(j)
        fn = _compile(expr)
        alt = s.get("alt") or swap_operator(expr, last=True)
        swap = swap_operator(expr)
        true_vals = [earlier[p].result if k == "s" else FACTS[p].value if k == "f" else p for k, p in args]
        try:
            fixup = float(s["result"]) - fn(true_vals)
        except ZeroDivisionError:
            fixup = 0.0
        if abs(fixup) < 1e-9 * max(1.0, abs(float(s["result"]))):
            fixup = 0.0
        used = [int(m) for m in _SLOT.findall(expr)]
        digits = sum(_digits(true_vals[j]) for j in set(used) if j < len(true_vals))
        return _Step(
            comp=True,
            text=str(s.get("text") or "{calc}"),
            fn=fn,
            alt_fn=_compile(alt) if alt else None,
            swap_fn=_compile(swap) if swap else None,
            show=display_expr(expr),
            alt_show=display_expr(alt) if alt else "",
            swap_show=display_expr(swap) if swap else "",
            args=tuple(args),
            result=float(s["result"]),
            fixup=fixup,
            trap=str(s.get("trap") or ""),
            facts=tuple(facts),
            ops="".join(ch for ch in expr if ch in "+-*/"),
            digits=digits,
            decimals=any(abs(true_vals[j] - round(true_vals[j])) > 1e-9 for j in set(used) if j < len(true_vals)),
            literal_slots=tuple(literal_slots),
        )

    def lone_run_chance(self, st: MathState, tier: str) -> float:
        """The chance a lone run of ``tier`` answers the prepared task right (no vote, no review):
        what the simulator decides a single attempt by, for analyses of what a task asks of a plan."""
        return self._tier_view(st, tier)[1]

    def _tier_view(self, st: MathState, tier: str) -> tuple[tuple[float, ...], float]:
        """Per-step slip probabilities for ``tier`` and the chance a lone run is right."""
        view = st.tiers.get(tier)
        if view is None:
            p = self.p
            skill = self.noise.tier(tier).skill
            slips = []
            ok = 1.0
            for s in st.steps:
                if not s.comp:
                    slips.append(0.0)
                    continue
                hardest = max(s.ops, key=lambda o: p.op_error.get(o, 0.0)) if s.ops else "+"
                raw = p.step_error * (1.0 - p.setup_shared) + sum(p.op_error.get(o, 0.0) for o in s.ops)
                raw += p.digit_error.get(hardest, 0.0) * max(0, s.digits - p.free_digits)
                raw += p.decimal_error if s.decimals else 0.0
                q = min(p.max_step_error, raw * skill)
                slips.append(q)
                ok *= 1.0 - q
            for _, kind in st.traps:
                ok *= 1.0 - self._misread_p(kind, tier)
            for i in st.comp:
                if not st.steps[i].trap:
                    ok *= 1.0 - self._setup_p(st.steps[i], tier)
            for f in st.facts:
                ok *= 1.0 - self._miss_p(f, tier)
            view = st.tiers[tier] = (tuple(slips), ok)
        return view

    # correlated effects -----------------------------------------------------------------------
    def _misread_p(self, kind: str, tier: str) -> float:
        return min(1.0, self.p.trap_misread.get(kind, 0.0) * _per_tier(self.p.trap_tier, tier, "trap_tier"))

    def _setup_p(self, s: _Step, tier: str) -> float:
        """Chance ``tier`` systematically sets up a step without a trap phrasing wrong."""
        if s.alt_fn is None:
            return 0.0
        return self.p.step_error * self.p.setup_shared * self.noise.tier(tier).skill

    def _miss_p(self, fact: str, tier: str) -> float:
        return min(1.0, _per_tier(self.p.fact_miss, tier, "fact_miss") * FACTS[fact].obscurity)

    def _misreads(self, ctx: Context, st: MathState, tier: str, rng: random.Random) -> frozenset[int]:
        """Steps this tier misreads in this plan execution: trap phrasings and systematic
        set-up errors (drawn once, then shared by every sample and node of the tier)."""
        key = ("math.misread", st.task_id, tier)
        got = ctx.shared.get(key)
        if got is None:
            out = []
            for i in st.comp:
                s = st.steps[i]
                q = self._misread_p(s.trap, tier) if s.trap else self._setup_p(s, tier)
                if q and rng.random() < q:
                    out.append(i)
            got = ctx.shared[key] = frozenset(out)
        return got

    def _recall(self, ctx: Context, st: MathState, tier: str, rng: random.Random) -> dict[str, float]:
        """Facts this tier misremembers in this plan execution, with the value it recalls."""
        key = ("math.recall", st.task_id, tier)
        got = ctx.shared.get(key)
        if got is None:
            got = {}
            for f in st.facts:
                if rng.random() < self._miss_p(f, tier):
                    got[f] = float(rng.choice(FACTS[f].wrong))
            ctx.shared[key] = got
        return got

    def _doc_effects(self, ctx: Context, st: MathState) -> tuple[frozenset[str], tuple[float, ...], int]:
        """(facts the documents state, numbers in distracting documents, distracting docs)."""
        if not ctx.docs:
            return frozenset(), (), 0
        stated, numbers, n = set(), [], 0
        needed = {self._fact_docs[f]: f for f in st.facts}
        for d in ctx.docs:
            f = needed.get(d.doc_id)
            if f is not None:
                stated.add(f)
                continue
            n += 1
            nums = self._doc_numbers.get(d.doc_id)
            if nums is None:
                nums = self._doc_numbers[d.doc_id] = tuple(x for x in numbers_in(d.text) if x > 0)
            numbers.extend(nums)
        return frozenset(stated), tuple(numbers), n

    # the protocol -----------------------------------------------------------------------------
    def attempt(self, ctx: Context, tier: str, rng: random.Random) -> Attempt:
        st: MathState = ctx.state
        p = self.p
        slips, ok = self._tier_view(st, tier)
        misread = self._misreads(ctx, st, tier, rng)
        recalled = self._recall(ctx, st, tier, rng)
        stated, pool, n_distract = self._doc_effects(ctx, st)
        extra = _per_tier(p.distract_error, tier, "distract_error") * min(1.0, n_distract / p.distract_saturation) if pool else 0.0
        draft = ctx.drafts[-1].detail if ctx.drafts and isinstance(ctx.drafts[-1].detail, MathTrace) else None
        anchor = _per_tier(p.draft_anchor, tier, "draft_anchor") if draft is not None else 0.0
        marks: list = [None] * len(st.steps)
        for i in st.comp:
            if i in misread:
                marks[i] = _TRAP
                continue
            q = slips[i]
            if draft is not None:
                dm = draft.marks[i] if i < len(draft.marks) else None
                if dm is not None:
                    if rng.random() < anchor:
                        marks[i] = dm
                        continue
                else:
                    q *= p.draft_relief
            r = rng.random()
            if r < extra:
                s = st.steps[i]
                slot = rng.choice(s.literal_slots) if s.literal_slots else rng.randrange(len(s.args))
                marks[i] = ("distract", slot, rng.choice(pool))
            elif r < extra + q:
                marks[i] = self._slip(st.steps[i], rng)
        wrong_facts = tuple(sorted((f, v) for f, v in recalled.items() if f not in stated))
        if draft is not None and draft.facts:
            # a fact the draft got wrong is copied like its other errors
            have = dict(wrong_facts)
            for f, v in draft.facts:
                if f not in have and f not in stated and rng.random() < anchor:
                    have[f] = v
            wrong_facts = tuple(sorted(have.items()))
        trace = self._trace(st, tuple(marks), wrong_facts)
        text = self._render(st, trace, intro="Let me solve this step by step.")
        return Attempt(text=text, answer=fmt_number(trace.answer, 4), correct_prob=ok, detail=trace)

    def critique(self, ctx: Context, attempt: Attempt, tier: str, rng: random.Random, *, tools: bool) -> Attempt:
        st: MathState = ctx.state
        tr = attempt.detail
        if not isinstance(tr, MathTrace):
            return Attempt(text="I re-read the draft and found nothing to check.", answer=attempt.answer,
                           correct_prob=attempt.correct_prob, detail=tr)
        p = self.p
        span = _per_tier(p.check_span, tier, "check_span")
        cover = min(1.0, span / max(1, len(st.comp)))
        stated, _, _ = self._doc_effects(ctx, st)
        own_misreads = self._misreads(ctx, st, tier, rng)
        marks = list(tr.marks)
        facts = dict(tr.facts)
        notes: list[str] = []
        slip = _per_tier(p.calc_detect, tier, "calc_detect") if tools else _per_tier(p.recheck_detect, tier, "recheck_detect")
        misread = (
            _per_tier(p.trap_detect_tools, tier, "trap_detect_tools")
            if tools
            else _per_tier(p.trap_detect_recheck, tier, "trap_detect_recheck")
        )
        copied = _per_tier(p.distract_detect, tier, "distract_detect") * (1.0 if tools else 0.5)
        detect = {"slip": slip, "opslip": slip, "trap": misread, "over": misread, "distract": copied}
        for n, i in enumerate(st.comp, 1):
            if cover < 1.0 and rng.random() >= cover:
                continue
            s = st.steps[i]
            for f in s.facts:
                if f in facts:
                    q = p.fact_detect_docs if f in stated else _per_tier(p.fact_detect_memory, tier, "fact_detect_memory")
                    if rng.random() < q:
                        notes.append(f"Step {n}: {FACTS[f].title.lower()} is {fmt_number(FACTS[f].value)}, not {fmt_number(facts[f])}; fixing it.")
                        del facts[f]
            m = marks[i]
            if m is None:
                if i in own_misreads and rng.random() < p.misread_enforce:
                    marks[i] = _TRAP
                    notes.append(f"Step {n}: I think the question means something else here; changing it.")
                else:
                    notes.append(f"Step {n}: {self._calc(st, tr, i)} checks out.")
                continue
            if rng.random() < detect[m[0]]:
                marks[i] = None
                what = "the arithmetic is wrong" if m[0] in ("slip", "opslip") else "I misread the question" if m[0] in ("trap", "over") else "that number is not in the question"
                notes.append(f"Step {n}: {self._calc(st, tr, i)} is wrong: {what}.")
            else:
                notes.append(f"Step {n}: {self._calc(st, tr, i)} checks out.")
        # over-correction is a Reflexion habit (GenericNoise.overcorrect is per Reflexion
        # iteration); a debater re-reading its answer has its peers' agreement to lean on
        over = self.noise.generic.overcorrect.get(tier, 0.0) if tools else 0.0
        if over and rng.random() < over:
            right = [i for i in st.comp if marks[i] is None and st.steps[i].alt_fn is not None]
            if right:
                i = rng.choice(right)
                marks[i] = _OVER
                notes.append(f"Step {st.comp.index(i) + 1}: on second thought this step should be done differently.")
        new = self._trace(st, tuple(marks), tuple(sorted(facts.items())))
        head = "Checking each step with a calculator:" if tools else "Re-reading my solution:"
        if new.marks == tr.marks and new.facts == tr.facts:
            text = "\n".join([head, *notes, f"No changes needed. Answer: {fmt_number(tr.answer, 4)}"])
            return Attempt(text=text, answer=attempt.answer, correct_prob=attempt.correct_prob, detail=tr)
        body = self._render(st, new, intro="Revised solution:")
        return Attempt(text="\n".join([head, *notes, body]), answer=fmt_number(new.answer, 4),
                       correct_prob=attempt.correct_prob, detail=new)

    def retrieve(self, ctx: Context, queries: int, top_k: int, tier: str | None, rng: random.Random) -> Retrieval:
        st: MathState = ctx.state
        key = (queries, top_k)
        hit = st.searches.get(key)
        if hit is None:
            index = self.index()
            qs = st.queries[: max(1, queries)]
            docs: list[Doc] = []
            seen: set[str] = set()
            for q in qs:
                for d in index.search(q, top_k):
                    if d.doc_id not in seen:
                        seen.add(d.doc_id)
                        docs.append(d)
            hit = st.searches[key] = Retrieval(tuple(qs), tuple(docs))
        return hit

    def vote_key(self, ctx: Context, attempt: Attempt) -> Hashable:
        d = attempt.detail
        return d.key if isinstance(d, MathTrace) else normalize_number(attempt.answer)

    def quality(self, task: Task, answer: str | None) -> float | None:
        if task.reference is None:
            return None
        return answer_match(answer, task.reference.split("####")[-1])

    def retrieval_quality(self, task: Task, retrieval: Retrieval) -> float | None:
        """Recall of the documents stating the facts the solution needs (None if it needs none)."""
        st: MathState = self.state(task)
        if not st.facts:
            return None
        got = {d.doc_id for d in retrieval.docs}
        return sum(self._fact_docs[f] in got for f in st.facts) / len(st.facts)

    def instruction(self, agent: str) -> str:
        return (
            f"You are a {agent} agent solving a grade-school math word problem. Work step by step, "
            "write every calculation out, and end with 'Answer: <number>'."
        )

    # search corpus -----------------------------------------------------------------------------
    def index(self):
        """The per-process BM25 index over the math corpus (fact documents + worked examples)."""
        from orchrm.execution.sandbox.retrieval import cached_index

        return cached_index(f"math:corpus:{_CORPUS_SEED}:{CORPUS_EXAMPLES}", corpus)

    # runs --------------------------------------------------------------------------------------
    def _slip(self, s: _Step, rng: random.Random) -> tuple:
        """A slip at step ``s``: a wrong operator, or a digit error of the result's size."""
        if s.swap_fn is not None and rng.random() < self.p.op_slip_share:
            return _OPSLIP
        mag = abs(s.result)
        if mag >= 10:
            power = 10 ** rng.randrange(0, max(1, len(str(int(mag))) - 1))
        elif mag >= 1:
            power = 1
        else:
            power = 0.1
        return ("slip", rng.choice((-1, 1)) * power * rng.choice((1, 1, 2)))

    def _trace(self, st: MathState, marks: tuple, facts: tuple[tuple[str, float], ...]) -> MathTrace:
        vals = [0.0] * len(st.steps)
        fact_val = dict(facts)
        for i in st.comp:
            s = st.steps[i]
            args = [vals[p] if k == "s" else fact_val.get(p, FACTS[p].value) if k == "f" else p for k, p in s.args]
            m = marks[i]
            fn = s.fn
            if m is not None:
                kind = m[0]
                if kind == "distract":
                    args[m[1]] = m[2]
                elif kind == "trap" or kind == "over":
                    fn = s.alt_fn or s.fn
                elif kind == "opslip":
                    fn = s.swap_fn or s.fn
            try:
                r = fn(args) + s.fixup
            except ZeroDivisionError:
                r = 0.0
            if m is not None and m[0] == "slip":
                r += m[1]
            vals[i] = r
        if st.answer_step >= 0:
            answer = vals[st.answer_step]
        elif st.comp:
            last = st.comp[-1]
            answer = st.reference + (vals[last] - st.steps[last].result)
        else:
            answer = st.reference
        return MathTrace(marks, facts, tuple(vals), answer, fmt_number(answer, 4))

    def _calc(self, st: MathState, tr: MathTrace, i: int) -> str:
        """Step ``i`` as the run wrote it (``"48 / 2 = 26"``); a trace's marks and facts fix
        its values, so the strings are cached per trace."""
        key = (tr.marks, tr.facts)
        got = st.calcs.get(key)
        if got is None:
            got = tuple(self._write(st, tr, j) if s.comp else "" for j, s in enumerate(st.steps))
            if len(st.calcs) < 256:
                st.calcs[key] = got
        return got[i]

    def _write(self, st: MathState, tr: MathTrace, i: int) -> str:
        s = st.steps[i]
        m = tr.marks[i]
        fact_val = dict(tr.facts)
        args = [tr.values[p] if k == "s" else fact_val.get(p, FACTS[p].value) if k == "f" else p for k, p in s.args]
        show = s.show
        if m is not None:
            if m[0] == "distract":
                args[m[1]] = m[2]
            elif m[0] in ("trap", "over") and s.alt_show:
                show = s.alt_show
            elif m[0] == "opslip" and s.swap_show:
                show = s.swap_show
        return show.format(*(fmt_number(a) for a in args)) + " = " + fmt_number(tr.values[i])

    def _render(self, st: MathState, tr: MathTrace, *, intro: str) -> str:
        key = (intro, tr.marks, tr.facts)
        text = st.texts.get(key)
        if text is None:
            lines = [intro]
            for i, s in enumerate(st.steps):
                line = s.text.format(calc=self._calc(st, tr, i)) if s.comp else s.text
                if line[:1] in _CONTINUES and len(lines) > 1:
                    lines[-1] += line  # the second computation of one solution line
                else:
                    lines.append(line)
            lines.append(f"Answer: {tr.key}")
            text = "\n".join(lines)
            if len(st.texts) < 256:
                st.texts[key] = text
        return text


def _per_tier(table: dict, tier: str, name: str):
    try:
        return table[tier]
    except KeyError:
        raise ConfigError(f"sandbox.math.{name} has no value for tier {tier!r}; add it (tiers: {', '.join(table)})") from None


def _digits(x: float) -> int:
    """Digits a person writes for ``x`` (integer part plus decimals)."""
    text = fmt_number(abs(x))
    return sum(ch.isdigit() for ch in text.lstrip("0.")) or 1


_STOP_SENT = re.compile(r"(?<=[.?!])\s+")


def _queries(question: str) -> tuple[str, ...]:
    """The search queries a model writes for ``question``, in order: one per unstated fact the
    question cues (the most obscure first: "how many days in a fortnight"), then the whole
    question, then its sentences. A reader sees the cue words; nothing hidden is used."""
    lowered = question.lower()
    out = []
    for name in sorted(facts_in(question), key=lambda f: -FACTS[f].obscurity):
        fact = FACTS[name]
        cues = [m.group(0) for pat in fact.needs if (m := re.search(pat, lowered))]
        out.append(f"how many {' '.join(reversed(cues))} {fact.title.lower()}")
    sentences = [s.strip() for s in _STOP_SENT.split(question) if s.strip()]
    for q in [question.strip(), *sentences]:
        if q not in out:
            out.append(q)
    return tuple(out)


def corpus() -> list[Doc]:
    """The math search corpus: one document per fact in ``FACTS`` and ``CORPUS_EXAMPLES``
    worked examples of generated problems (near misses: same stories, other numbers)."""
    docs = [Doc(f"fact-{f.name}", f.title, f.doc) for f in FACTS.values()]
    rng = random.Random(_CORPUS_SEED)
    for i in range(CORPUS_EXAMPLES):
        question, solution, meta = generate_problem(rng)
        worked = re.sub(r"<<[^>]*>>", "", solution.split("####")[0]).replace("\n", " ").strip()
        docs.append(Doc(f"example-{i:03d}", f"Worked example: {meta['template']}",
                        f"{question} Solution: {worked} Answer: {fmt_number(meta['answer'])}."))
    return docs


__all__ = ["MathDomain", "MathState", "MathTrace", "corpus"]
