"""The deployments of ``prefect.yaml``: one run at a time, flows with timeouts; a served deployment,
triggered with run_deployment, runs to completion."""

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


def test_every_deployment_runs_one_at_a_time_and_every_deployed_flow_has_a_timeout():
    import yaml
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
    from prefect.flows import load_flow_from_entrypoint

    from flows.pipeline import FLOW_TIMEOUT_S, OTHER_STAGES_S, stages_timeout
    from orchrm.config import config_from_dict

    deployments = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    assert {d["name"] for d in deployments} == {"nightly-retrain", "weekly-reevaluation", "on-demand"}
    for deployment in deployments:
        limit = ConcurrencyLimitConfig.model_validate(deployment["concurrency_limit"])
        assert (limit.limit, limit.collision_strategy) == (1, ConcurrencyLimitStrategy.ENQUEUE), deployment["name"]
        path, name = deployment["entrypoint"].split(":")
        deployed = load_flow_from_entrypoint(f"{ROOT / path}:{name}", use_placeholder_flow=False)
        assert deployed.timeout_seconds == FLOW_TIMEOUT_S, deployment["name"]
    # the stages' own flow gets the config's training timeout and room for the other stages
    assert stages_timeout(config_from_dict({"pipeline": {"train_timeout_s": 600}})) == 600 + OTHER_STAGES_S
