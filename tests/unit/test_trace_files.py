"""The nightly's trace folder: which files a night reads, and what happens to a file that fails
ingest or the artifact suite (moved to ``rejected/`` beside the folder with a report; the night goes
on with the rest, or ends Completed with "nothing valid")."""

from __future__ import annotations

import json

import pandas as pd

from orchrm.config import config_from_dict
from orchrm.data.ingest import ingest_traces
from orchrm.data.tables import read_table, write_table
from orchrm.execution.support_desk import make_traces
from orchrm.ops import pipeline, stages


def _desk(path, *, seed=0):
    write_table(make_traces(2, seed=seed, runs=1), path)
    return path


def _too_deep(path):
    """A plan of 34 chained agents: ingest accepts it, the artifact suite (depth_in_range) does not."""
    n = 34
    plan = "\n".join(f'<agent id="a{i}" type="CoT" model="small"/>' for i in range(n)) + "\n" + "\n".join(
        f'<edge from="a{i}" to="a{i + 1}"/>' for i in range(n - 1))
    rows = [{"task_id": "deep", "question": "q?", "plan_id": "chain", "run_id": "r", "node_id": f"a{i}", "plan_text": plan,
             "content": "c", "quality": 1.0} for i in range(n)]
    rows.append({"task_id": "deep", "question": "q?", "plan_id": "one", "run_id": "r", "node_id": "a1",
                 "plan_text": '<agent id="a1" type="CoT" model="small"/>', "content": "c", "quality": 0.0})
    pd.DataFrame(rows).to_json(path, orient="records", lines=True)
    return path


def test_files_being_written_and_other_suffixes_are_skipped(tmp_path):
    folder = tmp_path / "incoming"
    folder.mkdir()
    for name in ["monday.jsonl", "tuesday.parquet", ".wednesday.jsonl", "thursday.jsonl.tmp", "friday.tmp",
                 "notes.txt", "export.csv", "saturday.jsonl.part"]:
        (folder / name).write_text('{"a": 1}\n')
    (folder / "sub.jsonl").mkdir()  # a folder named like a trace file
    found = stages.find_new_traces(folder, data_dir=tmp_path / "data")
    assert [p.name for p in found.files] == ["monday.jsonl", "tuesday.parquet"]
    assert [p.name for p in found.new] == ["monday.jsonl", "tuesday.parquet"]


def test_a_malformed_file_is_moved_to_rejected_with_a_report_and_the_rest_is_ingested(tmp_path):
    folder, data = tmp_path / "incoming", tmp_path / "data"
    folder.mkdir()
    good = _desk(folder / "good.jsonl")
    (folder / "broken.jsonl").write_text('{"task_id": "t"}\nnot json\n')
    _too_deep(folder / "deep.jsonl")
    found = stages.find_new_traces(folder, data_dir=data)

    artifacts = stages.ingest_stage(found, out_dir=tmp_path / "run")

    assert artifacts.sources == (good,)
    assert len(read_table(artifacts.path)) == artifacts.rows == len(ingest_traces(read_table(good)))
    assert sorted(p.name for p in folder.iterdir()) == ["good.jsonl"]
    rejected = {r.source.name: r for r in artifacts.rejected}
    assert set(rejected) == {"broken.jsonl", "deep.jsonl"}
    for name, r in rejected.items():
        assert r.moved_to == tmp_path / "rejected" / name and r.moved_to.is_file()
        assert r.report == tmp_path / "rejected" / f"{name}.rejected.json"
    broken = json.loads(rejected["broken.jsonl"].report.read_text())
    assert broken["error_type"] == "TraceSchemaError" and "line 2 is not valid JSON" in broken["error"]
    assert broken["gx_failures"] == [] and broken["from"] == str(folder / "broken.jsonl")
    deep = json.loads(rejected["deep.jsonl"].report.read_text())
    assert deep["error_type"] == "DataQualityError" and "depth_in_range" in deep["error"]
    assert [f["expectation"] for f in deep["gx_failures"]] == ["artifacts.depth_in_range"]
    assert rejected["deep.jsonl"].reason == "DataQualityError: failed artifacts.depth_in_range"


def test_a_rejected_file_is_not_recorded_and_a_second_reject_of_the_same_name_keeps_both(tmp_path):
    folder, data = tmp_path / "incoming", tmp_path / "data"
    folder.mkdir()
    _desk(folder / "good.jsonl")
    (folder / "bad.jsonl").write_text("not json\n")
    found = stages.find_new_traces(folder, data_dir=data)
    artifacts = stages.ingest_stage(found, out_dir=tmp_path / "run")
    stages.record_ingested(pipeline._accepted(found, artifacts), data_dir=data, run_id="r1")
    (folder / "bad.jsonl").write_text("still not json\n")  # the same name again, other bytes

    again = stages.find_new_traces(folder, data_dir=data)
    assert [p.name for p in again.new] == ["bad.jsonl"]  # the good one was recorded, the bad one not
    second = stages.ingest_stage(again, out_dir=tmp_path / "run2")
    assert [r.moved_to.name for r in second.rejected] == ["bad.1.jsonl"]
    assert sorted(p.name for p in (tmp_path / "rejected").iterdir()) == [
        "bad.1.jsonl", "bad.1.jsonl.rejected.json", "bad.jsonl", "bad.jsonl.rejected.json"]


def test_a_night_whose_every_new_file_is_rejected_ends_completed_with_nothing_valid(tmp_path):
    folder, data = tmp_path / "incoming", tmp_path / "data"
    folder.mkdir()
    _too_deep(folder / "deep.jsonl")
    config = config_from_dict({"data_dir": str(data)})

    result = pipeline.run_pipeline(config, traces_dir=folder, run_dir=tmp_path / "night")

    assert result.status == "nothing-valid" and result.run_id is None and result.registered is None
    assert "nothing valid" in result.message and "deep.jsonl: DataQualityError: failed artifacts.depth_in_range" in result.message
    assert (tmp_path / "rejected" / "deep.jsonl").is_file() and not (folder / "deep.jsonl").exists()
    assert not (data / "ingest" / "ingested.json").exists()
