"""The ``code`` domain of the sandbox: HumanEval with real execution (DESIGN §4).

A coder agent writes the task's canonical solution with bug-injecting AST mutations; everything
about the programs is then computed for real in :mod:`.codeexec`'s sandbox. The noise model
(every rate in :class:`~orchrm.execution.sandbox.config.CodeNoise`) has four interacting effects,
each tied to something a reader of the prompt can see:

- **independent slips** — a Poisson number of mutations per program, growing with the length
  of the solution (visible: a longer spec) and with the library calls it makes (visible: the
  library words of the prompt), scaled by the tier's skill. SelfConsistency and Debate vote by
  the programs' *actual outputs on the docstring example inputs* (``vote_key``), so voting
  removes slips only when the prompt shows examples that exercise them.
- **traps** — a docstring with trap phrasings (``except``, ``unless``, ``strictly``,
  ``in reverse``, ...; visible) is misread by a tier once per execution, and every program
  that tier writes in the execution carries the same condition mutation (memoised in
  ``ctx.shared``): voting cannot help, and may entrench it. A stronger tier misreads less; a
  Reflexion runs the examples for real and, when they expose the misreading, re-reads the
  spec — so Reflexion pays off exactly where traps meet revealing examples.
- **over-correction** — a Reflexion whose examples all pass sometimes "refactors" working code
  into a bug (``generic.overcorrect``; mostly the small tier): on short, easy, trap-free specs
  it lowers quality.
- **distraction** — WebSearch retrieves (real BM25) from the interpreter's own documentation
  (builtins, str/list/dict/set methods, itertools, math, collections, re, functools, string).
  Documentation of the library functions the solution calls removes most of their slips;
  documents that cover none of them pull the coder to a wrong library call.

Quality is the pass rate of the hidden tests (HumanEval's ``check`` split into one assert
each), executed in the sandbox. Programs, probe outputs and test results are memoised per
process, so repeated mutants cost nothing. When the sandbox itself fails (its worker cannot
start), :class:`SandboxUnavailableError` stops the run: an unmeasured program is not scored 0.
"""

from __future__ import annotations

import ast
import inspect
import math
import random
import re
import sys
from collections.abc import Hashable, Sequence
from copy import deepcopy
from dataclasses import dataclass, field

from orchrm.errors import ConfigError, SandboxUnavailableError, TaskError
from orchrm.execution.sandbox.codeexec import Check, CodeExecutor, Limits, RunResult
from orchrm.execution.sandbox.config import NoiseConfig
from orchrm.execution.sandbox.domain import Attempt, Context, Doc, Retrieval, SandboxDomain
from orchrm.execution.tasks.base import Task
from orchrm.execution.tasks.code import docstring, entry_function, trap_cues

# ---------------------------------------------------------------------------------------------
# the documentation corpus (built at run time from this interpreter's docstrings)
# ---------------------------------------------------------------------------------------------
DOC_MODULES = ("itertools", "math", "collections", "re", "functools", "string")
DOC_TYPES = (str, list, dict, set)
_DOC_CHARS = 700
#: functions every coder knows: no slip budget of their own, no documentation needed
TRIVIAL_APIS = frozenset(
    {"len", "range", "int", "str", "list", "float", "bool", "set", "dict", "tuple", "print", "isinstance",
     "enumerate", "type", "abs", "iter", "next", "sum", "max", "min", "list.append", "dict.get", "dict.keys",
     "dict.values", "dict.items", "set.add"}
)
#: library functions every coder uses daily: a low slip rate (``api_bug_common``); every other
#: documented non-trivial function has ``api_bug_rare``
COMMON_APIS = frozenset(
    {"sorted", "reversed", "zip", "map", "filter", "any", "all", "str.split", "str.join", "str.lower", "str.upper",
     "str.strip", "str.replace", "str.count", "str.index", "list.sort", "list.index", "list.count", "list.pop",
     "list.remove", "list.extend", "list.insert", "list.reverse", "list.clear", "list.copy", "dict.pop", "set.pop",
     "set.remove", "set.clear", "dict.clear", "str.format"}
)
#: a library function -> the sibling a coder confuses it with
API_SWAPS: dict[str, str] = {
    "min": "max", "max": "min", "any": "all", "all": "any", "sorted": "reversed", "reversed": "sorted",
    "ord": "len", "chr": "str", "round": "int", "filter": "map", "map": "filter", "bin": "hex", "hex": "oct",
    "upper": "lower", "lower": "upper", "isupper": "islower", "islower": "isupper", "isdigit": "isalpha",
    "isalpha": "isdigit", "isalnum": "isalpha", "isspace": "isdigit", "startswith": "endswith", "endswith": "startswith",
    "find": "rfind", "rfind": "find", "index": "count", "count": "index", "strip": "rstrip", "lstrip": "strip",
    "rstrip": "lstrip", "split": "rsplit", "swapcase": "upper", "capitalize": "title", "title": "capitalize",
    "floor": "ceil", "ceil": "floor", "sqrt": "exp", "pop": "remove", "remove": "pop", "extend": "append",
    "sort": "reverse", "reverse": "sort", "replace": "count", "join": "split", "zip": "map",
}
#: calls whose last positional argument a coder may drop (``range(1, n)`` -> ``range(n)``)
_ARG_DROP = frozenset({"range", "round", "int", "split", "rsplit", "strip", "lstrip", "rstrip", "pop", "join", "sorted", "count", "index", "find", "replace"})


def _clean_doc(text: str) -> str:
    return " ".join(text.split())[:_DOC_CHARS]


def python_docs() -> list[Doc]:
    """Documentation of builtins, ``str``/``list``/``dict``/``set`` methods and the modules of
    :data:`DOC_MODULES`, from this interpreter's own docstrings (one :class:`Doc` per name;
    ``title`` is the qualified name, e.g. ``str.split``, ``math.ceil``)."""
    import builtins
    import importlib

    docs: list[Doc] = []

    def add(title: str, obj: object) -> None:
        doc = inspect.getdoc(obj) or ""
        if isinstance(obj, str):
            doc = f"{title} is the string constant {obj!r}."
        if not doc:
            return
        docs.append(Doc(f"py:{title}", title, _clean_doc(doc)))

    for name in sorted(dir(builtins)):
        obj = getattr(builtins, name)
        if name.startswith("_") or (isinstance(obj, type) and issubclass(obj, BaseException)) or not callable(obj):
            continue
        add(name, obj)
    for cls in DOC_TYPES:
        for name in sorted(vars(cls)):
            if not name.startswith("_"):
                add(f"{cls.__name__}.{name}", getattr(cls, name))
    for module_name in DOC_MODULES:
        module = importlib.import_module(module_name)
        for name in sorted(dir(module)):
            obj = getattr(module, name)
            if name.startswith("_") or inspect.ismodule(obj) or not (callable(obj) or isinstance(obj, str)):
                continue
            add(f"{module_name}.{name}", obj)
    return docs


def docs_index():
    """The process-wide BM25 index over :func:`python_docs` (built on first use)."""
    from orchrm.execution.sandbox.retrieval import cached_index

    return cached_index(f"code:pydocs:{sys.version_info[0]}.{sys.version_info[1]}", python_docs)


# ---------------------------------------------------------------------------------------------
# mutations
# ---------------------------------------------------------------------------------------------
_BOUNDARY = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
             ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_DIRECTION = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}
_ARITH = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.Div: ast.FloorDiv, ast.FloorDiv: ast.Div,
          ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult}
_CONDITION_KINDS = frozenset({"compare", "boolop", "negation", "drop", "off_by_one"})


@dataclass(frozen=True, order=True)
class Mutation:
    """One bug: ``kind`` (``compare``, ``off_by_one``, ``constant``, ``arith``, ``boolop``,
    ``negation``, ``drop``, ``api``, ``call``) at node ``site`` (index in ``ast.walk`` order of
    the canonical program), ``variant`` of it; ``note`` says what changed, for the texts."""

    site: int
    kind: str
    variant: int
    note: str = field(default="", compare=False)


@dataclass(frozen=True)
class Program:
    """A program as the set of mutations applied to the canonical solution. ``trap`` is the
    misread-spec mutation of the tier that wrote it (also in ``mutations``); ``spec_fixed``:
    this chain re-read the spec after an example exposed the misreading."""

    mutations: tuple[Mutation, ...] = ()
    trap: Mutation | None = None
    spec_fixed: bool = False

    def without(self, drop: Sequence[Mutation]) -> Program:
        keep = tuple(m for m in self.mutations if m not in drop)
        return Program(keep, self.trap if self.trap in keep else None, self.spec_fixed)

    def plus(self, add: Mutation) -> Program:
        muts = {m.site: m for m in self.mutations}
        muts[add.site] = add
        return Program(tuple(sorted(muts.values())), self.trap if self.trap in muts.values() else None, self.spec_fixed)


def _walk(tree: ast.AST) -> tuple[list[ast.AST], dict[int, tuple[ast.AST, str, int | None]]]:
    """Nodes in ``ast.walk`` order and each node's (parent, field, index)."""
    nodes = list(ast.walk(tree))
    parent: dict[int, tuple[ast.AST, str, int | None]] = {}
    for node in nodes:
        for name, value in ast.iter_fields(node):
            if isinstance(value, list):
                for i, child in enumerate(value):
                    if isinstance(child, ast.AST):
                        parent[id(child)] = (node, name, i)
            elif isinstance(value, ast.AST):
                parent[id(value)] = (node, name, None)
    return nodes, parent


def _replace(parent: dict, node: ast.AST, new: ast.AST) -> None:
    """Put ``new`` where ``node`` is (nothing when another mutation already removed ``node``)."""
    owner, name, index = parent[id(node)]
    if index is None:
        if getattr(owner, name) is node:
            setattr(owner, name, new)
    else:
        siblings = getattr(owner, name)
        if index < len(siblings) and siblings[index] is node:
            siblings[index] = new


def _call_name(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return None


def _str_alternative(s: str) -> str | None:
    if s == "":
        return " "
    if s == " ":
        return ""
    if len(s) <= 3 and s.swapcase() != s:
        return s.swapcase()
    if len(s) == 1 and s.isdigit():
        return str((int(s) + 1) % 10)
    return None


def _apply(node: ast.AST, parent: dict, m: Mutation, passes: list[ast.AST]) -> None:
    """Apply mutation ``m`` to ``node`` in place (``drop`` leaves a marked ``pass``)."""
    kind, v = m.kind, m.variant
    if kind == "compare":
        table = _BOUNDARY if v == 0 else _DIRECTION
        node.ops[0] = table[type(node.ops[0])]()
    elif kind == "off_by_one":
        node.value = node.value + (1 if v == 0 else -1)
    elif kind == "constant":
        node.value = (not node.value) if isinstance(node.value, bool) else _str_alternative(node.value)
    elif kind == "arith":
        node.op = _ARITH[type(node.op)]()
    elif kind == "boolop":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind == "negation":
        _replace(parent, node, node.operand)
    elif kind == "drop":
        p = ast.Pass()
        passes.append(p)
        _replace(parent, node, p)
    elif kind in ("api", "call"):
        if v == 0:
            name = _call_name(node)
            if isinstance(node.func, ast.Name):
                node.func.id = API_SWAPS[name]
            else:
                node.func.attr = API_SWAPS[name]
        elif v == 1:
            node.keywords = node.keywords[1:]
        else:
            node.args = node.args[:-1]


def _mutations_of(node: ast.AST, parent: dict, site: int) -> list[Mutation]:
    """Every mutation the catalogue allows at ``node`` (notes filled by the caller)."""
    out: list[Mutation] = []
    if isinstance(node, ast.Compare):
        op = type(node.ops[0])
        if op in _BOUNDARY:
            out.append(Mutation(site, "compare", 0))
        if op in _DIRECTION:
            out.append(Mutation(site, "compare", 1))
    elif isinstance(node, ast.Constant):
        if isinstance(node.value, bool):
            out.append(Mutation(site, "constant", 0))
        elif isinstance(node.value, int):
            out += [Mutation(site, "off_by_one", 0), Mutation(site, "off_by_one", 1)]
        elif isinstance(node.value, str) and _str_alternative(node.value) is not None:
            owner = parent.get(id(node), (None,))[0]
            if not isinstance(owner, ast.Expr):  # not a docstring or bare string
                out.append(Mutation(site, "constant", 0))
    elif isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _ARITH:
        out.append(Mutation(site, "arith", 0))
    elif isinstance(node, ast.BoolOp):
        out.append(Mutation(site, "boolop", 0))
    elif isinstance(node, ast.UnaryOp) and (
        isinstance(node.op, ast.Not) or (isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant))
    ):
        out.append(Mutation(site, "negation", 0))
    elif isinstance(node, ast.stmt):
        owner, name, index = parent.get(id(node), (None, None, None))
        siblings = getattr(owner, name, None) if owner is not None else None
        if isinstance(siblings, list) and len(siblings) >= 2 and not isinstance(node, ast.FunctionDef):
            out.append(Mutation(site, "drop", 0))
    if isinstance(node, ast.Call):
        name = _call_name(node)
        kind = "call" if name in ("range", "int", "sorted") else "api"
        if name in API_SWAPS:
            out.append(Mutation(site, "api", 0))
        if node.keywords:
            out.append(Mutation(site, kind, 1))
        if name in _ARG_DROP and node.args and (len(node.args) >= 2 or isinstance(node.func, ast.Attribute)):
            out.append(Mutation(site, kind, 2))
    return out


def _in_condition(node: ast.AST, parent: dict) -> bool:
    """Whether ``node`` sits in a condition, bound, slice or range (where specs are misread)."""
    cur = node
    for _ in range(4):
        up = parent.get(id(cur))
        if up is None:
            return False
        owner, name, _ = up
        if isinstance(owner, ast.Compare | ast.Slice | ast.BoolOp) or name == "test":
            return True
        if isinstance(owner, ast.Call) and _call_name(owner) in ("range", "sorted"):
            return True
        cur = owner
    return False


# ---------------------------------------------------------------------------------------------
# per-task state
# ---------------------------------------------------------------------------------------------
@dataclass
class CodeState:
    """Everything ``prepare`` computes once per task (see :meth:`CodeDomain.prepare`)."""

    task_id: str
    entry_point: str
    program: str
    catalogue: tuple[Mutation, ...]
    by_site: dict[int, tuple[Mutation, ...]]
    sites: tuple[int, ...]
    n_statements: int
    api_calls: tuple[tuple[int, tuple[str, ...], bool], ...]
    api_mutations: dict[int, tuple[Mutation, ...]]
    call_mutations: tuple[Mutation, ...]
    knowledge_titles: tuple[str, ...]
    guess_titles: tuple[str, ...]
    probe_checks: tuple[Check, ...]
    n_checked: int
    test_checks: tuple[Check, ...]
    test_prelude: str
    trap_strength: float
    trap_candidates: tuple[Mutation, ...]
    trap_revealed: dict[Mutation, bool]
    summary: str
    plan_lines: tuple[str, ...]
    first_query: str
    canonical_code: str


def _undo(m: Mutation) -> str:
    """The repair of mutation ``m``, as a reviewer would write it."""
    if m.kind == "drop":
        return "restored " + m.note.removeprefix("dropped ")
    before, _, after = m.note.partition(" -> ")
    return f"{after} -> {before}" if after else m.note


def _poisson(lam: float, rng: random.Random) -> int:
    if lam <= 0:
        return 0
    limit, k, p = math.exp(-lam), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


def _describe(stmt: ast.stmt) -> str:
    def short(node: ast.AST) -> str:
        text = ast.unparse(node).replace("\n", " ")
        return text if len(text) <= 60 else text[:57] + "..."

    if isinstance(stmt, ast.Assign):
        return f"Set {short(stmt.targets[0])} = {short(stmt.value)} to hold the intermediate result."
    if isinstance(stmt, ast.AugAssign):
        return f"Update {short(stmt.target)} as we go ({short(stmt)})."
    if isinstance(stmt, ast.For):
        return f"Loop over {short(stmt.target)} in {short(stmt.iter)} and handle each element."
    if isinstance(stmt, ast.While):
        return f"Repeat while {short(stmt.test)}."
    if isinstance(stmt, ast.If):
        return f"Handle the case {short(stmt.test)} separately."
    if isinstance(stmt, ast.Return):
        return f"Return {short(stmt.value) if stmt.value is not None else 'nothing'}."
    if isinstance(stmt, ast.FunctionDef):
        return f"Write a helper {stmt.name}({', '.join(a.arg for a in stmt.args.args)})."
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return f"Import what we need: {short(stmt)}."
    return f"Then: {short(stmt)}."


class CodeDomain(SandboxDomain):
    """HumanEval tasks over :mod:`.codeexec` (see the module docstring for the noise model)."""

    name = "code"
    _MEMO_LIMIT = 200_000

    TIER_TABLES = (
        "trap_misread",
        "trap_fix_feedback",
        "reread_fix",
        "reread_break",
        "query_api_recall",
        "distraction",
        "draft_anchor",
    )

    def __init__(self, noise: NoiseConfig, executor: CodeExecutor | None = None) -> None:
        super().__init__(noise)
        c = noise.code
        for name in self.TIER_TABLES:
            missing = set(noise.tiers) - set(getattr(c, name))
            if missing:
                raise ConfigError(f"sandbox.code.{name} has no value for tier(s) {', '.join(sorted(missing))}; add them")
        self.executor = executor or CodeExecutor(
            Limits(check_timeout_s=c.check_timeout_s, total_timeout_s=c.job_timeout_s, memory_mb=c.memory_mb)
        )
        self._code_memo: dict[tuple[str, tuple[Mutation, ...]], str] = {}
        self._exec_memo: dict[tuple[str, str], tuple[RunResult, float]] = {}
        self._coverage_memo: dict[tuple[str, tuple[str, ...]], tuple[frozenset[int], float]] = {}

    # prepare ----------------------------------------------------------------------------
    def prepare(self, task: Task) -> CodeState:
        """Parse the canonical program, catalogue its mutation sites and library calls, check
        the docstring examples against the canonical solution (only consistent examples count
        as checks), and find the task's trap mutations: condition mutations that really fail
        some hidden tests but not all (and whether the examples reveal each)."""
        meta = task.metadata
        missing = [k for k in ("entry_point", "canonical_solution", "tests") if k not in meta]
        if missing:
            raise TaskError(
                f"code task {task.task_id!r} lacks {', '.join(missing)} in its metadata: build code tasks with "
                "orchrm.execution.tasks.code.problem_to_task (HumanEval format), or mark the task generic"
            )
        entry = str(meta["entry_point"])
        prompt = task.question
        program = prompt + str(meta["canonical_solution"])
        tree = ast.parse(program)
        prompt_lines = prompt.count("\n") + (0 if prompt.endswith("\n") else 1)
        nodes, parent = _walk(tree)
        catalogue: list[Mutation] = []
        statements = 0
        api_calls: list[tuple[int, tuple[str, ...], bool]] = []
        titles = {d.title for d in python_docs_cached()}
        module_aliases = self._module_aliases(tree)
        for site, node in enumerate(nodes):
            if getattr(node, "lineno", 0) <= prompt_lines:
                continue
            if isinstance(node, ast.stmt):
                statements += 1
            for m in _mutations_of(node, parent, site):
                catalogue.append(Mutation(m.site, m.kind, m.variant, self._note(nodes, m)))
            if isinstance(node, ast.Call):
                cands = self._api_titles(node, titles, module_aliases)
                if cands and not set(cands) & TRIVIAL_APIS:
                    api_calls.append((site, cands, not set(cands) & COMMON_APIS))
        catalogue = [m for m in catalogue if m.note]
        by_site: dict[int, list[Mutation]] = {}
        for m in catalogue:
            by_site.setdefault(m.site, []).append(m)
        api_sites = {s for s, _, _ in api_calls}
        api_mutations = {
            s: tuple(m for m in ms if m.kind in ("api", "call")) for s, ms in by_site.items() if s in api_sites
        }
        api_mutations = {s: ms for s, ms in api_mutations.items() if ms}
        call_mutations = tuple(m for m in catalogue if m.kind in ("api", "call"))

        examples = list(meta.get("examples", ()))
        canon_probe = self._run(program, [Check(e["call"], kind="eval", expected=e["expected"]) for e in examples])
        probe_checks = []
        for e, r in zip(examples, canon_probe.results, strict=True):
            if r.error is not None and r.output is None:
                continue  # the canonical solution itself raises here: not an example
            probe_checks.append(Check(e["call"], kind="eval", expected=e["expected"] if r.passed and e["expected"] is not None else None))
        test_checks = tuple(Check(t) for t in meta["tests"])
        prelude = str(meta.get("test_prelude", ""))

        doc = docstring(prompt, entry)
        cues = trap_cues(doc)
        strength = min(1.0, len(cues) / self.noise.code.trap_cue_saturation)
        st = CodeState(
            task_id=task.task_id,
            entry_point=entry,
            program=program,
            catalogue=tuple(catalogue),
            by_site={s: tuple(ms) for s, ms in by_site.items()},
            sites=tuple(sorted(by_site)),
            n_statements=max(1, statements),
            api_calls=tuple(api_calls),
            api_mutations=api_mutations,
            call_mutations=call_mutations,
            knowledge_titles=tuple(sorted({c[0] for _, c, _ in api_calls})),
            guess_titles=self._guess_titles(doc, titles),
            probe_checks=tuple(probe_checks),
            n_checked=sum(c.expected is not None for c in probe_checks),
            test_checks=test_checks,
            test_prelude=prelude,
            trap_strength=strength,
            trap_candidates=(),
            trap_revealed={},
            summary=self._summary(doc),
            plan_lines=tuple(_describe(s) for s in self._solution_statements(tree, entry, prompt_lines))[:10],
            first_query=" ".join(self._summary(doc).split()[:14]),
            canonical_code="",
        )
        st.canonical_code = self._code(st, ())
        if strength > 0:
            eligible = [m for m in catalogue if m.kind in _CONDITION_KINDS and self._condition_site(nodes, parent, m)]
            random.Random(f"trap:{task.task_id}").shuffle(eligible)
            found: list[Mutation] = []
            for m in eligible[:12]:
                # a misreading is right on ordinary inputs and wrong on the nuance: it passes
                # some hidden tests and fails others (a program that fails them all is a gross
                # slip, not a misread spec)
                if 0.0 < self._pass_rate(st, self._code(st, (m,))) < 1.0:
                    found.append(m)
                    if len(found) == 3:
                        break
            st.trap_candidates = tuple(sorted(found))
            st.trap_revealed = {m: self._fails_examples(st, Program((m,))) for m in found}
        return st

    @staticmethod
    def _module_aliases(tree: ast.Module) -> dict[str, str]:
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    aliases[a.asname or a.name] = a.name
        return aliases

    @staticmethod
    def _api_titles(call: ast.Call, titles: set[str], aliases: dict[str, str]) -> tuple[str, ...]:
        f = call.func
        if isinstance(f, ast.Name):
            return (f.id,) if f.id in titles else ()
        if isinstance(f, ast.Attribute):
            if isinstance(f.value, ast.Name) and f.value.id in aliases:
                t = f"{aliases[f.value.id]}.{f.attr}"
                return (t,) if t in titles else ()
            if isinstance(f.value, ast.Constant) and isinstance(f.value.value, str):
                return (f"str.{f.attr}",) if f"str.{f.attr}" in titles else ()
            return tuple(t for t in (f"{c.__name__}.{f.attr}" for c in DOC_TYPES) if t in titles)
        return ()

    @staticmethod
    def _guess_titles(doc: str, titles: set[str]) -> tuple[str, ...]:
        words = {w.lower() for w in re.findall(r"[A-Za-z]{3,}", doc)}
        out = set()
        for t in titles:
            last = t.rsplit(".", 1)[-1].lower()
            if last in words or (len(last) >= 4 and any(w.startswith(last) for w in words)):
                out.add(t)
        return tuple(sorted(out))

    @staticmethod
    def _summary(doc: str) -> str:
        """The docstring's first sentence (before any example)."""
        head = re.split(r">>>|\bfor example\b|\bexamples?\b\s*:|\n\s*\n", doc, maxsplit=1, flags=re.I)[0]
        text = " ".join(head.split()) or " ".join(doc.split())
        m = re.search(r"(.+?[.!?])(\s|$)", text)
        return (m.group(1) if m else text)[:240]

    @staticmethod
    def _solution_statements(tree: ast.Module, entry: str, prompt_lines: int) -> list[ast.stmt]:
        fn = entry_function(tree, entry)
        body = fn.body if fn is not None else tree.body
        return [s for s in body if getattr(s, "lineno", 0) > prompt_lines]

    @staticmethod
    def _condition_site(nodes: list[ast.AST], parent: dict, m: Mutation) -> bool:
        node = nodes[m.site]
        if m.kind == "drop":
            return isinstance(node, ast.If)
        if m.kind == "off_by_one":
            return _in_condition(node, parent)
        return True

    @staticmethod
    def _note(nodes: list[ast.AST], m: Mutation) -> str:
        """``before -> after`` of the mutated node (empty when the mutation changes nothing)."""
        node = nodes[m.site]
        before = ast.unparse(node).split("\n")[0]
        if m.kind == "drop":
            return f"dropped `{before[:60]}`"
        if m.kind == "negation":
            after = ast.unparse(node.operand)
        else:
            copy = deepcopy(node)
            try:
                _apply(copy, {}, m, [])
            except (KeyError, TypeError, AttributeError):
                return ""
            after = ast.unparse(copy).split("\n")[0]
        if after == before:
            return ""
        return f"`{before[:60]}` -> `{after[:60]}`"

    # programs ---------------------------------------------------------------------------
    def _code(self, st: CodeState, mutations: tuple[Mutation, ...]) -> str:
        key = (st.task_id, mutations)
        code = self._code_memo.get(key)
        if code is None:
            tree = ast.parse(st.program)
            nodes, parent = _walk(tree)
            passes: list[ast.AST] = []
            for m in mutations:
                _apply(nodes[m.site], parent, m, passes)
            for node in nodes:
                for name in ("body", "orelse", "finalbody"):
                    block = getattr(node, name, None)
                    if isinstance(block, list) and len(block) > 1 and any(s in passes for s in block):
                        kept = [s for s in block if not any(s is p for p in passes)]
                        setattr(node, name, kept or [ast.Pass()])
            fn = entry_function(tree, st.entry_point)
            if fn is not None and len(fn.body) > 1 and isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant):
                fn.body = fn.body[1:]  # the coder does not copy the docstring back
            code = ast.unparse(tree)
            if len(self._code_memo) > self._MEMO_LIMIT:
                self._code_memo.clear()
            self._code_memo[key] = code
        return code

    def _run(self, program: str, checks: Sequence[Check], *, prelude: str = "", bind: dict[str, str] | None = None) -> RunResult:
        """``executor.run``, raising :class:`SandboxUnavailableError` when the sandbox itself failed
        (status ``error``; the program's own failures are ``load_error``, ``timeout`` and
        ``crashed``). Nothing is memoised then, so a later call runs the program again."""
        res = self.executor.run(program, checks, prelude=prelude, bind=bind)
        if res.status == "error":
            raise SandboxUnavailableError(
                f"the code sandbox could not run a program ({res.message}); no quality can be measured, so "
                f"the collection stops instead of scoring it 0. Check that {sys.executable} can be started as a "
                "subprocess and can fork (free memory, process limits, a writable temporary directory: TMPDIR), "
                "then run again"
            )
        return res

    def _execute(self, st: CodeState, code: str) -> tuple[RunResult, float]:
        """Run ``code`` once in the sandbox: its outputs on the docstring example inputs, then
        the hidden tests (one job, one fork). Memoised per program."""
        key = (st.task_id, code)
        hit = self._exec_memo.get(key)
        if hit is None:
            n = len(st.probe_checks)
            res = self._run(code, st.probe_checks + st.test_checks, prelude=st.test_prelude, bind={"candidate": st.entry_point})
            probe = RunResult(res.results[:n], res.status, res.message)
            tests = res.results[n:]
            hit = (probe, sum(r.passed for r in tests) / len(tests) if tests else 0.0)
            if len(self._exec_memo) > self._MEMO_LIMIT:
                self._exec_memo.clear()
            self._exec_memo[key] = hit
        return hit

    def _probe(self, st: CodeState, code: str) -> RunResult:
        """The program's outputs on the docstring example inputs (executed in the sandbox)."""
        return self._execute(st, code)[0]

    def _pass_rate(self, st: CodeState, code: str) -> float:
        """Pass rate of the hidden tests (executed in the sandbox)."""
        return self._execute(st, code)[1]

    def _fails_examples(self, st: CodeState, prog: Program) -> bool:
        res = self._probe(st, self._code(st, prog.mutations))
        return any(c.expected is not None and not r.passed for c, r in zip(st.probe_checks, res.results, strict=True))

    # the noise model --------------------------------------------------------------------
    def _trap(self, ctx: Context, tier: str, rng: random.Random) -> Mutation | None:
        """This execution's misreading by ``tier``: drawn once (at the tier's first program in
        the execution), then shared by every node of the execution through ``ctx.shared``."""
        st: CodeState = ctx.state
        key = ("code.trap", st.task_id, tier)
        if key not in ctx.shared:
            trap = None
            if st.trap_candidates:
                p = self.noise.code.trap_misread[tier] * st.trap_strength
                if rng.random() < p:
                    trap = rng.choice(st.trap_candidates)
            ctx.shared[key] = trap
        return ctx.shared[key]

    def _coverage(self, st: CodeState, docs: Sequence[Doc]) -> tuple[frozenset[int], float]:
        """API call sites documented by ``docs`` and the share of the solution's library
        functions they cover (0.0 when it calls none)."""
        key = (st.task_id, tuple(d.doc_id for d in docs))
        hit = self._coverage_memo.get(key)
        if hit is None:
            have = {d.title for d in docs}
            covered = frozenset(s for s, cands, _ in st.api_calls if have.intersection(cands))
            share = sum(1 for t in st.knowledge_titles if t in have) / len(st.knowledge_titles) if st.knowledge_titles else 0.0
            hit = self._coverage_memo[key] = (covered, share)
        return hit

    def _bug_rates(self, st: CodeState, tier: str, docs: Sequence[Doc]) -> tuple[float, list[tuple[int, float]], float]:
        """(expected independent slips, per-API-call slip probabilities, distraction probability)."""
        c = self.noise.code
        skill = self.noise.tiers[tier].skill
        base = skill * (c.bug_base + c.bug_per_statement * st.n_statements)
        covered, share = self._coverage(st, docs) if docs else (frozenset(), 0.0)
        api = [
            (s, skill * (c.api_bug_rare if rare else c.api_bug_common) * ((1.0 - c.doc_relief) if s in covered else 1.0))
            for s, _, rare in st.api_calls
        ]
        distract = 0.0
        if docs:
            distract = c.distraction[tier] * (1.0 - share) * min(1.0, len(docs) / c.distraction_docs)
        return base, api, distract

    def _random_mutation(self, st: CodeState, rng: random.Random) -> Mutation | None:
        if not st.sites:
            return None
        return rng.choice(st.by_site[rng.choice(st.sites)])

    def _write(self, ctx: Context, tier: str, rng: random.Random, *, spec_fixed: bool = False) -> Program:
        """One program written from scratch by ``tier`` (reading ``ctx.docs``)."""
        st: CodeState = ctx.state
        base, api, distract = self._bug_rates(st, tier, ctx.docs)
        muts: dict[int, Mutation] = {}
        for _ in range(_poisson(base, rng)):
            m = self._random_mutation(st, rng)
            if m is not None:
                muts[m.site] = m
        for site, p in api:
            if rng.random() < p:
                m = rng.choice(st.api_mutations[site]) if site in st.api_mutations else self._random_mutation(st, rng)
                if m is not None:
                    muts[m.site] = m
        if distract and rng.random() < distract:
            m = rng.choice(st.call_mutations) if st.call_mutations else self._random_mutation(st, rng)
            if m is not None:
                muts[m.site] = m
        trap = None if spec_fixed else self._trap(ctx, tier, rng)
        if trap is not None:
            muts[trap.site] = trap
        return Program(tuple(sorted(muts.values())), trap, spec_fixed)

    def _prior(self, st: CodeState, tier: str, docs: Sequence[Doc]) -> float:
        """The coder's own estimate of its chance of a fully correct program."""
        base, api, distract = self._bug_rates(st, tier, docs)
        p_trap = self.noise.code.trap_misread[tier] * st.trap_strength if st.trap_candidates else 0.0
        return math.exp(-base - sum(p for _, p in api)) * (1.0 - distract) * (1.0 - p_trap)

    def _reread(
        self, ctx: Context, prog: Program, tier: str, rng: random.Random, *, may_break: bool = True
    ) -> tuple[Program, list[Mutation], Mutation | None]:
        """An unaided re-read: finds each slip with ``reread_fix`` (a misread trap only if this
        tier reads the spec right), else may break the program (``reread_break``, when
        ``may_break``). Returns (program, fixed mutations, added mutation)."""
        c = self.noise.code
        own = None if prog.spec_fixed else self._trap(ctx, tier, rng)
        fix = c.reread_fix[tier]
        fixed = [m for m in prog.mutations if m != own and not (own is not None and m == prog.trap) and rng.random() < fix]
        if fixed:
            return prog.without(fixed), fixed, None
        if may_break and rng.random() < c.reread_break[tier]:
            m = self._random_mutation(ctx.state, rng)
            if m is not None:
                return prog.plus(m), [], m
        return prog, [], None

    # texts ------------------------------------------------------------------------------
    def _make_attempt(self, ctx: Context, prog: Program, tier: str, lines: list[str]) -> Attempt:
        st: CodeState = ctx.state
        code = self._code(st, prog.mutations)
        text = "\n".join([*lines, "```python", code, "```"])
        return Attempt(text, code, self._prior(st, tier, ctx.docs), prog)

    def _header(self, ctx: Context) -> list[str]:
        st: CodeState = ctx.state
        lines = [f"Task: {st.summary}", "Plan:"]
        lines += [f"{i + 1}. {line}" for i, line in enumerate(st.plan_lines)]
        if ctx.docs:
            lines.append("Checked the documentation of " + ", ".join(d.title for d in ctx.docs[:4]) + ".")
        return lines

    # SandboxDomain ----------------------------------------------------------------------
    def attempt(self, ctx: Context, tier: str, rng: random.Random) -> Attempt:
        drafts = [d for d in ctx.drafts if isinstance(d.detail, Program)]
        if drafts and rng.random() < self.noise.code.draft_anchor[tier]:
            base = drafts[-1].detail
            own = None if base.spec_fixed else self._trap(ctx, tier, rng)
            if own is not None and own not in base.mutations:
                base = base.plus(own)
            base = Program(base.mutations, own, base.spec_fixed)
            prog, fixed, _ = self._reread(ctx, base, tier, rng)
            lines = ["Starting from the draft above and checking it line by line."]
            lines += [f"Fixed: {_undo(m)}." for m in fixed]
            return self._make_attempt(ctx, prog, tier, lines + self._header(ctx)[2:])
        return self._make_attempt(ctx, self._write(ctx, tier, rng), tier, self._header(ctx))

    def critique(self, ctx: Context, attempt: Attempt, tier: str, rng: random.Random, *, tools: bool) -> Attempt:
        st: CodeState = ctx.state
        prog = attempt.detail if isinstance(attempt.detail, Program) else Program()
        if tools and st.n_checked:
            res = self._probe(st, self._code(st, prog.mutations))
            checked = [(c, r) for c, r in zip(st.probe_checks, res.results, strict=True) if c.expected is not None]
            failing = [(c, r) for c, r in checked if not r.passed]
            if failing:
                spec_fixed = prog.spec_fixed
                exposed = any(st.trap_revealed.get(m, False) for m in prog.mutations)
                if exposed and not spec_fixed and rng.random() < self.noise.code.trap_fix_feedback[tier]:
                    spec_fixed = True
                lines = [f"Ran the {len(checked)} docstring examples: {len(failing)} failed."]
                for c, r in failing[:3]:
                    lines.append(f"  {c.source} -> {r.reason or r.output}")
                lines.append("Re-reading the specification and rewriting the function.")
                new = self._write(ctx, tier, rng, spec_fixed=spec_fixed)
                return self._make_attempt(ctx, new, tier, lines)
            lines = [f"Ran the {len(checked)} docstring examples: all pass."]
        elif tools:
            lines = ["The docstring has no examples I can run; reviewing the code by reading it."]
        else:
            lines = ["Re-reading my function against the specification."]
        if tools and rng.random() < self.noise.generic.overcorrect[tier] * self.noise.code.refactor_scale:
            m = self._random_mutation(st, rng)
            if m is not None:
                lines.append(f"Refactoring for clarity: {m.note}.")
                return self._make_attempt(ctx, prog.plus(m), tier, lines)
        # with tools, breaking working code is the refactoring above (over-correction)
        new, fixed, broke = self._reread(ctx, prog, tier, rng, may_break=not tools)
        if fixed:
            lines += [f"Found a bug; fixed it: {_undo(m)}." for m in fixed]
        elif broke is not None:
            lines.append(f"This edge looks wrong; changing it: {broke.note}.")
        else:
            lines.append("The code matches the specification; no change.")
            return Attempt("\n".join(lines), attempt.answer, attempt.correct_prob, prog)
        return self._make_attempt(ctx, new, tier, lines)

    def retrieve(self, ctx: Context, queries: int, top_k: int, tier: str | None, rng: random.Random) -> Retrieval:
        st: CodeState = ctx.state
        c = self.noise.code
        recall = c.query_api_recall.get(tier, c.query_api_recall_default) if tier else c.query_api_recall_default
        written: list[str] = []
        needed = list(st.knowledge_titles)
        guesses = list(st.guess_titles)
        fallbacks = [st.first_query, f"python {st.entry_point.replace('_', ' ')} function"]
        for _ in range(queries):
            if needed and rng.random() < recall:
                written.append(f"python {needed.pop(rng.randrange(len(needed)))} usage")
            elif guesses:
                written.append(f"python {guesses.pop(rng.randrange(len(guesses)))} usage")
            elif fallbacks:
                written.append(fallbacks.pop(0))
            else:
                written.append(f"python {rng.choice(sorted(set(st.summary.lower().split())) or [st.entry_point])}")
        index = docs_index()
        docs: list[Doc] = []
        for q in written:
            for d in index.search(q, top_k):
                if d not in docs:
                    docs.append(d)
        return Retrieval(tuple(written), tuple(docs))

    def vote_key(self, ctx: Context, attempt: Attempt) -> Hashable:
        """The program's actual outputs (repr, or the error type) on the docstring example
        inputs: programs agree when they behave the same on the examples."""
        if attempt.answer is None:
            return None
        st: CodeState = ctx.state
        res = self._probe(st, attempt.answer)
        return tuple(r.output if r.error is None else "!" + r.error for r in res.results)

    def quality(self, task: Task, answer: str | None) -> float | None:
        """Pass rate of the hidden tests (HumanEval's asserts, one by one), executed."""
        if task.reference is None:
            return None
        if answer is None:
            return 0.0
        st: CodeState = self.state(task)
        return self._pass_rate(st, extract_program(answer, task.question, st.entry_point))

    def retrieval_quality(self, task: Task, retrieval: Retrieval) -> float | None:
        """Share of the solution's library functions whose documentation was retrieved
        (None for a solution that calls none)."""
        st: CodeState = self.state(task)
        if not st.knowledge_titles:
            return None
        return self._coverage(st, retrieval.docs)[1]

    def instruction(self, agent: str) -> str:
        return (
            f"You are a {agent} agent writing Python. Read the signature and docstring, think step by "
            "step, and answer with the complete function in a ```python block."
        )


_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def extract_program(answer: str, prompt: str, entry_point: str) -> str:
    """The program in ``answer``: the first fenced block if any, else the text; a bare function
    body (no ``def entry_point``) is appended to the prompt."""
    m = _FENCE.search(answer)
    code = m.group(1) if m else answer
    if not re.search(rf"\bdef\s+{re.escape(entry_point)}\s*\(", code):
        code = prompt + code
    return code


_DOCS: list[Doc] | None = None


def python_docs_cached() -> list[Doc]:
    """:func:`python_docs`, computed once per process."""
    global _DOCS
    if _DOCS is None:
        _DOCS = python_docs()
    return _DOCS


__all__ = [
    "API_SWAPS", "CodeDomain", "CodeState", "Mutation", "Program", "SandboxUnavailableError", "docs_index", "extract_program",
    "python_docs",
]
