"""What the two question-answering domains (:mod:`.multihop`, :mod:`.webqa`) share.

Both answer facts by reading a document in context or recalling the tier's memory (DESIGN §4).
:class:`QaDomain` holds the common machinery: per-tier parameter lookup, the distractor pull,
the tier's fixed memory, the once-per-execution trap misreading, the repair and over-correction
chances of a critique, and the pseudo-relevance-feedback search. Each domain keeps its own
state, reading, text and quality; parameters are :class:`~.noise.QaNoise` subclasses.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from orchrm.data.quality import exact_match, normalize_answer, token_f1
from orchrm.execution.sandbox.config import NoiseConfig, QaNoise
from orchrm.execution.sandbox.domain import Attempt, Context, Doc, Retrieval, SandboxDomain
from orchrm.execution.sandbox.retrieval import BM25Index, tokenize

# confidence in a value recalled from memory, by the fact's popularity
MEMORY_CONFIDENCE = {"famous": 0.85, "known": 0.65, "obscure": 0.5}


def _answer_list(answers: str | Sequence[str]) -> str | list[str]:
    return answers if isinstance(answers, str) else list(answers)


def em_quality(prediction: str | None, answers: str | Sequence[str] | None) -> float:
    """SQuAD-normalised exact match against any valid answer (1.0 / 0.0), also for yes/no; the
    multihop quality.

    >>> em_quality("the Orison Pictures.", "Orison pictures")
    1.0
    """
    if answers is None:
        return 0.0
    return exact_match(prediction, _answer_list(answers))


def f1_quality(prediction: str | None, answers: str | Sequence[str] | None) -> float:
    """Best SQuAD token F1 over the valid answers (partial credit for partly right names); the
    webqa quality.

    >>> f1_quality("Denver Broncos", ["the Denver Broncos", "Broncos"])
    1.0
    >>> round(f1_quality("Port Ellis", "Port Ellison"), 2)
    0.5
    """
    if answers is None:
        return 0.0
    return token_f1(prediction, _answer_list(answers))


@dataclass(frozen=True)
class Memory:
    """A tier's fixed memory of one fact (the same in every sample): ``state`` is ``right`` |
    ``wrong`` | ``unknown``; ``wrong`` is the wrong value a ``wrong`` memory holds; ``guesses``
    are the candidates (one of them right) an ``unknown`` memory guesses among per sample."""

    state: str
    wrong: str
    guesses: tuple[str, ...]

    def answer(self, truth: str, rng: random.Random) -> tuple[str, str]:
        """``(value, kind)`` recalled: ``truth`` or ``wrong`` (kind ``memory``), else a guess
        (kind ``guess``, drawn from ``rng``)."""
        if self.state == "right":
            return truth, "memory"
        if self.state == "wrong":
            return self.wrong, "memory"
        return rng.choice(self.guesses), "guess"


def feedback_retrieve(
    question: str,
    index: BM25Index,
    question_terms: frozenset[str],
    *,
    queries: int,
    top_k: int,
    text_of: Callable[[Doc], str],
) -> Retrieval:
    """Query 1 is the question; each later query adds to the question the new terms (of
    ``text_of(doc)``) of the best document the previous query found (pseudo-relevance
    feedback), so a later hop depends on what the earlier one found. Stops early when no new
    document suggests a new query."""
    written: list[str] = []
    docs: dict[str, Doc] = {}
    query = question
    for _ in range(queries):
        hits = index.search(query, top_k)
        written.append(query)
        new = [d for d in hits if d.doc_id not in docs]
        for d in hits:
            docs.setdefault(d.doc_id, d)
        follow = None
        for d in new:
            extra = [t for t in dict.fromkeys(tokenize(text_of(d))) if t not in question_terms][:4]
            candidate = f"{question} {' '.join(extra)}"
            if extra and candidate not in written:
                follow = candidate
                break
        if follow is None:
            break
        query = follow
    return Retrieval(tuple(written), tuple(docs.values()))


class QaDomain(SandboxDomain):
    """Base of the question-answering domains; ``params`` is the domain's :class:`QaNoise`.

    Subclasses set ``doc_kinds``: the kinds of answer read from a document, which a debater
    re-thinking without tools can repair (a memory it cannot)."""

    doc_kinds: frozenset[str] = frozenset()

    def __init__(self, noise: NoiseConfig, params: QaNoise) -> None:
        super().__init__(noise)
        self.p = params
        self._memory: dict[tuple, object] = {}
        self._pow: dict[tuple[str, int], float] = {}
        self._tier_cache: dict[tuple[str, str], object] = {}

    # parameters -----------------------------------------------------------------------------
    def _tv(self, field: str, tier: str):
        """``field``'s value for ``tier`` (from the domain's parameters, else ``generic``; a tier
        missing from the table borrows the closest tier by skill)."""
        key = (field, tier)
        v = self._tier_cache.get(key)
        if v is None:
            table = (
                getattr(self.p, field)
                if hasattr(self.p, field)
                else getattr(self.noise.generic, field)
            )
            if tier in table:
                v = table[tier]
            else:
                skill = self.noise.tiers[tier].skill if tier in self.noise.tiers else 1.0
                near = min(
                    table,
                    key=lambda t: (
                        abs(self.noise.tiers[t].skill - skill) if t in self.noise.tiers else 9.0
                    ),
                )
                v = table[near]
            self._tier_cache[key] = v
        return v

    def _pull(self, tier: str, n_other: int) -> float:
        """Chance that at least one of ``n_other`` distracting documents sways a reading."""
        if n_other <= 0:
            return 0.0
        key = (tier, n_other)
        p = self._pow.get(key)
        if p is None:
            p = self._pow[key] = 1.0 - (1.0 - self._tv("distractor_pull", tier)) ** n_other
        return p

    # memory -----------------------------------------------------------------------------------
    def _memory_state(self, r: random.Random, tier: str, popularity: str) -> str:
        """``right`` | ``wrong`` | ``unknown``: the tier's memory of a fact of ``popularity``,
        drawn from ``r`` (seeded by the fact, so fixed per tier and fact)."""
        u = r.random()
        recall = self._tv("recall", tier)[popularity]
        wrong_p = self._tv("misremember", tier)[popularity]
        return "right" if u < recall else "wrong" if u < recall + wrong_p else "unknown"

    def _remember(self, key: tuple, memory: Callable[[], object]) -> object:
        """``memory()`` cached under ``key`` (it is deterministic; the cache is bounded)."""
        hit = self._memory.get(key)
        if hit is None:
            hit = self._memory[key] = memory()
            if len(self._memory) > 500_000:
                self._memory.clear()
        return hit

    # traps and critique -----------------------------------------------------------------------
    def _misread(self, ctx: Context, tier: str, rng: random.Random) -> bool:
        """Whether ``tier`` misreads this question's trap phrasing in this execution (drawn once
        per execution and tier, shared by every sample and node of that tier)."""
        key = (f"{self.name}-misread", ctx.task.task_id, tier)
        value = ctx.shared.get(key)
        if value is None:
            value = ctx.shared[key] = rng.random() < self._tv("trap_misread", tier)
        return value

    def _trap_fix(self, tier: str, *, tools: bool, in_reach: bool) -> float:
        """Chance a critique notices a misread trap: Reflexion re-reads (better with the right
        document in reach), a debater re-thinks."""
        if tools:
            return self._tv("trap_fix", tier) if in_reach else self._tv("trap_fix_no_doc", tier)
        return self._tv("rethink_fix", tier)

    def _repair(
        self, tier: str, kind: str, *, tools: bool, in_reach: bool, verify_factor: float = 1.0
    ) -> float:
        """Chance a critique repairs a wrong answer of ``kind``: only with the right document in
        reach; Reflexion verifies against it (``verify_fix`` times ``verify_factor``), a debater
        repairs only what it read from a document."""
        if not in_reach:
            return 0.0
        if tools:
            return self._tv("verify_fix", tier) * verify_factor
        return self._tv("rethink_fix", tier) if kind in self.doc_kinds else 0.0

    def _overcorrects(self, tier: str, rng: random.Random, *, tools: bool, anchored: bool) -> bool:
        """Whether a Reflexion critique "fixes" a right answer into a wrong one
        (``generic.overcorrect``, times ``overcorrect_doc_factor`` when the documents it rests
        on are in reach); a debater without tools never does."""
        p = self.noise.generic.overcorrect.get(tier, 0.05) if tools else 0.0
        if p and anchored:
            p *= self.p.overcorrect_doc_factor
        return bool(p) and rng.random() < p

    @staticmethod
    def _keep(attempt: Attempt, text: str, *, confirmed: bool = False) -> Attempt:
        """The draft's answer unchanged under the critique ``text``; a ``confirmed`` one gains a
        little confidence."""
        conf = min(1.0, attempt.correct_prob + 0.05) if confirmed else attempt.correct_prob
        return Attempt(text, attempt.answer, conf, attempt.detail)

    # helpers ----------------------------------------------------------------------------------
    @staticmethod
    def _ids(docs: Sequence[Doc]) -> tuple[frozenset[str], tuple[str, ...]]:
        """The documents' ids as a set and in context order."""
        id_list = tuple(d.doc_id for d in docs)
        return frozenset(id_list), id_list

    def vote_key(self, ctx: Context, attempt: Attempt) -> Hashable:
        return None if attempt.answer is None else normalize_answer(attempt.answer)


__all__ = [
    "MEMORY_CONFIDENCE",
    "Memory",
    "QaDomain",
    "em_quality",
    "f1_quality",
    "feedback_retrieve",
]
