"""The parent flow ``orchrm-pipeline`` and the scheduled entry points that ``prefect.yaml`` deploys.

``orchrm-pipeline`` runs :func:`orchrm.ops.pipeline.run_pipeline` with the stage tasks of this package
on the configured task runner, then publishes two Prefect artifacts: the markdown report (gate
verdict with every figure and threshold, pairwise and best-of-N tables) and a link to the MLflow
run. ``orchrm-nightly`` is the same on the new traces of a folder; ``orchrm-weekly-reevaluation``
evaluates the champion again on held-out tasks it never saw (fresh sandbox tasks, or the newest
traces' held-out tasks for a champion trained on them). Every persisted result (the flows', the cached
stages') is JSON, never a pickle.

    python -m flows.pipeline --config configs/default.yaml          # one run, Prefect's ephemeral API
    python -m flows.pipeline --config configs/default.yaml --demo   # what `make demo` runs
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_link_artifact, create_markdown_artifact
from prefect.logging.loggers import flow_run_logger
from prefect.states import Completed, State
from prefect.task_runners import ThreadPoolTaskRunner

from flows import build_pairs, collect, evaluate, promote, train, validate
from orchrm.config import PipelineConfig, config_from_dict, load_config
from orchrm.errors import ConfigError
from orchrm.ops import pipeline
from orchrm.ops.stages import stop_training
from orchrm.ops.tracking import end_runs_of_flow_run

DEFAULT_CONFIG = "configs/default.yaml"
#: timeout of the deployed flows (pipeline, nightly, weekly): a day, so that a run that hangs never
#: reaches into the next night's, which its deployment's concurrency limit holds back until then
FLOW_TIMEOUT_S = 24 * 3600
#: what the stages other than training (collection or ingest, validation, pairs, evaluation,
#: registry) may take on top of ``pipeline.train_timeout_s``, in :func:`stages_timeout`
OTHER_STAGES_S = 3 * 3600


def stages(config: PipelineConfig) -> pipeline.Stages:
    """The stage tasks, the cached ones persisting in ``pipeline.result_storage`` (a Prefect storage
    block every worker reaches), else under the data dir. Only ``find-new-traces``
    retries (``pipeline.retries`` times, ``pipeline.retry_delay_s`` apart, when the traces folder
    cannot be read); every other stage's I/O retries itself, inside, once (see :mod:`flows`)."""
    results = result_storage(config)
    folder_reads = {"retries": config.pipeline.retries, "retry_delay_seconds": config.pipeline.retry_delay_s}
    return pipeline.Stages(
        find_new_traces=collect.find_new_traces.with_options(**folder_reads),
        ingest=collect.ingest,
        collect=collect.collect.with_options(result_storage=results),
        validate_artifacts=validate.validate_artifacts,
        build_pairs=build_pairs.build_pairs,
        validate_pairs=validate.validate_pairs,
        build_pool=evaluate.build_pool.with_options(result_storage=results),
        train=train.train,
        evaluate=evaluate.evaluate,
        gate=evaluate.gate,
        register=promote.register,
        promote=promote.promote,
        record_ingested=collect.record_ingested,
        **mapped_stages(config, results),
    )


def result_storage(config: PipelineConfig):
    """``pipeline.result_storage``: the Prefect storage block of that slug (loaded now, so that a
    missing one fails before any stage runs, with what to do), else the folder
    ``<data_dir>/prefect-results`` of this machine."""
    slug = config.pipeline.result_storage
    if not slug:
        return config.data_path("prefect-results").expanduser().resolve()
    from prefect.blocks.core import Block

    try:
        return Block.load(slug)
    except (ValueError, KeyError) as exc:
        raise ConfigError(
            f"pipeline.result_storage: there is no Prefect storage block {slug!r} on the Prefect API this flow talks to ({exc}). "
            "Create it once, e.g. `RemoteFileSystem(basepath='s3://<bucket>/prefect-results', settings={...}).save('<name>')` "
            "(README: For a team), or unset pipeline.result_storage to keep results in the data folder"
        ) from None


def mapped_stages(config: PipelineConfig, results: Path) -> dict:
    """On a Dask cluster (``pipeline.task_runner: dask`` with ``pipeline.dask_address``), the tasks
    that map collection and the sandbox pool over chunks of tasks (``collect-chunk``,
    ``pool-chunk``): the cluster spreads them over its workers, whose daemonic processes could not
    start a pool of their own. Otherwise none: threads of this process (the thread runner, the
    local Dask cluster) would run CPU-bound chunks one at a time under the GIL, so ``collect`` and
    ``build-pool`` stay one task each, over ``collect.workers`` processes of this machine. The
    tables are the same either way."""
    if config.pipeline.task_runner != "dask" or not config.pipeline.dask_address:
        return {}
    return {"collect_chunk": collect.collect_chunk.with_options(result_storage=results),
            "pool_chunk": evaluate.pool_chunk.with_options(result_storage=results)}


def stages_timeout(config: PipelineConfig) -> float:
    """Timeout of the ``orchrm-stages`` flow: ``pipeline.train_timeout_s`` plus :data:`OTHER_STAGES_S`."""
    return config.pipeline.train_timeout_s + OTHER_STAGES_S


def task_runner(config: PipelineConfig):
    """``pipeline.task_runner``: threads, or prefect-dask's DaskTaskRunner (the scheduler at
    ``pipeline.dask_address``, else a local cluster in this process). A cluster's workers report
    their task runs to ``PREFECT_API_URL``: without one, each starts a temporary API of its own
    (a warning says so)."""
    run = config.pipeline
    if run.task_runner == "dask":
        from prefect.settings import PREFECT_API_URL
        from prefect_dask import DaskTaskRunner

        if run.dask_address:
            if not PREFECT_API_URL.value():
                logging.getLogger("orchrm.flows").warning(
                    "pipeline.dask_address is set but PREFECT_API_URL is not: each Dask worker will start a temporary "
                    "Prefect API of its own and record the chunks' task runs there, not where this flow run is. Start a "
                    "Prefect server (`prefect server start`) and set PREFECT_API_URL, for this process and the workers")
            return DaskTaskRunner(address=run.dask_address)
        return DaskTaskRunner(cluster_kwargs={"n_workers": 1, "threads_per_worker": run.max_workers, "processes": False})
    return ThreadPoolTaskRunner(max_workers=run.max_workers)


def stop_trainers(flow, flow_run, state) -> None:
    """Flow hook on cancellation, crash and failure (a timeout too): stop the training subprocesses
    this process still runs (:func:`orchrm.ops.stages.stop_training`), so that none outlives the
    flow run. A process worker's cancel signals the flow run's process group, which the trainer (a
    session of its own) is not in. The hooks of a nested flow (``orchrm-stages`` always is) run in
    the flow run's own process, where the trainer was started."""
    stopped = stop_training()
    if stopped:
        flow_run_logger(flow_run, flow).warning(f"{state.name}: stopped the training process(es) {', '.join(map(str, stopped))}")


def end_mlflow_runs(flow, flow_run, state) -> None:
    """Flow hook on cancellation, crash and failure: end every MLflow run still ``RUNNING`` that was
    started in this flow run (tagged with its id, :func:`orchrm.ops.tracking.end_runs_of_flow_run`),
    ``KILLED`` when the run was cancelled, else ``FAILED``, so that a process stopped by its worker
    leaves no run that looks alive. The store is the one of the flow run's ``config`` parameter (a
    path or the config itself); a flow run without one has no runs to end."""
    config = _config_parameter(flow_run.parameters or {})
    if config is None:
        return
    status = "KILLED" if state.is_cancelled() or state.is_cancelling() else "FAILED"
    ended = end_runs_of_flow_run(config, str(flow_run.id), status=status)
    if ended:
        flow_run_logger(flow_run, flow).warning(f"{state.name}: marked the MLflow run(s) {', '.join(ended)} {status}")


def _config_parameter(parameters: dict) -> PipelineConfig | None:
    value = parameters.get("config")
    if isinstance(value, PipelineConfig):
        return value
    if isinstance(value, dict):
        return config_from_dict(value)
    return load_config(value) if isinstance(value, str) else None


#: the hooks of every flow that starts MLflow runs or training: nothing outlives a stopped flow run
STOP_TRAINERS = {
    "on_cancellation": [stop_trainers, end_mlflow_runs],
    "on_crashed": [stop_trainers, end_mlflow_runs],
    "on_failure": [stop_trainers, end_mlflow_runs],
}


@flow(name="orchrm-stages", result_serializer="json", **STOP_TRAINERS)
def run_stages(config: PipelineConfig, traces_dir: str | None = None, run_dir: str | None = None) -> pipeline.PipelineResult:
    """:func:`orchrm.ops.pipeline.run_pipeline` with the stage tasks. Whatever stops it while it waits
    (the termination signal of a worker cancelling the run, a timeout) stops the training
    subprocess first, before Prefect reports the state (the hooks do the same after)."""
    try:
        return pipeline.run_pipeline(config, traces_dir=traces_dir, run_dir=run_dir, stages=stages(config), say=get_run_logger().info)
    except BaseException:
        stop_training()
        raise


def publish(result: pipeline.PipelineResult, config: PipelineConfig) -> None:
    create_markdown_artifact(key="orchrm-pipeline-report", markdown=pipeline.report_markdown(result), description=f"verdict: {result.status}")
    url = pipeline.mlflow_run_url(config, result.run_id)
    if url:
        create_link_artifact(key="orchrm-mlflow-run", link=url, link_text=f"MLflow run {result.run_id}", description="the pipeline's parent run")


def completed(result: pipeline.PipelineResult) -> State:
    """The pipeline flow run's final state: Completed with ``result`` as its data and the outcome as
    its message, ``<status>: <message>`` (a rejected run names the gates that failed), so that the
    Prefect UI and API show the verdict beside the run, not only in its artifact."""
    return Completed(message=f"{result.status}: {result.message}", data=result)


@flow(name="orchrm-pipeline", timeout_seconds=FLOW_TIMEOUT_S, result_serializer="json", **STOP_TRAINERS)
def orchrm_pipeline(config: str = DEFAULT_CONFIG, traces_dir: str | None = None, run_dir: str | None = None) -> State:
    """Every stage once: collect (or ingest ``traces_dir``), validate, pairs, validate, train,
    evaluate, gate, register, promote. Fails on bad data or a failed training; completes with
    verdict ``rejected`` when a gate fails (``champion`` untouched). The flow run ends
    :func:`completed` (calling the flow returns the :class:`~orchrm.ops.pipeline.PipelineResult`)."""
    cfg = load_config(config)
    try:
        result = run_stages.with_options(task_runner=task_runner(cfg), timeout_seconds=stages_timeout(cfg))(cfg, traces_dir=traces_dir, run_dir=run_dir)
    except Exception as exc:
        create_markdown_artifact(key="orchrm-pipeline-report", markdown=pipeline.failure_markdown(exc), description=f"failed: {type(exc).__name__}")
        raise
    publish(result, cfg)
    return completed(result)


@flow(name="orchrm-nightly", timeout_seconds=FLOW_TIMEOUT_S, result_serializer="json")
def nightly(config: str = DEFAULT_CONFIG, traces_dir: str | None = None) -> State:
    """Retrain on the trace files of ``traces_dir`` (default ``pipeline.traces_dir``); a night with no
    new file ends early and says so (in the state message, as :func:`completed`)."""
    return completed(orchrm_pipeline(config, traces_dir=pipeline.nightly_traces_dir(load_config(config), traces_dir)))


@flow(name="orchrm-weekly-reevaluation", timeout_seconds=FLOW_TIMEOUT_S, result_serializer="json", **STOP_TRAINERS)
def weekly(config: str = DEFAULT_CONFIG, seed: int | None = None, traces_dir: str | None = None) -> State:
    """The champion on held-out tasks it never saw, gates checked: fresh sandbox tasks (``seed``,
    default one per ISO week), or for a champion gated on a replay of your traces the held-out
    tasks of the newest trace files of ``traces_dir`` (default ``pipeline.traces_dir``), read
    without changing the folder. The flow run's state message names the pool and says whether it
    still passes every gate (calling the flow returns the :class:`~orchrm.ops.pipeline.Reevaluation`)."""
    cfg = load_config(config)
    result = pipeline.reevaluate_champion(cfg, seed=seed, traces_dir=traces_dir, stages=stages(cfg), say=get_run_logger().info)
    create_markdown_artifact(key="orchrm-weekly-report", markdown=pipeline.reevaluation_markdown(result), description=result.message)
    return Completed(message=result.message, data=result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.pipeline", description="Run the orchrm-pipeline flow once.")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help=f"YAML config (default: {DEFAULT_CONFIG})")
    parser.add_argument("--traces", default=None, help="folder of trace files to ingest instead of collecting")
    parser.add_argument("--demo", action="store_true", help="then the best-of-N example with the champion, and the demo's ending")
    args = parser.parse_args(argv)
    if args.demo:
        from orchrm.ops.demo import run_demo

        run_demo(args.config, pipeline=lambda cfg, run_dir=None, say=None: orchrm_pipeline(args.config, traces_dir=args.traces, run_dir=run_dir))
        return 0
    result = orchrm_pipeline(args.config, traces_dir=args.traces)
    print(f"{result.status}: {result.message}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
