"""The pair table (DESIGN §3): its sources, its stable ids, and the step from codes to texts.

The comparator (:mod:`orchrm.data.pairs`) selects pairs as integer codes; :func:`materialise` turns the
kept ones into rows of :data:`orchrm.data.tables.PAIR_COLUMNS` (prompt, action texts, ids, split);
the texts are built by :mod:`orchrm.model.texts`, as serving builds them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from orchrm.config import PairsConfig
from orchrm.data.pair_engine import ArtifactCodes
from orchrm.data.splits import assign_split
from orchrm.data.tables import PAIR_COLUMNS
from orchrm.model.texts import node_action, node_prompt, plan_prompt

#: source -> granularity
SOURCES: Mapping[str, str] = {
    "correct-over-incorrect": "plan",
    "intermediate": "node",
    "specialized-over-base": "plan",
}
#: index = a source's integer code in the engine = its dedup priority (observed sources first)
SOURCE_NAMES: tuple[str, ...] = tuple(SOURCES)


def empty_pairs() -> pd.DataFrame:
    """A pair table with every column and no rows."""
    dtypes = {"margin": "float64", "collection_tokens": "int64"}
    return pd.DataFrame({c: pd.Series(dtype=dtypes.get(c, object)) for c in PAIR_COLUMNS})


def _objects(texts: Iterable[str]) -> np.ndarray:
    """A 1-D object array of ``texts`` (numpy would otherwise make fixed-width strings)."""
    out = list(texts)
    arr = np.empty(len(out), dtype=object)
    arr[:] = out
    return arr


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


def materialise(art: ArtifactCodes, c: Mapping[str, np.ndarray], cfg: PairsConfig) -> pd.DataFrame:
    """The pair table of the selected candidates ``c`` (parallel arrays: ``task``, ``source``,
    ``chosen``/``rejected`` artifact rows, ``margin``, ``tokens``), sorted by task."""
    if not len(c["task"]):
        return empty_pairs()
    source = np.asarray(SOURCE_NAMES, dtype=object)[c["source"]]
    granularity = np.asarray([SOURCES[s] for s in SOURCE_NAMES], dtype=object)[c["source"]]
    node = granularity == "node"
    task_ids = art.task_ids[c["task"]]
    question = art.questions[c["task"]]
    # the texts are those of orchrm.model.texts, the ones serving scores with: plan pairs and
    # plan-prefix actions read the question alone, node pairs the question and the node's prefix
    as_plans = cfg.intermediate_action == "plan_prefix"
    with_prefix = node & (not as_plans)
    prefix = np.full(len(node), "", dtype=object)
    if with_prefix.any():
        code = art.info_prefix[art.info[c["chosen"][with_prefix]]]
        prefix[with_prefix] = np.where(code >= 0, art.prefixes[code], "")
    prompt = _objects(node_prompt(q, p) if n else plan_prompt(q) for q, p, n in zip(question, prefix, with_prefix, strict=True))
    content = art.df["content"]

    def text(rows: np.ndarray) -> np.ndarray:
        out = art.plans[art.plan[rows]].copy()
        if node.any():
            r = rows[node]
            if as_plans:
                out[node] = art.texts[art.info_subplan[art.info[r]]]
            else:
                lines = art.lines[art.info_line[art.info[r]]]
                out[node] = _objects(map(node_action, lines, content.iloc[r].astype(str)))
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
