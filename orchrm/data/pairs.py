"""Pairs: turn artifacts into win/loss pairs for a Bradley-Terry reward model (DESIGN §3, §5).

Three sources, all comparing artifacts **of one task only**:

- ``correct-over-incorrect`` (granularity ``plan``): the final artifacts of two different plans.
  ``prompt`` is the task question, ``chosen``/``rejected`` are the two plans' canonical texts (the
  reward model scores a plan *before* any sub-agent runs, as in arXiv 2606.13598), ``margin`` is
  the difference of their final qualities. A plan executed several times on a task counts once,
  with the mean quality of its final artifacts.
- ``intermediate`` (granularity ``node``, the OrchRM signal): two artifacts of the same role (the
  node's ``role`` attribute, else its :func:`functional_role`) at the same depth, from two
  different plans whose *ancestor prefix* is identical, so both answer the same state. ``prompt``
  is the question plus the rendered ancestor nodes and edges (just the question at depth 0); each
  action is the node's own ``<agent .../>`` line, a newline, and the artifact's ``content``. Only a
  plan prefix has to run to get such a pair: no rollout needs finishing. With
  ``intermediate_action="plan_prefix"`` the prompt is the question and each action is the node
  with its ancestors as a plan of their own (:func:`orchrm.model.texts.subplan_text`), the text a
  plan scorer reads; a sub-plan run several times on a task counts once, with its mean quality.
  ``orchrm.execution.collect.collect(mode="branch")`` runs many alternatives per shared prefix for them.
- ``specialized-over-base`` (granularity ``plan``): a plan of the specialized sampler over a plan of
  a question-blind one (base or panel). It is a *prior* (it needs no execution), so its margin is
  :attr:`PairsConfig.prior_margin`; it is kept unless observed final qualities contradict it, that
  is unless the base plan beat the specialized one by at least ``min_margin``.

Rules: an artifact with a null quality never enters a pair; pairs with ``|Δquality| <
min_margin`` (and exact ties) are dropped; a pair whose two texts are equal is dropped; the same
``(prompt, chosen, rejected)`` is kept once (the observed sources win over the prior, in the order
above) and when a pair appears in both directions both are dropped (contradictory evidence); each
task keeps at most ``max_pairs_per_task`` pairs, drawn uniformly (so the kept pairs are not biased
toward long texts) by a seeded hash of each pair's own task and artifact ids, so a task keeps its
pairs when other tasks' artifacts change or are added; the split is a stable hash of ``task_id``
(:func:`assign_split`), so no task is in two splits and a task keeps its split when data is added.
The same artifact table always gives the same pair table.

``collection_tokens`` is what producing the pair's artifacts cost: for a plan-level pair, every
token of both plans' executions on the task; for a node pair, the tokens of the two artifacts and
of their ancestors' artifacts in the same executions (the cost of running the prefixes; for
plan-prefix actions, of every run of the two sub-plans); 0 for a prior pair.

This module is the comparator; the work is split by purpose: :mod:`orchrm.data.pair_engine` (the
artifact table as integer codes: candidate pairs are enumerated with ``np.repeat`` arithmetic,
never with a Python double loop), :mod:`orchrm.data.pair_table` (codes to rows, pair ids),
:mod:`orchrm.data.splits` (:func:`assign_split`), :mod:`orchrm.data.pair_reader` (:func:`read_pairs`, the
one reader of pair files) and :mod:`orchrm.data.pair_files` (:func:`build_pairs_file`, ``orchrm pairs``,
which imports this module, never the other way). Every prompt and action text comes from
:mod:`orchrm.model.texts`, the module serving builds its texts with.

>>> from orchrm.data.pairs import PairwiseComparator  # doctest: +SKIP
>>> pairs = PairwiseComparator(min_margin=0.1, max_pairs_per_task=64, seed=0).build_pairs(artifacts)  # doctest: +SKIP
>>> pairs[["prompt", "chosen", "rejected", "margin"]]  # TRL's preference columns  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from orchrm.config import PairsConfig, with_overrides
from orchrm.data.ingest import task_problems
from orchrm.data.pair_engine import ArtifactCodes, combine_codes, stable_uniform, within_group_pairs
from orchrm.data.pair_reader import read_pairs
from orchrm.data.pair_table import SOURCE_NAMES, SOURCES, empty_pairs, materialise, pair_ids
from orchrm.data.splits import assign_split
from orchrm.data.tables import non_boolean_rows
from orchrm.errors import TraceSchemaError
from orchrm.model.texts import functional_role

__all__ = [
    "MARGIN_SLACK",
    "SOURCES",
    "PairStats",
    "PairwiseComparator",
    "QualityFn",
    "as_artifact_frame",
    "assign_split",
    "build_pairs",
    "empty_pairs",
    "functional_role",
    "pair_ids",
    "read_pairs",
]

logger = logging.getLogger(__name__)

QualityFn = Callable[[Mapping[str, Any]], float | None]

#: columns build_pairs needs (``quality`` unless a quality_fn is given)
REQUIRED_COLUMNS: tuple[str, ...] = ("artifact_id", "task_id", "question", "plan_text", "node_id", "content", "is_final")

#: a quality difference this close to ``min_margin`` counts as reaching it: 0.7 - 0.6 is
#: 0.0999... in floating point, and must be kept at min_margin=0.1 as 0.2 - 0.1 is
MARGIN_SLACK = 1e-9


class _Unset:
    """Marks an argument that was not given (where None is a meaningful value)."""


_UNSET = _Unset()


# input normalisation -------------------------------------------------------------------------
def as_artifact_frame(artifacts: Any) -> pd.DataFrame:
    """An artifact table from a DataFrame, a PlanRun-like object (``.frame()``), a list of row
    dicts, or a list of PlanRun-like objects."""
    if isinstance(artifacts, pd.DataFrame):
        return artifacts
    if hasattr(artifacts, "frame") and callable(artifacts.frame):
        return artifacts.frame()
    if isinstance(artifacts, Iterable) and not isinstance(artifacts, str | bytes | Mapping):
        items = list(artifacts)
        if not items:
            return pd.DataFrame(columns=list(REQUIRED_COLUMNS) + ["quality"])
        if all(isinstance(i, Mapping) for i in items):
            return pd.DataFrame.from_records(items)
        if all(hasattr(i, "frame") for i in items):
            return pd.concat([i.frame() for i in items], ignore_index=True)
    raise TraceSchemaError(
        f"cannot read artifacts from {type(artifacts).__name__}: pass an artifact table (DataFrame), "
        "a PlanRun (or anything with .frame()), or a list of artifact row dicts"
    )


def _as_quality(value: Any) -> float:
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TraceSchemaError(f"quality_fn returned {value!r}; it must return a float in [0, 1] or None") from None


def _quality(df: pd.DataFrame, quality_fn: QualityFn | None) -> np.ndarray:
    if quality_fn is not None:
        q = np.fromiter((_as_quality(quality_fn(row)) for row in df.to_dict("records")), dtype=np.float64, count=len(df))
    else:
        q = pd.to_numeric(df["quality"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isnan(q) & ((q < 0) | (q > 1) | ~np.isfinite(q))
    if bad.any():
        rows = np.flatnonzero(bad)[:5]
        shown = ", ".join(f"{df['artifact_id'].iat[i]!s} ({q[i]:g})" for i in rows)
        origin = "quality_fn returned" if quality_fn is not None else "column 'quality' holds"
        raise TraceSchemaError(
            f"{origin} values outside [0, 1] for {int(bad.sum())} artifact(s), e.g. {shown}; "
            "scale quality to [0, 1] (null when unknowable)"
        )
    return q


def _tokens(df: pd.DataFrame) -> np.ndarray:
    total = np.zeros(len(df), dtype=np.int64)
    for col in ("prompt_tokens", "completion_tokens"):
        if col in df.columns:
            total += pd.to_numeric(df[col], errors="coerce").fillna(0).to_numpy(dtype=np.int64)
    return total


# the comparator --------------------------------------------------------------------------------
@dataclass(frozen=True)
class PairStats:
    """Counts from the last :meth:`PairwiseComparator.build_pairs` call, per source.

    ``candidates``: same-task, same-state pairs of artifacts with known quality (for the prior:
    specialized/base plan pairs); ``decisive``: after dropping ties below ``min_margin``, equal
    texts, contradicted priors and priors already measured as correct-over-incorrect pairs;
    ``unique``: after removing duplicates and contradictory pairs; ``kept``: after the per-task cap.
    """

    artifacts: int = 0
    candidates: Mapping[str, int] = field(default_factory=dict)
    decisive: Mapping[str, int] = field(default_factory=dict)
    unique: Mapping[str, int] = field(default_factory=dict)
    kept: Mapping[str, int] = field(default_factory=dict)


@dataclass
class _Candidates:
    """Candidate pairs as parallel arrays (one entry per pair)."""

    task: list[np.ndarray] = field(default_factory=list)
    source: list[np.ndarray] = field(default_factory=list)
    prompt: list[np.ndarray] = field(default_factory=list)  # prompt text key
    chosen_text: list[np.ndarray] = field(default_factory=list)  # text keys
    rejected_text: list[np.ndarray] = field(default_factory=list)
    chosen: list[np.ndarray] = field(default_factory=list)  # artifact row of the chosen side
    rejected: list[np.ndarray] = field(default_factory=list)
    margin: list[np.ndarray] = field(default_factory=list)
    tokens: list[np.ndarray] = field(default_factory=list)
    #: source -> same-task, same-state pairs looked at (before the margin and prior rules)
    considered: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCE_NAMES, 0))

    def add(self, source: int, **arrays: np.ndarray) -> None:
        n = len(arrays["task"])
        self.source.append(np.full(n, source, dtype=np.int8))
        for name, values in arrays.items():
            getattr(self, name).append(values)

    def concat(self) -> dict[str, np.ndarray]:
        names = ("task", "source", "prompt", "chosen_text", "rejected_text", "chosen", "rejected", "margin", "tokens")
        dtypes = (np.int64, np.int8, np.int64, np.int64, np.int64, np.int64, np.int64, np.float64, np.int64)
        return {
            n: np.concatenate(getattr(self, n)).astype(d) if getattr(self, n) else np.array([], dtype=d)
            for n, d in zip(names, dtypes, strict=True)
        }


class PairwiseComparator:
    """Builds the pair table (DESIGN §3) from an artifact table; see the module docstring for the
    rules.

    ``quality_fn``: any callable ``artifact row (dict) -> float in [0, 1] or None``; when given it
    replaces the ``quality`` column (None / NaN = unknown, never paired). The keyword arguments
    are the fields of :class:`~orchrm.config.PairsConfig` (``max_pairs_per_task=None``: no cap);
    those not given come from ``config`` (default: ``PairsConfig()``). A bad value raises
    :class:`~orchrm.errors.ConfigError` naming the field.

    >>> comparator = PairwiseComparator(min_margin=0.2, max_pairs_per_task=16, seed=1)
    >>> comparator.config.min_margin
    0.2
    """

    def __init__(
        self,
        quality_fn: QualityFn | None = None,
        *,
        granularity: str | Sequence[str] | None = None,
        min_margin: float | None = None,
        max_pairs_per_task: int | None | _Unset = _UNSET,
        seed: int | None = None,
        sources: Sequence[str] | None = None,
        prior_margin: float | None = None,
        val_fraction: float | None = None,
        test_fraction: float | None = None,
        config: PairsConfig | None = None,
    ) -> None:
        base = config or PairsConfig()
        if isinstance(granularity, str):
            granularity = (granularity,)
        update = {
            "granularity": tuple(granularity) if granularity is not None else None,
            "sources": tuple(sources) if sources is not None else None,
            "min_margin": min_margin,
            "seed": seed,
            "prior_margin": prior_margin,
            "val_fraction": val_fraction,
            "test_fraction": test_fraction,
        }
        changes = {k: v for k, v in update.items() if v is not None}
        if not isinstance(max_pairs_per_task, _Unset):  # None is a value here: no cap
            changes["max_pairs_per_task"] = max_pairs_per_task
        self.config = with_overrides(base, changes, origin="PairwiseComparator(...)")
        self.quality_fn = quality_fn
        self.last_stats = PairStats()

    def __repr__(self) -> str:
        c = self.config
        return (
            f"PairwiseComparator(granularity={c.granularity}, sources={c.sources}, min_margin={c.min_margin}, "
            f"max_pairs_per_task={c.max_pairs_per_task}, seed={c.seed})"
        )

    def _enabled(self, source: str) -> bool:
        return source in self.config.sources and SOURCES[source] in self.config.granularity

    # ------------------------------------------------------------------------------------------
    def build_pairs(self, artifacts: Any) -> pd.DataFrame:
        """The pair table (columns :data:`orchrm.data.tables.PAIR_COLUMNS`, one row per pair, sorted by
        task) from an artifact table, a PlanRun-like object or a list of artifact dicts."""
        df = as_artifact_frame(artifacts)
        need = list(REQUIRED_COLUMNS) + ([] if self.quality_fn is not None else ["quality"])
        missing = [c for c in need if c not in df.columns]
        if missing:
            raise TraceSchemaError(
                f"artifact table lacks column(s) {', '.join(missing)} needed for pairs; "
                "normalise your traces with `orchrm ingest` (the artifact columns: orchrm.data.ingest.ARTIFACT_SCHEMA)"
            )
        df = df.reset_index(drop=True)
        n = len(df)
        if n == 0:
            self.last_stats = PairStats()
            return empty_pairs()
        nulls = [c for c in REQUIRED_COLUMNS if df[c].isna().any()]
        if nulls:
            shown = "; ".join(f"'{c}' in rows {', '.join(map(str, np.flatnonzero(df[c].isna())[:5]))}" for c in nulls)
            raise TraceSchemaError(f"artifact table has nulls where pairs need values: {shown}")
        problems = task_problems(df)
        if problems:
            raise TraceSchemaError("artifact table rejected, no pairs built:\n  " + "\n  ".join(problems))
        not_bool = non_boolean_rows(df["is_final"])
        if len(not_bool):  # a text "false" would read as True
            raise TraceSchemaError(
                f"column 'is_final' must be boolean; rows {', '.join(map(str, not_bool[:5]))} hold "
                f"{df.at[not_bool[0], 'is_final']!r}"
            )
        quality = _quality(df, self.quality_fn)
        tokens = _tokens(df)
        art = ArtifactCodes.build(df, quality, tokens)
        cands = _Candidates()
        if self._enabled("correct-over-incorrect") or self._enabled("specialized-over-base"):
            self._plan_pairs(art, cands)
        if self._enabled("intermediate"):
            if self.config.intermediate_action == "plan_prefix":
                self._prefix_plan_pairs(art, cands)
            else:
                self._node_pairs(art, cands)
        c = cands.concat()
        stats = {"artifacts": n, "candidates": dict(cands.considered)}
        kept, stats = self._select(art, c, stats)
        self.last_stats = PairStats(**stats)
        out = materialise(art, kept, self.config)
        logger.info("built %d pairs from %d artifacts (%s)", len(out), n, dict(self.last_stats.kept))
        return out

    # plan-level ---------------------------------------------------------------------------------
    def _plan_pairs(self, art: ArtifactCodes, cands: _Candidates) -> None:
        cfg = self.config
        g = art.plan_groups()
        left, right = within_group_pairs(g.task)
        if not len(left):
            return
        ql, qr = g.quality[left], g.quality[right]
        if self._enabled("correct-over-incorrect"):
            d = ql - qr
            cands.considered["correct-over-incorrect"] += int((~np.isnan(d)).sum())
            keep = ~np.isnan(d) & (np.abs(d) >= cfg.min_margin - MARGIN_SLACK) & (d != 0)
            win = d[keep] > 0
            a, b = left[keep], right[keep]
            cw, cl = np.where(win, a, b), np.where(win, b, a)
            cands.add(
                0,
                task=g.task[a],
                prompt=g.prompt[a],
                chosen_text=g.text[cw],
                rejected_text=g.text[cl],
                chosen=g.artifact[cw],
                rejected=g.artifact[cl],
                margin=np.abs(d[keep]),
                tokens=g.tokens[cw] + g.tokens[cl],
            )
        if self._enabled("specialized-over-base"):
            l_over_r = g.specialized[left] & g.base[right]
            r_over_l = g.specialized[right] & g.base[left]
            one_way = l_over_r ^ r_over_l  # a plan written by both samplers gives no direction
            cands.considered["specialized-over-base"] += int(one_way.sum())
            cw = np.where(l_over_r, left, right)[one_way]
            cl = np.where(l_over_r, right, left)[one_way]
            q_spec, q_base = g.quality[cw], g.quality[cl]
            observed = ~np.isnan(q_spec) & ~np.isnan(q_base)
            contradicted = observed & (q_base - q_spec >= max(cfg.min_margin - MARGIN_SLACK, 1e-12))
            # the same pair measured as correct-over-incorrect would win the dedup anyway
            confirmed = observed & (q_spec - q_base >= max(cfg.min_margin - MARGIN_SLACK, 1e-12)) & self._enabled("correct-over-incorrect")
            keep = ~contradicted & ~confirmed
            cw, cl = cw[keep], cl[keep]
            cands.add(
                2,
                task=g.task[cw],
                prompt=g.prompt[cw],
                chosen_text=g.text[cw],
                rejected_text=g.text[cl],
                chosen=g.artifact[cw],
                rejected=g.artifact[cl],
                margin=np.full(len(cw), cfg.prior_margin),
                tokens=np.zeros(len(cw), dtype=np.int64),
            )

    # node-level ---------------------------------------------------------------------------------
    def _node_pairs(self, art: ArtifactCodes, cands: _Candidates) -> None:
        cfg = self.config
        rows = np.flatnonzero(~np.isnan(art.quality) & (art.info >= 0))
        if len(rows) < 2:
            return
        state = art.info_state[art.info[rows]]
        order = np.lexsort((rows, state, art.task[rows]))
        rows = rows[order]
        group = combine_codes(art.task[rows], art.info_state[art.info[rows]])
        left, right = within_group_pairs(group)
        li, ri = rows[left], rows[right]
        other_plan = art.plan[li] != art.plan[ri]
        cands.considered["intermediate"] += int(other_plan.sum())
        d = art.quality[li] - art.quality[ri]
        keep = other_plan & (np.abs(d) >= cfg.min_margin - MARGIN_SLACK) & (d != 0)
        li, ri, d = li[keep], ri[keep], d[keep]
        win = d > 0
        cw, cl = np.where(win, li, ri), np.where(win, ri, li)
        prefix_tokens = art.prefix_tokens()
        used = np.zeros(len(art.task), dtype=bool)
        used[cw] = True
        used[cl] = True
        action = art.action_keys(np.flatnonzero(used))
        cands.add(
            1,
            task=art.task[cw],
            prompt=art.node_prompt_key[cw],
            chosen_text=action[cw],
            rejected_text=action[cl],
            chosen=cw,
            rejected=cl,
            margin=np.abs(d),
            tokens=prefix_tokens[cw] + prefix_tokens[cl],
        )

    def _prefix_plan_pairs(self, art: ArtifactCodes, cands: _Candidates) -> None:
        """Intermediate pairs whose actions are sub-plans (``intermediate_action="plan_prefix"``):
        the same states as :meth:`_node_pairs`, one entry per distinct sub-plan of a state."""
        cfg = self.config
        g = art.prefix_groups()
        left, right = within_group_pairs(combine_codes(g.task, g.state))
        if not len(left):
            return
        cands.considered["intermediate"] += len(left)
        d = g.quality[left] - g.quality[right]
        keep = (np.abs(d) >= cfg.min_margin - MARGIN_SLACK) & (d != 0)
        a, b, d = left[keep], right[keep], d[keep]
        cw, cl = np.where(d > 0, a, b), np.where(d > 0, b, a)
        cands.add(
            1,
            task=g.task[cw],
            prompt=art.plan_prompt_key[g.task[cw]],
            chosen_text=g.text[cw],
            rejected_text=g.text[cl],
            chosen=g.artifact[cw],
            rejected=g.artifact[cl],
            margin=np.abs(d),
            tokens=g.tokens[cw] + g.tokens[cl],
        )

    # selection -----------------------------------------------------------------------------------
    def _select(self, art: ArtifactCodes, c: dict[str, np.ndarray], stats: dict) -> tuple[dict[str, np.ndarray], dict]:
        cfg = self.config
        idx = np.flatnonzero(c["chosen_text"] != c["rejected_text"])  # equal texts: no comparison
        source = c["source"][idx]
        stats["decisive"] = _count(source)
        # each candidate's random number is a hash of its own identity (task, source, the two
        # artifacts) and the seed, so one task's artifacts changing never reshuffles another's pairs
        task_hash = pd.util.hash_array(art.task_ids.astype(str).astype(object))
        artifact_hash = pd.util.hash_array(art.df["artifact_id"].astype(str).to_numpy(dtype=object))
        rand = stable_uniform(
            cfg.seed, task_hash[c["task"][idx]], source, artifact_hash[c["chosen"][idx]], artifact_hash[c["rejected"][idx]]
        )
        # duplicates and contradictions both share an unordered (prompt, text, text) key; they are
        # rare, so one hash pass finds them and only those rows are resolved: a pair seen in both
        # directions is dropped (contradictory evidence), otherwise one copy is kept, observed
        # sources first, then at random
        prompt, chosen, rejected = c["prompt"][idx], c["chosen_text"][idx], c["rejected_text"][idx]
        lo, hi = np.minimum(chosen, rejected), np.maximum(chosen, rejected)
        unordered = _key3(prompt, lo, hi)
        clash = pd.Series(unordered).duplicated(keep=False).to_numpy()
        keep = ~clash
        if clash.any():
            rows = np.flatnonzero(clash)
            groups = pd.DataFrame({"key": unordered[rows], "up": chosen[rows] == lo[rows], "rank": source[rows] + rand[rows]})
            two_way = groups.groupby("key")["up"].transform("nunique").to_numpy() > 1
            best = groups["rank"].to_numpy() == groups.groupby("key")["rank"].transform("min").to_numpy()
            keep[rows[~two_way & best]] = True
        sel = np.flatnonzero(keep)
        stats["unique"] = _count(source[sel])
        # per-task cap: a uniform draw, independent of text length
        cap = cfg.max_pairs_per_task
        if cap is not None and len(sel):
            task = c["task"][idx[sel]]
            order = np.argsort(task + rand[sel], kind="stable")
            task = task[order]
            start = np.flatnonzero(np.r_[True, task[1:] != task[:-1]])
            rank = np.arange(len(task)) - np.repeat(start, np.diff(np.r_[start, len(task)]))
            sel = sel[order[rank < cap]]
        final = idx[sel]
        stats["kept"] = _count(c["source"][final])
        return {k: v[final] for k, v in c.items()}, stats


def _key3(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """One int64 per row, equal iff the three non-negative codes are equal."""
    wb, wc = int(b.max(initial=0)) + 1, int(c.max(initial=0)) + 1
    if (int(a.max(initial=0)) + 1) * wb * wc < 2**62:
        return (a * wb + b) * wc + c
    return combine_codes(a, b, c)


def _count(source: np.ndarray) -> dict[str, int]:
    counts = np.bincount(source.astype(np.int64), minlength=len(SOURCE_NAMES)) if len(source) else np.zeros(3, int)
    return {name: int(counts[i]) for i, name in enumerate(SOURCE_NAMES)}


# module-level verb ------------------------------------------------------------------------------
def build_pairs(artifacts: Any, config: PairsConfig | None = None, quality_fn: QualityFn | None = None) -> pd.DataFrame:
    """The pair table of ``artifacts`` under ``config`` (defaults: :class:`PairsConfig`)."""
    return PairwiseComparator(quality_fn, config=config).build_pairs(artifacts)
