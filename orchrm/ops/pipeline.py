"""The pipeline: :func:`run_pipeline` orders the stages of :mod:`orchrm.ops.stages`, runs each once and
says what happened; :func:`reevaluate_champion` is the weekly re-evaluation; the markdown reports
are what a person reads of either.

``orchrm pipeline``, ``orchrm demo`` and the Prefect flows in ``flows/`` all call :func:`run_pipeline`;
the flows pass the same stage functions wrapped as Prefect tasks (:class:`Stages`), so caching
and the task runner are Prefect's while the order stays here (tracking and registry calls retry
themselves, :func:`orchrm.ops.tracking.with_server_retries`).

MLflow: one parent run per pipeline run, one nested run per stage, every run id passed explicitly
(MLflow's active run is per thread).

>>> result = run_pipeline(load_config("configs/tiny.yaml"))   # doctest: +SKIP
>>> result.verdict.label, result.champion_version               # doctest: +SKIP
('promoted', 1)
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from orchrm.config import PipelineConfig
from orchrm.errors import ConfigError, DataQualityError, RegistryError, TrainingError
from orchrm.evaluation.gates import Verdict
from orchrm.ops.stages import (
    Artifacts,
    Evaluation,
    NewTraces,
    Pairs,
    Pool,
    Registered,
    TrainedModel,
    Validated,
    collect_stage,
    combine_collect_stage,
    combine_pool_stage,
    evaluate_stage,
    find_new_traces,
    gate_stage,
    ingest_stage,
    pairs_stage,
    plan_pool_stage,
    pool_stage,
    promote_stage,
    record_ingested,
    register_stage,
    rejected_dir,
    train_stage,
    validate_artifacts_stage,
    validate_pairs_stage,
)
from orchrm.util.digests import source_hash

if TYPE_CHECKING:
    from collections.abc import Sequence

    from orchrm.execution.collect import ChunkRows, TaskChunk

log = logging.getLogger("orchrm.ops.pipeline")

Say = Callable[[str], None]


# --------------------------------------------------------------------------------------------
# what a run returns


@dataclass(frozen=True)
class PipelineResult:
    """What one pipeline run did. ``status`` is the gate verdict's label (``promoted`` /
    ``rejected``), ``no-new-traces`` when an ingest run found nothing new and stopped, or
    ``nothing-valid`` when every new trace file it found was rejected (moved to ``rejected/``)."""

    status: Literal["promoted", "rejected", "no-new-traces", "nothing-valid"]
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
            "pool": self.evaluation.pool_kind if self.evaluation else None,
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
# small helpers: config, run folder, MLflow client


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
    from orchrm.ops import tracking

    return tracking.client(tracking.tracking_uri(config))


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


def _backend(config: PipelineConfig) -> dict:
    """The ``backend=`` of the stages that execute plans: given only for a real model, so the
    sandbox's stage calls (and the flows' cache keys on them) stay as they were."""
    return {"backend": config.backend} if config.backend.kind != "sandbox" else {}


@dataclass(frozen=True)
class Stages:
    """The stage functions :func:`run_pipeline` calls. The defaults run here and now; the flows
    pass the same functions wrapped as Prefect tasks (caching, a task runner)."""

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
    record_ingested: Callable[..., tuple[str, ...]] = record_ingested
    #: collection and the sandbox pool mapped over chunks of tasks (the flows' on a Dask task runner):
    #: one call per chunk, every chunk submitted before any is awaited (a Dask cluster spreads them
    #: over its workers), combined in this process (:func:`collect_in_chunks`, :func:`pool_in_chunks`).
    #: None, the default: ``collect`` / ``build_pool`` run the whole stage in one call, over this
    #: machine's cores (``collect.workers`` processes), with a progress bar
    collect_chunk: Callable[..., ChunkRows] | None = None
    pool_chunk: Callable[..., ChunkRows] | None = None


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


@dataclass(frozen=True)
class _Run:
    """What every step of one pipeline run reads: the config, the stages, where its files and its
    MLflow parent run are."""

    config: PipelineConfig
    stages: Stages
    say: Say
    clock: _Clock
    out: Path
    code_version: str
    progress: bool
    parent: str
    tracking_uri: str


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
    from the sandbox collection. An ingest run trains on the folder's files inside the retention
    window (``pipeline.window_days`` / ``pipeline.max_files``: the newest by modification time),
    and one whose window holds no file that an earlier run trained on ends early with status
    ``no-new-traces``. A trace file that fails ingest or, when
    new, the artifact suite alone is moved to ``rejected/`` beside the folder (with a report) and
    the run goes on with the rest; when no new file is left it ends early with status
    ``nothing-valid`` and the reasons. The files a run trained on are recorded in the tracking
    store (:mod:`orchrm.ops.ledger`) as soon as its version is registered; a rejected file is
    not recorded. A data-quality
    failure of the table the files make together raises
    :class:`DataQualityError`, a failed training :class:`TrainingError` (nothing registered); a
    candidate that fails a gate is registered with verdict ``rejected`` and ``champion`` stays.
    Tables, validation results, the model and the evaluation report land in ``run_dir``
    (default: a new ``<data_dir>/runs/<UTC time>-pipeline``).

    The MLflow parent run ends ``FINISHED``, or ``FAILED`` when anything after its start raises,
    the summary logging included (``KILLED`` when the process is interrupted or cancelled): it
    never stays ``RUNNING``.
    """
    from orchrm.ops import tracking

    config = _absolute(config)
    stages = stages or Stages()
    say = say or log.info
    traces_dir = traces_dir if traces_dir is not None else config.pipeline.traces_dir
    out = Path(run_dir).resolve() if run_dir is not None else new_run_dir(config)
    out.mkdir(parents=True, exist_ok=True)
    new: NewTraces | None = None
    ingested: Artifacts | None = None
    clock = _Clock(say)
    if traces_dir is not None:
        new = _call(stages.find_new_traces, str(traces_dir), config=config)
        if not new.new:
            return _nothing_new(config, new, out=out, say=say)
        ingested = _ingest_step(stages, clock, new, out=out)
        new = _accepted(new, ingested)
        if not new.new:
            return _nothing_valid(config, new, ingested, out=out, say=say, seconds=clock.seconds)
    run = _start(config, stages=stages, say=say, out=out, progress=progress, clock=clock)
    try:
        artifacts = ingested if ingested is not None else _collect_step(run)
        _validate_step(run, "validate-artifacts", "2/8 validate artifacts (Great Expectations)", stages.validate_artifacts, artifacts)
        pairs = _pairs_step(run, artifacts)
        _validate_step(run, "validate-pairs", "4/8 validate pairs (Great Expectations)", stages.validate_pairs, pairs, artifacts)
        model = _train_step(run, pairs)
        evaluation = _evaluate_step(run, model, pairs, artifacts)
        verdict = _gate_step(run, evaluation)
        registered, champion = _register_step(run, model, evaluation, verdict, pairs, new)
        result = PipelineResult(
            status=verdict.label,
            run_dir=out,
            message=_verdict_message(config, verdict, registered=registered, champion=champion),
            run_id=run.parent,
            tracking_uri=run.tracking_uri,
            artifacts=artifacts,
            pairs=pairs,
            model=model,
            evaluation=evaluation,
            verdict=verdict,
            registered=registered,
            champion_version=champion,
            seconds=dict(run.clock.seconds),
        )
        _summary_step(run, result)
    except BaseException as exc:
        _end_stopped(run, exc)
        raise
    tracking.end_run(config, run.parent)
    return result


def _nothing_new(config: PipelineConfig, new: NewTraces, *, out: Path, say: Say) -> PipelineResult:
    """The result of an ingest run whose folder holds only files earlier runs trained on."""
    from orchrm.ops import registry

    outside = f"; {len(new.outside)} older file(s) outside the retention window" if new.outside else ""
    message = (
        f"no new traces in {new.folder} ({len(new.files)} file(s), every one trained on before{outside}): "
        "nothing to do tonight"
    )
    say(message)
    return PipelineResult(status="no-new-traces", run_dir=out, message=message, champion_version=registry.champion_version(config))


def _nothing_valid(config: PipelineConfig, new: NewTraces, ingested: Artifacts, *, out: Path, say: Say,
                   seconds: Mapping[str, float]) -> PipelineResult:
    """The result of an ingest run whose every new file was rejected: nothing valid to train on."""
    from orchrm.ops import registry

    reasons = "; ".join(f"{r.source.name}: {r.reason} (now {r.moved_to}, report {r.report.name})" for r in ingested.rejected)
    message = (
        f"nothing valid to train on in {new.folder}: {len(ingested.rejected)} file(s) rejected and moved to "
        f"{rejected_dir(new.folder)}, no other new file ({reasons}); nothing to do tonight"
    )
    say(message)
    return PipelineResult(status="nothing-valid", run_dir=out, message=message, artifacts=ingested,
                          champion_version=registry.champion_version(config), seconds=dict(seconds))


def _accepted(new: NewTraces, ingested: Artifacts) -> NewTraces:
    """``new`` without the files the ingest rejected: what the run trains on and records."""
    gone = {str(r.source) for r in ingested.rejected}
    return replace(
        new,
        files=tuple(p for p in new.files if str(p) not in gone),
        new=tuple(p for p in new.new if str(p) not in gone),
        digests={k: v for k, v in new.digests.items() if k not in gone},
    )


def _start(config: PipelineConfig, *, stages: Stages, say: Say, out: Path, progress: bool, clock: _Clock | None = None) -> _Run:
    """Create the store and the experiment (before any stage or subprocess touches them) and the
    run's MLflow parent run, tagged with its folder and the code version (and, inside a Prefect
    flow run, its id: :func:`orchrm.ops.tracking.start_run`)."""
    from orchrm.ops import tracking

    version = source_hash()
    tracking.configure(config)
    uri = tracking.tracking_uri(config)
    parent = tracking.start_run(config, "pipeline", tags={"orchrm.run_dir": str(out), "orchrm.code_version": version})
    try:
        tracking.log_config(config, run_id=parent)
    except BaseException:
        tracking.end_run(config, parent, status="FAILED")
        raise
    say(f"MLflow run {parent} at {uri}; files in {out}")
    return _Run(config=config, stages=stages, say=say, clock=clock or _Clock(say), out=out, code_version=version, progress=progress, parent=parent, tracking_uri=uri)


def _ingest_step(stages: Stages, clock: _Clock, new: NewTraces, *, out: Path) -> Artifacts:
    """Step 1 of an ingest run (before the MLflow run starts: a night whose new files are all
    rejected ends without one): the folder's trace files as one artifact table."""
    outside = f", {len(new.outside)} outside the retention window" if new.outside else ""
    with clock.stage("ingest", f"1/8 ingest {len(new.files)} trace file(s) ({len(new.new)} new{outside}) from {new.folder}"):
        artifacts = _call(stages.ingest, new, out_dir=str(out))
        clock.say(f"{artifacts.rows} artifacts of {artifacts.tasks} tasks")
        for r in artifacts.rejected:
            clock.say(f"rejected {r.source.name}: {r.reason}; moved to {r.moved_to}, report {r.report}")
    return artifacts


def _collect_step(run: _Run) -> Artifacts:
    """Step 1 without traces: collect in the sandbox (or on ``backend``'s real model)."""
    c = run.config.collect
    runs = f" x {c.repeats} executions" if c.repeats > 1 else ""
    b = run.config.backend
    on = f" on {b.kind} model {b.model}" if b.kind != "sandbox" else ""
    with run.clock.stage("collect", f"1/8 collect: {c.tasks_per_domain} tasks x {c.plans_per_task} plans{runs} in {', '.join(c.domains)}{on}"):
        artifacts = collect_artifacts(run.config, stages=run.stages, out_dir=run.out, code_version=run.code_version,
                                      progress=run.progress, say=run.say)
        run.say(f"{artifacts.rows} artifacts of {artifacts.tasks} tasks: {artifacts.path}")
    return artifacts


def collect_artifacts(config: PipelineConfig, *, stages: Stages, out_dir: str | os.PathLike, code_version: str, progress: bool,
                      say: Say) -> Artifacts:
    """The sandbox collection of ``config`` (or ``backend``'s real model): mapped over chunks when
    the stages have ``collect_chunk`` (:func:`collect_in_chunks`, the table in ``out_dir``), else
    ``stages.collect`` in one call (its table under ``<data_dir>/collect/``); the same rows either way."""
    if stages.collect_chunk is not None:
        return collect_in_chunks(config, stages=stages, out_dir=out_dir, code_version=code_version, say=say)
    return _call(stages.collect, config.collect, config.sandbox, data_dir=config.data_dir, code_version=code_version,
                 progress=progress, **_backend(config))


def collect_in_chunks(config: PipelineConfig, *, stages: Stages, out_dir: str | os.PathLike, code_version: str, say: Say) -> Artifacts:
    """The collection as one ``stages.collect_chunk`` call per chunk of tasks
    (:func:`orchrm.execution.collect.plan_collection`, ``collect.chunk_tasks`` tasks at most), all
    submitted before any is awaited, then combined here into ``out_dir/artifacts.parquet``
    (:func:`~orchrm.ops.stages.combine_collect_stage`: the table :func:`~orchrm.ops.stages.collect_stage`
    writes). Says each chunk as it is collected: where it ran, its rows and seconds."""
    from orchrm.execution.collect import plan_collection

    plan = plan_collection(config.collect, config.sandbox, backend=config.backend)
    futures = [_submit(stages.collect_chunk, chunk, config.collect, config.sandbox, run_id=plan.run_id, code_version=code_version,
                       **_backend(config)) for chunk in plan.chunks]
    return combine_collect_stage(plan, _gather(futures, plan.chunks, what="collect", say=say), out_dir=out_dir)


def pool_in_chunks(config: PipelineConfig, *, stages: Stages, out_dir: str | os.PathLike, code_version: str, say: Say) -> Pool:
    """The sandbox pool of ``config.evaluate`` as one ``stages.pool_chunk`` call per chunk of
    held-out tasks (:func:`orchrm.evaluation.pool.plan_pool`), all submitted before any is awaited,
    then combined here into ``out_dir/pool.parquet`` (:func:`~orchrm.ops.stages.combine_pool_stage`:
    the pool :func:`~orchrm.ops.stages.pool_stage` builds)."""
    backend = _backend(config)
    plan = plan_pool_stage(config.evaluate, config.collect, config.sandbox, **backend)
    futures = [_submit(stages.pool_chunk, chunk, config.evaluate, config.collect, config.sandbox, code_version=code_version, **backend)
               for chunk in plan.chunks]
    return combine_pool_stage(plan, _gather(futures, plan.chunks, what="pool", say=say), out_dir=out_dir)


def _gather(futures: Sequence[Any], chunks: Sequence[TaskChunk], *, what: str, say: Say) -> list[ChunkRows]:
    """The result of every future, in chunk order, saying each: ``collect: chunk 3/8 (math, 12
    tasks): 310 rows on host:4711 in 2.1 s``."""
    results = []
    for n, (future, chunk) in enumerate(zip(futures, chunks, strict=True), 1):
        rows = future.result()
        results.append(rows)
        say(f"{what}: chunk {n}/{len(chunks)} ({chunk.domain}, {len(chunk.task_ids)} tasks): {len(rows.rows)} rows on "
            f"{rows.worker} in {rows.seconds:.1f} s")
    return results


def sandbox_pool(config: PipelineConfig, *, stages: Stages, out_dir: str | os.PathLike, code_version: str, progress: bool,
                 say: Say) -> Pool:
    """The fresh sandbox tasks' pool of ``config.evaluate``: mapped over chunks when the stages
    have ``pool_chunk`` (:func:`pool_in_chunks`, the pool in ``out_dir``), else
    ``stages.build_pool`` in one call (its pool under ``<data_dir>/pools/``); the same rows either way."""
    if stages.pool_chunk is not None:
        return pool_in_chunks(config, stages=stages, out_dir=out_dir, code_version=code_version, say=say)
    return _call(stages.build_pool, config.evaluate, config.collect, config.sandbox, data_dir=config.data_dir,
                 code_version=code_version, progress=progress, **_backend(config))


def _validate_step(run: _Run, name: str, title: str, stage: Callable[..., Validated], *tables: Any) -> Validated:
    """Steps 2 and 4: a Great Expectations suite on ``tables`` (raises on a failed expectation)."""
    with run.clock.stage(name, title):
        checked = _call(stage, *tables, config=run.config, out_dir=str(run.out), parent_run_id=run.parent)
        run.say(f"passed on {checked.rows} rows" + (f"; warnings: {', '.join(checked.warnings)}" if checked.warnings else ""))
    return checked


def _pairs_step(run: _Run, artifacts: Artifacts) -> Pairs:
    """Step 3: the win/loss pairs of the artifacts, with their split counts and digest."""
    with run.clock.stage("build-pairs", "3/8 build win/loss pairs"):
        pairs = _call(run.stages.build_pairs, artifacts, config=run.config, out_dir=str(run.out), parent_run_id=run.parent)
        run.say(f"{pairs.rows} pairs ({', '.join(f'{k} {v}' for k, v in pairs.splits.items())}); digest {pairs.digest}")
    return pairs


def _train_step(run: _Run, pairs: Pairs) -> TrainedModel:
    """Step 5: train in a subprocess (or torchrun)."""
    config = run.config
    launcher = "torchrun" if config.pipeline.launcher == "torchrun" else "a subprocess"
    with run.clock.stage("train", f"5/8 train the Bradley-Terry reward model ({config.model.encoder} encoder, in {launcher})"):
        model = _call(run.stages.train, pairs, config=config, out_dir=str(run.out), parent_run_id=run.parent)
        saved = []  # what the saved model is: which weights, and its calibration
        if model.final_val_loss is not None and model.averaged_epochs:
            weights = ("its best epoch's weights (the last)" if model.averaged_epochs == 1
                       else f"the mean of the last {model.averaged_epochs} epochs' weights")
            saved.append(f"{weights}, validation loss {model.final_val_loss:.4f}")
        if model.temperature is not None:
            saved.append(f"calibrated (rewards divided by {model.temperature:.2f})")
        best = "none" if model.best_val_loss is None else f"{model.best_val_loss:.4f}"
        about = f"; the model: {', '.join(saved)}" if saved else ""
        run.say(f"{model.epochs} epoch(s) in {model.train_seconds:.1f} s, best validation loss {best}{about}; {model.model_path}")
    return model


def _pool_step(run: _Run, artifacts: Artifacts) -> Pool:
    """The held-out pool of ``evaluate.pool``: a replay of the artifacts' held-out tasks (``auto``
    on a run that ingests traces), else fresh sandbox tasks; named on the parent MLflow run."""
    from orchrm.ops.stages import tag_pool

    config = run.config
    kind = config.evaluate.pool_kind(ingests=artifacts.origin == "ingest")
    if kind == "replay":
        pool = _call(run.stages.build_pool, config.evaluate, config.collect, config.sandbox, data_dir=config.data_dir,
                     code_version=run.code_version, progress=run.progress, replay=artifacts, pairs=config.pairs)
    else:
        pool = sandbox_pool(config, stages=run.stages, out_dir=run.out, code_version=run.code_version, progress=run.progress, say=run.say)
    tag_pool(config, run.parent, pool.kind)
    what = f"replay of the held-out tasks of {pool.source}" if pool.kind == "replay" else "fresh sandbox tasks"
    run.say(f"held-out pool ({pool.kind}: {what}): {pool.tasks} tasks, {pool.rows} candidate executions: {pool.path}")
    return pool


def _evaluate_step(run: _Run, model: TrainedModel, pairs: Pairs, artifacts: Artifacts) -> Evaluation:
    """Step 6: build the held-out pool, then evaluate the candidate and the champion on it."""
    config = run.config
    with run.clock.stage("evaluate", "6/8 evaluate on held-out tasks (candidate and champion, same pool)"):
        # after training, not beside it: on a small machine the two only slow each other down
        pool = _pool_step(run, artifacts)
        evaluation = _call(run.stages.evaluate, model, pairs, pool, config=config, out_dir=str(run.out), parent_run_id=run.parent)
        run.say(evaluation.summary)
    return evaluation


def _gate_step(run: _Run, evaluation: Evaluation) -> Verdict:
    """Step 7: every gate on the evaluation's figures."""
    with run.clock.stage("gate", "7/8 gates"):
        verdict = _call(run.stages.gate, evaluation, run.config.evaluate.gates)
        run.say(str(verdict))
    return verdict


def _register_step(run: _Run, model: TrainedModel, evaluation: Evaluation, verdict: Verdict, pairs: Pairs,
                   new: NewTraces | None) -> tuple[Registered, int | None]:
    """Step 8: register the candidate (alias ``challenger`` when it passed every absolute gate),
    record the trace files it trained on (``new``, on an ingest run), then promote it when every
    gate passed; returns the registered version and the champion's version after it.

    The files are recorded before promotion, so a promotion that fails, or logging that fails
    after it, still leaves them recorded: the next night does not train on them again (it would
    only register the same model a second time) and waits for new files. The registered version
    keeps its verdict; promote it by hand with ``orchrm promote --version N`` once the cause is
    fixed (the error says so)."""
    from orchrm.ops import registry

    config = run.config
    with run.clock.stage("register", "8/8 register (challenger when every absolute gate passed) and promote (champion, only when every gate passed)"):
        registered = _call(run.stages.register, model, evaluation, verdict, pairs, config=config)
        if new is not None:
            _call(run.stages.record_ingested, new, config=config, run_id=run.parent)
            run.say(f"recorded {len(new.digests)} trace file(s) as trained on, in MLflow run {run.parent}")
        if verdict.passed:
            try:
                _call(run.stages.promote, registered, config=config)
            except Exception as exc:
                _note(run, exc, _not_promoted(config, registered, recorded=new is not None))
                raise
        champion = registry.champion_version(config)
        run.say(f"version {registered.version}: {verdict.label}; champion is version {champion}")
    return registered, champion


def _not_promoted(config: PipelineConfig, registered: Registered, *, recorded: bool) -> str:
    """What a failed promotion leaves behind, and the command that finishes it."""
    files = "; the trace files it trained on are recorded, so the next night will not train on them again" if recorded else ""
    return (
        f"version {registered.version} of {config.registry.model_name} passed every gate and is registered but was not "
        f"promoted{files}. Once the cause above is fixed, promote it with `orchrm promote --version {registered.version}`"
    )


def _note(run: _Run, exc: BaseException, note: str) -> None:
    """Say ``note`` and add it to ``exc`` (the traceback and :func:`failure_markdown` show it)."""
    run.say(note)
    exc.add_note(note)


def _end_stopped(run: _Run, exc: BaseException) -> None:
    """End the parent run of a run that raised ``exc``: ``FAILED``, or ``KILLED`` when it was
    interrupted or cancelled (an exception that is not an :class:`Exception`), its description
    the failure's report (:func:`failure_markdown`). When even that fails (the tracking server is
    gone), ``exc`` says so and stays the error raised."""
    from orchrm.ops import tracking

    status = "FAILED" if isinstance(exc, Exception) else "KILLED"
    try:
        if isinstance(exc, Exception):
            _describe_run(run.config, run.parent, failure_markdown(exc))
        tracking.end_run(run.config, run.parent, status=status)
    except Exception as end_exc:  # the run's own error is the one to raise
        _note(run, exc, f"the MLflow parent run {run.parent} could not be marked {status} ({end_exc}); it may show RUNNING")


def _verdict_message(config: PipelineConfig, verdict: Verdict, *, registered: Registered, champion: int | None) -> str:
    """The run's one-line outcome: promoted, or rejected by which gates and who stays champion."""
    if verdict.passed:
        return f"version {registered.version} passed every gate and is now {config.registry.model_name}@champion"
    kept = f"version {champion} stays champion" if champion is not None else "there is no champion yet"
    return f"version {registered.version} was rejected ({', '.join(g.name for g in verdict.failed())}); {kept}"


def _summary_step(run: _Run, result: PipelineResult) -> None:
    """The outcome on the parent run and the version (:func:`_log_summary`); when that fails, the
    error says that the version is registered all the same."""
    try:
        _log_summary(run.config, run.parent, result)
    except Exception as exc:
        version, verdict = result.registered.version, result.verdict
        _note(run, exc, f"version {version} is registered all the same (verdict {verdict.label}; champion is "
                        f"version {result.champion_version}); only the summary of MLflow run {run.parent} is missing")
        raise


def _log_summary(config: PipelineConfig, run_id: str, result: PipelineResult) -> None:
    """The outcome on the parent run: tags ``verdict``, ``model_version``, ``champion_version``, a
    ``seconds.<stage>`` metric per stage, the report (:func:`report_markdown`) as the artifact
    ``report.md`` and, within MLflow's limits (:func:`fit_markdown`), as the description of the
    run and of the registered version: what a reviewer reads first in the MLflow UI. Logged after
    registration: its failure fails the run, the version and the ledger stay."""
    from mlflow.entities import RunTag

    from orchrm.ops import tracking

    uri = tracking.tracking_uri(config)
    tags = [RunTag("verdict", result.status), RunTag("model_version", str(result.registered.version)),
            RunTag("champion_version", str(result.champion_version))]
    metrics = tracking.as_metrics({f"seconds.{name}": float(value) for name, value in result.seconds.items()})
    tracking.log_batch(uri, run_id, tags=tags, metrics=metrics, what=f"logging the summary of run {run_id}")
    report = report_markdown(result)
    c = _client(config)
    tracking.with_server_retries(uri, lambda: c.log_text(run_id, report, REPORT_FILE), f"logging {REPORT_FILE} to run {run_id}")
    full = f"the full report is the artifact `{REPORT_FILE}` of MLflow run {run_id}"
    _describe_run(config, run_id, report)
    name, version = config.registry.model_name, result.registered.version
    tracking.with_server_retries(
        uri, lambda: c.update_model_version(name, str(version), description=fit_markdown(report, VERSION_DESCRIPTION_LIMIT, full=full)),
        f"describing version {version} of {name}",
    )


#: the parent run's artifact holding its whole report
REPORT_FILE = "report.md"
#: MLflow's limits, in characters, on a run's description (a tag value) and a version's
RUN_DESCRIPTION_LIMIT = 8000
VERSION_DESCRIPTION_LIMIT = 5000


def _describe_run(config: PipelineConfig, run_id: str, markdown: str) -> None:
    """``markdown`` as the description of ``run_id`` (the note the MLflow UI shows on its page),
    within :data:`RUN_DESCRIPTION_LIMIT`."""
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

    from orchrm.ops import tracking

    uri = tracking.tracking_uri(config)
    text = fit_markdown(markdown, RUN_DESCRIPTION_LIMIT, full=f"the full report is the artifact `{REPORT_FILE}` of this run")
    c = _client(config)
    tracking.with_server_retries(uri, lambda: c.set_tag(run_id, MLFLOW_RUN_NOTE, text), f"describing run {run_id}")


def fit_markdown(markdown: str, limit: int, *, full: str) -> str:
    """``markdown`` in at most ``limit`` characters: unchanged when it fits, else whole ``## ``
    sections left out, the per-domain best-of-N tables first (the all-domain one, the gates and
    the verdict come first and stay), then from the end; a last line says what was left out and
    where the whole is (``full``)."""
    if len(markdown) <= limit:
        return markdown
    head, *rest = markdown.split("\n## ")
    sections = [f"## {s}" for s in rest]
    order = [i for i, s in enumerate(sections) if s.startswith("## Best-of-N: ") and not s.startswith("## Best-of-N: all")]
    order += [i for i in reversed(range(len(sections))) if i not in order]
    kept = set(range(len(sections)))
    for i in order:
        titles = [sections[j].splitlines()[0].removeprefix("## ") for j in sorted(set(range(len(sections))) - kept | {i})]
        note = f"\n\n_Left out here: {', '.join(titles)}; {full}._"
        kept.discard(i)
        text = "\n## ".join([head, *(sections[j].removeprefix("## ") for j in sorted(kept))]) + note
        if len(text) <= limit:
            return text
    return (head[: max(0, limit - len(full) - 8)] + f"\n\n_… {full}._")[:limit]


def reevaluate_champion(
    config: PipelineConfig,
    *,
    seed: int | None = None,
    traces_dir: str | os.PathLike | None = None,
    stages: Stages | None = None,
    say: Say | None = None,
    run_dir: str | os.PathLike | None = None,
    progress: bool = False,
) -> Reevaluation:
    """Evaluate ``champion`` again on held-out tasks it never saw and check its gates (no champion
    to beat: it is the champion). Logs a ``reevaluate`` run tagged with the version and the pool
    (:data:`~orchrm.ops.stages.POOL_TAG` and ``orchrm.pool_source``), its metrics linked to the
    champion's LoggedModel, and tags the version ``reevaluated.<YYYY-MM-DD>`` with the verdict
    (:func:`orchrm.ops.registry.tag_reevaluation`); promotes and demotes nothing.

    The pool is the kind the champion's own gates were measured on (:func:`champion_pool_kind`).
    A champion gated on a replay of a user's traces is measured on the newest trace files of
    ``traces_dir`` (default ``pipeline.traces_dir``) inside the retention window
    (``pipeline.window_days`` / ``pipeline.max_files``): they are ingested read only into the run
    folder (a bad file is skipped with a warning, never moved: the folder stays as it was), and
    the champion is scored on their replay pool and their held-out pairs (split ``test``, never
    trained on). With no folder set, or none of its files readable, nothing is evaluated and the
    message says why. A sandbox champion is measured on a fresh sandbox pool (``seed``, default:
    one per ISO week) and the held-out pairs of the run that trained it (:func:`champion_pairs`)."""
    from orchrm.ops import registry

    config = _absolute(config)
    stages = stages or Stages()
    say = say or log.info
    champion = registry.champion_version(config)
    if champion is None:
        return _nothing_to_reevaluate(None, f"no {config.registry.model_name}@champion yet: nothing to re-evaluate (run the pipeline first)", say)
    seed = weekly_seed(config) if seed is None else seed
    fresh = config.model_copy(update={"evaluate": config.evaluate.model_copy(update={"seed": seed})})
    if champion_pool_kind(config, champion) == "replay":
        return _reevaluate_on_traces(fresh, champion, traces_dir=traces_dir, stages=stages, say=say, run_dir=run_dir, progress=progress)
    out = Path(run_dir).resolve() if run_dir is not None else new_run_dir(config, "reevaluate")

    def sandbox_inputs(parent: str) -> tuple[Pairs, Pool, str]:
        pairs = champion_pairs(config, champion, out_dir=out)
        pool = sandbox_pool(fresh, stages=stages, out_dir=out, code_version=source_hash(), progress=progress, say=say)
        say(f"fresh held-out pool: {pool.tasks} tasks (seed {seed}); held-out pairs of the champion's run: {pairs.path}")
        return pairs, pool, f"{pool.tasks} fresh held-out tasks (seed {seed})"

    return _reevaluate(fresh, champion, sandbox_inputs, stages=stages, say=say, out=out)


def _nothing_to_reevaluate(champion: int | None, message: str, say: Say) -> Reevaluation:
    say(message)
    return Reevaluation(champion_version=champion, pool=None, evaluation=None, verdict=None, message=message)


def _reevaluate_on_traces(config: PipelineConfig, champion: int, *, traces_dir: str | os.PathLike | None, stages: Stages, say: Say,
                          run_dir: str | os.PathLike | None, progress: bool) -> Reevaluation:
    """:func:`reevaluate_champion` of a champion gated on a replay of the user's traces: the newest
    trace files, read only, their replay pool and their held-out pairs."""
    from orchrm.ops.stages import read_traces

    folder = traces_dir if traces_dir is not None else config.pipeline.traces_dir
    files, why = newest_traces(config, folder)
    if not files:
        return _nothing_to_reevaluate(champion, (
            f"champion version {champion} was gated on a replay of your traces, but {why}: nothing was re-evaluated. "
            "Set pipeline.traces_dir (or pass traces_dir) to the folder your system writes its trace files to"
        ), say)
    out = Path(run_dir).resolve() if run_dir is not None else new_run_dir(config, "reevaluate")
    artifacts, skipped = read_traces(files, out_dir=out)
    for path, reason in skipped:
        log.warning("skipped %s: %s", path, reason)
        say(f"skipped {path.name} (left where it is): {reason}")
    if not artifacts.sources:
        return _nothing_to_reevaluate(champion, (
            f"champion version {champion} was gated on a replay of your traces, but none of the {len(files)} newest trace "
            f"file(s) of {folder} could be read ({'; '.join(f'{p.name}: {r}' for p, r in skipped)}): nothing was re-evaluated. "
            "Correct the files (write, then rename into place) and run the re-evaluation again"
        ), say)
    names = ", ".join(p.name for p in artifacts.sources)
    say(f"{artifacts.rows} artifacts of {artifacts.tasks} tasks from {len(artifacts.sources)} trace file(s) of {folder}: {names}")

    def replay_inputs(parent: str) -> tuple[Pairs, Pool, str]:
        pairs = _call(stages.build_pairs, artifacts, config=config, out_dir=str(out), parent_run_id=parent)
        pool = _call(stages.build_pool, config.evaluate, config.collect, config.sandbox, data_dir=config.data_dir,
                     code_version=source_hash(), progress=progress, replay=artifacts, pairs=config.pairs)
        held_out = pairs.splits.get("test", 0)
        say(f"held-out pool: replay of {pool.tasks} held-out tasks of {names} ({pool.rows} candidate executions); {held_out} held-out pairs of the same files: {pairs.path}")
        return pairs, pool, f"replay of {pool.tasks} held-out tasks of {names}"

    return _reevaluate(config, champion, replay_inputs, stages=stages, say=say, out=out)


def _reevaluate(config: PipelineConfig, champion: int, inputs: Callable[[str], tuple[Pairs, Pool, str]], *, stages: Stages, say: Say,
                out: Path) -> Reevaluation:
    """The ``reevaluate`` run: ``inputs(parent_run_id)`` gives the held-out pairs, the pool and the
    words naming the pool; the champion is evaluated on them and its gates checked. Its figures
    land on the champion's version: the evaluate run's metrics are linked to the version's
    LoggedModel (:func:`~orchrm.ops.stages.evaluate_stage`) and the version is tagged with the
    date and the verdict (:func:`orchrm.ops.registry.tag_reevaluation`)."""
    from orchrm.ops import registry, tracking
    from orchrm.ops.stages import tag_pool

    seed = config.evaluate.seed
    parent = tracking.start_run(config, "reevaluate", tags={"champion_version": str(champion), "evaluate.seed": str(seed), "orchrm.run_dir": str(out)})
    try:
        tracking.log_config(config, run_id=parent)
        pairs, pool, what = inputs(parent)
        tag_pool(config, parent, pool.kind)
        _client(config).set_tag(parent, POOL_SOURCE_TAG, what)
        evaluation = _call(stages.evaluate, None, pairs, pool, config=config, out_dir=str(out), parent_run_id=parent)
        say(evaluation.summary)
        gates = config.evaluate.gates.model_copy(update={"beat_champion": False})
        verdict = _call(stages.gate, evaluation, gates)
        say(str(verdict))
    except BaseException:
        tracking.end_run(config, parent, status="FAILED")
        raise
    state = "still passes every gate" if verdict.passed else f"now fails {', '.join(g.name for g in verdict.failed())}"
    message = f"champion version {champion} on a {what} {state}" if pool.kind == "replay" else f"champion version {champion} on {what} {state}"
    result = Reevaluation(champion_version=champion, pool=pool, evaluation=evaluation, verdict=verdict, message=message)
    try:
        _client(config).set_tag(parent, "verdict", verdict.label)
        _describe_run(config, parent, reevaluation_markdown(result))
        registry.tag_reevaluation(champion, verdict=verdict, run_id=evaluation.run_id, config=config)
    except BaseException:
        tracking.end_run(config, parent, status="FAILED")
        raise
    tracking.end_run(config, parent)
    say(message)
    return result


#: the MLflow tag of a ``reevaluate`` run naming its pool in words (``replay of 12 held-out tasks of night-9.parquet``)
POOL_SOURCE_TAG = "orchrm.pool_source"


def champion_pool_kind(config: PipelineConfig, version: int) -> str:
    """The pool ``version``'s gates were measured on when it was registered: the
    :data:`~orchrm.ops.stages.POOL_TAG` of its evaluate run, else of that run's pipeline run;
    ``replay`` for a model trained and gated on a user's traces. ``sandbox`` when neither run has
    the tag (a version registered before pools were tagged was always gated on the sandbox)."""
    from orchrm.ops import registry
    from orchrm.ops.stages import POOL_TAG

    client = _client(config)
    run = client.get_run(registry.version_info(version, config=config)["run_id"])
    kind = run.data.tags.get(POOL_TAG)
    parent = run.data.tags.get("mlflow.parentRunId")
    if kind is None and parent:
        kind = client.get_run(parent).data.tags.get(POOL_TAG)
    return kind or "sandbox"


def newest_traces(config: PipelineConfig, folder: str | os.PathLike | None) -> tuple[tuple[Path, ...], str]:
    """The trace files of ``folder`` inside the retention window (``pipeline.window_days`` /
    ``pipeline.max_files``, :func:`~orchrm.ops.stages.in_window`), read without touching the folder
    or the ledger of ingested files; when there are none, the reason in words."""
    from orchrm.ops.stages import in_window, is_trace_file

    if folder is None:
        return (), "no traces folder is set (pipeline.traces_dir)"
    path = Path(folder).expanduser()
    if not path.is_dir():
        return (), f"the traces folder {path} does not exist"
    every = [p for p in path.iterdir() if is_trace_file(p)]
    files = in_window(every, window_days=config.pipeline.window_days, max_files=config.pipeline.max_files)
    if not files:
        outside = f" ({len(every)} older file(s) outside the retention window)" if every else ""
        return (), f"the traces folder {path} holds no trace file inside the retention window{outside}"
    return files, ""


def champion_pairs(config: PipelineConfig, version: int, *, out_dir: Path) -> Pairs:
    """The pair table of the pipeline run that registered ``version`` (its held-out split is what
    the pairwise figures are measured on), downloaded into ``out_dir`` from the artifacts of that
    run's ``build-pairs`` run (the parent's tag :data:`~orchrm.ops.tracking.PAIRS_RUN_TAG`): the
    tracking server's store, so any machine can re-evaluate. A version registered before the pair
    table was logged is read from its run's folder (the parent's ``orchrm.run_dir``) when that
    folder is on this machine."""
    from orchrm.data.tables import pairs_digest, read_table
    from orchrm.ops import registry, tracking

    client = _client(config)
    run_id = registry.version_info(version, config=config)["run_id"]
    parent = client.get_run(run_id).data.tags.get("mlflow.parentRunId")
    tags = client.get_run(parent).data.tags if parent else {}
    if tags.get(tracking.PAIRS_RUN_TAG):
        path = tracking.download_artifact_uri(f"runs:/{tags[tracking.PAIRS_RUN_TAG]}/{tracking.PAIRS_ARTIFACT}", out_dir / "champion-pairs",
                                              uri=tracking.tracking_uri(config))
    else:
        path = Path(tags["orchrm.run_dir"]) / "pairs.parquet" if tags.get("orchrm.run_dir") else None
        if path is None or not path.is_file():
            raise RegistryError(
                f"version {version}'s pipeline run logged no pair table ({tracking.PAIRS_ARTIFACT}) and its run folder "
                f"is not here ({path}): re-evaluate on the machine that trained it, or run the pipeline again to get a "
                "champion whose pairs are in the tracking store"
            )
    df = read_table(path)
    splits = {str(k): int(v) for k, v in df.split.value_counts().sort_index().items()}
    return Pairs(path=path, rows=len(df), splits=splits, digest=pairs_digest(df), run_id=run_id)


def weekly_seed(config: PipelineConfig, when: datetime | None = None) -> int:
    """A held-out seed per ISO week (``year * 100 + week``), never the collection seed."""
    year, week, _ = (when or datetime.now(UTC)).isocalendar()
    seed = year * 100 + week
    return seed + 1 if seed == config.collect.seed else seed


# --------------------------------------------------------------------------------------------
# the report a person reads (the flows publish it as a Prefect artifact)


def _fmt(value: float | None) -> str:
    """A gate's figure or threshold in 4 significant digits, ``-`` when it has none (not
    :func:`orchrm.evaluation.metrics.fmt_number`: fixed decimals would print 0.6 as 0.600)."""
    return "-" if value is None else f"{value:.4g}"


def _gate_table(verdict: Verdict) -> list[str]:
    """Every gate of ``verdict`` as the rows of a markdown table, header first."""
    rows = [f"| {g.name} | {_fmt(g.value)} | {_fmt(g.threshold)} | {g.mark} | {g.detail} |" for g in verdict.gates]
    return ["| gate | value | threshold | result | detail |", "|---|---|---|---|---|", *rows]


def report_markdown(result: PipelineResult) -> str:
    """The run's report: the pool it was evaluated on, the verdict with each gate's figure and
    threshold, then the evaluation's tables (pairwise accuracy, best-of-N)."""
    lines = [f"# OrchRM pipeline: {result.status}", "", result.message, ""]
    if result.evaluation is not None and result.evaluation.pool_line:
        lines += [f"Pool: {result.evaluation.pool_line.removeprefix('pool: ')}.", ""]
    if result.verdict is not None:
        lines += ["## Gates", "", *_gate_table(result.verdict), ""]
    if result.registered is not None:
        from orchrm.ops.registry import passed_absolute_gates

        alias = " (alias challenger)" if result.verdict is not None and passed_absolute_gates(result.verdict) else ""
        lines.append(f"Registered version {result.registered.version}{alias}; champion: version {result.champion_version}.")
        lines.append("")
    if result.evaluation is not None:
        lines += [result.evaluation.markdown, ""]
    if result.seconds:
        lines += ["## Stage times (s)", "", "| stage | seconds |", "|---|---|"] + [f"| {k} | {v:.1f} |" for k, v in result.seconds.items()]
    return "\n".join(lines)


def failure_markdown(exc: BaseException) -> str:
    """The report of a run that stopped: which stage's error, and its message (a data-quality
    failure lists every failed expectation with example rows), then the notes the pipeline added
    to it (a version registered but not promoted, and how to promote it)."""
    verdicts = {DataQualityError: "bad data: nothing was trained or registered", TrainingError: "training failed: nothing was registered"}
    notes = list(getattr(exc, "__notes__", ()))
    what = next((v for k, v in verdicts.items() if isinstance(exc, k)), None)
    what = what or ("the run stopped after registering a version (below)" if notes else "the run stopped: nothing was registered")
    lines = [f"# OrchRM pipeline: failed ({type(exc).__name__})", "", what, "", "```", str(exc), "```"]
    return "\n".join(lines + [line for note in notes for line in ("", note)])


def reevaluation_markdown(result: Reevaluation) -> str:
    """The weekly report: the pool the champion was measured on (fresh sandbox tasks, or a replay
    of the held-out tasks of the newest trace files), its gates, then the evaluation's tables."""
    lines = ["# OrchRM weekly re-evaluation", "", result.message, ""]
    if result.evaluation is not None and result.evaluation.pool_line:
        lines += [f"Pool: {result.evaluation.pool_line.removeprefix('pool: ')}.", ""]
    if result.verdict is not None:
        lines += [*_gate_table(result.verdict), ""]
    if result.evaluation is not None:
        lines.append(result.evaluation.markdown)
    return "\n".join(lines)


#: where ``mlflow ui`` serves a local store by default
LOCAL_MLFLOW_UI = "http://127.0.0.1:5000"


def mlflow_run_url(config: PipelineConfig, run_id: str | None) -> str | None:
    """A link to the run in the MLflow UI: the tracking server's own page, or for a local store
    the page ``mlflow ui --backend-store-uri <store>`` serves (``MLFLOW_UI_URL`` overrides)."""
    from orchrm.ops import tracking

    if not run_id:
        return None
    uri = tracking.tracking_uri(config)
    base = uri if tracking.is_remote(uri) else os.environ.get("MLFLOW_UI_URL", LOCAL_MLFLOW_UI)
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
