"""multihop tasks: a built-in knowledge-graph world and the StrategyQA loader.

Sources (registered on import; nothing is built until ``load`` is called):

- ``multihop:builtin`` — a synthetic encyclopaedia (:func:`build_world`): countries, cities,
  people, companies and films linked by relations, one document per entity, plus *near-miss*
  entities whose names extend a real one ("Orison Pictures International" next to "Orison
  Pictures") with different facts. Questions walk 2–4 relations from a named start entity,
  e.g. "What is the country in which the birthplace of the director of the film Midnight Harbor
  lies?"; ``metadata["chain"]`` holds the hops ``[subject_id, relation, object_id]``. Entities are
  famous, known or obscure; the name style shows it (obscure entities get long, specific names)
  and linked entities tend to share their neighbour's popularity. Two relations are *traps*: a
  company's headquarters *before it relocated* and a country's capital *before the current one*
  (a reader defaults to the salient current value).
- ``multihop:strategyqa`` — StrategyQA as packaged by BIG-bench (``strategyqa/task.json`` under
  ``$ORCHRM_DATA_DIR``): yes/no answers; the explanation's sentences are the facts (hops) and the
  corpus is every explanation sentence of the file, so other questions' facts act as distractors.

Also here: :func:`question_features` (what a reader of the question alone sees),
:func:`heuristic_plan_score` (the specialized orchestrator's prior) and :func:`from_text`.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from orchrm.errors import TaskError
from orchrm.execution.tasks.base import (
    DATA_DIR_ENV,
    Doc,
    DomainHeuristic,
    Task,
    TaskSource,
    data_file,
    malformed_items,
    plan_cost,
    read_json_items,
    register_heuristic,
    register_source,
    register_text_parser,
)
from orchrm.execution.tasks.qa import (
    POPULARITY,
    distinct_tasks,
    make_name,
    name_style,
    unique_name,
)
from orchrm.plans import Plan
from orchrm.util.digests import stable_id

DOMAIN = "multihop"
WORLD_ID = 0  # the built-in world; questions differ by seed, the encyclopaedia does not
STRATEGYQA_FILE = "strategyqa/task.json"

# relation -> (subject type, object type)
RELATIONS: Mapping[str, tuple[str, str]] = {
    "produced_by": ("film", "company"),
    "directed_by": ("film", "person"),
    "founded_by": ("company", "person"),
    "hq": ("company", "city"),
    "former_hq": ("company", "city"),
    "born_in": ("person", "city"),
    "works_for": ("person", "company"),
    "located_in": ("city", "country"),
    "capital": ("country", "city"),
    "former_capital": ("country", "city"),
}
# trap relation -> the salient sibling a careless reader answers instead
TRAP_SIBLING: Mapping[str, str] = {"former_hq": "hq", "former_capital": "capital"}

# how a question phrases each relation around the inner description {x}
REL_PHRASE: Mapping[str, str] = {
    "produced_by": "the studio that produced {x}",
    "directed_by": "the director of {x}",
    "founded_by": "the founder of {x}",
    "hq": "the city where {x} is headquartered",
    "former_hq": "the city where {x} was headquartered before it relocated",
    "born_in": "the birthplace of {x}",
    "works_for": "the company that employs {x}",
    "located_in": "the country in which {x} lies",
    "capital": "the capital of {x}",
    "former_capital": "the city that was the capital of {x} before the current one",
}
# the words a search query adds to the entity name for each relation
REL_QUERY: Mapping[str, str] = {
    "produced_by": "film produced by studio",
    "directed_by": "film directed by director",
    "founded_by": "company founded by founder",
    "hq": "company headquartered in city",
    "former_hq": "company headquarters before relocated",
    "born_in": "born in city birthplace",
    "works_for": "works for company employer",
    "located_in": "city located in country",
    "capital": "country capital city",
    "former_capital": "country former capital",
}
START_PHRASE: Mapping[str, str] = {
    "film": "the film {n}",
    "company": "the company {n}",
    "person": "{n}",
}


# ---------------------------------------------------------------------------------------------
# the world
@dataclass(frozen=True)
class Entity:
    """One entity of the built-in world. ``facts`` maps relation -> object entity id;
    ``twin_of`` names the entity a near-miss imitates (None for ordinary entities)."""

    eid: str
    type: str
    name: str
    popularity: str
    facts: Mapping[str, str]
    twin_of: str | None = None


@dataclass(frozen=True)
class World:
    """The encyclopaedia: entities, one document text per entity, near-miss links, mentions."""

    world_id: int
    entities: Mapping[str, Entity]
    texts: Mapping[str, str]
    twins: Mapping[str, tuple[str, ...]]  # entity id -> ids of its near-miss entities
    by_type: Mapping[str, tuple[str, ...]]  # ordinary (non-twin) entities of each type
    by_name: Mapping[str, str]  # lowercase name -> entity id (ordinary and twins)
    mentions: Mapping[str, tuple[str, ...]]  # doc id -> entity ids its text names

    def name(self, eid: str) -> str:
        return self.entities[eid].name

    def docs(self):
        """The corpus: one :class:`~orchrm.execution.tasks.base.Doc` per entity."""
        return [Doc(eid, e.name, self.texts[eid]) for eid, e in self.entities.items()]


def _twin_name(rng: random.Random, e: Entity) -> str:
    if e.type == "person":
        first, rest = e.name.split(" ", 1)
        return f"{first} {rng.choice('ABCDEFGHJKLMNPRSTV')}. {rest}"
    if e.type == "city":
        return rng.choice(["North {n}", "New {n}", "{n} Heights", "East {n}"]).format(n=e.name)
    if e.type == "company":
        return e.name + rng.choice([" International", " Group", " Holdings"])
    if e.type == "film":
        return rng.choice(["{n} II", "Return to {n}", "{n}: The Sequel"]).format(n=e.name)
    raise ValueError(e.type)


def _document(world_entities: Mapping[str, Entity], e: Entity, rng: random.Random) -> str:
    n = lambda rel: world_entities[e.facts[rel]].name  # noqa: E731
    if e.type == "country":
        return (
            f"{e.name} is a sovereign country with a parliamentary government. Its capital is "
            f"{n('capital')}, which replaced the former capital {n('former_capital')} after a "
            f"constitutional reform. The country is known for its {rng.choice(['mountains', 'coastline', 'lakes', 'forests'])}."
        )
    if e.type == "city":
        return (
            f"{e.name} is a city located in {n('located_in')}. It has a population of about "
            f"{rng.randint(20, 900) * 1000:,} and a {rng.choice(['river port', 'university', 'cathedral', 'market square'])} "
            f"that draws visitors."
        )
    if e.type == "person":
        return (
            f"{e.name} is a {rng.choice(['film director', 'producer', 'screenwriter', 'businessperson'])} "
            f"born in {n('born_in')}. {e.name.split()[0]} works for {n('works_for')} and has been active "
            f"since {rng.randint(1960, 2010)}."
        )
    if e.type == "company":
        return (
            f"{e.name} is a film studio founded by {n('founded_by')}. The company is headquartered in "
            f"{n('hq')}; it was headquartered in {n('former_hq')} before it relocated in "
            f"{rng.randint(1970, 2015)}."
        )
    if e.type == "film":
        return (
            f"{e.name} is a {rng.randint(1950, 2020)} {rng.choice(['drama', 'thriller', 'comedy', 'documentary', 'western'])} "
            f"film directed by {n('directed_by')} and produced by {n('produced_by')}. It received "
            f"{rng.choice(['mixed', 'warm', 'strong', 'modest'])} reviews."
        )
    raise ValueError(e.type)


# entity counts of the built-in world (about 3,600 documents with the near-miss entities)
_COUNTS = {"country": 30, "city": 260, "person": 900, "company": 320, "film": 1100}
_POP_WEIGHTS = {
    "country": (0.6, 0.4, 0.0),
    "city": (0.25, 0.4, 0.35),
    "person": (0.2, 0.35, 0.45),
    "company": (0.25, 0.35, 0.4),
    "film": (0.25, 0.35, 0.4),
}
FOLLOW_POPULARITY = 0.7  # chance a relation links to an entity of the subject's own popularity
TWIN_RATE = 0.35  # share of people, cities, companies and films with a near-miss entity


@lru_cache(maxsize=4)
def build_world(world_id: int = WORLD_ID) -> World:
    """The built-in encyclopaedia for ``world_id`` (deterministic; cached per process)."""
    rng = random.Random(f"orchrm-multihop-world-{world_id}")
    names: set[str] = set()
    ents: dict[str, dict] = {}
    pools: dict[tuple[str, str], list[str]] = {}

    def new(etype: str, pop: str | None = None) -> str:
        pop = pop or rng.choices(POPULARITY, _POP_WEIGHTS[etype])[0]
        name = unique_name(rng, etype, name_style(rng, pop), names)
        eid = f"{etype[:2]}{len(ents):05d}"
        ents[eid] = {"type": etype, "name": name, "pop": pop, "facts": {}}
        pools.setdefault((etype, pop), []).append(eid)
        pools.setdefault((etype, "*"), []).append(eid)
        return eid

    def pick(etype: str, pop: str, exclude: Sequence[str] = ()) -> str:
        pool = pools.get((etype, pop)) if rng.random() < FOLLOW_POPULARITY else None
        pool = pool or pools[(etype, "*")]
        while True:
            c = rng.choice(pool)
            if c not in exclude:
                return c

    for etype in ("country", "city", "person", "company", "film"):
        for _ in range(_COUNTS[etype]):
            new(etype)
    countries, cities = pools[("country", "*")], pools[("city", "*")]
    for c in cities:
        ents[c]["facts"]["located_in"] = rng.choice(
            pools[("country", "*")]
        )  # countries are all well known
    for k in countries:
        own = [c for c in cities if ents[k]["facts"].get("located_in") == k] or []
        while len(own) < 2:  # every country needs a current and a former capital
            c = new("city", ents[k]["pop"])
            ents[c]["facts"]["located_in"] = k
            own.append(c)
        cap, former = rng.sample(own, 2)
        ents[k]["facts"].update(capital=cap, former_capital=former)
    cities = pools[("city", "*")]
    for p in pools[("person", "*")]:
        ents[p]["facts"]["born_in"] = pick("city", ents[p]["pop"])
    for co in pools[("company", "*")]:
        pop = ents[co]["pop"]
        hq = pick("city", pop)
        ents[co]["facts"].update(
            founded_by=pick("person", pop), hq=hq, former_hq=pick("city", pop, exclude=(hq,))
        )
    for p in pools[("person", "*")]:
        ents[p]["facts"]["works_for"] = pick("company", ents[p]["pop"])
    for f in pools[("film", "*")]:
        pop = ents[f]["pop"]
        ents[f]["facts"].update(produced_by=pick("company", pop), directed_by=pick("person", pop))

    entities = {
        eid: Entity(eid, d["type"], d["name"], d["pop"], dict(d["facts"]))
        for eid, d in ents.items()
    }
    by_type = {t: tuple(pools[(t, "*")]) for t in _COUNTS}
    # near-miss entities: a similar name, the same kind of facts, different values
    twins: dict[str, list[str]] = {}
    for etype in ("person", "city", "company", "film"):
        for eid in by_type[etype]:
            if rng.random() >= TWIN_RATE:
                continue
            base = entities[eid]
            name = _twin_name(rng, base)
            if name.lower() in names:
                continue
            names.add(name.lower())
            facts = {}
            for rel, target in base.facts.items():
                otype = RELATIONS[rel][1]
                other = rng.choice(by_type[otype])
                while other == target:
                    other = rng.choice(by_type[otype])
                facts[rel] = other
            if etype == "company" and facts["former_hq"] == facts["hq"]:
                facts["former_hq"] = next(c for c in by_type["city"] if c != facts["hq"])
            tid = f"tw{len(entities):05d}"
            entities[tid] = Entity(tid, etype, name, base.popularity, facts, twin_of=eid)
            twins.setdefault(eid, []).append(tid)
    texts = {
        eid: _document(entities, e, random.Random(f"doc-{world_id}-{eid}"))
        for eid, e in entities.items()
    }
    mentions = {eid: tuple(dict.fromkeys([eid, *e.facts.values()])) for eid, e in entities.items()}
    return World(
        world_id=world_id,
        entities=entities,
        texts=texts,
        twins={k: tuple(v) for k, v in twins.items()},
        by_type=by_type,
        by_name={e.name.lower(): eid for eid, e in entities.items()},
        mentions=mentions,
    )


# ---------------------------------------------------------------------------------------------
# built-in questions
def _describe(world: World, chain: Sequence[Sequence[str]]) -> str:
    start = world.entities[chain[0][0]]
    desc = START_PHRASE[start.type].format(n=start.name)
    for _, rel, _ in chain:
        desc = REL_PHRASE[rel].format(x=desc)
    final_type = RELATIONS[chain[-1][1]][1]
    return f"{'Who' if final_type == 'person' else 'What'} is {desc}?"


def _walk(world: World, rng: random.Random, hops: int) -> list[list[str]] | None:
    start_type = rng.choices(("film", "company", "person"), (0.5, 0.2, 0.3))[0]
    current = rng.choice(world.by_type[start_type])
    seen = {current}
    chain: list[list[str]] = []
    prev_rel = None
    for _ in range(hops):
        etype = world.entities[current].type
        options = [r for r, (s, _) in RELATIONS.items() if s == etype]
        if prev_rel in ("capital", "former_capital"):
            options = [r for r in options if r != "located_in"]  # would return to the country
        if not options:
            return None
        rel = rng.choice(options)
        nxt = world.entities[current].facts[rel]
        if nxt in seen:
            return None
        chain.append([current, rel, nxt])
        seen.add(nxt)
        current, prev_rel = nxt, rel
    return chain


def kg_task(world: World, chain: Sequence[Sequence[str]], question: str | None = None) -> Task:
    """The Task for a relation chain of ``world`` (``question`` defaults to the template text)."""
    question = question or _describe(world, chain)
    answer = world.name(chain[-1][2])
    return Task(
        task_id=f"mh-{stable_id(world.world_id, question)}",
        domain=DOMAIN,
        question=question,
        reference=answer,
        metadata={
            "kind": "kg",
            "world": world.world_id,
            "chain": [list(h) for h in chain],
            "hops": len(chain),
            "trap_hops": [i for i, h in enumerate(chain) if h[1] in TRAP_SIBLING],
            "popularity": [world.entities[h[0]].popularity for h in chain],
        },
    )


def load_builtin(n: int, seed: int) -> list[Task]:
    """``n`` distinct 2–4-hop questions over the built-in world, the same for the same seed."""
    world = build_world(WORLD_ID)
    rng = random.Random(f"orchrm-multihop-questions-{seed}")

    def draw() -> Task | None:
        chain = _walk(world, rng, rng.choice((2, 3, 4)))
        return None if chain is None else kg_task(world, chain)

    return distinct_tasks(n, draw, source="the built-in multihop world")


# ---------------------------------------------------------------------------------------------
# StrategyQA
_SENT = re.compile(r"(?<=[.!?])\s+")


def _facts_of(target: str) -> list[str]:
    body = target.split(".", 1)[1] if "." in target else ""
    return [s.strip() for s in _SENT.split(body.strip()) if len(s.strip()) > 3]


@dataclass(frozen=True)
class FactCorpus:
    """StrategyQA's explanation sentences as a corpus: ``texts[doc_id]``; identical sentences
    share one document; ``popularity[doc_id]`` grades how widely known the fact is."""

    path: str
    texts: Mapping[str, str]
    popularity: Mapping[str, str]
    doc_of: Mapping[str, str]  # normalised sentence -> doc id

    def docs(self):
        return [Doc(d, _fact_title(t), t) for d, t in self.texts.items()]


def _fact_title(text: str) -> str:
    return " ".join(text.split()[:5]).rstrip(".,;:")


def _norm_sentence(s: str) -> str:
    return " ".join(s.lower().split())


@lru_cache(maxsize=2)
def strategyqa_corpus(path: str) -> FactCorpus:
    """The fact corpus of a StrategyQA file (cached per process).

    Popularity of a fact from its own wording (what a model is likely to have memorised): a
    fact with a precise number (two or more digits: a date, a measurement) or three or more
    capitalised names is a detail (``obscure``); a short general statement with at most one
    name is common knowledge (``famous``); the rest is ``known``.
    """
    examples = read_json_items(Path(path), "examples", "StrategyQA")
    texts: dict[str, str] = {}
    doc_of: dict[str, str] = {}
    with malformed_items(Path(path), "StrategyQA"):
        for ex in examples:
            for s in _facts_of(ex.get("target", "")):
                key = _norm_sentence(s)
                if key not in doc_of:
                    doc_of[key] = f"sqa{len(texts):05d}"
                    texts[doc_of[key]] = s
    popularity = {d: fact_popularity(t) for d, t in texts.items()}
    return FactCorpus(path, texts, popularity, doc_of)


def fact_popularity(sentence: str) -> str:
    """``famous`` | ``known`` | ``obscure`` for a fact sentence (see :func:`strategyqa_corpus`)."""
    words = sentence.split()
    names = sum(1 for w in words[1:] if w[:1].isupper())
    if re.search(r"\d\d", sentence) or names >= 3:
        return "obscure"
    if names <= 1 and len(words) <= 12:
        return "famous"
    return "known"


def load_strategyqa(n: int, seed: int) -> list[Task]:
    """``n`` StrategyQA questions (seeded sample without replacement; all if ``n`` exceeds them)."""
    path = data_file(STRATEGYQA_FILE, "StrategyQA")
    corpus = strategyqa_corpus(str(path))
    examples = read_json_items(path, "examples", "StrategyQA")
    order = list(range(len(examples)))
    random.Random(f"orchrm-strategyqa-{seed}").shuffle(order)
    tasks: dict[str, Task] = {}
    for i in order:
        if len(tasks) >= n:
            break
        ex = examples[i]
        scores = ex.get("target_scores") if isinstance(ex, dict) else None
        if not isinstance(scores, dict) or not {"Yes", "No"} & set(scores) or not isinstance(ex.get("input"), str):
            raise TaskError(f"{path}: example {i} has no 'input' question or no 'target_scores' for Yes/No; copy the file again")
        answer = "Yes" if scores.get("Yes", 0) > scores.get("No", 0) else "No"
        facts = [corpus.doc_of[_norm_sentence(s)] for s in _facts_of(ex.get("target", ""))]
        if not facts:
            continue
        task = Task(
            task_id=f"sqa-{stable_id(ex['input'], i)}",
            domain=DOMAIN,
            question=ex["input"],
            reference=answer,
            metadata={
                "kind": "facts",
                "corpus": str(path),
                "facts": facts,
                "hops": len(facts),
                "trap": is_trap_question(ex["input"]),
            },
        )
        tasks.setdefault(task.task_id, task)
    return list(tasks.values())


# ---------------------------------------------------------------------------------------------
# what a reader of the question can see
_TRAP = re.compile(
    r"\b(before it relocated|before the current one|former|originally|all|every|always|only|ever|"
    r"exceeds?|enough|same|both|never|not|without|entire|whole)\b|n't\b"
)
_HOP_CUE = re.compile(r"\b(of|that|where|which|whose)\b")
# one cue per relation phrase of the built-in questions (REL_PHRASE)
_REL_CUE = re.compile(
    r"\b(studio that produced|director of|founder of|headquartered|birthplace of|employs|lies|capital of)\b"
)
_SPECIFIC = re.compile(r"\(|\)|&|\b\d{4}\b|\b[A-Z]\.|-[A-Z]|\b\w+-(on|sur|by)-\w+")
_CAP = re.compile(r"\b[A-Z][a-z]+")


def is_trap_question(question: str) -> bool:
    """Phrasing a model tier tends to misread: 'before it relocated', quantifiers, negations."""
    return bool(_TRAP.search(question.lower()))


def question_features(question: str) -> dict[str, float]:
    """Features of the question text alone (no metadata): ``hops`` (estimated reasoning steps),
    ``length`` (words), ``specificity`` (long, unusual entity names in [0, 1] — a proxy for
    obscure entities the model cannot remember), ``trap`` (0/1), ``yes_no`` (0/1), ``names``
    (capitalised words after the first)."""
    q = question.strip()
    words = q.split()
    lower = q.lower()
    yes_no = float(
        bool(
            re.match(
                r"^(is|are|was|were|do|does|did|can|could|would|will|has|have|had|should)\b", lower
            )
        )
    )
    if yes_no:
        hops = 2.0 + min(2.0, max(0, len(words) - 8) / 6)
    else:
        cues = len(_REL_CUE.findall(lower)) or len(_HOP_CUE.findall(lower))
        hops = float(min(4, max(1, cues)))
    # the entity name: the capitalised tail after the last lowercase phrase word
    caps = _CAP.findall(q[1:])
    special = len(_SPECIFIC.findall(q))
    longest_cap_run = max(
        (len(m.split()) for m in re.findall(r"(?:[A-Z][\w'.&-]*\s?){1,}", q[1:])), default=0
    )
    specificity = min(
        1.0, 0.25 * special + 0.12 * max(0, longest_cap_run - 2) + 0.04 * max(0, len(caps) - 3)
    )
    return {
        "hops": hops,
        "length": float(len(words)),
        "specificity": specificity,
        "trap": float(is_trap_question(q)),
        "yes_no": yes_no,
        "names": float(len(caps)),
    }


def heuristic_plan_score(features: Mapping[str, float], plan: Plan) -> float:
    """How good ``plan`` looks for a question with ``features`` (higher is better).

    The specialized orchestrator's rule of thumb, from the question only: search when the
    entities look obscure (specific names) with at least one query per hop and a small top_k
    (more documents, more distractors); skip search for plain, famous-looking names; on a trap
    phrasing prefer the large tier or a Reflexion that re-reads, since voting cannot help;
    avoid small-tier Reflexion on plain questions (it over-corrects); charge for cost (:func:`~orchrm.execution.tasks.base.plan_cost`).
    """
    nodes = plan.nodes
    search = [n for n in nodes if n.agent == "WebSearch"]
    reasoners = [n for n in nodes if n.agent != "WebSearch"]
    spec, hops, trap = (
        features.get("specificity", 0.0),
        features.get("hops", 2.0),
        features.get("trap", 0.0),
    )
    score = 0.0
    if search:
        queries = max(n.int_param("queries") for n in search)
        top_k = max(n.int_param("top_k") for n in search)
        if features.get("yes_no"):
            # implicit questions: the facts behind named things are worth looking up
            score += 0.1 + 0.04 * min(3.0, features.get("names", 0.0)) - 0.02 * max(0, top_k - 5)
        else:
            score += (
                0.6 * (spec - 0.3)
                + 0.15 * min(1.0, queries / max(hops, 1.0))
                - 0.02 * max(0, top_k - 4)
            )
    elif not features.get("yes_no"):
        score += 0.4 * (0.3 - spec)
    large = any(n.model == "large" for n in reasoners)
    reflexion = [n for n in reasoners if n.agent == "Reflexion"]
    voting = [n for n in reasoners if n.agent in ("SelfConsistency", "Debate")]
    if trap:
        score += 0.25 * large + 0.15 * bool(reflexion) - 0.05 * bool(voting)
    else:
        score += 0.1 * large + 0.05 * bool(voting)
        if reflexion and not search and all(n.model == "small" for n in reflexion):
            score -= 0.1
    score += 0.03 * (hops - 2) * large
    return score - 0.04 * math.log1p(plan_cost(plan, cot_runs=0.3))


# ---------------------------------------------------------------------------------------------
# free text
_PHRASE_RE = {
    rel: re.compile(
        re.escape(p.split("{x}")[0].strip())
        + r"\s+(.*)"
        + (re.escape(p.split("{x}")[1].strip()) if p.split("{x}")[1].strip() else ""),
        re.I | re.S,
    )
    for rel, p in REL_PHRASE.items()
}


def from_text(question: str) -> Task | None:
    """A simulable Task for a free-text question about the built-in world, else None.

    Reads the question the way it was composed: an outer relation phrase around an inner
    description, down to a named entity of the world ("What is the capital of Varnland?").
    Questions about anything else return None (the generic domain handles them).
    """
    text = question.strip().rstrip("?. ")
    m = re.match(r"^(what|who|which)\s+(is|was)\s+(.*)$", text, re.I | re.S)
    if not m:
        return None
    world = build_world(WORLD_ID)
    rels: list[str] = []
    desc = m.group(3).strip()
    while True:
        eid = world.by_name.get(
            re.sub(r"^(the film|the company|the country|the city)\s+", "", desc, flags=re.I).lower()
        )
        if eid is not None and not world.entities[eid].twin_of:
            break
        for rel in sorted(REL_PHRASE, key=lambda r: -len(REL_PHRASE[r])):
            mm = _PHRASE_RE[rel].fullmatch(desc)
            if mm:
                rels.append(rel)
                desc = mm.group(1).strip()
                break
        else:
            return None
    if not rels:
        return None
    chain: list[list[str]] = []
    current = eid
    for rel in reversed(rels):
        ent = world.entities[current]
        if RELATIONS[rel][0] != ent.type:
            return None
        nxt = ent.facts[rel]
        chain.append([current, rel, nxt])
        current = nxt
    return kg_task(world, chain, question=question.strip())


register_source(
    TaskSource(
        DOMAIN,
        "builtin",
        load_builtin,
        "2-4 hop questions over a built-in encyclopaedia with near-miss entities",
    )
)
register_source(
    TaskSource(
        DOMAIN,
        "strategyqa",
        load_strategyqa,
        f"StrategyQA yes/no questions ({STRATEGYQA_FILE} under ${DATA_DIR_ENV})",
        finite=True,
    )
)

register_heuristic(DOMAIN, DomainHeuristic(features=question_features, score=heuristic_plan_score))
register_text_parser(DOMAIN, from_text)

__all__ = [
    "build_world",
    "from_text",
    "heuristic_plan_score",
    "kg_task",
    "load_builtin",
    "load_strategyqa",
    "make_name",
    "question_features",
    "strategyqa_corpus",
]
