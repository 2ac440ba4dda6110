"""The one pair reader: ``orchrm validate``, ``orchrm train`` and ``Trainer.train(pairs=...)`` all
read a pair table through :func:`read_pairs`.

It accepts our own table, TRL's preference format and the OrchRM data set's format, and fills
what a foreign table lacks the same way for every reader, so a task, its split and a pair's
margin never depend on which command read the file. Checks of the *values* are left to the
Great Expectations suite (``orchrm validate``) and to the Trainer, which refuse what they cannot
use.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchrm.config import PairsConfig
from orchrm.data.pair_table import empty_pairs, pair_ids
from orchrm.data.splits import assign_split
from orchrm.data.tables import PAIR_COLUMNS, read_table
from orchrm.errors import TraceSchemaError
from orchrm.model.texts import task_text

logger = logging.getLogger("orchrm.data.pairs")

#: margin of a pair without one (no ``margin`` column): a binary correct-over-incorrect judgement,
#: the largest quality difference (qualities are in [0, 1])
EXTERNAL_MARGIN = 1.0
#: domain of a pair without one
DEFAULT_DOMAIN = "custom"
#: what :func:`read_pairs` takes: a table, row dicts, or a Parquet / JSONL path
PairSource = pd.DataFrame | Sequence[Mapping[str, Any]] | str | os.PathLike


def task_id_of(prompt: str) -> str:
    """The task id of a pair that has none: a stable hash of its prompt's question
    (:func:`orchrm.model.texts.task_text`: a node pair's prompt is the question plus the plan
    prefix it was compared at, DESIGN §3), so every pair about one question shares a task (and
    so a split)."""
    return "task-" + hashlib.blake2b(task_text(prompt).encode("utf-8"), digest_size=6).hexdigest()


def _table(pairs: Any) -> tuple[pd.DataFrame, str]:
    """The raw table of ``pairs`` and the prefix of its messages (the file, when it is one)."""
    if isinstance(pairs, str | os.PathLike):
        return read_table(Path(pairs)), f"{pairs}: "
    if isinstance(pairs, pd.DataFrame):
        return pairs.copy(), ""
    if isinstance(pairs, Iterable) and not isinstance(pairs, bytes | Mapping):
        return pd.DataFrame(list(pairs)), ""
    raise TraceSchemaError(
        f"pairs must be a pair table (a DataFrame, a list of row dicts, or a .parquet/.jsonl path), "
        f"not {type(pairs).__name__}"
    )


def read_pairs(pairs: PairSource, *, config: PairsConfig | None = None) -> pd.DataFrame:
    """A pair table normalised to :data:`orchrm.data.ingest.PAIR_COLUMNS` (only those columns).

    ``pairs``: our own table (Parquet / JSONL path, DataFrame or row dicts), TRL's preference
    format (``prompt``, ``chosen``, ``rejected``, optional ``margin``) or the published OrchRM
    data-set format (``input``, ``chosen``, ``rejected``, ``source``). Missing columns, and
    missing values of the id and label columns below, are filled:

    - ``prompt`` from ``input``; ``source`` ``"external"``; ``granularity`` ``node`` for
      ``intermediate`` pairs, else ``plan``; ``domain`` :data:`DEFAULT_DOMAIN`;
    - ``task_id``: :func:`task_id_of` the prompt (its task text, without trailing
      ``<agent>``/``<edge>`` lines), so every pair about one question shares a task and a split;
    - ``margin`` (only when the column is absent; NaN margins are left for validation to refuse):
      ``config.prior_margin`` for ``specialized-over-base``, else :data:`EXTERNAL_MARGIN`;
    - artifact ids: hashes of (task_id, text), one artifact per text within a task;
      ``collection_tokens`` 0 (not recorded); ``split`` (only when the column is absent) by
      :func:`~orchrm.data.splits.assign_split` with ``config``'s fractions; ``pair_id`` by
      :func:`~orchrm.data.pair_table.pair_ids`. When ids are generated, rows repeating a
      ``(prompt, chosen, rejected)`` are dropped (DESIGN §5).

    Zero rows give an empty table with every column. Raises :class:`TraceSchemaError` for what
    cannot be read as pairs: no ``prompt``/``chosen``/``rejected``, cells there that are not text,
    fractional token counts.
    """
    cfg = config or PairsConfig()
    df, where = _table(pairs)
    df = df.reset_index(drop=True)
    if len(df) == 0:
        return empty_pairs()
    if "prompt" not in df.columns and "input" in df.columns:
        df = df.rename(columns={"input": "prompt"})
    missing = [c for c in ("prompt", "chosen", "rejected") if c not in df.columns]
    if missing:
        raise TraceSchemaError(
            f"{where}not a pair table: lacks {', '.join(missing)}; expected our pair table (`orchrm pairs` "
            "writes one), TRL's prompt/chosen/rejected[/margin] or the OrchRM data set's input/chosen/rejected/source"
        )
    for col in ("prompt", "chosen", "rejected"):
        bad = df.index[~df[col].map(lambda v: isinstance(v, str))]
        if len(bad):
            raise TraceSchemaError(
                f"{where}column '{col}' must hold plain text; rows {', '.join(map(str, bad[:5]))} do not "
                "(conversational message lists must be flattened to text first)"
            )
    n = len(df)

    def fill(col: str, default) -> None:
        """``col`` where the table lacks it or a cell is missing: ``default(rows)`` for those rows."""
        rows = df.index if col not in df.columns else df.index[df[col].isna()]
        if len(rows) == len(df):
            df[col] = pd.Series(default(rows), index=rows, dtype=object)
        elif len(rows):
            df[col] = df[col].astype(object)
            df.loc[rows, col] = pd.Series(default(rows), index=rows, dtype=object)

    fill("source", lambda rows: ["external"] * len(rows))
    df["source"] = df["source"].astype(str)
    fill("granularity", lambda rows: np.where(df.loc[rows, "source"] == "intermediate", "node", "plan"))
    fill("domain", lambda rows: [DEFAULT_DOMAIN] * len(rows))
    fill("task_id", lambda rows: [task_id_of(p) for p in df.loc[rows, "prompt"]])
    df["task_id"] = df["task_id"].astype(str)
    if "margin" not in df.columns:
        df["margin"] = np.where(df["source"] == "specialized-over-base", cfg.prior_margin, EXTERNAL_MARGIN)
    df["margin"] = pd.to_numeric(df["margin"], errors="coerce").astype("float64")
    for side in ("chosen", "rejected"):  # one artifact = one text within one task
        fill(f"{side}_artifact_id", lambda rows, side=side: [
            "text-" + hashlib.blake2b(f"{task}\x1f{text}".encode(), digest_size=8).hexdigest()
            for task, text in zip(df.loc[rows, "task_id"], df.loc[rows, side], strict=True)
        ])
    if "collection_tokens" not in df.columns:
        df["collection_tokens"] = 0
    tokens = pd.to_numeric(df["collection_tokens"], errors="coerce")
    fractional = df.index[tokens.notna() & (tokens % 1 != 0)]
    if len(fractional):
        raise TraceSchemaError(
            f"{where}column 'collection_tokens' must hold whole token counts; rows {', '.join(map(str, fractional[:5]))} "
            f"hold {', '.join(map(str, tokens[fractional[:5]]))}"
        )
    # unreadable counts stay NaN (float) so that validation names the rows instead of a guess
    df["collection_tokens"] = tokens.astype("int64") if tokens.notna().all() else tokens
    if "split" not in df.columns:
        df["split"] = assign_split(df["task_id"], cfg.val_fraction, cfg.test_fraction)
    if "pair_id" not in df.columns:
        df = df.drop_duplicates(subset=["prompt", "chosen", "rejected"]).reset_index(drop=True)
        df["pair_id"] = pair_ids(df["task_id"], df["granularity"].astype(str), df["source"], df["chosen_artifact_id"].astype(str), df["rejected_artifact_id"].astype(str))
    if len(df) < n:
        logger.info("%sdropped %d repeated (prompt, chosen, rejected) rows", where, n - len(df))
    return df[list(PAIR_COLUMNS)]
