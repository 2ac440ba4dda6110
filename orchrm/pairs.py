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
  plan prefix has to run to get such a pair: no rollout needs finishing.
- ``specialized-over-base`` (granularity ``plan``): a plan of the specialized sampler over a plan of
  the base sampler. It is a *prior* (it needs no execution), so its margin is
  :attr:`PairsConfig.prior_margin`; it is kept unless observed final qualities contradict it, that
  is unless the base plan beat the specialized one by at least ``min_margin``.

Rules: an artifact with a null quality never enters a pair; pairs with ``|Δquality| <
min_margin`` (and exact ties) are dropped; a pair whose two texts are equal is dropped; the same
``(prompt, chosen, rejected)`` is kept once (the observed sources win over the prior, in the order
above) and when a pair appears in both directions both are dropped (contradictory evidence); each
task keeps at most ``max_pairs_per_task`` pairs, drawn uniformly with a seeded generator (so the
kept pairs are not biased toward long texts); the split is a stable hash of ``task_id``
(:func:`assign_split`), so no task is in two splits and a task keeps its split when data is added.
The same artifact table always gives the same pair table.

``collection_tokens`` is what producing the pair's artifacts cost: for a plan-level pair, every
token of both plans' executions on the task; for a node pair, the tokens of the two artifacts and
of their ancestors' artifacts in the same executions (the cost of running the prefixes); 0 for a
prior pair.

Everything runs on integer codes with numpy: candidate pairs inside each (task, state) group are
enumerated with ``np.repeat`` arithmetic, never with a Python double loop.

>>> from orchrm.pairs import PairwiseComparator  # doctest: +SKIP
>>> pairs = PairwiseComparator(min_margin=0.1, max_pairs_per_task=64, seed=0).build_pairs(artifacts)  # doctest: +SKIP
>>> pairs[["prompt", "chosen", "rejected", "margin"]]  # TRL's preference columns  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from orchrm.config import PairsConfig, _format_errors
from orchrm.errors import ConfigError, PlanError, TraceSchemaError
from orchrm.plans import Plan
from orchrm.traces import (
    PAIR_COLUMNS,
    check_output_table,
    non_boolean_rows,
    read_table,
    task_problems,
    write_table,
)

logger = logging.getLogger(__name__)

QualityFn = Callable[[Mapping[str, Any]], float | None]

#: source -> granularity
SOURCES: Mapping[str, str] = {
    "correct-over-incorrect": "plan",
    "intermediate": "node",
    "specialized-over-base": "plan",
}
_SOURCE_NAMES: tuple[str, ...] = tuple(SOURCES)  # index = source code = dedup priority

#: columns build_pairs needs (``quality`` unless a quality_fn is given)
REQUIRED_COLUMNS: tuple[str, ...] = ("artifact_id", "task_id", "question", "plan_text", "node_id", "content", "is_final")

#: default margin of an external pair without one: a binary correct-over-incorrect judgement
EXTERNAL_MARGIN = 1.0
#: a quality difference this close to ``min_margin`` counts as reaching it: 0.7 - 0.6 is
#: 0.0999... in floating point, and must be kept at min_margin=0.1 as 0.2 - 0.1 is
MARGIN_SLACK = 1e-9


class _Unset:
    """Marks an argument that was not given (where None is a meaningful value)."""


_UNSET = _Unset()


# splits ------------------------------------------------------------------------------------
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


def _column(df: pd.DataFrame, name: str, default: Any) -> pd.Series:
    if name in df.columns:
        return df[name]
    return pd.Series([default] * len(df), index=df.index, dtype=object)


def _tokens(df: pd.DataFrame) -> np.ndarray:
    total = np.zeros(len(df), dtype=np.int64)
    for col in ("prompt_tokens", "completion_tokens"):
        if col in df.columns:
            total += pd.to_numeric(df[col], errors="coerce").fillna(0).to_numpy(dtype=np.int64)
    return total


def _combine(*codes: np.ndarray) -> np.ndarray:
    """Dense codes of the tuples of integer codes (-1 allowed), without int64 overflow."""
    out = codes[0].astype(np.int64)
    for c in codes[1:]:
        c = c.astype(np.int64)
        key = (out + 1) * (int(c.max(initial=-1)) + 2) + (c + 1)
        out = pd.factorize(key)[0].astype(np.int64)
    return out


def _within_group_pairs(group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All index pairs ``(i, j)``, ``i < j``, of rows sharing a value of ``group``.

    ``group`` must be sorted (rows of a group contiguous). Vectorised: each row ``p`` of a group
    ending at ``e`` pairs with ``p+1 .. e-1``.
    """
    n = len(group)
    if n < 2:
        empty = np.array([], dtype=np.int64)
        return empty, empty
    change = np.flatnonzero(group[1:] != group[:-1]) + 1
    ends = np.append(change, n)
    sizes = np.diff(np.concatenate(([0], ends)))
    end_of_row = np.repeat(ends, sizes)
    counts = end_of_row - np.arange(n) - 1
    total = int(counts.sum())
    left = np.repeat(np.arange(n, dtype=np.int64), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    right = left + 1 + (np.arange(total, dtype=np.int64) - first)
    return left, right


# plan structure ------------------------------------------------------------------------------
def functional_role(agent: str) -> str:
    """The role of a node without a ``role`` attribute: ``retrieval`` (WebSearch, whose quality is
    recall of the gold documents) or ``reasoning`` (every agent that writes an answer). Two
    reasoning nodes at the same state answer the same question, whatever their agent type, so
    they are comparable: a depth-0 SelfConsistency against a depth-0 CoT of another plan."""
    return "retrieval" if agent == "WebSearch" else "reasoning"


@dataclass(frozen=True)
class _NodeInfo:
    """What the pairs need of one node of one plan (parsed once per distinct plan text)."""

    node_id: str
    agent: str
    role: str
    depth: int
    line: str  # the node's own canonical <agent .../> line
    prefix: str  # rendered ancestors (nodes then edges among them); "" at depth 0
    ancestors: tuple[str, ...]


def _plan_nodes(text: str) -> tuple[_NodeInfo, ...] | None:
    """Node infos of a plan text, or None when the text is not a parseable plan (ingested traces
    may carry a free-form plan description: those artifacts only enter plan-level pairs)."""
    try:
        plan = Plan.parse(text)
    except PlanError:
        return None
    depth = plan.depths()
    ancestors: dict[str, set[str]] = {}
    for n in plan.nodes:  # topological order
        acc: set[str] = set()
        for p in plan.parents(n.id):
            acc |= ancestors[p] | {p}
        ancestors[n.id] = acc
    out = []
    for n in plan.nodes:
        anc = ancestors[n.id]
        lines = [m.render() for m in plan.nodes if m.id in anc]
        lines += [e.render() for e in plan.edges if e.source in anc and e.target in anc]
        out.append(
            _NodeInfo(
                node_id=n.id,
                agent=n.agent,
                role=n.role or functional_role(n.agent),
                depth=depth[n.id],
                line=n.render(),
                prefix="\n".join(lines),
                ancestors=tuple(m.id for m in plan.nodes if m.id in anc),
            )
        )
    return tuple(out)


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
    considered: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_SOURCE_NAMES, 0))

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
        data = base.model_dump() | {k: v for k, v in update.items() if v is not None}
        if not isinstance(max_pairs_per_task, _Unset):  # None is a value here: no cap
            data["max_pairs_per_task"] = max_pairs_per_task
        try:
            self.config = PairsConfig.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(_format_errors(exc, "PairwiseComparator(...)")) from None
        self.quality_fn = quality_fn
        self.last_stats = PairStats()

    @classmethod
    def from_config(cls, config: PairsConfig, quality_fn: QualityFn | None = None) -> PairwiseComparator:
        return cls(quality_fn, config=config)

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
        """The pair table (columns :data:`orchrm.traces.PAIR_COLUMNS`, one row per pair, sorted by
        task) from an artifact table, a PlanRun-like object or a list of artifact dicts."""
        df = as_artifact_frame(artifacts)
        need = list(REQUIRED_COLUMNS) + ([] if self.quality_fn is not None else ["quality"])
        missing = [c for c in need if c not in df.columns]
        if missing:
            raise TraceSchemaError(
                f"artifact table lacks column(s) {', '.join(missing)} needed for pairs; "
                "normalise your traces with `orchrm ingest` (the artifact columns: orchrm.traces.ARTIFACT_SCHEMA)"
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
        art = _Artifacts.build(df, quality, tokens)
        cands = _Candidates()
        if self._enabled("correct-over-incorrect") or self._enabled("specialized-over-base"):
            self._plan_pairs(art, cands)
        if self._enabled("intermediate"):
            self._node_pairs(art, cands)
        c = cands.concat()
        stats = {"artifacts": n, "candidates": dict(cands.considered)}
        kept, stats = self._select(c, stats)
        self.last_stats = PairStats(**stats)
        out = _materialise(art, kept, self.config)
        logger.info("built %d pairs from %d artifacts (%s)", len(out), n, dict(self.last_stats.kept))
        return out

    # plan-level ---------------------------------------------------------------------------------
    def _plan_pairs(self, art: _Artifacts, cands: _Candidates) -> None:
        cfg = self.config
        g = art.plan_groups()
        left, right = _within_group_pairs(g.task)
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
    def _node_pairs(self, art: _Artifacts, cands: _Candidates) -> None:
        cfg = self.config
        rows = np.flatnonzero(~np.isnan(art.quality) & (art.info >= 0))
        if len(rows) < 2:
            return
        state = art.info_state[art.info[rows]]
        order = np.lexsort((rows, state, art.task[rows]))
        rows = rows[order]
        group = _combine(art.task[rows], art.info_state[art.info[rows]])
        left, right = _within_group_pairs(group)
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

    # selection -----------------------------------------------------------------------------------
    def _select(self, c: dict[str, np.ndarray], stats: dict) -> tuple[dict[str, np.ndarray], dict]:
        cfg = self.config
        idx = np.flatnonzero(c["chosen_text"] != c["rejected_text"])  # equal texts: no comparison
        source = c["source"][idx]
        stats["decisive"] = _count(source)
        rand = np.random.default_rng(cfg.seed).random(len(idx))
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
    return _combine(a, b, c)


def _count(source: np.ndarray) -> dict[str, int]:
    counts = np.bincount(source.astype(np.int64), minlength=len(_SOURCE_NAMES)) if len(source) else np.zeros(3, int)
    return {name: int(counts[i]) for i, name in enumerate(_SOURCE_NAMES)}


# artifact codes ------------------------------------------------------------------------------
@dataclass
class _PlanGroups:
    """One row per (task, plan text) with any artifact: the unit of a plan-level pair."""

    task: np.ndarray
    prompt: np.ndarray
    text: np.ndarray  # plan text key
    artifact: np.ndarray  # representative artifact row: the first final artifact (else first)
    quality: np.ndarray  # mean quality of its final artifacts (NaN if none known)
    tokens: np.ndarray  # all tokens of its executions on the task
    specialized: np.ndarray
    base: np.ndarray


@dataclass
class _Artifacts:
    """The artifact table as integer codes, plus parsed plan structure per distinct plan."""

    df: pd.DataFrame
    quality: np.ndarray
    tokens: np.ndarray
    task: np.ndarray  # task code
    task_ids: np.ndarray  # task code -> task_id
    questions: np.ndarray  # task code -> question
    domains: np.ndarray  # task code -> domain
    plan: np.ndarray  # plan-text code
    plans: np.ndarray  # plan code -> plan text
    execution: np.ndarray  # (run, task, plan) code
    info: np.ndarray  # row of the node-info table, -1 when the plan does not parse
    infos: list[_NodeInfo]
    info_plan: np.ndarray  # node-info row -> plan code
    info_state: np.ndarray  # node-info row -> state code (prefix, agent, role, depth)
    info_prefix: np.ndarray  # node-info row -> prefix text code (-1 for an empty prefix)
    info_line: np.ndarray  # node-info row -> code of the node's own <agent .../> line
    lines: np.ndarray  # line code -> text
    prefixes: np.ndarray  # prefix code -> text
    plan_prompt_key: np.ndarray  # per task: prompt key of a plan-level pair
    node_prompt_key: np.ndarray  # per artifact: prompt key of a node-level pair

    @classmethod
    def build(cls, df: pd.DataFrame, quality: np.ndarray, tokens: np.ndarray) -> _Artifacts:
        task, task_ids = pd.factorize(df["task_id"])
        task = task.astype(np.int64)
        first_row = np.unique(task, return_index=True)[1]
        questions = df["question"].iloc[first_row].astype(str).to_numpy(dtype=object)
        domains = _column(df, "domain", "custom").iloc[first_row].fillna("custom").astype(str).to_numpy(dtype=object)
        plan, plans = pd.factorize(df["plan_text"])
        plan = plan.astype(np.int64)
        run = pd.factorize(_column(df, "run_id", ""), use_na_sentinel=False)[0]
        execution = _combine(run, task, plan)

        # parse each distinct plan once; map every artifact to its node's info row
        infos: list[_NodeInfo] = []
        info_plan: list[int] = []
        for code, text in enumerate(plans):
            nodes = _plan_nodes(str(text))
            if nodes is None:
                continue
            infos.extend(nodes)
            info_plan.extend([code] * len(nodes))
        info_plan_arr = np.asarray(info_plan, dtype=np.int64)
        node_code, node_uniques = pd.factorize(df["node_id"])
        node_code = node_code.astype(np.int64)
        known = {str(v): k for k, v in enumerate(node_uniques)}
        info_node = np.asarray([known.get(i.node_id, -1) for i in infos], dtype=np.int64)
        width = len(node_uniques) + 1
        info = pd.Index(info_plan_arr * width + info_node).get_indexer(plan * width + node_code).astype(np.int64)
        parsed = np.zeros(len(plans), dtype=bool)
        parsed[np.unique(info_plan_arr)] = True
        orphan = (info < 0) & parsed[plan]
        if orphan.any():
            rows = np.flatnonzero(orphan)[:5]
            shown = ", ".join(f"{df['artifact_id'].iat[i]} (node {df['node_id'].iat[i]!r})" for i in rows)
            raise TraceSchemaError(
                f"{int(orphan.sum())} artifact(s) name a node that is not in their plan_text, e.g. {shown}; "
                "node_id must be the id of a node of the plan that produced the artifact"
            )
        unparsed = int((~parsed[plan]).sum())
        if unparsed:
            logger.warning("%d artifact(s) carry a plan_text that is not a parseable plan: plan-level pairs only", unparsed)

        def codes(values: list[str]) -> tuple[np.ndarray, np.ndarray]:
            c, u = pd.factorize(pd.Series(values, dtype=object))
            return c.astype(np.int64), np.asarray(u, dtype=object)

        prefix_code, prefixes = codes([i.prefix for i in infos])
        if len(infos):
            prefix_code = np.where(prefixes[prefix_code] == "", -1, prefix_code)
        state_code = codes([f"{i.depth}\x1f{i.role}" for i in infos])[0]
        info_state = _combine(prefix_code, state_code) if len(infos) else np.array([], dtype=np.int64)
        info_line, lines = codes([i.line for i in infos])

        # prompt keys: (question text, prefix text); plan pairs and depth-0 node pairs share one
        q_code = codes(list(questions))[0]
        art_prefix = np.full(len(df), -1, dtype=np.int64)
        if len(infos):
            art_prefix[info >= 0] = prefix_code[info[info >= 0]]
        keys = _combine(np.concatenate([q_code, q_code[task]]), np.concatenate([np.full(len(q_code), -1), art_prefix]))
        return cls(
            df=df,
            quality=quality,
            tokens=tokens,
            task=task,
            task_ids=np.asarray(task_ids, dtype=object).astype(str),
            questions=questions,
            domains=domains,
            plan=plan,
            plans=np.asarray(plans, dtype=object).astype(str).astype(object),
            execution=execution,
            info=info,
            infos=infos,
            info_plan=info_plan_arr,
            info_state=info_state,
            info_prefix=prefix_code,
            info_line=info_line,
            lines=lines,
            prefixes=prefixes,
            plan_prompt_key=keys[: len(q_code)],
            node_prompt_key=keys[len(q_code) :],
        )

    def plan_groups(self) -> _PlanGroups:
        group = _combine(self.task, self.plan)
        n_groups = int(group.max(initial=-1)) + 1
        first = np.unique(group, return_index=True)[1]
        task = self.task[first]
        orchestrator = _column(self.df, "orchestrator", "")
        final = self.df["is_final"].fillna(False).to_numpy(dtype=bool)
        known = final & ~np.isnan(self.quality)
        q_sum = np.bincount(group[known], weights=self.quality[known], minlength=n_groups)
        q_n = np.bincount(group[known], minlength=n_groups)
        quality = np.full(n_groups, np.nan)
        np.divide(q_sum, q_n, out=quality, where=q_n > 0)
        artifact = first.astype(np.int64)
        final_rows = np.flatnonzero(final)
        g_final, idx = np.unique(group[final_rows], return_index=True)
        artifact[g_final] = final_rows[idx]
        tokens = np.bincount(group, weights=self.tokens, minlength=n_groups).astype(np.int64)
        spec = np.bincount(group, weights=(orchestrator == "specialized").to_numpy(dtype=bool), minlength=n_groups) > 0
        base = np.bincount(group, weights=(orchestrator == "base").to_numpy(dtype=bool), minlength=n_groups) > 0
        order = np.argsort(task, kind="stable")
        return _PlanGroups(
            task=task[order],
            prompt=self.plan_prompt_key[task[order]],
            text=self.plan[first][order],
            artifact=artifact[order],
            quality=quality[order],
            tokens=tokens[order],
            specialized=spec[order],
            base=base[order],
        )

    def prefix_tokens(self) -> np.ndarray:
        """Per artifact: its tokens plus those of its ancestors' artifacts in the same execution
        (what running the plan prefix up to this node cost). 0 where the plan does not parse."""
        rows = np.flatnonzero(self.info >= 0)
        out = np.zeros(len(self.task), dtype=np.int64)
        if not len(rows):
            return out
        # ancestor lists per node-info row, as node-info rows of the same plan
        index = {(int(p), i.node_id): k for k, (p, i) in enumerate(zip(self.info_plan, self.infos, strict=True))}
        anc = [[index[(int(p), a)] for a in i.ancestors] for p, i in zip(self.info_plan, self.infos, strict=True)]
        lens = np.asarray([len(a) for a in anc], dtype=np.int64)
        flat = np.asarray([x for a in anc for x in a], dtype=np.int64)
        starts = np.cumsum(lens) - lens
        # lookup: (execution, node-info row) -> tokens of that artifact
        width = len(self.infos)
        key = self.execution[rows] * width + self.info[rows]
        order = np.argsort(key, kind="stable")
        sorted_key, sorted_tok = key[order], self.tokens[rows][order]
        own = self.info[rows]
        n_anc = lens[own]
        rep = np.repeat(np.arange(len(rows)), n_anc)
        offs = np.arange(int(n_anc.sum())) - np.repeat(np.cumsum(n_anc) - n_anc, n_anc)
        anc_info = flat[np.repeat(starts[own], n_anc) + offs]
        want = self.execution[rows][rep] * width + anc_info
        pos = np.searchsorted(sorted_key, want)
        pos_ok = pos < len(sorted_key)
        found = np.zeros(len(want), dtype=bool)
        found[pos_ok] = sorted_key[pos[pos_ok]] == want[pos_ok]
        anc_tok = np.where(found, sorted_tok[np.minimum(pos, len(sorted_key) - 1)], 0)
        out[rows] = self.tokens[rows] + np.bincount(rep, weights=anc_tok, minlength=len(rows)).astype(np.int64)
        return out

    def action_keys(self, rows: np.ndarray) -> np.ndarray:
        """Per artifact row in ``rows``: a key equal iff the action texts (node line + content)
        are equal, offset past the plan-text keys so that plan and node texts never share one.

        Equal texts matter only under one prompt, and texts of different lengths differ, so only
        artifacts sharing (prompt, node line, content length) with another one get their content
        hashed; the rest get a key of their own (hashing a million contents is the slow part).
        """
        out = np.full(len(self.task), -1, dtype=np.int64)
        if not len(rows):
            return out
        content = self.df["content"].iloc[rows]
        length = content.str.len().to_numpy(dtype=np.int64)
        line_code = self.info_line[self.info[rows]]
        bucket = _combine(self.node_prompt_key[rows], line_code, length)
        shared = pd.Series(bucket).duplicated(keep=False).to_numpy()
        key = np.arange(len(rows), dtype=np.int64) + 1  # own key (>= 1)
        if shared.any():
            content_code = pd.factorize(content.iloc[np.flatnonzero(shared)])[0].astype(np.int64)
            merged = _combine(line_code[shared], content_code)
            key[shared] = -1 - merged  # shared texts: keys <= -1, equal for equal texts
        out[rows] = pd.factorize(key)[0].astype(np.int64) + len(self.plans)
        return out


# output ----------------------------------------------------------------------------------------
def empty_pairs() -> pd.DataFrame:
    """A pair table with every column and no rows."""
    dtypes = {"margin": "float64", "collection_tokens": "int64"}
    return pd.DataFrame({c: pd.Series(dtype=dtypes.get(c, object)) for c in PAIR_COLUMNS})


def pair_ids(task_id: Sequence[str], granularity: Sequence[str], source: Sequence[str], chosen: Sequence[str], rejected: Sequence[str]) -> list[str]:
    """Stable 16-hex ids of pairs: blake2b of (task_id, granularity, source, chosen and rejected
    artifact ids)."""
    base = hashlib.blake2b(digest_size=8, person=b"orchrm-pair")
    out = []
    for parts in zip(task_id, granularity, source, chosen, rejected, strict=True):
        h = base.copy()
        h.update("\x1f".join(parts).encode("utf-8"))
        out.append(h.hexdigest())
    return out


def _materialise(art: _Artifacts, c: dict[str, np.ndarray], cfg: PairsConfig) -> pd.DataFrame:
    if not len(c["task"]):
        return empty_pairs()
    source = np.asarray(_SOURCE_NAMES, dtype=object)[c["source"]]
    granularity = np.asarray([SOURCES[s] for s in _SOURCE_NAMES], dtype=object)[c["source"]]
    node = granularity == "node"
    task_ids = art.task_ids[c["task"]]
    question = art.questions[c["task"]]
    # prompt: the question, plus "\n" + the rendered ancestor prefix for node pairs past depth 0
    prefix_code = np.full(len(node), -1, dtype=np.int64)
    prefix_code[node] = art.info_prefix[art.info[c["chosen"][node]]]
    has_prefix = prefix_code >= 0
    prompt = question.copy()
    if has_prefix.any():
        prompt[has_prefix] = question[has_prefix] + "\n" + art.prefixes[prefix_code[has_prefix]]
    content = art.df["content"]

    def text(rows: np.ndarray) -> np.ndarray:
        out = art.plans[art.plan[rows]].copy()
        if node.any():
            r = rows[node]
            out[node] = art.lines[art.info_line[art.info[r]]] + "\n" + content.iloc[r].astype(str).to_numpy(dtype=object)
        return out

    artifact_ids = art.df["artifact_id"]
    chosen_ids = artifact_ids.iloc[c["chosen"]].astype(str).to_numpy(dtype=object)
    rejected_ids = artifact_ids.iloc[c["rejected"]].astype(str).to_numpy(dtype=object)
    out = pd.DataFrame(
        {
            "pair_id": pair_ids(task_ids, granularity, source, chosen_ids, rejected_ids),
            "task_id": task_ids,
            "domain": art.domains[c["task"]],
            "granularity": granularity,
            "source": source,
            "prompt": prompt,
            "chosen": text(c["chosen"]),
            "rejected": text(c["rejected"]),
            "margin": c["margin"].astype(np.float64),
            "chosen_artifact_id": chosen_ids,
            "rejected_artifact_id": rejected_ids,
            "split": assign_split(task_ids, cfg.val_fraction, cfg.test_fraction),
            "collection_tokens": c["tokens"].astype(np.int64),
        }
    )
    # the integer keys already removed duplicates; this pins the contract on the texts themselves
    out = out[out["chosen"] != out["rejected"]]
    out = out.drop_duplicates(subset=["prompt", "chosen", "rejected"])
    return out.sort_values(["task_id", "granularity", "source", "pair_id"], kind="stable").reset_index(drop=True)[list(PAIR_COLUMNS)]


# module-level verbs ------------------------------------------------------------------------------
def build_pairs(artifacts: Any, config: PairsConfig | None = None, quality_fn: QualityFn | None = None) -> pd.DataFrame:
    """The pair table of ``artifacts`` under ``config`` (defaults: :class:`PairsConfig`)."""
    return PairwiseComparator(quality_fn, config=config).build_pairs(artifacts)


def build_pairs_file(artifacts_path: str | os.PathLike, out_path: str | os.PathLike, config: PairsConfig | None = None) -> pd.DataFrame:
    """Read an artifact table, build its pairs and write them atomically (Parquet or JSONL);
    returns the pair table. Used by ``orchrm pairs``. An artifact table without rows, or an output
    that cannot be written (the input itself, say), is refused before any work."""
    check_output_table(out_path, inputs=[artifacts_path])
    artifacts = read_table(artifacts_path)
    if artifacts.empty:
        raise TraceSchemaError(f"artifact table {artifacts_path} has no rows: collect or ingest artifacts first")
    pairs = build_pairs(artifacts, config=config)
    if pairs.empty:
        logger.warning("no pairs: no task has two comparable artifacts whose quality differs by min_margin")
    write_table(pairs, out_path)
    return pairs


_PLAN_LINE = ("<agent ", "<edge ")


def _task_text(prompt: str) -> str:
    """The task part of a prompt: the prompt without its trailing plan-prefix lines (and
    trailing whitespace)."""
    lines = prompt.split("\n")
    while len(lines) > 1 and lines[-1].lstrip().startswith(_PLAN_LINE):
        lines.pop()
    return "\n".join(lines).rstrip()


def read_pairs(path: str | os.PathLike, *, config: PairsConfig | None = None) -> pd.DataFrame:
    """Read a pair table and normalise it to :data:`orchrm.traces.PAIR_COLUMNS`.

    Accepts our own table (Parquet / JSONL), TRL's preference format (``prompt``, ``chosen``,
    ``rejected``, optional ``margin``) and the published OrchRM data-set format (``input``,
    ``chosen``, ``rejected``, ``source``). Missing columns, and missing values of the id and
    label columns below, are filled:

    - ``prompt`` from ``input``; ``source`` ``"external"``; ``granularity`` ``node`` for
      ``intermediate`` pairs, else ``plan``; ``domain`` ``"custom"``;
    - ``task_id``: a stable hash of the prompt's task text (the prompt without trailing
      ``<agent>``/``<edge>`` lines), so every pair about one question shares a task and a split;
    - ``margin`` (only when the column is absent; NaN margins are left for validation to refuse):
      ``config.prior_margin`` for ``specialized-over-base``, else 1.0 (a binary
      correct-over-incorrect judgement);
    - artifact ids: hashes of (task_id, text), one artifact per text within a task;
      ``collection_tokens`` 0 (not recorded);
      ``split`` by :func:`assign_split`; ``pair_id`` by :func:`pair_ids`. When ids are generated,
      rows repeating a ``(prompt, chosen, rejected)`` are dropped (DESIGN §5).
    """
    cfg = config or PairsConfig()
    df = read_table(path).reset_index(drop=True)
    if "prompt" not in df.columns and "input" in df.columns:
        df = df.rename(columns={"input": "prompt"})
    missing = [c for c in ("prompt", "chosen", "rejected") if c not in df.columns]
    if missing:
        raise TraceSchemaError(
            f"{path}: not a pair table: lacks {', '.join(missing)}; expected our pair table, TRL's "
            "prompt/chosen/rejected or the OrchRM data set's input/chosen/rejected/source"
        )
    for col in ("prompt", "chosen", "rejected"):
        bad = df.index[~df[col].map(lambda v: isinstance(v, str))]
        if len(bad):
            raise TraceSchemaError(
                f"{path}: column '{col}' must hold plain text; rows {', '.join(map(str, bad[:5]))} do not "
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
    fill("domain", lambda rows: ["custom"] * len(rows))
    fill("task_id", lambda rows: [
        "task-" + hashlib.blake2b(_task_text(p).encode("utf-8"), digest_size=6).hexdigest() for p in df.loc[rows, "prompt"]
    ])
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
            f"{path}: column 'collection_tokens' must hold whole token counts; rows {', '.join(map(str, fractional[:5]))} "
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
        logger.info("%s: dropped %d repeated (prompt, chosen, rejected) rows", path, n - len(df))
    return df[list(PAIR_COLUMNS)]
