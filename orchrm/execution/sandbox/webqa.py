"""The webqa sandbox domain: a reader over retrieved pages (built-in web corpus or SQuAD).

One fact per question (DESIGN §4):

- with the **gold page** in context the reader extracts the answer span, with a tier-dependent
  ``extract_error`` (a wrong field or another answer of the same paragraph), a
  ``span_boundary`` slip (one word short or long: partial F1), a pull towards each
  **look-alike** page in context (the entity's outdated archived profile, a similarly named
  entity, another paragraph of the same article) that a *specific* question resists, and a
  small pull per other page (more pages, more distraction);
- without it, the reader answers from the tier's **memory**, a fixed property of (tier, fact)
  drawn by hashing (famous entities are remembered, obscure ones are not; a wrong memory is
  wrong in every sample), still open to the pages in context;
- on a **trap** phrasing ("who was the CEO before the current one") a tier misreads the question
  for the whole execution with probability ``trap_misread`` and answers the salient
  neighbouring fact.

``WebSearch`` is real BM25 (:mod:`.retrieval`): query 1 is the question, each later query adds
the new terms of the best page the previous one found. ``Reflexion`` (tools) re-reads the pages
in reach and repairs what they show; the small tier sometimes breaks a right answer.

Quality: SQuAD token F1 against every valid answer (:func:`f1_quality`; exact match is
:func:`em_quality`). Retrieval quality: whether the gold page was retrieved.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchrm.data.quality import normalize_answer
from orchrm.execution.sandbox.config import NoiseConfig, WebqaNoise
from orchrm.execution.sandbox.domain import Attempt, Context, Retrieval
from orchrm.execution.sandbox.qa import (
    MEMORY_CONFIDENCE,
    Memory,
    QaDomain,
    em_quality,
    f1_quality,
    feedback_retrieve,
)
from orchrm.execution.sandbox.retrieval import BM25Index, cached_index, tokenize
from orchrm.execution.tasks.base import Task
from orchrm.execution.tasks.webqa import TRAP_SIBLING, build_corpus, squad_corpus, squad_file

_ATTR_PHRASE: Mapping[str, str] = {
    "population": "the population",
    "founded": "the founding year",
    "mayor": "the current mayor",
    "former_mayor": "the previous mayor",
    "river": "the river",
    "founder": "the founder",
    "employees": "the number of employees",
    "ceo": "the chief executive",
    "former_ceo": "the previous chief executive",
    "born": "the birth year",
    "birthplace": "the birthplace",
    "employer": "the current employer",
    "former_employer": "the previous employer",
    "award": "the award",
}
_DOC_KINDS = frozenset({"doc", "extract", "boundary", "lookalike", "distractor", "verified"})
_CONFIDENCE = {
    "doc": 0.9,
    "verified": 0.92,
    "extract": 0.85,
    "boundary": 0.85,
    "lookalike": 0.85,
    "distractor": 0.75,
    "guess": 0.3,
    "doubt": 0.6,
}


@dataclass(frozen=True)
class WebqaState:
    """Per-task simulation state (built once in ``prepare``)."""

    answers: tuple[str, ...]
    answer_keys: frozenset[str]
    gold: str  # gold page id
    subject: str  # what the question is about (entity name / article title), for the text
    asked: str  # what is asked, in words
    lookalikes: Mapping[str, tuple[str, ...]]  # page id -> the wrong values it offers
    same_page_wrong: tuple[str, ...]  # other spans of the gold page
    misread_value: str  # what a misreading tier answers
    popularity: str
    lookalike_scale: float  # multiplies lookalike_pull for this question
    ambiguous: (
        bool  # the question does not single out its page: look-alike confusion is per execution
    )
    trap: bool
    memory_key: str
    wrong_pool: tuple[str, ...]  # plausible wrong answers (memory, guesses, distractors)
    context: str  # the gold page text (for span boundaries and quotes)
    index: BM25Index
    question_terms: frozenset[str]
    page_values: Callable[[str], Sequence[str]]  # any page id -> the spans it offers


@dataclass(frozen=True)
class ReadDetail:
    kind: str  # doc | verified | extract | boundary | lookalike | distractor | memory | guess | misread | doubt
    source: str | None  # page id read (None from memory)
    seen: frozenset[str]


def _boundary(answer: str, context: str, rng: random.Random) -> str:
    """The answer span one word short or one word long (as found in ``context``)."""
    words = answer.split()
    if len(words) >= 2 and rng.random() < 0.6:
        return " ".join(words[1:] if rng.random() < 0.5 else words[:-1])
    at = context.find(answer)
    if at < 0:
        return answer
    before = context[:at].split()
    after = context[at + len(answer) :].split()
    if after and (not before or rng.random() < 0.5):
        return f"{answer} {after[0].strip('.,;:')}"
    if before:
        return f"{before[-1].strip('.,;:(')} {answer}"
    return answer


class WebqaDomain(QaDomain):
    """webqa: the built-in web corpus (``kind == "builtin"``) and SQuAD (``kind == "squad"``).
    Noise parameters: :class:`~orchrm.execution.sandbox.config.WebqaNoise`."""

    name = "webqa"
    doc_kinds = _DOC_KINDS
    p: WebqaNoise

    def __init__(self, noise: NoiseConfig) -> None:
        super().__init__(noise, noise.webqa)

    # prepare ----------------------------------------------------------------------------------
    def prepare(self, task: Task) -> WebqaState:
        md = task.metadata
        kind = md.get("kind", "builtin")
        if kind == "builtin":
            return self._prepare_builtin(task)
        if kind == "squad":
            return self._prepare_squad(task)
        raise ValueError(
            f"webqa task {task.task_id!r}: unknown metadata kind {kind!r} (use 'builtin' or 'squad')"
        )

    def _prepare_builtin(self, task: Task) -> WebqaState:
        md = task.metadata
        corpus = build_corpus(int(md.get("world", 0)))
        eid, attr = str(md["entity"]), str(md["attribute"])
        e = corpus.entities[eid]
        truth = e.values[attr]
        looks = {}
        for d in corpus.distractors.get(eid, ()):
            v = corpus.pages[d].values.get(attr)
            if v is not None and v != truth:
                looks[d] = (v,)
        same_page = tuple(v for a, v in e.values.items() if a != attr and v != truth)
        kin = [x for x in corpus.entities.values() if x.type == e.type and x.eid != eid]
        r = random.Random(f"webqa-pool|{task.task_id}")
        pool = tuple(
            dict.fromkeys(
                x.values[attr] for x in r.sample(kin, min(12, len(kin))) if x.values[attr] != truth
            )
        )
        misread = e.values[TRAP_SIBLING[attr]] if attr in TRAP_SIBLING else r.choice(same_page)
        index = cached_index(f"webqa:builtin:{corpus.world_id}", corpus.docs)
        pages = corpus.pages

        def page_values(d: str) -> tuple[str, ...]:
            """The value a page offers for this attribute (another entity's, an old one)."""
            vals = pages[d].values
            v = vals.get(attr)
            return (v,) if v is not None else tuple(vals.values())[:2]

        return WebqaState(
            answers=tuple(md.get("answers") or [task.reference]),
            answer_keys=frozenset(
                normalize_answer(a) for a in (md.get("answers") or [task.reference])
            ),
            gold=eid,
            subject=e.name,
            asked=_ATTR_PHRASE.get(attr, attr.replace("_", " ")),
            lookalikes=looks,
            same_page_wrong=same_page,
            misread_value=misread,
            popularity=e.popularity,
            lookalike_scale=self.p.specific_factor if md.get("specific") else 1.0,
            ambiguous=not md.get("specific"),
            trap=bool(md.get("trap", attr in TRAP_SIBLING)),
            memory_key=f"builtin|{corpus.world_id}|{eid}|{attr}",
            wrong_pool=pool,
            context=corpus.pages[eid].text,
            index=index,
            question_terms=frozenset(tokenize(task.question)),
            page_values=page_values,
        )

    def _prepare_squad(self, task: Task) -> WebqaState:
        md = task.metadata
        path = md.get("corpus")
        if not path or not Path(path).is_file():  # tasks stored on another machine
            path = str(squad_file())
        corpus = squad_corpus(path)
        gold = str(md["doc"])
        answers = tuple(md.get("answers") or [task.reference])
        keys = frozenset(normalize_answer(a) for a in answers)
        title = corpus.titles[gold]
        article = gold.rsplit("#", 1)[0]
        siblings = (
            [d for d in corpus.texts if d.rsplit("#", 1)[0] == article and d != gold]
            if article
            else []
        )
        looks = {}
        for d in siblings:
            spans = tuple(s for s in corpus.spans[d] if normalize_answer(s) not in keys)
            if spans:
                looks[d] = spans
        same_page = tuple(s for s in corpus.spans[gold] if normalize_answer(s) not in keys)
        r = random.Random(f"webqa-pool|{task.task_id}")
        pool = tuple(
            dict.fromkeys(
                s
                for d in r.sample(siblings, min(10, len(siblings)))
                for s in corpus.spans[d][:2]
                if normalize_answer(s) not in keys
            )
        )
        context = corpus.texts[gold]
        misread = r.choice(same_page) if same_page else _boundary(answers[0], context, r)
        index = cached_index(f"webqa:squad:{path}", corpus.docs)
        return WebqaState(
            answers=answers,
            answer_keys=keys,
            gold=gold,
            subject=title,
            asked="the answer",
            lookalikes=looks,
            same_page_wrong=same_page or (misread,),
            misread_value=misread,
            popularity=str(md.get("popularity", "obscure")),
            # other paragraphs of the article share the topic, not the fact: a weak look-alike
            lookalike_scale=self.p.passage_factor,
            ambiguous=False,
            trap=bool(md.get("trap", False)),
            memory_key=f"squad|{task.task_id}",
            wrong_pool=pool or (misread,),
            context=context,
            index=index,
            question_terms=frozenset(tokenize(task.question)),
            page_values=corpus.spans.__getitem__,
        )

    # memory -----------------------------------------------------------------------------------
    def _recall(self, st: WebqaState, tier: str) -> Memory:
        """The tier's fixed memory of the asked fact; a wrong memory is a plausible wrong
        answer or a look-alike page's value."""

        def draw() -> Memory:
            r = random.Random(f"webqa-memory|{tier}|{st.memory_key}")
            state = self._memory_state(r, tier, st.popularity)
            wrong_from = list(st.wrong_pool) + [v for vs in st.lookalikes.values() for v in vs]
            wrong = r.choice(wrong_from) if wrong_from else st.misread_value
            others = r.sample(st.wrong_pool, min(len(st.wrong_pool), self.p.guess_pool - 1))
            return Memory(state, wrong, (st.answers[0], *others))

        return self._remember((tier, st.memory_key), draw)

    # reading ----------------------------------------------------------------------------------
    def _read(
        self,
        st: WebqaState,
        tier: str,
        ids: frozenset[str],
        id_list: Sequence[str],
        rng: random.Random,
        misread: bool,
        shared: dict,
    ) -> tuple[str, str, str | None]:
        """(answer, kind, page read) for one reading by ``tier`` of the pages ``ids``."""
        n = len(id_list)
        has_gold = st.gold in ids
        if misread:
            return st.misread_value, "misread", st.gold if has_gold else None
        if n and st.lookalikes:
            pull = self._tv("lookalike_pull", tier) * st.lookalike_scale
            if not has_gold:
                pull = min(1.0, 2.0 * pull)
            for d in id_list:
                vals = st.lookalikes.get(d)
                if vals is None:
                    continue
                if not st.ambiguous:  # a slip: independent per sample
                    taken = rng.random() < pull
                else:  # an ambiguity: the tier settles on one reading for the whole execution
                    key = ("webqa-lookalike", st.memory_key, tier, d)
                    taken = shared.get(key)
                    if taken is None:
                        taken = shared[key] = rng.random() < pull
                if taken:
                    return vals[0] if len(vals) == 1 else rng.choice(vals), "lookalike", d
        if has_gold:
            if rng.random() < self._tv("extract_error", tier) and st.same_page_wrong:
                return rng.choice(st.same_page_wrong), "extract", st.gold
            if rng.random() < self._pull(tier, n - 1):
                return self._distract(st, id_list, rng)
            if (
                rng.random() < self._tv("span_boundary", tier)
                and len(st.answers[0]) > 0
                and st.memory_key.startswith("squad")
            ):
                return _boundary(st.answers[0], st.context, rng), "boundary", st.gold
            return st.answers[0], "doc", st.gold
        memory = self._recall(st, tier)
        if n and rng.random() < self._pull(tier, n):
            return self._distract(st, id_list, rng)
        return *memory.answer(st.answers[0], rng), None

    def _distract(
        self, st: WebqaState, id_list: Sequence[str], rng: random.Random
    ) -> tuple[str, str, str | None]:
        others = [d for d in id_list if d != st.gold]
        if others:
            d = rng.choice(others)
            vals = [v for v in st.page_values(d) if normalize_answer(v) not in st.answer_keys]
            if vals:
                return rng.choice(vals), "distractor", d
        return rng.choice(st.wrong_pool), "distractor", None

    def _text(self, st: WebqaState, answer: str, kind: str, source: str | None, header: str) -> str:
        if kind in ("doc", "verified", "extract", "boundary", "misread") and source:
            said = f'The page on {st.subject} says: "...{_snippet(st.context, answer)}..."'
        elif kind in ("lookalike", "distractor") and source:
            said = f"A retrieved page ({source}) gives {answer} for this."
        elif kind == "memory":
            said = f"I do not have a page for this; from memory, {st.asked} is {answer}."
        elif kind == "doubt":
            said = f"On reflection I doubt my first reading; I now think {st.asked} is {answer}."
        else:
            said = f"I am not sure; my best guess for {st.asked} is {answer}."
        return f"{header}\n{said}\nSo {st.asked} is {answer}.\nAnswer: {answer}"

    def _attempt(
        self,
        st: WebqaState,
        answer: str,
        kind: str,
        source: str | None,
        seen: frozenset[str],
        header: str,
    ) -> Attempt:
        conf = _CONFIDENCE.get(kind) or MEMORY_CONFIDENCE.get(st.popularity, 0.5)
        return Attempt(
            self._text(st, answer, kind, source, header),
            answer,
            conf,
            ReadDetail(kind, source, seen),
        )

    # SandboxDomain ------------------------------------------------------------------------------
    def attempt(self, ctx: Context, tier: str, rng: random.Random) -> Attempt:
        st: WebqaState = ctx.state
        ids, id_list = self._ids(ctx.docs)
        misread = st.trap and self._misread(ctx, tier, rng)
        answer, kind, source = self._read(st, tier, ids, id_list, rng, misread, ctx.shared)
        header = (
            f"The question asks for {st.asked} ({st.subject}). I look for it in the {len(id_list)} retrieved pages."
            if id_list
            else f"The question asks for {st.asked} ({st.subject}). I answer from what I know."
        )
        return self._attempt(st, answer, kind, source, ids, header)

    def critique(
        self, ctx: Context, attempt: Attempt, tier: str, rng: random.Random, *, tools: bool
    ) -> Attempt:
        st: WebqaState = ctx.state
        det = attempt.detail
        if not isinstance(det, ReadDetail):
            return self._keep(attempt, "I cannot check this draft against the pages; I keep it.")
        ctx_ids, _ = self._ids(ctx.docs)
        reach = ctx_ids | det.seen
        verb = (
            "Reflection: I re-read the pages for the asked fact."
            if tools
            else "I reconsider my answer."
        )
        in_reach = st.gold in reach
        if normalize_answer(attempt.answer) in st.answer_keys:
            if self._overcorrects(tier, rng, tools=tools, anchored=in_reach):
                options = (
                    [v for vs in st.lookalikes.values() for v in vs]
                    or list(st.same_page_wrong)
                    or list(st.wrong_pool)
                )
                return self._attempt(st, rng.choice(options), "doubt", det.source, det.seen, verb)
            return self._keep(
                attempt,
                f"{verb}\nThe answer is supported.\nAnswer: {attempt.answer}",
                confirmed=True,
            )
        if det.kind == "misread":
            p = self._trap_fix(tier, tools=tools, in_reach=in_reach)
        else:
            # a look-alike taken on a vague question: the question does not say which page
            vague = det.kind == "lookalike" and st.ambiguous
            p = self._repair(
                tier,
                det.kind,
                tools=tools,
                in_reach=in_reach,
                verify_factor=self.p.vague_fix_factor if vague else 1.0,
            )
        if rng.random() < p:
            return self._attempt(
                st,
                st.answers[0],
                "verified" if in_reach else "memory",
                st.gold if in_reach else None,
                det.seen,
                f"{verb}\nMy first answer was wrong.",
            )
        return self._keep(
            attempt, f"{verb}\nI still think the answer holds.\nAnswer: {attempt.answer}"
        )

    def retrieve(
        self, ctx: Context, queries: int, top_k: int, tier: str | None, rng: random.Random
    ) -> Retrieval:
        """Query 1 is the question; each later query adds the new terms of the best page the
        previous query found (pseudo-relevance feedback)."""
        st: WebqaState = ctx.state
        return feedback_retrieve(
            ctx.task.question,
            st.index,
            st.question_terms,
            queries=queries,
            top_k=top_k,
            text_of=lambda d: f"{d.title} {d.text}",
        )

    def quality(self, task: Task, answer: str | None) -> float | None:
        if task.reference is None:
            return None
        answers = task.metadata.get("answers") or [task.reference]
        return f1_quality(answer, list(answers))

    def retrieval_quality(self, task: Task, retrieval: Retrieval) -> float | None:
        st: WebqaState = self.state(task)
        return 1.0 if any(d.doc_id == st.gold for d in retrieval.docs) else 0.0


def _snippet(context: str, answer: str, width: int = 90) -> str:
    at = context.find(answer)
    if at < 0:
        return answer
    start = max(0, context.rfind(" ", 0, max(0, at - width // 2)) + 1)
    end = context.find(" ", min(len(context), at + len(answer) + width // 2))
    return context[start : end if end > 0 else len(context)].strip()


__all__ = ["WebqaDomain", "em_quality", "f1_quality"]
