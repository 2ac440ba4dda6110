"""The Task record (DESIGN §3), the corpus :class:`Doc`, and the registries each domain module
fills when it is imported: its task sources (:func:`register_source`), the heuristic the
specialized orchestrator reads questions with (:func:`register_heuristic`) and the parser that
turns free text into one of its tasks (:func:`register_text_parser`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol

from orchrm.errors import TaskError

if TYPE_CHECKING:
    from orchrm.plans import Plan

BUILTIN_DOMAINS: tuple[str, ...] = ("math", "code", "multihop", "webqa")

#: environment variable naming the folder of the real data sets (gsm8k/, squad/, strategyqa/)
DATA_DIR_ENV = "ORCHRM_DATA_DIR"


def data_dir() -> Path:
    """The real-data folder ``$ORCHRM_DATA_DIR``; :class:`TaskError` saying how to set it."""
    root = os.environ.get(DATA_DIR_ENV)
    if not root:
        raise TaskError(
            f"{DATA_DIR_ENV} is not set: point it at the folder that holds the data sets "
            f"(gsm8k/test.jsonl, squad/dev-v1.1.json, strategyqa/task.json); the built-in sources need no files"
        )
    return Path(root).expanduser()


def data_file(relative: str, what: str, *, suffixes: tuple[str, ...] = ("",)) -> Path:
    """``$ORCHRM_DATA_DIR/<relative>`` (trying each of ``suffixes``, e.g. ``("", ".gz")``);
    :class:`TaskError` naming the missing file and the fix when it is absent."""
    base = data_dir() / relative
    for suffix in suffixes:
        path = base.with_name(base.name + suffix)
        if path.is_file():
            return path
    raise TaskError(f"{what} file not found: {base}; put {relative} under ${DATA_DIR_ENV} or point {DATA_DIR_ENV} elsewhere")


def read_json_items(path: Path, key: str, what: str) -> list:
    """The list under ``key`` of the JSON file ``path``; :class:`TaskError` naming the file when
    it is not such a file (truncated, not JSON, another layout)."""
    try:
        items = json.loads(Path(path).read_text(encoding="utf-8"))[key]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise TaskError(f"{path}: not a {what} file ({type(exc).__name__}: {exc}); copy it again") from None
    if not isinstance(items, list):
        raise TaskError(f"{path}: not a {what} file ('{key}' is not a list); copy it again")
    return items


@contextmanager
def malformed_items(path: Path, what: str) -> Iterator[None]:
    """Within the block, a missing field or a wrong type in ``path``'s items is a :class:`TaskError`."""
    try:
        yield
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise TaskError(f"{path}: not a {what} file: an item lacks or mistypes a field ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class Doc:
    """A retrievable document of a domain's corpus (what WebSearch finds)."""

    doc_id: str
    title: str
    text: str


@dataclass(frozen=True)
class Task:
    """One task. ``reference`` is the gold answer (or unit tests) and is never shown to the
    reward model; ``metadata`` holds what the sandbox needs to simulate agents (solution steps,
    knowledge-graph path, corpus ids) and is likewise hidden from it."""

    task_id: str
    domain: str
    question: str
    reference: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.task_id or not isinstance(self.task_id, str):
            raise TaskError(f"task_id must be a non-empty string, got {self.task_id!r}")
        if not isinstance(self.question, str) or not self.question.strip():
            raise TaskError(f"task {self.task_id!r}: question is empty")
        if not isinstance(self.metadata, MappingProxyType):
            object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))

    def __reduce__(self):  # MappingProxyType does not pickle; rebuild from a plain dict
        return (Task, (self.task_id, self.domain, self.question, self.reference, dict(self.metadata)))

    def to_row(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "domain": self.domain,
            "question": self.question,
            "reference": self.reference,
            "metadata": dict(self.metadata),
        }


@dataclass(frozen=True)
class TaskSource:
    """A named way to get tasks of a domain: ``load(n, seed) -> list[Task]``.

    ``builtin`` sources generate tasks and need no files; the others read a data set and raise
    :class:`TaskError` naming the missing file when it is absent.
    """

    domain: str
    name: str
    load: Callable[[int, int], Sequence[Task]]
    doc: str
    #: a data set of a fixed number of tasks (HumanEval, GSM8K, ...), not a generator: a share of its
    #: tasks (:func:`is_held_out`) is kept out of collection, so that evaluation always has some
    finite: bool = False


#: the share of a finite task source's tasks kept for evaluation, never collected
HELD_OUT_SHARE = 0.2

#: which tasks :func:`load_tasks` draws from a finite source
TaskPart = Literal["all", "collect", "held_out"]


def is_held_out(task_id: str, share: float = HELD_OUT_SHARE) -> bool:
    """Whether a finite source's task belongs to its held-out part: by a hash of the task id
    alone, so the same task is held out whatever the seed, the number asked for or the rest of
    the data set (a file that grows keeps its held-out tasks held out)."""
    h = int.from_bytes(hashlib.sha256(f"orchrm-held-out:{task_id}".encode()).digest()[:8], "big")
    return h < share * 2**64


class PlanHeuristic(Protocol):
    """How a domain's specialized orchestrator rates a plan from the question text alone.

    ``features(question)`` reads what a reader of the question can see (never metadata or the
    reference); ``score(features, plan)`` is higher for a plan that suits such a question. A
    domain module declares one (a module or any object with these two functions) with
    :func:`register_heuristic`; :class:`orchrm.execution.samplers.SpecializedSampler` looks it up
    with :func:`plan_heuristic`.
    """

    def features(self, question: str) -> Mapping[str, float]: ...

    def score(self, features: Mapping[str, float], plan: Plan) -> float: ...


#: what :func:`plan_cost` charges a large-tier node per run, against 1 for the small tier (the
#: sandbox's default price ratio, ``TierConfig.cost_weight``)
LARGE_TIER_WEIGHT = 5.0


def plan_cost(plan: Plan, *, cot_runs: float = 1.0, search_runs: float = 0.3) -> float:
    """The rough cost of ``plan`` from its text alone, the cost term of every domain's heuristic:
    its reasoning runs (``k`` SelfConsistency samples, debaters times 1 + rounds, 1 + Reflexion
    iterations, ``cot_runs`` per CoT, ``search_runs`` per WebSearch), each weighted
    :data:`LARGE_TIER_WEIGHT` on the large tier.

    The heuristics weigh the two light nodes differently, as they were tuned: math charges a
    search a full run (``search_runs=1``), the QA domains charge a CoT like a search
    (``cot_runs=0.3``). The sandbox's own token counts put a search at a fifth to a quarter of the
    CoT that reads it; aligning the weights changes a few specialized plans per domain, and with
    them the published benchmark figures, so it waits for a change that reruns them.

    >>> from orchrm.plans import Plan
    >>> plan_cost(Plan.parse('<agent id="s" type="WebSearch" queries="1" top_k="3"/>'
    ...                      '<agent id="a" type="SelfConsistency" model="large" k="3"/><edge from="s" to="a"/>'))
    15.3
    """
    cost = 0.0
    for n in plan.nodes:
        if n.agent == "SelfConsistency":
            runs = float(n.int_param("k"))
        elif n.agent == "Debate":
            runs = float(n.int_param("agents") * (1 + n.int_param("rounds")))
        elif n.agent == "Reflexion":
            runs = float(1 + n.int_param("iterations"))
        elif n.agent == "WebSearch":
            runs = search_runs
        else:
            runs = cot_runs
        cost += (LARGE_TIER_WEIGHT if n.model == "large" else 1.0) * runs
    return cost


@dataclass(frozen=True)
class DomainHeuristic:
    """A :class:`PlanHeuristic` made of two plain functions (how the built-in domains declare
    theirs)."""

    features: Callable[[str], Mapping[str, float]]
    score: Callable[[Mapping[str, float], Plan], float]


_SOURCES: dict[tuple[str, str], TaskSource] = {}
_HEURISTICS: dict[str, PlanHeuristic] = {}
_TEXT_PARSERS: dict[str, Callable[[str], Task | None]] = {}
_builtins_loaded = False


def _load_builtin_domains() -> None:
    """Import the built-in domain modules once; each registers its sources, heuristic and text
    parser (nothing else runs at their import)."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    import importlib

    for name in BUILTIN_DOMAINS:
        importlib.import_module(f"orchrm.execution.tasks.{name}")
    _builtins_loaded = True


def register_source(source: TaskSource) -> TaskSource:
    _SOURCES[(source.domain, source.name)] = source
    return source


def sources() -> Mapping[tuple[str, str], TaskSource]:
    _load_builtin_domains()
    return MappingProxyType(_SOURCES)


def register_heuristic(domain: str, heuristic: PlanHeuristic) -> PlanHeuristic:
    """Declare ``heuristic`` as the way the specialized orchestrator reads ``domain``'s
    questions (a later registration for the same domain replaces it)."""
    if not callable(getattr(heuristic, "features", None)) or not callable(getattr(heuristic, "score", None)):
        raise TypeError(f"heuristic for domain {domain!r} needs callable features(question) and score(features, plan)")
    _HEURISTICS[domain] = heuristic
    return heuristic


def register_text_parser(domain: str, parse: Callable[[str], Task | None]) -> Callable[[str], Task | None]:
    """Declare how free text becomes a simulable ``domain`` task: ``parse(question)`` returns a
    Task, or None when the text is not one it can simulate (the router then makes a generic
    task)."""
    _TEXT_PARSERS[domain] = parse
    return parse


def text_parser(domain: str) -> Callable[[str], Task | None] | None:
    """The free-text parser registered for ``domain``, or None."""
    _load_builtin_domains()
    return _TEXT_PARSERS.get(domain)


def plan_heuristic(domain: str) -> PlanHeuristic | None:
    """The heuristic registered for ``domain``, or None (the specialized orchestrator then
    falls back to the base prior)."""
    _load_builtin_domains()
    return _HEURISTICS.get(domain)


def load_tasks(domain: str, n: int, *, seed: int = 0, source: str = "builtin", part: TaskPart = "all") -> list[Task]:
    """``n`` tasks of ``domain`` from ``source`` (default: the built-in generator), seeded; all of
    a data set's tasks, with a warning, when it holds fewer.

    ``part`` matters for a finite source (:attr:`TaskSource.finite`): ``collect`` draws only
    from the tasks outside its held-out share (:func:`is_held_out`), ``held_out`` only from
    inside it, ``all`` from both. Collection asks for ``collect`` and the evaluation pool for
    ``held_out``, so however many tasks a collection asks for, a data set never runs out of
    evaluation tasks. A generator has no fixed set: ``part`` leaves it alone."""
    if n <= 0:
        raise TaskError(f"asked for {n} tasks; ask for at least 1")
    src = sources().get((domain, source))
    if src is None:
        known = sorted(f"{d}:{s}" for d, s in sources())
        raise TaskError(f"no task source {source!r} for domain {domain!r}; known: {', '.join(known)}")
    if part not in ("all", "collect", "held_out"):
        raise TaskError(f"part {part!r}: use 'all', 'collect' or 'held_out'")
    tasks = list(src.load(n, seed)) if part == "all" or not src.finite else _load_part(src, n, seed, part)
    if not tasks:
        raise TaskError(f"task source {domain}:{source} returned no tasks")
    ids = [t.task_id for t in tasks]
    if len(set(ids)) != len(ids):
        raise TaskError(f"task source {domain}:{source} returned duplicate task ids")
    if len(tasks) < n:
        which = "" if part == "all" or not src.finite else f" in its {part.replace('_', '-')} part"
        logging.getLogger("orchrm.execution.tasks").warning(
            "task source %s:%s holds %d tasks%s; asked for %d, using all %d", domain, source, len(tasks), which, n, len(tasks)
        )
    return tasks


def _load_part(src: TaskSource, n: int, seed: int, part: TaskPart) -> list[Task]:
    """``n`` tasks of a finite source that lie in ``part``: the first of ``load(m, seed)``, asking
    for more (``m`` doubles) until ``n`` are found or the source runs dry. The same ``(n, seed)``
    gives the same tasks; the two parts never share one."""
    want_held_out = part == "held_out"
    share = HELD_OUT_SHARE if want_held_out else 1.0 - HELD_OUT_SHARE
    m = max(n, int(n / share) + 8)
    while True:
        drawn = list(src.load(m, seed))
        kept = [t for t in drawn if is_held_out(t.task_id) == want_held_out]
        if len(kept) >= n or len(drawn) < m:
            return kept[:n]
        m *= 2
