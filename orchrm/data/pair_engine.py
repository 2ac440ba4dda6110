"""The integer-code engine behind pair building: the artifact table as numpy codes.

Every text (task, plan, and the node lines, prefixes and sub-plans :mod:`orchrm.model.texts`
parses a plan into) becomes a dense integer code once; the comparator (:mod:`orchrm.data.pairs`)
then enumerates, filters and deduplicates candidate pairs on those codes with ``np.repeat``
arithmetic, never with a Python double loop (DESIGN §5). Lists of varying
length per row (a group's members, a node's ancestors) are stored flat; :func:`ragged_arange` is
the one piece of index arithmetic that walks them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from orchrm.errors import TraceSchemaError
from orchrm.model.texts import NodeInfo, plan_nodes
from orchrm.plans import QUESTION_BLIND

logger = logging.getLogger("orchrm.data.pairs")


# index arithmetic ----------------------------------------------------------------------------
def ragged_arange(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Enumerate ``counts[i]`` slots for every row ``i``: ``(owner, offset)``, one entry per slot.

    ``owner`` is the row a slot belongs to and ``offset`` its position ``0 .. counts[i]-1`` within
    that row, in row order. This is the vectorised form of
    ``[(i, k) for i, c in enumerate(counts) for k in range(c)]``. With five rows:

    ========  ======  ======  =========  ======  ======
    row i     0       1       2          3       4
    counts    2       0       3          1       0
    slots     (0, 0)  --      (2, 0)     (3, 0)  --
              (0, 1)          (2, 1)
                              (2, 2)
    ========  ======  ======  =========  ======  ======

    >>> owner, offset = ragged_arange(np.array([2, 0, 3, 1, 0]))
    >>> owner.tolist(), offset.tolist()
    ([0, 0, 2, 2, 2, 3], [0, 1, 0, 1, 2, 0])

    ``np.repeat(starts, counts) + offset`` then indexes the elements of flat (CSR) lists whose
    row ``i`` starts at ``starts[i]``: :meth:`ArtifactCodes.prefix_tokens` finds every ancestor of
    every artifact that way, :func:`within_group_pairs` every later member of a row's group.
    """
    counts = np.asarray(counts, dtype=np.int64)
    owner = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    first_slot = np.cumsum(counts) - counts  # where each row's slots begin
    offset = np.arange(len(owner), dtype=np.int64) - np.repeat(first_slot, counts)
    return owner, offset


def within_group_pairs(group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All index pairs ``(i, j)``, ``i < j``, of rows sharing a value of ``group``.

    ``group`` must be sorted (rows of a group contiguous): row ``p`` of a group that ends before
    row ``e`` pairs with ``p+1 .. e-1``, that is ``e - p - 1`` slots of :func:`ragged_arange`.

    >>> left, right = within_group_pairs(np.array([7, 7, 7, 9, 9]))
    >>> list(zip(left.tolist(), right.tolist()))
    [(0, 1), (0, 2), (1, 2), (3, 4)]
    """
    n = len(group)
    if n < 2:
        empty = np.array([], dtype=np.int64)
        return empty, empty
    ends = np.append(np.flatnonzero(group[1:] != group[:-1]) + 1, n)
    end_of_row = np.repeat(ends, np.diff(np.concatenate(([0], ends))))
    left, offset = ragged_arange(end_of_row - np.arange(n) - 1)
    return left, left + 1 + offset


def combine_codes(*codes: np.ndarray) -> np.ndarray:
    """Dense codes of the tuples of integer codes (-1 allowed), without int64 overflow."""
    out = codes[0].astype(np.int64)
    for c in codes[1:]:
        c = c.astype(np.int64)
        key = (out + 1) * (int(c.max(initial=-1)) + 2) + (c + 1)
        out = pd.factorize(key)[0].astype(np.int64)
    return out


def lookup(keys: np.ndarray, values: np.ndarray, want: np.ndarray, default: int = 0) -> np.ndarray:
    """``values[k]`` where ``keys[k] == want[i]``, else ``default``, for each ``want[i]`` (unique keys)."""
    order = np.argsort(keys, kind="stable")
    sorted_keys, sorted_values = keys[order], values[order]
    pos = np.minimum(np.searchsorted(sorted_keys, want), max(len(keys) - 1, 0))
    found = (sorted_keys[pos] == want) if len(keys) else np.zeros(len(want), dtype=bool)
    return np.where(found, sorted_values[pos] if len(keys) else default, default)


_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit flips about half the output bits."""
    h = h ^ (h >> np.uint64(30))
    h = h * _MIX1
    h = h ^ (h >> np.uint64(27))
    h = h * _MIX2
    return h ^ (h >> np.uint64(31))


def stable_uniform(seed: int, *keys: np.ndarray) -> np.ndarray:
    """One number in [0, 1) per row, a hash of ``seed`` and the row's ``keys`` alone.

    Each key is an array of strings or integers, one entry per row. A row's number does not
    depend on the other rows or on their order, unlike a draw from one seeded stream, where one
    row more or less shifts every later number. So a task whose artifacts change moves only its
    own pairs' numbers.

    >>> a = stable_uniform(0, np.array(["t1", "t2", "t3"]), np.array([5, 6, 7]))
    >>> b = stable_uniform(0, np.array(["t3", "t1"]), np.array([7, 5]))
    >>> bool(a[2] == b[0] and a[0] == b[1]), bool(((0 <= a) & (a < 1)).all())
    (True, True)
    >>> bool((stable_uniform(1, np.array(["t1"]), np.array([5])) != a[0]).all())
    True
    """
    h = np.full(len(keys[0]) if keys else 0, np.uint64(seed), dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = _mix(h + np.uint64(0x9E3779B97F4A7C15))
        for key in keys:
            key = np.asarray(key)
            part = key.astype(np.int64).view(np.uint64) if key.dtype.kind in "iub" else pd.util.hash_array(key.astype(object))
            h = _mix(h ^ _mix(part + np.uint64(0x9E3779B97F4A7C15)))
    return (h >> np.uint64(11)).astype(np.float64) * 2.0**-53


def column(df: pd.DataFrame, name: str, default: Any) -> pd.Series:
    """``df[name]``, or a column of ``default`` when the table lacks it."""
    if name in df.columns:
        return df[name]
    return pd.Series([default] * len(df), index=df.index, dtype=object)


# the codes -----------------------------------------------------------------------------------
@dataclass
class PlanGroups:
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
class PrefixGroups:
    """One row per (task, state, sub-plan): the unit of a plan-prefix intermediate pair."""

    task: np.ndarray
    state: np.ndarray  # the node-info state code (ancestor prefix, depth, role)
    text: np.ndarray  # sub-plan text key
    artifact: np.ndarray  # representative artifact row (the group's first)
    quality: np.ndarray  # mean quality of its artifacts
    tokens: np.ndarray  # prefix tokens (node + ancestors) of all its artifacts


@dataclass
class ArtifactCodes:
    """The artifact table as integer codes, plus parsed plan structure per distinct plan.

    Arrays named ``info_*`` have one entry per *node-info row*: one node of one distinct plan
    text (:class:`~orchrm.model.texts.NodeInfo`). Text keys of plan texts are the plan codes ``0 .. len(plans)-1``;
    :meth:`action_keys` offsets node action keys past them.
    """

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
    infos: list[NodeInfo]
    info_plan: np.ndarray  # node-info row -> plan code
    info_state: np.ndarray  # node-info row -> state code (prefix, agent, role, depth)
    info_prefix: np.ndarray  # node-info row -> prefix text code (-1 for an empty prefix)
    info_line: np.ndarray  # node-info row -> code of the node's own <agent .../> line
    lines: np.ndarray  # line code -> text
    prefixes: np.ndarray  # prefix code -> text
    #: node-info row -> text key of its sub-plan (:attr:`NodeInfo.subplan`), in the plan-text key
    #: space: a sub-plan equal to a plan text has that plan's key
    info_subplan: np.ndarray
    texts: np.ndarray  # text key -> text, plan texts then sub-plans that are no plan text
    plan_prompt_key: np.ndarray  # per task: prompt key of a plan-level pair
    node_prompt_key: np.ndarray  # per artifact: prompt key of a node-level pair

    @classmethod
    def build(cls, df: pd.DataFrame, quality: np.ndarray, tokens: np.ndarray) -> ArtifactCodes:
        task, task_ids = pd.factorize(df["task_id"])
        task = task.astype(np.int64)
        first_row = np.unique(task, return_index=True)[1]
        questions = df["question"].iloc[first_row].astype(str).to_numpy(dtype=object)
        domains = column(df, "domain", "custom").iloc[first_row].fillna("custom").astype(str).to_numpy(dtype=object)
        plan, plans = pd.factorize(df["plan_text"])
        plan = plan.astype(np.int64)
        run = pd.factorize(column(df, "run_id", ""), use_na_sentinel=False)[0]
        execution = combine_codes(run, task, plan)

        # parse each distinct plan once; map every artifact to its node's info row
        infos: list[NodeInfo] = []
        info_plan: list[int] = []
        for code, text in enumerate(plans):
            nodes = plan_nodes(str(text))
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
        # a final reply written by a step after the plan (kept by orchrm.data.ingest.ingest_traces under
        # its own node id) counts in plan-level pairs and in no node-level one
        final = df["is_final"].fillna(False).to_numpy(dtype=bool)
        orphan = (info < 0) & parsed[plan] & ~final
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
        info_state = combine_codes(prefix_code, state_code) if len(infos) else np.array([], dtype=np.int64)
        info_line, lines = codes([i.line for i in infos])
        # plan texts are distinct, so they keep their codes 0 .. len(plans)-1 here
        text_code, texts = codes([*map(str, plans), *(i.subplan for i in infos)])
        info_subplan = text_code[len(plans) :]

        # prompt keys: (question text, prefix text); plan pairs and depth-0 node pairs share one
        q_code = codes(list(questions))[0]
        art_prefix = np.full(len(df), -1, dtype=np.int64)
        if len(infos):
            art_prefix[info >= 0] = prefix_code[info[info >= 0]]
        keys = combine_codes(np.concatenate([q_code, q_code[task]]), np.concatenate([np.full(len(q_code), -1), art_prefix]))
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
            info_subplan=info_subplan,
            texts=texts,
            plan_prompt_key=keys[: len(q_code)],
            node_prompt_key=keys[len(q_code) :],
        )

    def plan_groups(self) -> PlanGroups:
        group = combine_codes(self.task, self.plan)
        n_groups = int(group.max(initial=-1)) + 1
        first = np.unique(group, return_index=True)[1]
        task = self.task[first]
        orchestrator = column(self.df, "orchestrator", "")
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
        blind = orchestrator.isin(QUESTION_BLIND).to_numpy(dtype=bool)
        base = np.bincount(group, weights=blind, minlength=n_groups) > 0
        order = np.argsort(task, kind="stable")
        return PlanGroups(
            task=task[order],
            prompt=self.plan_prompt_key[task[order]],
            text=self.plan[first][order],
            artifact=artifact[order],
            quality=quality[order],
            tokens=tokens[order],
            specialized=spec[order],
            base=base[order],
        )

    def prefix_groups(self) -> PrefixGroups:
        """One row per (task, state, sub-plan) with a known quality, sorted by (task, state): the
        unit of an intermediate pair whose actions are plan prefixes. A prefix run several times
        on a task (by alternatives that share it, or by repeated runs) counts once, with the mean
        quality of its artifacts and the prefix tokens of all of them."""
        rows = np.flatnonzero(~np.isnan(self.quality) & (self.info >= 0))
        info = self.info[rows]
        key = combine_codes(self.task[rows], self.info_state[info], self.info_subplan[info])
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        n = len(first)
        quality = np.bincount(inverse, weights=self.quality[rows], minlength=n) / np.bincount(inverse, minlength=n)
        tokens = np.bincount(inverse, weights=self.prefix_tokens()[rows], minlength=n).astype(np.int64)
        rep = rows[first]  # each group's first artifact row
        order = np.lexsort((rep, self.info_state[self.info[rep]], self.task[rep]))
        rep = rep[order]
        return PrefixGroups(
            task=self.task[rep],
            state=self.info_state[self.info[rep]],
            text=self.info_subplan[self.info[rep]],
            artifact=rep,
            quality=quality[order],
            tokens=tokens[order],
        )

    def prefix_tokens(self) -> np.ndarray:
        """Per artifact: its tokens plus those of its ancestors' artifacts in the same execution
        (what running the plan prefix up to this node cost). 0 where the plan does not parse.

        Ancestors are kept as flat lists per node-info row (``ancestor_rows`` from
        ``ancestor_start[k]``, ``ancestor_count[k]`` long). For plan ``a1 -> a2 -> a3`` the lists
        are ``a1: []``, ``a2: [a1]``, ``a3: [a1, a2]``; :func:`ragged_arange` over the counts of
        the artifacts' own rows yields one slot per (artifact, ancestor), and each slot looks up
        the tokens of that ancestor's artifact in the same execution (0 when it did not run).
        """
        rows = np.flatnonzero(self.info >= 0)
        out = np.zeros(len(self.task), dtype=np.int64)
        if not len(rows):
            return out
        index = {(int(p), i.node_id): k for k, (p, i) in enumerate(zip(self.info_plan, self.infos, strict=True))}
        ancestors = [[index[(int(p), a)] for a in i.ancestors] for p, i in zip(self.info_plan, self.infos, strict=True)]
        ancestor_count = np.asarray([len(a) for a in ancestors], dtype=np.int64)
        ancestor_rows = np.asarray([x for a in ancestors for x in a], dtype=np.int64)
        ancestor_start = np.cumsum(ancestor_count) - ancestor_count
        own = self.info[rows]
        owner, offset = ragged_arange(ancestor_count[own])
        ancestor_info = ancestor_rows[ancestor_start[own][owner] + offset]
        # one key per (execution, node-info row): the artifact of that node in that execution
        width = len(self.infos)
        execution = self.execution[rows]
        ancestor_tokens = lookup(execution * width + own, self.tokens[rows], execution[owner] * width + ancestor_info)
        out[rows] = self.tokens[rows] + np.bincount(owner, weights=ancestor_tokens, minlength=len(rows)).astype(np.int64)
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
        bucket = combine_codes(self.node_prompt_key[rows], line_code, length)
        shared = pd.Series(bucket).duplicated(keep=False).to_numpy()
        key = np.arange(len(rows), dtype=np.int64) + 1  # own key (>= 1)
        if shared.any():
            content_code = pd.factorize(content.iloc[np.flatnonzero(shared)])[0].astype(np.int64)
            merged = combine_codes(line_code[shared], content_code)
            key[shared] = -1 - merged  # shared texts: keys <= -1, equal for equal texts
        out[rows] = pd.factorize(key)[0].astype(np.int64) + len(self.plans)
        return out
