"""Quality functions: how good an artifact is, as a float in [0, 1].

- rule-based scorers per domain: :func:`numeric_match` (math), :func:`pass_rate` (code: the
  fraction of hidden unit tests passed, computed by the sandbox's real execution),
  :func:`exact_match` and :func:`token_f1` with SQuAD normalisation (webqa, multihop);
- :class:`LLMJudge`: a hook for an LLM (or any callable) that grades an artifact.

A *quality function* is any callable ``artifact -> float`` where ``artifact`` is a row of the
artifact table (a dict or a pandas Series); :class:`orchrm.data.pairs.PairwiseComparator` accepts one.

>>> numeric_match("The answer is $1,234.0", "1234")
1.0
>>> round(token_f1("the Eiffel Tower", "Eiffel tower in Paris"), 3)
0.667
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

#: a number: thousands grouped by commas only in threes ("1,234,567"; "12,5" is 12 and no more, a
#: comma list "3,4" is 3), an optional fraction and exponent ("1.5e3"). A sign counts only where no
#: digit comes right before it: "10-12" is 10 and 12, not 10 and -12
_NUMBER = re.compile(
    r"(?<![\d.])(?<!\d,)-?(?:\d{1,3}(?:,\d{3})+(?!,?\d)|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?"
    r"|(?<![\d.])(?<!\d,)-?\.\d+(?:[eE][-+]?\d+)?"
)
#: a grade out of ten written as such: "8/10", "3 out of 10"
_OUT_OF_TEN = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*(?:/|out of)\s*10(?![\d.])", re.I)
#: minus signs other than the ASCII hyphen: the Unicode minus (typeset and LaTeX-rendered output)
_MINUS = str.maketrans({"\u2212": "-"})
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def _numbers(text: str) -> list[float]:
    return [float(token.replace(",", "")) for token in _NUMBER.findall(text.translate(_MINUS))]


def parse_number(text: str | None) -> float | None:
    """The last number in ``text`` (thousands commas, $, a trailing .0 and exponents tolerated),
    or None; None too when it does not fit a float (1e400, 400 digits)."""
    if text is None:
        return None
    found = _numbers(str(text))
    return found[-1] if found and math.isfinite(found[-1]) else None


def numeric_match(prediction: str | None, reference: str | None, *, tol: float = 1e-6) -> float:
    """1.0 when the last numbers of both texts are equal within ``tol`` (relative, or absolute near
    zero), else 0.0."""
    p, r = parse_number(prediction), parse_number(reference)
    if p is None or r is None:
        return 0.0
    return 1.0 if math.isclose(p, r, rel_tol=tol, abs_tol=tol) else 0.0


def normalize_answer(text: str | None) -> str:
    """SQuAD normalisation: lowercase, drop punctuation and articles, collapse whitespace."""
    if text is None:
        return ""
    text = str(text).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str | None, references: str | list[str] | None) -> float:
    """1.0 if the normalised prediction equals any normalised reference."""
    refs = [references] if isinstance(references, str) or references is None else references
    p = normalize_answer(prediction)
    return 1.0 if p and any(p == normalize_answer(r) for r in refs) else 0.0


def token_f1(prediction: str | None, references: str | list[str] | None) -> float:
    """Best SQuAD token F1 of the prediction against the references."""
    refs = [references] if isinstance(references, str) or references is None else references
    p_tokens = normalize_answer(prediction).split()
    best = 0.0
    for ref in refs:
        r_tokens = normalize_answer(ref).split()
        common = Counter(p_tokens) & Counter(r_tokens)
        overlap = sum(common.values())
        if overlap == 0:
            continue
        precision, recall = overlap / len(p_tokens), overlap / len(r_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def pass_rate(passed: int, total: int) -> float:
    """Fraction of unit tests passed (0.0 when there are none)."""
    if passed < 0 or total < 0 or passed > total:
        raise ValueError(f"pass_rate({passed}, {total}): passed tests must be between 0 and the total")
    return passed / total if total > 0 else 0.0


class LLMJudge:
    """Quality from a judge: ``judge(prompt) -> str`` is any callable (an LLM client, a person).

    The judge sees the question, the artifact's content and, if known, the reference; it must
    answer with a grade in [0, 10] somewhere in its reply: one written out of ten ("8/10", "3 out
    of 10"), else the first number from 0 to 10. ``LLMJudge(judge)(artifact)`` returns that
    grade / 10. Nothing here calls a network by itself.
    """

    template = (
        "Grade how well the response answers the question, from 0 (wrong or useless) to 10 (correct and complete).\n"
        "Question:\n{question}\n\nResponse:\n{content}\n{reference}Reply with the grade only."
    )

    def __init__(self, judge: Callable[[str], str]) -> None:
        self.judge = judge

    def __call__(self, artifact: Mapping[str, Any]) -> float:
        ref = artifact.get("reference")
        known = isinstance(ref, str) and ref.strip() or isinstance(ref, int | float) and math.isfinite(ref)
        prompt = self.template.format(
            question=artifact["question"],
            content=artifact["content"],
            reference=f"\nReference answer:\n{ref}\n\n" if known else "\n",
        )
        grade = self.grade(self.judge(prompt))
        if grade is None:
            raise ValueError("the judge's reply holds no grade; it must contain a number from 0 to 10")
        return grade / 10.0

    @staticmethod
    def grade(reply: str) -> float | None:
        """The grade in a judge's reply (see the class docstring), or None."""
        text = str(reply).translate(_MINUS)
        written = _OUT_OF_TEN.search(text)
        if written and 0 <= float(written.group(1)) <= 10:
            return float(written.group(1))
        return next((x for x in _numbers(text) if 0 <= x <= 10), None)
