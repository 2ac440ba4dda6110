"""Stable hashes, each defined once: ids from parts, a file's digest, a table's digest, the
package's source.

>>> stable_id("math", 3)
'31d5dcc96ef3'
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def stable_id(*parts: object, n: int = 12) -> str:
    """A short hex id from the parts' text (stable across processes and runs)."""
    return hashlib.sha1("\x1f".join(map(str, parts)).encode()).hexdigest()[:n]


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes (64 hex), read in 1 MiB blocks."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def table_digest(df: Any, columns: Sequence[str]) -> str:
    """The digest of a table (a pandas DataFrame): a stable 16-hex hash of ``columns``, in that
    order, by their names and values in row order (not the index, not the other columns). The one
    digest of every table MLflow records as a data set: the pairs
    (:func:`orchrm.data.tables.pairs_digest`) and the held-out pool
    (:meth:`orchrm.evaluation.pool.CandidatePool.digest`)."""
    import pandas as pd

    h = hashlib.sha256()
    for col in columns:
        h.update(col.encode())
        h.update(pd.util.hash_pandas_object(df[col].reset_index(drop=True), index=False).to_numpy().tobytes())
    return h.hexdigest()[:16]


def source_hash() -> str:
    """A hash of the ``orchrm`` package's source (every ``.py`` and ``.c`` file, with its path) and
    its version (16 hex): collection, pool and benchmark caches are keyed on it, so changed code
    never reuses stale tables."""
    import orchrm

    root = Path(orchrm.__file__).resolve().parent
    h = hashlib.sha256(orchrm.__version__.encode())
    for path in sorted([*root.rglob("*.py"), *root.rglob("*.c")]):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]
