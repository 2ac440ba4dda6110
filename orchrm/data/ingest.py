"""Ingest a user's own traces: validate them against the artifact schema and normalise them.

A user's multi-agent system writes artifacts in the Artifact schema (DESIGN §3; only a few columns
are required). :func:`ingest_traces` checks them, names every problem with its rows, and fills
what can be derived (ids, depths, costs, quality from answer + reference).
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


def _blank(series: pd.Series) -> pd.Series:
    """True where a text cell is missing, NaN, not a string, or only whitespace."""
    return series.map(lambda v: not isinstance(v, str) or not v.strip())


def _blank_factorized(series: pd.Series) -> tuple[np.ndarray, np.ndarray, pd.Index | np.ndarray]:
    """(blank per row as :func:`_blank` says, codes, distinct values): each distinct value looked at once."""
    try:
        codes, values = pd.factorize(series)
    except TypeError:  # unhashable cells (lists, dicts): not text anyway
        codes, values = np.arange(len(series)), series.to_numpy(dtype=object)
    blank = np.append(_blank(pd.Series(values, dtype=object)).to_numpy(dtype=bool), True)[codes]  # code -1: NaN
    return blank, codes, values


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
    """The ``<agent>`` plans of a trace table: each distinct plan text parsed once, and the rows of
    a final output written by a step outside their plan."""

    parsed: dict[str, Plan]
    after_plan: frozenset


def ingest_traces(df: pd.DataFrame, *, run_id: str | None = None) -> pd.DataFrame:
    """Validate and normalise a user's traces into the artifact table (DESIGN §3).

    Required: ``task_id``, ``question``, ``content``; ``plan_text`` or ``node_id`` + ``agent``;
    ``quality`` or ``answer`` + ``reference``. Everything else is filled: ids by stable hashes (the
    default ``run_id`` hashes the traces themselves), a row of an ``<agent>`` plan without a
    ``node_id`` is its plan's last agent, tokens by counting the text, ``cost`` = tokens,
    ``is_final`` = the last node of each execution (task, run, plan),
    ``quality`` from ``answer`` vs ``reference`` (numeric match for math, token F1 otherwise).

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


#: the checks of every cell, in the order their problems are reported
_CELL_CHECKS = (_text_problems, _id_problems, _number_problems, _time_and_parent_problems, _quality_problems, _final_flag_problems)


def _parse_plans(df: pd.DataFrame) -> tuple[_Plans, list[str]]:
    """Parse each distinct ``<agent>`` plan text once; the problems: blank or invalid plan texts,
    and rows whose ``node_id`` is none of their plan's agents (unless marked ``is_final``: a final
    reply written by a step after the plan)."""
    plans: dict[str, Plan] = {}
    after_plan: set = set()
    if "plan_text" not in df.columns:
        return _Plans(plans, frozenset()), []
    bad_plans, off_plan = [], []
    node_ids = df["node_id"] if "node_id" in df.columns else pd.Series(None, index=df.index, dtype=object)
    flagged_final = df["is_final"].isin([True]) if "is_final" in df.columns else pd.Series(False, index=df.index)
    for i, text in df["plan_text"].items():
        if not isinstance(text, str) or not text.strip():
            bad_plans.append(i)
        elif "<agent" in text:
            try:
                if text not in plans:
                    plans[text] = Plan.parse(text)
                parsed = plans[text]
            except Exception:
                bad_plans.append(i)
                continue
            node = node_ids.at[i]  # without the column: the plan's last agent (its sink)
            if "node_id" in df.columns and (not isinstance(node, str) or node not in {n.id for n in parsed.nodes}):
                if isinstance(node, str) and node.strip() and flagged_final.at[i]:
                    after_plan.add(i)  # the final reply, written by a step after the plan
                else:
                    off_plan.append(i)
    problems = []
    if bad_plans:
        problems.append(
            f"column 'plan_text': empty or an invalid <agent .../> plan in rows {_rows_text(pd.Index(bad_plans))} "
            "(check it with orchrm.plans.Plan.parse)"
        )
    if off_plan:
        problems.append(
            f"column 'node_id': rows {_rows_text(pd.Index(off_plan))} have an <agent .../> plan_text but no "
            "node_id of one of its agents (each row is the output of one agent of its plan; a final reply "
            "written by a step outside the plan is accepted when the row has is_final=true)"
        )
    return _Plans(plans, frozenset(after_plan)), problems


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
    if "node_id" not in df.columns and plans.parsed:  # a row of an <agent> plan is its sink's output
        for i, text in df["plan_text"].items():
            if text in plans.parsed:
                out.at[i, "node_id"] = plans.parsed[text].sink
    return out


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
        out["plan_text"] = [plans.parsed[t].render() if t in plans.parsed else t.strip() for t in df["plan_text"]]
    else:  # one execution's steps, in order: a plan id may recur across tasks and runs
        key = out["task_id"] + "\x1f" + out["run_id"] + "\x1f" + (group if group is not None else "")
        steps = (out["node_id"] + ": " + out["agent"]).groupby(key).transform(lambda s: "\n".join(s))
        out["plan_text"] = steps
    out["plan_id"] = group if group is not None else out["plan_text"].map(lambda t: stable_id(t))
    out["orchestrator"] = df["orchestrator"].fillna("external").astype(str) if "orchestrator" in df.columns else "external"


def _graph_columns(df: pd.DataFrame, out: pd.DataFrame, plans: _Plans) -> None:
    """``depth`` and ``parent_ids`` as the trace gives them; what it leaves out (and an empty
    ``agent``) taken from the row's ``<agent>`` plan. A final reply written after the plan is the
    sink's child."""
    out["depth"] = _as_int(df["depth"]).astype("int64") if "depth" in df.columns else 0
    if "parent_ids" in df.columns:
        out["parent_ids"] = df["parent_ids"].map(
            lambda v: [] if v is None or (isinstance(v, float) and pd.isna(v)) else [s.strip() for s in v.split(",") if s.strip()] if isinstance(v, str) else [str(x) for x in v]
        )
    else:
        out["parent_ids"] = [[] for _ in range(len(df))]
    depths = {text: plan.depths() for text, plan in plans.parsed.items()}
    for i, text in df["plan_text"].items() if plans.parsed else ():
        if text not in plans.parsed:
            continue
        plan, node = plans.parsed[text], out.at[i, "node_id"]
        if i in plans.after_plan:  # a step after the plan: it reads the sink's output
            if "depth" not in df.columns:
                out.at[i, "depth"] = depths[text][plan.sink] + 1
            if "parent_ids" not in df.columns:
                out.at[i, "parent_ids"] = [plan.sink]
            continue
        if "agent" not in df.columns or pd.isna(df.at[i, "agent"]):
            out.at[i, "agent"] = plan.node(node).agent
        if "depth" not in df.columns:
            out.at[i, "depth"] = depths[text][node]
        if "parent_ids" not in df.columns:
            out.at[i, "parent_ids"] = list(plan.parents(node))


def _cost_columns(df: pd.DataFrame, out: pd.DataFrame) -> None:
    """``answer``, the token counts (counted from the texts when not given) and ``cost`` (their sum
    when not given)."""
    out["answer"] = df["answer"].map(lambda v: None if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)) if "answer" in df.columns else None
    out["prompt_tokens"] = _as_int(df["prompt_tokens"]).astype("int64") if "prompt_tokens" in df.columns else out["question"].map(count_tokens)
    out["completion_tokens"] = _as_int(df["completion_tokens"]).astype("int64") if "completion_tokens" in df.columns else out["content"].map(count_tokens)
    out["cost"] = pd.to_numeric(df["cost"]).astype("float64") if "cost" in df.columns else (out["prompt_tokens"] + out["completion_tokens"]).astype("float64")


def _final_flags(df: pd.DataFrame, out: pd.DataFrame) -> pd.Series:
    """``is_final`` as given, else the last row of each execution (task, run, plan)."""
    if "is_final" in df.columns:
        return df["is_final"].astype(bool)
    return out.groupby(["task_id", "run_id", "plan_id"], sort=False).cumcount(ascending=False) == 0


def _quality(df: pd.DataFrame, out: pd.DataFrame) -> pd.Series:
    """``quality`` as given, else scored from ``answer`` vs ``reference`` (numeric match for math,
    token F1 otherwise); NaN where neither is there."""
    quality = pd.to_numeric(df["quality"], errors="coerce") if "quality" in df.columns else pd.Series(float("nan"), index=df.index)
    if "answer" in df.columns and "reference" in df.columns:
        need = quality.isna() & df["reference"].notna() & ~_blank(out["answer"])
        for i in df.index[need]:
            scorer = numeric_match if out.at[i, "domain"] == "math" else token_f1
            quality.at[i] = scorer(out.at[i, "answer"], str(df.at[i, "reference"]))
    return quality.astype("float64")


def _artifact_ids(df: pd.DataFrame, out: pd.DataFrame) -> pd.Series | list[str]:
    """``artifact_id`` as given, else a stable hash of run, task, plan, node and row; raises
    :class:`TraceSchemaError` when two rows end up with one id."""
    if "artifact_id" in df.columns:
        ids = df["artifact_id"].astype(str)
    else:
        ids = pd.Series(
            [
                stable_id(r, t, p, n, i, n=16)
                for i, (r, t, p, n) in enumerate(zip(out["run_id"], out["task_id"], out["plan_id"], out["node_id"], strict=True))
            ],
            index=out.index,
        )
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
