"""The Task record (DESIGN §3) and the registry of task suites."""

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
from typing import Any

from orchrm.errors import TaskError

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


def stable_id(*parts: object, n: int = 12) -> str:
    """A short hex id from the parts' text (stable across processes and runs)."""
    return hashlib.sha1("\x1f".join(map(str, parts)).encode()).hexdigest()[:n]


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


_SOURCES: dict[tuple[str, str], TaskSource] = {}


def register_source(source: TaskSource) -> TaskSource:
    _SOURCES[(source.domain, source.name)] = source
    return source


def sources() -> Mapping[tuple[str, str], TaskSource]:
    from orchrm.tasks import _register_builtin_sources

    _register_builtin_sources()
    return MappingProxyType(_SOURCES)


def load_tasks(domain: str, n: int, *, seed: int = 0, source: str = "builtin") -> list[Task]:
    """``n`` tasks of ``domain`` from ``source`` (default: the built-in generator), seeded; all of
    a data set's tasks, with a warning, when it holds fewer."""
    if n <= 0:
        raise TaskError(f"asked for {n} tasks; ask for at least 1")
    src = sources().get((domain, source))
    if src is None:
        known = sorted(f"{d}:{s}" for d, s in sources())
        raise TaskError(f"no task source {source!r} for domain {domain!r}; known: {', '.join(known)}")
    tasks = list(src.load(n, seed))
    if not tasks:
        raise TaskError(f"task source {domain}:{source} returned no tasks")
    ids = [t.task_id for t in tasks]
    if len(set(ids)) != len(ids):
        raise TaskError(f"task source {domain}:{source} returned duplicate task ids")
    if len(tasks) < n:
        logging.getLogger("orchrm.tasks").warning(
            "task source %s:%s holds %d tasks; asked for %d, using all %d", domain, source, len(tasks), n, len(tasks)
        )
    return tasks
