"""A served deployment, triggered with run_deployment, runs to completion."""

from __future__ import annotations

import asyncio

from tests.flows.conftest import ROOT, write_config


def test_a_served_deployment_triggered_with_run_deployment_completes(tmp_path, monkeypatch):
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.runner import Runner

    from flows.pipeline import nightly

    monkeypatch.chdir(ROOT)  # the runner loads the flow from its entrypoint, flows/pipeline.py
    traces = tmp_path / "traces"
    traces.mkdir()
    config = write_config(tmp_path, pipeline={"traces_dir": str(traces)})
    runner = Runner()
    runner.add_deployment(nightly.to_deployment(name="test-nightly", parameters={"config": str(config)}))
    scheduled = run_deployment("orchrm-nightly/test-nightly", timeout=0)
    asyncio.run(runner.start(run_once=True))
    with get_client(sync_client=True) as client:
        state = client.read_flow_run(scheduled.id).state
    assert state.is_completed(), state
