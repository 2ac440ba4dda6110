"""Collection and the sandbox pool as mapped task runs: ``pipeline.task_runner: dask`` with
``pipeline.dask_address`` spreads their chunks over the worker processes of a real Dask cluster
(``distributed.LocalCluster``) and gives the tables of the thread runner and of the local Dask
cluster, which run each stage in one task over a pool of processes (their threads would run the
chunks one at a time)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from prefect import flow, get_run_logger

from orchrm.config import load_config
from orchrm.data.tables import read_table
from orchrm.evaluation.pool import CandidatePool
from orchrm.ops import pipeline
from tests.flows.conftest import write_config

pytestmark = pytest.mark.slow


class Kept:
    """A chunk task of the flows whose runs' results are kept as the order function reads them
    (which worker ran each chunk); submitting is the real task's."""

    def __init__(self, task: Any) -> None:
        self.task, self.results = task, []

    @classmethod
    def around(cls, task: Any) -> Any:
        return None if task is None else cls(task)

    def submit(self, *args: Any, **kwargs: Any) -> Any:
        future, results = self.task.submit(*args, **kwargs), self.results

        class Future:
            def result(self) -> Any:
                value = future.result()
                results.append(value)
                return value

        return Future()


@flow(name="collect-and-pool")
def collect_and_pool(config: str, out_dir: str) -> dict[str, Any]:
    """The pipeline's collection and sandbox pool, with the stage tasks of ``flows.pipeline``."""
    from flows.pipeline import stages

    cfg = load_config(config)
    tasks = stages(cfg)
    kept = replace(tasks, collect_chunk=Kept.around(tasks.collect_chunk), pool_chunk=Kept.around(tasks.pool_chunk))
    run = {"out_dir": out_dir, "code_version": "test", "progress": False, "say": get_run_logger().info}
    artifacts = pipeline.collect_artifacts(cfg, stages=kept, **run)
    pool = pipeline.sandbox_pool(cfg, stages=kept, **run)
    chunks = {f"{name}_chunks": getattr(kept, f"{name}_chunk").results if getattr(kept, f"{name}_chunk") else [] for name in ("collect", "pool")}
    from prefect.runtime import flow_run

    return {"artifacts": artifacts, "pool": pool, "flow_run_id": flow_run.id, **chunks}


def task_runs(flow_run_id: str) -> dict[str, str]:
    """The task runs of a flow run, as the flow's Prefect API records them: name -> state."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return {r.name: r.state.name for r in runs}


def run_on(folder: Path, **runner: Any) -> dict[str, Any]:
    """``collect_and_pool`` on the tiny config, data in ``folder`` (no cache shared with another
    run), on the task runner ``pipeline`` settings ``runner`` make (:func:`flows.pipeline.task_runner`)."""
    from flows.pipeline import task_runner

    folder.mkdir()
    config = write_config(folder, pipeline=runner)
    return collect_and_pool.with_options(task_runner=task_runner(load_config(config)))(str(config), str(folder / "run"))


def tables(result: dict[str, Any]) -> tuple[pd.DataFrame, CandidatePool]:
    return read_table(result["artifacts"].path).drop(columns="created_at"), CandidatePool.load(result["pool"].path)


def pid(worker: str) -> int:
    return int(worker.rsplit(":", 1)[1])


def test_chunks_spread_over_the_worker_processes_of_a_dask_cluster_and_give_the_thread_runners_tables(tmp_path):
    from distributed import Client, LocalCluster

    threads = run_on(tmp_path / "threads")
    assert threads["collect_chunks"] == threads["pool_chunks"] == []  # one task each, a process pool inside
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as client:
        workers = set(client.run(os.getpid).values())
        on_dask = run_on(tmp_path / "dask", task_runner="dask", dask_address=cluster.scheduler_address)
    assert len(workers) == 2 and os.getpid() not in workers
    # tiny.yaml: 4 domains x 4 tasks, 4 x 2 held-out tasks: one chunk per domain each
    assert len(on_dask["collect_chunks"]) == 4 and len(on_dask["pool_chunks"]) == 4
    ran_on = [pid(r.worker) for r in on_dask["collect_chunks"] + on_dask["pool_chunks"]]
    assert set(ran_on) == workers, f"chunks ran on {ran_on}, the cluster's workers are {workers}"
    # the workers reported their task runs to the flow's API, one per chunk
    assert task_runs(on_dask["flow_run_id"]) == {**{f"collect-chunk-{i}": "Completed" for i in range(4)},
                                                 **{f"pool-chunk-{i}": "Completed" for i in range(4)}}

    artifacts, pool = tables(on_dask)
    expected_artifacts, expected_pool = tables(threads)
    pd.testing.assert_frame_equal(artifacts, expected_artifacts)
    pd.testing.assert_frame_equal(pool.frame, expected_pool.frame)
    assert pool.meta == expected_pool.meta
    # the combined tables are written by the flow's process, into the run's folder
    assert on_dask["artifacts"].path == tmp_path / "dask" / "run" / "artifacts.parquet"
    assert on_dask["pool"].path == tmp_path / "dask" / "run" / "pool.parquet"


def test_the_local_dask_runner_without_an_address_runs_each_stage_in_one_task_and_gives_the_same_tables(tmp_path):
    local = run_on(tmp_path / "local-dask", task_runner="dask", max_workers=2)
    assert local["collect_chunks"] == local["pool_chunks"] == []
    artifacts, pool = tables(local)
    assert len(artifacts) > 0 and pool.tasks == 8
    # the mapped path on the same config, its chunk calls run plainly here (no task runner)
    from orchrm.ops import stages as stage_functions

    cfg = load_config(write_config(tmp_path, "plain.yaml"))
    plain = pipeline.Stages(collect_chunk=stage_functions.collect_chunk_stage, pool_chunk=stage_functions.pool_chunk_stage)
    run = {"out_dir": tmp_path / "plain", "code_version": "test", "progress": False, "say": lambda line: None}
    mapped = {"artifacts": pipeline.collect_artifacts(cfg, stages=plain, **run), "pool": pipeline.sandbox_pool(cfg, stages=plain, **run)}
    expected_artifacts, expected_pool = tables(mapped)
    pd.testing.assert_frame_equal(artifacts, expected_artifacts)
    pd.testing.assert_frame_equal(pool.frame, expected_pool.frame)
