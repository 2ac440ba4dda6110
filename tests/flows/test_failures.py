"""Failures a user meets without a full pipeline run: bad traces, and a night with nothing new."""

from __future__ import annotations

import pandas as pd
import pytest

from orchrm.errors import DataQualityError
from tests.flows.conftest import write_config

PLAN = '<agent id="a1" type="CoT" model="{tier}"/>'


def _traces(path, ids):
    rows = [
        {"task_id": f"t{i // 2}", "question": f"What is {i // 2} + 2?", "plan_text": PLAN.format(tier="small" if i % 2 else "large"),
         "content": str(i // 2 + 2 + i % 2), "quality": float(i % 2 == 0), "artifact_id": artifact_id}
        for i, artifact_id in enumerate(ids)
    ]
    pd.DataFrame(rows).to_json(path, orient="records", lines=True)


def test_a_data_quality_failure_fails_the_flow_and_names_the_expectation(tmp_path):
    from flows.pipeline import orchrm_pipeline

    traces = tmp_path / "traces"
    traces.mkdir()
    # the same artifact ids in two exports: each file is fine alone, the table they make is not
    _traces(traces / "monday.jsonl", ["a1", "a2", "a3", "a4"])
    _traces(traces / "tuesday.jsonl", ["a1", "a2", "a5", "a6"])
    config = write_config(tmp_path)
    with pytest.raises(DataQualityError, match=r"(?s)artifact_id_unique.*a1"):
        orchrm_pipeline(str(config), traces_dir=str(traces))
    # the run's report says the same
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        reports = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["orchrm-pipeline-report"])))
    assert any("DataQualityError" in (r.description or "") and "artifact_id_unique" in r.data for r in reports)


def test_a_night_without_new_traces_ends_early_and_says_so(tmp_path):
    from flows.pipeline import nightly

    traces = tmp_path / "traces"
    traces.mkdir()
    config = write_config(tmp_path, pipeline={"traces_dir": str(traces)})
    state = nightly(str(config), return_state=True)
    result = state.result()
    assert result.status == "no-new-traces"
    assert "no new traces" in result.message and str(traces) in result.message
    assert result.registered is None
    # the flow run says so itself, through the API, not only in its artifact
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        stored = client.read_flow_run(state.state_details.flow_run_id).state
    assert stored.is_completed() and stored.message == f"no-new-traces: {result.message}"


def test_the_nightly_deployment_needs_a_traces_folder(tmp_path):
    from flows.pipeline import nightly
    from orchrm.errors import ConfigError

    with pytest.raises(ConfigError, match="set pipeline.traces_dir"):
        nightly(str(write_config(tmp_path)))


def test_a_flow_run_that_fails_leaves_no_mlflow_run_running(tmp_path):
    """A flow whose body starts a parent and a nested MLflow run and then raises (an injected
    failure, as a stage killed mid-way) without ending them: the failure hook ends both, FAILED,
    found by the flow run's id they are tagged with."""
    from mlflow import MlflowClient
    from prefect import flow

    from flows.pipeline import STOP_TRAINERS
    from orchrm.config import load_config
    from orchrm.ops import tracking

    path = write_config(tmp_path)
    started: dict[str, str] = {}

    @flow(**STOP_TRAINERS)
    def starts_runs_then_fails(config: str):
        cfg = load_config(config)
        started["parent"] = tracking.start_run(cfg, "pipeline")
        started["train"] = tracking.start_run(cfg, "train", parent_run_id=started["parent"])
        raise RuntimeError("injected: the run stops here")

    state = starts_runs_then_fails(str(path), return_state=True)
    assert state.is_failed()
    client = MlflowClient(tracking_uri=tracking.tracking_uri(load_config(path)))
    for run_id in started.values():
        run = client.get_run(run_id)
        assert run.info.status == "FAILED"
        assert run.data.tags[tracking.FLOW_RUN_TAG] == str(state.state_details.flow_run_id)


def test_the_cancellation_hook_marks_the_flow_runs_mlflow_runs_killed(tmp_path):
    """The hook as Prefect calls it on a cancelled ``orchrm-stages`` run, whose ``config`` parameter
    is the config itself (stored as JSON): the run tagged with its id ends KILLED, another stays."""
    from uuid import uuid4

    from mlflow import MlflowClient
    from prefect.client.schemas.objects import FlowRun
    from prefect.states import Cancelled

    from flows.pipeline import STOP_TRAINERS
    from orchrm.config import load_config
    from orchrm.ops import tracking

    cfg = load_config(write_config(tmp_path))
    flow_run = FlowRun(id=uuid4(), flow_id=uuid4(), name="cancelled-run", parameters={"config": cfg.model_dump(mode="json")})
    ours = tracking.start_run(cfg, "pipeline", tags={tracking.FLOW_RUN_TAG: str(flow_run.id)})
    other = tracking.start_run(cfg, "pipeline", tags={tracking.FLOW_RUN_TAG: str(uuid4())})
    for hook in STOP_TRAINERS["on_cancellation"]:
        hook(None, flow_run, Cancelled())
    client = MlflowClient(tracking_uri=tracking.tracking_uri(cfg))
    assert client.get_run(ours).info.status == "KILLED"
    assert client.get_run(other).info.status == "RUNNING"
