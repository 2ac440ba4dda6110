"""The examples in the docstrings of orchrm, flows and benchmarks run and print what they say.

Examples that need a registry, a server or a trained model carry ``# doctest: +SKIP``; the rest
are run here, so a docstring cannot drift from the code it documents.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _modules_with_examples() -> list[str]:
    names = []
    for package in ("orchrm", "flows", "benchmarks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if ">>> " in path.read_text(encoding="utf-8"):
                parts = path.relative_to(ROOT).with_suffix("").parts
                names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


MODULES = _modules_with_examples()


def test_the_docstring_examples_are_found():
    assert {"orchrm.util.tokens", "benchmarks.question_reading", "benchmarks.ensemble_reading"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples in {name} failed (printed above)"
