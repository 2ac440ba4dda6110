"""``orchrm pairs``: read an artifact table from a file, build its pairs, write the pair table."""

from __future__ import annotations

import logging
import os

import pandas as pd

from orchrm.config import PairsConfig
from orchrm.data.pairs import build_pairs
from orchrm.data.tables import check_output_table, read_table, write_table
from orchrm.errors import TraceSchemaError

logger = logging.getLogger("orchrm.data.pairs")


def build_pairs_file(artifacts_path: str | os.PathLike, out_path: str | os.PathLike, config: PairsConfig | None = None) -> pd.DataFrame:
    """Read an artifact table, build its pairs and write them atomically (Parquet or JSONL);
    returns the pair table. An artifact table without rows, or an output that cannot be written
    (the input itself, say), is refused before any work."""
    check_output_table(out_path, inputs=[artifacts_path])
    artifacts = read_table(artifacts_path)
    if artifacts.empty:
        raise TraceSchemaError(f"artifact table {artifacts_path} has no rows: collect or ingest artifacts first")
    pairs = build_pairs(artifacts, config=config)
    if pairs.empty:
        logger.warning("no pairs: no task has two comparable artifacts whose quality differs by min_margin")
    write_table(pairs, out_path)
    return pairs
