"""webqa tasks: single-fact questions over a built-in web corpus, and SQuAD v1.1.

Sources (registered on import; nothing is built until ``load`` is called):

- ``webqa:builtin`` — a built-in corpus of pages (:func:`build_corpus`) about synthetic towns,
  companies and people. Many entities also have *distractor pages*: an outdated archived
  profile of the same entity (older population, the previous mayor) and a similarly named
  entity's page ("North Port Ellison"). Questions ask for one fact with varied specificity: a
  *vague* question names only the entity ("What is the population of Port Ellison?"), a
  *specific* one adds qualifiers that separate it from its look-alikes ("..., the town in Varn
  province, at the 2020 census?"). Entities are famous, known or obscure (long, unusual names
  mark obscure ones). Questions about a *previous* office holder are traps (a reader defaults to
  the current one).
- ``webqa:squad`` — SQuAD v1.1 dev (``squad/dev-v1.1.json`` under ``$ORCHRM_DATA_DIR``): the
  2,067 paragraphs are the corpus, each question's answer texts are all valid references
  (``metadata["answers"]``; ``reference`` is the first).

Also here: :func:`question_features`, :func:`heuristic_plan_score` and :func:`from_text`.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

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

DOMAIN = "webqa"
WORLD_ID = 0
SQUAD_FILE = "squad/dev-v1.1.json"

# attribute -> (vague template, specific template); {n} name, {q} the entity's qualifier
TEMPLATES: Mapping[str, Mapping[str, tuple[str, str]]] = {
    "town": {
        "population": (
            "What is the population of {n}?",
            "What was the population of {n}, the town in {q}, at the 2020 census?",
        ),
        "founded": ("When was {n} founded?", "In what year was {n}, the town in {q}, founded?"),
        "mayor": ("Who is the mayor of {n}?", "Who is the current mayor of {n}, the town in {q}?"),
        "former_mayor": (
            "Who was the mayor of {n} before the current one?",
            "Who was the mayor of {n}, the town in {q}, before the current mayor took office?",
        ),
        "river": (
            "Which river flows through {n}?",
            "Which river flows through {n}, the town in {q}?",
        ),
    },
    "company": {
        "founder": ("Who founded {n}?", "Who founded {n}, the company based in {q}?"),
        "founded": (
            "When was {n} founded?",
            "In what year was {n}, the company based in {q}, founded?",
        ),
        "employees": (
            "How many employees does {n} have?",
            "How many employees did {n}, the company based in {q}, report in 2020?",
        ),
        "ceo": (
            "Who is the CEO of {n}?",
            "Who is the current chief executive of {n}, the company based in {q}?",
        ),
        "former_ceo": (
            "Who was the CEO of {n} before the current one?",
            "Who led {n}, the company based in {q}, before its current chief executive?",
        ),
    },
    "person": {
        "born": ("When was {n} born?", "In what year was {n}, the {q}, born?"),
        "birthplace": ("Where was {n} born?", "In which town was {n}, the {q}, born?"),
        "employer": ("Where does {n} work?", "Which company does {n}, the {q}, work for now?"),
        "former_employer": (
            "Where did {n} work before the current job?",
            "Which company did {n}, the {q}, work for before joining the current one?",
        ),
        "award": ("Which award did {n} win?", "Which award did {n}, the {q}, win?"),
    },
}
TRAP_SIBLING: Mapping[str, str] = {
    "former_mayor": "mayor",
    "former_ceo": "ceo",
    "former_employer": "employer",
}
# time-varying attributes: an archived page gives the value of its time
ARCHIVE_SHIFT: Mapping[str, str] = {
    "mayor": "former_mayor",
    "ceo": "former_ceo",
    "employer": "former_employer",
}

_RIVERS = [
    "Vray",
    "Oskel",
    "Taun",
    "Merrow",
    "Lisk",
    "Arden",
    "Saule",
    "Brenn",
    "Kiva",
    "Olm",
    "Dorran",
    "Ystel",
]
_AWARDS = [
    "Halden Prize",
    "Corvin Medal",
    "Star of Ameth",
    "Lauriston Award",
    "Golden Quill",
    "Meridian Fellowship",
    "Order of Tavel",
]
_JOBS = [
    "chemist",
    "architect",
    "novelist",
    "economist",
    "composer",
    "engineer",
    "historian",
    "painter",
]
_PROVINCES_N = 24


@dataclass(frozen=True)
class Page:
    """One web page: ``entity`` it describes, ``values`` it states (attribute -> answer text)."""

    doc_id: str
    title: str
    text: str
    entity: str
    values: Mapping[str, str]


@dataclass(frozen=True)
class WebEntity:
    eid: str
    type: str
    name: str
    popularity: str
    qualifier: str
    values: Mapping[str, str]
    twin_of: str | None = None


@dataclass(frozen=True)
class WebCorpus:
    """The built-in web: entities, pages, and each entity's distractor pages."""

    world_id: int
    entities: Mapping[str, WebEntity]
    pages: Mapping[str, Page]
    distractors: Mapping[str, tuple[str, ...]]  # entity id -> ids of its archive/look-alike pages
    by_name: Mapping[str, str]

    def docs(self):
        return [Doc(p.doc_id, p.title, p.text) for p in self.pages.values()]


def _fmt_int(x: int) -> str:
    return f"{x:,}"


def _page_text(e: WebEntity, v: Mapping[str, str], archived: str | None = None) -> str:
    when = f"As of {archived}," if archived else "As of the 2020 census,"
    if e.type == "town":
        return (
            f"{e.name} is a town in {e.qualifier}. {when} it had a population of {v['population']}. "
            f"It was founded in {v['founded']} on the banks of the {v['river']} river. The current mayor is "
            f"{v['mayor']}, who succeeded {v['former_mayor']}."
        )
    if e.type == "company":
        staff = (
            f"{'In ' + archived if archived else 'In 2020'} it reported {v['employees']} employees."
        )
        return (
            f"{e.name} is a company based in {e.qualifier}, founded in {v['founded']} by {v['founder']}. "
            f"{staff} Its chief executive is {v['ceo']}, who took over from {v['former_ceo']}."
        )
    return (
        f"{e.name} is {'an' if e.qualifier[:1] in 'aeiou' else 'a'} {e.qualifier} born in {v['born']} in {v['birthplace']}. {e.name.split()[0]} works for "
        f"{v['employer']}, having previously worked for {v['former_employer']}, and won the {v['award']}."
    )


_COUNTS = {"town": 500, "company": 420, "person": 700}
_POP_WEIGHTS = (0.25, 0.35, 0.4)
ARCHIVE_RATE = 0.5  # entities with an outdated archived page
TWIN_RATE = 0.4  # entities with a similarly named look-alike


@lru_cache(maxsize=4)
def build_corpus(world_id: int = WORLD_ID) -> WebCorpus:
    """The built-in web corpus for ``world_id`` (deterministic; cached per process)."""
    rng = random.Random(f"orchrm-webqa-world-{world_id}")
    names: set[str] = set()

    def fresh(etype: str, style: str) -> str:
        return unique_name(rng, "city" if etype == "town" else etype, style, names)

    provinces = [f"{make_name(rng, 'country', 'famous')} province" for _ in range(_PROVINCES_N)]
    people_names = [fresh("person", rng.choice(POPULARITY)) for _ in range(900)]
    entities: dict[str, WebEntity] = {}
    town_names: list[str] = []
    company_names: list[str] = []

    def values(etype: str) -> dict[str, str]:
        if etype == "town":
            m1, m2 = rng.sample(people_names, 2)
            return {
                "population": _fmt_int(rng.randint(800, 400_000)),
                "founded": str(rng.randint(1450, 1950)),
                "mayor": m1,
                "former_mayor": m2,
                "river": rng.choice(_RIVERS),
            }
        if etype == "company":
            f, c1, c2 = rng.sample(people_names, 3)
            return {
                "founder": f,
                "founded": str(rng.randint(1880, 2015)),
                "employees": _fmt_int(rng.randint(12, 90_000)),
                "ceo": c1,
                "former_ceo": c2,
            }
        e1, e2 = rng.sample(company_names, 2)
        return {
            "born": str(rng.randint(1930, 2000)),
            "birthplace": rng.choice(town_names),
            "employer": e1,
            "former_employer": e2,
            "award": rng.choice(_AWARDS),
        }

    for etype in ("town", "company", "person"):
        for i in range(_COUNTS[etype]):
            pop = rng.choices(POPULARITY, _POP_WEIGHTS)[0]
            name = fresh(etype, name_style(rng, pop))
            qual = rng.choice(provinces) if etype == "town" else None
            eid = f"{etype[:2]}{i:04d}"
            if etype == "company":
                qual = rng.choice(town_names)
            if etype == "person":
                qual = rng.choice(_JOBS)
            entities[eid] = WebEntity(eid, etype, name, pop, qual, values(etype))
            (town_names if etype == "town" else company_names if etype == "company" else []).append(
                name
            )

    pages: dict[str, Page] = {}
    distractors: dict[str, list[str]] = {}
    base_ids = list(entities)
    for eid in base_ids:
        e = entities[eid]
        pages[eid] = Page(eid, e.name, _page_text(e, e.values), eid, e.values)
    for eid in base_ids:
        e = entities[eid]
        if rng.random() < ARCHIVE_RATE:
            year = rng.randint(2004, 2012)
            old = dict(e.values)
            for attr, previous in ARCHIVE_SHIFT.items():
                if attr in old:
                    old[attr], old[previous] = e.values[previous], rng.choice(people_names)
            if "population" in old:
                old["population"] = _fmt_int(
                    int(int(e.values["population"].replace(",", "")) * rng.uniform(0.7, 0.95))
                )
            if "employees" in old:
                old["employees"] = _fmt_int(
                    max(5, int(int(e.values["employees"].replace(",", "")) * rng.uniform(0.4, 0.9)))
                )
            did = f"{eid}-archive"
            pages[did] = Page(
                did,
                f"{e.name} (archived {year} profile)",
                _page_text(e, old, archived=str(year)),
                eid,
                old,
            )
            distractors.setdefault(eid, []).append(did)
        if rng.random() < TWIN_RATE:
            tname = rng.choice(
                ["North {n}", "New {n}", "{n} Heights"]
                if e.type == "town"
                else ["{n} Group", "{n} International"]
                if e.type == "company"
                else ["{f} {i}. {r}"]
            )
            first, _, rest = e.name.partition(" ")
            tname = tname.format(n=e.name, f=first, i=rng.choice("ABCDEFGHJKLMNPRST"), r=rest)
            if tname.lower() in names:
                continue
            names.add(tname.lower())
            tid = f"tw{len(entities):04d}"
            qual = (
                rng.choice(provinces)
                if e.type == "town"
                else rng.choice(town_names)
                if e.type == "company"
                else rng.choice(_JOBS)
            )
            twin = WebEntity(tid, e.type, tname, e.popularity, qual, values(e.type), twin_of=eid)
            entities[tid] = twin
            pages[tid] = Page(tid, tname, _page_text(twin, twin.values), tid, twin.values)
            distractors.setdefault(eid, []).append(tid)
    return WebCorpus(
        world_id=world_id,
        entities=entities,
        pages=pages,
        distractors={k: tuple(v) for k, v in distractors.items()},
        by_name={e.name.lower(): eid for eid, e in entities.items()},
    )


def builtin_task(
    corpus: WebCorpus, eid: str, attr: str, specific: bool, question: str | None = None
) -> Task:
    """The Task asking ``attr`` of entity ``eid`` (vague or specific phrasing)."""
    e = corpus.entities[eid]
    vague, spec = TEMPLATES[e.type][attr]
    question = question or (spec if specific else vague).format(n=e.name, q=e.qualifier)
    return Task(
        task_id=f"wq-{stable_id(corpus.world_id, question)}",
        domain=DOMAIN,
        question=question,
        reference=e.values[attr],
        metadata={
            "kind": "builtin",
            "world": corpus.world_id,
            "entity": eid,
            "attribute": attr,
            "specific": bool(specific),
            "popularity": e.popularity,
            "trap": attr in TRAP_SIBLING,
            "answers": [e.values[attr]],
        },
    )


def load_builtin(n: int, seed: int) -> list[Task]:
    """``n`` distinct single-fact questions over the built-in corpus, the same for the same seed."""
    corpus = build_corpus(WORLD_ID)
    rng = random.Random(f"orchrm-webqa-questions-{seed}")
    base = [eid for eid, e in corpus.entities.items() if e.twin_of is None]

    def draw() -> Task:
        eid = rng.choice(base)
        attr = rng.choice(list(TEMPLATES[corpus.entities[eid].type]))
        return builtin_task(corpus, eid, attr, specific=rng.random() < 0.5)

    return distinct_tasks(n, draw, source="the built-in webqa corpus")


# ---------------------------------------------------------------------------------------------
# SQuAD
@dataclass(frozen=True)
class SquadCorpus:
    """SQuAD paragraphs as a corpus: ``texts[doc_id]``, ``titles[doc_id]``, and the answer
    spans of every question asked about each paragraph (``spans[doc_id]``)."""

    path: str
    texts: Mapping[str, str]
    titles: Mapping[str, str]
    spans: Mapping[str, tuple[str, ...]]

    def docs(self):
        return [Doc(d, self.titles[d], t) for d, t in self.texts.items()]


@lru_cache(maxsize=2)
def squad_corpus(path: str) -> SquadCorpus:
    """The paragraphs and answer spans of a SQuAD v1.1 file (cached per process)."""
    data = read_json_items(Path(path), "data", "SQuAD v1.1")
    texts, titles, spans = {}, {}, {}
    with malformed_items(Path(path), "SQuAD v1.1"):
        for article in data:
            title = article["title"].replace("_", " ")
            for i, para in enumerate(article["paragraphs"]):
                did = f"{article['title']}#{i}"
                texts[did] = para["context"]
                titles[did] = title
                spans[did] = tuple(
                    dict.fromkeys(q["answers"][0]["text"].strip() for q in para["qas"] if q["answers"])
                )
    return SquadCorpus(path, texts, titles, spans)


def squad_file() -> Path:
    return data_file(SQUAD_FILE, "SQuAD v1.1 dev")


def load_squad(n: int, seed: int) -> list[Task]:
    """``n`` SQuAD v1.1 dev questions (seeded sample without replacement)."""
    path = squad_file()
    data = read_json_items(path, "data", "SQuAD v1.1")
    rows = []
    with malformed_items(path, "SQuAD v1.1"):
        for article in data:
            for i, para in enumerate(article["paragraphs"]):
                for q in para["qas"]:
                    answers = list(dict.fromkeys(a["text"].strip() for a in q["answers"]))
                    if answers:
                        rows.append(
                            (q["id"], q["question"].strip(), answers, f"{article['title']}#{i}")
                        )
    random.Random(f"orchrm-squad-{seed}").shuffle(rows)
    return [
        Task(
            task_id=f"squad-{qid}",
            domain=DOMAIN,
            question=question,
            reference=answers[0],
            metadata={
                "kind": "squad",
                "corpus": str(path),
                "doc": doc,
                "answers": answers,
                "trap": is_trap_question(question),
                "popularity": squad_popularity(question),
            },
        )
        for qid, question, answers, doc in rows[:n]
    ]


# ---------------------------------------------------------------------------------------------
# what a reader of the question can see
_TRAP = re.compile(
    r"\b(before the current|before joining|before its current|not|never|except|other than|besides|rather than|"
    r"instead of|no longer|without|first|last|former|previous|previously|originally)\b|n't\b"
)
_NUMERIC = re.compile(
    r"^(how many|how much|what year|when|in what year|what percentage|how long|how old)\b|\b(how many|how much|what year|which year|what percentage)\b"
)
_QUALIFIER = re.compile(
    r",\s*(the|which|who)\b|\b(the town in|based in|province|census|in \d{4}|current)\b"
)
_CAP = re.compile(r"\b[A-Z][\w'.-]*")


def is_trap_question(question: str) -> bool:
    """Phrasing a tier tends to misread: 'before the current one', negations, first/last."""
    return bool(_TRAP.search(question.lower()))


def squad_popularity(question: str) -> str:
    """How memorable the asked fact is, from the question. SQuAD asks for details of a
    passage (``obscure``: numbers, dates, anything phrased at length); only a short question
    about a named entity ("Who founded the Yuan dynasty?") asks for something a model may have
    memorised (``known``)."""
    q = question.strip()
    if _NUMERIC.search(q.lower()) or len(q.split()) > 8:
        return "obscure"
    return "known" if _CAP.search(q[1:]) else "obscure"


def question_features(question: str) -> dict[str, float]:
    """Features of the question text alone: ``specificity`` (qualifiers that single out the
    entity, in [0, 1]), ``obscurity`` (long, unusual entity names, in [0, 1]), ``numeric``
    (asks for a number or date), ``trap`` (0/1), ``length`` (words)."""
    q = question.strip()
    lower = q.lower()
    words = q.split()
    caps = _CAP.findall(q[1:])
    longest = max((len(m.split()) for m in re.findall(r"(?:[A-Z][\w'.&-]*\s?)+", q[1:])), default=0)
    odd = len(re.findall(r"\b[A-Z]\.|-[A-Z]|-(?:on|sur)-|&|\(|\b(?:Upper|Lower|by the)\b", q))
    return {
        "specificity": min(
            1.0, 0.4 * len(_QUALIFIER.findall(lower)) + 0.05 * max(0, len(words) - 10)
        ),
        "obscurity": min(
            1.0, 0.3 * odd + 0.15 * max(0, longest - 2) + 0.03 * max(0, len(caps) - 3)
        ),
        "numeric": float(bool(_NUMERIC.search(lower))),
        "trap": float(is_trap_question(q)),
        "length": float(len(words)),
    }


def heuristic_plan_score(features: Mapping[str, float], plan: Plan) -> float:
    """How good ``plan`` looks for a question with ``features`` (higher is better).

    Rule of thumb from the question only: search unless the entity looks famous (a plain name)
    and keep top_k small when the question is vague (look-alike pages crowd in); vague
    questions over search benefit from voting or a Reflexion that re-reads; trap phrasings want
    the large tier or a Reflexion; charge for cost (:func:`~orchrm.execution.tasks.base.plan_cost`).
    """
    search = [n for n in plan.nodes if n.agent == "WebSearch"]
    reasoners = [n for n in plan.nodes if n.agent != "WebSearch"]
    spec, obsc, trap = (
        features.get("specificity", 0.0),
        features.get("obscurity", 0.0),
        features.get("trap", 0.0),
    )
    large = any(n.model == "large" for n in reasoners)
    reflexion = any(n.agent == "Reflexion" for n in reasoners)
    voting = any(n.agent in ("SelfConsistency", "Debate") for n in reasoners)
    score = 0.0
    if search:
        top_k = max(n.int_param("top_k") for n in search)
        score += 0.25 + 0.3 * obsc - 0.03 * (1.0 - spec) * max(0, top_k - 3)
        score += (0.08 * voting + 0.08 * reflexion) * (1.0 - spec)
    else:
        score += 0.3 * (0.35 - obsc)
    if trap:
        score += 0.2 * large + 0.12 * reflexion - 0.05 * voting
    else:
        score += 0.08 * large
        if (
            reflexion
            and not search
            and all(n.model == "small" for n in reasoners if n.agent == "Reflexion")
        ):
            score -= 0.08
    return score - 0.04 * math.log1p(plan_cost(plan, cot_runs=0.3))


def from_text(question: str) -> Task | None:
    """A simulable Task when the free text asks one of the built-in questions about an entity
    of the built-in corpus (vague or specific phrasing, exact up to case and spacing), else None."""
    corpus = build_corpus(WORLD_ID)
    text = " ".join(question.split())
    key = text.lower().rstrip("?. ")
    for _name, eid in _names_in(corpus, key):
        e = corpus.entities[eid]
        for attr, (vague, spec) in TEMPLATES[e.type].items():
            for specific, template in ((False, vague), (True, spec)):
                if template.format(n=e.name, q=e.qualifier).lower().rstrip("?. ") == key:
                    return builtin_task(corpus, eid, attr, specific, question=text)
    return None


def _names_in(corpus: WebCorpus, lowered: str) -> list[tuple[str, str]]:
    """Entity names that occur in the (lowercased) text, longest first."""
    words = lowered.replace(",", " ").replace("?", " ").split()
    found = []
    for i in range(len(words)):
        for j in range(min(len(words), i + 8), i, -1):
            eid = corpus.by_name.get(" ".join(words[i:j]))
            if eid is not None:
                found.append((" ".join(words[i:j]), eid))
    return sorted(set(found), key=lambda x: -len(x[0]))


register_source(
    TaskSource(
        DOMAIN,
        "builtin",
        load_builtin,
        "single-fact questions over a built-in web corpus with distractor pages",
    )
)
register_source(
    TaskSource(
        DOMAIN, "squad", load_squad, f"SQuAD v1.1 dev questions ({SQUAD_FILE} under ${DATA_DIR_ENV})", finite=True
    )
)

register_heuristic(DOMAIN, DomainHeuristic(features=question_features, score=heuristic_plan_score))
register_text_parser(DOMAIN, from_text)

__all__ = [
    "build_corpus",
    "builtin_task",
    "from_text",
    "heuristic_plan_score",
    "load_builtin",
    "load_squad",
    "question_features",
    "squad_corpus",
]
