"""Questions with sampled candidate plans: what the scoring-speed benchmarks score.

>>> cases = questions_with_plans(1, 4, seed=7)   # doctest: +SKIP
>>> len(cases[0].plans)                          # doctest: +SKIP
4
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Question:
    """One built-in task's question and distinct plan texts the base sampler wrote for it."""

    question: str
    plans: tuple[str, ...]


def questions_with_plans(per_domain: int, plans: int, seed: int) -> list[Question]:
    """A :class:`Question` with ``plans`` distinct plans for each of ``per_domain`` built-in tasks of
    every domain (tasks for which the sampler finds fewer distinct plans are left out)."""
    from orchrm.execution.samplers import BaseSampler
    from orchrm.execution.tasks import BUILTIN_DOMAINS, load_tasks

    rng, sampler, out = random.Random(seed), BaseSampler(), []
    for domain in BUILTIN_DOMAINS:
        for task in load_tasks(domain, per_domain, seed=seed):
            texts = [p.render() for p in sampler.sample(task, plans, rng)]
            if len(texts) == plans:
                out.append(Question(task.question, tuple(texts)))
    return out
