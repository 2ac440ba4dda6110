"""The plan-pair samples of the trainer comparisons (``train``, ``gpu_train``) and their accuracy."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

Score = Callable[[Sequence[str], Sequence[str]], np.ndarray]


def sample_tasks(pairs: pd.DataFrame, train_tasks: int, test_tasks: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, test): the plan-level pairs of a seeded sample of ``train_tasks`` training-split
    tasks and of ``test_tasks`` test-split tasks, each balanced over the domains."""
    rng = np.random.default_rng(seed)
    plan = pairs[pairs["granularity"] == "plan"]

    def sample(split: str, n: int) -> pd.DataFrame:
        rows = plan[plan["split"] == split]
        domains = sorted(rows["domain"].unique())
        keep = []
        for d in domains:
            tasks = np.array(sorted(rows.loc[rows["domain"] == d, "task_id"].unique()))
            keep += list(rng.permutation(tasks)[: n // len(domains)])
        return rows[rows["task_id"].isin(keep)].reset_index(drop=True)

    train = sample("train", train_tasks).assign(split="train")
    return train, sample("test", test_tasks)


def pairwise_accuracy(score: Score, test: pd.DataFrame) -> float:
    """The share of ``test``'s pairs whose chosen text ``score(prompts, actions)`` ranks above the
    rejected one, each distinct text scored once (:func:`orchrm.evaluation.metrics.score_pairs`)."""
    from orchrm.evaluation.metrics import score_pairs

    r_c, r_r = score_pairs(score, test)
    return float((r_c > r_r).mean())
