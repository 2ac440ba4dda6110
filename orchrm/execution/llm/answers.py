"""Reading an answer out of a real model's text, per domain, and the vote over several.

A model writes free text; the artifact table needs the candidate answer in the form the domain's
quality rule reads (DESIGN §3). :func:`extract_answer` finds it — math: the final number; code: a
complete program (the first ``python`` block, else the text from ``def``), with the prompt's
imports and signature where the block lacks them; multihop / webqa: a short answer (yes / no for
a yes/no question) — and returns None when the text holds none. None is a *parse failure*: the
backend records it in the artifact's ``parse_failed`` column, so a format slip is never mistaken
for a wrong answer.

>>> extract_answer("math", "48 / 2 = 24. 48 + 24 = 72.\\nAnswer: $72.").answer
'72'
>>> extract_answer("math", "In April she sold 48 and in May", finished=False).answer is None
True
>>> majority(["72", "70", "72", None])
('72', 2)
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

#: the answer markers a model is asked for, and the ones it writes anyway (last one wins)
_MARKER = re.compile(r"(?:final answer|answer)\s*(?:is)?\s*[:=]\s*|\bthe answer is\s+|####\s*", re.I)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)
_DEF = re.compile(r"^(?:async\s+)?def\s+\w+\s*\(", re.M)
_YES_NO = re.compile(r"^\W*(yes|no)\b", re.I)
#: a short answer is at most this many words: a longer "answer" is a sentence, cut to its start
SHORT_ANSWER_WORDS = 12


@dataclass(frozen=True)
class Extracted:
    """What :func:`extract_answer` read: ``answer`` (None: a parse failure) and ``how`` it was
    found (``marker``, ``boxed``, ``last number``, ``code block``, ``def``, ``last line``, or
    ``none``)."""

    answer: str | None
    how: str

    @property
    def parse_failed(self) -> bool:
        return self.answer is None


def _after_marker(text: str) -> str | None:
    """The text after the last answer marker (up to the end of its line), or None."""
    found = list(_MARKER.finditer(text))
    if not found:
        return None
    rest = text[found[-1].end():].strip()
    return rest.splitlines()[0].strip() if rest else None


def extract_math(text: str, *, finished: bool = True) -> Extracted:
    """The final number: after the last ``Answer:`` (or ``####``, ``\\boxed{}``); without a marker,
    the last number of a text the model finished. A text cut at ``max_tokens`` without a marker
    ends mid-computation: its last number is not an answer, so that is a parse failure."""
    from orchrm.execution.tasks.math import normalize_number

    boxed = _BOXED.findall(text)
    if boxed and normalize_number(boxed[-1]) is not None:
        return Extracted(normalize_number(boxed[-1]), "boxed")
    marked = _after_marker(text)
    if marked is not None:
        number = normalize_number(marked.split("=")[-1]) if "=" in marked else _first_number(marked)
        if number is not None:
            return Extracted(number, "marker")
    if finished:
        number = normalize_number(text)
        if number is not None:
            return Extracted(number, "last number")
    return Extracted(None, "none")


def _first_number(text: str) -> str | None:
    """The first number of ``text`` in canonical form ("72 clips, since 48 + 24" -> "72")."""
    from orchrm.execution.tasks.math import normalize_number

    return next((n for n in map(normalize_number, text.split()) if n is not None), None)


def extract_code(text: str, *, prompt: str = "", entry_point: str | None = None) -> Extracted:
    """A complete program: the first fenced python block (an unclosed one up to the end of the
    text), else the text from its first ``def``. A block that does not define ``entry_point`` is
    taken as its body and appended to ``prompt``; one that does gets the prompt's import lines it
    lacks (HumanEval signatures use ``List`` from ``typing``). No code at all is a parse failure."""
    m = _FENCE.search(text)
    if m and m.group(1).strip():
        code, how = m.group(1), "code block"
    else:
        d = _DEF.search(text)
        if d is None:
            return Extracted(None, "none")
        code, how = text[d.start():], "def"
    code = code.strip("\n")
    if entry_point and prompt:
        if re.search(rf"\bdef\s+{re.escape(entry_point)}\s*\(", code):
            imports = [line for line in prompt.splitlines() if re.match(r"(?:from\s+\S+\s+)?import\s", line) and line not in code]
            code = "\n".join([*imports, code]) if imports else code
        else:
            code = prompt + code
    return Extracted(code + "\n", how)


def extract_short(text: str, *, finished: bool = True, yes_no: bool = False) -> Extracted:
    """A short answer: the line after the last ``Answer:``; without a marker, the last line of a
    text the model finished. Trailing punctuation is dropped and a sentence is cut to
    :data:`SHORT_ANSWER_WORDS` words; with ``yes_no`` (a yes/no question) the answer is ``yes``
    or ``no``, else a parse failure."""
    marked = _after_marker(text)
    how = "marker"
    if marked is None:
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        if not finished or not lines:
            return Extracted(None, "none")
        marked, how = lines[-1], "last line"
    answer = " ".join(marked.strip().strip("*").split()[:SHORT_ANSWER_WORDS]).rstrip(" .;,!")
    if yes_no:
        yn = _YES_NO.match(answer)
        return Extracted(yn.group(1).lower(), how) if yn else Extracted(None, "none")
    return Extracted(answer, how) if answer else Extracted(None, "none")


def extract_answer(
    domain: str, text: str, *, finished: bool = True, prompt: str = "", entry_point: str | None = None, yes_no: bool = False
) -> Extracted:
    """The candidate answer of ``text`` for ``domain`` (see the module docstring); ``finished``
    is False for a completion cut at ``max_tokens`` (finish reason ``length``)."""
    if domain == "math":
        return extract_math(text, finished=finished)
    if domain == "code":
        return extract_code(text, prompt=prompt, entry_point=entry_point)
    return extract_short(text, finished=finished, yes_no=yes_no)


def compiles(code: str) -> bool:
    """Whether ``code`` parses as Python (a program cut mid-line does not)."""
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def majority(keys: Sequence[Hashable | None]) -> tuple[Hashable | None, int]:
    """The most common key that is not None (ties: the one seen first) and its count; ``(None,
    0)`` when every key is None (all samples failed to parse)."""
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return None, 0
    best = max(counts.values())
    return next(k for k in keys if k is not None and counts[k] == best), best


_NUM = r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"  # thousands commas only in threes
_ARITH = re.compile(rf"(?<![\w.])({_NUM}(?:\s*[-+*/x\u00d7\u00f7]\s*{_NUM})+)\s*=\s*\$?(-?{_NUM})")


def check_arithmetic(text: str) -> list[str]:
    """Reflexion's calculator in the math domain: every ``a op b = c`` the text writes, recomputed;
    one line per wrong result (``48 / 2 = 16 is wrong: 48 / 2 = 24``).

    >>> check_arithmetic("She sold 48 / 2 = 16 in May and 48 + 24 = 72 in all.")
    ['48 / 2 = 16 is wrong: 48 / 2 = 24']
    """
    from orchrm.execution.sandbox.generic import safe_eval
    from orchrm.execution.tasks.math import fmt_number

    wrong = []
    for m in _ARITH.finditer(text):
        expr = m.group(1).replace(",", "").replace("x", "*").replace("\u00d7", "*").replace("\u00f7", "/")
        value = safe_eval(expr)
        try:
            stated = float(m.group(2).replace(",", ""))
        except ValueError:
            continue
        if value is not None and abs(value - stated) > 1e-6 * max(1.0, abs(value)):
            wrong.append(f"{m.group(1)} = {m.group(2)} is wrong: {m.group(1)} = {fmt_number(value, 4)}")
    return wrong


__all__ = ["Extracted", "check_arithmetic", "compiles", "extract_answer", "extract_code", "extract_math", "extract_short", "majority"]
