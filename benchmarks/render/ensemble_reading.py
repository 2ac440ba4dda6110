"""The ensemble-reading page (``ensemble_reading.json``, issue 24): each seed model's and the seed
ensemble's question share of the within-task rewards, how much the members agree on the
question part and on the plan part, and what that predicts for the ensemble."""

from __future__ import annotations

from benchmarks.render.records import Benchmark, Record, table


def _models_table(res: Record) -> list[str]:
    rows = res.rows("models")
    domains = list(rows[0]["question_share_by_domain"])
    return table(["model", "question share", *(f"{d}" for d in domains), "own-question quality", "swapped-question quality", "swap cost (pts)"],
                 [[r["model"], f"{r['question_share']:.3f}", *(f"{r['question_share_by_domain'][d]:.3f}" for d in domains),
                   f"{r['own']:.3f}", f"{r['swapped']:.3f}", f"{100 * r['swap_cost']:+.1f}"] for r in rows])


def _agreement_table(res: Record) -> list[str]:
    return table(["members", "question parts' correlation", "plan parts' correlation"],
                 [[" and ".join(r["members"]), f"{r['question_correlation']:.2f}", f"{r['plan_correlation']:.2f}"]
                  for r in res.rows("agreement")])


def _pts(x: Record) -> str:
    return f"{100 * x['mean']:+.1f} points [{100 * x['ci_low']:+.1f}, {100 * x['ci_high']:+.1f}]"


def verdict(res: Record) -> list[str]:
    """What the members' agreement says about the ensemble, read off the file."""
    rho_q, rho_p = res["mean_question_correlation"], res["mean_plan_correlation"]
    kept = res["kept_by_mean"]
    members = len(res["settings"]["model_seeds"])
    ensemble = next(r for r in res.rows("models") if r["model"] == "ensemble")
    measured, predicted, share = ensemble["question_share"], res["predicted_ensemble_question_share"], res["members_mean_question_share"]
    if rho_q < rho_p:
        why = (f"The members agree on the plan (mean correlation {rho_p:.2f}) more than on the question ({rho_q:.2f}): "
               f"the mean of {members} keeps {kept['plan']:.2f} of a plan part's sum of squares but {kept['question']:.2f} of "
               "a question part's, so it leans on the plan more than its members do on average.")
    else:
        why = (f"The members agree on the question (mean correlation {rho_q:.2f}) at least as much as on the plan "
               f"({rho_p:.2f}): averaging thins the question part out no more than the plan part.")
    lines = [f"{why} From the members' mean question share {share:.3f} and these correlations (equal spreads assumed) "
             f"the ensemble's would be {predicted:.3f}; it measures {measured:.3f}.", ""]
    d = res["ensemble_minus_members_mean"]
    own, swapped = d["own"], d["swapped"]
    said = f"Against the members' mean pick the ensemble's is {_pts(own)} with the task's own question and {_pts(swapped)} with a swapped one"
    if swapped["mean"] > 0 and swapped["mean"] > abs(own["mean"]):
        lines.append(f"{said}: its smaller swap cost is mostly a wrong question misleading it less, not the right one helping it "
                     "less. What the members do not share moves their picks when the question is wrong more than it improves "
                     "them when it is right.")
    elif own["mean"] < 0 and -own["mean"] >= abs(swapped["mean"]):
        lines.append(f"{said}: what the mean thins out helped the members pick with the right question.")
    else:
        lines.append(f"{said}.")
    return lines


def _intro(res: Record) -> list[str]:
    s = res["settings"]
    return [f"The config `{s['config']}` ({s['collection_tasks_per_domain']} tasks per domain) trained with model seeds "
            f"{', '.join(str(x) for x in s['model_seeds'])}, each alone and as one ensemble (the mean of their standardised "
            f"rewards), on {res['pool']['tasks']} fresh tasks ({s['candidates']} candidates each, seed {s['seed']}). Each "
            "reward is centred within its task; the *plan part* is its mean under the questions of other tasks of the domain "
            f"(the derangements of seeds {', '.join(str(x) for x in s['swap_seeds'])}), the *question part* what the task's own "
            "question adds to it. Question share: the question part's share of the two parts' sum of squares. Own- and "
            "swapped-question quality and the swap cost between them: the best-of-N pick's expected quality, as on the "
            "question-reading page (means over tasks).", ""]


def page(res: Record) -> list[str]:
    return ["# What the seed ensemble keeps of its members' question reading (issue 24)", "", *_intro(res),
            *_models_table(res), "", "## Do the members agree?", "",
            "Correlation over every (task, candidate) of two members' parts.", "", *_agreement_table(res), "", "## What the mean keeps", "",
            *verdict(res)]


def section(res: Record) -> list[str]:
    return [*_intro(res), *_models_table(res), "", *_agreement_table(res), "", *verdict(res), ""]


BENCHMARK = Benchmark("What does the seed ensemble keep of its members' question reading?",
                      "Each seed model's and the seed ensemble's question share of the reward, and how much the members "
                      "agree on the question and on the plan.", page, section)
