"""The flows' task runner follows ``pipeline.task_runner``: threads by default, Dask when configured."""

from __future__ import annotations

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
