"""Task suites: built-in generators (no files needed) and loaders for real data sets.

>>> from orchrm.execution.tasks import load_tasks
>>> tasks = load_tasks("math", 3, seed=0)          # doctest: +SKIP
"""

from __future__ import annotations

from orchrm.execution.tasks.base import (
    BUILTIN_DOMAINS,
    Doc,
    DomainHeuristic,
    PlanHeuristic,
    Task,
    TaskSource,
    load_tasks,
    plan_heuristic,
    register_heuristic,
    register_source,
    register_text_parser,
    sources,
    text_parser,
)

__all__ = [
    "BUILTIN_DOMAINS",
    "Doc",
    "DomainHeuristic",
    "PlanHeuristic",
    "Task",
    "TaskSource",
    "load_tasks",
    "plan_heuristic",
    "register_heuristic",
    "register_source",
    "register_text_parser",
    "sources",
    "text_parser",
]
