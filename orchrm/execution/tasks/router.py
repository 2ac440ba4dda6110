"""Route a free-text task to a domain (DESIGN §12: a free-text task is routed, never refused).

The router reads only the text. The chosen domain's text parser (each built-in domain
registers its ``from_text`` with :func:`orchrm.execution.tasks.base.register_text_parser`) may turn the
question into a simulable task (e.g. a word problem whose arithmetic it can extract); otherwise
the task is marked ``generic`` and the sandbox runs it with the generic domain (no reference, no
quality: bring a quality function or a real LLM backend).
"""

from __future__ import annotations

import re

from orchrm.execution.tasks.base import Task, text_parser
from orchrm.util.digests import stable_id

_CODE = re.compile(r"\bdef\s+\w+\s*\(|\bpython\b|\bfunction\b|\bimplement\b|\breturn\b|```", re.I)
_MATH = re.compile(
    r"\b(solve|calculate|compute|how (many|much)|sum|product|integral|derivative|equation|percent|average|total)\b|[\d)]\s*[-+*/^=]\s*-?[\d(x]",
    re.I,
)
_MULTIHOP = re.compile(r"\b(of the|whose|which|that)\b.*\b(of the|whose|which|that|where|who)\b", re.I)


def route(question: str) -> str:
    """``code`` | ``math`` | ``multihop`` | ``webqa`` for a free-text question."""
    if _CODE.search(question):
        return "code"
    if _MATH.search(question):
        return "math"
    if _MULTIHOP.search(question):
        return "multihop"
    return "webqa"


def task_from_text(question: str, *, domain: str | None = None) -> Task:
    """A Task for free text: simulable if the domain can parse it, else generic."""
    question = question.strip()
    domain = domain or route(question)
    parse = text_parser(domain)
    task = parse(question) if parse else None
    if task is not None:
        return task
    return Task(
        task_id="text-" + stable_id(domain, question),
        domain=domain,
        question=question,
        reference=None,
        metadata={"generic": True, "source": "free-text"},
    )
