"""Pairs for training: read and check a pair table, split it, and batch it by task.

Pairs of one task share their texts: 8 plans give up to 28 pairs but only 8 distinct
``(prompt, action)`` *candidates* (DESIGN §6). :class:`PairIndex` stores pairs as indices into the
distinct prompts, actions and candidates; :func:`task_batches` groups pairs of a task into the same
step, so a step encodes each distinct candidate once and gathers the rewards of every pair that
uses it. The loss is exactly the per-pair loss, with several times fewer encoder passes.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from orchrm.errors import TraceSchemaError

#: columns a pair table must have (``task_id`` may be missing: it is then derived from the prompt)
REQUIRED_COLUMNS: tuple[str, ...] = ("prompt", "chosen", "rejected")
#: the values of a pair table's ``split`` column (DESIGN §3)
SPLITS: tuple[str, ...] = ("train", "val", "test")


def pair_frame(pairs: pd.DataFrame | Sequence[Mapping] | str | os.PathLike) -> pd.DataFrame:
    """A checked copy of a pair table: a DataFrame, a list of row dicts, or a Parquet/JSONL path.

    The OrchRM data set's own format (``input``, ``chosen``, ``rejected``, ``source``) is accepted.
    Missing ``task_id`` is derived from the prompt, missing ``margin`` is 0, missing ``split`` is
    ``train``, missing ``domain``/``granularity`` are ``unknown``/``plan``. Raises
    :class:`TraceSchemaError` naming the problem (also for zero pairs).
    """
    if isinstance(pairs, str | os.PathLike):
        from orchrm.traces import read_table

        df = read_table(Path(pairs))
    elif isinstance(pairs, pd.DataFrame):
        df = pairs.copy()
    elif isinstance(pairs, Iterable) and not isinstance(pairs, bytes | Mapping):
        df = pd.DataFrame(list(pairs))
    else:
        raise TraceSchemaError(
            f"pairs must be a pair table (a DataFrame, a list of row dicts, or a .parquet/.jsonl path), "
            f"not {type(pairs).__name__}"
        )
    if "prompt" not in df.columns and "input" in df.columns:
        df = df.rename(columns={"input": "prompt"})
    if len(df) == 0:
        raise TraceSchemaError(
            "no pairs to train on: the pair table is empty (collect more plans per task, or lower "
            "min_margin so fewer ties are dropped)"
        )
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise TraceSchemaError(
            f"pair table lacks column(s) {missing}; it needs prompt, chosen, rejected (make one with `orchrm pairs`, "
            "or bring TRL-style preference rows)"
        )
    for col in ("chosen", "rejected"):
        bad = df.index[~df[col].map(lambda v: isinstance(v, str) and bool(v.strip()))]
        if len(bad):
            raise TraceSchemaError(f"column {col!r} must hold non-empty text; rows {list(bad[:5])} do not")
    bad = df.index[~df["prompt"].map(lambda v: isinstance(v, str))]
    if len(bad):
        raise TraceSchemaError(f"column 'prompt' must hold text; rows {list(bad[:5])} do not")
    # a pair without a task id belongs to its prompt's task (pandas keeps missing values through astype(str))
    derived = df["prompt"].map(lambda p: hashlib.sha1(p.encode()).hexdigest()[:12])
    df["task_id"] = (df["task_id"].where(df["task_id"].notna(), derived) if "task_id" in df.columns else derived).astype(str)
    if "margin" not in df.columns:
        df["margin"] = 0.0
    margin = pd.to_numeric(df["margin"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    # training computes in float32: a margin beyond its range would be infinite there
    bad = df.index[~np.isfinite(margin) | (margin < 0) | (margin > np.finfo(np.float32).max)]
    if len(bad):
        raise TraceSchemaError(f"column 'margin' must be a finite number >= 0 (and within float32); rows {list(bad[:5])} are not")
    df["margin"] = margin
    if "split" in df.columns:
        bad = df.index[~df["split"].isin(SPLITS)]
        if len(bad):
            raise TraceSchemaError(
                f"column 'split' must be one of {list(SPLITS)}; rows {list(bad[:5])} hold "
                f"{sorted(map(repr, df.loc[bad[:5], 'split']))} (drop the column to train on every row)"
            )
        df["split"] = df["split"].astype(str)
    else:
        df["split"] = "train"
    for col, default in (("domain", "unknown"), ("granularity", "plan")):
        df[col] = df[col].fillna(default).astype(str) if col in df.columns else default
    same = df.index[df["chosen"] == df["rejected"]]
    if len(same):
        raise TraceSchemaError(f"rows {list(same[:5])} have chosen == rejected; a pair needs two different actions")
    return df.reset_index(drop=True)


def split_pairs(df: pd.DataFrame, *, val_fraction: float, seed: int, warn: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, val) frames: ``split == "train"`` and ``split == "val"`` rows.

    Without ``val`` rows, a seeded ``val_fraction`` of the training *tasks* is held out (at least
    one task when there are two or more, none when there is one). ``test`` rows are never used,
    except when no row is ``train``: a few pairs of one or two tasks (DESIGN §12) may all hash to
    ``val`` or ``test``, and then every row counts as a training row, with a warning unless
    ``warn`` is False (the Trainer's other ranks under torchrun) and a ``val_fraction`` of its
    tasks held out as above.
    """
    train = df[df["split"] == "train"]
    val = df[df["split"] == "val"]
    if len(train) == 0:
        if warn:
            logging.getLogger("orchrm.train").warning(
                "no pairs with split == 'train' (splits present: %s); all %d pairs count as training pairs%s",
                sorted(df["split"].unique()), len(df),
                f", less the val_fraction={val_fraction} of their tasks held out" if val_fraction > 0 else "",
            )
        train, val = df, df.iloc[:0]
    if len(val) == 0 and val_fraction > 0:
        tasks = np.array(sorted(train["task_id"].unique()))
        if len(tasks) >= 2:
            n_val = min(len(tasks) - 1, max(1, round(val_fraction * len(tasks))))
            held = set(np.random.default_rng(seed).permutation(tasks)[:n_val])
            is_val = train["task_id"].isin(held)
            train, val = train[~is_val], train[is_val]
    return train.reset_index(drop=True), val.reset_index(drop=True)


def data_hash(df: pd.DataFrame) -> str:
    """Stable 16-hex hash of the columns training reads (for manifests and resume checks)."""
    cols = ["task_id", "prompt", "chosen", "rejected", "margin", "split"]
    h = hashlib.sha256()
    for col in cols:
        h.update(col.encode())
        h.update(pd.util.hash_pandas_object(df[col].reset_index(drop=True), index=False).to_numpy().tobytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class PairIndex:
    """Pairs as indices. Texts: ``prompts`` (distinct prompts), ``actions`` (distinct action texts).

    Candidates c = 0..C-1 are distinct (prompt, action) combinations: ``cand_prompt[c]``,
    ``cand_action[c]``. Pairs i = 0..N-1: ``chosen[i]``, ``rejected[i]`` (candidate ids),
    ``margin[i]`` (float32), ``task[i]`` (task code), ``domain[i]``, ``granularity[i]`` (str).
    """

    prompts: tuple[str, ...]
    actions: tuple[str, ...]
    cand_prompt: np.ndarray
    cand_action: np.ndarray
    chosen: np.ndarray
    rejected: np.ndarray
    margin: np.ndarray
    task: np.ndarray
    domain: np.ndarray
    granularity: np.ndarray

    @classmethod
    def build(cls, df: pd.DataFrame) -> PairIndex:
        n = len(df)
        prompt_codes, prompts = pd.factorize(pd.concat([df["prompt"], df["prompt"]], ignore_index=True))
        action_codes, actions = pd.factorize(pd.concat([df["chosen"], df["rejected"]], ignore_index=True))
        cand_key = prompt_codes.astype(np.int64) * max(len(actions), 1) + action_codes
        cand_codes, cand_keys = pd.factorize(cand_key)
        cand_keys = np.asarray(cand_keys, dtype=np.int64)
        return cls(
            prompts=tuple(prompts),
            actions=tuple(actions),
            cand_prompt=cand_keys // max(len(actions), 1),
            cand_action=cand_keys % max(len(actions), 1),
            chosen=cand_codes[:n].astype(np.int64),
            rejected=cand_codes[n:].astype(np.int64),
            margin=df["margin"].to_numpy(dtype=np.float32),
            task=pd.factorize(df["task_id"])[0].astype(np.int64),
            domain=df["domain"].to_numpy(dtype=object),
            granularity=df["granularity"].to_numpy(dtype=object),
        )

    def __len__(self) -> int:
        return len(self.chosen)

    @property
    def num_candidates(self) -> int:
        return len(self.cand_prompt)

    @property
    def num_tasks(self) -> int:
        return int(self.task.max()) + 1 if len(self.task) else 0


def task_batches(index: PairIndex, batch_size: int, *, seed: int, epoch: int, shuffle: bool = True) -> list[np.ndarray]:
    """Pair ids in steps of ``batch_size`` pairs, each task's pairs kept next to each other.

    With ``shuffle`` the task order and the pair order inside a task are drawn from
    ``(seed, epoch)`` alone, so any epoch's batches can be rebuilt (exact resume).
    """
    n = len(index)
    if shuffle:
        rng = np.random.default_rng([seed, epoch])
        perm = rng.permutation(n)
        task_rank = rng.permutation(index.num_tasks)[index.task[perm]]
        order = perm[np.argsort(task_rank, kind="stable")]
    else:
        order = np.argsort(index.task, kind="stable")
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


@dataclass(frozen=True)
class StepInputs:
    """One step's work: distinct candidates to encode and where each pair's rewards come from.

    ``candidates`` (K,) candidate ids; ``prompts`` (P,) prompt ids; ``cand_prompt_local`` (K,)
    index into ``prompts``; ``chosen_pos``/``rejected_pos`` (B,) index into ``candidates``;
    ``margin`` (B,).
    """

    candidates: np.ndarray
    prompts: np.ndarray
    cand_prompt_local: np.ndarray
    chosen_pos: np.ndarray
    rejected_pos: np.ndarray
    margin: np.ndarray


def step_inputs(index: PairIndex, pair_ids: np.ndarray) -> StepInputs:
    """Deduplicate the candidates and prompts of the pairs ``pair_ids``."""
    both = np.concatenate([index.chosen[pair_ids], index.rejected[pair_ids]])
    candidates, inverse = np.unique(both, return_inverse=True)
    prompts, prompt_local = np.unique(index.cand_prompt[candidates], return_inverse=True)
    b = len(pair_ids)
    return StepInputs(
        candidates=candidates,
        prompts=prompts,
        cand_prompt_local=prompt_local.reshape(-1),
        chosen_pos=inverse[:b].reshape(-1),
        rejected_pos=inverse[b:].reshape(-1),
        margin=index.margin[pair_ids],
    )
