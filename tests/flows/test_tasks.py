"""The Prefect side of the stages: the collection cache, and the task runner that ``pipeline.task_runner`` picks."""

from __future__ import annotations

from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner
from prefect_dask import DaskTaskRunner

from orchrm.config import config_from_dict
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
    assert any((tmp_path / "data" / "prefect-results").iterdir())
