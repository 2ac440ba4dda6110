"""benchmarks.collect_repeatability's comparison of two collections of the same artifacts."""

from __future__ import annotations

import math

import pandas as pd

from benchmarks.collect_repeatability import differences


def artifacts(quality: list[float], content: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"artifact_id": ["a", "b", "c"], "task_id": ["t1", "t1", "t2"], "agent": ["CoT", "Debate", "CoT"],
                         "quality": quality, "content": content})


def pairs(ids: list[str]) -> pd.DataFrame:
    """Pairs named ``<task>:<pair>``."""
    return pd.DataFrame({"pair_id": ids, "task_id": [i.split(":")[0] for i in ids]})


def test_the_same_collection_twice_is_identical_nan_quality_included():
    a = artifacts([1.0, math.nan, 0.0], ["x", "y", "z"])
    found = differences(a, a.copy(), pairs(["t1:p", "t2:q"]), pairs(["t2:q", "t1:p"]))
    assert found["identical"] and found["quality_differs"] == found["content_differs"] == 0
    assert found["tasks_differing"] == [] and found["examples"] == [] and found["pairs_moved_elsewhere"] == 0


def test_a_changed_verdict_names_its_task_its_lines_and_the_pairs_it_moved():
    quiet = artifacts([1.0, 0.5, 0.0], ["x", "ok\nsame", "z"])
    busy = artifacts([1.0, 0.0, 0.0], ["x", "timeout\nsame", "z"])
    found = differences(quiet, busy, pairs(["t1:p", "t1:q", "t2:r", "t2:u"]), pairs(["t1:p", "t1:s", "t2:r", "t2:v"]))
    assert not found["identical"]
    assert (found["quality_differs"], found["content_differs"], found["tasks_differing"]) == (1, 1, ["t1"])
    assert (found["pairs_only_quiet"], found["pairs_only_loaded"]) == (2, 2)
    assert found["pairs_moved_elsewhere"] == 2  # t2's artifacts are the same, its pairs u and v are not
    assert found["examples"] == [{"task_id": "t1", "agent": "Debate", "quality": [0.5, 0.0], "lines": ["- ok", "+ timeout"]}]
