"""The generic domain: free-text tasks and users' own domains that carry no simulation data.

The sandbox cannot know the answer to an arbitrary question, so it does not pretend to: agents
write their reasoning around the question, arithmetic that appears literally in the question is
really computed (with the tier's slip rate), and otherwise the answer is None. Quality is
unknown (None); pass a quality function to the comparator, or use a real LLM backend.
"""

from __future__ import annotations

import ast
import math
import operator
import random
import re
from dataclasses import dataclass

from orchrm.execution.sandbox.domain import Attempt, Context, Retrieval, SandboxDomain
from orchrm.execution.tasks.base import Task
from orchrm.execution.tasks.math import expression_is_partial

_EXPR = re.compile(r"[\d.]+(?:\s*[-+*/^]\s*\(?\s*[\d.]+\s*\)?)+")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv, ast.Pow: operator.pow}


def safe_eval(expr: str) -> float | None:
    """Evaluate + - * / ^ arithmetic without eval(); None if it is not plain arithmetic, too deep
    to parse, or its value is not a finite float."""

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 12:
                raise ValueError("exponent too large")
            return _OPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError("not arithmetic")

    try:
        value = ev(ast.parse(expr.replace("^", "**"), mode="eval").body)
    except (ValueError, SyntaxError, ZeroDivisionError, OverflowError, RecursionError, MemoryError):
        return None
    return value if math.isfinite(value) else None


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.6g}"


@dataclass(frozen=True)
class GenericState:
    expression: str | None
    value: float | None


class GenericDomain(SandboxDomain):
    name = "generic"
    slip = {"small": 0.15, "large": 0.05}

    def prepare(self, task: Task) -> GenericState:
        m = _EXPR.search(task.question)
        if m and expression_is_partial(task.question, m.start(), m.start() + len(m.group(0).rstrip())):
            m = None  # "1e5 + 1" is not "5 + 1": no answer beats a wrong one
        value = safe_eval(m.group(0)) if m else None
        return GenericState(m.group(0) if m and value is not None else None, value)

    def attempt(self, ctx: Context, tier: str, rng: random.Random) -> Attempt:
        st: GenericState = ctx.state
        lines = [f"The task asks: {ctx.task.question}", "I restate what is given and what is asked."]
        if ctx.docs:
            lines.append(f"I read {len(ctx.docs)} retrieved documents for relevant facts.")
        if st.value is None:
            lines.append("No computation I can check appears in the task; I cannot give a verified answer.")
            return Attempt("\n".join(lines), None, 0.0)
        value = st.value
        p = self.slip.get(tier, 0.1) * self.noise.tiers[tier].skill if tier in self.noise.tiers else 0.1
        if rng.random() < p:
            value = value + rng.choice((-1, 1)) * max(1.0, abs(value) * 0.1)
        lines.append(f"{st.expression} = {_fmt(value)}")
        lines.append(f"Answer: {_fmt(value)}")
        return Attempt("\n".join(lines), _fmt(value), 1.0 - p, value)

    def critique(self, ctx: Context, attempt: Attempt, tier: str, rng: random.Random, *, tools: bool) -> Attempt:
        st: GenericState = ctx.state
        if st.value is None or attempt.answer is None:
            return Attempt("Nothing to check.", attempt.answer, attempt.correct_prob, attempt.detail)
        if tools:
            return Attempt(f"Recomputed {st.expression} = {_fmt(st.value)} with a calculator.", _fmt(st.value), 0.95, st.value)
        return Attempt(f"Re-read the computation; I keep {attempt.answer}.", attempt.answer, attempt.correct_prob, attempt.detail)

    def retrieve(self, ctx: Context, queries: int, top_k: int, tier: str | None, rng: random.Random) -> Retrieval:
        words = [w for w in re.findall(r"[A-Za-z]{4,}", ctx.task.question)]
        qs = tuple(" ".join(words[i::queries][:6]) or ctx.task.question for i in range(queries))
        return Retrieval(qs, ())

    def quality(self, task: Task, answer: str | None) -> float | None:
        return None
