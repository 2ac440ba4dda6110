"""The artifact and pair tables (DESIGN §3): schemas, atomic Parquet I/O, and trace ingestion.

Both tables are pandas DataFrames stored as Parquet (JSONL accepted on input). Writes go to a
temporary file in the target folder, are flushed to disk and then renamed over the target, so a
crash never leaves half a table behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from orchrm.errors import TraceSchemaError

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
}
ARTIFACT_COLUMNS: tuple[str, ...] = tuple(ARTIFACT_SCHEMA)

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


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, write) -> Path:
    """Call ``write(tmp_path)`` then move the finished file onto ``path`` atomically."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return target


def write_table(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write ``df`` atomically as Parquet (``.parquet``) or JSON Lines (``.jsonl``)."""
    target = Path(path)
    if target.suffix == ".jsonl":
        return atomic_write_bytes(
            target, lambda tmp: df.to_json(tmp, orient="records", lines=True, date_format="iso", force_ascii=False)
        )
    if target.suffix not in (".parquet", ".pq"):
        raise TraceSchemaError(f"cannot write {target.name}: use a .parquet or .jsonl file name")
    return atomic_write_bytes(target, lambda tmp: df.to_parquet(tmp, index=False))


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a Parquet or JSONL table; the error names the file and what is wrong with it."""
    source = Path(path)
    if not source.exists():
        raise FileNotFoundError(f"{source}: no such file")
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
        raise TraceSchemaError(f"{source}: cannot be read as a table ({type(exc).__name__}: {exc})") from None


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


def artifacts_frame(rows: list[dict]) -> pd.DataFrame:
    """Build an artifact table from row dicts, with the schema's column order and dtypes."""
    if not rows:
        return empty_artifacts()
    df = pd.DataFrame.from_records(rows, columns=list(ARTIFACT_COLUMNS))
    for col in ("depth", "prompt_tokens", "completion_tokens"):
        df[col] = df[col].astype("int64")
    df["cost"] = df["cost"].astype("float64")
    df["quality"] = pd.to_numeric(df["quality"], errors="coerce").astype("float64")
    df["is_final"] = df["is_final"].astype(bool)
    df["created_at"] = pd.to_datetime(df["created_at"], utc=True)
    return df
