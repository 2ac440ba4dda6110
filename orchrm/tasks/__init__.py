"""Task suites: built-in generators (no files needed) and loaders for real data sets.

>>> from orchrm.tasks import load_tasks
>>> tasks = load_tasks("math", 3, seed=0)          # doctest: +SKIP
"""

from __future__ import annotations

from orchrm.tasks.base import (
    BUILTIN_DOMAINS,
    Task,
    TaskSource,
    load_tasks,
    register_source,
    sources,
    stable_id,
)

__all__ = ["BUILTIN_DOMAINS", "Task", "TaskSource", "load_tasks", "register_source", "sources", "stable_id"]

_REGISTERED = False


def _register_builtin_sources() -> None:
    """Import the domain modules once; each registers its sources (nothing runs at import)."""
    global _REGISTERED
    if _REGISTERED:
        return
    import importlib

    for name in BUILTIN_DOMAINS:
        importlib.import_module(f"orchrm.tasks.{name}")
    _REGISTERED = True
