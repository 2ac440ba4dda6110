"""The nightly's trace folder: which files a night reads, and what happens to a file that fails
ingest or the artifact suite (moved to ``rejected/`` beside the folder with a report; the night goes
on with the rest, or ends Completed with "nothing valid"), and the retention window (``pipeline.window_days`` /
``pipeline.max_files``: the newest files by modification time)."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime

import pandas as pd
import pytest

from orchrm.config import config_from_dict
from orchrm.data.ingest import ingest_traces
from orchrm.data.tables import read_table, write_table
from orchrm.errors import ConfigError
from orchrm.execution.support_desk import make_traces
from orchrm.ops import ledger, pipeline, stages


def _config(data, **pipeline_section):
    """A config whose data (and local MLflow store, which keeps the ledger) is ``data``."""
    return config_from_dict({"data_dir": str(data), "pipeline": pipeline_section})


def _recorded(traces, config):
    """Record ``traces`` as trained on by a new parent run, as a run that registered a version does."""
    from orchrm.ops import tracking

    stages.record_ingested(traces, config=config, run_id=tracking.start_run(config, "pipeline"))


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
    found = stages.find_new_traces(folder, config=_config(tmp_path / "data"))
    assert [p.name for p in found.files] == ["monday.jsonl", "tuesday.parquet"]
    assert [p.name for p in found.new] == ["monday.jsonl", "tuesday.parquet"]


def test_a_malformed_file_is_moved_to_rejected_with_a_report_and_the_rest_is_ingested(tmp_path):
    folder, data = tmp_path / "incoming", tmp_path / "data"
    folder.mkdir()
    good = _desk(folder / "good.jsonl")
    (folder / "broken.jsonl").write_text('{"task_id": "t"}\nnot json\n')
    _too_deep(folder / "deep.jsonl")
    found = stages.find_new_traces(folder, config=_config(data))

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
    config = _config(data)
    found = stages.find_new_traces(folder, config=config)
    artifacts = stages.ingest_stage(found, out_dir=tmp_path / "run")
    _recorded(pipeline._accepted(found, artifacts), config)
    (folder / "bad.jsonl").write_text("still not json\n")  # the same name again, other bytes

    again = stages.find_new_traces(folder, config=config)
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
    assert ledger.seen_digests(config) == frozenset()  # nothing recorded


def _aged(folder, name, days_old, *, now):
    path = folder / name
    path.write_text(json.dumps({"file": name}) + "\n")
    stamp = now.timestamp() - days_old * 86400
    os.utime(path, (stamp, stamp))
    return path


NOW = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)


def test_the_retention_window_keeps_the_newest_files_by_modification_time(tmp_path):
    folder, data = tmp_path / "incoming", tmp_path / "data"
    folder.mkdir()
    # names sort the other way round from ages: the window must follow the modification time
    for name, age in [("a.jsonl", 1), ("b.jsonl", 3), ("c.parquet", 10), ("d.jsonl", 40)]:
        _aged(folder, name, age, now=NOW)

    by_age = stages.find_new_traces(folder, config=_config(data, window_days=7), now=NOW)
    assert [p.name for p in by_age.files] == ["a.jsonl", "b.jsonl"]
    assert [p.name for p in by_age.outside] == ["c.parquet", "d.jsonl"]
    assert set(by_age.digests) == {str(p) for p in by_age.files}

    by_count = stages.find_new_traces(folder, config=_config(data, max_files=3), now=NOW)
    assert [p.name for p in by_count.files] == ["a.jsonl", "b.jsonl", "c.parquet"]
    both = stages.find_new_traces(folder, config=_config(data, window_days=30, max_files=1), now=NOW)
    assert [p.name for p in both.files] == ["a.jsonl"] and len(both.outside) == 3
    everything = stages.find_new_traces(folder, config=_config(data), now=NOW)
    assert len(everything.files) == 4 and everything.outside == ()


def test_the_ledger_still_decides_what_is_new_inside_the_window(tmp_path):
    folder, data = tmp_path / "incoming", tmp_path / "data"
    folder.mkdir()
    _aged(folder, "old.jsonl", 20, now=NOW)
    _aged(folder, "monday.jsonl", 2, now=NOW)
    config = _config(data, window_days=7)
    night1 = stages.find_new_traces(folder, config=config, now=NOW)
    assert [p.name for p in night1.new] == ["monday.jsonl"]  # the old file is neither read nor new
    _recorded(night1, config)

    night2 = stages.find_new_traces(folder, config=config, now=NOW)
    assert [p.name for p in night2.files] == ["monday.jsonl"] and night2.new == ()
    _aged(folder, "tuesday.jsonl", 1, now=NOW)
    night3 = stages.find_new_traces(folder, config=config, now=NOW)
    assert [p.name for p in night3.files] == ["monday.jsonl", "tuesday.jsonl"]
    assert [p.name for p in night3.new] == ["tuesday.jsonl"]


def test_a_night_trains_on_the_window_and_ends_early_when_nothing_in_it_is_new(tmp_path):
    folder, data = tmp_path / "incoming", tmp_path / "data"
    folder.mkdir()
    old = _desk(folder / "old.jsonl", seed=1)
    os.utime(old, (time.time() - 30 * 86400,) * 2)
    config = config_from_dict({"data_dir": str(data), "pipeline": {"window_days": 7}})

    result = pipeline.run_pipeline(config, traces_dir=folder, run_dir=tmp_path / "night")
    assert result.status == "no-new-traces" and result.run_id is None
    assert "0 file(s)" in result.message and "1 older file(s) outside the retention window" in result.message

    # inside the window, the ingest stage reads only the window's files
    _desk(folder / "new.jsonl", seed=2)
    found = stages.find_new_traces(folder, config=config)
    artifacts = stages.ingest_stage(found, out_dir=tmp_path / "run")
    assert artifacts.sources == (folder / "new.jsonl",)
    assert set(read_table(artifacts.path).task_id) == set(make_traces(2, seed=2, runs=1).task_id)


def test_the_window_settings_are_validated():
    assert config_from_dict({"pipeline": {"window_days": 14, "max_files": 30}}).pipeline.max_files == 30
    with pytest.raises(ConfigError, match=r"pipeline\.window_days"):
        config_from_dict({"pipeline": {"window_days": 0}})
    with pytest.raises(ConfigError, match=r"pipeline\.max_files"):
        config_from_dict({"pipeline": {"max_files": 0}})
