"""The pipeline as plain functions: one stage each, typed inputs and outputs, one function to run them.

collect (or ingest new traces) -> validate artifacts -> pairs -> validate pairs -> train ->
evaluate (candidate and champion on the same pool) -> gate -> register (alias ``challenger``) ->
promote (``champion``, only when every gate passed).

:func:`run_pipeline` is the only place that orders the stages. ``orchrm pipeline``, ``orchrm demo``
and the Prefect flows in ``flows/`` all call it; the flows pass the same stage functions wrapped
as Prefect tasks (:class:`Stages`), so retries, caching and the task runner are Prefect's while
the order stays here. Stages hand each other paths and ids, never models or clients, so that any
of them can run in another thread, process or machine.

MLflow: one parent run per pipeline run, one nested run per stage, every run id passed explicitly
(MLflow's active run is per thread). Training runs ``orchrm train`` in a subprocess with a timeout
(or ``torchrun``): a crash there leaves nothing registered, and the next run starts afresh.

>>> result = run_pipeline(load_config("configs/tiny.yaml"))   # doctest: +SKIP
>>> result.verdict.label, result.champion_version               # doctest: +SKIP
('promoted', 1)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd
import yaml

from orchrm.config import CollectConfig, EvaluateConfig, GatesConfig, NoiseConfig, PipelineConfig
from orchrm.errors import ConfigError, DataQualityError, RegistryError, TrainingError
from orchrm.util.digests import file_digest, source_hash

if TYPE_CHECKING:
    from orchrm.evaluation.gates import Verdict

log = logging.getLogger("orchrm.ops.pipeline")

TRACE_SUFFIXES = (".jsonl", ".parquet")
Say = Callable[[str], None]


# --------------------------------------------------------------------------------------------
# what the stages hand each other


@dataclass(frozen=True)
class NewTraces:
    """The trace files of a folder, and which of them no earlier run has trained on."""

    folder: Path
    files: tuple[Path, ...]
    new: tuple[Path, ...]
    #: file path -> sha256 of its bytes, for every file in ``files``
    digests: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Artifacts:
    """An artifact table on disk (DESIGN §3)."""

    path: Path
    rows: int
    tasks: int
    #: ``sandbox`` (collected here) or ``ingest`` (a user's traces)
    origin: str


@dataclass(frozen=True)
class Validated:
    """A table that passed its Great Expectations suite (warnings may remain)."""

    suite: str
    rows: int
    warnings: tuple[str, ...]
    out_dir: Path
    run_id: str


@dataclass(frozen=True)
class Pairs:
    """A pair table on disk, its pair counts per split and its MLflow dataset digest."""

    path: Path
    rows: int
    splits: Mapping[str, int]
    digest: str
    run_id: str


@dataclass(frozen=True)
class Pool:
    """A held-out candidate pool on disk (:class:`orchrm.evaluation.CandidatePool`)."""

    path: Path
    rows: int
    tasks: int
    seed: int


@dataclass(frozen=True)
class TrainedModel:
    """A model directory written by ``orchrm train`` (``model.safetensors``, ``train_result.json``)."""

    model_dir: Path
    model_path: Path
    run_id: str
    epochs: int
    best_val_loss: float | None
    train_seconds: float


@dataclass(frozen=True)
class Evaluation:
    """The candidate's held-out figures and, when there is one, the champion's on the same pool."""

    run_id: str
    report_dir: Path
    metrics: Mapping[str, float]
    champion_metrics: Mapping[str, float] | None
    champion_version: int | None
    #: the report's tables as markdown (pairwise accuracy, best-of-N, ...)
    markdown: str
    #: the same tables as a person reads them in a terminal
    summary: str


@dataclass(frozen=True)
class Registered:
    """A registered model version (alias ``challenger``) and the verdict stored with it."""

    version: int
    model_uri: str
    verdict: Verdict


@dataclass(frozen=True)
class PipelineResult:
    """What one pipeline run did. ``status`` is the gate verdict's label (``promoted`` /
    ``rejected``), or ``no-new-traces`` when an ingest run found nothing new and stopped."""

    status: Literal["promoted", "rejected", "no-new-traces"]
    run_dir: Path
    message: str
    run_id: str | None = None
    tracking_uri: str | None = None
    artifacts: Artifacts | None = None
    pairs: Pairs | None = None
    model: TrainedModel | None = None
    evaluation: Evaluation | None = None
    verdict: Verdict | None = None
    registered: Registered | None = None
    #: the version holding ``champion`` after this run (None when there is none yet)
    champion_version: int | None = None
    seconds: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The figures a scheduler or a script needs, as JSON-ready values."""
        return {
            "status": self.status,
            "message": self.message,
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "version": self.registered.version if self.registered else None,
            "champion_version": self.champion_version,
            "verdict": self.verdict.to_dict() if self.verdict else None,
            "metrics": dict(self.evaluation.metrics) if self.evaluation else {},
            "seconds": dict(self.seconds),
        }


@dataclass(frozen=True)
class Reevaluation:
    """The champion re-evaluated on fresh held-out tasks (the weekly deployment)."""

    champion_version: int | None
    pool: Pool | None
    evaluation: Evaluation | None
    verdict: Verdict | None
    message: str


# --------------------------------------------------------------------------------------------
# small helpers: hashing, files, MLflow runs


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _write_json(path: Path, data: Any) -> Path:
    """Write JSON atomically (a crash leaves the old file, never half a new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)
    return path


def _absolute(config: PipelineConfig) -> PipelineConfig:
    """The config with an absolute ``data_dir``, so that subprocesses and workers started
    elsewhere write to the same place."""
    data_dir = str(Path(config.data_dir).expanduser().resolve())
    return config if data_dir == config.data_dir else config.model_copy(update={"data_dir": data_dir})


def new_run_dir(config: PipelineConfig, name: str = "pipeline") -> Path:
    """A fresh folder ``<data_dir>/runs/<UTC time>-<name>`` for one run's tables and model."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    path = config.data_path("runs", f"{stamp}-{name}")
    path.mkdir(parents=True, exist_ok=False)
    return path


def _client(config: PipelineConfig):
    from orchrm.ops import registry

    return registry.client(registry.tracking_uri(config))


def _stage_run(config: PipelineConfig, name: str, parent_run_id: str | None):
    """``with _stage_run(config, "train", parent) as run_id:`` a nested MLflow run, ended
    FINISHED, or FAILED when the block raises (:func:`orchrm.ops.registry.run`)."""
    from orchrm.ops import registry

    return registry.run(config, name, parent_run_id=parent_run_id)


def is_transient(exc: BaseException) -> bool:
    """Whether a stage's failure may pass on a retry (the tracking server or storage), as
    opposed to a verdict about the data or the model, which a retry only repeats."""
    if isinstance(exc, DataQualityError | TrainingError | ConfigError):
        return False
    return isinstance(exc, RegistryError | OSError | ConnectionError | TimeoutError)


# --------------------------------------------------------------------------------------------
# stages


def find_new_traces(traces_dir: str | os.PathLike, *, data_dir: str | os.PathLike) -> NewTraces:
    """The trace files (``*.jsonl``, ``*.parquet``) in ``traces_dir`` and which of them are new:
    not in the ledger of files earlier runs trained on (``<data_dir>/ingest/ingested.json``, by
    content hash, so a renamed file is not new and an edited one is)."""
    folder = Path(traces_dir).expanduser()
    if not folder.is_dir():
        raise ConfigError(
            f"the traces folder {folder} does not exist: create it and let your system write its traces "
            "there (JSONL or Parquet in the artifact schema), or set pipeline.traces_dir to another folder"
        )
    files = tuple(sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in TRACE_SUFFIXES and not p.name.startswith(".")))
    digests = {str(p): file_digest(p) for p in files}
    seen = _ledger(Path(data_dir))
    new = tuple(p for p in files if digests[str(p)] not in seen)
    return NewTraces(folder=folder, files=files, new=new, digests=digests)


def _ledger_path(data_dir: Path) -> Path:
    return data_dir / "ingest" / "ingested.json"


def _ledger(data_dir: Path) -> dict[str, Any]:
    path = _ledger_path(data_dir)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def record_ingested(traces: NewTraces, *, data_dir: str | os.PathLike, run_id: str | None) -> Path:
    """Add the folder's files to the ledger once a run has trained on them."""
    seen = _ledger(Path(data_dir))
    now = datetime.now(UTC).isoformat()
    for name, digest in traces.digests.items():
        seen.setdefault(digest, {"file": name, "ingested_at": now, "run_id": run_id})
    return _write_json(_ledger_path(Path(data_dir)), seen)


def ingest_stage(traces: NewTraces, *, out_dir: str | os.PathLike) -> Artifacts:
    """Normalise every trace file of the folder (old and new: the model retrains on all of them)
    into one artifact table at ``out_dir/artifacts.parquet``. Each file keeps its own run id (a
    hash of its contents), so artifact ids never collide across files."""
    from orchrm.data.ingest import ingest_traces
    from orchrm.data.tables import read_table, write_table

    frames = [ingest_traces(read_table(p)) for p in traces.files]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    path = write_table(df, Path(out_dir) / "artifacts.parquet")
    return Artifacts(path=path, rows=len(df), tasks=int(df.task_id.nunique()) if len(df) else 0, origin="ingest")


def collect_stage(
    collect: CollectConfig, sandbox: NoiseConfig, *, data_dir: str, code_version: str, progress: bool = False
) -> Artifacts:
    """Run the sandbox collection and write ``<data_dir>/collect/<key>/artifacts.parquet``.

    ``key`` hashes every input (tasks and their source, seed, plans, samplers, sandbox noise and
    the code version), so the flows can cache this stage on its inputs and a cached result's
    file is the one those inputs wrote.
    """
    from orchrm.data.tables import write_table
    from orchrm.execution.collect import collect_from_config

    key = _key(collect.model_dump(mode="json"), sandbox.model_dump(mode="json"), code_version)
    df = collect_from_config(collect, sandbox, progress=progress)
    path = write_table(df, Path(data_dir) / "collect" / key / "artifacts.parquet")
    return Artifacts(path=path, rows=len(df), tasks=int(df.task_id.nunique()), origin="sandbox")


def _log_validation(config: PipelineConfig, report, *, run_id: str, name: str) -> None:
    from orchrm.ops import registry

    registry.log_validation(report, run_id=run_id, name=name)


def validate_artifacts_stage(artifacts: Artifacts, *, config: PipelineConfig, out_dir: str | os.PathLike, parent_run_id: str) -> Validated:
    """Run ``expectations/artifacts.json``; the results go to MLflow before a failure raises
    :class:`DataQualityError` (which lists every failed expectation with example rows)."""
    from orchrm.data.tables import read_table
    from orchrm.data.validation import validate_artifacts

    target = Path(out_dir) / "validation" / "artifacts"
    with _stage_run(config, "validate-artifacts", parent_run_id) as run_id:
        report = validate_artifacts(read_table(artifacts.path), out_dir=target, raise_on_failure=False)
        _log_validation(config, report, run_id=run_id, name="artifacts")
        report.raise_for_failures()
    return Validated("artifacts", artifacts.rows, tuple(f"{o.suite}.{o.name}" for o in report.warnings), target, run_id)


def pairs_stage(artifacts: Artifacts, *, config: PipelineConfig, out_dir: str | os.PathLike, parent_run_id: str) -> Pairs:
    """Build win/loss pairs (``config.pairs``), write ``out_dir/pairs.parquet`` and log it to
    MLflow as a dataset (its digest tags the registered model)."""
    from orchrm.data.pairs import build_pairs
    from orchrm.data.tables import read_table, write_table
    from orchrm.ops import registry

    with _stage_run(config, "build-pairs", parent_run_id) as run_id:
        pairs = build_pairs(read_table(artifacts.path), config.pairs)
        path = write_table(pairs, Path(out_dir) / "pairs.parquet")
        digest = registry.log_pairs_dataset(pairs, run_id=run_id, source=str(path))
    splits = {str(k): int(v) for k, v in pairs.split.value_counts().sort_index().items()} if len(pairs) else {}
    return Pairs(path=path, rows=len(pairs), splits=splits, digest=digest, run_id=run_id)


def validate_pairs_stage(pairs: Pairs, artifacts: Artifacts, *, config: PipelineConfig, out_dir: str | os.PathLike, parent_run_id: str) -> Validated:
    """Run ``expectations/pairs.json`` (pairs checked against the artifacts' tasks)."""
    from orchrm.data.pair_reader import read_pairs
    from orchrm.data.tables import read_table
    from orchrm.data.validation import validate_pairs

    target = Path(out_dir) / "validation" / "pairs"
    with _stage_run(config, "validate-pairs", parent_run_id) as run_id:
        # the one pair reader, as `orchrm validate` and the Trainer read pair files
        frame = read_pairs(pairs.path, config=config.pairs)
        report = validate_pairs(frame, artifacts=read_table(artifacts.path), out_dir=target, raise_on_failure=False)
        _log_validation(config, report, run_id=run_id, name="pairs")
        report.raise_for_failures()
    return Validated("pairs", pairs.rows, tuple(f"{o.suite}.{o.name}" for o in report.warnings), target, run_id)


def train_command(config: PipelineConfig, *, pairs_path: Path, model_dir: Path, config_path: Path, run_id: str | None) -> list[str]:
    """The command line that trains: ``python -m orchrm.cli train ...`` or, with
    ``pipeline.launcher: torchrun``, ``torchrun --nproc-per-node N -m orchrm.cli train ...``."""
    run = config.pipeline
    head = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={run.nproc_per_node}", "-m"] if run.launcher == "torchrun" else [sys.executable, "-m"]
    args = ["orchrm.cli", "train", "--pairs", str(pairs_path), "--out", str(model_dir), "--config", str(config_path), "--overwrite"]
    if run_id:
        args += ["--mlflow-run-id", run_id]
    return head + args


def write_config(config: PipelineConfig, path: Path) -> Path:
    """The resolved config as YAML (what this run used; the training subprocess reads it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    os.replace(tmp, path)
    return path


def train_stage(pairs: Pairs, *, config: PipelineConfig, out_dir: str | os.PathLike, parent_run_id: str) -> TrainedModel:
    """Train in a subprocess (:func:`train_command`) into ``out_dir/model``, with
    ``pipeline.train_timeout_s``; the child logs params and per-step/per-epoch metrics to this
    stage's MLflow run through :class:`orchrm.ops.registry.MlflowCallback`.

    A crash, a non-zero exit or the timeout raise :class:`TrainingError` (its message ends with
    the last lines the trainer printed, the whole log stays in ``model/train.log``); nothing is
    registered, and the next run trains in a fresh folder.
    """
    from orchrm.ops import registry

    out = Path(out_dir)
    model_dir = out / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    config_path = write_config(config, out / "config.yaml")
    timeout = config.pipeline.train_timeout_s
    with _stage_run(config, "train", parent_run_id) as run_id:
        cmd = train_command(config, pairs_path=pairs.path, model_dir=model_dir, config_path=config_path, run_id=run_id)
        env = {**os.environ, "MLFLOW_TRACKING_URI": registry.tracking_uri(config), "PYTHONUNBUFFERED": "1"}
        log_path = model_dir / "train.log"
        with log_path.open("wb") as out_log:
            # a session of its own, so a timeout stops torchrun's workers too
            proc = subprocess.Popen(cmd, stdout=out_log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _stop(proc)
                raise TrainingError(
                    f"training did not finish within pipeline.train_timeout_s = {timeout:g} s and was stopped; nothing "
                    f"was registered. Raise the timeout or train less (train.epochs); the log is {log_path}"
                ) from None
            except BaseException:
                _stop(proc)
                raise
        if code != 0:
            tail = "\n".join(log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-15:])
            how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
            raise TrainingError(
                f"training {how}; nothing was registered and the next run starts afresh. The log ({log_path}) ends:\n{tail}"
            )
        result = json.loads((model_dir / "train_result.json").read_text(encoding="utf-8"))
    return TrainedModel(
        model_dir=model_dir,
        model_path=model_dir / "model.safetensors",
        run_id=run_id,
        epochs=len(result.get("history", [])),
        best_val_loss=result.get("best_val_loss"),
        train_seconds=float(result.get("train_seconds", 0.0)),
    )


def _stop(proc: subprocess.Popen) -> None:
    """Stop the training process and everything it started; wait for it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def pool_stage(
    evaluate: EvaluateConfig, collect: CollectConfig, sandbox: NoiseConfig, *, data_dir: str, code_version: str, progress: bool = False
) -> Pool:
    """Build the held-out candidate pool (:func:`orchrm.evaluation.build_pool`: tasks from
    ``evaluate.seed``, never the collection seed) and write ``<data_dir>/pools/<key>/pool.parquet``;
    ``key`` hashes the inputs, as for :func:`collect_stage`."""
    from orchrm.evaluation.pool import build_pool

    key = _key(evaluate.model_dump(mode="json"), collect.model_dump(mode="json"), sandbox.model_dump(mode="json"), code_version)
    cfg = PipelineConfig(data_dir=data_dir, collect=collect, sandbox=sandbox, evaluate=evaluate)
    pool = build_pool(cfg, progress=progress)
    path = Path(data_dir) / "pools" / key / "pool.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pool.save(path)
    frame = pool.frame
    return Pool(path=path, rows=len(frame), tasks=int(frame.task_id.nunique()) if "task_id" in frame else 0, seed=evaluate.seed)


def evaluate_stage(
    model: TrainedModel | None, pairs: Pairs | None, pool: Pool, *, config: PipelineConfig, out_dir: str | os.PathLike, parent_run_id: str
) -> Evaluation:
    """Evaluate the candidate and the current champion (when there is one) on the same pool and
    held-out pairs (split ``test``) in one call; write the report (JSON, CSV tables, PNG plots)
    to ``out_dir/evaluation`` and log it to MLflow. With ``model=None`` the champion is the one
    evaluated (the weekly re-evaluation)."""
    from orchrm.evaluation.harness import evaluate
    from orchrm.evaluation.pool import CandidatePool
    from orchrm.ops import registry, serving

    target = Path(out_dir) / "evaluation"
    with _stage_run(config, "evaluate", parent_run_id) as run_id:
        champion_version = registry.champion_version(config)
        champion = serving.load_reward_model(champion_uri(config)) if champion_version is not None else None
        if model is None:
            if champion is None:
                raise RegistryError(f"no {config.registry.model_name}@champion to evaluate yet: run the pipeline first")
            candidate, champion = champion, None
        else:
            candidate = serving.load_reward_model(str(model.model_path))
        held_out = _held_out_pairs(pairs, config)
        pool_obj = CandidatePool.load(pool.path)
        report = evaluate(candidate, pairs=held_out, pool=pool_obj, config=config.evaluate, champion=champion)
        report.write(target)
        registry.log_evaluation(report, run_id=run_id, champion_version=champion_version if model is not None else None)
    return Evaluation(
        run_id=run_id,
        report_dir=target,
        metrics=dict(report.metrics),
        champion_metrics=dict(report.champion_metrics) if report.champion_metrics is not None else None,
        champion_version=champion_version if model is not None else None,
        markdown=report.to_markdown(),
        summary=report.summary(),
    )


def _held_out_pairs(pairs: Pairs | None, config: PipelineConfig) -> pd.DataFrame:
    if pairs is None:
        from orchrm.data.pairs import empty_pairs

        return empty_pairs()
    from orchrm.data.pair_reader import read_pairs

    df = read_pairs(pairs.path, config=config.pairs)
    return df[df.split == "test"].reset_index(drop=True)


def champion_uri(config: PipelineConfig) -> str:
    return f"models:/{config.registry.model_name}@champion"


def gate_stage(evaluation: Evaluation, gates: GatesConfig) -> Verdict:
    """Every gate on the flat metrics (and the champion's, same pool); see
    :func:`orchrm.evaluation.check_gates`."""
    from orchrm.evaluation.gates import check_gates

    return check_gates(evaluation.metrics, gates, champion=evaluation.champion_metrics)


def register_stage(model: TrainedModel, evaluation: Evaluation, verdict: Verdict, pairs: Pairs, *, config: PipelineConfig) -> Registered:
    """Log the model as a pyfunc and register it as a new version (alias ``challenger``; tags:
    every gate, the verdict, the pairs' digest, the git commit). Whatever the verdict: a rejected
    candidate is kept, with the reason, and never touches ``champion``."""
    from orchrm.ops import registry

    uri = registry.log_model(model.model_dir, run_id=evaluation.run_id, config=config)
    version = registry.register_candidate(uri, run_id=evaluation.run_id, verdict=verdict, data_digest=pairs.digest, config=config)
    return Registered(version=int(version), model_uri=uri, verdict=verdict)


def promote_stage(registered: Registered, *, config: PipelineConfig) -> int:
    """Give the version ``champion`` (its verdict passed; :func:`orchrm.ops.registry.promote` checks
    again and raises :class:`PromotionRejected` otherwise). Returns the version."""
    from orchrm.ops import registry

    registry.promote(registered.version, config=config, verdict=registered.verdict)
    return registered.version


# --------------------------------------------------------------------------------------------
# the pipeline


class _Done:
    """The already-computed result of a stage run here and now (the ``.result()`` of a future)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value


def _submit(stage: Callable, *args, **kwargs):
    """Start a stage: a Prefect task (anything with ``.submit``) goes to the flow's task runner
    and returns its future; a plain function runs now."""
    submit = getattr(stage, "submit", None)
    return submit(*args, **kwargs) if submit is not None else _Done(stage(*args, **kwargs))


def _call(stage: Callable, *args, **kwargs):
    return _submit(stage, *args, **kwargs).result()


@dataclass(frozen=True)
class Stages:
    """The stage functions :func:`run_pipeline` calls. The defaults run here and now; the flows
    pass the same functions wrapped as Prefect tasks (retries, caching, a task runner)."""

    find_new_traces: Callable[..., NewTraces] = find_new_traces
    ingest: Callable[..., Artifacts] = ingest_stage
    collect: Callable[..., Artifacts] = collect_stage
    validate_artifacts: Callable[..., Validated] = validate_artifacts_stage
    build_pairs: Callable[..., Pairs] = pairs_stage
    validate_pairs: Callable[..., Validated] = validate_pairs_stage
    build_pool: Callable[..., Pool] = pool_stage
    train: Callable[..., TrainedModel] = train_stage
    evaluate: Callable[..., Evaluation] = evaluate_stage
    gate: Callable[..., Verdict] = gate_stage
    register: Callable[..., Registered] = register_stage
    promote: Callable[..., int] = promote_stage
    record_ingested: Callable[..., Path] = record_ingested


class _Clock:
    def __init__(self, say: Say) -> None:
        self.say, self.seconds = say, {}

    def stage(self, name: str, title: str):
        clock = self

        class _Timer:
            def __enter__(self):
                clock.say(f"\n== {title}")
                self.t0 = time.perf_counter()

            def __exit__(self, exc_type, *_):
                clock.seconds[name] = round(time.perf_counter() - self.t0, 1)
                if exc_type is None:
                    clock.say(f"   ({clock.seconds[name]:.1f} s)")

        return _Timer()


def run_pipeline(
    config: PipelineConfig,
    *,
    traces_dir: str | os.PathLike | None = None,
    run_dir: str | os.PathLike | None = None,
    stages: Stages | None = None,
    say: Say | None = None,
    progress: bool = False,
) -> PipelineResult:
    """Run every stage once and return what happened.

    New artifacts come from ``traces_dir`` (default ``config.pipeline.traces_dir``) when set, else
    from the sandbox collection. An ingest run whose folder holds no file that an earlier run
    trained on ends early with status ``no-new-traces``. A data-quality failure raises
    :class:`DataQualityError`, a failed training :class:`TrainingError` (nothing registered); a
    candidate that fails a gate is registered with verdict ``rejected`` and ``champion`` stays.
    Tables, validation results, the model and the evaluation report land in ``run_dir``
    (default: a new ``<data_dir>/runs/<UTC time>-pipeline``).
    """
    from orchrm.ops import registry

    config = _absolute(config)
    stages = stages or Stages()
    say = say or log.info
    traces_dir = traces_dir if traces_dir is not None else config.pipeline.traces_dir
    out = Path(run_dir).resolve() if run_dir is not None else new_run_dir(config)
    out.mkdir(parents=True, exist_ok=True)
    clock = _Clock(say)
    data_dir = config.data_dir
    version = source_hash()

    new: NewTraces | None = None
    if traces_dir is not None:
        new = _call(stages.find_new_traces, str(traces_dir), data_dir=data_dir)
        if not new.new:
            message = (
                f"no new traces in {new.folder} ({len(new.files)} file(s), every one trained on before): "
                "nothing to do tonight"
            )
            say(message)
            return PipelineResult(status="no-new-traces", run_dir=out, message=message, champion_version=registry.champion_version(config))

    registry.configure(config)  # the store and experiment exist before any stage or subprocess touches them
    uri = registry.tracking_uri(config)
    parent = registry.start_run(config, "pipeline", tags={"orchrm.run_dir": str(out), "orchrm.code_version": version})
    say(f"MLflow run {parent} at {uri}; files in {out}")
    try:
        if new is not None:
            with clock.stage("ingest", f"1/8 ingest {len(new.files)} trace file(s) ({len(new.new)} new) from {new.folder}"):
                artifacts = _call(stages.ingest, new, out_dir=str(out))
                say(f"{artifacts.rows} artifacts of {artifacts.tasks} tasks")
        else:
            c = config.collect
            runs = f" x {c.repeats} executions" if c.repeats > 1 else ""
            with clock.stage("collect", f"1/8 collect: {c.tasks_per_domain} tasks x {c.plans_per_task} plans{runs} in {', '.join(c.domains)}"):
                artifacts = _call(stages.collect, c, config.sandbox, data_dir=data_dir, code_version=version, progress=progress)
                say(f"{artifacts.rows} artifacts of {artifacts.tasks} tasks: {artifacts.path}")
        with clock.stage("validate-artifacts", "2/8 validate artifacts (Great Expectations)"):
            checked = _call(stages.validate_artifacts, artifacts, config=config, out_dir=str(out), parent_run_id=parent)
            say(f"passed on {checked.rows} rows" + (f"; warnings: {', '.join(checked.warnings)}" if checked.warnings else ""))
        with clock.stage("build-pairs", "3/8 build win/loss pairs"):
            pairs = _call(stages.build_pairs, artifacts, config=config, out_dir=str(out), parent_run_id=parent)
            say(f"{pairs.rows} pairs ({', '.join(f'{k} {v}' for k, v in pairs.splits.items())}); digest {pairs.digest}")
        with clock.stage("validate-pairs", "4/8 validate pairs (Great Expectations)"):
            checked = _call(stages.validate_pairs, pairs, artifacts, config=config, out_dir=str(out), parent_run_id=parent)
            say(f"passed on {checked.rows} rows" + (f"; warnings: {', '.join(checked.warnings)}" if checked.warnings else ""))
        launcher = "torchrun" if config.pipeline.launcher == "torchrun" else "a subprocess"
        with clock.stage("train", f"5/8 train the Bradley-Terry reward model ({config.model.encoder} encoder, in {launcher})"):
            model = _call(stages.train, pairs, config=config, out_dir=str(out), parent_run_id=parent)
            say(f"{model.epochs} epoch(s) in {model.train_seconds:.1f} s, best validation loss {model.best_val_loss}; {model.model_path}")
        with clock.stage("evaluate", "6/8 evaluate on held-out tasks (candidate and champion, same pool)"):
            # after training, not beside it: on a small machine the two only slow each other down
            pool = _call(stages.build_pool, config.evaluate, config.collect, config.sandbox, data_dir=data_dir, code_version=version, progress=progress)
            say(f"held-out pool: {pool.tasks} tasks, {pool.rows} candidate executions: {pool.path}")
            evaluation = _call(stages.evaluate, model, pairs, pool, config=config, out_dir=str(out), parent_run_id=parent)
            say(evaluation.summary)
        with clock.stage("gate", "7/8 gates"):
            verdict = _call(stages.gate, evaluation, config.evaluate.gates)
            say(str(verdict))
        with clock.stage("register", "8/8 register (alias challenger) and promote (champion, only when every gate passed)"):
            registered = _call(stages.register, model, evaluation, verdict, pairs, config=config)
            if verdict.passed:
                _call(stages.promote, registered, config=config)
            champion = registry.champion_version(config)
            say(f"version {registered.version}: {verdict.label}; champion is version {champion}")
        if new is not None:
            _call(stages.record_ingested, new, data_dir=data_dir, run_id=parent)
    except BaseException:
        registry.end_run(config, parent, status="FAILED")
        raise
    _log_summary(config, parent, verdict=verdict, registered=registered, champion=champion, seconds=clock.seconds)
    registry.end_run(config, parent)
    if verdict.passed:
        message = f"version {registered.version} passed every gate and is now {config.registry.model_name}@champion"
    else:
        kept = f"version {champion} stays champion" if champion is not None else "there is no champion yet"
        message = f"version {registered.version} was rejected ({', '.join(g.name for g in verdict.failed())}); {kept}"
    return PipelineResult(
        status=verdict.label,
        run_dir=out,
        message=message,
        run_id=parent,
        tracking_uri=uri,
        artifacts=artifacts,
        pairs=pairs,
        model=model,
        evaluation=evaluation,
        verdict=verdict,
        registered=registered,
        champion_version=champion,
        seconds=dict(clock.seconds),
    )


def _log_summary(config: PipelineConfig, run_id: str, *, verdict: Verdict, registered: Registered, champion: int | None, seconds: Mapping[str, float]) -> None:
    client = _client(config)
    client.set_tag(run_id, "verdict", verdict.label)
    client.set_tag(run_id, "model_version", str(registered.version))
    client.set_tag(run_id, "champion_version", str(champion))
    for name, value in seconds.items():
        client.log_metric(run_id, f"seconds.{name}", float(value))


def reevaluate_champion(
    config: PipelineConfig,
    *,
    seed: int | None = None,
    stages: Stages | None = None,
    say: Say | None = None,
    run_dir: str | os.PathLike | None = None,
    progress: bool = False,
) -> Reevaluation:
    """Evaluate ``champion`` again on a fresh held-out pool (``seed``, default: one per ISO week)
    and the held-out pairs of the run that trained it, and check its gates (no champion to beat:
    it is the champion). Logs a ``reevaluate`` run
    tagged with the version; promotes and demotes nothing."""
    from orchrm.ops import registry

    config = _absolute(config)
    stages = stages or Stages()
    say = say or log.info
    champion = registry.champion_version(config)
    if champion is None:
        message = f"no {config.registry.model_name}@champion yet: nothing to re-evaluate (run the pipeline first)"
        say(message)
        return Reevaluation(champion_version=None, pool=None, evaluation=None, verdict=None, message=message)
    seed = weekly_seed(config) if seed is None else seed
    evaluate = config.evaluate.model_copy(update={"seed": seed})
    fresh = config.model_copy(update={"evaluate": evaluate})
    out = Path(run_dir).resolve() if run_dir is not None else new_run_dir(config, "reevaluate")
    parent = registry.start_run(fresh, "reevaluate", tags={"champion_version": str(champion), "evaluate.seed": str(seed)})
    try:
        pairs = champion_pairs(config, champion)
        pool = _call(stages.build_pool, evaluate, config.collect, config.sandbox, data_dir=config.data_dir, code_version=source_hash(), progress=progress)
        say(f"fresh held-out pool: {pool.tasks} tasks (seed {seed}); held-out pairs of the champion's run: {pairs.path}")
        evaluation = _call(stages.evaluate, None, pairs, pool, config=fresh, out_dir=str(out), parent_run_id=parent)
        say(evaluation.summary)
        gates = config.evaluate.gates.model_copy(update={"beat_champion": False})
        verdict = _call(stages.gate, evaluation, gates)
        say(str(verdict))
    except BaseException:
        registry.end_run(fresh, parent, status="FAILED")
        raise
    _client(fresh).set_tag(parent, "verdict", verdict.label)
    registry.end_run(fresh, parent)
    state = "still passes every gate" if verdict.passed else f"now fails {', '.join(g.name for g in verdict.failed())}"
    message = f"champion version {champion} on {pool.tasks} fresh held-out tasks (seed {seed}) {state}"
    say(message)
    return Reevaluation(champion_version=champion, pool=pool, evaluation=evaluation, verdict=verdict, message=message)


def champion_pairs(config: PipelineConfig, version: int) -> Pairs:
    """The pair table of the pipeline run that registered ``version`` (its held-out split is what
    the pairwise figures are measured on); the run's folder is a tag of its MLflow parent run."""
    from orchrm.data.tables import read_table
    from orchrm.ops import registry

    client = _client(config)
    run_id = registry.version_info(version, config=config)["run_id"]
    parent = client.get_run(run_id).data.tags.get("mlflow.parentRunId")
    run_dir = client.get_run(parent).data.tags.get("orchrm.run_dir") if parent else None
    path = Path(run_dir) / "pairs.parquet" if run_dir else None
    if path is None or not path.is_file():
        raise RegistryError(
            f"the pairs of version {version}'s pipeline run are not at {path}: re-evaluate on the machine that trained it, "
            "or run the pipeline again to get a champion whose run folder is here"
        )
    df = read_table(path)
    splits = {str(k): int(v) for k, v in df.split.value_counts().sort_index().items()}
    return Pairs(path=path, rows=len(df), splits=splits, digest="", run_id=run_id)


def weekly_seed(config: PipelineConfig, when: datetime | None = None) -> int:
    """A held-out seed per ISO week (``year * 100 + week``), never the collection seed."""
    year, week, _ = (when or datetime.now(UTC)).isocalendar()
    seed = year * 100 + week
    return seed + 1 if seed == config.collect.seed else seed


# --------------------------------------------------------------------------------------------
# the report a person reads (the flows publish it as a Prefect artifact)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def report_markdown(result: PipelineResult) -> str:
    """The run's report: the verdict with each gate's figure and threshold, then the evaluation's
    tables (pairwise accuracy, best-of-N)."""
    lines = [f"# OrchRM pipeline: {result.status}", "", result.message, ""]
    if result.verdict is not None:
        lines += ["## Gates", "", "| gate | value | threshold | result | detail |", "|---|---|---|---|---|"]
        for g in result.verdict.gates:
            lines.append(f"| {g.name} | {_fmt(g.value)} | {_fmt(g.threshold)} | {'pass' if g.passed else 'FAIL'} | {g.detail} |")
        lines.append("")
    if result.registered is not None:
        lines.append(f"Registered version {result.registered.version} (alias challenger); champion: version {result.champion_version}.")
        lines.append("")
    if result.evaluation is not None:
        lines += [result.evaluation.markdown, ""]
    if result.seconds:
        lines += ["## Stage times (s)", "", "| stage | seconds |", "|---|---|"] + [f"| {k} | {v:.1f} |" for k, v in result.seconds.items()]
    return "\n".join(lines)


def failure_markdown(exc: BaseException) -> str:
    """The report of a run that stopped: which stage's error, and its message (a data-quality
    failure lists every failed expectation with example rows)."""
    verdicts = {DataQualityError: "bad data: nothing was trained or registered", TrainingError: "training failed: nothing was registered"}
    what = next((v for k, v in verdicts.items() if isinstance(exc, k)), "the run stopped: nothing was registered")
    return "\n".join([f"# OrchRM pipeline: failed ({type(exc).__name__})", "", what, "", "```", str(exc), "```"])


def reevaluation_markdown(result: Reevaluation) -> str:
    """The weekly report: the champion's gates on fresh tasks, then the evaluation's tables."""
    lines = ["# OrchRM weekly re-evaluation", "", result.message, ""]
    if result.verdict is not None:
        lines += ["| gate | value | threshold | result | detail |", "|---|---|---|---|---|"]
        lines += [f"| {g.name} | {_fmt(g.value)} | {_fmt(g.threshold)} | {'pass' if g.passed else 'FAIL'} | {g.detail} |" for g in result.verdict.gates]
        lines.append("")
    if result.evaluation is not None:
        lines.append(result.evaluation.markdown)
    return "\n".join(lines)


#: where ``mlflow ui`` serves a local store by default
LOCAL_MLFLOW_UI = "http://127.0.0.1:5000"


def mlflow_run_url(config: PipelineConfig, run_id: str | None) -> str | None:
    """A link to the run in the MLflow UI: the tracking server's own page, or for a local store
    the page ``mlflow ui --backend-store-uri <store>`` serves (``MLFLOW_UI_URL`` overrides)."""
    from orchrm.ops import registry

    if not run_id:
        return None
    uri = registry.tracking_uri(config)
    base = uri if uri.startswith(("http://", "https://")) else os.environ.get("MLFLOW_UI_URL", LOCAL_MLFLOW_UI)
    experiment_id = _client(config).get_run(run_id).info.experiment_id
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def nightly_traces_dir(config: PipelineConfig, traces_dir: str | os.PathLike | None = None) -> str:
    """The folder the nightly retrain reads: ``traces_dir``, else ``pipeline.traces_dir``."""
    folder = traces_dir if traces_dir is not None else config.pipeline.traces_dir
    if folder is None:
        raise ConfigError(
            "the nightly retrain reads new traces from a folder: set pipeline.traces_dir in the config (or pass "
            "traces_dir to the deployment) to the folder your system writes its traces to"
        )
    return str(folder)
