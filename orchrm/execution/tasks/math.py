"""math tasks (GSM8K style): a built-in generator, the GSM8K loader, question features.

Every math task carries its worked solution as *steps* in ``metadata["steps"]`` — the
representation the sandbox replays (``orchrm.execution.sandbox.math``). A step is a dict of
plain strings and a float, so task tables stay Parquet-friendly:

- ``expr``: the computation over operand slots, e.g. ``"{0}*{1}-{2}"`` (``""`` for a line of
  text that computes nothing);
- ``args``: one code per slot: ``"q:16"`` (a number stated in the question), ``"s:2"`` (the
  result of step 2), ``"f:dozen"`` (a fact the question does not state, see :data:`FACTS`),
  ``"c:100"`` (a convention: 100 for percent, 2 for half); extra args may serve ``alt`` only;
- ``result``: the step's value in the gold solution;
- ``text``: the solution line with ``{calc}`` where the computation goes
  (``"Janet sells {calc} duck eggs a day."``); a text that starts with a space or
  punctuation continues the previous step's line (two computations on one line);
- ``trap``: the trap phrasing this step is exposed to (a key of :data:`TRAPS`) or ``""``;
- ``alt``: the misread computation over the same slots (``"{0}+{1}"`` for "5 fewer than"),
  or ``""`` to let the sandbox use the generic inverse reading.

``metadata`` also holds ``answer_step`` (the step whose result is the answer, -1 if the answer
is reached in prose), ``facts`` and ``traps`` (the names involved), ``solution`` (GSM8K text
with ``<<a*b=c>>`` annotations and a final ``#### N``) and ``source``. ``reference`` is the
final number as text.

Sources: ``math:builtin`` (seeded generator of 2-8 step problems: shopping, pay rates,
fractions and percentages, sharing, time, measures) and ``math:gsm8k`` (the GSM8K test split,
``gsm8k/test.jsonl`` under ``$ORCHRM_DATA_DIR``).

>>> tasks = load_builtin(2, seed=0)
>>> [t.task_id for t in tasks] == [t.task_id for t in load_builtin(2, seed=0)]
True
"""

from __future__ import annotations

import ast
import functools
import json
import math
import os
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchrm.errors import TaskError
from orchrm.execution.tasks.base import (
    DATA_DIR_ENV,
    DomainHeuristic,
    Task,
    TaskSource,
    data_file,
    plan_cost,
    register_heuristic,
    register_source,
    register_text_parser,
)
from orchrm.plans import Plan
from orchrm.util.digests import stable_id

DOMAIN = "math"
GSM8K_FILE = "gsm8k/test.jsonl"


# ---------------------------------------------------------------------------------------------
# numbers
# ---------------------------------------------------------------------------------------------
_NUM = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w])|(?<![\w\d])\.\d+")
_WORD_NUMBERS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
    "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000, "twice": 2, "double": 2,
    "thrice": 3, "triple": 3, "half": 2, "quarter": 4, "third": 3,
}
_WORD_NUM = re.compile(r"\b(" + "|".join(_WORD_NUMBERS) + r")\b", re.I)


def fmt_number(x: float, places: int = 2) -> str:
    """A number as a solution writes it: ``12``, ``2.5``, ``0.13`` (at most ``places`` decimals).

    >>> fmt_number(12.0), fmt_number(2.5), fmt_number(1 / 8), fmt_number(-0.0)
    ('12', '2.5', '0.12', '0')
    """
    if x == x // 1 and abs(x) < 1e15:  # the common case: a whole number
        return str(int(x)) if x else "0"
    r = round(x)
    if abs(x - r) < 1e-9 * max(1.0, abs(x)):
        return str(int(r)) if r != 0 else "0"
    s = f"{x:.{places}f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def numbers_in(text: str) -> list[float]:
    """Every number written in ``text`` with digits (commas, decimals; ``$`` ignored), in order;
    a number too large for a float (hundreds of digits) is left out, as it cannot be computed with."""
    out = []
    for m in _NUM.finditer(text):
        try:
            x = float(m.group().replace(",", ""))
        except ValueError:
            continue
        if math.isfinite(x):
            out.append(x)
    return out


def stated_numbers(question: str) -> set[float]:
    """Numbers a reader finds in the question: digits, number words, fraction parts, percents."""
    vals = set(numbers_in(question))
    vals |= {float(_WORD_NUMBERS[w.lower()]) for w in _WORD_NUM.findall(question)}
    for a, b in re.findall(r"(\d+)\s*/\s*(\d+)", question):
        vals |= {float(a), float(b)}
    vals |= {v / 100 for v in list(vals)}  # "25%" is also written .25 in solutions
    return vals


def normalize_number(text: str | None) -> str | None:
    """The last number of ``text`` in canonical form (the vote key of an answer), or None.

    >>> normalize_number("Answer: $1,234.50"), normalize_number("18.0"), normalize_number("none")
    ('1234.5', '18', None)
    """
    from orchrm.data.quality import parse_number

    x = parse_number(text)
    if x is None or not math.isfinite(x):
        return None
    return fmt_number(x, places=6)


def answer_match(answer: str | None, reference: str | None) -> float:
    """Numeric exact match (1.0 / 0.0): the last number of ``answer`` against ``reference``.

    >>> answer_match("So she makes $18.", "18"), answer_match("17", "18"), answer_match(None, "18")
    (1.0, 0.0, 0.0)
    """
    from orchrm.data.quality import numeric_match

    return numeric_match(answer, reference)


# ---------------------------------------------------------------------------------------------
# knowledge: facts a question relies on without stating them
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fact:
    """A fact a solution uses but a question may not state.

    ``needs``: regexes that must all match the (lowercased) question for the fact to apply;
    ``obscurity`` in [0, 1]: how likely a model is to misremember it (scaled per tier by
    ``MathNoise.fact_miss``); ``wrong``: the values a model plausibly recalls instead;
    ``doc``: the reference document the sandbox's search corpus holds for it.
    """

    name: str
    value: float
    needs: tuple[str, ...]
    obscurity: float
    wrong: tuple[float, ...]
    title: str
    doc: str


FACTS: dict[str, Fact] = {
    f.name: f
    for f in (
        Fact("dozen", 12, (r"\bdozens?\b",), 0.05, (10,), "Dozen",
             "A dozen means 12 items. Eggs, donuts and roses are sold by the dozen: 3 dozen eggs are 3 x 12 = 36 eggs."),
        Fact("bakers_dozen", 13, (r"\bbaker'?s'? dozens?\b",), 0.7, (12,), "Baker's dozen",
             "A baker's dozen is 13 items, one more than an ordinary dozen of 12. Two baker's dozens of rolls are 26 rolls."),
        Fact("gross", 144, (r"\bgross\b",), 0.85, (100, 12, 120), "Gross (unit)",
             "A gross is a dozen dozens, which is 144 items. Pencils and buttons are often ordered by the gross: 2 gross = 288."),
        Fact("score", 20, (r"\bscores? of\b",), 0.75, (10, 12), "Score (number)",
             "A score is a group of 20. Four score years means 4 x 20 = 80 years."),
        Fact("week_days", 7, (r"\bweeks?\b", r"\bdays?\b|\bdaily\b|\bevery day\b"), 0.03, (5,), "Week",
             "A week has 7 days, from Monday to Sunday. A working week is often 5 days, but a calendar week is 7 days."),
        Fact("fortnight", 14, (r"\bfortnights?\b",), 0.6, (10, 15, 7), "Fortnight",
             "A fortnight is a period of 14 days, that is two weeks. The word comes from 'fourteen nights'."),
        Fact("leap_year", 366, (r"\bleap years?\b",), 0.45, (365,), "Leap year",
             "A leap year has 366 days instead of 365, because February has 29 days. 2024 was a leap year."),
        Fact("year_days", 365, (r"\byears?\b", r"\bdays?\b|\bdaily\b"), 0.05, (360,), "Year (days)",
             "An ordinary calendar year has 365 days; a leap year has 366."),
        Fact("year_weeks", 52, (r"\byears?\b", r"\bweeks?\b|\bweekly\b"), 0.12, (48, 50), "Year (weeks)",
             "A year has 52 weeks (and one or two days more)."),
        Fact("year_months", 12, (r"\byears?\b", r"\bmonths?\b|\bmonthly\b"), 0.02, (10,), "Year (months)",
             "A year has 12 months, from January to December."),
        Fact("hour_minutes", 60, (r"\bhours?\b|\bhourly\b", r"\bminutes?\b"), 0.02, (100,), "Hour",
             "An hour has 60 minutes and a minute has 60 seconds, so an hour has 3600 seconds."),
        Fact("day_hours", 24, (r"\bdays?\b|\bdaily\b", r"\bhours?\b"), 0.02, (12,), "Day",
             "A day has 24 hours."),
        Fact("decade", 10, (r"\bdecades?\b",), 0.1, (100,), "Decade",
             "A decade is 10 years; a century is 100 years."),
        Fact("century", 100, (r"\bcentur(?:y|ies)\b",), 0.15, (1000, 10), "Century",
             "A century is 100 years; a millennium is 1000 years."),
        Fact("mile_feet", 5280, (r"\bmiles?\b", r"\bfeet\b|\bfoot\b"), 0.7, (5000, 3280, 1760), "Mile",
             "A mile is 5280 feet, or 1760 yards. A kilometre is about 0.62 miles."),
        Fact("yard_feet", 3, (r"\byards?\b", r"\bfeet\b|\bfoot\b"), 0.35, (2, 12), "Yard",
             "A yard is 3 feet, and a foot is 12 inches, so a yard is 36 inches."),
        Fact("foot_inches", 12, (r"\bfeet\b|\bfoot\b", r"\binch(?:es)?\b"), 0.15, (10,), "Foot (unit)",
             "A foot is 12 inches. A yard is 3 feet."),
        Fact("pound_ounces", 16, (r"\bpounds?\b", r"\bounces?\b"), 0.5, (12, 10, 8), "Pound (mass)",
             "A pound is 16 ounces. A ton (short ton) is 2000 pounds."),
        Fact("ton_pounds", 2000, (r"\btons?\b", r"\bpounds?\b"), 0.55, (1000, 2200), "Ton",
             "A short ton, used in the United States, is 2000 pounds. A metric tonne is 1000 kilograms."),
        Fact("gallon_quarts", 4, (r"\bgallons?\b", r"\bquarts?\b"), 0.5, (2, 8), "Gallon",
             "A gallon is 4 quarts, and a quart is 2 pints, so a gallon is 8 pints."),
        Fact("gallon_pints", 8, (r"\bgallons?\b", r"\bpints?\b"), 0.55, (4, 16), "Gallon (pints)",
             "A gallon holds 8 pints; a quart holds 2 pints."),
        Fact("quart_pints", 2, (r"\bquarts?\b", r"\bpints?\b"), 0.4, (4,), "Quart",
             "A quart is 2 pints, and 4 quarts make a gallon."),
        Fact("km_meters", 1000, (r"\bkilomet(?:er|re)s?\b|\bkm\b", r"\bmet(?:er|re)s?\b"), 0.05, (100,), "Kilometre",
             "A kilometre is 1000 metres."),
        Fact("meter_cm", 100, (r"\bmet(?:er|re)s?\b", r"\bcentimet(?:er|re)s?\b|\bcm\b"), 0.05, (1000, 10), "Metre",
             "A metre is 100 centimetres, and a centimetre is 10 millimetres."),
        Fact("kg_grams", 1000, (r"\bkilograms?\b|\bkg\b", r"\bgrams?\b"), 0.05, (100,), "Kilogram",
             "A kilogram is 1000 grams."),
        Fact("liter_ml", 1000, (r"\blit(?:er|re)s?\b", r"\bmillilit(?:er|re)s?\b|\bml\b"), 0.1, (100,), "Litre",
             "A litre is 1000 millilitres."),
        Fact("quarter_cents", 25, (r"\bquarters\b", r"\bcents?\b|\$|\bdollars?\b"), 0.2, (20,), "Quarter (coin)",
             "A quarter is a coin worth 25 cents; four quarters make a dollar."),
        Fact("dime_cents", 10, (r"\bdimes?\b",), 0.3, (5,), "Dime",
             "A dime is a coin worth 10 cents."),
        Fact("nickel_cents", 5, (r"\bnickels?\b",), 0.4, (10,), "Nickel (coin)",
             "A nickel is a coin worth 5 cents."),
    )
}


def _keywords(pattern: str) -> tuple[str, ...]:
    """Literal words that every match of ``pattern`` contains one of (a cheap prefilter);
    empty when some alternative starts with no literal word (then always run the regex)."""
    words = []
    for alt in pattern.split("|"):
        m = re.match(r"(?:\\b)?([a-z']+)", alt)
        word = m.group(1) if m else ""
        if alt[m.end():m.end() + 1] in ("?", "*", "{") if m else False:
            word = word[:-1]  # the last letter is optional
        if len(word) < 2:
            return ()
        words.append(word)
    return tuple(words)


@functools.cache
def _fact_patterns() -> tuple[tuple[str, tuple[tuple[tuple[str, ...], re.Pattern], ...]], ...]:
    return tuple((f.name, tuple((_keywords(p), re.compile(p)) for p in f.needs)) for f in FACTS.values())


def facts_in(question: str) -> list[str]:
    """Names of the facts whose cue words all appear in ``question`` (what a reader sees)."""
    q = question.lower()
    return [
        name
        for name, pats in _fact_patterns()
        if all((not kw or any(w in q for w in kw)) and pat.search(q) for kw, pat in pats)
    ]


# ---------------------------------------------------------------------------------------------
# traps: phrasings a model tier systematically misreads
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Trap:
    """A phrasing that invites a systematic misreading.

    ``pattern``: regex on the lowercased question; ``ops``: the operators of the step it
    concerns (``"-"``: the misread swaps that operator; ``"%"``: the percent complement,
    "20% off" read as "20% of"); ``last``: attach to the last matching step, not the first.
    """

    name: str
    pattern: str
    ops: str
    last: bool = False
    doc: str = ""


TRAPS: dict[str, Trap] = {
    t.name: t
    for t in (
        Trap("twice_minus", r"\b(?:fewer|less|more)\s+than\s+(?:twice|double|triple|thrice|half|\w+\s+times)\b", "-+",
             doc="'4 less than twice X' read as 2*(X-4)"),
        Trap("percent_of_percent", r"%[^.?!]*\b(?:then|further|additional|another|extra)\b[^.?!]*%|%[^.?!]*\bof the (?:reduced|new|sale|discounted|remaining)\b", "%",
             last=True, doc="two successive percentages added instead of compounded"),
        Trap("of_remaining", r"\bof (?:the )?(?:remaining|rest|remainder)\b|\bof what (?:is|was) left\b", "*/",
             doc="a fraction of the remainder applied to the whole"),
        Trap("how_many_more", r"\bhow (?:many|much) (?:\w+ )?(?:more|less|fewer)\b", "-", last=True,
             doc="'how many more' answered with the total"),
        Trap("fewer_than", r"\b(?:fewer|less)\b(?:\s+\w+){0,3}?\s+than\b", "-",
             doc="'5 fewer than X' computed as X+5 (the relation inverted)"),
        Trap("half_as_many", r"\bhalf as (?:many|much)\b", "/*", doc="'half as many as X' computed as 2X"),
        Trap("times_as_many", r"\b(?:twice|thrice|\w+ times) as (?:many|much|long|far|old)\b|\b\w+ times (?:more|larger|bigger)\b", "*/",
             doc="'3 times as many as X' inverted to X/3"),
        Trap("more_than", r"\bmore\b(?:\s+\w+){0,3}?\s+than\b", "+", doc="'5 more than X' inverted to X-5"),
        Trap("percent", r"%|\bpercent\b", "%", doc="'20% off' read as '20% of'"),
    )
}


@functools.cache
def _trap_patterns() -> tuple[tuple[str, re.Pattern], ...]:
    return tuple((t.name, re.compile(t.pattern)) for t in TRAPS.values())


def traps_in(question: str) -> list[str]:
    """Names of the trap phrasings present in ``question`` (what a reader sees)."""
    q = question.lower()
    found = [name for name, pat in _trap_patterns() if pat.search(q)]
    # "how many more ... than" is one trap, not also "more than"
    if "how_many_more" in found and "more_than" in found and len(re.findall(TRAPS["more_than"].pattern, q)) <= 1:
        found.remove("more_than")
    if "twice_minus" in found:
        # "4 fewer than twice as many" is one trap, not also "fewer than" and "times as many"
        compound = len(re.findall(TRAPS["twice_minus"].pattern, q))
        for shadow in ("fewer_than", "more_than", "times_as_many"):
            if shadow in found and len(re.findall(TRAPS[shadow].pattern, q)) <= compound:
                found.remove(shadow)
    if "percent_of_percent" in found and "percent" in found:
        found.remove("percent")
    return found


# ---------------------------------------------------------------------------------------------
# expressions
# ---------------------------------------------------------------------------------------------
_EXPR_TOKEN = re.compile(r"\s*(?:(\d+\.?\d*|\.\d+)|([-+*/()]))")


def tokenize_expression(expr: str) -> list[str] | None:
    """Numbers and ``+ - * / ( )`` of an annotation's left side, or None if it holds anything else."""
    expr = expr.replace(",", "").replace("x", "*").replace("×", "*").replace("−", "-").replace("÷", "/")
    pos, out = 0, []
    expr = expr.strip()
    while pos < len(expr):
        m = _EXPR_TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            return None
        out.append(m.group(1) or m.group(2))
        pos = m.end()
    return out or None


def eval_expr(expr: str, values: Sequence[float]) -> float:
    """Evaluate a slot expression (``"{0}*{1}"``) on ``values`` (+ - * / only; no ``eval``)."""
    return _eval_node(ast.parse(expr.format(*(f"({v!r})" for v in values)), mode="eval").body)


_BINOPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}


def _eval_node(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval_node(node.left), _eval_node(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval_node(node.operand)
    raise ValueError(f"not plain arithmetic: {ast.dump(node)[:60]}")


def _slot(i: int) -> str:
    return "{" + str(i) + "}"


def display_expr(expr: str) -> str:
    """The slot expression as a solution writes it: ``"{0}*{1}-{2}"`` -> ``"{0} * {1} - {2}"``."""
    return re.sub(r"\s*([-+*/])\s*", r" \1 ", expr).strip()


def swap_operator(expr: str, ops: str = "+-*/", *, last: bool = False) -> str:
    """The inverse reading: the first (or last) operator among ``ops`` swapped (+<->-, *<->/);
    ``""`` when the expression has none."""
    swap = {"+": "-", "-": "+", "*": "/", "/": "*"}
    idx = [i for i, ch in enumerate(expr) if ch in ops and ch in swap and i > 0 and expr[i - 1] not in "(+-*/"]
    if not idx:
        return ""
    i = idx[-1] if last else idx[0]
    return expr[:i] + swap[expr[i]] + expr[i + 1:]


# ---------------------------------------------------------------------------------------------
# GSM8K-format solutions -> steps
# ---------------------------------------------------------------------------------------------
_ANNOTATION = re.compile(r"<<([^<>=]*)=([^<>]*)>>(\$?-?(?:\d[\d,]*(?:\.\d+)?|\.\d+))?")
# a visible computation written just before an annotation: "16 - 3 - 4 = " or "$2 x 2 = $"
_VISIBLE_BEFORE = re.compile(
    r"(\$?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:\s*[-+*/x×−]\s*\$?(?:\d[\d,]*(?:\.\d+)?|\.\d+))+\s*=\s*\$?)$"
)
# an unannotated computation in prose: "99 + 5 = $104"
_PROSE_CALC = re.compile(
    r"(?<![\w.$/])\(?\$?((?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:\s*[-+*/x×−]\s*\(?\$?(?:\d[\d,]*(?:\.\d+)?|\.\d+)\)?)+)\s*=\s*\$?(-?(?:\d[\d,]*(?:\.\d+)?|\.\d+))(?![\d/])"
)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def _parse_calc(expr_text: str) -> tuple[str, list[float]] | None:
    """``"16-3-4"`` -> (``"{0}-{1}-{2}"``, [16, 3, 4]); None if not plain arithmetic."""
    toks = tokenize_expression(expr_text)
    if toks is None:
        return None
    slots, values = [], []
    for t in toks:
        if t in "+-*/()":
            slots.append(t)
        else:
            slots.append(_slot(len(values)))
            values.append(float(t))
    expr = "".join(slots)
    try:
        eval_expr(expr, values)
    except (ValueError, SyntaxError, ZeroDivisionError, IndexError):
        return None
    return expr, values


def _link_args(
    values: Sequence[float], results: Sequence[tuple[int, float]], stated: set[float], facts: Sequence[str]
) -> list[str]:
    """Where each operand comes from: an earlier step's result (``results`` holds
    ``(step index, value)``; most recent first), the question, an unstated fact the question
    cues, or a convention."""
    args = []
    for v in values:
        ref = next((j for j, r in reversed(results) if _close(r, v)), None)
        if ref is not None:
            args.append(f"s:{ref}")
        elif any(_close(v, s) for s in stated):
            args.append(f"q:{fmt_number(v, 6)}")
        else:
            fact = next((f for f in facts if _close(FACTS[f].value, v)), None)
            args.append(f"f:{fact}" if fact else f"c:{fmt_number(v, 6)}")
    return args


def _attach_traps(question: str, steps: list[dict]) -> list[str]:
    """Attach each trap phrasing of the question to the step it most plausibly concerns."""
    names = traps_in(question)
    comp = [i for i, s in enumerate(steps) if s["expr"]]
    for name in names:
        trap = TRAPS[name]
        order = list(reversed(comp)) if trap.last else comp
        for i in order:
            st = steps[i]
            if st["trap"]:
                continue
            alt = _trap_alt(st, trap)
            if alt:
                st["trap"], st["alt"] = name, alt
                break
    return names


def _trap_alt(step: dict, trap: Trap) -> str:
    """The misread computation of ``step`` under ``trap`` ("" if the step does not fit)."""
    expr, args = step["expr"], step["args"]
    if trap.ops == "%":
        # "20% off" read as "20% of": a percent-like operand p (0<p<1, or p/100) -> its complement
        for j, code in enumerate(args):
            v = float(code.split(":", 1)[1]) if code[0] in "qc" else None
            if v is not None and 0 < v < 1 and _slot(j) in expr:
                return expr.replace(_slot(j), f"(1-{_slot(j)})")
        m = re.search(r"\{(\d+)\}/\{(\d+)\}", expr)
        if m and args[int(m.group(2))] in ("c:100", "q:100"):
            a, b = m.group(1), m.group(2)
            return expr.replace(m.group(0), f"({{{b}}}-{{{a}}})/{{{b}}}", 1)
        return ""
    return swap_operator(expr, trap.ops, last=trap.last)


def parse_solution(question: str, solution: str) -> dict:
    """Steps of a GSM8K-format worked solution (see the module docstring for the keys).

    Annotated computations (``<<16-3-4=9>>``) become steps; so do unannotated ones written
    out in prose when they check (``99 + 5 = 104``); other lines are text. Raises
    :class:`TaskError` if the text has no ``#### N`` line.

    >>> meta = parse_solution("Janet's ducks lay 16 eggs. She eats 3 and bakes with 4. She sells the rest for $2 each. How much does she make?",
    ...     "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\\nShe makes 9 * 2 = $<<9*2=18>>18 every day.\\n#### 18")
    >>> [(s["expr"], s["args"], s["result"]) for s in meta["steps"]]
    [('{0}-{1}-{2}', ['q:16', 'q:3', 'q:4'], 9.0), ('{0}*{1}', ['s:0', 'q:2'], 18.0)]
    >>> meta["steps"][0]["text"], meta["answer_step"]
    ('Janet sells {calc} duck eggs a day.', 1)
    """
    if "####" not in solution:
        raise TaskError("a GSM8K solution must end with a '#### <answer>' line")
    body, final = solution.rsplit("####", 1)
    answer = numbers_in(final)
    if not answer:
        raise TaskError(f"cannot read the final answer in {final.strip()!r}")
    answer_value = answer[-1]
    stated = stated_numbers(question)
    facts = facts_in(question)
    steps: list[dict] = []
    results: list[tuple[int, float]] = []

    def add(expr: str, values: list[float], result: float, text: str) -> None:
        args = _link_args(values, results, stated, facts)
        results.append((len(steps), float(result)))
        steps.append({"expr": expr, "args": args, "result": float(result), "text": text, "trap": "", "alt": ""})

    for raw in body.strip().splitlines():
        line = raw.strip()
        if not line:
            continue
        if "<<" in line:
            pos = 0
            pieces = list(_ANNOTATION.finditer(line))
            for k, m in enumerate(pieces):
                prefix = line[pos:m.start()]
                end = m.end()
                rest = line[end:] if k == len(pieces) - 1 else ""
                parsed = _parse_calc(m.group(1))
                res_nums = numbers_in(m.group(2))
                if parsed is None or not res_nums:
                    # not arithmetic (e.g. "<<100=100>>" after algebra): keep the line as text
                    steps.append(_text_step(line[pos:] if k == len(pieces) - 1 else line[pos:end]))
                    pos = end
                    continue
                vis = _VISIBLE_BEFORE.search(prefix)
                if vis:
                    prefix = prefix[:vis.start()]
                dollar = "$" if (m.group(3) or "").startswith("$") else ""
                add(parsed[0], parsed[1], res_nums[-1], prefix + dollar + "{calc}" + rest)
                pos = end
        else:
            _prose_steps(line, add, steps)
    comp = [i for i, s in enumerate(steps) if s["expr"]]
    answer_step = next((i for i in reversed(comp) if _close(steps[i]["result"], answer_value)), -1)
    traps = _attach_traps(question, steps)
    used_facts = sorted({a[2:] for s in steps for a in s["args"] if a.startswith("f:")})
    return {
        "steps": steps,
        "answer_step": answer_step,
        "answer": answer_value,
        "facts": used_facts,
        "traps": traps,
        "solution": solution.strip(),
    }


def _text_step(line: str) -> dict:
    clean = _ANNOTATION.sub(lambda m: m.group(3) or "", line).replace("{", "(").replace("}", ")")
    return {"expr": "", "args": [], "result": 0.0, "text": clean, "trap": "", "alt": ""}


def _prose_steps(line: str, add: Callable[[str, list[float], float, str], None], steps: list[dict]) -> None:
    """Steps from computations written out without annotations; the line is text otherwise."""
    pos, found = 0, False
    safe = line.replace("{", "(").replace("}", ")")
    for m in _PROSE_CALC.finditer(safe):
        parsed = _parse_calc(m.group(1))
        if parsed is None:
            continue
        try:
            value = eval_expr(*parsed)
        except ZeroDivisionError:
            continue
        result = float(m.group(2).replace(",", ""))
        if not _close(value, result):
            continue
        add(parsed[0], parsed[1], result, safe[pos:m.start()] + "{calc}")
        pos, found = m.end(), True
    if found:
        if pos < len(safe):
            steps[-1]["text"] += safe[pos:]
    else:
        steps.append({"expr": "", "args": [], "result": 0.0, "text": safe, "trap": "", "alt": ""})


# ---------------------------------------------------------------------------------------------
# the built-in generator
# ---------------------------------------------------------------------------------------------
_NAMES = (
    "Maria", "Tom", "Aisha", "Ben", "Chen", "Dana", "Eli", "Fatima", "Greg", "Hana", "Ivan", "Julia",
    "Kofi", "Lena", "Marco", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tara", "Umar", "Vera",
    "Wes", "Yuki", "Zoe", "Pedro", "Mei", "Luca",
)


@dataclass(frozen=True)
class _Val:
    value: float
    code: str


class _Builder:
    """Collects the question's sentences and the solution's steps as a generator writes them."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.sentences: list[str] = []
        self.steps: list[dict] = []
        self.facts: list[str] = []
        self.traps: list[str] = []
        self.names = list(_NAMES)
        rng.shuffle(self.names)

    def name(self) -> str:
        return self.names.pop()

    def say(self, sentence: str) -> None:
        self.sentences.append(sentence)

    @staticmethod
    def q(v: float) -> _Val:
        return _Val(float(v), "q:" + fmt_number(v, 6))

    @staticmethod
    def c(v: float) -> _Val:
        return _Val(float(v), "c:" + fmt_number(v, 6))

    def fact(self, name: str) -> _Val:
        if name not in self.facts:
            self.facts.append(name)
        return _Val(float(FACTS[name].value), "f:" + name)

    def calc(self, expr: str, args: Sequence[_Val], text: str, *, trap: str = "", alt: str = "") -> _Val:
        value = eval_expr(expr, [a.value for a in args])
        if trap and trap not in self.traps:
            self.traps.append(trap)
        self.steps.append(
            {"expr": expr, "args": [a.code for a in args], "result": value, "text": text, "trap": trap, "alt": alt}
        )
        return _Val(value, f"s:{len(self.steps) - 1}")


def _money(rng: random.Random, low: float, high: float, cents: bool) -> float:
    if cents:
        return rng.choice((0.25, 0.5, 0.75)) + rng.randint(int(low), int(high))
    return float(rng.randint(int(low), int(high)))


def _scale(rng: random.Random) -> int:
    """Upper bound for a problem's base quantities: small, medium or large numbers."""
    return rng.choice((12, 12, 40, 40, 150, 900))


def _relation(b: _Builder, people: list[tuple[str, _Val]], noun: str, verb: str, *, traps: float) -> None:
    """One more person whose quantity is stated relative to someone's (one step)."""
    rng = b.rng
    ref_name, ref = people[-1] if rng.random() < 0.7 else rng.choice(people)
    who = b.name()
    x = ref.value
    kinds = ["more_than", "times_as_many"]
    if x > 3:
        kinds.append("fewer_than")
    if x % 2 == 0:
        kinds.append("half_as_many")
    if x > 2:
        kinds.append("twice_minus")
    trapped = {"fewer_than", "twice_minus", "half_as_many", "times_as_many"}
    weights = [(traps if k in trapped else 1 - traps) + 0.05 for k in kinds]
    kind = rng.choices(kinds, weights)[0]
    if kind == "more_than":
        a = rng.randint(2, max(3, int(x)))
        b.say(f"{who} {verb} {fmt_number(a)} more {noun} than {ref_name}.")
        v = b.calc("{0}+{1}", [ref, b.q(a)], f"{who} {verb} {{calc}} {noun}.", trap="more_than", alt="{0}-{1}")
    elif kind == "fewer_than":
        a = rng.randint(1, int(x) - 1)
        b.say(f"{who} {verb} {fmt_number(a)} fewer {noun} than {ref_name}.")
        v = b.calc("{0}-{1}", [ref, b.q(a)], f"{who} {verb} {{calc}} {noun}.", trap="fewer_than", alt="{0}+{1}")
    elif kind == "times_as_many":
        m = rng.choice((2, 3, 4, 5))
        word = {2: "twice", 3: "three times", 4: "four times", 5: "five times"}[m]
        b.say(f"{who} {verb} {word} as many {noun} as {ref_name}.")
        v = b.calc("{0}*{1}", [b.c(m) if m == 2 else b.q(m), ref], f"{who} {verb} {{calc}} {noun}.",
                   trap="times_as_many", alt="{1}/{0}")
    elif kind == "half_as_many":
        b.say(f"{who} {verb} half as many {noun} as {ref_name}.")
        v = b.calc("{0}/{1}", [ref, b.c(2)], f"{who} {verb} {{calc}} {noun}.", trap="half_as_many", alt="{0}*{1}")
    else:
        m = rng.choice((2, 2, 3))
        word = {2: "twice", 3: "three times"}[m]
        if rng.random() < 0.5:
            a = rng.randint(1, int(x) - 1)
            b.say(f"{who} {verb} {fmt_number(a)} fewer than {word} as many {noun} as {ref_name}.")
            v = b.calc("{0}*{1}-{2}", [b.c(m) if m == 2 else b.q(m), ref, b.q(a)], f"{who} {verb} {{calc}} {noun}.",
                       trap="twice_minus", alt="{0}*({1}-{2})")
        else:
            a = rng.randint(2, max(3, int(x)))
            b.say(f"{who} {verb} {fmt_number(a)} more than {word} as many {noun} as {ref_name}.")
            v = b.calc("{0}*{1}+{2}", [b.c(m) if m == 2 else b.q(m), ref, b.q(a)], f"{who} {verb} {{calc}} {noun}.",
                       trap="twice_minus", alt="{0}*({1}+{2})")
    people.append((who, v))


def _total(b: _Builder, people: list[tuple[str, _Val]], text: str) -> _Val:
    expr = "+".join(_slot(i) for i in range(len(people)))
    return b.calc(expr, [v for _, v in people], text)


def _how_many_more(b: _Builder, people: list[tuple[str, _Val]], noun: str, verb: str, ask_verb: str) -> tuple[str, _Val] | None:
    # the last person is always one side: earlier quantities then all matter to the answer
    last = people[-1]
    pairs = [(p, q) for p in people for q in people if p[1].value > q[1].value and last in (p, q)]
    if not pairs:
        return None
    (hi, hv), (lo, lv) = b.rng.choice(pairs)
    v = b.calc("{0}-{1}", [hv, lv], f"{hi} {verb} {{calc}} more {noun} than {lo}.", trap="how_many_more", alt="{0}+{1}")
    return f"How many more {noun} does {hi} {ask_verb} than {lo}?", v


def _gen_shopping(b: _Builder, extra: int, traps: float) -> tuple[str, _Val]:
    rng = b.rng
    item, items = rng.choice((("apple", "apples"), ("pencil", "pencils"), ("egg", "eggs"), ("cupcake", "cupcakes"),
                              ("marker", "markers"), ("bagel", "bagels"), ("sticker", "stickers"), ("button", "buttons")))
    who = b.name()
    top = _scale(rng)
    opener = rng.choices(("plain", "dozen", "gross", "bakers", "packs"), (3, 2, 1, 0.7, 2))[0]
    n = rng.randint(2, max(3, top // (12 if opener in ("dozen", "bakers") else 144 if opener == "gross" else 1)))
    if opener == "dozen":
        b.say(f"{who} buys {n} dozen {items}.")
        first = b.calc("{0}*{1}", [b.q(n), b.fact("dozen")], f"{who} buys {{calc}} {items}.")
    elif opener == "gross" and items in ("pencils", "stickers", "buttons", "markers"):
        n = rng.randint(2, 6)
        b.say(f"{who} orders {n} gross of {items} for the school fair.")
        first = b.calc("{0}*{1}", [b.q(n), b.fact("gross")], f"{who} orders {{calc}} {items}.")
    elif opener == "bakers" and items in ("bagels", "cupcakes"):
        n = rng.randint(2, 6)
        b.say(f"{who} buys {n} baker's dozens of {items}.")
        first = b.calc("{0}*{1}", [b.q(n), b.fact("bakers_dozen")], f"{who} buys {{calc}} {items}.")
    elif opener == "packs":
        m = rng.randint(3, 12)
        n = rng.randint(2, max(3, top // m))
        b.say(f"{who} buys {n} packs of {items} with {m} {items} in each pack.")
        first = b.calc("{0}*{1}", [b.q(n), b.q(m)], f"{who} buys {{calc}} {items}.")
    else:
        b.say(f"{who} buys {n} {items}.")
        first = b.q(n)
    people = [(who, first)]
    for _ in range(extra):
        _relation(b, people, items, "buys", traps=traps)
    closer = rng.choices(("count", "more", "spend", "discount", "two_discounts"), (2, 2, 2, 1.5, 1.5))[0]
    if closer == "more" and len(people) > 1:
        out = _how_many_more(b, people, items, "buys", "buy")
        if out:
            return out
    if closer == "count" and len(people) > 1:
        return f"How many {items} do they buy altogether?", _total(b, people, f"Together they buy {{calc}} {items}.")
    total = _total(b, people, f"Together they buy {{calc}} {items}.") if len(people) > 1 else people[0][1]
    price = _money(rng, 1, 9 if top < 100 else 3, rng.random() < 0.4)
    b.say(f"Each {item} costs ${fmt_number(price)}.")
    bill = b.calc("{0}*{1}", [total, b.q(price)], "The bill is ${calc}.")
    if closer == "discount":
        d = rng.choice((10, 20, 25, 30, 40, 50))
        b.say(f"The shop takes {d}% off the bill.")
        bill = b.calc("{0}*({1}-{2})/{1}", [bill, b.c(100), b.q(d)], "After the discount they pay ${calc}.",
                      trap="percent", alt="{0}*{2}/{1}")
    elif closer == "two_discounts":
        d1, d2 = rng.choice((10, 20, 25, 50)), rng.choice((10, 20, 50))
        b.say(f"The shop takes {d1}% off the bill, and then a further {d2}% off the reduced price.")
        bill = b.calc("{0}*({1}-{2})/{1}*({1}-{3})/{1}", [bill, b.c(100), b.q(d1), b.q(d2)],
                      "After both discounts they pay ${calc}.", trap="percent_of_percent", alt="{0}*({1}-{2}-{3})/{1}")
    return ("How much do they pay in dollars?" if len(people) > 1 else f"How much does {who} pay in dollars?"), bill


def _gen_rates(b: _Builder, extra: int, traps: float) -> tuple[str, _Val]:
    rng = b.rng
    who = b.name()
    rate = rng.randint(8, 30) if rng.random() < 0.7 else rng.randint(30, 90)
    hours = rng.randint(2, 9)
    b.say(f"{who} earns ${rate} an hour and works {hours} hours a day.")
    daily = b.calc("{0}*{1}", [b.q(rate), b.q(hours)], f"{who} earns ${{calc}} a day.")
    people = [(who, daily)]
    if extra:
        other = b.name()
        less = rng.randint(1, rate - 2)
        if rng.random() < traps:
            b.say(f"{other} earns ${less} less per hour than {who} and works the same hours.")
            orate = b.calc("{0}-{1}", [b.q(rate), b.q(less)], f"{other} earns ${{calc}} an hour.", trap="fewer_than", alt="{0}+{1}")
        else:
            b.say(f"{other} earns ${less} more per hour than {who} and works the same hours.")
            orate = b.calc("{0}+{1}", [b.q(rate), b.q(less)], f"{other} earns ${{calc}} an hour.", trap="more_than", alt="{0}-{1}")
        people.append((other, b.calc("{0}*{1}", [orate, b.q(hours)], f"{other} earns ${{calc}} a day.")))
    period = rng.choices(("days_weeks", "weeks", "fortnight", "fortnights", "year"), (2, 2, 1.5, 1, 0.7))[0]
    if period == "days_weeks":
        d, w = rng.randint(3, 6), rng.randint(2, 8)
        b.say(f"They work {d} days a week for {w} weeks.")
        days = b.calc("{0}*{1}", [b.q(d), b.q(w)], "They work {calc} days.")
    elif period == "weeks":
        w = rng.randint(2, 6)
        b.say(f"They work every day for {w} weeks.")
        days = b.calc("{0}*{1}", [b.q(w), b.fact("week_days")], "They work {calc} days.")
    elif period == "fortnights":
        w = rng.randint(2, 4)
        b.say(f"They work every day for {w} fortnights.")
        days = b.calc("{0}*{1}", [b.q(w), b.fact("fortnight")], "They work {calc} days.")
    elif period == "year":
        b.say("They work every day of a leap year.")
        days = b.fact("leap_year")
    else:
        b.say("They work every day for a fortnight.")
        days = b.fact("fortnight")
    earned = [(n, b.calc("{0}*{1}", [v, days], f"{n} earns ${{calc}} in total.")) for n, v in people]
    if extra > 1:
        bonus = rng.randint(2, 20) * 5
        n, v = earned[-1]
        b.say(f"At the end, {n} also gets a ${bonus} bonus.")
        earned[-1] = (n, b.calc("{0}+{1}", [v, b.q(bonus)], f"With the bonus, {n} earns ${{calc}}."))
    closer = rng.choices(("total", "more", "rent"), (1, 2 if len(earned) > 1 else 0, 1.5))[0]
    if closer == "more":
        out = _how_many_more(b, earned, "dollars", "earns", "earn")
        if out:
            return out
    if closer == "rent":
        p = rng.choice((10, 20, 25, 40, 50))
        n, v = earned[0]
        b.say(f"{n} spends {p}% of the money on rent.")
        left = b.calc("{0}*({1}-{2})/{1}", [v, b.c(100), b.q(p)], f"{n} has ${{calc}} left.", trap="percent", alt="{0}*{2}/{1}")
        return f"How much money does {n} have left?", left
    if len(earned) > 1:
        return "How much do they earn together in dollars?", _total(b, earned, "Together they earn ${calc}.")
    return f"How much does {who} earn in dollars?", earned[0][1]


def _gen_fractions(b: _Builder, extra: int, traps: float) -> tuple[str, _Val]:
    rng = b.rng
    place, members = rng.choice((("A school", "students"), ("A club", "members"), ("A farm", "animals"), ("A library", "books")))
    num, den = rng.choice(((1, 2), (1, 3), (2, 3), (1, 4), (3, 4), (2, 5), (3, 5), (1, 5)))
    if rng.random() < 0.5:
        groups, size = rng.randint(3, 12), rng.randint(10, 30)
        b.say(f"{place} has {groups} groups of {size} {members}.")
        total = b.calc("{0}*{1}", [b.q(groups), b.q(size)], f"{place} has {{calc}} {members}.")
    else:
        total = b.q(den * rng.randint(4, max(5, _scale(rng) // den + 4)) * (5 if rng.random() < 0.5 else 1))
        b.say(f"{place} has {fmt_number(total.value)} {members}.")
    b.say(f"{num}/{den} of the {members} are in the first group.")
    first = b.calc("{0}*{1}/{2}", [total, b.q(num), b.q(den)], f"The first group has {{calc}} {members}.")
    rest = b.calc("{0}-{1}", [total, first], f"The others are {{calc}} {members}.")
    p = rng.choice((10, 20, 25, 40, 50, 60, 75))
    b.say(f"{p}% of the remaining {members} are in the second group, and the rest are in the third group.")
    second = b.calc("{0}*{1}/{2}", [rest, b.q(p), b.c(100), total], f"The second group has {{calc}} {members}.",
                    trap="of_remaining", alt="{3}*{1}/{2}")
    third = b.calc("{0}-{1}", [rest, second], f"The third group has {{calc}} {members}.")
    groups = [("the first group", first), ("the second group", second), ("the third group", third)]
    if extra > 2:
        k = rng.randint(2, 4)
        b.say(f"Each of the {members} in the third group brings {k} guests to the open day.")
        guests = b.calc("{0}*{1}", [third, b.q(k)], "The third group brings {calc} guests.")
        return "How many guests does the third group bring?", guests
    if rng.random() < 0.5 and first.value != third.value:
        (hi, hv), (lo, lv) = sorted(groups[::2], key=lambda t: -t[1].value)
        v = b.calc("{0}-{1}", [hv, lv], f"There are {{calc}} more {members} in {hi} than in {lo}.",
                   trap="how_many_more", alt="{0}+{1}")
        return f"How many more {members} are in {hi} than in {lo}?", v
    return f"How many {members} are in the third group?", third


def _gen_sharing(b: _Builder, extra: int, traps: float) -> tuple[str, _Val]:
    rng = b.rng
    who = b.name()
    food = rng.choice(("cookies", "muffins", "brownies", "rolls"))
    opener = rng.choices(("batches", "dozen", "bakers", "plain"), (3, 2, 1, 1))[0]
    if opener == "batches":
        n, m = rng.randint(2, 8), rng.randint(6, 24)
        b.say(f"{who} bakes {n} batches of {m} {food}.")
        made = b.calc("{0}*{1}", [b.q(n), b.q(m)], f"{who} bakes {{calc}} {food}.")
    elif opener == "dozen":
        n = rng.randint(2, 10)
        b.say(f"{who} bakes {n} dozen {food}.")
        made = b.calc("{0}*{1}", [b.q(n), b.fact("dozen")], f"{who} bakes {{calc}} {food}.")
    elif opener == "bakers":
        n = rng.randint(2, 8)
        b.say(f"{who} bakes {n} baker's dozens of {food}.")
        made = b.calc("{0}*{1}", [b.q(n), b.fact("bakers_dozen")], f"{who} bakes {{calc}} {food}.")
    else:
        made = b.q(rng.randint(20, 120))
        b.say(f"{who} bakes {fmt_number(made.value)} {food}.")
    left = made
    verbs = iter(("eats", "gives away", "drops", "sells", "eats", "gives away"))
    for i in range(extra):
        kind = rng.choice(("eat", "give", "fraction"))
        if kind == "fraction" and left.value % 2 == 0:
            k = 2 if left.value % 4 else rng.choice((2, 4))
            other = b.name()
            word = {2: "half", 4: "a quarter"}[k]
            b.say(f"Then {who} gives {word} of the {'remaining ' if i else ''}{food} to {other}.")
            given = b.calc("{0}/{1}", [left, b.c(k)], f"{other} gets {{calc}} {food}.",
                           trap="of_remaining" if i else "", alt="{2}/{1}" if i else "")
            if i:
                b.steps[-1]["args"].append(made.code)
            left = b.calc("{0}-{1}", [left, given], f"{who} has {{calc}} {food} left.")
        else:
            e = rng.randint(1, max(2, int(left.value) // 4))
            if left.value - e < 2:
                continue
            b.say(f"{'Then ' if i else ''}{who} {next(verbs)} {e} of them.")
            left = b.calc("{0}-{1}", [left, b.q(e)], f"{who} has {{calc}} {food} left.")
    divisors = [k for k in range(2, 9) if left.value % k == 0]
    if divisors and rng.random() < 0.75:
        k = rng.choice(divisors)
        b.say(f"{who} shares {'the rest' if left is not made else 'them'} equally among {k} friends.")
        each = b.calc("{0}/{1}", [left, b.q(k)], f"Each friend gets {{calc}} {food}.")
        return f"How many {food} does each friend get?", each
    return f"How many {food} does {who} have left?", left


def _gen_time(b: _Builder, extra: int, traps: float) -> tuple[str, _Val]:
    rng = b.rng
    who = b.name()
    hobby = rng.choice(("practises the piano", "reads", "runs", "studies Spanish", "paints"))
    h, m = rng.randint(1, 3), rng.choice((5, 10, 15, 20, 25, 30, 40, 45, 50))
    b.say(f"{who} {hobby} for {h} hour{'s' if h > 1 else ''} and {m} minutes every day.")
    per_day = b.calc("{0}*{1}+{2}", [b.q(h), b.fact("hour_minutes"), b.q(m)], "That is {calc} minutes a day.")
    people = [(who, per_day)]
    for _ in range(max(0, extra - 1)):
        _relation(b, people, "minutes a day", "spends", traps=traps)
    period = rng.choices(("weeks", "fortnight", "leap", "days"), (2, 1.5, 1, 1.5))[0]
    if period == "weeks":
        w = rng.randint(2, 8)
        b.say(f"They keep this up for {w} weeks.")
        days = b.calc("{0}*{1}", [b.q(w), b.fact("week_days")], "That is {calc} days.")
    elif period == "fortnight":
        b.say("They keep this up for a fortnight.")
        days = b.fact("fortnight")
    elif period == "leap":
        b.say("They keep this up every day of a leap year.")
        days = b.fact("leap_year")
    else:
        days = b.q(rng.randint(5, 40))
        b.say(f"They keep this up for {fmt_number(days.value)} days.")
    total = b.calc("{0}*{1}", [people[0][1], days], f"{who} spends {{calc}} minutes in total.")
    if extra and len(people) > 1 and rng.random() < 0.5:
        other = b.calc("{0}*{1}", [people[-1][1], days], f"{people[-1][0]} spends {{calc}} minutes in total.")
        both = b.calc("{0}+{1}", [total, other], "Together they spend {calc} minutes.")
        return "How many minutes do they spend altogether?", both
    if total.value % 60 == 0 and rng.random() < 0.6:
        hours = b.calc("{0}/{1}", [total, b.fact("hour_minutes")], "That is {calc} hours.")
        return f"How many hours does {who} spend in total?", hours
    return f"How many minutes does {who} spend in total?", total


def _gen_measures(b: _Builder, extra: int, traps: float) -> tuple[str, _Val]:
    rng = b.rng
    who = b.name()
    big, small, fact, stuff = rng.choice((
        ("gallons", "quarts", "gallon_quarts", "juice"),
        ("gallons", "pints", "gallon_pints", "milk"),
        ("pounds", "ounces", "pound_ounces", "flour"),
        ("yards", "feet", "yard_feet", "ribbon"),
        ("feet", "inches", "foot_inches", "rope"),
        ("tons", "pounds", "ton_pounds", "sand"),
        ("miles", "feet", "mile_feet", "fence"),
        ("kilometres", "metres", "km_meters", "cable"),
    ))
    n = rng.randint(2, 9 if FACTS[fact].value > 100 else 20)
    b.say(f"{who} has {n} {big} of {stuff}.")
    amount = b.calc("{0}*{1}", [b.q(n), b.fact(fact)], f"{who} has {{calc}} {small} of {stuff}.")
    left = amount
    for _ in range(extra):
        u = rng.randint(1, max(2, int(left.value) // 5))
        if left.value - u < 2:
            break
        b.say(f"{who} uses {u} {small} of it for a project.")
        left = b.calc("{0}-{1}", [left, b.q(u)], f"{who} has {{calc}} {small} left.")
    divisors = [k for k in range(2, 13) if left.value % k == 0]
    if divisors and rng.random() < 0.6:
        k = rng.choice(divisors)
        b.say(f"{who} splits what is left into {k} equal parts.")
        part = b.calc("{0}/{1}", [left, b.q(k)], f"Each part is {{calc}} {small}.")
        return f"How many {small} of {stuff} are in each part?", part
    return f"How many {small} of {stuff} does {who} have left?", left


# theme -> (generator, weight, money: whether results may have cents)
_THEMES: dict[str, tuple[Callable[[_Builder, int, float], tuple[str, _Val]], float, bool]] = {
    "shopping": (_gen_shopping, 3.0, True),
    "rates": (_gen_rates, 2.0, True),
    "fractions": (_gen_fractions, 1.5, False),
    "sharing": (_gen_sharing, 2.0, False),
    "time": (_gen_time, 1.5, False),
    "measures": (_gen_measures, 1.0, False),
}


def _nice(x: float, *, money: bool) -> bool:
    scale = 100 if money else 1
    return x >= 0 and abs(x * scale - round(x * scale)) < 1e-6


def generate_problem(rng: random.Random) -> tuple[str, str, dict]:
    """One word problem: ``(question, solution, metadata)``; 2-8 steps, seeded by ``rng``.

    The question reads like GSM8K; the solution uses GSM8K's ``<<a*b=c>>`` annotations and
    ends with ``#### N``.
    """
    names = list(_THEMES)
    weights = [w for _, w, _ in _THEMES.values()]
    for _ in range(200):
        theme = rng.choices(names, weights)[0]
        extra = rng.choice((0, 0, 1, 1, 1, 2, 2, 3, 4))
        trap_rate = rng.choice((0.0, 0.3, 0.8))
        b = _Builder(rng)
        make, _, money = _THEMES[theme]
        ask, final = make(b, extra, trap_rate)
        comp = len(b.steps)
        if not 2 <= comp <= 8 or not all(_nice(s["result"], money=money) for s in b.steps) or final.value <= 0:
            continue
        if not final.code.startswith("s:"):
            continue
        question = " ".join([*b.sentences, ask])
        lines = []
        for s in b.steps:
            vals = [_arg_value(a, b.steps) for a in s["args"]]
            shown = display_expr(s["expr"]).format(*(fmt_number(v) for v in vals))
            annot = s["expr"].format(*(fmt_number(v, 6) for v in vals))
            res = fmt_number(s["result"])
            lines.append(s["text"].format(calc=f"{shown} = <<{annot}={res}>>{res}"))
        solution = "\n".join(lines) + f"\n#### {fmt_number(final.value)}"
        meta = {
            "steps": b.steps,
            "answer_step": int(final.code[2:]),
            "answer": final.value,
            "facts": sorted(b.facts),
            "traps": [t for t in traps_in(question)],
            "solution": solution,
            "template": theme,
        }
        return question, solution, meta
    raise TaskError("the math generator failed to draw a valid problem in 200 tries (a bug)")


def _arg_value(code: str, steps: Sequence[dict]) -> float:
    kind, ref = code.split(":", 1)
    if kind == "s":
        return float(steps[int(ref)]["result"])
    if kind == "f":
        return float(FACTS[ref].value)
    return float(ref)


def load_builtin(n: int, seed: int = 0) -> list[Task]:
    """``n`` generated word problems; the same ``(n, seed)`` gives the same tasks, and the first
    ``n`` tasks of a seed do not depend on ``n``."""
    rng = random.Random(int(stable_id("math-builtin", seed, n=16), 16))
    tasks, seen = [], set()
    while len(tasks) < n:
        question, _, meta = generate_problem(rng)
        if question in seen:
            continue
        seen.add(question)
        meta["source"] = "builtin"
        tasks.append(
            Task(
                task_id=f"math-{seed}-{stable_id(question, n=10)}",
                domain=DOMAIN,
                question=question,
                reference=fmt_number(meta["answer"]),
                metadata=meta,
            )
        )
    return tasks


# ---------------------------------------------------------------------------------------------
# GSM8K
# ---------------------------------------------------------------------------------------------
def read_gsm8k(path: str | os.PathLike) -> list[Task]:
    """Every item of a GSM8K JSONL file (fields ``question``, ``answer``) as a math Task.

    Task ids are ``gsm8k-<line number>`` (stable); ``reference`` is the ``#### N`` number.
    """
    tasks = []
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                question, solution = row["question"], row["answer"]
                if not isinstance(question, str) or not isinstance(solution, str):
                    raise TypeError("'question' and 'answer' must be text")
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise TaskError(f"{path}:{i + 1}: not a GSM8K item ({exc}); expected JSON with 'question' and 'answer'") from None
            try:
                meta = parse_solution(question, solution)
            except TaskError as exc:
                raise TaskError(f"{path}:{i + 1}: {exc}") from None
            meta["source"] = "gsm8k"
            tasks.append(Task(f"gsm8k-{i:04d}", DOMAIN, question.strip(), fmt_number(meta["answer"], 6), meta))
    if not tasks:
        raise TaskError(f"{path} holds no GSM8K items")
    return tasks


_GSM8K_CACHE: dict[str, list[Task]] = {}


def load_gsm8k(n: int, seed: int = 0, *, path: str | os.PathLike | None = None) -> list[Task]:
    """``n`` GSM8K test items drawn without replacement by ``seed`` (all of them if ``n`` is
    larger); the items for ``n`` are among those for any larger ``n`` of the same seed. The file
    is ``path`` or ``$ORCHRM_DATA_DIR/gsm8k/test.jsonl``."""
    file = Path(path) if path is not None else data_file(GSM8K_FILE, "GSM8K")
    if not file.is_file():
        raise TaskError(f"{file} not found: pass the path of GSM8K's test.jsonl or set {DATA_DIR_ENV}")
    key = str(file.resolve())
    if key not in _GSM8K_CACHE:
        _GSM8K_CACHE[key] = read_gsm8k(file)
    items = _GSM8K_CACHE[key]
    if n >= len(items):
        return list(items)
    order = list(range(len(items)))  # one seeded order: a larger n keeps the smaller n's items
    random.Random(int(stable_id("gsm8k", seed, n=16), 16)).shuffle(order)
    return [items[i] for i in sorted(order[:n])]


# ---------------------------------------------------------------------------------------------
# free text
# ---------------------------------------------------------------------------------------------
_WORD_OPS = (
    (r"(\d+(?:\.\d+)?)\s*(?:%|percent)\s+of\s+(\d+(?:\.\d+)?)", r"(\1/100*\2)"),
    (r"\bthe sum of (\d+(?:\.\d+)?) and (\d+(?:\.\d+)?)", r"(\1+\2)"),
    (r"\bthe product of (\d+(?:\.\d+)?) and (\d+(?:\.\d+)?)", r"(\1*\2)"),
    (r"\bthe difference (?:of|between) (\d+(?:\.\d+)?) and (\d+(?:\.\d+)?)", r"(\1-\2)"),
    (r"\bmultiplied by\b|\btimes\b", "*"),
    (r"\bdivided by\b", "/"),
    (r"\bplus\b", "+"),
    (r"\bminus\b", "-"),
)
# a leading minus belongs to the expression ("-5 + 3" is -2, not 8)
_LETTER_X_THEN_OPERATOR = re.compile(r"[x×]\s*[-+*/]")
_FREE_EXPR = re.compile(r"-?[\d.(][\d.\s()+\-*/×÷x]*[\d)]")
# what may not touch an expression: a letter, digit, "." or "," just before it ("1e5 + 1",
# "x-5 + 3", "1,000 + 5"), a letter or ",<digit>" / ".<digit>" just after it ("2 + 1e5", "5 + 1,000")
_GLUED_BEFORE = re.compile(r"[\w.,]\Z")
_GLUED_AFTER = re.compile(r"\w|[.,]\d")
# an operator next to the expression, beyond a space, means the regex saw only part of it
_OPERATOR_NEAR = re.compile(r"[-+*/×÷^]")


def from_text(question: str) -> Task | None:
    """A simulable math task from free text whose arithmetic is explicit ("What is 48 / 2 + 3?",
    "15% of 80", "the sum of 3 and 4", "-5 + 3"); None otherwise, and the generic domain takes
    it. None also when the expression found is only part of what is written (``1e5 + 1``,
    ``x - 5 + 3``, ``1,000 + 5``, ``2^3 + 1``: computing the part would give a wrong answer) or
    when a number or result does not fit a float or the expression is too deep to parse.

    The sandbox replays the extracted steps, but the task has no ``reference``: a user's own
    question carries no gold answer, so its quality stays unknown (the computed value is kept
    in ``metadata["answer"]`` for the simulation only).

    >>> task = from_text("What is 48 / 2 + 3?")
    >>> task.reference is None, task.metadata["answer"]
    (True, 27.0)
    >>> from_text("What is -5 + 3?").metadata["answer"], from_text("What is 1e5 + 1?")
    (-2.0, None)
    >>> from_text("Solve: integral of x^2 from 0 to 1") is None
    True
    """
    text = question
    for pat, rep in _WORD_OPS:
        text = re.sub(pat, rep, text, flags=re.I)
    best = None
    for m in _FREE_EXPR.finditer(text):
        cand = m.group()
        if "^" in text[m.end():m.end() + 2]:
            return None
        if _LETTER_X_THEN_OPERATOR.search(cand):  # "2x + 3": x is a variable here, not "times"
            return None
        toks = tokenize_expression(cand)
        if toks is None or not any(t in "+-*/" for t in toks[1:]):  # toks[0]: a sign, not an operation
            continue
        if expression_is_partial(text, m.start(), m.end()):
            return None
        if best is None or len(cand) > len(best):
            best = cand
    if best is None:
        return None
    steps: list[dict] = []

    def walk(node: ast.AST) -> str:
        value = _signed_literal(node)
        if value is not None:
            return "q:" + fmt_number(_finite(value), 6)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = walk(node.left), walk(node.right)
            sym = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}[type(node.op)]
            vals = [_arg_value(a, steps) for a in (left, right)]
            try:
                result = _finite(eval_expr("{0}" + sym + "{1}", vals))
            except ZeroDivisionError:
                raise ValueError("division by zero") from None
            steps.append({"expr": "{0}" + sym + "{1}", "args": [left, right], "result": result,
                          "text": "Compute {calc}.", "trap": "", "alt": ""})
            return f"s:{len(steps) - 1}"
        raise ValueError("not arithmetic")

    # Free text is routed, never refused (DESIGN §12): a number beyond a float (OverflowError),
    # an infinite result (ValueError) or a sum too long for Python's parser (RecursionError)
    # makes this "not a math task we can simulate", not a crash.
    try:
        walk(ast.parse(" ".join(tokenize_expression(best) or []), mode="eval").body)
        if not steps:
            return None
        answer = steps[-1]["result"]
        solution = "\n".join(
            s["text"].format(calc="{} = <<{}={}>>{}".format(
                display_expr(s["expr"]).format(*(fmt_number(_arg_value(a, steps)) for a in s["args"])),
                s["expr"].format(*(fmt_number(_arg_value(a, steps), 6) for a in s["args"])),
                fmt_number(s["result"]), fmt_number(s["result"])))
            for s in steps
        ) + f"\n#### {fmt_number(answer, 6)}"
    except (SyntaxError, ValueError, OverflowError, RecursionError):
        return None
    meta = {"steps": steps, "answer_step": len(steps) - 1, "answer": answer, "facts": [],
            "traps": traps_in(question), "solution": solution, "source": "free-text"}
    return Task(f"math-text-{stable_id(question)}", DOMAIN, question.strip(), None, meta)


def expression_is_partial(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` is only part of an expression: glued to a word, a number or
    an operator that the free-text pattern does not take in (``1e5 + 1``, ``x - 5 + 3``,
    ``1,000 + 5``, ``2^3 + 1``): computing the part would give a wrong answer."""
    before, after = text[:start], text[end:]
    if _GLUED_BEFORE.search(before) or _GLUED_AFTER.match(after):
        return True
    return bool(_OPERATOR_NEAR.fullmatch(before.rstrip()[-1:]) or _OPERATOR_NEAR.fullmatch(after.lstrip()[:1]))


def _signed_literal(node: ast.AST) -> float | None:
    """The value of a number or a signed number (``-5``), else None."""
    sign = 1.0
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        sign = -1.0 if isinstance(node.op, ast.USub) else 1.0
        node = node.operand
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return sign * float(node.value)
    return None


def _finite(x: float) -> float:
    if not math.isfinite(x):
        raise ValueError(f"{x} is not a finite number")
    return x


# ---------------------------------------------------------------------------------------------
# what a reader of the question sees, and the specialized orchestrator's heuristic
# ---------------------------------------------------------------------------------------------
_SENT = re.compile(r"[.?!]+(?:\s|$)")


def question_features(question: str) -> dict[str, float]:
    """Features of the question text alone (no metadata, no reference).

    Keys: ``words``, ``sentences``, ``numbers`` (numbers written in digits or words),
    ``max_digits`` (digits of the largest number), ``decimals`` (1 if a non-integer appears),
    ``est_steps`` (a reader's estimate of the computations needed), ``traps`` (count of
    trap phrasings) and ``trap_<name>`` flags, ``facts`` (count of unstated facts cued) and
    ``fact_obscurity`` (the most obscure one's obscurity, 0 if none), ``knowledge`` (1 if any).

    >>> f = question_features("Maria buys 3 gross of pencils and 5 fewer pens than pencils. How many more pencils than pens?")
    >>> f["facts"], f["fact_obscurity"], f["trap_fewer_than"], f["trap_how_many_more"]
    (1.0, 0.85, 1.0, 1.0)
    """
    q = question.strip()
    nums = numbers_in(q)
    words = q.split()
    word_nums = [w for w in _WORD_NUM.findall(q)]
    traps = traps_in(q)
    facts = facts_in(q)
    biggest = max((abs(x) for x in nums), default=0.0)
    feats: dict[str, float] = {
        "words": float(len(words)),
        "sentences": float(max(1, len(_SENT.findall(q)))),
        "numbers": float(len(nums) + len(word_nums)),
        "max_digits": float(len(str(int(biggest))) if biggest >= 1 else 1),
        "decimals": 1.0 if any(abs(x - round(x)) > 1e-9 for x in nums) or "/" in q else 0.0,
        "traps": float(len(traps)),
        "facts": float(len(facts)),
        "fact_obscurity": max((FACTS[f].obscurity for f in facts), default=0.0),
        "knowledge": 1.0 if facts else 0.0,
    }
    feats["est_steps"] = float(max(1, len(nums) + len(word_nums) + len(facts) - 1))
    for name in TRAPS:
        feats[f"trap_{name}"] = 1.0 if name in traps else 0.0
    return feats


# how much a trap kind fools a model, as a reader would guess it (the heuristic's prior; the
# sandbox's own rates live in MathNoise and are not read here)
_TRAP_WEIGHT = {
    "twice_minus": 1.0, "percent_of_percent": 1.0, "of_remaining": 0.9, "how_many_more": 0.7,
    "fewer_than": 0.8, "half_as_many": 0.6, "times_as_many": 0.5, "more_than": 0.3, "percent": 0.4,
}


def heuristic_plan_score(features: dict, plan: Plan) -> float:
    """The specialized orchestrator's guess of how well ``plan`` suits a question with these
    features (higher is better). It reads only :func:`question_features`, never metadata or
    the reference: rules of thumb, not the sandbox's model.

    Rules: hard questions (many steps, big numbers, traps) want the large tier; voting helps
    long arithmetic but not traps; a tool-checked Reflexion helps traps and long chains but a
    small one second-guesses easy questions; search helps when an obscure fact is cued and
    distracts otherwise; every token costs a little (:func:`~orchrm.execution.tasks.base.plan_cost`).
    """
    steps = features.get("est_steps", 3.0)
    digits = features.get("max_digits", 2.0)
    trap = sum(_TRAP_WEIGHT[k] for k in _TRAP_WEIGHT if features.get(f"trap_{k}", 0.0))
    obscure = features.get("fact_obscurity", 0.0)
    hardness = 0.08 * steps + 0.05 * max(0.0, digits - 2) + 0.1 * features.get("decimals", 0.0)
    sink = plan.node(plan.sink)
    agents = {n.agent for n in plan.nodes}
    large = sum(1 for n in plan.nodes if n.model == "large")
    score = 0.0
    if sink.model == "large" or large:
        score += 0.25 * hardness + 0.35 * min(trap, 1.5) + 0.1 * obscure
    samples = 1
    for n in plan.nodes:
        if n.agent == "SelfConsistency":
            samples = max(samples, n.int_param("k"))
        elif n.agent == "Debate":
            samples = max(samples, n.int_param("agents"))
    if samples > 1:
        score += (0.12 * hardness - 0.08 * min(trap, 1.5)) * math.log2(samples)
    if "Reflexion" in agents:
        refl = [n for n in plan.nodes if n.agent == "Reflexion"]
        if any(n.model == "large" for n in refl):
            score += 0.15 * min(trap, 1.5) + 0.1 * hardness
        elif hardness < 0.3 and trap == 0:
            score -= 0.15
        else:
            score += 0.08 * min(trap, 1.5) + 0.05 * hardness
    if "WebSearch" in agents:
        top_k = max(n.int_param("top_k") for n in plan.nodes if n.agent == "WebSearch")
        score += 0.5 * obscure if obscure > 0.2 else -0.04 * top_k
    return score - 0.03 * math.log1p(plan_cost(plan, search_runs=1.0))


# ---------------------------------------------------------------------------------------------
# registration (no work at import)
# ---------------------------------------------------------------------------------------------
register_source(TaskSource(
    DOMAIN, "builtin", load_builtin,
    "generated GSM8K-style word problems (2-8 steps; shopping, rates, fractions, sharing, time, "
    "measures) with trap phrasings and unstated facts; seeded",
))
register_source(TaskSource(
    DOMAIN, "gsm8k", load_gsm8k,
    f"GSM8K test split (1,319 items) from ${DATA_DIR_ENV}/{GSM8K_FILE}; seeded sample",
    finite=True,
))


register_heuristic(DOMAIN, DomainHeuristic(features=question_features, score=heuristic_plan_score))
register_text_parser(DOMAIN, from_text)

__all__ = [
    "FACTS",
    "TRAPS",
    "Fact",
    "Trap",
    "answer_match",
    "eval_expr",
    "facts_in",
    "fmt_number",
    "from_text",
    "generate_problem",
    "heuristic_plan_score",
    "load_builtin",
    "load_gsm8k",
    "normalize_number",
    "numbers_in",
    "parse_solution",
    "question_features",
    "read_gsm8k",
    "traps_in",
]
