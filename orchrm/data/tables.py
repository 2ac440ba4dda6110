"""The artifact and pair tables (DESIGN §3): their schemas and atomic Parquet / JSONL I/O.

Both tables are pandas DataFrames stored as Parquet (JSONL accepted on input). Writes go to a
temporary file in the target folder, are flushed to disk and then renamed over the target, so a
crash never leaves half a table behind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from orchrm.errors import OutputPathError, TraceSchemaError
from orchrm.util.digests import table_digest
from orchrm.util.fileio import atomic_write_bytes, folder_problem

#: Artifact table: column -> (dtype family, meaning). One row per intermediate or final output.
ARTIFACT_SCHEMA: Mapping[str, tuple[str, str]] = {
    "artifact_id": ("str", "unique id of this output"),
    "run_id": ("str", "the collection run (or ingestion) that produced it"),
    "task_id": ("str", "task it belongs to"),
    "domain": ("str", "math | code | multihop | webqa | a user's own domain"),
    "question": ("str", "the task text, so the table stands on its own"),
    "plan_id": ("str", "12-hex hash of plan_text"),
    "plan_text": ("str", "canonical plan text (orchrm.plans)"),
    "orchestrator": ("str", "which sampler wrote the plan: base, specialized, ..."),
    "node_id": ("str", "plan node that produced it"),
    "agent": ("str", "agent type of that node"),
    "depth": ("int", "0 for source nodes, 1 + deepest parent otherwise"),
    "parent_ids": ("list", "node ids feeding this node"),
    "content": ("str", "all the text the agent produced"),
    "answer": ("str?", "parsed candidate answer; null for retrieval-only nodes"),
    "prompt_tokens": ("int", "tokens consumed over the node's LLM calls"),
    "completion_tokens": ("int", "tokens produced"),
    "cost": ("float", "tier-weighted tokens: (prompt + completion) x the tier's cost_weight"),
    "is_final": ("bool", "output of the plan's sink: the plan's answer"),
    "quality": ("float?", "in [0, 1], from the quality function; null when unknowable"),
    "created_at": ("datetime", "UTC time of the collection run"),
    "parse_failed": ("bool", "the agent wrote text but no answer could be read from it (a real model's format "
                     "slip): answer is null and quality 0 for that reason, not for a wrong answer; optional"),
}
ARTIFACT_COLUMNS: tuple[str, ...] = tuple(ARTIFACT_SCHEMA)
#: columns added after tables were first written: a table without one reads as holding this value
#: in every row (an older collection, a user's traces that do not say)
ARTIFACT_DEFAULTS: Mapping[str, object] = {"parse_failed": False}

#: Pair table: TRL's preference columns (prompt/chosen/rejected/margin) plus provenance.
PAIR_SCHEMA: Mapping[str, tuple[str, str]] = {
    "pair_id": ("str", "unique id of the pair"),
    "task_id": ("str", "the one task both artifacts belong to"),
    "domain": ("str", "task domain"),
    "granularity": ("str", "plan | node"),
    "source": ("str", "correct-over-incorrect | intermediate | specialized-over-base | user string"),
    "prompt": ("str", "the state s: task text, plus the plan prefix for node pairs"),
    "chosen": ("str", "the winning action text"),
    "rejected": ("str", "the losing action text"),
    "margin": ("float", "quality(chosen) - quality(rejected), > 0"),
    "chosen_artifact_id": ("str", "artifact behind chosen"),
    "rejected_artifact_id": ("str", "artifact behind rejected"),
    "split": ("str", "train | val | test, assigned by task"),
    "collection_tokens": ("int", "tokens spent producing the artifacts behind this pair"),
}
PAIR_COLUMNS: tuple[str, ...] = tuple(PAIR_SCHEMA)
#: the pair columns training reads, which :func:`pairs_digest` hashes
DIGEST_COLUMNS: tuple[str, ...] = ("task_id", "prompt", "chosen", "rejected", "margin", "split")


def pairs_digest(df: pd.DataFrame) -> str:
    """The digest of a pair table: :func:`orchrm.util.digests.table_digest` of
    :data:`DIGEST_COLUMNS` (values and order of the rows, not the index). The one digest of the
    pairs: a trained model's manifest (``data_hash``) and the resume check of its checkpoints, the
    MLflow dataset the pipeline logs and the ``data_digest`` of the registered version."""
    return table_digest(df, DIGEST_COLUMNS)


def check_output_table(path: str | os.PathLike, *, inputs: Sequence[str | os.PathLike] = ()) -> Path:
    """Fail now, before any work, where :func:`write_table` could not write ``path``: a file name
    that is not .parquet or .jsonl, a folder in its place, a parent that cannot be written, or one
    of the command's ``inputs`` (which the write would replace)."""
    target = Path(path)
    if target.is_dir():
        raise OutputPathError(f"{target} is a folder; give a file name ending in .parquet or .jsonl")
    _table_format(target)
    problem = folder_problem(target.parent)
    if problem:
        raise OutputPathError(f"cannot write {target}: {problem}; choose another path")
    for source in inputs:
        if target.exists() and Path(source).exists() and os.path.samefile(source, target):
            raise OutputPathError(f"{target} is also the input {source}; writing it would replace the input: choose another output file")
    return target


def _table_format(target: Path) -> str:
    if target.suffix == ".jsonl":
        return "jsonl"
    if target.suffix in (".parquet", ".pq"):
        return "parquet"
    raise TraceSchemaError(f"cannot write {target.name}: use a .parquet or .jsonl file name")


def write_table(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write ``df`` atomically as Parquet (``.parquet``) or JSON Lines (``.jsonl``)."""
    target = Path(path)
    if _table_format(target) == "jsonl":
        return atomic_write_bytes(
            target, lambda tmp: df.to_json(tmp, orient="records", lines=True, date_format="iso", force_ascii=False)
        )
    return atomic_write_bytes(target, lambda tmp: df.to_parquet(tmp, index=False))


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a Parquet or JSONL table; the error names the file and what is wrong with it."""
    source = Path(path)
    if not source.exists():
        raise FileNotFoundError(f"{source}: no such file")
    if source.is_dir():
        raise TraceSchemaError(f"{source} is a folder; give a table file (.parquet or .jsonl)")
    try:
        if source.suffix in (".jsonl", ".json", ".ndjson"):
            rows = []
            with open(source, encoding="utf-8") as fh:
                for lineno, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise TraceSchemaError(f"{source}: line {lineno} is not valid JSON ({exc.msg})") from None
                    if not isinstance(row, dict):
                        raise TraceSchemaError(f"{source}: line {lineno} is not a JSON object")
                    rows.append(row)
            return pd.DataFrame(rows)
        return pd.read_parquet(source)
    except TraceSchemaError:
        raise
    except Exception as exc:  # pyarrow raises many types for a damaged file
        hint = "" if source.suffix in (".parquet", ".pq") else (
            " (read as Parquet, the format of any name not ending in .jsonl; CSV is not read: convert it "
            "to Parquet or JSON Lines)"
        )
        raise TraceSchemaError(f"{source}: cannot be read as a table ({type(exc).__name__}: {exc}){hint}") from None


def empty_artifacts() -> pd.DataFrame:
    """An artifact table with every column and no rows."""
    return pd.DataFrame({c: pd.Series(dtype=_PANDAS_DTYPES[ARTIFACT_SCHEMA[c][0]]) for c in ARTIFACT_COLUMNS})


_PANDAS_DTYPES = {
    "str": "object",
    "str?": "object",
    "int": "int64",
    "float": "float64",
    "float?": "float64",
    "bool": "bool",
    "list": "object",
    "datetime": "datetime64[us, UTC]",
}


def non_boolean_rows(values: pd.Series) -> pd.Index:
    """Index labels of ``values`` that are not a boolean (True/False or 1/0): a text "false" is not."""
    if pd.api.types.is_bool_dtype(values):
        return values.index[:0]
    return values.index[~values.map(lambda v: isinstance(v, bool | np.bool_) or v in (0, 1)).to_numpy(dtype=bool)]


def with_artifact_defaults(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every optional column (:data:`ARTIFACT_DEFAULTS`) it lacks filled with its
    default; ``df`` itself when it lacks none."""
    missing = {c: v for c, v in ARTIFACT_DEFAULTS.items() if c not in df.columns}
    return df.assign(**missing) if missing else df


def artifacts_frame(rows: list[dict]) -> pd.DataFrame:
    """Build an artifact table from row dicts, with the schema's column order and dtypes (an
    optional column a row lacks takes its default, :data:`ARTIFACT_DEFAULTS`)."""
    if not rows:
        return empty_artifacts()
    df = pd.DataFrame.from_records(rows, columns=list(ARTIFACT_COLUMNS))
    for col, default in ARTIFACT_DEFAULTS.items():
        if df[col].isna().any():
            df[col] = df[col].astype(object).where(df[col].notna(), default)
    for col in ("depth", "prompt_tokens", "completion_tokens"):
        df[col] = df[col].astype("int64")
    df["cost"] = df["cost"].astype("float64")
    df["quality"] = pd.to_numeric(df["quality"], errors="coerce").astype("float64")
    df["is_final"] = df["is_final"].astype(bool)
    df["parse_failed"] = df["parse_failed"].astype(bool)
    df["created_at"] = pd.to_datetime(df["created_at"], utc=True)
    return df


# ingestion of a user's own traces -----------------------------------------------------------
