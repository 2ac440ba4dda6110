"""The Prefect side of the stages: the collection cache and its JSON results, and the task runner that ``pipeline.task_runner`` picks."""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner
from prefect_dask import DaskTaskRunner

from orchrm.config import config_from_dict
from orchrm.ops.stages import Artifacts
from tests.flows.conftest import write_config


def test_threads_by_default_and_dask_when_configured():
    from flows.pipeline import task_runner

    assert isinstance(task_runner(config_from_dict({})), ThreadPoolTaskRunner)
    assert isinstance(task_runner(config_from_dict({"pipeline": {"task_runner": "dask"}})), DaskTaskRunner)


def test_a_flow_runs_its_tasks_on_a_dask_cluster(tmp_path):
    from flows.pipeline import nightly

    traces = tmp_path / "traces"
    traces.mkdir()
    config = write_config(tmp_path, pipeline={"traces_dir": str(traces), "task_runner": "dask", "max_workers": 2})
    result = nightly(str(config))
    assert result.status == "no-new-traces"


def test_the_collection_is_cached_on_its_inputs_with_results_under_the_data_dir(tmp_path):
    from flows.pipeline import stages

    cfg = config_from_dict({"data_dir": str(tmp_path / "data"), "collect": {"domains": ["math"], "tasks_per_domain": 1, "plans_per_task": 2, "workers": 1}})
    collect = stages(cfg).collect

    @flow
    def twice_then_another_seed():
        first = collect(cfg.collect, cfg.sandbox, data_dir=cfg.data_dir, code_version="v1", return_state=True)
        again = collect(cfg.collect, cfg.sandbox, data_dir=cfg.data_dir, code_version="v1", return_state=True)
        other = collect(cfg.collect.model_copy(update={"seed": 1}), cfg.sandbox, data_dir=cfg.data_dir, code_version="v1", return_state=True)
        newer_code = collect(cfg.collect, cfg.sandbox, data_dir=cfg.data_dir, code_version="v2", return_state=True)
        return first, again, other, newer_code

    first, again, other, newer_code = twice_then_another_seed()
    assert [s.name for s in (first, again, other, newer_code)] == ["Completed", "Cached", "Completed", "Completed"]
    assert again.result().path == first.result().path and again.result().path.is_file()
    # the cached result is read back from a JSON record (no pickle) that rebuilds the dataclass
    assert again.data.metadata.serializer.type == "json"
    assert again.result() == first.result() and isinstance(again.result(), Artifacts)
    record = json.loads(Path(again.data.metadata.storage_key).read_text())
    assert record["metadata"]["serializer"]["type"] == "json"
    stored = json.loads(record["result"])
    assert stored["__class__"] == "orchrm.ops.stages.Artifacts"
    assert stored["data"] == {"path": str(first.result().path), "rows": first.result().rows, "tasks": first.result().tasks,
                              "origin": "sandbox", "sources": [], "rejected": []}
    assert Path(again.data.metadata.storage_key).parent == tmp_path / "data" / "prefect-results"


def test_a_cached_collection_names_a_local_file_so_another_host_sharing_the_results_collects_again(tmp_path, monkeypatch):
    """The other host is this one under another host name (a second machine does not run here)."""
    import socket

    from prefect.filesystems import LocalFileSystem

    from flows.pipeline import stages

    LocalFileSystem(basepath=str(tmp_path / "shared-results")).save("orchrm-shared-results", overwrite=True)
    cfg = config_from_dict({"data_dir": str(tmp_path / "data"), "pipeline": {"result_storage": "local-file-system/orchrm-shared-results"},
                            "collect": {"domains": ["math"], "tasks_per_domain": 1, "plans_per_task": 2, "workers": 1}})

    @flow
    def collect_once():
        return stages(cfg).collect(cfg.collect, cfg.sandbox, data_dir=cfg.data_dir, code_version="v1", return_state=True)

    first, again = collect_once(), collect_once()
    assert [first.name, again.name] == ["Completed", "Cached"]
    assert (tmp_path / "shared-results" / first.data.metadata.storage_key).is_file()  # in the named block
    monkeypatch.setattr(socket, "gethostname", lambda: "another-host")
    assert collect_once().name == "Completed"


def test_a_collection_chunk_is_cached_on_its_inputs_and_its_rows_come_back_as_json_data(tmp_path):
    """A chunk's result is its rows, not a path: a worker on another machine shares no disk with
    the flow, and the record Prefect persists (JSON, no pickle) holds the rows themselves."""
    from flows.pipeline import stages
    from orchrm.execution.collect import ChunkRows, plan_collection

    cfg = config_from_dict({"data_dir": str(tmp_path / "data"), "pipeline": {"task_runner": "dask", "dask_address": "tcp://scheduler:8786"},
                            "collect": {"domains": ["math"], "tasks_per_domain": 2, "plans_per_task": 2, "chunk_tasks": 1, "repeats": 1}})
    chunk = stages(cfg).collect_chunk
    plan = plan_collection(cfg.collect, cfg.sandbox)
    first_chunk, second_chunk = plan.chunks

    @flow
    def twice_then_the_next_chunk_then_newer_code():
        kwargs = {"run_id": plan.run_id, "return_state": True}
        first = chunk(first_chunk, cfg.collect, cfg.sandbox, code_version="v1", **kwargs)
        again = chunk(first_chunk, cfg.collect, cfg.sandbox, code_version="v1", **kwargs)
        other = chunk(second_chunk, cfg.collect, cfg.sandbox, code_version="v1", **kwargs)
        newer_code = chunk(first_chunk, cfg.collect, cfg.sandbox, code_version="v2", **kwargs)
        return first, again, other, newer_code

    first, again, other, newer_code = twice_then_the_next_chunk_then_newer_code()
    assert [s.name for s in (first, again, other, newer_code)] == ["Completed", "Cached", "Completed", "Completed"]
    assert again.result() == first.result() and isinstance(again.result(), ChunkRows)
    assert again.result().index == 0 and other.result().index == 1 and len(again.result().rows) > 0
    record = json.loads(Path(again.data.metadata.storage_key).read_text())
    assert record["metadata"]["serializer"]["type"] == "json"
    stored = json.loads(record["result"])
    assert stored["__class__"] == "orchrm.execution.collect.ChunkRows"
    rows = [dict(zip(stored["data"]["columns"], row, strict=True)) for row in stored["data"]["rows"]]
    assert {r["task_id"] for r in rows} == set(first_chunk.task_ids) and all(r["run_id"] == plan.run_id for r in rows)
    assert Path(again.data.metadata.storage_key).parent == tmp_path / "data" / "prefect-results"


def test_on_a_dask_cluster_the_pipeline_maps_collection_and_the_pool_over_chunks_and_in_this_process_runs_each_in_one_task():
    from flows.pipeline import stages

    on_dask = stages(config_from_dict({"pipeline": {"task_runner": "dask", "dask_address": "tcp://scheduler:8786"}}))
    assert (on_dask.collect_chunk.name, on_dask.pool_chunk.name) == ("collect-chunk", "pool-chunk")
    for chunk_task in (on_dask.collect_chunk, on_dask.pool_chunk):
        assert chunk_task.persist_result and chunk_task.result_serializer == "json"
    # threads of this process (the thread runner, a local Dask cluster) would run the chunks one at a time
    for here in ({}, {"pipeline": {"task_runner": "dask"}}):
        in_process = stages(config_from_dict(here))
        assert in_process.collect_chunk is None and in_process.pool_chunk is None
        assert (in_process.collect.name, in_process.build_pool.name) == ("collect", "build-pool")


def test_every_stage_result_and_flow_result_round_trips_through_prefects_json_serializer(tmp_path):
    from prefect.serializers import JSONSerializer

    from orchrm.evaluation.gates import GateResult, Verdict
    from orchrm.execution.collect import ChunkRows, TaskChunk
    from orchrm.ops.pipeline import PipelineResult, Reevaluation
    from orchrm.ops.stages import (
        Evaluation,
        NewTraces,
        Pairs,
        Pool,
        Registered,
        TrainedModel,
        Validated,
    )

    verdict = Verdict((GateResult("beats_cost_only", False, 0.1, 0.2, "below"), GateResult("beats_champion", True, None, None, "no champion", False)))
    evaluation = Evaluation("run", tmp_path / "evaluation", {"pairwise_accuracy": 0.8}, None, None, "| md |", "summary", "replay", "the replay pool")
    model = TrainedModel(tmp_path / "model", tmp_path / "model" / "model.safetensors", "run", 2, None, 1.5, "models:/m-0123")
    pairs = Pairs(tmp_path / "pairs.parquet", 12, {"train": 8, "val": 2, "test": 2}, "digest", "run")
    values = [
        NewTraces(tmp_path, (tmp_path / "a.jsonl",), (tmp_path / "a.jsonl",), {str(tmp_path / "a.jsonl"): "sha"}),
        Artifacts(tmp_path / "artifacts.parquet", 6, 1, "ingest"),
        Validated("artifacts", 6, ("artifacts.some_warning",), tmp_path, "run"),
        pairs,
        Pool(tmp_path / "pool.parquet", 4, 2, 7, "replay", str(tmp_path / "artifacts.parquet")),
        model,
        evaluation,
        Registered(3, "models:/orchrm/3", verdict),
        PipelineResult(status="rejected", run_dir=tmp_path, message="rejected", run_id="run", pairs=pairs, model=model, evaluation=evaluation, verdict=verdict, seconds={"train": 1.0}),
        Reevaluation(champion_version=None, pool=None, evaluation=None, verdict=None, message="no champion yet"),
        TaskChunk(2, "math", ("math-1", "math-2")),
        ChunkRows(2, ("task_id", "parent_ids", "quality", "answer"), (("math-1", ["a1"], 0.5, None), ("math-2", [], None, "4")),
                  "host:4711", "2026-12-02T15:00:00+00:00", 1.25),
    ]
    serializer = JSONSerializer()
    for value in values:
        assert serializer.loads(serializer.dumps(value)) == value, type(value).__name__
    assert serializer.loads(serializer.dumps(model)).model_id == "m-0123"
    # a model persisted before it carried its LoggedModel's URI still loads
    older = serializer.dumps(model).replace(b', "model_uri": "models:/m-0123"', b"")
    assert b"model_uri" not in older and serializer.loads(older).model_uri == ""


def test_only_reading_the_traces_folder_is_retried_as_a_task():
    """One retry layer: tracking and registry calls retry themselves, so no stage task that
    makes them retries as a whole; find-new-traces retries ``pipeline.retries`` times."""
    from flows.pipeline import stages

    tasks = vars(stages(config_from_dict({"pipeline": {"retries": 3, "task_runner": "dask", "dask_address": "tcp://scheduler:8786"}})))
    assert {name: t.retries for name, t in tasks.items() if t.retries} == {"find_new_traces": 3}


def test_a_task_is_retried_when_the_folder_cannot_be_read_and_never_for_the_tracking_store():
    from prefect import task

    from flows import folder_unreadable
    from orchrm.errors import RegistryError

    attempts: list[str] = []

    def flaky(error: Exception) -> str:
        attempts.append(type(error).__name__)
        if len(attempts) == 1:
            raise error
        return "read"

    reading = task(flaky, retries=2, retry_delay_seconds=0, retry_condition_fn=folder_unreadable)

    @flow
    def night(error: Exception) -> str:
        return reading(error)

    assert night(OSError("the share dropped")) == "read" and attempts == ["OSError", "OSError"]
    attempts.clear()
    state = night(RegistryError("the tracking server stopped answering"), return_state=True)
    assert state.is_failed() and attempts == ["RegistryError"]
