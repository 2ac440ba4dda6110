"""The question-reading page (``question_reading.json``, issue 24) and its section of
``docs/results.md``: best-of-N with the task's own question, another task's and none, for the
reward model and the feature baselines; the references; the learning curve; and where the
information runs out, read off the paired differences the file holds."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.render.records import Benchmark, Record, ci, num, table

#: what each scorer is, as the tables name it
SCORERS = {
    "reward_model": "reward model",
    "logreg": "logreg (domain, question features, n-grams)",
    "logreg_ngrams": "logreg (domain, n-grams)",
    "logreg_domain": "logreg (domain only)",
    "logreg_latent": "logreg (domain, the sandbox's latent task description)",
    "mlp": "MLP (logreg's features of the text)",
    "mlp_latent": "MLP (domain, the sandbox's latent task description)",
    "logreg_latent_asked": "logreg (domain, the latent description and what the question asks)",
    "mlp_latent_asked": "MLP (domain, the latent description and what the question asks)",
    "logreg_named": "logreg (domain, the latent description with the named entity's popularity only)",
    "logreg_shown": "logreg (domain, the latent description with the named entity's popularity as its name shows it)",
    "mlp_named": "MLP (domain, the latent description with the named entity's popularity only)",
    "mlp_shown": "MLP (domain, the latent description with the named entity's popularity as its name shows it)",
    "logreg_text_shown": "logreg (the text's features and the named entity's popularity as its name shows it)",
    "mlp_text_shown": "MLP (the text's features and the named entity's popularity as its name shows it)",
    "rule": "the specialized orchestrator's rule (no training)",
}


def _q(x: Record) -> str:
    return ci(x["mean"], x["ci_low"], x["ci_high"])


def _gap(x: Record) -> str:
    return ci(x["mean"], x["ci_low"], x["ci_high"], value_spec=".2f")


def _pts(x: Record) -> str:
    """A difference in points (x100) with its interval."""
    if x["mean"] is None:
        return "n/a"
    return f"{100 * x['mean']:+.1f} [{num(100 * x['ci_low'], '+.1f')}, {num(100 * x['ci_high'], '+.1f')}]"


def _sign(x: Record) -> int:
    """+1 / -1 where the 95% interval lies above / below zero, 0 where it holds zero."""
    return 1 if x["ci_low"] > 0 else (-1 if x["ci_high"] < 0 else 0)


def _domains(res: Record) -> list[str]:
    return [d for d in dict.fromkeys(r["domain"] for r in res.rows("references")) if d != "all"]


def _base(scorer: str) -> str:
    """The baseline an MLP baseline's further seed (``mlp_latent.seed1``) belongs to; any other scorer itself."""
    return scorer.partition(".seed")[0]


def _name(scorer: str) -> str:
    """A scorer's label; an MLP baseline's further seeds (``mlp_latent.seed1``) with their seed."""
    base, seed = _base(scorer), scorer.partition(".seed")[2]
    return SCORERS.get(scorer) or (f"{SCORERS[base]}, seed {seed}" if seed and base in SCORERS else scorer)


def _intro(res: Record) -> list[str]:
    s, pool = res["settings"], res["pool"]
    seeds = s.get("swap_seeds") or [s["swap_seed"]]  # results written before --swap-seeds name one seed
    swap = (f"a seeded derangement, seed {seeds[0]}" if len(seeds) == 1 else
            f"the mean over {len(seeds)} seeded derangements, seeds {', '.join(map(str, seeds))}: which partner a task gets "
            "moves a single derangement's figure, so the table gives each one's swap cost too")
    return [f"The default model (`configs/{Path(s['config']).name}`: {s['collection_tasks_per_domain']} tasks per domain, "
            f"{res['pairs']} pairs) picks among {s['candidates']} base-sampler candidates of {pool['tasks']} fresh tasks "
            f"({s['tasks']} per domain from seed {s['seed']}, held out from every collection of the run), each candidate's "
            f"expected quality from {s['repeats']} re-runs. The same candidates are scored with the task's **own** question, "
            f"with the question of **another task of the same domain** ({swap}) and with "
            "**no question** (the plan alone). Cells: mean expected quality of the pick [95% bootstrap interval over tasks]; "
            "differences are paired over tasks, in points.", ""]


def _main_table(res: Record, scorers: list[str] | None = None) -> list[str]:
    rows = [r for r in res.rows("rows") if scorers is None or r["scorer"] in scorers]
    # one column per derangement's swap cost where the run averaged several
    each = all(len(r.get("swap_cost_by_derangement", ())) > 1 for r in rows)

    def by_derangement(r: dict[str, Any]) -> list[str]:
        return [" / ".join(f"{100 * c:+.1f}" for c in r["swap_cost_by_derangement"])] if each else []

    return table(["scorer", "domain", "own question", "swapped question", "plan alone", "swap cost (own - swapped, pts)",
                  *(["swap cost by derangement (pts)"] if each else []),
                  "picks the swap changes", "gap closed (own)", "gap closed (swapped)", "own - cost-only (pts)"],
                 [[_name(r["scorer"]), r["domain"], _q(r["own"]), _q(r["swapped"]), _q(r["plan_only"]), _pts(r["swap_cost"]),
                   *by_derangement(r), f"{r['pick_changed']:.0%}", _gap(r["gap_closed_own"]), _gap(r["gap_closed_swapped"]),
                   _pts(r["over_cost_only"])]
                  for r in rows], right=2)


def _references(res: Record) -> list[str]:
    return table(["domain", "random", "length-only", "cost-only", "expected oracle", "oracle chosen on its scoring re-runs",
                  "plan best for another task", "the question's worth (oracle - that, pts)"],
                 [[r["domain"], _q(r["random"]), _q(r["length_only"]), _q(r["cost_only"]), _q(r["expected_oracle"]),
                   _q(r["in_sample_oracle"]) if "in_sample_oracle" in r else "n/a",
                   _q(r["other_task_best"]), _pts(r["question_worth"])] for r in res.rows("references")])


def _targets(res: Record) -> list[str]:
    """Issue 24's targets for the default model, each met or not, with the figure it is read from."""
    if "targets" not in res:
        return []
    t = res["targets"]
    rows = {r["domain"]: r for r in res.rows("rows") if r["scorer"] == "reward_model"}
    mark = lambda ok: "met" if ok else "**not met**"  # noqa: E731
    checks = t["per_domain"]
    body = [[d, f"{mark(checks[d]['over_cost_only'])} ({_pts(rows[d]['over_cost_only'])})",
             f"{mark(checks[d]['over_length_only'])} ({_pts(rows[d]['over_length_only'])})",
             f"{mark(checks[d]['gap_closed'])} ({_gap(rows[d]['gap_closed_own'])})"] for d in checks]
    return [f"Swapping the question costs at least {num(t['swap_points'], 'g')} points on average: {mark(t['swap_met'])} "
            f"({t['swap_cost_points']:+.1f} points over all domains).", "",
            *table(["domain", "beats cost-only (own - cost-only, pts)", "beats length-only (pts)",
                    f"closes >= {t['gap_closed']:.0%} of the gap"], body), ""]


def _targets_by_seed(res: Record) -> list[str]:
    """The targets for each model seed of the default config: in how many domains each holds."""
    runs = res.get("targets_by_seed") or []
    if not runs:
        return []
    mark = lambda ok: "met" if ok else "**not met**"  # noqa: E731

    def held(t: Record, key: str) -> str:
        missed = [d for d, c in t["per_domain"].items() if not c[key]]
        return f"{len(t['per_domain']) - len(missed)} of {len(t['per_domain'])}" + (f" (not {', '.join(missed)})" if missed else "")

    return ["The same targets for each model seed of the default config (model and training seed together; the "
            "table above is seed 0):", "",
            *table(["model seed", "swap cost (pts)", "domains beating cost-only", "beating length-only", "closing the gap",
                    "every target"],
                   [[str(t["model_seed"]), f"{t['swap_cost_points']:+.1f}", held(t, "over_cost_only"), held(t, "over_length_only"),
                     held(t, "gap_closed"), mark(t["met"])] for t in runs], right=1), ""]


def _seed_ensemble(res: Record) -> list[str]:
    """The default config's model seeds, trained apart, as one ensemble: its picks and targets."""
    rows, t = res.get("seed_ensemble") or [], res.get("seed_ensemble_targets")
    if not rows or not t:
        return []
    mark = lambda ok: "met" if ok else "**not met**"  # noqa: E731
    seeds = ", ".join(str(s) for s in rows[0]["model_seeds"])
    body = [[r["domain"], _q(r["own"]), _q(r["swapped"]), _pts(r["swap_cost"]), _gap(r["gap_closed_own"]), _pts(r["over_cost_only"]),
             _pts(r["over_length_only"])] for r in rows]
    return [f"The same seeds ({seeds}) as one ensemble, trained apart: `members: {len(rows[0]['model_seeds'])}`, the model "
            f"`orchrm train --members {len(rows[0]['model_seeds'])}` trains (the mean of the members' standardised rewards): swap cost "
            f"{mark(t['swap_met'])} ({t['swap_cost_points']:+.1f} points); every target {mark(t['met'])}.", "",
            *table(["domain", "own question", "swapped question", "swap cost (pts)", "gap closed", "own - cost-only (pts)",
                    "own - length-only (pts)"], body, right=1), ""]


def _weights_mean(res: Record) -> list[str]:
    """The default config's model (the mean of the weights from the best epoch on) against the same
    run's best epoch alone, per model seed."""
    runs = res.get("weights_mean_minus_best_epoch") or []
    if not runs:
        return []
    domains = [*_domains(res), "all"]
    body = []
    for r in runs:
        diff = {d["domain"]: d["own"] for d in r["difference"]}
        n = r.get("averaged_epochs") or 0
        epochs = "n/a" if not n else str(r["best_epoch"]) if n == 1 else f"{r['best_epoch']} to {r['best_epoch'] + n - 1}"
        body.append([str(r["model_seed"]), epochs, *(f"{r['averaged'][d]['own']:.3f} / {r['best'][d]['own']:.3f} ({_pts(diff[d])})"
                                                    for d in domains)])
    return ["Each model seed of the default config: the trained model (the mean of the weights from the best validation "
            "epoch to the last, `weight_average: from_best`) / the same run's best epoch alone (`weight_average: none`), "
            "with the paired difference in points [95% interval]:", "",
            *table(["model seed", "epochs averaged", *domains], body, right=2), ""]


def _versus(res: Record) -> list[str]:
    return table(["baseline", "domain", "own-question pick - the reward model's (pts)", "swap cost - the reward model's (pts)"],
                 [[_name(r["scorer"]), r["domain"], _pts(r["own"]), _pts(r["swap_cost"])]
                  for r in res.rows("baseline_minus_reward_model")], right=2)


def _curve_means(res: Record) -> dict[tuple[int, str, str], dict[str, float]]:
    """(tasks per domain, scorer, domain) -> the means over model seeds of own, swap cost and gap closed."""
    acc: dict[tuple[int, str, str], list[Record]] = defaultdict(list)
    for r in res.rows("curve"):
        acc[(r["tasks_per_domain"], r["scorer"], r["domain"])].append(r)

    def mean(rs: list[Record], key: str) -> float:
        values = [r[key]["mean"] for r in rs if r[key]["mean"] is not None]
        return sum(values) / len(values) if values else float("nan")

    return {k: {"own": mean(rs, "own"), "swap": mean(rs, "swap_cost"), "gap": mean(rs, "gap_closed_own"), "seeds": len(rs),
                "pairs": rs[0]["pairs"]} for k, rs in acc.items()}


def _curve_table(res: Record) -> list[str]:
    domains = [*_domains(res), "all"]
    means = _curve_means(res)
    keys = sorted({(t, s) for t, s, _ in means}, key=lambda k: (k[0], list(SCORERS).index(k[1]) if k[1] in SCORERS else 99))
    body = [[str(t), _name(s), str(means[(t, s, "all")]["seeds"]), str(means[(t, s, "all")]["pairs"]),
             *(f"{m['own']:.3f} / {100 * m['swap']:+.1f} / {m['gap']:.2f}" if (m := means.get((t, s, d))) else "n/a" for d in domains)]
            for t, s in keys]
    return table(["tasks per domain", "scorer", "seeds", "pairs", *domains], body, right=2)


def _curve_seeds(res: Record) -> list[str]:
    rows = [r for r in res.rows("curve") if r["domain"] == "all"]
    return table(["tasks per domain", "scorer", "seed", "pairs", "train s", "test pairwise accuracy", "own question",
                  "swap cost (pts)", "plan alone", "gap closed (own)"],
                 [[str(r["tasks_per_domain"]), _name(r["scorer"]), "-" if r["model_seed"] is None else str(r["model_seed"]),
                   str(r["pairs"]), num(r["train_seconds"], ".0f"), num(r["pairwise_accuracy"]), _q(r["own"]), _pts(r["swap_cost"]),
                   _q(r["plan_only"]), _gap(r["gap_closed_own"])] for r in rows], right=3)


def verdict(res: Record, baseline: str = "logreg") -> list[str]:
    """Where the information runs out, per domain, from the paired differences: does the
    baseline that can read the question pick better than the reward model, and does either one
    lose anything when the question is swapped?"""
    rows = {(r["scorer"], r["domain"]): r for r in res.rows("rows")}
    versus = {r["domain"]: r for r in res.rows("baseline_minus_reward_model") if r["scorer"] == baseline}
    worth = {r["domain"]: r["question_worth"] for r in res.rows("references")}
    if (baseline, "all") not in rows:
        return []
    lines = []
    for d in _domains(res):
        rm, bl, vs = rows[("reward_model", d)], rows[(baseline, d)], versus[d]
        better, reads, rm_reads = _sign(vs["own"]), _sign(bl["swap_cost"]) > 0, _sign(rm["swap_cost"]) > 0
        if better > 0 and reads:
            why = ("the baseline reads the question and picks better: the text carries what the reward model does not "
                   "learn (it under-fits)")
        elif better > 0:
            why = ("the baseline picks better without gaining from the question: the reward model under-fits the plan "
                   "prior itself")
        elif reads:
            why = ("the baseline gains from the question but picks no better than the reward model: what it reads there "
                   "is worth less than the prior both learn")
        elif rm_reads:
            why = ("the reward model reads the question here (its swap cost's interval lies above zero) and the baseline, "
                   "which does not, picks no better: the reward model learns from these pairs what a linear reader of the "
                   "text does not")
        elif perfect := [r for r in res.rows("rows") if r["domain"] == d and _sign(r["swap_cost"]) > 0
                         and _base(r["scorer"]) in ("logreg_latent", "mlp_latent", "logreg_latent_asked", "mlp_latent_asked")]:
            why = ("neither reader of the text gains measurably from the question, but a reader of the task's latent "
                   "description does (" + "; ".join(f"{_name(r['scorer'])} {_pts(r['swap_cost'])}" for r in perfect)
                   + "): these pairs teach which plan suits which task, and what runs out is what the text shows of the "
                   "task, or what its readers extract")
        else:
            why = ("a model built to read the question picks no better and gains nothing measurable from it (its swap "
                   "cost's interval holds zero): these pairs do not teach which plan suits which question, so the "
                   "information runs out in the pairs, not in the model")
        compared = {1: "picks better than the reward model", 0: "picks as well as the reward model, within the interval",
                    -1: "picks worse than the reward model"}[better]
        lines.append(f"- **{d}**: the baseline {compared} ({_pts(vs['own'])} pts); swap cost: reward model "
                     f"{_pts(rm['swap_cost'])}{' (above zero)' if rm_reads else ''}, baseline {_pts(bl['swap_cost'])}"
                     f"{' (above zero)' if reads else ''}; the question is worth {_pts(worth[d])} pts in the sandbox. "
                     f"{why[0].upper() + why[1:]}.")
    prior = {r["domain"]: r for r in res.rows("baseline_minus_reward_model") if r["scorer"] == "logreg_domain"}
    if prior:
        lines.append(f"- **A plan prior per domain** ({_name('logreg_domain')}: it never reads the question) minus the reward "
                     "model: " + "; ".join(f"{d} {_pts(prior[d]['own'])}" for d in [*_domains(res), "all"] if d in prior)
                     + " pts: where it is above zero the reward model has not even learned the domain's plan prior.")
    latent = {r["domain"]: r for r in res.rows("rows") if r["scorer"] == "logreg_latent"}
    if "all" in latent and (baseline, "all") in rows:
        lines.append(f"- **A perfect bilinear reader of the question** ({_name('logreg_latent')}: not the text but what the simulator "
                     f"decides outcomes by): swapping the question costs it {_pts(latent['all']['swap_cost'])} pts over all "
                     "domains (" + "; ".join(f"{d} {_pts(latent[d]['swap_cost'])}" for d in _domains(res) if d in latent)
                     + f"), the text baseline {_pts(rows[(baseline, 'all')]['swap_cost'])}; it picks {_q(latent['all']['own'])}. "
                     "What even it cannot learn from these pairs, no bilinear reader of the text can.")
    nonlinear = {}  # each MLP baseline's seeds, over all domains
    for r in res.rows("rows"):
        if r["domain"] == "all" and r["scorer"].startswith("mlp"):
            nonlinear.setdefault(_base(r["scorer"]), []).append(r)
    if "mlp_latent" in nonlinear:
        seeds = nonlinear["mlp_latent"]
        text = nonlinear.get("mlp", [])
        mean = sum(r["swap_cost"]["mean"] for r in seeds) / len(seeds)
        lines.append(f"- **A perfect reader that is not linear** ({_name('mlp_latent')}, {len(seeds)} seed(s)): swapping the "
                     "question costs it " + " / ".join(_pts(r["swap_cost"]) for r in seeds) + f" pts (mean {100 * mean:+.1f}); it "
                     "picks " + " / ".join(_q(r["own"]) for r in seeds)
                     + (f". The same MLP on the text: {' / '.join(_pts(r['swap_cost']) for r in text)} pts, picking "
                        f"{' / '.join(_q(r['own']) for r in text)}" if text else "") + ".")
    rule = {r["domain"]: r for r in res.rows("rows") if r["scorer"] == "rule"}
    if "all" in rule and ("reward_model", "all") in rows:
        r, rm = rule["all"], rows[("reward_model", "all")]
        lines.append(f"- **The rule that writes the specialized-over-base pairs** ({_name('rule')}: it reads only the "
                     f"question): swapping the question costs it {_pts(r['swap_cost'])} pts over all domains ("
                     + "; ".join(f"{d} {_pts(rule[d]['swap_cost'])}" for d in _domains(res) if d in rule)
                     + f"), the reward model {_pts(rm['swap_cost'])}; its own-question pick is {_q(r['own'])}, the reward "
                     f"model's {_q(rm['own'])}.")
    ens = {r["domain"]: r for r in res.get("seed_ensemble") or []}
    one_seed = _curve_means(res).get((res["settings"]["collection_tasks_per_domain"], "reward_model", "all"))
    if "all" in ens and one_seed:
        single = 100 * one_seed["swap"]
        lines.append(f"- **The seeds, trained apart and averaged** (`--members {len(ens['all']['model_seeds'])}`, their standardised "
                     "rewards): swapping the question costs "
                     f"the ensemble {_pts(ens['all']['swap_cost'])} pts over all domains ("
                     + "; ".join(f"{d} {_pts(ens[d]['swap_cost'])}" for d in _domains(res) if d in ens)
                     + f"), against {single:+.1f} for one seed on average; it picks {_q(ens['all']['own'])}. "
                     + ("Each training reads the question through noise of its own, and the mean keeps what the trainings "
                        "agree on." if 100 * ens["all"]["swap_cost"]["mean"] >= single else
                        "It reads the question less than one seed on average: what each training reads differs, and the "
                        "mean of their rewards cancels part of it."))
    means = _curve_means(res)
    parts = []
    for scorer in ("reward_model", baseline):
        sizes = sorted({t for t, s, d in means if s == scorer and d == "all"})
        if len(sizes) > 1:
            lo, hi = means[(sizes[0], scorer, "all")], means[(sizes[-1], scorer, "all")]
            parts.append(f"{_name(scorer)} {100 * lo['swap']:+.1f} pts at {sizes[0]} tasks per domain, "
                         f"{100 * hi['swap']:+.1f} at {sizes[-1]} (gap closed {lo['gap']:.2f} -> {hi['gap']:.2f})")
    if parts:
        lines.append("- **More tasks**, swap cost over all domains: " + "; ".join(parts) + ".")
    return lines


#: the readers that say how much of the latent description the text holds, in the order they lose it
_SHOWN_STEPS = (("latent", "its latent description"), ("named", "the same, of the entities' popularity only the named one's"),
                ("shown", "the same, that popularity as the name shows it"), ("text_shown", "the text, and that reading of the name"),
                ("", "the text"))


def text_shows(res: Record) -> list[str]:
    """The latent readers given less and less of the entities' popularity, down to the readers of
    the text: a table of their swap cost per domain (an MLP's the mean over its seeds), where any of
    ``*_shown`` was fitted; else nothing."""
    costs: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in res.rows("rows"):
        costs[(_base(r["scorer"]), r["domain"])].append(100 * r["swap_cost"]["mean"])
    if ("logreg_shown", "all") not in costs and ("mlp_shown", "all") not in costs:
        return []
    domains = [*_domains(res), "all"]
    readers = [(f"`{name}`", name, what) for family in ("logreg", "mlp")
               for name, what in ((f"{family}_{v}" if v else family, what) for v, what in _SHOWN_STEPS)]
    rows = [[label, what, *(f"{sum(c) / len(c):+.1f}" if (c := costs.get((name, d))) else "" for d in domains)]
            for label, name, what in [*readers, ("reward model", "reward_model", "the text")] if (name, "all") in costs]
    return ["Readers of the task's latent description given less and less of the entities' popularity, down to the readers "
            "of the text: swap cost in points (an MLP's the mean over its seeds). Where a reader of what the name shows gains "
            "more than the readers of the text, the text holds what they do not extract; where it gains less than a reader of "
            "the named entity's popularity, the name's own noise costs the difference.", "",
            *table(["reader", "reads of the task", *domains], rows, right=2)]


def _seeds_line(res: Record) -> str:
    seeds = res["settings"].get("curve_model_seeds")
    if not seeds:
        return ""
    return (" Reward-model seeds per point (tasks per domain: seeds): " + ", ".join(f"{t}: {len(seeds[t])}" for t in seeds)
            + "; fewer at the larger points keeps the run within its time budget (`--seeded-up-to`, `--model-up-to`).")


def page(res: Record) -> list[str]:
    acc = res["pairwise_accuracy"]
    return ["# Does the reward model read the question? (issue 24)", "", *_intro(res),
            "## Targets (issue 24, the default model)", "", *_targets(res), *_targets_by_seed(res), *_seed_ensemble(res),
            *_weights_mean(res),
            "## Own question, swapped question, no question", "", *_main_table(res), "",
            "Swap cost: the own-question pick minus the swapped-question pick; above zero when reading this task's question helps. "
            "Gap closed: share of the random -> expected-oracle gap, as in the best-of-N page. The baselines are pairwise "
            "logistic regressions on question features crossed with plan features (`benchmarks/common/feature_baseline.py`), "
            "fitted on the same pair table (train split, L2 chosen on val). The specialized orchestrator's rule is each domain's "
            "rule of thumb (`orchrm.execution.tasks.base.plan_heuristic`) scoring the candidates from the question text, "
            "without training and without the sampler's noise: the `specialized-over-base` pairs are written by it.", "",
            "Held-out pairwise accuracy (test split of the pairs): " + ", ".join(f"{_name(k)} {num(acc[k])}" for k in acc) + ".", "",
            "## References", "", *_references(res), "",
            "The expected oracle picks each task's plan on re-runs of its own and is scored on the pool's other "
            f"{res['settings']['repeats']} re-runs; picked and scored on the same re-runs (the column beside it) it looks "
            "better than any selector can be (the winner's curse). The plan best for another task: the swap partner's "
            f"expected-oracle plan, executed on this task {res['settings']['repeats']} times; the oracle minus it is what "
            "reading the question is worth here.", "",
            "## The baselines against the reward model (paired over tasks)", "", *_versus(res), "",
            "## Where the information runs out", "", *verdict(res), "",
            *(["## What the text shows of the task", "", *shows, ""] if (shows := text_shows(res)) else []),
            "## Learning curve over distinct training tasks", "",
            "Each cell: own-question quality / swap cost (pts) / gap closed, the mean over the model seeds (model and "
            "training seed together) or an MLP baseline's seeds; a logistic regression is deterministic. The code domain's data set holds fewer tasks than the "
            "largest collections ask for: they use all of them." + _seeds_line(res), "", *_curve_table(res), "",
            "Every run, all domains:", "", *_curve_seeds(res)]


def section(res: Record) -> list[str]:
    return [*_intro(res), *_targets(res), *_targets_by_seed(res), *_seed_ensemble(res),
            *_main_table(res, ["reward_model", "logreg", "rule"]), "", *_references(res), "",
            "Where the information runs out:", "", *verdict(res), "",
            "Learning curve (own-question quality / swap cost in points / gap closed; mean over model seeds):", "",
            *_curve_table(res), ""]


BENCHMARK = Benchmark("Does the reward model read the question?",
                      "Best-of-8 with the task's own question, another task's and none; a baseline that can read "
                      "questions; a learning curve over training tasks.", page, section)
