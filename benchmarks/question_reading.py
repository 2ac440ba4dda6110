"""Does the reward model read the question? Best-of-N with the task's own question, another
task's, and none (issue 24).

The default model (``configs/default.yaml``: the built-in collection, pairs, model and training
settings, as :mod:`benchmarks.best_of_n` builds it) picks among ``--candidates`` base-sampler plans of
fresh held-out tasks (``--seed`` 7331: never collected, never tuned on), each plan's expected
quality from ``--repeats`` re-runs. The same candidates are scored three ways:

- ``own``: with the task's own question (what serving does);
- ``swapped``: with the question of another task of the same domain (a seeded derangement within
  each domain, :func:`derangement`), averaged over the derangements of ``--swap-seeds``: what is
  left when the model cannot read *this* question. One derangement alone moved a model's swap cost
  by up to 3 points (which partner's question a task gets matters as much as the model), so the
  figure is the mean over several, each derangement's figure beside it;
- ``plan_only``: with an empty question: the plan alone.

Per domain: the expected quality of each pick with a 95% bootstrap interval over tasks, the
paired difference own - swapped (the swap cost: what reading the question buys), the share of
tasks whose pick the swap changes (averaged over the derangements), and the share of the random
-> expected-oracle gap closed; beside them random, cost-only, length-only, the expected-quality
oracle and "the plan best for another task": the expected-oracle plan of each swap partner,
executed on this task ``--repeats`` times and averaged over the partners (how much the sandbox
rewards reading the question: oracle minus it). The oracle chooses on re-runs of its own (the
pool's ``oracle_estimate``) and is scored on the others: chosen and scored on the same re-runs it
looks better than it is (the winner's curse): ``in_sample_oracle`` reports that overstated figure
beside it.

Beside the reward model, pairwise logistic regressions on question features crossed with plan
features (:mod:`benchmarks.common.feature_baseline`) are fitted on the same pair table and read
the same pool the same three ways: an estimate of what the text allows. ``logreg`` reads the
domain, its question features and word n-grams; ``logreg_ngrams`` the domain and n-grams;
``logreg_domain`` the domain alone (a per-domain plan prior: what a model that ignores the question
can reach); ``logreg_latent`` the domain and the sandbox's own latent description of each task
(:func:`~benchmarks.common.feature_baseline.latent_features`: the step counts, traps, popularity
and difficulty the simulator decides outcomes by), looked up by question: not what the text shows
but what a perfect reader of it could extract, so its gain from the question bounds what a
bilinear reader can learn from the same pairs; ``mlp_latent`` reads the same latent description with a small
MLP (:class:`~benchmarks.common.feature_baseline.PairwiseMLP`) instead of a bilinear form, and
``mlp`` reads ``logreg``'s features of the text with it, so neither bound is one of linearity
(each MLP is fitted once per ``--baseline-seeds`` seed). ``*_named`` and ``*_shown`` read the
latent description with less of the entities' popularity, to say where the text runs out: of a
multihop or web question ``named`` keeps the popularity of the entity the question names (a
multihop question names neither its later hops' entities nor, from StrategyQA, its facts), and
``shown`` gives that entity's popularity as its name shows it
(:func:`~benchmarks.common.feature_baseline.shown_popularity`: the naming rules read back, right
where the name follows the popularity): in multihop, where the trap and the hops are in the text
too, what a perfect reader of the text could know; ``*_text_shown`` reads the text as ``logreg`` does and that reading of the name beside it.
``*_latent_asked`` read the latent description with what the question asks beside it (a web
question's attribute, a multihop question's relations: words of the task's state that the rest
leaves out).
``rule`` is the specialized orchestrator's rule of thumb (:func:`rule_scorer`, no
training): the one part of the pair table that is written by reading the question, the
``specialized-over-base`` pairs, comes from it. A learning curve repeats the reward model
(``--model-seeds`` seeds, model and training seed together), ``logreg``, ``logreg_latent``, ``mlp``
and ``mlp_latent`` (those of ``--baselines``; each MLP with every ``--baseline-seeds`` seed) over
collections of
``--curve`` distinct tasks per domain. At the
default config's point every seed is also checked against the targets, and its trained model (the
mean of the weights from the best validation epoch on) is compared with the same run's best epoch
alone (what ``weight_average: none`` returns). The default config's seeds are also scored as one
ensemble, trained apart (:func:`ensemble_of`: the model ``orchrm train --members 3`` trains, the
mean of the members' standardised rewards), with the same targets.

    nice -n 19 python -m benchmarks.question_reading            # writes results/question_reading.json
    nice -n 19 python -m benchmarks.question_reading --tasks 4 --repeats 2 --curve 4 --model-seeds 0 --out /tmp/qr

Collections, pairs, models and the pool are cached under ``.orchrm/bench``
(:mod:`benchmarks.common.steps`).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from benchmarks.common import steps
from benchmarks.common.feature_baseline import (
    PairwiseLogit,
    PairwiseMLP,
    QuestionFeatures,
    latent_table,
)
from benchmarks.common.results_io import (
    RESULTS,
    ROOT,
    command_line,
    provenance,
    shown_path,
    use_sibling_data,
    write_json,
)
from orchrm.config import PipelineConfig

#: the ways a candidate set is scored: the question the scorer is shown
VARIANTS = ("own", "swapped", "plan_only")
#: what the plan-only variant shows in place of the question
NO_QUESTION = ""
#: the reference selectors (as :func:`orchrm.evaluation.selectors.best_of_n_picks` names them)
REFERENCES = ("random", "length_only", "cost_only", "expected_oracle")
#: the baselines: name -> the question features each reads (``logreg*``: bilinear, ``mlp*``: a small MLP)
BASELINES: dict[str, QuestionFeatures] = {
    "logreg": QuestionFeatures(),
    "logreg_ngrams": QuestionFeatures(question_features=False),
    "logreg_domain": QuestionFeatures(question_features=False, ngrams=False),
    "logreg_latent": QuestionFeatures(question_features=False, ngrams=False, latent=True),
    "logreg_latent_asked": QuestionFeatures(question_features=False, ngrams=False, latent=True, latent_asked=True),
    "logreg_named": QuestionFeatures(question_features=False, ngrams=False, latent=True, latent_view="named"),
    "logreg_shown": QuestionFeatures(question_features=False, ngrams=False, latent=True, latent_view="shown"),
    "logreg_text_shown": QuestionFeatures(latent=True, latent_view="shown"),
    "mlp": QuestionFeatures(),
    "mlp_latent": QuestionFeatures(question_features=False, ngrams=False, latent=True),
    "mlp_latent_asked": QuestionFeatures(question_features=False, ngrams=False, latent=True, latent_asked=True),
    "mlp_named": QuestionFeatures(question_features=False, ngrams=False, latent=True, latent_view="named"),
    "mlp_shown": QuestionFeatures(question_features=False, ngrams=False, latent=True, latent_view="shown"),
    "mlp_text_shown": QuestionFeatures(latent=True, latent_view="shown"),
}
#: the baselines a learning curve fits beside the reward model (those of ``--baselines``)
CURVE_BASELINES = ("logreg", "logreg_latent", "mlp", "mlp_latent")
#: a scorer: rewards of (question, plan) rows, each row's domain given (None for no question)
Scorer = Callable[[list[str], list[str], list[Any]], np.ndarray]


def derangement(task_ids: Sequence[str], domains: Sequence[str], *, seed: int) -> dict[str, str]:
    """A partner for every task: another task of the same domain, never itself, each task the
    partner of exactly one (a permutation without fixed points within each domain). Within a
    domain the tasks are put in a seeded random order and each is paired with the next, the
    last with the first: a single cycle, so no task is its own partner.

    >>> partner = derangement(["a", "b", "c", "d"], ["x", "x", "y", "y"], seed=0)
    >>> partner == {"a": "b", "b": "a", "c": "d", "d": "c"}
    True
    >>> partner = derangement(["a", "b", "c"], ["x", "x", "x"], seed=0)
    >>> sorted(partner.values()) == ["a", "b", "c"] and all(t != p for t, p in partner.items())
    True
    """
    frame = pd.DataFrame({"task_id": list(task_ids), "domain": list(domains)}).drop_duplicates("task_id")
    rng = np.random.default_rng(seed)
    partner: dict[str, str] = {}
    for domain, g in frame.groupby("domain", sort=True):
        ids = sorted(g["task_id"])
        if len(ids) < 2:
            raise ValueError(f"domain {domain!r} has {len(ids)} task: a swapped question needs two tasks per domain; raise --tasks")
        order = [ids[i] for i in rng.permutation(len(ids))]
        partner |= {t: order[(i + 1) % len(order)] for i, t in enumerate(order)}
    return partner


def shown_questions(frame: pd.DataFrame, variant: str, partner: dict[str, str] | None = None) -> tuple[list[str], list[Any]]:
    """The question (and its domain) each pool row is scored with in ``variant``; ``swapped``
    shows each task the question of its ``partner``."""
    if variant == "own":
        return list(frame["question"]), list(frame["domain"])
    if variant == "swapped":
        if partner is None:
            raise ValueError("the swapped variant needs a partner for each task (see derangement)")
        question_of = frame.drop_duplicates("task_id").set_index("task_id")["question"]
        return [question_of[partner[t]] for t in frame["task_id"]], list(frame["domain"])
    if variant == "plan_only":
        return [NO_QUESTION] * len(frame), [None] * len(frame)
    raise ValueError(f"unknown variant {variant!r}; use one of {VARIANTS}")


def _pick_ids(frame: pd.DataFrame, column: str) -> pd.Series:
    """Per task, the plan_id of the row with the largest ``column`` (ties: the earliest candidate)."""
    rows = frame.sort_values(["task_id", "candidate"], kind="stable")
    return rows.loc[rows.groupby("task_id", sort=True)[column].idxmax()].set_index("task_id")["plan_id"]


def swapped_column(k: int) -> str:
    """The per-task column of the swapped pick under the ``k``-th derangement."""
    return f"swapped_{k}"


def swapped_columns(per_task: pd.DataFrame) -> list[str]:
    """The per-derangement swapped columns of a :func:`pick_with_questions` table, in order."""
    columns = []
    while (c := swapped_column(len(columns))) in per_task.columns:
        columns.append(c)
    return columns


def pick_with_questions(scorer: Scorer, frame: pd.DataFrame, partners: Sequence[dict[str, str]]) -> pd.DataFrame:
    """Per task of ``frame`` (one pool seed's rows): the expected quality of ``scorer``'s pick in
    each variant (columns :data:`VARIANTS`; ``swapped`` is the mean over the derangements
    ``partners``, :func:`swapped_column` each one's), of each reference selector, and
    ``pick_changed`` (the share of derangements whose swapped pick is another plan than the own one)."""
    from orchrm.evaluation.selectors import best_of_n_picks

    if not partners:
        raise ValueError("no derangement to swap the questions by: pass at least one swap seed")
    n = int(frame["candidate"].max()) + 1
    plans = list(frame["plan_text"])

    def picked(variant: str, partner: dict[str, str] | None = None) -> tuple[pd.DataFrame, pd.Series]:
        questions, domains = shown_questions(frame, variant, partner)
        scored = frame.assign(reward=scorer(questions, plans, domains))
        return best_of_n_picks(scored, n).set_index(["task_id", "selector"])["expected"].unstack(), _pick_ids(scored, "reward")

    own, own_ids = picked("own")
    out = own[list(REFERENCES)].copy()
    out.insert(0, "domain", frame.drop_duplicates("task_id").set_index("task_id")["domain"].reindex(out.index))
    out["own"] = own["reward_model"]
    changed = []
    for k, partner in enumerate(partners):
        swapped, swapped_ids = picked("swapped", partner)
        out[swapped_column(k)] = swapped["reward_model"]
        changed.append((own_ids != swapped_ids.reindex(own_ids.index)).astype(float))
    out["swapped"] = out[swapped_columns(out)].mean(axis=1)
    out["plan_only"] = picked("plan_only")[0]["reward_model"]
    out["pick_changed"] = pd.concat(changed, axis=1).mean(axis=1)
    return out.reset_index()


# ---------------------------------------------------------------------------------------------
# summaries


def _mean_ci(values: np.ndarray, tasks: np.ndarray, bootstrap: int, seed: int) -> dict[str, float]:
    from orchrm.evaluation.metrics import bootstrap_ci

    lo, hi = bootstrap_ci(values, tasks, n=bootstrap, seed=seed)
    return {"mean": float(np.mean(values)), "ci_low": lo, "ci_high": hi}


def _diff(a: np.ndarray, b: np.ndarray, tasks: np.ndarray, bootstrap: int, seed: int) -> dict[str, float]:
    from orchrm.evaluation.metrics import paired_difference

    d = paired_difference(a - b, tasks, bootstrap=bootstrap, seed=seed)
    return {"mean": d.mean, "ci_low": d.ci_low, "ci_high": d.ci_high}


def gap_closed(picked: np.ndarray, random: np.ndarray, oracle: np.ndarray, *, bootstrap: int, seed: int) -> dict[str, float]:
    """``sum(picked - random) / sum(oracle - random)`` over tasks (the ratio of sums of
    :func:`orchrm.evaluation.selectors.gap_closed_table`) with a 95% bootstrap interval over tasks;
    NaN where no task has a gap."""
    num, den = picked - random, oracle - random
    if den.sum() <= 1e-12:
        return {"mean": math.nan, "ci_low": math.nan, "ci_high": math.nan}
    draws = np.random.default_rng(seed).integers(0, len(num), size=(bootstrap, len(num)))
    d = den[draws].sum(1)
    ratios = np.where(d > 1e-12, num[draws].sum(1) / np.where(d > 1e-12, d, 1.0), np.nan)
    lo, hi = np.nanquantile(ratios, [0.025, 0.975]) if bootstrap else (math.nan, math.nan)
    return {"mean": float(num.sum() / den.sum()), "ci_low": float(lo), "ci_high": float(hi)}


def _by_domain(per_task: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    return [(d, per_task[per_task["domain"] == d]) for d in sorted(per_task["domain"].unique())] + [("all", per_task)]


def summarise(per_task: pd.DataFrame, *, bootstrap: int, seed: int) -> list[dict[str, Any]]:
    """Per domain and ``all``: each variant's mean expected quality [95% interval], the swap cost
    (own - swapped, the mean over derangements) and the plan-only cost (own - plan_only) as paired
    differences, each derangement's swap cost alone (``swap_cost_by_derangement``: means), the share of
    picks the swap changes, the gap closed in each variant, and the own pick minus cost-only and
    length-only (paired)."""
    rows = []
    for domain, t in _by_domain(per_task):
        tasks = t["task_id"].to_numpy()
        rand, oracle = t["random"].to_numpy(), t["expected_oracle"].to_numpy()
        row: dict[str, Any] = {"domain": domain, "tasks": len(t)}
        for v in VARIANTS:
            row[v] = _mean_ci(t[v].to_numpy(), tasks, bootstrap, seed)
            row[f"gap_closed_{v}"] = gap_closed(t[v].to_numpy(), rand, oracle, bootstrap=bootstrap, seed=seed)
        own = t["own"].to_numpy()
        row["swap_cost"] = _diff(own, t["swapped"].to_numpy(), tasks, bootstrap, seed)
        row["swap_cost_by_derangement"] = [float(np.mean(own - t[c].to_numpy())) for c in swapped_columns(t)]
        row["plan_only_cost"] = _diff(own, t["plan_only"].to_numpy(), tasks, bootstrap, seed)
        row["over_cost_only"] = _diff(own, t["cost_only"].to_numpy(), tasks, bootstrap, seed)
        row["over_length_only"] = _diff(own, t["length_only"].to_numpy(), tasks, bootstrap, seed)
        row["pick_changed"] = float(t["pick_changed"].mean())
        rows.append(row)
    return rows


def target_checks(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Issue 24's targets read off the reward model's :func:`summarise` rows: the swap cost over
    all domains, and per domain the own pick against cost-only and length-only (mean above zero)
    and the gap closed."""
    from benchmarks.common.targets import QUESTION_READING as T

    by = {r["domain"]: r for r in rows}
    domains = [d for d in by if d != "all"]
    per_domain = {d: {"over_cost_only": by[d]["over_cost_only"]["mean"] > 0, "over_length_only": by[d]["over_length_only"]["mean"] > 0,
                      "gap_closed": by[d]["gap_closed_own"]["mean"] >= T.gap_closed} for d in domains}
    swap = by["all"]["swap_cost"]["mean"]
    return {"swap_points": T.swap_points, "gap_closed": T.gap_closed, "swap_cost_points": round(100 * swap, 2),
            "swap_met": bool(100 * swap >= T.swap_points), "per_domain": per_domain,
            "met": bool(100 * swap >= T.swap_points and all(all(v.values()) for v in per_domain.values()))}


def versus(ours: pd.DataFrame, theirs: pd.DataFrame, *, bootstrap: int, seed: int) -> list[dict[str, Any]]:
    """Per domain and ``all``, paired over the same tasks: ``own`` (our own-question pick minus
    theirs) and ``swap_cost`` (our swap cost minus theirs)."""
    both = ours.merge(theirs, on=["task_id", "domain"], suffixes=("", "_theirs"))
    rows = []
    for domain, t in _by_domain(both):
        tasks = t["task_id"].to_numpy()
        ours_cost, theirs_cost = (t["own"] - t["swapped"]).to_numpy(), (t["own_theirs"] - t["swapped_theirs"]).to_numpy()
        rows.append({"domain": domain, "own": _diff(t["own"].to_numpy(), t["own_theirs"].to_numpy(), tasks, bootstrap, seed),
                     "swap_cost": _diff(ours_cost, theirs_cost, tasks, bootstrap, seed)})
    return rows


def references(per_task: pd.DataFrame, *, bootstrap: int, seed: int) -> list[dict[str, Any]]:
    """Per domain and ``all``: the reference selectors, ``in_sample_oracle`` (the best expected
    quality of the candidates: chosen and scored on the same re-runs) and ``other_task_best`` [95%
    interval], and the question's worth, expected oracle - other_task_best (paired)."""
    rows = []
    for domain, t in _by_domain(per_task):
        tasks = t["task_id"].to_numpy()
        row: dict[str, Any] = {"domain": domain, "tasks": len(t)}
        for name in (*REFERENCES, "in_sample_oracle", "other_task_best"):
            row[name] = _mean_ci(t[name].to_numpy(), tasks, bootstrap, seed)
        row["question_worth"] = _diff(t["expected_oracle"].to_numpy(), t["other_task_best"].to_numpy(), tasks, bootstrap, seed)
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# the pieces the run is made of


def other_task_best(per_task: pd.DataFrame, frame: pd.DataFrame, partners: Sequence[dict[str, str]], config: PipelineConfig,
                    ) -> pd.Series:
    """Per task: the expected quality, on this task, of its partners' expected-oracle plans
    (:func:`orchrm.evaluation.pool.expected_quality`, ``evaluate.repeats`` re-runs), averaged over
    the derangements ``partners``."""
    from orchrm.evaluation.pool import expected_quality, held_out_tasks
    from orchrm.execution.executor import MultiAgentExecutor
    from orchrm.plans import Plan
    from orchrm.util.digests import stable_id

    best = _pick_ids(frame, "oracle_estimate")  # the expected oracle's pick (its own re-runs)
    text_of = frame.drop_duplicates(["task_id", "plan_id"]).set_index(["task_id", "plan_id"])["plan_text"]
    tasks = {t.task_id: t for t in held_out_tasks(config) if t.task_id in set(per_task["task_id"])}
    ex = MultiAgentExecutor(noise=config.sandbox)
    seed = int(stable_id("other-task-best", config.evaluate.seed, n=12), 16)
    repeats = max(1, config.evaluate.repeats)
    quality: dict[tuple[str, str], float] = {}  # two partners may share an oracle plan: executed once

    def on_task(task_id: str, plan_text: str) -> float:
        if (task_id, plan_text) not in quality:
            quality[(task_id, plan_text)] = expected_quality(ex, tasks[task_id], Plan.parse(plan_text), repeats=repeats, seed=seed)
        return quality[(task_id, plan_text)]

    return pd.Series({task_id: float(np.mean([on_task(task_id, text_of[(partner[task_id], best[partner[task_id]])]) for partner in partners]))
                      for task_id in per_task["task_id"]})


def rm_scorer(model: Any) -> Scorer:
    from orchrm.evaluation.metrics import score_texts
    from orchrm.model.texts import plan_prompt

    return lambda questions, plans, domains: score_texts(model, [plan_prompt(q) for q in questions], plans)


def rule_scorer(frame_domains: Sequence[str]) -> Scorer:
    """The specialized orchestrator's rule of thumb as a scorer: each domain's
    :class:`~orchrm.execution.tasks.base.PlanHeuristic` applied to the question shown, without the
    sampler's Gumbel noise. It reads only the question text, so it shows how much the rule that
    writes the ``specialized-over-base`` pairs reads the question. It scores the rows of a pool
    frame whose domains are ``frame_domains`` (the plan-alone variant shows it no domain: it then
    reads an empty question of the row's domain); a domain without a rule scores every plan 0."""
    from orchrm.execution.tasks.base import plan_heuristic
    from orchrm.plans import Plan

    def score(questions: list[str], plans: list[str], domains: list[Any]) -> np.ndarray:
        if len(questions) != len(frame_domains):
            raise ValueError(f"the rule scores the {len(frame_domains)} rows of its pool frame, not {len(questions)}")
        out = np.zeros(len(questions))
        for i, (question, plan, domain) in enumerate(zip(questions, plans, frame_domains, strict=True)):
            if (rule := plan_heuristic(domain)) is not None:
                out[i] = rule.score(rule.features(question), Plan.parse(plan))
        return out

    return score


def ensemble_of(models: Sequence[Any]) -> Any:
    """The models of seeds s, s + 1, ... as one orchrm ensemble (``ModelConfig.members``): member
    ``k`` takes the weights and training reward statistics of ``models[k]``. That is the model
    ``orchrm train --members K`` trains (its member ``k`` is the model seed ``s + k`` trains alone;
    ``tests/model/test_members.py``), but for the ensemble's own calibration: one scale for every
    reward, which changes no pick."""
    from orchrm.model.reward_model import BradleyTerryModel

    first = models[0]
    ensemble = BradleyTerryModel(config=first.config.model_copy(update={"members": len(models)}), lr=first.lr)
    for k, model in enumerate(models):
        ensemble.set_member(k, model)
    return ensemble.eval()


def baseline_scorer(model: PairwiseLogit) -> Scorer:
    return lambda questions, plans, domains: model.score(questions, plans, domains=domains)


def pairwise_accuracy(scorer: Scorer, pairs: pd.DataFrame) -> float:
    """Share of the ``test`` pairs the scorer ranks right (a tie counts as wrong)."""
    test = pairs[pairs["split"] == "test"]
    n = len(test)
    domains = list(test["domain"]) * 2
    r = scorer([*test["prompt"], *test["prompt"]], [*test["chosen"], *test["rejected"]], domains)
    return float((r[:n] > r[n:]).mean())


def _one_blas_thread() -> Any:
    """One BLAS thread for the small matrices of a baseline fit (threadpoolctl, where installed):
    on a busy machine BLAS threads that wait on each other made a fit twenty times slower."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def fit_baselines(pairs: pd.DataFrame, names: Sequence[str], latent: Mapping[tuple[str, bool], dict[str, dict[str, float]]] | None = None,
                  seeds: Sequence[int] = (0,)) -> dict[str, tuple[PairwiseLogit, float]]:
    """Each baseline of ``names`` fitted on ``pairs`` (train split; l2 chosen on val), with its fit
    seconds; ``latent``: each question's latent features by kind (:func:`latent_questions`), for
    those that read them. An MLP baseline (``mlp*``, seeded) is fitted once per seed of ``seeds``:
    the first under its name, the others as ``<name>.seed<s>``; a logistic regression (convex) once."""
    out = {}
    for name in names:
        mlp = name.startswith("mlp")
        for i, seed in enumerate(seeds if mlp else seeds[:1]):
            key = name if i == 0 else f"{name}.seed{seed}"
            t0 = time.perf_counter()
            with _one_blas_thread():
                features = BASELINES[name]
                known = latent[features.latent_kind] if features.latent and latent is not None else None
                model = PairwiseMLP(features, latent=known, seed=seed) if mlp else PairwiseLogit(features, latent=known)
                model.fit(pairs)
            out[key] = (model, time.perf_counter() - t0)
            print(f"{key}: fitted in {out[key][1]:.1f} s, l2 {model.l2:g}", file=sys.stderr, flush=True)
    return out


def latent_questions(pool_config: PipelineConfig, kinds: Sequence[tuple[str, bool]] = (("all", False),)
                     ) -> dict[tuple[str, bool], dict[str, dict[str, float]]]:
    """The sandbox's latent features (:func:`benchmarks.common.feature_baseline.latent_table`) of
    every question a baseline may read, by kind (``QuestionFeatures.latent_kind``: view and
    whether with what the question asks; those of ``kinds``): the tasks of ``pool_config``'s
    collection (the largest curve point's, which holds every smaller one's: generators draw by seed
    and index) and of the pool held out from it."""
    from orchrm.evaluation.pool import held_out_tasks
    from orchrm.execution.collect import load_domain_tasks
    from orchrm.execution.sandbox.engine import SandboxBackend

    c = pool_config.collect
    tasks = [*load_domain_tasks(c.domains, c.tasks_per_domain, c.seed, c.sources or None), *held_out_tasks(pool_config)]
    backend = SandboxBackend(pool_config.sandbox)
    return {(view, asked): latent_table(tasks, backend, view, asked=asked) for view, asked in dict.fromkeys(kinds)}


def _per_task_records(t: pd.DataFrame) -> list[dict[str, Any]]:
    """Each task's row of :func:`pick_with_questions` (expected qualities to 4 decimals)."""
    return [{k: (round(float(v), 4) if isinstance(v, float) else v) for k, v in row.items()}
            for row in t.to_dict(orient="records")]


def _tasks_with_pairs(pairs: pd.DataFrame) -> dict[str, int]:
    """Distinct tasks with a pair, per domain and split (a finite data set may hold fewer than asked for)."""
    counts = pairs.groupby(["domain", "split"])["task_id"].nunique()
    return {f"{d}.{split}": int(n) for (d, split), n in counts.items()}


def _brief(per_task: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per domain and ``all``: the own-question pick's mean, its gap closed and its lead over cost-only."""
    return {r["domain"]: {"own": r["own"]["mean"], "gap_closed": r["gap_closed_own"]["mean"], "over_cost_only": r["over_cost_only"]["mean"]}
            for r in summarise(per_task, bootstrap=0, seed=0)}


def _default_seed_rows(curve: list[dict[str, Any]], tasks: int) -> list[tuple[int, list[dict[str, Any]]]]:
    """The reward model's curve rows at ``tasks`` per domain (the default config), by model seed."""
    by_seed: dict[int, list[dict[str, Any]]] = {}
    for r in curve:
        if r["scorer"] == "reward_model" and r["tasks_per_domain"] == tasks:
            by_seed.setdefault(r["model_seed"], []).append(r)
    return sorted(by_seed.items())


def _records(rows: list[dict[str, Any]], **extra: Any) -> list[dict[str, Any]]:
    return [{**extra, **r} for r in rows]


# ---------------------------------------------------------------------------------------------
# the command


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "configs" / "default.yaml"))
    ap.add_argument("--tasks", type=int, default=60, help="held-out tasks per domain (default 60)")
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=10, help="re-runs per candidate for its expected quality")
    ap.add_argument("--seed", type=int, default=7331, help="seed of the held-out tasks (default 7331)")
    ap.add_argument("--swap-seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                    help="seeds of the derangements that pair each task with another of its domain; the swapped "
                         "question's figures are their mean (default 0 1 2 3 4)")
    ap.add_argument("--curve", type=int, nargs="*", default=[50, 100, 200, 400],
                    help="distinct training tasks per domain of the learning curve's collections (none: no curve)")
    ap.add_argument("--held-out-from", type=int, default=None,
                    help="hold the pool out from a collection of this many tasks per domain, at least the largest "
                         "--curve point and the config's own (the default); 400 gives a run with --curve 200 the full "
                         "run's pool")
    ap.add_argument("--model-seeds", type=int, nargs="+", default=[0, 1, 2], help="model and training seeds per curve point")
    ap.add_argument("--seeded-up-to", type=int, default=200,
                    help="curve points with more tasks per domain train the first model seed only (a time budget)")
    ap.add_argument("--model-up-to", type=int, default=None,
                    help="curve points with more tasks per domain fit the baseline only, no reward model (a time budget)")
    ap.add_argument("--baselines", nargs="*", default=list(BASELINES), choices=list(BASELINES),
                    help="baselines fitted on the default config's pairs beside the reward model (default: all; "
                         "the flag alone: none)")
    ap.add_argument("--baseline-seeds", type=int, nargs="+", default=[0, 1, 2],
                    help="seeds of the MLP baselines, each fitted once per seed (default 0 1 2; the first keeps the "
                         "baseline's name, the others are <name>.seed<s>)")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    return ap


def curve_seeds(tasks: int, args: argparse.Namespace) -> list[int]:
    """The model seeds the reward model is trained with at a curve point of ``tasks`` per domain."""
    if args.model_up_to is not None and tasks > args.model_up_to:
        return []
    if args.seeded_up_to is not None and tasks > args.seeded_up_to:
        return list(args.model_seeds[:1])
    return list(args.model_seeds)


def benchmark_config(config_path: str | Path, *, tasks: int, candidates: int, repeats: int, seed: int,
                     bootstrap: int) -> PipelineConfig:
    """The config at ``config_path`` with its evaluation set to the benchmark's pool: ``tasks``
    fresh tasks per domain from ``seed``, one pool seed of ``candidates`` (the picks at N =
    candidates and their expected quality do not depend on the candidates' order), each re-run
    ``repeats`` times."""
    from orchrm.config import load_config, with_overrides

    base = load_config(config_path)
    evaluate_cfg = with_overrides(base.evaluate, {
        "tasks_per_domain": tasks, "candidates": candidates, "best_of": (candidates,), "pool_seeds": (0,),
        "repeats": repeats, "seed": seed, "bootstrap": bootstrap,
        "gates": base.evaluate.gates.model_dump() | {"best_of": candidates},
    })
    return base.model_copy(update={"evaluate": evaluate_cfg})


def with_tasks(config: PipelineConfig, tasks: int) -> PipelineConfig:
    from orchrm.config import with_overrides

    return config.model_copy(update={"collect": with_overrides(config.collect, {"tasks_per_domain": tasks})})


def first_pool_seed(pool_frame: pd.DataFrame, candidates: int) -> pd.DataFrame:
    """The rows of a held-out pool that the benchmark scores: its first pool seed's first ``candidates``."""
    first = pool_frame["pool_seed"] == pool_frame["pool_seed"].min()
    return pool_frame[first & (pool_frame["candidate"] < candidates)].reset_index(drop=True)


def held_out_pairs(cfg: PipelineConfig, frame: pd.DataFrame) -> steps.PairTable:
    """The pair table of ``cfg``'s collection (cached), refused if it holds a task of the pool ``frame``."""
    pairs = steps.pair_table(cfg.collect, cfg.sandbox, cfg.pairs)
    if seen := set(pairs.frame["task_id"]) & set(frame["task_id"]):
        raise RuntimeError(f"{len(seen)} pool task(s) are in the collection of {cfg.collect.tasks_per_domain} tasks per domain "
                           f"(e.g. {sorted(seen)[:3]}); choose another --seed")
    return pairs


class ScoringPool(NamedTuple):
    """The held-out pool a run scores: its config (collection of the tasks it is held out from),
    the seconds it took to build (or load), its scored rows and the swap partners of its tasks."""

    config: PipelineConfig
    seconds: float
    frame: pd.DataFrame
    swap_seeds: list[int]
    partners: list[dict[str, str]]


def pool_collection(collections: Sequence[int], held_out_from: int | None = None) -> int:
    """Tasks per domain of the collection the pool is held out from: ``held_out_from``, by default
    the largest of ``collections`` (those the run trains on), which it may not be below, or the
    pool would hold tasks that a model trained on.

    >>> pool_collection([200, 50, 400]), pool_collection([200], 400)
    (400, 400)
    """
    largest = max(collections)
    if held_out_from is None:
        return largest
    if held_out_from < largest:
        raise ValueError(f"--held-out-from {held_out_from} is below the largest collection this run trains on "
                         f"({largest} tasks per domain), so the pool would hold training tasks: give at least "
                         f"{largest}, or leave it out")
    return held_out_from


def pool_collection_arg(ap: argparse.ArgumentParser, collections: Sequence[int], held_out_from: int | None) -> int:
    """:func:`pool_collection`, its refusal a usage error of ``ap`` (``--held-out-from``)."""
    try:
        return pool_collection(collections, held_out_from)
    except ValueError as exc:
        ap.error(str(exc))


def scoring_pool(config: PipelineConfig, held_out_from: int, swap_seeds: Sequence[int]) -> ScoringPool:
    """``config``'s pool (cached), held out from a collection of ``held_out_from`` tasks per domain
    (:func:`pool_collection`'s answer, so at least the config's own; generators draw by seed and
    index, so the pool is held out from every smaller collection too): its first pool seed's rows
    and one derangement per distinct seed of ``swap_seeds``."""
    pool_config = with_tasks(config, held_out_from)
    pool = steps.held_out_pool(pool_config.evaluate, pool_config.collect, pool_config.sandbox)
    frame = first_pool_seed(pool.pool.frame, config.evaluate.candidates)
    seeds = list(dict.fromkeys(swap_seeds))
    return ScoringPool(pool_config, pool.seconds, frame, seeds,
                       [derangement(frame["task_id"], frame["domain"], seed=s) for s in seeds])


def with_seed(config: PipelineConfig, seed: int) -> PipelineConfig:
    from orchrm.config import with_overrides

    return config.model_copy(update={"model": with_overrides(config.model, {"seed": seed}),
                                     "train": with_overrides(config.train, {"seed": seed})})


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    use_sibling_data()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    config = benchmark_config(args.config, tasks=args.tasks, candidates=args.candidates, repeats=args.repeats,
                              seed=args.seed, bootstrap=args.bootstrap)
    default_tasks = config.collect.tasks_per_domain
    # the pool is held out from the largest collection, so from every one
    held_out_from = pool_collection_arg(ap, [default_tasks, *args.curve], args.held_out_from)
    pool_config, pool_seconds, frame, swap_seeds, partners = scoring_pool(config, held_out_from, args.swap_seeds)
    seconds: dict[str, float] = {"pool": round(pool_seconds, 1)}

    train_seconds: dict[str, float] = {}  # by model cache key: a model trained earlier in this run is loaded later

    def trained(cfg: PipelineConfig) -> tuple[steps.PairTable, steps.Fitted]:
        pairs = held_out_pairs(cfg, frame)
        fitted = steps.fit_cached(pairs, cfg.model, cfg.train)
        if "train_seconds" in fitted.info:
            train_seconds[fitted.info["cache_key"]] = fitted.info["train_seconds"]
        return pairs, fitted

    # the default model, and the baselines on its pairs
    pairs, fitted = trained(config)
    head = pick_with_questions(rm_scorer(fitted.model), frame, partners)
    t0 = time.perf_counter()
    others = other_task_best(head, frame, partners, pool_config)
    head["other_task_best"] = head["task_id"].map(others)
    seconds["other_task_best"] = round(time.perf_counter() - t0, 1)
    head["in_sample_oracle"] = head["task_id"].map(frame.groupby("task_id")["expected_quality"].max())
    per_task = {"reward_model": head}
    accuracy = {"reward_model": pairwise_accuracy(rm_scorer(fitted.model), pairs.frame)}
    kinds = [BASELINES[b].latent_kind for b in args.baselines if BASELINES[b].latent]
    latent = latent_questions(pool_config, kinds) if kinds else None
    fitted_baselines = fit_baselines(pairs.frame, args.baselines, latent, args.baseline_seeds)
    info = {"reward_model": fitted.info}
    for name, (model, fit_s) in fitted_baselines.items():
        per_task[name] = pick_with_questions(baseline_scorer(model), frame, partners)
        accuracy[name] = pairwise_accuracy(baseline_scorer(model), pairs.frame)
        info[name] = model.describe() | {"fit_seconds": round(fit_s, 1)}
    # the rule of thumb that writes the specialized-over-base pairs, read the same three ways (no training)
    per_task["rule"] = pick_with_questions(rule_scorer(list(frame["domain"])), frame, partners)
    rows = [r for name, t in per_task.items() for r in _records(summarise(t, bootstrap=args.bootstrap, seed=args.seed), scorer=name)]
    for name, t in per_task.items():
        print(f"{name}: " + "; ".join(f"{r['domain']} own {r['own']['mean']:.3f} swap cost {100 * r['swap_cost']['mean']:+.1f}"
                                       for r in summarise(t, bootstrap=0, seed=0)), file=sys.stderr, flush=True)

    # the learning curve
    curve, best_epoch, seed_models = [], [], []
    t0 = time.perf_counter()
    for tasks in args.curve:
        cfg = with_tasks(config, tasks)
        for seed in curve_seeds(tasks, args):
            print(f"== curve: {tasks} tasks per domain, seed {seed}", file=sys.stderr, flush=True)
            cpairs, cfit = trained(with_seed(cfg, seed))
            t = pick_with_questions(rm_scorer(cfit.model), frame, partners)
            if tasks == default_tasks:
                seed_models.append(cfit.model)
            if tasks == default_tasks and (best_model := cfit.best_epoch_model()) is not None:
                # the same run's best validation epoch alone: what weight_average="none" returns
                best_t = pick_with_questions(rm_scorer(best_model), frame, partners)
                best_epoch.append({"model_seed": seed, "best_epoch": cfit.info.get("best_epoch"),
                                   "averaged_epochs": cfit.info.get("averaged_epochs"), "averaged": _brief(t), "best": _brief(best_t),
                                   "difference": versus(t, best_t, bootstrap=args.bootstrap, seed=args.seed)})
            curve += _records(summarise(t, bootstrap=args.bootstrap, seed=args.seed), scorer="reward_model",
                              tasks_per_domain=tasks, model_seed=seed, pairs=int(len(cpairs.frame)),
                              tasks_with_pairs=_tasks_with_pairs(cpairs.frame),
                              train_seconds=train_seconds.get(cfit.info["cache_key"]),
                              pairwise_accuracy=pairwise_accuracy(rm_scorer(cfit.model), cpairs.frame))
        if curve_baselines := [b for b in CURVE_BASELINES if b in args.baselines]:
            cpairs = steps.pair_table(cfg.collect, cfg.sandbox, cfg.pairs)
        for name in curve_baselines:
            for model, fit_s in fit_baselines(cpairs.frame, [name], latent, args.baseline_seeds).values():
                t = pick_with_questions(baseline_scorer(model), frame, partners)
                curve += _records(summarise(t, bootstrap=args.bootstrap, seed=args.seed), scorer=name,
                                  tasks_per_domain=tasks, model_seed=getattr(model, "seed", None), pairs=int(len(cpairs.frame)),
                                  tasks_with_pairs=_tasks_with_pairs(cpairs.frame), train_seconds=round(fit_s, 1),
                                  pairwise_accuracy=pairwise_accuracy(baseline_scorer(model), cpairs.frame))
    seconds["curve"] = round(time.perf_counter() - t0, 1)
    # the default config's seeds, trained apart, as one ensemble: the mean of their standardised rewards
    seed_ensemble, seed_ensemble_targets = [], None
    if len(seed_models) > 1:
        t = pick_with_questions(rm_scorer(ensemble_of(seed_models)), frame, partners)
        seed_ensemble = _records(summarise(t, bootstrap=args.bootstrap, seed=args.seed), scorer="seed_ensemble",
                                 model_seeds=curve_seeds(default_tasks, args))
        seed_ensemble_targets = target_checks(seed_ensemble)
        print("seed ensemble: " + "; ".join(f"{r['domain']} own {r['own']['mean']:.3f} swap cost {100 * r['swap_cost']['mean']:+.1f}"
                                            for r in seed_ensemble), file=sys.stderr, flush=True)
    seconds["total"] = round(time.perf_counter() - t_start, 1)

    result = {
        "benchmark": "question reading: best-of-N with the task's own question, another task's, and none (issue 24)",
        **provenance(command_line("benchmarks.question_reading", ap, args), torch=torch.__version__,
                     torch_threads=torch.get_num_threads()),
        "settings": {"tasks": args.tasks, "candidates": args.candidates, "repeats": args.repeats, "seed": args.seed,
                     "swap_seeds": swap_seeds, "curve": list(args.curve), "model_seeds": list(args.model_seeds),
                     "baseline_seeds": list(args.baseline_seeds),
                     "curve_model_seeds": {str(t): curve_seeds(t, args) for t in args.curve},
                     "bootstrap": args.bootstrap, "config": shown_path(args.config),
                     "collection_tasks_per_domain": default_tasks, "no_question": NO_QUESTION},
        "pool": {"tasks": int(frame["task_id"].nunique()), "held_out_from_tasks_per_domain": pool_config.collect.tasks_per_domain},
        "models": info,
        "pairs": int(len(pairs.frame)),
        "pairwise_accuracy": accuracy,
        "seconds": seconds,
        "rows": rows,
        "references": references(head, bootstrap=args.bootstrap, seed=args.seed),
        "targets": target_checks([r for r in rows if r["scorer"] == "reward_model"]),
        # the same targets for every model seed of the default config (its curve point): one seed's picks are noisy
        "targets_by_seed": [{"model_seed": seed, **target_checks(rs)} for seed, rs in _default_seed_rows(curve, default_tasks)],
        # each baseline against the reward model on the same tasks: > 0 where the baseline's pick is better
        "baseline_minus_reward_model": [r for name in [*fitted_baselines, "rule"] for r in _records(
            versus(per_task[name], head, bootstrap=args.bootstrap, seed=args.seed), scorer=name)],
        "curve": curve,
        # the default config's model seeds as one ensemble (mean of standardised rewards), with its targets
        "seed_ensemble": seed_ensemble,
        "seed_ensemble_targets": seed_ensemble_targets,
        # the default config's mean of weights against the same run's best epoch alone, per model seed
        "weights_mean_minus_best_epoch": best_epoch,
        "per_task": {name: _per_task_records(per_task[name]) for name in ("reward_model", "logreg") if name in per_task},
    }
    print(f"wrote {write_json(args.out / 'question_reading.json', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
