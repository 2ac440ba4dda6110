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

Targets (issue 17), read at N = 5: reward-model selection at least 7 points above N = 1 (a random
plan) and ahead of the cost-only and length-only selectors in every domain, closing at least 60% of
the gap in every domain, with at least 5x fewer execution tokens than trajectory-level selection at
equal or better quality.

    nice python benchmarks/bench_best_of_n.py                 # writes results/best_of_n.{json,md,*.png}
    nice python benchmarks/bench_best_of_n.py --tasks 10 --repeats 4 --out /tmp/bon   # a quick look

Beside the config's own encoder, every encoder of :data:`ENCODERS` is trained on the same pairs
and scored on the same pool (``by_encoder``); where the real data sets can be read
(``$ORCHRM_DATA_DIR``, else a ``shared/data`` folder beside the project), the config is also
collected, trained and evaluated on them (``by_source``). Pools and models are cached under
``.orchrm/bench`` by their settings and the package's source, so a rerun only redoes what changed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from results_io import command_line, provenance, use_sibling_data, write_json, write_text  # noqa: E402

RESULTS = Path(__file__).parent / "results"
CACHE = Path(".orchrm") / "bench"
NS = (1, 2, 4, 5, 8, 16)
TARGET_N = 5
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


def _source_digest() -> str:
    import orchrm

    digest = hashlib.sha256()
    for file in sorted(Path(orchrm.__file__).parent.rglob("*.py")):
        digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def default_model_and_pairs(config, *, threads: int | None) -> tuple[object, object, dict]:
    """Collect, build pairs and train with ``config`` (cached under ``.orchrm/bench`` by the settings
    each depends on and the package's source); returns (model, pairs, info)."""
    import torch

    from orchrm.data.pairs import build_pairs
    from orchrm.data.tables import read_table, write_table
    from orchrm.execution.collect import collect_from_config
    from orchrm.model.reward_model import BradleyTerryModel
    from orchrm.model.trainer import fit

    if threads:
        torch.set_num_threads(threads)
    digest = _source_digest()
    key = hashlib.sha256((config.model_dump_json() + digest).encode()).hexdigest()[:12]
    # the pairs depend on the collection, the sandbox and the pair settings only: encoders share them
    data = config.collect.model_dump_json() + config.sandbox.model_dump_json() + config.pairs.model_dump_json() + digest
    pairs_key = hashlib.sha256(data.encode()).hexdigest()[:12]
    pairs_path, model_path = CACHE / f"best_of_n-pairs-{pairs_key}.parquet", CACHE / f"best_of_n-model-{key}.safetensors"
    if pairs_path.exists():
        pairs = read_table(pairs_path)
    else:
        t0 = time.perf_counter()
        artifacts = collect_from_config(config.collect, config.sandbox, progress=False)
        pairs = build_pairs(artifacts, config.pairs)
        write_table(pairs, pairs_path)
        print(f"collected {len(artifacts)} artifacts -> {len(pairs)} pairs in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    info = {"pairs": int(len(pairs)), "cache_key": key}
    if model_path.exists():
        model = BradleyTerryModel.load(model_path)
        info["trained"] = "loaded from the benchmark cache"
    else:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as ckpt:
            result = fit(pairs, config.model, config.train, checkpoint_dir=ckpt, progress=False)
        model = result.model
        model.save(model_path)
        info |= {"trained": "in this run", "train_seconds": round(time.perf_counter() - t0, 1),
                 "epochs_run": len(result.history), "best_epoch": result.best_epoch}
        print(f"trained in {info['train_seconds']} s", file=sys.stderr)
    return model, pairs, info


def targets(report, domains: list[str]) -> dict:
    """Issue 17's targets at N = 5, per domain, from the report's tables."""
    t = report.tables["best_of_n"]
    g = report.tables["gap_closed"]
    out = {}
    for domain in domains:
        at = t[(t["domain"] == domain) & (t["N"] == TARGET_N)].set_index("selector")
        one = t[(t["domain"] == domain) & (t["N"] == 1)].set_index("selector")
        rm = at.loc["reward_model"]
        gap = g[(g["domain"] == domain) & (g["N"] == TARGET_N)]["gap_closed"].iloc[0]
        traj = at.loc["trajectory"]
        out[domain] = {
            "gain_over_n1_points": round(100 * (rm.quality - one.loc["random", "quality"]), 1),
            "gain_met": bool(rm.quality - one.loc["random", "quality"] >= 0.07),
            "beats_cost_only": bool(rm.quality > at.loc["cost_only", "quality"]),
            "beats_length_only": bool(rm.quality > at.loc["length_only", "quality"]),
            "gap_closed": None if gap != gap else round(float(gap), 3),
            "gap_met": bool(gap >= 0.6),
            "token_ratio_trajectory_over_rm": round(float(traj.tokens_total / rm.tokens_total), 2),
            "tokens_met": bool(traj.tokens_total >= 5 * rm.tokens_total and rm.quality >= traj.quality),
        }
    return out


GROUP_SELECTORS = ("reward_model", "cost_only", "length_only", "trajectory", "random", "expected_oracle")


def group_sections(result: dict, domains: list[str], yn) -> list[str]:
    """The per-encoder and per-data-set tables at N = TARGET_N (rows of ``by_encoder`` / ``by_source``)."""
    titles = {"encoder": "By encoder (the same pairs and pool; each encoder trained on them)",
              "source": "Built-in generators against the real data sets (each collected, trained and evaluated on its own tasks)"}
    lines: list[str] = []
    for lead, title in titles.items():
        rows = result.get(f"by_{lead}")
        if not rows:
            continue
        lines += ["", f"## {title}: N = {TARGET_N}", ""]
        if lead == "source" and result.get("real_sources"):
            lines += ["real: " + ", ".join(f"{d} = {n}" for d, n in result["real_sources"].items()) + ".", ""]
        lines += [f"| {lead} | selector | " + " | ".join(domains) + " | all |", "|---|---|" + "---:|" * (len(domains) + 1)]
        for name in dict.fromkeys(r[lead] for r in rows):
            for sel in GROUP_SELECTORS:
                if lead == "encoder" and sel != "reward_model" and name != rows[0][lead]:
                    continue  # the other selectors do not depend on the encoder: shown once
                cells = []
                for d in [*domains, "all"]:
                    r = next((x for x in rows if x[lead] == name and x["selector"] == sel and x["domain"] == d and x["N"] == TARGET_N), None)
                    cells.append("n/a" if r is None else f"{r['quality']:.3f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]")
                lines.append(f"| {name} | {sel} | " + " | ".join(cells) + " |")
        lines += ["", f"| {lead} | domain | gain over N = 1 (pts) | beats cost-only | beats length-only | gap closed | "
                  "trajectory / RM tokens | pairwise accuracy | scoring p50 ms |", "|---|---|---:|---|---|---:|---:|---:|---:|"]
        models = result.get(f"models_by_{lead}", {})
        for name, per_domain in result.get(f"targets_by_{lead}", {}).items():
            m = models.get(name, {})
            acc, lat = m.get("pairwise_accuracy"), m.get("scoring_latency_ms_p50")
            for d, t in per_domain.items():
                lines.append(f"| {name} | {d} | {t['gain_over_n1_points']:+.1f} | {yn(t['beats_cost_only'])} | "
                             f"{yn(t['beats_length_only'])} | {t['gap_closed'] if t['gap_closed'] is not None else 'n/a'} | "
                             f"{t['token_ratio_trajectory_over_rm']:.1f}x | {'n/a' if acc is None else f'{acc:.3f}'} | "
                             f"{'n/a' if lat is None else f'{lat:.0f}'} |")
    return lines


def markdown(result: dict) -> str:
    rows, gaps, s = result["best_of_n"], result["gap_closed"], result["settings"]
    domains = [d for d in result["domains"]]
    lines = [
        "# Best-of-N plan selection on held-out tasks (sandbox)",
        "",
        f"The model of `configs/{Path(s['config']).name}` (trained on the `train` split of its collection's {result['model']['pairs']} "
        f"pairs; {result['model']['trained']}). "
        f"Pool: {s['tasks']} tasks per domain from seed {s['seed']} (never collected or tuned on), {s['candidates']} "
        f"base-sampler candidates each, executed once per pool seed {s['pool_seeds']} and re-run {s['repeats']} times for "
        "the expected quality. Cells: mean realised quality of the pick [95% bootstrap interval over tasks].",
        "",
        f"## Headline: N = {TARGET_N}",
        "",
        "| selector | " + " | ".join(domains) + " | all | execution tokens / task | scoring tokens / task |",
        "|---|" + "---:|" * (len(domains) + 3),
    ]
    sel = list(dict.fromkeys(r["selector"] for r in rows))
    for name in sel:
        cells = []
        for d in [*domains, "all"]:
            r = next(x for x in rows if x["selector"] == name and x["domain"] == d and x["N"] == TARGET_N)
            cells.append(f"{r['quality']:.3f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]")
        a = next(x for x in rows if x["selector"] == name and x["domain"] == "all" and x["N"] == TARGET_N)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {a['tokens_execution']:.0f} | {a['tokens_scoring']:.0f} |")
    lines += ["", "## Gap closed (random -> expected oracle, expected quality) by N", "",
              "| N | " + " | ".join(domains) + " | all |", "|---:|" + "---:|" * (len(domains) + 1)]
    for n in sorted({g["N"] for g in gaps}):
        cells = []
        for d in [*domains, "all"]:
            g = next(x for x in gaps if x["N"] == n and x["domain"] == d)
            cells.append("n/a" if g["gap_closed"] is None or g["gap_closed"] != g["gap_closed"] else
                         f"{g['gap_closed']:.2f} [{g['ci_low']:.2f}, {g['ci_high']:.2f}]")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += ["", "## Every N, all domains", "",
              "Mean realised quality (std over pool seeds); tokens per task (execution + scoring).", "",
              "| selector | " + " | ".join(f"N = {n}" for n in result["settings"]["best_of"]) + " |",
              "|---|" + "---:|" * len(result["settings"]["best_of"])]
    for name in sel:
        cells = []
        for n in result["settings"]["best_of"]:
            r = next(x for x in rows if x["selector"] == name and x["domain"] == "all" and x["N"] == n)
            cells.append(f"{r['quality']:.3f} ({r['seed_std']:.3f}); {r['tokens_execution'] + r['tokens_scoring']:.0f} tok")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", f"## Targets at N = {TARGET_N} (issue 17)", "",
              "| domain | gain over N = 1 (pts) | >= 7 | beats cost-only | beats length-only | gap closed | >= 0.60 | "
              "trajectory / RM tokens | >= 5x at equal quality |", "|---|---:|---|---|---|---:|---|---:|---|"]
    yn = lambda b: "yes" if b else "no"  # noqa: E731
    for d, t in result["targets"].items():
        lines.append(f"| {d} | {t['gain_over_n1_points']:+.1f} | {yn(t['gain_met'])} | {yn(t['beats_cost_only'])} | "
                     f"{yn(t['beats_length_only'])} | {t['gap_closed'] if t['gap_closed'] is not None else 'n/a'} | "
                     f"{yn(t['gap_met'])} | {t['token_ratio_trajectory_over_rm']:.1f}x | {yn(t['tokens_met'])} |")
    lines += group_sections(result, domains, yn)
    m = result["metrics"]
    pool_time = f"built in {result['seconds']['pool']:.0f} s" if result["seconds"]["pool"] else "from the benchmark cache"
    lines += ["", f"Held-out pairwise accuracy {m['pairwise_accuracy']:.3f}, ECE {m['ece']:.3f}; scoring latency p50 "
              f"{m['scoring_latency_ms_p50']:.1f} ms for {TARGET_N} candidates. The random selector is the expected quality "
              "of a uniform pick among the N (its N = 1 row is one random plan); cost-only picks the plan with the highest "
              "expected cost; the trajectory selector executes all N and keeps the answer whose final agent reported the "
              "highest confidence; judging tokens are 0 (no selector here calls an LLM judge).",
              "", f"Command: `{result['command']}`  ", f"Commit: `{result['commit']}`  ",
              f"Machine: {result['machine']['cpus']} CPUs ({result['machine']['cpu']}), load average "
              f"{result['machine']['load_average']}; pool {pool_time}, evaluated in "
              f"{result['seconds']['evaluate']:.0f} s.", ""]
    return "\n".join(lines)


def cached_pool(config, *, progress: bool = False):
    """The held-out pool of ``config.evaluate`` (cached under ``.orchrm/bench`` by everything that
    changes its rows and the package's source); returns (pool, seconds spent building it, 0 when cached)."""
    from orchrm.evaluation.pool import CandidatePool, build_pool

    parts = (config.evaluate.model_dump_json(), config.collect.model_dump_json(), config.sandbox.model_dump_json(), _source_digest())
    path = CACHE / f"best_of_n-pool-{hashlib.sha256(''.join(parts).encode()).hexdigest()[:12]}.parquet"
    if path.exists():
        return CandidatePool.load(path), 0.0
    t0 = time.perf_counter()
    pool = build_pool(config, progress=progress)
    pool.save(path)
    return pool, time.perf_counter() - t0


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


def run_variant(config, *, threads: int | None) -> dict:
    """Train (or load from the cache) the model of ``config``, build its pool, evaluate it."""
    from orchrm.evaluation.harness import evaluate

    model, pairs, info = default_model_and_pairs(config, threads=threads)
    pool, pool_seconds = cached_pool(config)
    print(f"pool: {pool.tasks} tasks, {len(pool.frame)} rows ({f'built in {pool_seconds:.0f} s' if pool_seconds else 'cached'})",
          file=sys.stderr)
    t0 = time.perf_counter()
    report = evaluate(model, pairs=pairs[pairs["split"] == "test"], pool=pool, config=config.evaluate)
    print(report.summary(), file=sys.stderr)
    return {"report": report, "info": info, "pool": pool, "pool_seconds": pool_seconds, "eval_seconds": time.perf_counter() - t0}


def _records(df) -> list[dict]:
    return df.astype(object).where(df.notna(), None).to_dict(orient="records")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(Path(__file__).resolve().parent.parent / "configs" / "default.yaml"))
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
    ap.add_argument("--render", type=Path, default=None, metavar="JSON",
                    help="only rewrite best_of_n.md in --out from an existing best_of_n.json")
    args = ap.parse_args(argv)
    if args.render:
        write_text(args.out / "best_of_n.md", markdown(json.loads(args.render.read_text())))
        return 0
    use_sibling_data()

    import torch

    from orchrm.config import load_config, with_overrides
    from orchrm.model.reward_model import BradleyTerryModel

    if args.threads:
        torch.set_num_threads(args.threads)
    base = load_config(args.config)
    ns = tuple(n for n in NS if n <= args.candidates)
    evaluate_cfg = with_overrides(base.evaluate, {
        "tasks_per_domain": args.tasks, "candidates": args.candidates, "best_of": ns, "pool_seeds": tuple(args.pool_seeds),
        "repeats": args.repeats, "seed": args.seed, "bootstrap": args.bootstrap,
        "gates": base.evaluate.gates.model_dump() | {"best_of": min(TARGET_N, args.candidates)},
    })
    config = base.model_copy(update={"evaluate": evaluate_cfg})
    if args.model:
        from orchrm.evaluation.harness import evaluate

        model, info = BradleyTerryModel.load(args.model), {"trained": f"loaded from {args.model}"}
        _, pairs, extra = default_model_and_pairs(config, threads=args.threads)
        info["pairs"] = extra["pairs"]
        pool, pool_seconds = cached_pool(config)
        t0 = time.perf_counter()
        report = evaluate(model, pairs=pairs[pairs["split"] == "test"], pool=pool, config=evaluate_cfg)
        head = {"report": report, "info": info, "pool": pool, "pool_seconds": pool_seconds, "eval_seconds": time.perf_counter() - t0}
    else:
        head = run_variant(config, threads=args.threads)
    report, pool = head["report"], head["pool"]
    domains = sorted(pool.frame["domain"].unique())
    own = config.model.encoder
    runs = {"encoder": {own: head}, "source": {"sandbox": head}}
    for name in args.encoders:
        model_fields, train_fields = ENCODERS[name]
        if args.model or name == own:
            continue
        print(f"== encoder {name}", file=sys.stderr)
        variant = config.model_copy(update={"model": with_overrides(config.model, model_fields),
                                            "train": with_overrides(config.train, train_fields)})
        runs["encoder"][name] = run_variant(variant, threads=args.threads)
    found = {} if args.real == "no" or args.model else real_sources(domains)
    if args.real == "yes" and not found:
        print("--real yes: no real data set can be read; set ORCHRM_DATA_DIR", file=sys.stderr)
        return 2
    if found:
        print(f"== real data sets {found}", file=sys.stderr)
        variant = config.model_copy(update={"collect": with_overrides(config.collect, {"sources": found})})
        runs["source"]["real"] = run_variant(variant, threads=args.threads)

    result = {
        "benchmark": "best-of-N plan selection on held-out sandbox tasks, every selector",
        **provenance(command_line("benchmarks/bench_best_of_n.py", ap, args), torch=torch.__version__,
                     torch_threads=torch.get_num_threads()),
        "settings": {"tasks": args.tasks, "candidates": args.candidates, "repeats": args.repeats, "pool_seeds": args.pool_seeds,
                     "seed": args.seed, "best_of": list(ns), "bootstrap": args.bootstrap, "config": args.config},
        "model": head["info"],
        "domains": domains,
        "seconds": {"pool": round(head["pool_seconds"], 1), "evaluate": round(head["eval_seconds"], 1)},
        "metrics": report.metrics,
        "best_of_n": _records(report.tables["best_of_n"]),
        "gap_closed": _records(report.tables["gap_closed"]),
        "pairwise": _records(report.tables["pairwise"]),
        "targets": targets(report, domains),
    }
    for lead, group in runs.items():
        if len(group) < 2:
            continue
        result[f"by_{lead}"] = [row | {lead: name} for name, run in group.items() for row in _records(run["report"].tables["best_of_n"])]
        result[f"gap_closed_by_{lead}"] = [row | {lead: name} for name, run in group.items()
                                           for row in _records(run["report"].tables["gap_closed"])]
        result[f"targets_by_{lead}"] = {name: targets(run["report"], sorted(run["pool"].frame["domain"].unique()))
                                        for name, run in group.items()}
        result[f"models_by_{lead}"] = {name: run["info"] | {"pairwise_accuracy": run["report"].metrics.get("pairwise_accuracy"),
                                                            "scoring_latency_ms_p50": run["report"].metrics.get("scoring_latency_ms_p50")}
                                       for name, run in group.items()}
    if found:
        result["real_sources"] = found
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "best_of_n.json", result)
    write_text(args.out / "best_of_n.md", markdown(result))
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in report.write(tmp).items():
            if path.suffix == ".png":
                shutil.copyfile(path, args.out / f"best_of_n.{name}.png")
    print((args.out / "best_of_n.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
