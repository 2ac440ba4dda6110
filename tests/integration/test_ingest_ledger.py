"""The ingest ledger: which trace files the pipeline trained on lives in the MLflow tracking store
that every worker shares (tags of the pipeline's parent runs), so a worker that shares no disk
with the one that trained sees it. It is written right after registration, so a failure of the
promotion or of the summary logging leaves the files recorded, and the parent run then ends FAILED,
never RUNNING. A local ``ingested.json`` of an earlier version still counts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from orchrm.config import PipelineConfig, config_from_dict
from orchrm.data.tables import write_table
from orchrm.errors import RegistryError
from orchrm.execution.support_desk import make_traces
from orchrm.ops import ledger, pipeline, registry, stages, tracking
from orchrm.util.digests import file_digest
from tests.integration.mlflow_server import running_mlflow

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: gates a two-epoch tiny model passes: these tests are about the ledger, not the model
LENIENT = {"min_pairwise_accuracy": 0.0, "min_best_of_n_gain": -1.0, "beat_cost_only": False, "max_scoring_latency_ms": 1e9}


def worker(folder: Path, store: str) -> PipelineConfig:
    """``configs/tiny.yaml`` for a worker whose own files are under ``folder`` (nothing shared with
    any other worker) and whose tracking store is ``store``."""
    data = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    data["data_dir"] = str(folder / "data")
    data["registry"] = {"tracking_uri": store}
    data["evaluate"] = {**data["evaluate"], "gates": {**data["evaluate"].get("gates", {}), **LENIENT}}
    return config_from_dict(data)


@pytest.fixture
def store(tmp_path) -> str:
    """A SQLite tracking store in a folder of its own, the one thing the workers share."""
    (tmp_path / "shared").mkdir()
    return f"sqlite:///{tmp_path / 'shared' / 'mlflow.db'}"


def desk_file(folder: Path, name: str, *, seed: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return write_table(make_traces(36, seed=seed, runs=1), folder / name)


def parent_run(config: PipelineConfig, run_id: str):
    return MlflowClient(tracking_uri=tracking.tracking_uri(config)).get_run(run_id)


def pipeline_runs(config: PipelineConfig) -> list:
    """Every ``pipeline`` parent run of the store, newest first."""
    c = MlflowClient(tracking_uri=tracking.tracking_uri(config))
    return c.search_runs([tracking.configure(config)], filter_string="tags.`orchrm.stage` = 'pipeline'", order_by=["start_time DESC"])


def recorded(run) -> dict[str, str]:
    """The ledger's tags of ``run``: digest -> file name."""
    return {k.removeprefix(ledger.DIGEST_PREFIX): v for k, v in run.data.tags.items() if k.startswith(ledger.DIGEST_PREFIX)}


def record_run(config: PipelineConfig, folder: Path, name: str, *, seed: int) -> str:
    """A parent run that records ``folder/name`` as trained on (as a run that registered does)."""
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps({"night": seed}) + "\n")
    traces = stages.find_new_traces(folder, config=config)
    only = {k: v for k, v in traces.digests.items() if Path(k).name == name}
    run_id = tracking.start_run(config, "pipeline")
    stages.record_ingested(stages.NewTraces(folder=folder, files=(), new=(), digests=only), config=config, run_id=run_id)
    return run_id


# --------------------------------------------------------------------------------------------
# the ledger alone (no training)


def test_the_ledger_reads_every_page_and_counts_only_runs_that_finished_recording(tmp_path, store, monkeypatch):
    config = worker(tmp_path / "a", store)
    folder = tmp_path / "a" / "incoming"
    runs = [record_run(config, folder, f"night-{i}.jsonl", seed=i) for i in range(3)]
    monkeypatch.setattr(ledger, "PAGE_SIZE", 1)  # three pages of one run each

    seen = ledger.seen_digests(config)
    assert seen == {file_digest(folder / f"night-{i}.jsonl") for i in range(3)}
    # a record cut off before its marker (a crash between two writes) does not count
    half = tracking.start_run(config, "pipeline")
    (folder / "cut.jsonl").write_text('{"cut": 1}\n')
    MlflowClient(tracking_uri=store).set_tag(half, ledger.digest_tag(file_digest(folder / "cut.jsonl")), "cut.jsonl")
    assert ledger.seen_digests(config) == seen
    # a run deleted in MLflow no longer counts: its file is new again
    MlflowClient(tracking_uri=store).delete_run(runs[0])
    assert [p.name for p in stages.find_new_traces(folder, config=config).new] == ["cut.jsonl", "night-0.jsonl"]


def test_the_run_lists_its_files_in_an_artifact(tmp_path, store):
    config = worker(tmp_path / "a", store)
    folder = tmp_path / "a" / "incoming"
    run_id = record_run(config, folder, "monday.jsonl", seed=1)

    run = parent_run(config, run_id)
    digest = file_digest(folder / "monday.jsonl")
    assert recorded(run) == {digest: "monday.jsonl"} and run.data.tags[ledger.INGEST_TAG] == "1"
    local = MlflowClient(tracking_uri=store).download_artifacts(run_id, f"{ledger.ARTIFACT_DIR}/{ledger.ARTIFACT_NAME}", str(tmp_path))
    listing = json.loads(Path(local).read_text())
    assert listing["run_id"] == run_id and listing["files"] == [{"file": "monday.jsonl", "sha256": digest}]


def test_a_legacy_local_ledger_still_counts_as_seen(tmp_path, store):
    config = worker(tmp_path / "a", store)
    folder = tmp_path / "a" / "incoming"
    folder.mkdir(parents=True)
    (folder / "old.jsonl").write_text('{"old": 1}\n')
    (folder / "new.jsonl").write_text('{"new": 1}\n')
    legacy = {file_digest(folder / "old.jsonl"): {"file": str(folder / "old.jsonl"), "ingested_at": "2026-11-01T02:00:00+00:00", "run_id": "r1"}}
    ledger.legacy_path(config).parent.mkdir(parents=True)
    ledger.legacy_path(config).write_text(json.dumps(legacy))

    found = stages.find_new_traces(folder, config=config)
    assert [p.name for p in found.files] == ["new.jsonl", "old.jsonl"]
    assert [p.name for p in found.new] == ["new.jsonl"]


@pytest.mark.slow
def test_a_worker_sees_the_ledger_through_a_real_mlflow_server(tmp_path, store, monkeypatch):
    """One worker records on the store directly; another, with its own data folder and working
    directory, reads the ledger through ``mlflow server`` on that store (its REST search, page by page)."""
    writer = worker(tmp_path / "a", store)
    for i in range(2):
        record_run(writer, tmp_path / "a" / "incoming", f"night-{i}.jsonl", seed=i)
    reader_home = tmp_path / "b"
    (reader_home / "incoming").mkdir(parents=True)
    for i in range(2):  # the same bytes under other names, on the other worker's disk
        (reader_home / "incoming" / f"copy-{i}.jsonl").write_bytes((tmp_path / "a" / "incoming" / f"night-{i}.jsonl").read_bytes())
    (reader_home / "incoming" / "tuesday.jsonl").write_text('{"tuesday": 1}\n')
    monkeypatch.chdir(reader_home)
    monkeypatch.setattr(ledger, "PAGE_SIZE", 1)

    with running_mlflow(["server", "--backend-store-uri", store], tmp_path / "server.log") as url:
        reader = worker(reader_home, url)
        found = stages.find_new_traces(reader_home / "incoming", config=reader)
    assert [p.name for p in found.new] == ["tuesday.jsonl"]


# --------------------------------------------------------------------------------------------
# the pipeline (trains the tiny model)


@pytest.mark.slow
def test_a_worker_that_shares_no_disk_sees_which_files_another_trained_on(tmp_path, store, monkeypatch):
    first = worker(tmp_path / "a", store)
    monday = desk_file(tmp_path / "a" / "incoming", "monday.parquet", seed=1)
    monkeypatch.chdir(tmp_path / "a")
    result = pipeline.run_pipeline(first, traces_dir=tmp_path / "a" / "incoming")
    assert result.status == "promoted", f"{result.message}\n{result.verdict}"
    run = parent_run(first, result.run_id)
    assert run.info.status == "FINISHED"
    assert recorded(run) == {file_digest(monday): "monday.parquet"} and run.data.tags[ledger.INGEST_TAG] == "1"

    # another worker: its own data folder, working directory and copy of the file, the same store
    second = worker(tmp_path / "b", store)
    copy = tmp_path / "b" / "incoming" / "export-monday.parquet"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(monday.read_bytes())
    monkeypatch.chdir(tmp_path / "b")
    night = pipeline.run_pipeline(second, traces_dir=copy.parent)
    assert night.status == "no-new-traces" and night.run_id is None, night.message
    assert night.champion_version == result.registered.version
    assert not (tmp_path / "b" / "data" / "ingest").exists()  # nothing kept on this worker's disk


@pytest.mark.slow
def test_an_injected_failure_of_the_summary_logging_leaves_the_files_recorded_and_the_run_failed(tmp_path, store, monkeypatch):
    config = worker(tmp_path / "a", store)
    monday = desk_file(tmp_path / "a" / "incoming", "monday.parquet", seed=2)

    def injected(*_, **__):
        raise RegistryError("injected: the tracking server stopped answering while logging the summary")

    monkeypatch.setattr(pipeline, "_log_summary", injected)
    with pytest.raises(RegistryError, match="injected") as raised:
        pipeline.run_pipeline(config, traces_dir=monday.parent)
    assert any("version 1 is registered all the same" in note for note in raised.value.__notes__)

    (run,) = pipeline_runs(config)
    assert run.info.status == "FAILED"  # not RUNNING
    assert recorded(run) == {file_digest(monday): "monday.parquet"}
    assert registry.champion_version(config) == 1  # promotion came before the summary
    monkeypatch.undo()
    again = pipeline.run_pipeline(config, traces_dir=monday.parent)
    assert again.status == "no-new-traces", again.message


@pytest.mark.slow
def test_an_injected_promotion_failure_records_the_files_and_says_how_to_promote(tmp_path, store):
    config = worker(tmp_path / "a", store)
    monday = desk_file(tmp_path / "a" / "incoming", "monday.parquet", seed=3)

    def injected_promote(registered, *, config):
        raise RegistryError("injected: the registry stopped answering while promoting")

    with pytest.raises(RegistryError, match="injected") as raised:
        pipeline.run_pipeline(config, traces_dir=monday.parent, stages=pipeline.Stages(promote=injected_promote))
    (note,) = raised.value.__notes__
    assert "trace files it trained on are recorded" in note and "`orchrm promote --version 1`" in note
    assert "orchrm promote --version 1" in pipeline.failure_markdown(raised.value)

    (run,) = pipeline_runs(config)
    assert run.info.status == "FAILED"
    assert recorded(run) == {file_digest(monday): "monday.parquet"}
    assert registry.champion_version(config) is None
    night = pipeline.run_pipeline(config, traces_dir=monday.parent)
    assert night.status == "no-new-traces", night.message
    # what the note says to do works
    registry.promote(1, config=config)
    assert registry.champion_version(config) == 1
