"""Why does the seed ensemble read the question less than its members? (issue 24)

:mod:`benchmarks.question_reading` found that the default config's three model seeds, scored as one
ensemble (the mean of their standardised rewards, what ``orchrm train --members 3`` trains), pay
a smaller swap cost than the seeds do on average. This benchmark splits each model's rewards on the
same held-out pool into the part the task's own question adds and the part it gives the plan
whatever question of the domain it is shown, and asks whether the members agree on each.

For every model (each seed, then the ensemble) and every candidate ``c`` of a task ``t``:

- ``own[t, c]``: the reward with the task's own question; ``swapped_k[t, c]`` with the question of
  its partner under derangement ``k`` (:func:`benchmarks.question_reading.derangement`, the seeds
  of ``--swap-seeds``);
- every reward is centred within its task (a reward model's pick depends only on differences
  between a task's candidates), then ``plan = mean_k swapped_k`` (what the model gives the plan
  under other questions of the domain) and ``question = own - plan`` (what this question adds);
- the **question share** is ``|question|^2 / (|question|^2 + |plan|^2)``: the question part's share
  of the two parts' sum of squares (0: the plan alone decides the pick). The plan part is the mean
  over a few wrong questions, so it keeps a little of what each of them says: the share is a
  slight underestimate;
- between two members, the correlation over every (task, candidate) of their ``question`` parts and
  of their ``plan`` parts (neither depends on a model's reward scale).

The mean of three members keeps a part in proportion to how much the members agree on it: with a
pairwise correlation ``rho`` the mean of three parts of equal spread has ``(1 + 2 rho) / 3`` of one's
sum of squares (the ensemble averages the members' rewards, each standardised by its own training
spread, so spreads are about equal). If the members agree on the plan more than on the question, the ensemble's question share
falls below theirs and so does its swap cost. Beside the shares, each model's best-of-N picks as
:mod:`benchmarks.question_reading` scores them (means over tasks, with the own question and a swapped
one), and the ensemble's picks minus the members' mean pick, paired over tasks with 95% intervals:
they tell whether what the mean thins out helped the members pick with the right question or
misled them with a wrong one.

    nice -n 19 python -m benchmarks.ensemble_reading --threads 1     # writes results/ensemble_reading.json
    nice -n 19 python -m benchmarks.ensemble_reading --tasks 4 --repeats 2 --collect-tasks 4 --held-out-from 4 --out /tmp/er

The models are those :mod:`benchmarks.question_reading` trains at the default config's point of its
curve (cached under ``.orchrm/bench``; trained here when absent), scored on the same pool.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.common import steps
from benchmarks.common.results_io import (
    RESULTS,
    ROOT,
    command_line,
    provenance,
    shown_path,
    use_sibling_data,
    write_json,
)
from benchmarks.question_reading import (
    Scorer,
    benchmark_config,
    ensemble_of,
    held_out_pairs,
    pick_with_questions,
    pool_collection_arg,
    rm_scorer,
    scoring_pool,
    shown_questions,
    summarise,
    with_seed,
    with_tasks,
)
from benchmarks.question_reading import parser as qr_parser


def remembered(scorer: Scorer) -> Scorer:
    """``scorer``, scoring each distinct call (the same questions, plans and domains) once: the
    shares and the picks score a model's pool with the same questions."""
    seen: dict[tuple[tuple[Any, ...], ...], Any] = {}

    def score(questions: Sequence[str], plans: Sequence[str], domains: Sequence[Any]) -> Any:
        key = (tuple(questions), tuple(plans), tuple(domains))
        if key not in seen:
            seen[key] = scorer(questions, plans, domains)
        return seen[key].copy()  # a caller that edits its rewards leaves the remembered ones as they were

    return score


def centred_rewards(scorer: Scorer, frame: pd.DataFrame, partners: Sequence[dict[str, str]]) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``frame``: the reward with the task's own question and the mean reward under the
    swapped questions of ``partners``, each centred within its task (``own``, ``plan``)."""
    plans = list(frame["plan_text"])
    task = frame["task_id"].to_numpy()

    def centred(variant: str, partner: dict[str, str] | None = None) -> np.ndarray:
        questions, domains = shown_questions(frame, variant, partner)
        r = pd.Series(np.asarray(scorer(questions, plans, domains), dtype=float))
        return (r - r.groupby(task).transform("mean")).to_numpy()

    own = centred("own")
    plan = np.mean([centred("swapped", p) for p in partners], axis=0)
    return own, plan


def question_share(own: np.ndarray, plan: np.ndarray) -> float:
    """The question part ``own - plan``'s share of the two parts' sum of squares:
    ``|own - plan|^2 / (|own - plan|^2 + |plan|^2)`` (0 when no question changes the rewards, 1
    when only the question does).

    >>> question_share(np.array([1.0, -1.0]), np.array([1.0, -1.0]))
    0.0
    >>> question_share(np.array([1.0, -1.0]), np.array([0.5, -0.5]))
    0.5
    """
    question, plain = float(np.sum((own - plan) ** 2)), float(np.sum(plan**2))
    if question + plain == 0.0:
        raise ValueError("every candidate of every task scores alike: no within-task reward spread to share out")
    return question / (question + plain)


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a, b)[0, 1])


def agreement(parts: dict[str, tuple[np.ndarray, np.ndarray]]) -> list[dict[str, Any]]:
    """For each pair of members (``parts``: name -> (own, plan), centred rewards): the correlation of
    their question parts (own - plan) and of their plan parts, over every (task, candidate)."""
    rows = []
    for (a, (own_a, plan_a)), (b, (own_b, plan_b)) in itertools.combinations(parts.items(), 2):
        rows.append({"members": [a, b], "question_correlation": _correlation(own_a - plan_a, own_b - plan_b),
                     "plan_correlation": _correlation(plan_a, plan_b)})
    return rows


def kept_by_mean(rho: float, members: int) -> float:
    """The share of one part's variance that the mean of ``members`` parts of equal spread and
    pairwise correlation ``rho`` keeps: ``(1 + (members - 1) rho) / members``.

    >>> kept_by_mean(1.0, 3), kept_by_mean(0.0, 3)
    (1.0, 0.3333333333333333)
    """
    return (1 + (members - 1) * rho) / members


def predicted_share(member_share: float, kept_question: float, kept_plan: float) -> float:
    """The question share of the mean of members whose question share is ``member_share``, when
    the mean keeps ``kept_question`` of the question part's sum of squares and ``kept_plan`` of
    the plan part's (:func:`kept_by_mean`; members of equal spread).

    >>> predicted_share(0.25, 1.0, 1.0)
    0.25
    >>> predicted_share(0.5, 0.5, 1.0)
    0.3333333333333333
    """
    question, plan = member_share * kept_question, (1 - member_share) * kept_plan
    return question / (question + plan)


def model_row(name: str, scorer: Scorer, frame: pd.DataFrame, partners: Sequence[dict[str, str]], parts: tuple[np.ndarray, np.ndarray],
              ) -> tuple[dict[str, Any], pd.DataFrame]:
    """One model's question share (overall and per domain) and its best-of-N picks' quality with the
    own question and a swapped one (the mean over ``partners``), and the swap cost between them;
    beside the row, the per-task picks (:func:`~benchmarks.question_reading.pick_with_questions`)."""
    own, plan = parts
    domains = frame["domain"].to_numpy()
    per_task = pick_with_questions(scorer, frame, partners)
    summary = {r["domain"]: r for r in summarise(per_task, bootstrap=0, seed=0)}
    row = {"model": name, "question_share": question_share(own, plan),
           "question_share_by_domain": {d: question_share(own[domains == d], plan[domains == d]) for d in sorted(set(domains))},
           "own": summary["all"]["own"]["mean"], "swapped": summary["all"]["swapped"]["mean"],
           "swap_cost": summary["all"]["swap_cost"]["mean"],
           "swap_cost_by_domain": {d: r["swap_cost"]["mean"] for d, r in summary.items() if d != "all"}}
    return row, per_task


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "configs" / "default.yaml"))
    ap.add_argument("--tasks", type=int, default=60, help="held-out tasks per domain (default 60, as question_reading)")
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=10, help="re-runs per candidate for its expected quality")
    ap.add_argument("--seed", type=int, default=7331, help="seed of the held-out tasks (default 7331, as question_reading)")
    ap.add_argument("--swap-seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="seeds of the derangements (default 0 1 2 3 4)")
    ap.add_argument("--model-seeds", type=int, nargs="+", default=[0, 1, 2], help="the ensemble's members (default 0 1 2)")
    ap.add_argument("--collect-tasks", type=int, default=None,
                    help="distinct training tasks per domain of the members' collection (default: the config's)")
    largest = max(qr_parser().get_default("curve"))
    ap.add_argument("--held-out-from", type=int, default=largest,
                    help="tasks per domain of the collection the pool is held out from, at least the members' "
                         f"(default {largest}: question_reading's largest curve point, so the same pool)")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples of the ensemble-vs-members intervals")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if len(set(args.model_seeds)) < 2:
        ap.error("an ensemble needs at least two distinct --model-seeds")
    use_sibling_data()
    import torch

    from orchrm.evaluation.metrics import paired_difference

    if args.threads:
        torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    # the config and pool question_reading builds (with its own --bootstrap: the pool's cache key holds it)
    config = benchmark_config(args.config, tasks=args.tasks, candidates=args.candidates, repeats=args.repeats, seed=args.seed,
                              bootstrap=qr_parser().get_default("bootstrap"))
    if args.collect_tasks is not None:
        config = with_tasks(config, args.collect_tasks)
    held_out_from = pool_collection_arg(ap, [config.collect.tasks_per_domain], args.held_out_from)
    pool_config, _, frame, swap_seeds, partners = scoring_pool(config, held_out_from, args.swap_seeds)

    models, pairs, trained = {}, {}, {}
    for seed in dict.fromkeys(args.model_seeds):
        cfg = with_seed(config, seed)
        table = held_out_pairs(cfg, frame)
        print(f"== model seed {seed}", file=sys.stderr, flush=True)
        fitted = steps.fit_cached(table, cfg.model, cfg.train)
        models[f"seed {seed}"], pairs[f"seed {seed}"] = fitted.model, len(table.frame)
        # seconds where this run trained the model, None where it loaded it from the cache
        trained[f"seed {seed}"] = fitted.info.get("train_seconds")

    # correlations and shares do not depend on a model's reward scale: the rewards are taken as scored
    scorers = {name: remembered(rm_scorer(m)) for name, m in models.items()}
    scorers["ensemble"] = remembered(rm_scorer(ensemble_of(list(models.values()))))
    parts = {name: centred_rewards(scorer, frame, partners) for name, scorer in scorers.items()}
    rows, picks = [], {}
    for name, scorer in scorers.items():
        row, picks[name] = model_row(name, scorer, frame, partners, parts[name])
        rows.append(row)
    pairwise = agreement({name: parts[name] for name in models})
    members = len(models)
    rho_q = float(np.mean([r["question_correlation"] for r in pairwise]))
    rho_p = float(np.mean([r["plan_correlation"] for r in pairwise]))
    member_share = float(np.mean([r["question_share"] for r in rows if r["model"] != "ensemble"]))
    # the ensemble's question share if the members' parts had equal spreads: each part kept by its agreement
    kept_q, kept_p = kept_by_mean(rho_q, members), kept_by_mean(rho_p, members)
    predicted = predicted_share(member_share, kept_q, kept_p)
    # the ensemble's picks against its members' mean pick, task by task
    tasks = picks["ensemble"]["task_id"].to_numpy()
    versus_members = {}
    for variant in ("own", "swapped"):
        members_mean = np.mean([picks[name][variant].to_numpy() for name in models], axis=0)
        d = paired_difference(picks["ensemble"][variant].to_numpy() - members_mean, tasks, bootstrap=args.bootstrap, seed=args.seed)
        versus_members[variant] = {"mean": d.mean, "ci_low": d.ci_low, "ci_high": d.ci_high}
    for r in rows:
        print(f"{r['model']}: question share {r['question_share']:.3f}, own {r['own']:.3f}, swap cost {100 * r['swap_cost']:+.1f}",
              file=sys.stderr, flush=True)
    result = {
        "benchmark": "ensemble reading: what the seed ensemble keeps of its members' question reading (issue 24)",
        **provenance(command_line("benchmarks.ensemble_reading", ap, args), torch=torch.__version__,
                     torch_threads=torch.get_num_threads()),
        "settings": {"tasks": args.tasks, "candidates": args.candidates, "repeats": args.repeats, "seed": args.seed,
                     "swap_seeds": swap_seeds, "model_seeds": list(dict.fromkeys(args.model_seeds)),
                     "held_out_from": pool_config.collect.tasks_per_domain, "config": shown_path(args.config),
                     "collection_tasks_per_domain": config.collect.tasks_per_domain},
        "pool": {"tasks": int(frame["task_id"].nunique()), "rows": len(frame)},
        "pairs": pairs,
        "train_seconds": trained,
        "models": rows,
        "agreement": pairwise,
        "mean_question_correlation": rho_q,
        "mean_plan_correlation": rho_p,
        "kept_by_mean": {"question": kept_q, "plan": kept_p},
        "members_mean_question_share": member_share,
        "predicted_ensemble_question_share": predicted,
        "ensemble_minus_members_mean": versus_members,
        "seconds": round(time.perf_counter() - t_start, 1),
    }
    print(f"wrote {write_json(args.out / 'ensemble_reading.json', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
