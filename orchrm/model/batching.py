"""Pairs for training: check a pair table, split it, and batch it by task.

Pairs of one task share their texts: 8 plans give up to 28 pairs but only 8 distinct
``(prompt, action)`` *candidates* (DESIGN §6). :class:`PairIndex` stores pairs as indices into the
distinct prompts, actions and candidates; :func:`task_batches` groups pairs of a task into the same
step, so a step encodes each distinct candidate once and gathers the rewards of every pair that
uses it. The loss is exactly the per-pair loss, with several times fewer encoder passes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd

from orchrm.data.pair_reader import PairSource, read_pairs
from orchrm.errors import TraceSchemaError

#: the values of a pair table's ``split`` column (DESIGN §3)
SPLITS: tuple[str, ...] = ("train", "val", "test")


def training_pairs(pairs: PairSource) -> pd.DataFrame:
    """The pairs training reads: :func:`orchrm.data.pair_reader.read_pairs` (the reader every command
    uses, so tasks, splits and margins are the ones ``orchrm validate`` checked), then refused
    with a :class:`TraceSchemaError` naming the rows where training could not use them: zero
    pairs, blank action texts, a margin that is not a finite number >= 0 (within float32), a
    split that is not one of :data:`SPLITS`, ``chosen == rejected``.
    """
    df = read_pairs(pairs)
    if len(df) == 0:
        raise TraceSchemaError(
            "no pairs to train on: the pair table is empty (collect more plans per task, or lower "
            "min_margin so fewer ties are dropped)"
        )
    for col in ("chosen", "rejected"):
        bad = df.index[~df[col].map(lambda v: bool(v.strip()))]
        if len(bad):
            raise TraceSchemaError(f"column {col!r} must hold non-empty text; rows {list(bad[:5])} do not")
    margin = df["margin"].to_numpy(dtype=float, na_value=np.nan)
    # training computes in float32: a margin beyond its range would be infinite there
    bad = df.index[~np.isfinite(margin) | (margin < 0) | (margin > np.finfo(np.float32).max)]
    if len(bad):
        raise TraceSchemaError(f"column 'margin' must be a finite number >= 0 (and within float32); rows {list(bad[:5])} are not")
    bad = df.index[~df["split"].isin(SPLITS)]
    if len(bad):
        raise TraceSchemaError(
            f"column 'split' must be one of {list(SPLITS)}; rows {list(bad[:5])} hold "
            f"{sorted(map(repr, df.loc[bad[:5], 'split']))} (drop the column to split by task)"
        )
    same = df.index[df["chosen"] == df["rejected"]]
    if len(same):
        raise TraceSchemaError(f"rows {list(same[:5])} have chosen == rejected; a pair needs two different actions")
    return df.assign(
        split=df["split"].astype(str), domain=df["domain"].astype(str), granularity=df["granularity"].astype(str)
    )


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
            logging.getLogger("orchrm.model.trainer").warning(
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
