"""Ingest a user's own traces: validate them against the artifact schema and normalise them.

A user's multi-agent system writes artifacts in the Artifact schema (DESIGN §3; only a few columns
are required). :func:`ingest_traces` checks them, names every problem with its rows, and fills
what can be derived (ids, depths, costs, quality from answer + reference).

It works on whole columns: each distinct plan text is parsed once, each distinct (plan, node) looked
up once, each distinct text counted or scored once, and the results are joined back to the rows by
their group codes (:func:`row_groups`), so its time grows with the rows, not with a Python step per
row (``python -m benchmarks.ingest`` measures it).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from orchrm.data.quality import numeric_match, token_f1
from orchrm.data.tables import (
    ARTIFACT_COLUMNS,
    ARTIFACT_DEFAULTS,
    check_output_table,
    non_boolean_rows,
    read_table,
    write_table,
)
from orchrm.errors import TraceSchemaError
from orchrm.plans import Plan
from orchrm.util.digests import stable_id
from orchrm.util.tokens import count_tokens

INGEST_REQUIRED = ("task_id", "question", "content")


def _rows_text(index: pd.Index, limit: int = 8) -> str:
    rows = [str(i) for i in index[:limit]]
    more = f" (+{len(index) - limit} more)" if len(index) > limit else ""
    return ", ".join(rows) + more


def _blank_values(values: np.ndarray) -> np.ndarray:
    """:func:`_blank` of each cell of an object array, one Python check per cell."""
    return np.fromiter((not isinstance(v, str) or not v.strip() for v in values), dtype=bool, count=len(values))


def _blank(series: pd.Series) -> pd.Series:
    """True where a text cell is missing, NaN, not a string, or only whitespace (``str.strip``).

    A text column holds strings or NaN: a cell with a printable ASCII character other than a space
    is never blank, which one vectorised match finds, and only the rest (empty, whitespace, other
    scripts) is looked at in Python. Any other column is checked once per distinct value.
    """
    if isinstance(series.dtype, pd.StringDtype):
        blank = series.isna().to_numpy(dtype=bool, copy=True)
        rest = ~blank & ~series.str.contains(r"[!-~]", regex=True).fillna(False).to_numpy(dtype=bool)
        blank[rest] = _blank_values(series.to_numpy(dtype=object)[rest])
        return pd.Series(blank, index=series.index)
    codes, values = _factorized(series)
    return pd.Series(_blank_values(values)[codes], index=series.index)


def _factorized(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(codes, distinct values): each row's code into the distinct values (in order of first
    appearance; NaN is a value like any other). A column of unhashable cells (lists, dicts) gives
    each row its own code. Values that compare equal share a code (``1``, ``1.0`` and ``True`` do),
    so use it where such values are treated alike."""
    try:
        codes, values = pd.factorize(series, use_na_sentinel=False)
    except TypeError:  # unhashable cells
        return np.arange(len(series)), series.to_numpy(dtype=object)
    return codes, np.asarray(values, dtype=object)


def _blank_factorized(series: pd.Series) -> tuple[np.ndarray, np.ndarray, pd.Index | np.ndarray]:
    """(blank per row as :func:`_blank` says, codes, distinct values): each distinct value looked at once."""
    try:
        codes, values = pd.factorize(series)
    except TypeError:  # unhashable cells (lists, dicts): not text anyway
        codes, values = np.arange(len(series)), series.to_numpy(dtype=object)
    blank = np.append(_blank_values(np.asarray(values, dtype=object)), True)[codes]  # code -1: NaN
    return blank, codes, values


@dataclass(frozen=True)
class RowGroups:
    """Rows grouped by equal values: ``codes[i]`` is row ``i``'s group, groups numbered in order of
    first appearance; ``first[g]`` is the first row of group ``g``. A per-group array ``a`` becomes
    a per-row one as ``a[codes]``."""

    codes: np.ndarray
    first: np.ndarray


def row_groups(*columns: pd.Series | np.ndarray) -> RowGroups:
    """Group rows by their values in every column (hashable cells, all of one length; NaN is a
    value; values that compare equal, such as ``1`` and ``1.0``, are one value).

    >>> g = row_groups(np.array(["p", "q", "p", "p"]), np.array(["a1", "a1", "a1", "a2"]))
    >>> g.codes.tolist(), g.first.tolist()
    ([0, 1, 0, 2], [0, 1, 3])
    """
    codes = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:
        column_codes, distinct = pd.factorize(pd.Series(column, copy=False), use_na_sentinel=False)
        codes, _ = pd.factorize(codes * len(distinct) + column_codes)
    _, first = np.unique(codes, return_index=True)  # codes are 0, 1, ... in order of first appearance
    return RowGroups(codes.astype(np.int64), first.astype(np.int64))


def task_problems(df: pd.DataFrame) -> list[str]:
    """What breaks the link between rows, their task and their ids, as messages (none: fine).

    A blank question (it is the prompt of every pair of its task), two questions under one
    ``task_id``, an ``artifact_id`` on two rows (pairs point back to artifacts by id; checked
    only where the table has the column). Ingest and the pair builder both refuse these.
    """
    problems = []
    blank, questions, distinct = _blank_factorized(df["question"])
    if blank.any():
        problems.append(f"column 'question': empty, NaN or not text in rows {_rows_text(df.index[blank])}")
    blank_task, tasks, names = _blank_factorized(df["task_id"])
    known = ~(blank | blank_task)  # rows with a blank question or task id are reported on their own
    task_question = np.unique(tasks[known].astype(np.int64) * (len(distinct) + 1) + questions[known])
    task_of = task_question // (len(distinct) + 1)
    several = np.unique(task_of[1:][task_of[1:] == task_of[:-1]])
    if len(several):
        shown = ", ".join(repr(str(names[i])) for i in several[:5])
        problems.append(f"column 'question': tasks {shown} have more than one question (a task has one question)")
    if "artifact_id" in df.columns and len(df["artifact_id"].unique()) < len(df):
        ids = df["artifact_id"]
        dup = df.index[ids.duplicated(keep=False) & ids.notna()]  # missing ids are reported as missing
        if len(dup):
            problems.append(f"column 'artifact_id': duplicate ids in rows {_rows_text(dup)}")
    return problems


def _as_int(series: pd.Series) -> pd.Series:
    return pd.to_numeric(series, errors="coerce")


#: the deepest node an artifact table holds (the artifact gate's ``depth_in_range``)
MAX_DEPTH = 32


@dataclass(frozen=True)
class _Plans:
    """The ``<agent>`` plans of a trace table, each distinct plan text parsed once.

    ``texts``: the distinct ``plan_text`` cells and ``row_text`` each row's index into them;
    ``plans``: the parsed plans and ``row_plan`` each row's index into them (-1: no ``<agent>``
    plan); ``after_plan``: True on the rows of a final output written by a step outside their plan.
    """

    texts: np.ndarray
    row_text: np.ndarray
    plans: tuple[Plan, ...]
    row_plan: np.ndarray
    after_plan: np.ndarray

    @classmethod
    def none(cls, n_rows: int) -> _Plans:
        """A table without ``plan_text``: no plans, no row of one."""
        return cls(np.array([], dtype=object), np.full(n_rows, -1), (), np.full(n_rows, -1), np.zeros(n_rows, dtype=bool))

    @property
    def in_plan(self) -> np.ndarray:
        """True on the rows written by one of their plan's own agents."""
        return (self.row_plan >= 0) & ~self.after_plan


def ingest_traces(df: pd.DataFrame, *, run_id: str | None = None) -> pd.DataFrame:
    """Validate and normalise a user's traces into the artifact table (DESIGN §3).

    Required: ``task_id``, ``question``, ``content``; ``plan_text`` or ``node_id`` + ``agent``;
    ``quality`` or ``answer`` + ``reference``. Everything else is filled: ids by stable hashes (the
    default ``run_id`` hashes the traces themselves), a row of an ``<agent>`` plan without a
    ``node_id`` is its plan's last agent, tokens by counting the text, ``cost`` = tokens,
    ``is_final`` = the last node of each execution (task, run, plan),
    ``quality`` from ``answer`` vs ``reference`` (numeric match for math, token F1 otherwise),
    ``parse_failed`` (an answer the system could not read from its agent's text) false.

    A row of an ``<agent>`` plan names one of its agents, with one exception: a row marked
    ``is_final`` whose ``node_id`` is not in the plan is the plan's final output written by a
    step after it (real systems often end with such a step: ``node_id="final"``,
    ``agent="Resolver"``). It is kept as the execution's final artifact, under its own
    ``node_id`` and ``agent``, as a child of the plan's sink one level deeper (unless the trace
    gives ``depth`` / ``parent_ids``); it enters plan-level pairs, never node-level ones.
    Every problem found is reported at once, naming columns and (0-based) rows, as a
    :class:`TraceSchemaError`; nothing is returned half-normalised.
    """
    if not isinstance(df, pd.DataFrame):
        raise TraceSchemaError(f"traces must be a table (DataFrame), got {type(df).__name__}")
    if df.empty:
        raise TraceSchemaError("the traces hold no rows; nothing to ingest")
    df = df.reset_index(drop=True).copy()
    _check_required_columns(df)
    problems = [problem for check in _CELL_CHECKS for problem in check(df)]
    plans, plan_problems = _parse_plans(df)
    problems += plan_problems
    if problems:
        raise TraceSchemaError("traces rejected, nothing was written:\n  " + "\n  ".join(problems))

    out = _text_columns(df, plans)
    _execution_columns(df, out, plans, run_id=run_id)
    _graph_columns(df, out, plans)
    _cost_columns(df, out)
    out["is_final"] = _final_flags(df, out)
    out["parse_failed"] = df["parse_failed"].astype(bool) if "parse_failed" in df.columns else ARTIFACT_DEFAULTS["parse_failed"]
    out["quality"] = _quality(df, out)
    out["created_at"] = (
        pd.to_datetime(df["created_at"], utc=True, format="ISO8601") if "created_at" in df.columns else pd.Timestamp.now(tz="UTC")
    )
    out["artifact_id"] = _artifact_ids(df, out)
    return out[list(ARTIFACT_COLUMNS)].reset_index(drop=True)


# --------------------------------------------------------------------------------------------
# checks: each returns its problems as messages naming the column and the rows


def _check_required_columns(df: pd.DataFrame) -> None:
    """Raise :class:`TraceSchemaError` naming every required column (or pair of columns) missing."""
    missing = [c for c in INGEST_REQUIRED if c not in df.columns]
    if "plan_text" not in df.columns and not {"node_id", "agent"} <= set(df.columns):
        missing.append("plan_text (or node_id + agent)")
    if "quality" not in df.columns and not {"answer", "reference"} <= set(df.columns):
        missing.append("quality (or answer + reference)")
    if missing:
        raise TraceSchemaError(
            f"traces lack required column(s): {', '.join(missing)}; present: {', '.join(map(str, df.columns))}"
        )


def _text_problems(df: pd.DataFrame) -> list[str]:
    """Blank task ids and contents, then what :func:`task_problems` finds."""
    problems = []
    for col in ("task_id", "content"):
        bad = df.index[_blank(df[col])]
        if len(bad):
            problems.append(f"column '{col}': empty, NaN or not text in rows {_rows_text(bad)}")
    return problems + task_problems(df)


def _id_problems(df: pd.DataFrame) -> list[str]:
    """Optional id columns: a table that has one needs a value on every row."""
    problems = []
    for col in ("plan_id", "run_id", "node_id", "artifact_id"):
        if col in df.columns:
            bad = df.index[df[col].isna()]
            if len(bad):
                problems.append(f"column '{col}': missing in rows {_rows_text(bad)} (give every row one, or drop the column)")
    return problems


def _number_problems(df: pd.DataFrame) -> list[str]:
    """Token counts and depths that are not non-negative integers, depths above :data:`MAX_DEPTH`,
    costs that are not finite non-negative numbers."""
    problems = []
    for col in ("prompt_tokens", "completion_tokens", "depth"):
        if col in df.columns:
            values = _as_int(df[col])
            bad = df.index[values.isna() | (values < 0) | (values % 1 != 0)]
            if len(bad):
                problems.append(f"column '{col}': not a non-negative integer in rows {_rows_text(bad)}")
    if "depth" in df.columns:
        bad = df.index[_as_int(df["depth"]) > MAX_DEPTH]
        if len(bad):
            problems.append(f"column 'depth': above {MAX_DEPTH} in rows {_rows_text(bad)}")
    if "cost" in df.columns:
        values = pd.to_numeric(df["cost"], errors="coerce")
        bad = df.index[values.isna() | (values < 0) | ~np.isfinite(values.fillna(0))]
        if len(bad):
            problems.append(f"column 'cost': not a finite non-negative number in rows {_rows_text(bad)}")
    return problems


def _time_and_parent_problems(df: pd.DataFrame) -> list[str]:
    """Times that are not ISO 8601, parents that are neither a comma-separated string nor a list of ids."""
    problems = []
    if "created_at" in df.columns:
        stamps = pd.to_datetime(df["created_at"], utc=True, errors="coerce", format="ISO8601")
        bad = df.index[stamps.isna()]
        if len(bad):
            problems.append(f"column 'created_at': not an ISO 8601 time in rows {_rows_text(bad)}")
    if "parent_ids" in df.columns:
        bad = df.index[~df["parent_ids"].map(
            lambda v: v is None or (isinstance(v, float) and pd.isna(v)) or isinstance(v, str)
            or (isinstance(v, list | tuple | np.ndarray) and all(isinstance(x, str) for x in v))
        )]
        if len(bad):
            problems.append(f"column 'parent_ids': not a comma-separated string or a list of ids in rows {_rows_text(bad)}")
    return problems


def _quality_problems(df: pd.DataFrame) -> list[str]:
    """Qualities outside [0, 1], or missing where no answer + reference can score the row."""
    if "quality" not in df.columns:
        return []
    problems = []
    q = pd.to_numeric(df["quality"], errors="coerce")
    out_of_range = df.index[q.notna() & ((q < 0) | (q > 1))]
    if len(out_of_range):
        problems.append(f"column 'quality': outside [0, 1] in rows {_rows_text(out_of_range)}")
    nan_q = q.isna()
    if "answer" in df.columns and "reference" in df.columns:
        nan_q &= df["reference"].isna()
    if nan_q.any():
        problems.append(
            f"column 'quality': NaN or not a number (and no answer + reference to score) in rows {_rows_text(df.index[nan_q])}"
        )
    return problems


def _final_flag_problems(df: pd.DataFrame) -> list[str]:
    if "is_final" not in df.columns:
        return []
    bad = non_boolean_rows(df["is_final"])
    return [f"column 'is_final': not a boolean in rows {_rows_text(bad)}"] if len(bad) else []


def _parse_flag_problems(df: pd.DataFrame) -> list[str]:
    """``parse_failed`` (optional) is a boolean, and a row that says its answer could not be read
    has no answer."""
    if "parse_failed" not in df.columns:
        return []
    bad = non_boolean_rows(df["parse_failed"])
    if len(bad):
        return [f"column 'parse_failed': not a boolean in rows {_rows_text(bad)}"]
    if "answer" in df.columns:
        both = df.index[df["parse_failed"].astype(bool).to_numpy() & df["answer"].notna().to_numpy()]
        if len(both):
            return [f"columns 'parse_failed' and 'answer': rows {_rows_text(both)} say no answer could be read yet give one; "
                    "set parse_failed to false there, or the answer to null"]
    return []


#: the checks of every cell, in the order their problems are reported
_CELL_CHECKS = (
    _text_problems, _id_problems, _number_problems, _time_and_parent_problems, _quality_problems, _final_flag_problems,
    _parse_flag_problems,
)


def _parse_plans(df: pd.DataFrame) -> tuple[_Plans, list[str]]:
    """Parse each distinct ``<agent>`` plan text once (ours, or MAS-Orchestra's ``<agent>`` blocks:
    :meth:`Plan.parse` reads both); the problems: blank or invalid plan texts,
    and rows whose ``node_id`` is none of their plan's agents (unless marked ``is_final``: a final
    reply written by a step after the plan)."""
    if "plan_text" not in df.columns:
        return _Plans.none(len(df)), []
    row_text, texts = _factorized(df["plan_text"])
    plans: list[Plan] = []
    plan_of_text = np.full(len(texts), -1)
    bad_text = np.zeros(len(texts), dtype=bool)
    first_error = ""
    for k, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            bad_text[k] = True
        elif "<agent" in text:
            try:
                plans.append(Plan.parse(text))
            except Exception as e:
                bad_text[k] = True
                first_error = first_error or f"; the first: {e}"
                continue
            plan_of_text[k] = len(plans) - 1
    row_plan = plan_of_text[row_text]
    off_plan = after_plan = np.zeros(len(df), dtype=bool)
    if "node_id" in df.columns and plans:  # without the column, a row is its plan's last agent (its sink)
        off_plan, after_plan = _rows_outside_their_plan(df, plans, row_plan)
    problems = []
    if bad_text[row_text].any():
        problems.append(
            f"column 'plan_text': empty or an invalid <agent .../> (or MAS-Orchestra <agent>) plan in rows "
            f"{_rows_text(df.index[bad_text[row_text]])}{first_error} (check it with orchrm.plans.Plan.parse)"
        )
    if off_plan.any():
        problems.append(
            f"column 'node_id': rows {_rows_text(df.index[off_plan])} have an <agent .../> plan_text but no "
            "node_id of one of its agents (each row is the output of one agent of its plan; a final reply "
            "written by a step outside the plan is accepted when the row has is_final=true)"
        )
    return _Plans(texts, row_text, tuple(plans), row_plan, after_plan), problems


def _rows_outside_their_plan(df: pd.DataFrame, plans: list[Plan], row_plan: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(off plan, after plan) per row: rows of an ``<agent>`` plan whose ``node_id`` is none of its
    agents; of those, the ones with a non-blank ``node_id`` marked ``is_final`` are a final reply
    written after the plan, the others are refused. Each distinct (plan, node) is looked at once."""
    rows = np.flatnonzero(row_plan >= 0)
    node_codes, nodes = _factorized(df["node_id"].iloc[rows])
    groups = row_groups(row_plan[rows], node_codes)
    node_sets = [{n.id for n in plan.nodes} for plan in plans]
    first_nodes, first_plans = nodes[node_codes[groups.first]], row_plan[rows[groups.first]]
    in_plan = np.array([isinstance(n, str) and n in node_sets[p] for n, p in zip(first_nodes, first_plans, strict=True)])
    named = np.array([isinstance(n, str) and bool(n.strip()) for n in first_nodes])
    flagged_final = df["is_final"].isin([True]).to_numpy(dtype=bool) if "is_final" in df.columns else np.zeros(len(df), dtype=bool)
    outside = np.zeros(len(df), dtype=bool)
    outside[rows] = ~in_plan[groups.codes]
    after = np.zeros(len(df), dtype=bool)
    after[rows] = named[groups.codes]
    after &= outside & flagged_final
    return outside & ~after, after


# --------------------------------------------------------------------------------------------
# the artifact columns, derived from the checked traces


def _text_columns(df: pd.DataFrame, plans: _Plans) -> pd.DataFrame:
    """A new table with the texts and names: task, question, content, domain, node and agent (a
    row of an ``<agent>`` plan without a ``node_id`` is its plan's sink)."""
    out = pd.DataFrame(index=df.index)
    out["task_id"] = df["task_id"].astype(str)
    out["question"] = df["question"].astype(str)
    out["content"] = df["content"].astype(str)
    out["domain"] = df["domain"].fillna("custom").astype(str) if "domain" in df.columns else "custom"
    out["node_id"] = df["node_id"].fillna("final").astype(str) if "node_id" in df.columns else "final"
    out["agent"] = df["agent"].fillna("external").astype(str) if "agent" in df.columns else "external"
    if "node_id" not in df.columns and plans.plans:  # a row of an <agent> plan is its sink's output
        sinks = np.array([plan.sink for plan in plans.plans], dtype=object)
        out["node_id"] = _filled(out["node_id"], plans.row_plan >= 0, sinks[plans.row_plan])
    return out


def _filled(column: pd.Series, rows: np.ndarray, values: np.ndarray) -> pd.Series:
    """``column`` with the cells of ``rows`` (a boolean mask) set to ``values`` (one per row of
    the table; only those of ``rows`` are read), in the column's dtype."""
    cells = column.to_numpy(dtype=object, copy=True)
    cells[rows] = values[rows]
    return pd.Series(cells, index=column.index, dtype=column.dtype)


def _per_distinct(column: pd.Series, fn) -> np.ndarray:
    """``fn`` of each distinct cell of ``column`` (hashable, and cells that compare equal alike),
    as an object array with one value per row."""
    codes, values = _factorized(column)
    return _objects([fn(v) for v in values])[codes]


def _execution_columns(df: pd.DataFrame, out: pd.DataFrame, plans: _Plans, *, run_id: str | None) -> None:
    """Which execution a row belongs to: ``run_id`` (default: a hash of the traces themselves, so
    two different files never share ids), ``plan_text`` (canonical, or one execution's steps in
    order), ``plan_id`` and ``orchestrator``."""
    group = df["plan_id"].astype(str) if "plan_id" in df.columns else None
    if "run_id" in df.columns:
        out["run_id"] = df["run_id"].astype(str)
    else:
        out["run_id"] = run_id or stable_id("ingest", hashlib.sha256(df.to_json(orient="split", default_handler=str).encode()).hexdigest())
    if "plan_text" in df.columns:
        canonical = [plans.plans[p].render() if p >= 0 else t.strip()
                     for t, p in zip(plans.texts, _plan_of_text(plans), strict=True)]
        out["plan_text"] = _objects(canonical)[plans.row_text].tolist()
    else:  # one execution's steps, in order: a plan id may recur across tasks and runs
        key = out["task_id"] + "\x1f" + out["run_id"] + "\x1f" + (group if group is not None else "")
        out["plan_text"] = _joined_in_groups(out["node_id"] + ": " + out["agent"], key)
    out["plan_id"] = group if group is not None else pd.Series(_per_distinct(out["plan_text"], stable_id).tolist(), index=out.index)
    out["orchestrator"] = df["orchestrator"].fillna("external").astype(str) if "orchestrator" in df.columns else "external"


def _plan_of_text(plans: _Plans) -> np.ndarray:
    """For each distinct plan text, its index into ``plans.plans`` (-1: not an ``<agent>`` plan)."""
    plan_of_text = np.full(len(plans.texts), -1)
    plan_of_text[plans.row_text] = plans.row_plan
    return plan_of_text


def _joined_in_groups(texts: pd.Series, key: pd.Series) -> pd.Series:
    """Each row's group's ``texts`` (rows with one ``key``), joined by newlines in row order.

    >>> _joined_in_groups(pd.Series(["a", "b", "c"]), pd.Series(["x", "y", "x"])).tolist()
    ['a\\nc', 'b', 'a\\nc']
    """
    codes, _ = pd.factorize(key, use_na_sentinel=False)
    joined = (texts + "\n").groupby(codes, sort=False).sum().str[:-1]  # every piece ends with "\n": drop the last
    return pd.Series(joined.loc[codes].to_numpy(), index=texts.index, dtype=texts.dtype)


@dataclass(frozen=True)
class _NodeFacts:
    """What the plan says of each row written by one of its plan's own agents (``rows``, positions
    in the table): the node's agent type, depth and parents (tuples of ids), one entry per row."""

    rows: np.ndarray
    agent: np.ndarray
    depth: np.ndarray
    parents: np.ndarray


def _node_facts(plans: _Plans, node_ids: np.ndarray) -> _NodeFacts:
    """:class:`_NodeFacts` of the rows of ``plans``' own agents, each distinct (plan, node) looked up once."""
    rows = np.flatnonzero(plans.in_plan)
    groups = row_groups(plans.row_plan[rows], node_ids[rows])
    first = [(plans.plans[plans.row_plan[rows[g]]], node_ids[rows[g]]) for g in groups.first]
    depths = [plan.depths() for plan in plans.plans]
    return _NodeFacts(
        rows=rows,
        agent=_objects([plan.node(node).agent for plan, node in first])[groups.codes],
        depth=np.array([depths[plans.row_plan[rows[g]]][node] for g, (_, node) in zip(groups.first, first, strict=True)],
                       dtype=np.int64)[groups.codes],
        parents=_objects([plan.parents(node) for plan, node in first])[groups.codes],
    )


def _objects(values: list) -> np.ndarray:
    """A one-dimensional object array of ``values`` (lists and tuples stay cells, never a second axis)."""
    return np.array([*values, None], dtype=object)[:-1]


def _graph_columns(df: pd.DataFrame, out: pd.DataFrame, plans: _Plans) -> None:
    """``depth`` and ``parent_ids`` as the trace gives them; what it leaves out (and an empty
    ``agent``) taken from the row's ``<agent>`` plan. A final reply written after the plan is the
    sink's child, one level below it."""
    n = len(df)
    depth = _as_int(df["depth"]).to_numpy(dtype=np.int64, copy=True) if "depth" in df.columns else np.zeros(n, dtype=np.int64)
    parents = _parent_lists(df["parent_ids"]) if "parent_ids" in df.columns else _objects([()] * n)
    if plans.plans:
        facts, after, after_plan = _node_facts(plans, out["node_id"].to_numpy(dtype=object)), plans.after_plan, plans.row_plan[plans.after_plan]
        if "agent" not in df.columns or df["agent"].isna().any():
            unnamed = np.zeros(n, dtype=bool)
            unnamed[facts.rows] = df["agent"].isna().to_numpy(dtype=bool)[facts.rows] if "agent" in df.columns else True
            agent = np.empty(n, dtype=object)
            agent[facts.rows] = facts.agent
            out["agent"] = _filled(out["agent"], unnamed, agent)
        if "depth" not in df.columns:
            depth[facts.rows] = facts.depth
            depth[after] = np.array([plan.depths()[plan.sink] + 1 for plan in plans.plans], dtype=np.int64)[after_plan]
        if "parent_ids" not in df.columns:
            parents[facts.rows] = facts.parents
            parents[after] = _objects([(plan.sink,) for plan in plans.plans])[after_plan]
    out["depth"] = depth
    out["parent_ids"] = [list(p) for p in parents]  # each row its own list


def _parent_lists(column: pd.Series) -> np.ndarray:
    """``parent_ids`` cells as sequences of ids: a comma-separated string split (blank parts
    dropped), a list of ids as it is, missing as none. Strings are split once per distinct string."""
    def ids(v) -> list[str]:
        if v is None or (isinstance(v, float) and pd.isna(v)):
            return []
        return [s.strip() for s in v.split(",") if s.strip()] if isinstance(v, str) else [str(x) for x in v]

    if isinstance(column.dtype, pd.StringDtype):
        return _per_distinct(column, ids)
    return _objects([ids(v) for v in column])  # lists of ids: each row's own


def _cell_texts(column: pd.Series) -> np.ndarray:
    """Each cell as ``str(cell)``, ``None`` where it is None or NaN, as an object array. Text and
    integer columns convert each distinct value once; others (mixed cells, floats: ``0.0`` and
    ``-0.0`` are equal but print apart) convert each cell."""
    def text(v) -> str | None:
        return None if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)

    if isinstance(column.dtype, pd.StringDtype) or pd.api.types.is_integer_dtype(column.dtype) or pd.api.types.is_bool_dtype(column.dtype):
        return _per_distinct(column, text)
    return _objects([text(v) for v in column])


def _token_counts(texts: pd.Series) -> pd.Series:
    """:func:`~orchrm.util.tokens.count_tokens` of each row's text, each distinct text counted once."""
    codes, values = pd.factorize(texts, use_na_sentinel=False)
    counts = np.fromiter((count_tokens(v) for v in values), dtype=np.int64, count=len(values))
    return pd.Series(counts[codes], index=texts.index)


def _cost_columns(df: pd.DataFrame, out: pd.DataFrame) -> None:
    """``answer``, the token counts (counted from the texts when not given) and ``cost`` (their sum
    when not given)."""
    out["answer"] = pd.Series(_cell_texts(df["answer"]), index=out.index) if "answer" in df.columns else None
    out["prompt_tokens"] = _as_int(df["prompt_tokens"]).astype("int64") if "prompt_tokens" in df.columns else _token_counts(out["question"])
    out["completion_tokens"] = _as_int(df["completion_tokens"]).astype("int64") if "completion_tokens" in df.columns else _token_counts(out["content"])
    out["cost"] = pd.to_numeric(df["cost"]).astype("float64") if "cost" in df.columns else (out["prompt_tokens"] + out["completion_tokens"]).astype("float64")


def _final_flags(df: pd.DataFrame, out: pd.DataFrame) -> pd.Series:
    """``is_final`` as given, else the last row of each execution (task, run, plan)."""
    if "is_final" in df.columns:
        return df["is_final"].astype(bool)
    return out.groupby(["task_id", "run_id", "plan_id"], sort=False).cumcount(ascending=False) == 0


def _quality(df: pd.DataFrame, out: pd.DataFrame) -> pd.Series:
    """``quality`` as given, else scored from ``answer`` vs ``reference`` (numeric match for math,
    token F1 otherwise), each distinct (math or not, answer, reference) scored once; NaN where
    neither is there."""
    quality = pd.to_numeric(df["quality"], errors="coerce") if "quality" in df.columns else pd.Series(float("nan"), index=df.index)
    if "answer" in df.columns and "reference" in df.columns:
        need = (quality.isna() & df["reference"].notna() & ~_blank(out["answer"])).to_numpy(dtype=bool)
        if need.any():
            math = (out["domain"] == "math").to_numpy(dtype=bool)[need]
            answers = out["answer"].to_numpy(dtype=object)[need]
            references = _cell_texts(df["reference"])[need]
            groups = row_groups(math, answers, references)
            scores = np.array([(numeric_match if math[i] else token_f1)(answers[i], references[i]) for i in groups.first], dtype=np.float64)
            quality = quality.astype("float64")
            quality.iloc[np.flatnonzero(need)] = scores[groups.codes]
    return quality.astype("float64")


def _artifact_ids(df: pd.DataFrame, out: pd.DataFrame) -> pd.Series | list[str]:
    """``artifact_id`` as given, else a stable hash of run, task, plan, node and row
    (``stable_id(run, task, plan, node, row, n=16)``, its text built column-wise); raises
    :class:`TraceSchemaError` when two rows end up with one id."""
    if "artifact_id" in df.columns:
        ids = df["artifact_id"].astype(str)
    else:
        row = pd.Series(np.arange(len(out)), index=out.index).astype(str)
        parts = out["run_id"] + "\x1f" + out["task_id"] + "\x1f" + out["plan_id"] + "\x1f" + out["node_id"] + "\x1f" + row
        ids = pd.Series([hashlib.sha1(p.encode()).hexdigest()[:16] for p in parts.tolist()], index=out.index)
    dup = out.index[ids.duplicated(keep=False)]
    if len(dup):
        raise TraceSchemaError(f"column 'artifact_id': duplicate ids in rows {_rows_text(dup)}")
    return ids


def ingest_file(traces: str | os.PathLike, out: str | os.PathLike, *, run_id: str | None = None) -> pd.DataFrame:
    """Read ``traces`` (JSONL or Parquet), normalise with :func:`ingest_traces`, write ``out``
    atomically. On any error nothing is written."""
    check_output_table(out, inputs=[traces])
    df = ingest_traces(read_table(traces), run_id=run_id)
    write_table(df, out)
    return df
