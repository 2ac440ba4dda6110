"""Splits by task: a stable hash of ``task_id`` puts each task in ``train``, ``val`` or ``test``.

The hash depends on the task id alone (no seed, no data), so no task is in two splits, a task keeps
its split when data is added, and every reader of a pair table agrees on it (DESIGN §3, §5).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
import pandas as pd

from orchrm.errors import TraceSchemaError

_SPLIT_HASH = hashlib.blake2b(digest_size=8, person=b"orchrm-split")


def _unit_hash(text: str) -> float:
    """A stable number in [0, 1) from ``text`` (blake2b; same on every machine and run)."""
    h = _SPLIT_HASH.copy()
    h.update(text.encode("utf-8"))
    return int.from_bytes(h.digest(), "big") / 2.0**64


def assign_split(task_ids: Iterable[str], val_fraction: float = 0.1, test_fraction: float = 0.2) -> np.ndarray:
    """Split of each task: ``"test"`` when the task's hash is below ``test_fraction``, ``"val"``
    below ``test_fraction + val_fraction``, else ``"train"``.

    The hash depends on ``task_id`` alone (no seed), so a task lands in the same split in every
    build and data set, and all rows of one task share a split.

    >>> list(assign_split(["t1", "t2", "t1"], 0.0, 0.0))
    ['train', 'train', 'train']
    """
    if val_fraction < 0 or test_fraction < 0 or val_fraction + test_fraction >= 1:
        raise ValueError(
            f"val_fraction={val_fraction} and test_fraction={test_fraction} must be >= 0 and sum below 1"
        )
    ids = pd.Series(list(task_ids) if not isinstance(task_ids, pd.Series) else task_ids, dtype=object)
    if ids.isna().any():
        raise TraceSchemaError(f"task ids are missing in rows {', '.join(map(str, np.flatnonzero(ids.isna())[:5]))}; every pair needs its task's id")
    codes, uniques = pd.factorize(ids.astype(str))
    u = np.fromiter((_unit_hash(t) for t in uniques), dtype=np.float64, count=len(uniques))
    labels = np.where(u < test_fraction, "test", np.where(u < test_fraction + val_fraction, "val", "train"))
    return labels.astype(object)[codes] if len(codes) else np.array([], dtype=object)
