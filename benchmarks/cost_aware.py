"""Cost-aware selection: quality against execution tokens for every selector, and the reward model
ranking by ``reward - λ·cost`` with ``λ`` chosen on validation tasks for a token budget (issue 24).

The default model (``configs/default.yaml``, trained on its collection's pairs, cached as
:mod:`benchmarks.best_of_n` caches it) scores two fresh candidate pools of the same settings: a
*validation* pool (``--validation-seed``) on which :func:`orchrm.evaluation.cost_aware.choose_cost_weight`
chooses ``λ`` for each budget, and a *test* pool (``--seed``) on which everything is reported:

- every selector of :data:`orchrm.evaluation.selectors.SELECTORS` at each N: expected quality of
  its pick and the execution tokens it spends per task (the points of a Pareto plot);
- the reward model's best-of-``--n`` pick over a range of ``λ`` (the cost-aware curve);
- for each budget (a share of the plain reward-model pick's validation tokens), the ``λ`` chosen on
  validation and what it gives on the test tasks, with a 95% bootstrap interval over tasks.

    nice python -m benchmarks.cost_aware                     # writes results/cost_aware.json
    nice python -m benchmarks.cost_aware --tasks 6 --repeats 3 --out /tmp/ca   # a quick look
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

from benchmarks.common import steps
from benchmarks.common.results_io import (
    RESULTS,
    ROOT,
    command_line,
    provenance,
    shown_path,
    write_json,
)
from orchrm.config import PipelineConfig

NS = (1, 2, 4, 8)
#: budgets, as shares of the plain reward-model pick's execution tokens on the validation tasks
BUDGET_SHARES = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "configs" / "default.yaml"))
    ap.add_argument("--tasks", type=int, default=30, help="held-out tasks per domain in each pool (default 30)")
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--n", type=int, default=8, help="N of the cost-aware best-of-N (default 8)")
    ap.add_argument("--repeats", type=int, default=10, help="re-runs per candidate for its expected quality")
    ap.add_argument("--pool-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--seed", type=int, default=7331, help="seed of the test tasks (default 7331)")
    ap.add_argument("--validation-seed", type=int, default=7441, help="seed of the validation tasks (default 7441)")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=RESULTS)
    return ap


def pool_config(base: PipelineConfig, args: argparse.Namespace, seed: int) -> PipelineConfig:
    from orchrm.config import with_overrides

    evaluate = with_overrides(base.evaluate, {
        "tasks_per_domain": args.tasks, "candidates": args.candidates, "best_of": tuple(n for n in NS if n <= args.candidates),
        "pool_seeds": tuple(args.pool_seeds), "repeats": args.repeats, "seed": seed, "bootstrap": args.bootstrap,
        "gates": base.evaluate.gates.model_dump() | {"best_of": min(args.n, args.candidates)},
    })
    return base.model_copy(update={"evaluate": evaluate})


def scored_frame(model, pool) -> pd.DataFrame:
    """The pool's rows with the model's normalised reward and each plan's cost from its text."""
    from orchrm.evaluation.cost_aware import normalised_rewards, plan_costs
    from orchrm.evaluation.metrics import score_texts
    from orchrm.model.texts import plan_prompt

    frame = pool.frame
    rewards = score_texts(model, [plan_prompt(q) for q in frame["question"]], frame["plan_text"])
    return frame.assign(reward=normalised_rewards(model, rewards), plan_cost=plan_costs(list(frame["plan_text"])))


def interval(picks: pd.DataFrame, column: str, *, bootstrap: int, seed: int) -> tuple[float, float, float]:
    """The mean of ``column`` over (pool seed, task) picks and a 95% bootstrap interval over tasks."""
    from orchrm.evaluation.metrics import bootstrap_ci

    per_task = picks.groupby("task_id")[column].mean().to_numpy(float)
    lo, hi = bootstrap_ci(per_task, n=bootstrap, seed=seed) if bootstrap else (per_task.mean(), per_task.mean())
    return float(per_task.mean()), float(lo), float(hi)


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)

    import torch

    from orchrm.config import load_config
    from orchrm.evaluation.cost_aware import DEFAULT_WEIGHTS, choose_cost_weight, cost_weight_picks
    from orchrm.evaluation.harness import evaluate

    t0 = time.perf_counter()
    base = load_config(args.config)
    test_cfg, val_cfg = pool_config(base, args, args.seed), pool_config(base, args, args.validation_seed)
    pairs = steps.pair_table(base.collect, base.sandbox, base.pairs)
    fitted = steps.fit_cached(pairs, base.model, base.train)
    model = fitted.model
    test_pool = steps.held_out_pool(test_cfg.evaluate, base.collect, base.sandbox).pool
    val_pool = steps.held_out_pool(val_cfg.evaluate, base.collect, base.sandbox).pool

    report = evaluate(model, pairs=pairs.frame[pairs.frame["split"] == "test"], pool=test_pool, config=test_cfg.evaluate)
    selectors = report.tables["best_of_n"]
    selectors = selectors[selectors["domain"] == "all"][["selector", "N", "quality", "expected", "expected_ci_low",
                                                         "expected_ci_high", "tokens_execution", "tokens_scoring"]]

    test = scored_frame(model, test_pool)
    picks = cost_weight_picks(test, args.n, DEFAULT_WEIGHTS)
    curve = []
    for w, g in picks.groupby("weight", sort=True):
        q, lo, hi = interval(g, "expected", bootstrap=args.bootstrap, seed=0)
        curve.append({"weight": float(w), "expected": q, "ci_low": lo, "ci_high": hi, "tokens": float(g["tokens"].mean()),
                      "plan_cost": float(g["plan_cost"].mean())})
    # the plain reward-model pick (λ = 0) on the validation tasks: what the budgets are shares of
    plain_tokens = float(choose_cost_weight(model, val_pool, budget_tokens=1e18, n=args.n).curve.set_index("weight").loc[0.0, "tokens"])
    budgets = []
    for share in BUDGET_SHARES:
        budget = share * plain_tokens
        choice = choose_cost_weight(model, val_pool, budget_tokens=budget, n=args.n)
        g = picks[picks["weight"] == choice.weight]
        if g.empty:  # a weight off the default grid cannot happen (the same grid), but say so if it does
            raise SystemExit(f"weight {choice.weight} not on the test curve")
        q, lo, hi = interval(g, "expected", bootstrap=args.bootstrap, seed=0)
        budgets.append({"share": share, "budget_tokens": budget, "weight": choice.weight, "within_budget": choice.within_budget,
                        "validation_expected": choice.quality, "validation_tokens": choice.tokens,
                        "test_expected": q, "test_ci_low": lo, "test_ci_high": hi, "test_tokens": float(g["tokens"].mean())})
        print(f"budget {budget:.0f} tokens: λ = {choice.weight:g}, test expected quality {q:.3f} at "
              f"{g['tokens'].mean():.0f} tokens", file=sys.stderr)

    result = {
        "benchmark": "cost-aware selection: quality against execution tokens, λ chosen on validation tasks",
        **provenance(command_line("benchmarks.cost_aware", ap, args), torch=torch.__version__, torch_threads=torch.get_num_threads()),
        "settings": {"tasks": args.tasks, "candidates": args.candidates, "n": args.n, "repeats": args.repeats,
                     "pool_seeds": args.pool_seeds, "seed": args.seed, "validation_seed": args.validation_seed,
                     "bootstrap": args.bootstrap, "config": shown_path(args.config), "weights": list(DEFAULT_WEIGHTS),
                     "budget_shares": list(BUDGET_SHARES)},
        "model": fitted.info,
        "selectors": selectors.astype(object).where(selectors.notna(), None).to_dict(orient="records"),
        "curve": curve,
        "plain_validation_tokens": plain_tokens,
        "budgets": budgets,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    path = write_json(Path(args.out) / "cost_aware.json", result)
    print(f"wrote {shown_path(path)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
