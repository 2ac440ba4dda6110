"""The multihop sandbox domain: hop-by-hop resolution over a knowledge graph or StrategyQA facts.

An agent answers a question one hop (one fact) at a time (DESIGN §4):

- a hop is **read** from the subject's document when that document is in context — with a small
  tier-dependent ``extract_error``, a chance to take a *near-miss* entity's value when a document
  about a similarly named entity is also in context, and a chance to be swayed by each other
  document (``distractor_pull``: more retrieved documents, more distraction);
- otherwise it is **recalled** from the tier's memory, a fixed property of (tier, fact) drawn by
  hashing: a tier that remembers wrong remembers wrong in every sample, so voting cannot fix it;
  a tier that does not know guesses, independently per sample. Famous entities are recalled far
  better than obscure ones, and the question's entity names show which is which;
- errors carry forward: a wrong entity at hop 2 sends hop 3 to the wrong entity's facts;
- on a **trap** phrasing ("headquartered before it relocated") a tier misreads the question for
  the whole execution with probability ``trap_misread`` and answers the salient sibling fact,
  consistently across samples; the large tier misreads less, and a Reflexion that re-reads the
  entity's document may notice it.

``WebSearch`` runs real BM25 (:mod:`.retrieval`): one query per hop up to ``queries``, each built
from the entity the searcher resolved from the previous query's results (so a wrong early hop
sends later queries astray; the searcher reads with the WebSearch node's tier, or ``small`` when
it has none); extra queries search the question text. For StrategyQA, query 1 is the question and
each later one adds the new terms of the best fact the previous query found. ``Reflexion`` (tools)
re-reads every document the draft had or the node has, repairs what it can check and, on the
small tier, sometimes "repairs" a right answer into a wrong one (``generic.overcorrect``).

Quality: normalised exact match (:func:`exact_match`; yes/no for StrategyQA). Retrieval quality:
recall of the chain's documents among those retrieved.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchrm.data.quality import normalize_answer
from orchrm.execution.sandbox.config import MultihopNoise, NoiseConfig
from orchrm.execution.sandbox.domain import Attempt, Context, Doc, Retrieval
from orchrm.execution.sandbox.qa import (
    MEMORY_CONFIDENCE,
    Memory,
    QaDomain,
    em_quality,
    f1_quality,
    feedback_retrieve,
)
from orchrm.execution.sandbox.retrieval import BM25Index, cached_index, tokenize
from orchrm.execution.tasks.base import Task, data_file
from orchrm.execution.tasks.multihop import (
    REL_QUERY,
    RELATIONS,
    STRATEGYQA_FILE,
    TRAP_SIBLING,
    FactCorpus,
    World,
    build_world,
    strategyqa_corpus,
)

# how an agent states a resolved fact ({x}: subject, {y}: value) and what it looks for
REL_STATE: Mapping[str, str] = {
    "produced_by": "{x} was produced by {y}",
    "directed_by": "{x} was directed by {y}",
    "founded_by": "{x} was founded by {y}",
    "hq": "{x} is headquartered in {y}",
    "former_hq": "{x} was headquartered in {y} before it relocated",
    "born_in": "{x} was born in {y}",
    "works_for": "{x} works for {y}",
    "located_in": "{x} lies in {y}",
    "capital": "the capital of {x} is {y}",
    "former_capital": "the former capital of {x} was {y}",
}
REL_NEED: Mapping[str, str] = {
    "produced_by": "the studio that produced",
    "directed_by": "the director of",
    "founded_by": "the founder of",
    "hq": "the current headquarters of",
    "former_hq": "the headquarters before the relocation of",
    "born_in": "the birthplace of",
    "works_for": "the employer of",
    "located_in": "the country of",
    "capital": "the capital of",
    "former_capital": "the former capital of",
}
_DOC_KINDS = frozenset({"doc", "extract", "distractor", "nearmiss", "verified"})
_CONFIDENCE = {
    "doc": 0.9,
    "verified": 0.92,
    "extract": 0.85,
    "distractor": 0.8,
    "nearmiss": 0.85,
    "guess": 0.3,
}


# ---------------------------------------------------------------------------------------------
# per-task state
@dataclass(frozen=True)
class KGState:
    """A knowledge-graph question: its hops ``(subject, relation, object)`` and the corpus."""

    world: World
    hops: tuple[tuple[str, str, str], ...]
    gold: frozenset[str]
    trap: bool
    index: BM25Index


@dataclass(frozen=True)
class FactState:
    """A StrategyQA question: its fact documents, their popularity, the yes/no answer."""

    corpus: FactCorpus
    facts: tuple[str, ...]
    popularity: tuple[str, ...]
    answer: str
    trap: bool
    index: BM25Index
    question_terms: frozenset[str]


@dataclass(frozen=True)
class HopRecord:
    """How one hop was resolved: the subject, the relation actually read (a misread trap reads
    the sibling), the value concluded and where it came from."""

    subject: str
    rel: str
    value: str
    kind: str  # doc | verified | extract | distractor | nearmiss | memory | guess | doubt


@dataclass(frozen=True)
class KGDetail:
    records: tuple[HopRecord, ...]
    seen: frozenset[str]  # documents in context when the draft was written


@dataclass(frozen=True)
class FactDetail:
    right: tuple[bool, ...]
    flips: tuple[bool, ...]
    kinds: tuple[str, ...]
    misread: bool
    reason_flip: bool
    seen: frozenset[str]


def _distort(sentence: str) -> str:
    """A wrong belief about a fact, phrased like the fact."""
    out, n = re.subn(
        r"\b(is|are|was|were|has|have|can|does|do|did)\b", r"\1 not", sentence, count=1
    )
    return out if n else f"it is not the case that {sentence[:1].lower()}{sentence[1:]}"


class MultihopDomain(QaDomain):
    """multihop: built-in knowledge-graph questions (``kind == "kg"``) and StrategyQA
    (``kind == "facts"``). Noise parameters: :class:`~orchrm.execution.sandbox.config.MultihopNoise`."""

    name = "multihop"
    doc_kinds = _DOC_KINDS
    p: MultihopNoise

    def __init__(self, noise: NoiseConfig) -> None:
        super().__init__(noise, noise.multihop)

    # prepare ----------------------------------------------------------------------------------
    def prepare(self, task: Task) -> KGState | FactState:
        md = task.metadata
        kind = md.get("kind", "kg")
        if kind == "kg":
            world = build_world(int(md.get("world", 0)))
            hops = tuple((str(s), str(r), str(o)) for s, r, o in md["chain"])
            index = cached_index(f"multihop:world:{world.world_id}", world.docs)
            trap = any(r in TRAP_SIBLING for _, r, _ in hops)
            return KGState(world, hops, frozenset(s for s, _, _ in hops), trap, index)
        if kind == "facts":
            path = md.get("corpus")
            if not path or not Path(path).is_file():  # tasks stored on another machine
                path = str(data_file(STRATEGYQA_FILE, "StrategyQA"))
            corpus = strategyqa_corpus(str(path))
            facts = tuple(md["facts"])
            index = cached_index(f"multihop:strategyqa:{path}", corpus.docs)
            return FactState(
                corpus,
                facts,
                tuple(corpus.popularity[f] for f in facts),
                "Yes" if normalize_answer(task.reference) == "yes" else "No",
                bool(md.get("trap", False)),
                index,
                frozenset(tokenize(task.question)),
            )
        raise ValueError(
            f"multihop task {task.task_id!r}: unknown metadata kind {kind!r} (use 'kg' or 'facts')"
        )

    # memory ---------------------------------------------------------------------------------
    def _recall(self, world: World, tier: str, subject: str, rel: str) -> Memory:
        """The tier's fixed memory of (subject, rel); a wrong memory is often a near-miss
        entity's value."""
        return self._remember(
            ("kg", world.world_id, tier, subject, rel),
            lambda: self._kg_memory(world, tier, subject, rel),
        )

    def _kg_memory(self, world: World, tier: str, subject: str, rel: str) -> Memory:
        ent = world.entities[subject]
        truth = ent.facts[rel]
        r = random.Random(f"multihop-memory|{world.world_id}|{tier}|{subject}|{rel}")
        state = self._memory_state(r, tier, ent.popularity)
        pool_type = world.by_type[RELATIONS[rel][1]]
        twins = world.twins.get(subject)
        if twins and r.random() < 0.5:
            wrong = world.entities[twins[0]].facts[rel]  # a similar entity's value
        else:
            wrong = r.choice(pool_type)
        if wrong == truth:
            wrong = pool_type[(pool_type.index(truth) + 1) % len(pool_type)]
        others = [
            x for x in r.sample(pool_type, min(len(pool_type), self.p.guess_pool + 1)) if x != truth
        ]
        return Memory(state, wrong, tuple([truth, *others[: self.p.guess_pool - 1]]))

    def _fact_memory(self, st: FactState, tier: str, j: int) -> tuple[str, bool]:
        """Fixed memory of fact ``j`` for ``tier``: state and whether a wrong belief flips the
        conclusion."""
        fid = st.facts[j]

        def draw() -> tuple[str, bool]:
            r = random.Random(f"multihop-fact-memory|{tier}|{fid}")
            state = self._memory_state(r, tier, st.popularity[j])
            return state, r.random() < self.p.wrong_fact_flips

        return self._remember(("facts", tier, fid), draw)

    # resolution -------------------------------------------------------------------------------
    def _decoy(
        self, world: World, etype: str, avoid: str, id_list: Sequence[str], rng: random.Random
    ) -> str:
        """A wrong value a reader picks up: an entity of the right type named in the context
        documents when there is one, else any entity of that type."""
        cands = [
            e
            for d in id_list
            for e in world.mentions.get(d, ())
            if e != avoid and world.entities[e].type == etype
        ]
        if cands:
            return rng.choice(cands)
        pool = world.by_type[etype]
        c = rng.choice(pool)
        return c if c != avoid else pool[(pool.index(c) + 1) % len(pool)]

    def _resolve(
        self,
        st: KGState,
        subject: str,
        rel: str,
        tier: str,
        ids: frozenset[str],
        id_list: Sequence[str],
        rng: random.Random,
        misread: bool,
    ) -> HopRecord:
        world = st.world
        if misread and rel in TRAP_SIBLING:
            rel = TRAP_SIBLING[rel]
        ent = world.entities[subject]
        truth = ent.facts[rel]
        n_docs = len(id_list)
        twins = world.twins.get(subject)
        twin_in = [t for t in twins if t in ids] if twins and n_docs else ()
        has_doc = subject in ids
        if twin_in:
            pull = self._tv("near_miss_pull", tier)
            if rng.random() < (pull if has_doc else min(1.0, 2.0 * pull)):
                twin = twin_in[0]
                return HopRecord(subject, rel, world.entities[twin].facts[rel], "nearmiss")
        if has_doc:
            u = rng.random()
            if u < self._tv("extract_error", tier):
                return HopRecord(
                    subject,
                    rel,
                    self._decoy(world, RELATIONS[rel][1], truth, id_list, rng),
                    "extract",
                )
            if rng.random() < self._pull(tier, n_docs - 1):
                return HopRecord(
                    subject,
                    rel,
                    self._decoy(world, RELATIONS[rel][1], truth, id_list, rng),
                    "distractor",
                )
            return HopRecord(subject, rel, truth, "doc")
        memory = self._recall(world, tier, subject, rel)
        if n_docs and rng.random() < self._pull(tier, n_docs):
            return HopRecord(
                subject,
                rel,
                self._decoy(world, RELATIONS[rel][1], truth, id_list, rng),
                "distractor",
            )
        return HopRecord(subject, rel, *memory.answer(truth, rng))

    def _chain(
        self,
        st: KGState,
        start: int,
        subject: str,
        tier: str,
        ids: frozenset[str],
        id_list: Sequence[str],
        rng: random.Random,
        misread: bool,
    ) -> list[HopRecord]:
        out = []
        for _, rel, _ in st.hops[start:]:
            rec = self._resolve(st, subject, rel, tier, ids, id_list, rng, misread)
            out.append(rec)
            subject = rec.value
        return out

    # text -----------------------------------------------------------------------------------
    def _step_text(self, world: World, i: int, rec: HopRecord) -> str:
        x, y = world.entities[rec.subject].name, world.entities[rec.value].name
        stmt = REL_STATE[rec.rel].format(x=x, y=y)
        need = f"Step {i + 1}: I need {REL_NEED[rec.rel]} {x}."
        kind = rec.kind
        if kind in ("doc", "extract", "verified"):
            return f"{need}\nThe document on {x} says that {stmt}."
        if kind == "nearmiss":
            return f"{need}\nA document on {x} states that {stmt}."
        if kind == "distractor":
            return f"{need}\nOne of the retrieved documents suggests that {stmt}."
        if kind == "memory":
            return f"{need}\nFrom what I remember, {stmt}."
        if kind == "doubt":
            return f"{need}\nOn reflection I doubt my earlier reading; I now think that {stmt}."
        return f"{need}\nI am not certain here; my best guess is that {stmt}."

    def _kg_attempt(
        self, st: KGState, records: Sequence[HopRecord], seen: frozenset[str], header: str
    ) -> Attempt:
        world = st.world
        lines = [header]
        conf = 1.0
        for i, rec in enumerate(records):
            lines.append(self._step_text(world, i, rec))
            conf *= (
                _CONFIDENCE.get(rec.kind)
                or MEMORY_CONFIDENCE[world.entities[rec.subject].popularity]
            )
        answer = world.entities[records[-1].value].name
        lines.append(f"So the answer is {answer}.\nAnswer: {answer}")
        return Attempt("\n".join(lines), answer, conf, KGDetail(tuple(records), seen))

    # SandboxDomain ------------------------------------------------------------------------------
    def attempt(self, ctx: Context, tier: str, rng: random.Random) -> Attempt:
        st = ctx.state
        if isinstance(st, FactState):
            return self._fact_attempt(ctx, st, tier, rng)
        ids, id_list = self._ids(ctx.docs)
        misread = st.trap and self._misread(ctx, tier, rng)
        start = st.world.entities[st.hops[0][0]].name
        header = (
            f"The question starts from {start} and needs {len(st.hops)} linked facts; "
            f"I resolve them one at a time{' using the retrieved documents' if id_list else ''}."
        )
        records = self._chain(st, 0, st.hops[0][0], tier, ids, id_list, rng, misread)
        return self._kg_attempt(st, records, ids, header)

    def critique(
        self, ctx: Context, attempt: Attempt, tier: str, rng: random.Random, *, tools: bool
    ) -> Attempt:
        st = ctx.state
        if isinstance(st, FactState):
            return self._fact_critique(ctx, st, attempt, tier, rng, tools=tools)
        det = attempt.detail
        if not isinstance(det, KGDetail):
            return self._keep(attempt, "I cannot check this draft step by step; I keep it.")
        world = st.world
        ctx_ids, ctx_list = self._ids(ctx.docs)
        reach = ctx_ids | det.seen
        reach_list = tuple(dict.fromkeys((*ctx_list, *sorted(det.seen))))
        records = list(det.records)
        verb = (
            "Reflection: I re-check each step against the documents."
            if tools
            else "I reconsider my reasoning."
        )
        wrong_at = next(
            (
                i
                for i, (rec, (_, _, obj)) in enumerate(zip(records, st.hops, strict=True))
                if rec.value != obj
            ),
            None,
        )
        if wrong_at is None:
            if self._overcorrects(tier, rng, tools=tools, anchored=st.gold <= reach):
                j = rng.randrange(len(records))
                rec = records[j]
                bad = self._decoy(world, RELATIONS[rec.rel][1], rec.value, reach_list, rng)
                records[j] = HopRecord(rec.subject, rec.rel, bad, "doubt")
                misread = st.trap and self._misread(ctx, tier, rng)
                records[j + 1 :] = self._chain(
                    st, j + 1, bad, tier, reach, reach_list, rng, misread
                )
                return self._kg_attempt(st, records, det.seen, verb)
            return self._keep(
                attempt, f"{verb}\nEvery step checks out.\nAnswer: {attempt.answer}", confirmed=True
            )
        rec = records[wrong_at]
        gold_rel = st.hops[wrong_at][1]
        misread_hop = rec.rel != gold_rel
        in_reach = rec.subject in reach
        if misread_hop:
            p = self._trap_fix(tier, tools=tools, in_reach=in_reach)
        else:
            p = self._repair(tier, rec.kind, tools=tools, in_reach=in_reach)
        if rng.random() < p:
            truth = st.hops[wrong_at][2]
            records[wrong_at] = HopRecord(
                rec.subject, gold_rel, truth, "verified" if in_reach else "memory"
            )
            misread = (not misread_hop) and st.trap and self._misread(ctx, tier, rng)
            records[wrong_at + 1 :] = self._chain(
                st, wrong_at + 1, truth, tier, reach, reach_list, rng, misread
            )
            return self._kg_attempt(
                st,
                records,
                det.seen,
                f"{verb}\nStep {wrong_at + 1} was wrong; I correct it and redo the rest.",
            )
        x = world.entities[rec.subject].name
        return self._keep(
            attempt,
            f"{verb}\nI looked again at {REL_NEED[rec.rel]} {x} and I still think the steps hold.\nAnswer: {attempt.answer}",
        )

    def retrieve(
        self, ctx: Context, queries: int, top_k: int, tier: str | None, rng: random.Random
    ) -> Retrieval:
        st = ctx.state
        if isinstance(st, FactState):
            return self._fact_retrieve(ctx, st, queries, top_k, rng)
        world = st.world
        reader = tier or "small"
        misread = st.trap and self._misread(ctx, reader, rng)
        written: list[str] = []
        docs: dict[str, Doc] = {}
        subject = st.hops[0][0]
        for q in range(queries):
            if q < len(st.hops):
                rel = st.hops[q][1]
                query = f"{world.entities[subject].name} {REL_QUERY[rel]}"
                hits = st.index.search(query, top_k)
                ids, id_list = self._ids(hits)
                # the searcher reads this query's results to find the next entity to search for
                subject = self._resolve(st, subject, rel, reader, ids, id_list, rng, misread).value
            else:
                query = ctx.task.question
                hits = st.index.search(query, top_k)
            written.append(query)
            for d in hits:
                docs.setdefault(d.doc_id, d)
        return Retrieval(tuple(written), tuple(docs.values()))

    def quality(self, task: Task, answer: str | None) -> float | None:
        if task.reference is None:
            return None
        return em_quality(answer, task.reference)

    def retrieval_quality(self, task: Task, retrieval: Retrieval) -> float | None:
        st = self.state(task)
        gold = frozenset(st.facts) if isinstance(st, FactState) else st.gold
        got = {d.doc_id for d in retrieval.docs}
        return len(gold & got) / len(gold) if gold else None

    # StrategyQA -------------------------------------------------------------------------------
    def _fact_misread(self, ctx: Context, st: FactState, tier: str, rng: random.Random) -> bool:
        return st.trap and self._misread(ctx, tier, rng)

    def _fact_answer(
        self, st: FactState, flips: Sequence[bool], misread: bool, reason_flip: bool
    ) -> str:
        flip = (sum(flips) + misread + reason_flip) % 2 == 1
        return ("No" if st.answer == "Yes" else "Yes") if flip else st.answer

    def _fact_text(self, st: FactState, det: FactDetail, header: str) -> Attempt:
        lines = [header]
        conf = 1.0
        for j, fid in enumerate(st.facts):
            text = st.corpus.texts[fid]
            kind = det.kinds[j]
            if det.right[j]:
                src = "The retrieved text says" if kind in _DOC_KINDS else "I recall that"
                lines.append(f"Fact {j + 1}: {src}: {text}")
            elif kind == "guess":
                lines.append(
                    f"Fact {j + 1}: I am unsure; I assume that {_distort(text) if det.flips[j] else text}"
                )
            else:
                lines.append(
                    f"Fact {j + 1}: I believe that {_distort(text) if det.flips[j] else text}"
                )
            conf *= _CONFIDENCE.get(kind) or MEMORY_CONFIDENCE[st.popularity[j]]
        answer = self._fact_answer(st, det.flips, det.misread, det.reason_flip)
        lines.append(
            f"Putting these facts together, the answer is {answer.lower()}.\nAnswer: {answer}"
        )
        return Attempt("\n".join(lines), answer, 0.5 + 0.5 * conf, det)

    def _fact_read(
        self, st: FactState, j: int, tier: str, ids: frozenset[str], n_docs: int, rng: random.Random
    ) -> tuple[bool, bool, str]:
        """(right, flips the conclusion, kind) for fact ``j``: read from its text when in
        context, else recalled (a wrong memory flips the same way every time)."""
        if st.facts[j] in ids:
            if rng.random() < self._tv("extract_error", tier) or rng.random() < self._pull(
                tier, n_docs - 1
            ):
                return False, rng.random() < self.p.wrong_fact_flips, "extract"
            return True, False, "doc"
        state, flip = self._fact_memory(st, tier, j)
        if n_docs and rng.random() < self._pull(tier, n_docs):
            return False, rng.random() < self.p.wrong_fact_flips, "distractor"
        if state == "right":
            return True, False, "memory"
        if state == "wrong":
            return False, flip, "memory"
        return False, rng.random() < 0.5, "guess"

    def _fact_attempt(self, ctx: Context, st: FactState, tier: str, rng: random.Random) -> Attempt:
        ids, id_list = self._ids(ctx.docs)
        n_docs = len(id_list)
        reads = [self._fact_read(st, j, tier, ids, n_docs, rng) for j in range(len(st.facts))]
        right, flips, kinds = (list(x) for x in zip(*reads, strict=True))
        reason_flip = all(right) and rng.random() < self._tv("reason_error", tier)
        det = FactDetail(
            tuple(right),
            tuple(flips),
            tuple(kinds),
            self._fact_misread(ctx, st, tier, rng),
            reason_flip,
            ids,
        )
        header = f"This yes/no question needs {len(st.facts)} facts{' (checking the retrieved texts)' if n_docs else ''}."
        return self._fact_text(st, det, header)

    def _fact_critique(
        self,
        ctx: Context,
        st: FactState,
        attempt: Attempt,
        tier: str,
        rng: random.Random,
        *,
        tools: bool,
    ) -> Attempt:
        det = attempt.detail
        if not isinstance(det, FactDetail):
            return self._keep(attempt, "I cannot check this draft fact by fact; I keep it.")
        ctx_ids, _ = self._ids(ctx.docs)
        reach = ctx_ids | det.seen
        verb = (
            "Reflection: I re-check each fact against the texts."
            if tools
            else "I reconsider my reasoning."
        )
        right, flips, kinds = list(det.right), list(det.flips), list(det.kinds)
        if attempt.answer == st.answer:
            if self._overcorrects(tier, rng, tools=tools, anchored=set(st.facts) <= reach):
                j = rng.randrange(len(st.facts))
                right[j], flips[j], kinds[j] = False, not flips[j], "guess"
                new = FactDetail(
                    tuple(right), tuple(flips), tuple(kinds), det.misread, det.reason_flip, det.seen
                )
                return self._fact_text(st, new, f"{verb}\nOn reflection I doubt fact {j + 1}.")
            return self._keep(attempt, f"{verb}\nEvery fact checks out.\nAnswer: {attempt.answer}")
        # the first thing to repair: a misreading of the question, else the first wrong fact
        if det.misread:
            p = self._trap_fix(tier, tools=tools, in_reach=bool(set(st.facts) & reach))
            if rng.random() < p:
                new = FactDetail(det.right, det.flips, det.kinds, False, det.reason_flip, det.seen)
                return self._fact_text(
                    st, new, f"{verb}\nI misread what the question asks; reading it again."
                )
        else:
            j = next((i for i, r in enumerate(right) if not r), None)
            if j is None:  # all facts right, the combination was wrong
                p = self._tv("verify_fix", tier) if tools else self._tv("rethink_fix", tier)
                if rng.random() < p:
                    new = FactDetail(det.right, det.flips, det.kinds, det.misread, False, det.seen)
                    return self._fact_text(
                        st, new, f"{verb}\nThe facts are right but my conclusion did not follow."
                    )
            else:
                p = self._repair(tier, kinds[j], tools=tools, in_reach=st.facts[j] in reach)
                if rng.random() < p:
                    right[j], flips[j], kinds[j] = True, False, "verified"
                    new = FactDetail(
                        tuple(right),
                        tuple(flips),
                        tuple(kinds),
                        det.misread,
                        det.reason_flip,
                        det.seen,
                    )
                    return self._fact_text(
                        st, new, f"{verb}\nFact {j + 1} was wrong; the text says otherwise."
                    )
        return self._keep(
            attempt, f"{verb}\nI still think my facts hold.\nAnswer: {attempt.answer}"
        )

    def _fact_retrieve(
        self, ctx: Context, st: FactState, queries: int, top_k: int, rng: random.Random
    ) -> Retrieval:
        """Pseudo-relevance feedback from the question over the fact sentences."""
        return feedback_retrieve(
            ctx.task.question,
            st.index,
            st.question_terms,
            queries=queries,
            top_k=top_k,
            text_of=lambda d: d.text,
        )


__all__ = ["MultihopDomain", "em_quality", "f1_quality"]
