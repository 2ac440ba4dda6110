"""The pipeline's stages as plain functions: typed inputs and outputs, one stage each.

collect (or ingest new traces) -> validate artifacts -> pairs -> validate pairs -> train ->
evaluate (candidate and champion on the same pool) -> gate -> register (alias ``challenger``) ->
promote (``champion``, only when every gate passed).

The order lives in :func:`orchrm.ops.pipeline.run_pipeline` alone; the Prefect flows in ``flows/``
wrap these same functions as tasks. Stages hand each other paths and ids (the dataclasses below),
never models or clients, so that any of them can run in another thread, process or machine. Each
stage that logs opens a nested MLflow run under the pipeline's parent run, by id (MLflow's active
run is per thread). Training runs ``orchrm train`` in a subprocess with a timeout (or
``torchrun``): a crash there leaves nothing registered, and the next run starts afresh.

>>> pairs = pairs_stage(artifacts, config=config, out_dir=run_dir, parent_run_id=parent)   # doctest: +SKIP
>>> pairs.rows, pairs.splits                                                               # doctest: +SKIP
(412, {'test': 61, 'train': 290, 'val': 61})
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import yaml

from orchrm.config import (
    BackendConfig,
    CollectConfig,
    EvaluateConfig,
    GatesConfig,
    NoiseConfig,
    PairsConfig,
    PipelineConfig,
    TorchrunConfig,
)
from orchrm.errors import (
    ConfigError,
    DataQualityError,
    RegistryError,
    TraceSchemaError,
    TrainingError,
)
from orchrm.evaluation.gates import Verdict
from orchrm.util.digests import file_digest

if TYPE_CHECKING:
    from collections.abc import Sequence

    from orchrm.evaluation.pool import PoolPlan
    from orchrm.execution.collect import ChunkRows, CollectionPlan, TaskChunk

TRACE_SUFFIXES = (".jsonl", ".parquet")


# --------------------------------------------------------------------------------------------
# what the stages hand each other
# (paths, numbers, strings and these dataclasses: Prefect persists them as JSON and rebuilds each from its
# annotations, so every annotated type is imported at run time)


@dataclass(frozen=True)
class NewTraces:
    """The trace files of a folder, and which of them no earlier run has trained on."""

    folder: Path
    #: the trace files inside the retention window (all of them without one), by name
    files: tuple[Path, ...]
    new: tuple[Path, ...]
    #: file path -> sha256 of its bytes, for every file in ``files``
    digests: Mapping[str, str] = field(default_factory=dict)
    #: trace files left out by the retention window (older, or beyond ``max_files``), by name
    outside: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Rejected:
    """A trace file that failed ingest or the artifact suite, moved out of the traces folder."""

    #: where the file was
    source: Path
    #: where it lies now: ``<traces folder>/../rejected/<name>``
    moved_to: Path
    #: ``<name>.rejected.json`` beside it: the error and, for a failed suite, each failed expectation
    report: Path
    #: one line: the error's type and the start of its message
    reason: str


@dataclass(frozen=True)
class Artifacts:
    """An artifact table on disk (DESIGN §3)."""

    path: Path
    rows: int
    tasks: int
    #: ``sandbox`` (collected here) or ``ingest`` (a user's traces)
    origin: str
    #: an ingest's trace files in the table
    sources: tuple[Path, ...] = ()
    #: an ingest's trace files that failed ingest or the artifact suite, moved to ``rejected/``
    rejected: tuple[Rejected, ...] = ()


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
    """A pair table on disk, its pair counts per split and its digest (:func:`orchrm.data.tables.pairs_digest`:
    the MLflow dataset's, and the data hash of a model trained on it)."""

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
    #: ``sandbox`` (fresh sandbox tasks) or ``replay`` (the held-out tasks of an artifact table)
    kind: str = "sandbox"
    #: what the pool was built from: the sandbox, or the artifact table replayed
    source: str = "sandbox"


@dataclass(frozen=True)
class TrainedModel:
    """A model directory written by ``orchrm train`` (``model.safetensors``, ``train_result.json``)
    and the pyfunc logged from its training run ``run_id``."""

    model_dir: Path
    model_path: Path
    run_id: str
    epochs: int
    best_val_loss: float | None
    train_seconds: float
    #: ``models:/<model_id>``: the LoggedModel of the training run (empty in a result persisted
    #: before models were logged at training; :func:`register_stage` then logs it)
    model_uri: str = ""
    #: the model is the mean of the weights of this many evaluated epochs, from the best one on (0: not averaged)
    averaged_epochs: int = 0
    #: the model's own validation loss (None without validation pairs, or in an older result)
    final_val_loss: float | None = None
    #: the temperature the rewards were divided by, fitted on the validation pairs (None: not calibrated)
    temperature: float | None = None

    @property
    def model_id(self) -> str | None:
        """The LoggedModel's id (``m-...``), or None without one."""
        from orchrm.ops.registry import model_id_of_uri

        return model_id_of_uri(self.model_uri) if self.model_uri else None


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
    #: the pool both models were scored on: ``sandbox`` or ``replay``
    pool_kind: str = "sandbox"
    #: one sentence naming that pool (:meth:`orchrm.evaluation.report.EvaluationReport.pool_line`)
    pool_line: str = ""


@dataclass(frozen=True)
class Registered:
    """A registered model version (alias ``challenger``) and the verdict stored with it."""

    version: int
    model_uri: str
    verdict: Verdict


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


def _stage_run(config: PipelineConfig, name: str, parent_run_id: str | None):
    """``with _stage_run(config, "train", parent) as run_id:`` a nested MLflow run, ended
    FINISHED, or FAILED when the block raises (:func:`orchrm.ops.tracking.run`)."""
    from orchrm.ops import tracking

    return tracking.run(config, name, parent_run_id=parent_run_id)


# --------------------------------------------------------------------------------------------
# stages


def find_new_traces(traces_dir: str | os.PathLike, *, config: PipelineConfig, now: datetime | None = None) -> NewTraces:
    """The trace files (``*.jsonl``, ``*.parquet``) in ``traces_dir`` inside the retention window
    and which of them are new: no earlier run trained on them and registered a version. That
    record is :mod:`orchrm.ops.ledger`: tags of the pipeline's MLflow parent runs, in the
    tracking store every worker shares. Files are matched by content hash, so a renamed file is
    not new and an edited one is. A local ``<data_dir>/ingest/ingested.json`` left by an earlier
    version still counts as seen (:func:`orchrm.ops.ledger.seen_digests`).

    The window (``pipeline.window_days`` / ``pipeline.max_files``, :func:`in_window`) keeps the
    files modified in the last ``window_days`` days before ``now`` (default: the current time),
    at most the ``max_files`` newest of them; the rest are ``outside``, neither read nor new.

    Files still being written are never read: dot-files, ``*.tmp`` and any other suffix are
    skipped, so a system that writes ``.name.jsonl`` or ``name.jsonl.tmp`` and then renames it to
    ``name.jsonl`` is picked up only once the file is whole."""
    from orchrm.ops import ledger

    folder = Path(traces_dir).expanduser()
    if not folder.is_dir():
        raise ConfigError(
            f"the traces folder {folder} does not exist: create it and let your system write its traces "
            "there (JSONL or Parquet in the artifact schema), or set pipeline.traces_dir to another folder"
        )
    every = [p for p in folder.iterdir() if is_trace_file(p)]
    files = in_window(every, window_days=config.pipeline.window_days, max_files=config.pipeline.max_files, now=now)
    digests = {str(p): file_digest(p) for p in files}
    seen = ledger.seen_digests(config)
    new = tuple(p for p in files if digests[str(p)] not in seen)
    outside = tuple(sorted(set(every) - set(files)))
    return NewTraces(folder=folder, files=files, new=new, digests=digests, outside=outside)


def in_window(
    files: list[Path], *, window_days: float | None, max_files: int | None, now: datetime | None = None
) -> tuple[Path, ...]:
    """The ``files`` a night trains on, sorted by name: those modified at most ``window_days``
    days before ``now``, then the ``max_files`` newest of them by modification time (ties by
    name). None for either means no limit of that kind."""
    mtimes = {p: p.stat().st_mtime for p in files}
    kept = sorted(files, key=lambda p: (-mtimes[p], p.name))
    if window_days is not None:
        oldest = (now or datetime.now(UTC)).timestamp() - window_days * 86400.0
        kept = [p for p in kept if mtimes[p] >= oldest]
    if max_files is not None:
        kept = kept[:max_files]
    return tuple(sorted(kept))


def is_trace_file(path: Path) -> bool:
    """Whether ``path`` is a whole trace file to read: a plain file named ``*.jsonl`` or
    ``*.parquet``, not a dot-file (a file being written, by convention)."""
    return path.is_file() and path.suffix in TRACE_SUFFIXES and not path.name.startswith(".")


def rejected_dir(folder: Path) -> Path:
    """Where the trace files of ``folder`` that fail ingest or the artifact suite are moved:
    ``rejected/`` beside it (outside it, so no later night reads them)."""
    return folder.parent / "rejected"


def record_ingested(traces: NewTraces, *, config: PipelineConfig, run_id: str) -> tuple[str, ...]:
    """Record the files of ``traces`` (those the run trained on) as trained on by the pipeline's
    parent run ``run_id``, in the tracking store (:func:`orchrm.ops.ledger.record`); returns
    their digests. The pipeline calls it once the version is registered, before promotion."""
    from orchrm.ops import ledger

    return ledger.record(config, run_id, traces)


def ingest_stage(traces: NewTraces, *, out_dir: str | os.PathLike) -> Artifacts:
    """Normalise every trace file of ``traces.files`` (old and new, inside the retention window:
    the model retrains on all of them) into one artifact table at ``out_dir/artifacts.parquet``. Each file keeps its own run id (a
    hash of its contents), so artifact ids never collide across files.

    A file that cannot be ingested (:class:`TraceSchemaError`) or, when new, fails the artifact
    suite alone (:class:`DataQualityError`) is moved to :func:`rejected_dir` with a report beside
    it (:func:`reject_file`) and left out; the table holds the rest (``sources``; ``rejected``
    lists the others). Problems that only the files together have (the same artifact id in two
    files) are left to :func:`validate_artifacts_stage`, which fails the run."""
    from orchrm.data.tables import write_table

    new = {str(p) for p in traces.new}
    frames, sources, rejected = [], [], []
    for path in traces.files:
        try:
            frames.append(_ingest_file(path, check=str(path) in new, out_dir=Path(out_dir)))
            sources.append(path)
        except (TraceSchemaError, DataQualityError) as exc:
            rejected.append(reject_file(path, exc, folder=traces.folder, digest=traces.digests.get(str(path))))
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    path = write_table(df, Path(out_dir) / "artifacts.parquet")
    return Artifacts(path=path, rows=len(df), tasks=int(df.task_id.nunique()) if len(df) else 0, origin="ingest",
                     sources=tuple(sources), rejected=tuple(rejected))


def _ingest_file(path: Path, *, check: bool, out_dir: Path) -> pd.DataFrame:
    """One trace file as artifacts; with ``check``, the artifact suite run on it alone (raises
    :class:`DataQualityError`, its GX results under ``out_dir/validation/files/<name>``)."""
    from orchrm.data.ingest import ingest_traces
    from orchrm.data.tables import read_table
    from orchrm.data.validation import validate_artifacts

    frame = ingest_traces(read_table(path))
    if check:
        report = validate_artifacts(frame, out_dir=out_dir / "validation" / "files" / path.name, raise_on_failure=False)
        if not report.success:
            raise _FileQualityError(report)
    return frame


class _FileQualityError(DataQualityError):
    """A file's own artifact suite failed; keeps the report for the rejection's record."""

    def __init__(self, report) -> None:
        super().__init__(report.error_message())
        self.report = report


def read_traces(files: tuple[Path, ...], *, out_dir: str | os.PathLike) -> tuple[Artifacts, tuple[tuple[Path, str], ...]]:
    """The trace ``files`` as one artifact table at ``out_dir/artifacts.parquet``, read only: each
    file ingested and checked by the artifact suite alone, as :func:`ingest_stage` checks a new
    one, but a file that fails is skipped, never moved (the weekly re-evaluation reads the user's
    folder and must leave it as it was). Returns the table and each skipped file with its reason."""
    from orchrm.data.tables import write_table

    frames, sources, skipped = [], [], []
    for path in files:
        try:
            frames.append(_ingest_file(path, check=True, out_dir=Path(out_dir)))
            sources.append(path)
        except (TraceSchemaError, DataQualityError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "no message"
            skipped.append((path, f"{type(exc).__name__}: {first}"))
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    path = write_table(df, Path(out_dir) / "artifacts.parquet")
    artifacts = Artifacts(path=path, rows=len(df), tasks=int(df.task_id.nunique()) if len(df) else 0, origin="ingest", sources=tuple(sources))
    return artifacts, tuple(skipped)


def reject_file(path: Path, error: Exception, *, folder: Path, digest: str | None = None) -> Rejected:
    """Move ``path`` to :func:`rejected_dir` ``(folder)`` (a name already there gets a numbered
    suffix) and write ``<name>.rejected.json`` beside it: the error's type and text, and each
    failed expectation where the artifact suite failed."""
    target_dir = rejected_dir(folder)
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / path.name
    n = 1
    while target.exists():
        target = target_dir / f"{path.stem}.{n}{path.suffix}"
        n += 1
    os.replace(path, target)
    report = getattr(error, "report", None)
    failures = [
        {"expectation": f"{o.suite}.{o.name}", "type": o.expectation_type, "column": o.column,
         "unexpected_count": o.unexpected_count, "examples": list(o.examples), "why": o.note, "error": o.error}
        for o in (report.failures if report is not None else ())
    ]
    kind = "DataQualityError" if isinstance(error, DataQualityError) else type(error).__name__
    record = {
        "file": path.name, "from": str(path), "moved_to": str(target), "sha256": digest,
        "rejected_at": datetime.now(UTC).isoformat(), "error_type": kind, "error": str(error),
        "gx_failures": failures, "gx_results": str(report.out_dir) if report is not None and report.out_dir else None,
        "fix": f"correct the file and write it to {folder} again (write, then rename into place)",
    }
    report_path = _write_json(target.with_name(f"{target.name}.rejected.json"), record)
    if failures:
        reason = f"{kind}: failed {', '.join(f['expectation'] for f in failures)}"
    else:
        reason = f"{kind}: {str(error).strip().splitlines()[0] if str(error).strip() else 'no message'}"
    return Rejected(source=path, moved_to=target, report=report_path, reason=reason)


def _backend_key(backend: BackendConfig | None) -> list:
    """The part of a stage key a real backend adds (none for the sandbox, whose keys stay as they
    were): its model and sampling settings, never its API key."""
    from orchrm.execution.collect import backend_identity, uses_llm

    return [backend_identity(backend)] if uses_llm(backend) else []


def collect_stage(
    collect: CollectConfig,
    sandbox: NoiseConfig,
    *,
    data_dir: str,
    code_version: str,
    progress: bool = False,
    backend: BackendConfig | None = None,
) -> Artifacts:
    """Run the collection (the sandbox's, or ``backend``'s real model) and write
    ``<data_dir>/collect/<key>/artifacts.parquet``.

    ``key`` hashes every input (tasks and their source, seed, plans, samplers, sandbox noise, the
    backend and the code version), so the flows can cache this stage on its inputs and a cached
    result's file is the one those inputs wrote.
    """
    from orchrm.data.tables import write_table
    from orchrm.execution.collect import collect_from_config

    key = _key(collect.model_dump(mode="json"), sandbox.model_dump(mode="json"), code_version, *_backend_key(backend))
    df = collect_from_config(collect, sandbox, progress=progress, backend=backend)
    path = write_table(df, Path(data_dir) / "collect" / key / "artifacts.parquet")
    return Artifacts(path=path, rows=len(df), tasks=int(df.task_id.nunique()), origin="sandbox")


def collect_chunk_stage(
    chunk: TaskChunk,
    collect: CollectConfig,
    sandbox: NoiseConfig,
    *,
    run_id: str,
    code_version: str,
    backend: BackendConfig | None = None,
) -> ChunkRows:
    """One chunk of the collection (:func:`orchrm.execution.collect.plan_collection`), run in this
    process; its rows come back as data, never as a path (the machine running it shares no disk
    with the flow's). ``code_version`` changes nothing here: it is an input because the flows
    cache each chunk on its inputs, and a change of the code must miss that cache."""
    from orchrm.execution.collect import collect_chunk

    return collect_chunk(chunk, collect, sandbox, run_id=run_id, backend=backend)


def combine_collect_stage(plan: CollectionPlan, chunks: Sequence[ChunkRows], *, out_dir: str | os.PathLike) -> Artifacts:
    """The chunks' rows as the artifact table of :func:`collect_stage` (the same rows, ids and
    order: :func:`orchrm.execution.collect.combine_collection`), written to
    ``out_dir/artifacts.parquet``, the run's folder."""
    from orchrm.data.tables import write_table
    from orchrm.execution.collect import combine_collection

    df = combine_collection(plan, chunks)
    path = write_table(df, Path(out_dir) / "artifacts.parquet")
    return Artifacts(path=path, rows=len(df), tasks=int(df.task_id.nunique()), origin="sandbox")


def _log_validation(config: PipelineConfig, report, *, run_id: str, name: str) -> None:
    from orchrm.ops import tracking

    tracking.log_validation(report, run_id=run_id, name=name)


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
    """Build win/loss pairs (``config.pairs``), write ``out_dir/pairs.parquet``, log the file as
    this stage's artifact :data:`~orchrm.ops.tracking.PAIRS_ARTIFACT` (the parent run's tag
    :data:`~orchrm.ops.tracking.PAIRS_RUN_TAG` names the stage's run) and the table as the data set
    ``pairs`` (context ``training``) of this stage's run and of the parent
    run (its digest tags the registered model)."""
    from orchrm.data.pairs import build_pairs
    from orchrm.data.tables import read_table, write_table
    from orchrm.ops import tracking

    with _stage_run(config, "build-pairs", parent_run_id) as run_id:
        pairs = build_pairs(read_table(artifacts.path), config.pairs)
        path = write_table(pairs, Path(out_dir) / "pairs.parquet")
        tracking.log_file_artifact(path, run_id=run_id, artifact_path=tracking.PAIRS_ARTIFACT)
        if parent_run_id:
            tracking.set_tag(config, parent_run_id, tracking.PAIRS_RUN_TAG, run_id)
        digest = tracking.log_pairs_dataset(pairs, run_id=run_id, source=str(path), also=(parent_run_id,))
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
    ``pipeline.launcher: torchrun``, ``torchrun <pipeline.torchrun> -m orchrm.cli train ...``
    (:func:`torchrun_arguments`). On several nodes every node runs this command, each with its
    own ``pipeline.torchrun.node_rank``."""
    head = [sys.executable, "-m"]
    if config.pipeline.launcher == "torchrun":
        head = [sys.executable, "-m", "torch.distributed.run", *torchrun_arguments(config.pipeline.torchrun), "-m"]
    args = ["orchrm.cli", "train", "--pairs", str(pairs_path), "--out", str(model_dir), "--config", str(config_path), "--overwrite"]
    if run_id:
        args += ["--mlflow-run-id", run_id]
    return head + args


def torchrun_arguments(torchrun: TorchrunConfig) -> list[str]:
    """torchrun's own arguments for ``pipeline.torchrun``: ``--standalone`` on one node without a
    rendezvous endpoint (a free local port, so two trainings on one machine never meet), else the
    nodes and their rendezvous (``--node-rank`` only for ``static``: ``c10d`` ignores it).

    >>> torchrun_arguments(TorchrunConfig(nproc_per_node=2))
    ['--nproc-per-node=2', '--standalone']
    >>> torchrun_arguments(TorchrunConfig(nnodes=2, node_rank=1, rdzv_endpoint="10.0.0.1:29400"))  # doctest: +NORMALIZE_WHITESPACE
    ['--nproc-per-node=1', '--nnodes=2', '--node-rank=1', '--rdzv-backend=static', '--rdzv-endpoint=10.0.0.1:29400',
     '--rdzv-id=orchrm-train']
    """
    args = [f"--nproc-per-node={torchrun.nproc_per_node}"]
    if torchrun.nnodes == 1 and torchrun.rdzv_endpoint is None:
        return [*args, "--standalone"]
    args.append(f"--nnodes={torchrun.nnodes}")
    if torchrun.rdzv_backend == "static":
        args.append(f"--node-rank={torchrun.node_rank}")
    return [*args, f"--rdzv-backend={torchrun.rdzv_backend}", f"--rdzv-endpoint={torchrun.rdzv_endpoint}", f"--rdzv-id={torchrun.rdzv_id}"]


def other_nodes_note(config: PipelineConfig, *, pairs_path: Path | str, model_dir: Path, config_path: Path | str) -> str:
    """What every other node runs to join this node's training, as lines for the top of
    ``train.log`` ("" on one node): :func:`train_command` with that node's ``node_rank``, started
    as ``torchrun``. ``pairs_path`` and ``config_path`` are this node's paths (then the other nodes
    need the same files there) or MLflow artifact URIs, which ``orchrm train`` downloads."""
    torchrun = config.pipeline.torchrun
    if config.pipeline.launcher != "torchrun" or torchrun.nnodes == 1:
        return ""
    lines = [f"# training on {torchrun.nnodes} nodes: this is node {torchrun.node_rank}; it waits at "
             f"{torchrun.rdzv_endpoint} until every other node runs its command:"]
    for rank in range(torchrun.nnodes):
        if rank != torchrun.node_rank:
            node = config.model_copy(update={"pipeline": config.pipeline.model_copy(update={
                "torchrun": torchrun.model_copy(update={"node_rank": rank})})})
            cmd = train_command(node, pairs_path=pairs_path, model_dir=model_dir, config_path=config_path, run_id=None)
            lines.append(f"#   node {rank}: {shlex.join(['torchrun', *cmd[3:]])}")
    return "\n".join(lines) + "\n"


def _other_nodes_note(config: PipelineConfig, pairs: Pairs, *, run_id: str, model_dir: Path, config_path: Path) -> str:
    """:func:`other_nodes_note` with the run's files as MLflow artifact URIs (the pairs of the
    ``build-pairs`` run, the config logged to the ``train`` run), so that nodes which share no
    disk with this one download them (``orchrm train`` accepts URIs); local paths when the pairs
    were not logged (no ``build-pairs`` run)."""
    from orchrm.ops import tracking

    if config.pipeline.launcher != "torchrun" or config.pipeline.torchrun.nnodes == 1:
        return ""
    pairs_ref, config_ref = pairs.path, config_path
    if pairs.run_id and tracking.has_artifact(config, pairs.run_id, tracking.PAIRS_ARTIFACT):
        tracking.log_file_artifact(config_path, run_id=run_id, artifact_path=config_path.name)
        pairs_ref, config_ref = f"runs:/{pairs.run_id}/{tracking.PAIRS_ARTIFACT}", f"runs:/{run_id}/{config_path.name}"
        note = other_nodes_note(config, pairs_path=pairs_ref, model_dir=model_dir, config_path=config_ref)
        return note + f"# (each with MLFLOW_TRACKING_URI={tracking.tracking_uri(config)}: it downloads the pairs and the config from there)\n"
    return other_nodes_note(config, pairs_path=pairs_ref, model_dir=model_dir, config_path=config_ref)


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
    stage's MLflow run through :class:`orchrm.ops.tracking.MlflowCallback`.

    Once it has finished, the model is logged from this run as a pyfunc
    (:func:`orchrm.ops.registry.log_model`, ``model_uri`` of the result) with the run's
    parameters (the trainer's, as the child logged them) as the LoggedModel's, and the pairs are
    the run's data set (context ``training``).

    On several nodes (``pipeline.torchrun.nnodes`` > 1) this is node ``node_rank``'s share:
    ``train.log`` begins with the command every other node runs to join
    (:func:`other_nodes_note`), and the model is read here, where global rank 0 wrote it.

    A crash, a non-zero exit or the timeout raise :class:`TrainingError` (its message ends with
    the last lines the trainer printed, the whole log stays in ``model/train.log``); nothing is
    registered, and the next run trains in a fresh folder.
    """
    from orchrm.data.tables import read_table
    from orchrm.ops import registry, tracking

    out = Path(out_dir)
    model_dir = out / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    config_path = write_config(config, out / "config.yaml")
    timeout = config.pipeline.train_timeout_s
    with _stage_run(config, "train", parent_run_id) as run_id:
        cmd = train_command(config, pairs_path=pairs.path, model_dir=model_dir, config_path=config_path, run_id=run_id)
        env = {**os.environ, "MLFLOW_TRACKING_URI": tracking.tracking_uri(config), "PYTHONUNBUFFERED": "1"}
        log_path = model_dir / "train.log"
        with log_path.open("wb") as out_log:
            out_log.write(_other_nodes_note(config, pairs, run_id=run_id, model_dir=model_dir, config_path=config_path).encode())
            out_log.flush()
            # a session of its own, so a timeout stops torchrun's workers too; recorded while it runs, so
            # that stop_training() stops it when the run is cancelled or crashes while this thread waits
            proc = subprocess.Popen(cmd, stdout=out_log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            _running(proc, True)
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
            finally:
                _running(proc, False)
        if code != 0:
            tail = "\n".join(log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-15:])
            how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
            raise TrainingError(
                f"training {how}; nothing was registered and the next run starts afresh. The log ({log_path}) ends:\n{tail}"
            )
        result_path = model_dir / "train_result.json"
        if not result_path.is_file() and config.pipeline.launcher == "torchrun" and config.pipeline.torchrun.nnodes > 1:
            # only global rank 0 writes: under c10d, or on a node_rank other than 0, it ran elsewhere
            raise TrainingError(
                f"training finished but wrote no {result_path}: global rank 0, which writes the model, ran on another "
                "node. Run the pipeline on node_rank 0 with pipeline.torchrun.rdzv_backend: static, which puts rank 0 there"
            )
        result = json.loads(result_path.read_text(encoding="utf-8"))
        tracking.log_pairs_dataset(read_table(pairs.path), run_id=run_id, source=str(pairs.path))
        params = tracking.run_params(tracking.tracking_uri(config), run_id)
        model_uri = registry.log_model(model_dir, run_id=run_id, config=config, params=params,
                                       tags={tracking.DATA_DIGEST_TAG: pairs.digest})
    return TrainedModel(
        model_dir=model_dir,
        model_path=model_dir / "model.safetensors",
        run_id=run_id,
        epochs=len(result.get("history", [])),
        best_val_loss=result.get("best_val_loss"),
        train_seconds=float(result.get("train_seconds", 0.0)),
        model_uri=model_uri,
        averaged_epochs=int(result.get("averaged_epochs") or 0),
        final_val_loss=result.get("final_val_loss"),
        temperature=result.get("temperature"),
    )


def _stop(proc: subprocess.Popen) -> None:
    """Stop the training process and everything it started; wait for it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


#: the training subprocesses of this process that still run (:func:`train_stage` records them)
_TRAINERS: set[subprocess.Popen] = set()
_TRAINERS_LOCK = threading.Lock()


def _running(proc: subprocess.Popen, running: bool) -> None:
    with _TRAINERS_LOCK:
        (_TRAINERS.add if running else _TRAINERS.discard)(proc)


def running_trainers() -> tuple[int, ...]:
    """The process ids of the training subprocesses this process started that still run."""
    with _TRAINERS_LOCK:
        return tuple(sorted(p.pid for p in _TRAINERS))


def stop_training() -> tuple[int, ...]:
    """Stop every training subprocess this process started that still runs, with its whole process
    group (torchrun's workers too), and wait for each; return their process ids.

    The trainer runs in a session of its own, so a signal to the pipeline's process group (a
    Prefect worker cancelling a flow run) does not reach it, and the thread waiting on it may never
    get to stop it; the flows call this when they are stopped (a handler around the stages, and
    their cancellation, crash and failure hooks). The
    waiting :func:`train_stage` then raises :class:`TrainingError` (killed by a signal)."""
    with _TRAINERS_LOCK:
        procs = list(_TRAINERS)
    for proc in procs:
        _stop(proc)
    return tuple(sorted(p.pid for p in procs))


def pool_stage(
    evaluate: EvaluateConfig,
    collect: CollectConfig,
    sandbox: NoiseConfig,
    *,
    data_dir: str,
    code_version: str,
    progress: bool = False,
    replay: Artifacts | None = None,
    pairs: PairsConfig | None = None,
    backend: BackendConfig | None = None,
) -> Pool:
    """Build the held-out candidate pool and write ``<data_dir>/pools/<key>/pool.parquet``;
    ``key`` hashes the inputs, as for :func:`collect_stage`.

    Without ``replay``: fresh sandbox tasks (:func:`orchrm.evaluation.build_pool`: tasks from
    ``evaluate.seed``, never the collection seed). With ``replay`` (an artifact table, e.g. the
    run's ingested traces): its held-out tasks (split ``test`` by ``pairs``' fractions, the
    pair table's split) replayed (:func:`orchrm.evaluation.pool.build_replay_pool`); the key then
    hashes the table's bytes too. ``backend`` executes the fresh tasks' candidates on a real
    model instead of the sandbox (a replay executes nothing)."""
    from orchrm.evaluation.pool import build_pool, build_replay_pool

    if replay is None:
        key = _key(evaluate.model_dump(mode="json"), collect.model_dump(mode="json"), sandbox.model_dump(mode="json"), code_version,
                   *_backend_key(backend))
        cfg = PipelineConfig(data_dir=data_dir, collect=collect, sandbox=sandbox, evaluate=evaluate,
                             **({"backend": backend} if backend is not None else {}))
        pool = build_pool(cfg, progress=progress)
        source = "sandbox"
    else:
        from orchrm.data.tables import read_table

        pairs = pairs or PairsConfig()
        key = _key("replay", file_digest(replay.path), evaluate.model_dump(mode="json"),
                   [pairs.val_fraction, pairs.test_fraction], code_version)
        cfg = PipelineConfig(data_dir=data_dir, evaluate=evaluate, pairs=pairs)
        source = str(replay.path)
        pool = build_replay_pool(read_table(replay.path), cfg, source=source)
    path = Path(data_dir) / "pools" / key / "pool.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pool.save(path)
    frame = pool.frame
    return Pool(path=path, rows=len(frame), tasks=pool.tasks, seed=evaluate.seed, kind=str(pool.meta["kind"]), source=source)


def _pool_config(evaluate: EvaluateConfig, collect: CollectConfig, sandbox: NoiseConfig, backend: BackendConfig | None) -> PipelineConfig:
    return PipelineConfig(collect=collect, sandbox=sandbox, evaluate=evaluate, **({"backend": backend} if backend is not None else {}))


def plan_pool_stage(evaluate: EvaluateConfig, collect: CollectConfig, sandbox: NoiseConfig, *, backend: BackendConfig | None = None) -> PoolPlan:
    """The chunks of the sandbox pool of :func:`pool_stage` (without ``replay``):
    :func:`orchrm.evaluation.pool.plan_pool`."""
    from orchrm.evaluation.pool import plan_pool

    return plan_pool(_pool_config(evaluate, collect, sandbox, backend))


def pool_chunk_stage(
    chunk: TaskChunk,
    evaluate: EvaluateConfig,
    collect: CollectConfig,
    sandbox: NoiseConfig,
    *,
    code_version: str,
    backend: BackendConfig | None = None,
) -> ChunkRows:
    """One chunk of the sandbox pool (:func:`plan_pool_stage`), built in this process; its rows
    come back as data. ``code_version``: as for :func:`collect_chunk_stage`, a cache input only."""
    from orchrm.evaluation.pool import pool_chunk

    return pool_chunk(chunk, _pool_config(evaluate, collect, sandbox, backend))


def combine_pool_stage(plan: PoolPlan, chunks: Sequence[ChunkRows], *, out_dir: str | os.PathLike) -> Pool:
    """The chunks' rows as the sandbox pool of :func:`pool_stage` (the same rows in the same order:
    :func:`orchrm.evaluation.pool.combine_pool`), written to ``out_dir/pool.parquet``, the run's folder."""
    from orchrm.evaluation.pool import combine_pool

    pool = combine_pool(plan, chunks)
    path = pool.save(Path(out_dir) / "pool.parquet")
    return Pool(path=path, rows=len(pool.frame), tasks=pool.tasks, seed=int(pool.meta["seed"]), kind="sandbox", source="sandbox")


def evaluate_stage(
    model: TrainedModel | None, pairs: Pairs | None, pool: Pool, *, config: PipelineConfig, out_dir: str | os.PathLike, parent_run_id: str
) -> Evaluation:
    """Evaluate the candidate and the current champion (when there is one) on the same pool and
    held-out pairs (split ``test``) in one call; write the report (JSON, CSV tables, PNG plots)
    to ``out_dir/evaluation`` and log it to MLflow. With ``model=None`` the champion is the one
    evaluated (the weekly re-evaluation).

    Lineage: the pool is the data set ``pool`` (context ``evaluation``) and the pairs the data set
    ``pairs`` (context ``training``) of this run and of the parent run; the models scored are the
    run's model inputs; every metric is linked to the evaluated model's LoggedModel and to the
    data set it was measured on (:func:`orchrm.ops.tracking.log_evaluation`), so the model's page
    in MLflow lists them."""
    from orchrm.data.tables import read_table
    from orchrm.evaluation.harness import evaluate
    from orchrm.evaluation.pool import CandidatePool
    from orchrm.ops import registry, serving, tracking

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
        champion_id = registry.version_model_id(champion_version, config=config) if champion_version is not None else None
        model_id = model.model_id if model is not None else champion_id
        held_out = _held_out_pairs(pairs, config)
        pool_obj = CandidatePool.load(pool.path)
        datasets = {"pool": tracking.log_pool_dataset(pool_obj, run_ids=(run_id, parent_run_id), source=str(pool.path))}
        if pairs is not None:
            digest = tracking.log_pairs_dataset(read_table(pairs.path), run_id=run_id, source=str(pairs.path), also=(parent_run_id,))
            datasets["pairs"] = tracking.DatasetRef(tracking.PAIRS_DATASET, digest, "training")
        tracking.log_model_inputs(run_id, [model_id, champion_id])
        report = evaluate(candidate, pairs=held_out, pool=pool_obj, config=config.evaluate, champion=champion)
        report.write(target)
        tracking.log_evaluation(report, run_id=run_id, champion_version=champion_version if model is not None else None,
                                model_id=model_id, datasets=datasets)
        tag_pool(config, run_id, report.pool_kind)
    return Evaluation(
        run_id=run_id,
        report_dir=target,
        metrics=dict(report.metrics),
        champion_metrics=dict(report.champion_metrics) if report.champion_metrics is not None else None,
        champion_version=champion_version if model is not None else None,
        markdown=report.to_markdown(),
        summary=report.summary(),
        pool_kind=report.pool_kind,
        pool_line=report.pool_line(),
    )


#: the MLflow tag (and param) naming the pool a run's figures were measured on
POOL_TAG = "orchrm.pool"


def tag_pool(config: PipelineConfig, run_id: str, kind: str) -> None:
    """Name the pool (``sandbox`` / ``replay``) on the MLflow run ``run_id``: tag and param
    :data:`POOL_TAG`, so a run's figures never read as measured on another pool."""
    from mlflow.entities import Param

    from orchrm.ops import tracking

    uri = tracking.tracking_uri(config)
    c = tracking.client(uri)
    tracking.with_server_retries(uri, lambda: c.set_tag(run_id, POOL_TAG, kind), "tagging the run with its pool")
    tracking.log_batch(uri, run_id, params=[Param(POOL_TAG, kind)], what="logging the pool param")


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
    """Register the model logged by the training run (``model.model_uri``) as a new version
    (alias ``challenger`` when it passed every absolute gate; tags: every gate, the verdict, the
    pairs' digest, the git commit). The version's run is the evaluation run, whose metrics
    :func:`promote_stage` re-checks. Whatever the verdict: a rejected candidate is kept, with the
    reason, and never touches ``champion``. Rerun for the same evaluation run (a retried stage),
    it returns the version registered the first time. A result persisted before models were
    logged at training has no ``model_uri``: its model is logged here, from its training run."""
    from orchrm.ops import registry

    existing = registry.version_for_run(evaluation.run_id, config=config)
    if existing is not None:
        uri = registry.version_info(existing, config=config)["source"]
    elif model.model_uri:
        uri = model.model_uri
    else:
        uri = registry.log_model(model.model_dir, run_id=model.run_id, config=config)
    version = registry.register_candidate(uri, run_id=evaluation.run_id, verdict=verdict, data_digest=pairs.digest, config=config)
    return Registered(version=int(version), model_uri=uri, verdict=verdict)


def promote_stage(registered: Registered, *, config: PipelineConfig) -> int:
    """Give the version ``champion`` through :func:`orchrm.ops.registry.promote`, the path
    ``orchrm promote`` takes: the gates re-checked from the metrics stored in its run against the
    settings recorded at registration, every gate present, ``champion`` still the version it was
    evaluated against; :class:`PromotionRejected` otherwise. Returns the version."""
    from orchrm.ops import registry

    registry.promote(registered.version, config=config)
    return registered.version
