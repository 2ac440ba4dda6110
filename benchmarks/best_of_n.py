"""Best-of-N plan selection on held-out sandbox tasks, every selector, per domain (issues 15, 17).

The default model (``configs/default.yaml``: scratch encoder, its collection, pairs and training
settings) is trained on the default collection's pairs (or loaded with ``--model``), then scored
through :mod:`orchrm.evaluation` on a candidate pool of tasks drawn from ``--seed`` (7331 by
default: never used for collection, for the demo's evaluation or for tuning anything):
``--candidates`` base-sampler plans per task, each executed once per pool seed and re-run
``--repeats`` times for its expected quality. Reported per domain and N: the mean realised quality
of every selector with a 95% bootstrap interval over tasks and the spread over pool seeds, the
expected quality of its pick, the tokens it spent (execution / reward-model scoring / judging,
counted apart), and the fraction of the random -> expected-oracle gap the reward model closes.

Targets (issue 17, :data:`benchmarks.common.targets.BEST_OF_N`), read at N = 5: reward-model
selection at least 7 points above N = 1 (a random plan) and ahead of the cost-only and length-only
selectors in every domain, closing at least 60% of the gap in every domain, with at least 5x fewer
execution tokens than trajectory-level selection at equal or better quality.

    nice python -m benchmarks.best_of_n                 # writes results/best_of_n.json
    nice python -m benchmarks.best_of_n --tasks 10 --repeats 4 --out /tmp/bon   # a quick look

Beside the config's own encoder, every encoder of :data:`ENCODERS` is trained on the same pairs
and scored on the same pool (``by_encoder``); where the real data sets can be read
(``$ORCHRM_DATA_DIR``, else a ``shared/data`` folder beside the project), the config is also
collected, trained and evaluated on them (``by_source``). Collections, pairs, models and pools are
cached under ``.orchrm/bench`` by their settings and the package's source
(:mod:`benchmarks.common.steps`), so a rerun only redoes what changed.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
from benchmarks.common.targets import BEST_OF_N
from orchrm.config import PipelineConfig

NS = (1, 2, 4, 5, 8, 16)
#: the encoders compared (issue 17: per encoder), each trained on the same pairs: the config with
#: these (model, train) fields changed. minilm: all-MiniLM-L6-v2 frozen (its pooled features
#: computed once per text), at the best MiniLM setting of benchmarks/results/sweep_defaults.md
ENCODERS: dict[str, tuple[dict, dict]] = {
    "scratch": ({"encoder": "scratch"}, {}),
    "minilm": ({"encoder": "minilm", "train_layers": 0}, {"lr": 3e-3, "epochs": 30, "patience": 3}),
}
#: the real data set of each domain (issue 17), read from $ORCHRM_DATA_DIR (HumanEval from its
#: package: the code domain's built-in source); the model is collected, trained and evaluated on them
REAL_SOURCES = {"math": "gsm8k", "code": "humaneval", "multihop": "strategyqa", "webqa": "squad"}


def targets(report, domains: list[str]) -> dict:
    """Issue 17's targets at N = :data:`BEST_OF_N.n <benchmarks.common.targets.BEST_OF_N>`, per
    domain, from the report's tables."""
    t = report.tables["best_of_n"]
    g = report.tables["gap_closed"]
    n = BEST_OF_N.n
    out = {}
    for domain in domains:
        at = t[(t["domain"] == domain) & (t["N"] == n)].set_index("selector")
        one = t[(t["domain"] == domain) & (t["N"] == 1)].set_index("selector")
        rm = at.loc["reward_model"]
        gap = g[(g["domain"] == domain) & (g["N"] == n)]["gap_closed"].iloc[0]
        traj = at.loc["trajectory"]
        out[domain] = {
            "gain_over_n1_points": round(100 * (rm.quality - one.loc["random", "quality"]), 1),
            "gain_met": bool(rm.quality - one.loc["random", "quality"] >= BEST_OF_N.gain),
            "beats_cost_only": bool(rm.quality > at.loc["cost_only", "quality"]),
            "beats_length_only": bool(rm.quality > at.loc["length_only", "quality"]),
            "gap_closed": None if gap != gap else round(float(gap), 3),
            "gap_met": bool(gap >= BEST_OF_N.gap_closed),
            "token_ratio_trajectory_over_rm": round(float(traj.tokens_total / rm.tokens_total), 2),
            "tokens_met": bool(traj.tokens_total >= BEST_OF_N.token_ratio * rm.tokens_total and rm.quality >= traj.quality),
        }
    return out


def real_sources(domains) -> dict[str, str]:
    """The real data set of each domain that can be read here (``$ORCHRM_DATA_DIR``); {} when only
    the code domain's (HumanEval, its built-in source anyway) is."""
    from orchrm.execution.tasks.base import load_tasks

    found = {}
    for domain in domains:
        name = REAL_SOURCES.get(domain)
        try:
            if name and load_tasks(domain, 1, seed=0, source=name):
                found[domain] = name
        except Exception as err:  # a missing file: that domain has no real row
            print(f"{domain}: {name} not available ({type(err).__name__}: {str(err)[:120]})", file=sys.stderr)
    return found if set(found) - {"code"} else {}



@dataclass(frozen=True)
class Run:
    """One model evaluated on its held-out pool: the :class:`orchrm.evaluation.report.EvaluationReport`,
    what the results file records of the model (``info``), the pool's domains, and the seconds spent
    building the pool (0 when cached) and evaluating."""

    report: Any
    info: dict[str, Any]
    domains: list[str]
    pool_seconds: float
    eval_seconds: float


def evaluate_on_pool(model: Any, info: dict[str, Any], pairs: pd.DataFrame, config: PipelineConfig) -> Run:
    """``model`` on the held-out pool of ``config`` and the ``test`` split of ``pairs``."""
    from orchrm.evaluation.harness import evaluate

    pool = steps.held_out_pool(config.evaluate, config.collect, config.sandbox)
    t0 = time.perf_counter()
    report = evaluate(model, pairs=pairs[pairs["split"] == "test"], pool=pool.pool, config=config.evaluate)
    print(report.summary(), file=sys.stderr)
    return Run(report, info, sorted(pool.pool.frame["domain"].unique()), pool.seconds, time.perf_counter() - t0)


def run_variant(config: PipelineConfig) -> Run:
    """Train (or load from the cache) the model of ``config`` on its collection's pairs, and
    evaluate it on its pool."""
    pairs = steps.pair_table(config.collect, config.sandbox, config.pairs)
    fitted = steps.fit_cached(pairs, config.model, config.train)
    return evaluate_on_pool(fitted.model, fitted.info, pairs.frame, config)


def _records(df: pd.DataFrame) -> list[dict]:
    return df.astype(object).where(df.notna(), None).to_dict(orient="records")


def grouped(runs: dict[str, Run], lead: str) -> dict[str, Any]:
    """The ``by_<lead>`` tables of several runs (``lead``: ``encoder`` or ``source``): each run's
    rows with ``lead`` set to its name, its targets, and what the file records of its model."""
    def rows(table: str) -> list[dict]:
        return [row | {lead: name} for name, run in runs.items() for row in _records(run.report.tables[table])]

    return {
        f"by_{lead}": rows("best_of_n"),
        f"gap_closed_by_{lead}": rows("gap_closed"),
        f"targets_by_{lead}": {name: targets(run.report, run.domains) for name, run in runs.items()},
        f"models_by_{lead}": {name: run.info | {"pairwise_accuracy": run.report.metrics.get("pairwise_accuracy"),
                                                "scoring_latency_ms_p50": run.report.metrics.get("scoring_latency_ms_p50")}
                              for name, run in runs.items()},
    }


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "configs" / "default.yaml"))
    ap.add_argument("--model", default=None, help="a saved model file to evaluate instead of training the default")
    ap.add_argument("--tasks", type=int, default=30, help="held-out tasks per domain (default 30)")
    ap.add_argument("--candidates", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=10, help="re-runs per candidate for its expected quality")
    ap.add_argument("--pool-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--seed", type=int, default=7331, help="seed of the held-out tasks (default 7331)")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--encoders", nargs="*", default=list(ENCODERS), choices=list(ENCODERS),
                    help="encoders compared beside the config's own (default: all); each trained on the same pairs")
    ap.add_argument("--real", choices=["auto", "yes", "no"], default="auto",
                    help="also train and evaluate on the real data sets (GSM8K, HumanEval, StrategyQA, SQuAD from "
                         "$ORCHRM_DATA_DIR); auto: when they can be read")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    return ap


def benchmark_config(args: argparse.Namespace) -> PipelineConfig:
    """The config of ``--config`` with its evaluation set to the benchmark's pool."""
    from orchrm.config import load_config, with_overrides

    base = load_config(args.config)
    evaluate_cfg = with_overrides(base.evaluate, {
        "tasks_per_domain": args.tasks, "candidates": args.candidates, "best_of": tuple(n for n in NS if n <= args.candidates),
        "pool_seeds": tuple(args.pool_seeds), "repeats": args.repeats, "seed": args.seed, "bootstrap": args.bootstrap,
        "gates": base.evaluate.gates.model_dump() | {"best_of": min(BEST_OF_N.n, args.candidates)},
    })
    return base.model_copy(update={"evaluate": evaluate_cfg})


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    use_sibling_data()

    import torch

    from orchrm.config import with_overrides
    from orchrm.model.reward_model import BradleyTerryModel

    if args.threads:
        torch.set_num_threads(args.threads)
    config = benchmark_config(args)
    if args.model:
        pairs = steps.pair_table(config.collect, config.sandbox, config.pairs)
        info = {"trained": f"loaded from {args.model}", "pairs": int(len(pairs.frame))}
        head = evaluate_on_pool(BradleyTerryModel.load(args.model), info, pairs.frame, config)
    else:
        head = run_variant(config)
    own = config.model.encoder
    runs: dict[str, dict[str, Run]] = {"encoder": {own: head}, "source": {"sandbox": head}}
    for name in args.encoders:
        if args.model or name == own:
            continue
        print(f"== encoder {name}", file=sys.stderr)
        model_fields, train_fields = ENCODERS[name]
        runs["encoder"][name] = run_variant(config.model_copy(update={
            "model": with_overrides(config.model, model_fields), "train": with_overrides(config.train, train_fields)}))
    found = {} if args.real == "no" or args.model else real_sources(head.domains)
    if args.real == "yes" and not found:
        print("--real yes: no real data set can be read; set ORCHRM_DATA_DIR", file=sys.stderr)
        return 2
    if found:
        print(f"== real data sets {found}", file=sys.stderr)
        runs["source"]["real"] = run_variant(config.model_copy(update={
            "collect": with_overrides(config.collect, {"sources": found})}))

    report = head.report
    result = {
        "benchmark": "best-of-N plan selection on held-out sandbox tasks, every selector",
        **provenance(command_line("benchmarks.best_of_n", ap, args), torch=torch.__version__,
                     torch_threads=torch.get_num_threads()),
        "settings": {"tasks": args.tasks, "candidates": args.candidates, "repeats": args.repeats, "pool_seeds": args.pool_seeds,
                     "seed": args.seed, "best_of": list(config.evaluate.best_of), "bootstrap": args.bootstrap,
                     "config": shown_path(args.config)},
        "model": head.info,
        "domains": head.domains,
        "seconds": {"pool": round(head.pool_seconds, 1), "evaluate": round(head.eval_seconds, 1)},
        "metrics": report.metrics,
        **{name: _records(report.tables[name]) for name in ("best_of_n", "gap_closed", "pairwise", "calibration", "latency")},
        "targets": targets(report, head.domains),
    }
    for lead, group in runs.items():
        if len(group) > 1:
            result |= grouped(group, lead)
    if found:
        result["real_sources"] = found
    print(f"wrote {write_json(args.out / 'best_of_n.json', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
