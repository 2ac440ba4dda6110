"""Great Expectations gates (expectations/*.json): every expectation fires on a crafted bad table and
passes on a good one; the gate refuses leaks, self-pairs and NaN margins naming expectation and rows."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from orchrm.cli import main
from orchrm.data.tables import write_table
from orchrm.data.validation import (
    derive_pair_columns,
    load_suite,
    read_suite_file,
    run_expectations,
    validate_artifacts,
    validate_files,
    validate_pairs,
)
from orchrm.errors import ConfigError, DataQualityError
from tests.fixtures.tables import make_artifacts, make_pairs


@pytest.fixture(scope="module")
def artifacts() -> pd.DataFrame:
    return make_artifacts(n_tasks=8, plans_per_task=5, seed=0)


@pytest.fixture(scope="module")
def pairs() -> pd.DataFrame:
    p = make_pairs(n_tasks=16, plans_per_task=5, seed=0)
    assert p["split"].nunique() > 1, "the fixture needs tasks in several splits"
    return p


def _set(column: str, value, row: int = 0) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def mutate(df: pd.DataFrame) -> pd.DataFrame:
        out = df.copy()
        out[column] = out[column].astype(object)
        out.at[row, column] = value
        return out

    return mutate


def _all(column: str, value) -> Callable[[pd.DataFrame], pd.DataFrame]:
    return lambda df: df.assign(**{column: value})


def _dup_row(df: pd.DataFrame, id_column: str) -> pd.DataFrame:
    extra = df.iloc[[0]].copy()
    extra[id_column] = "copy-of-row-0"
    return pd.concat([df, extra], ignore_index=True)


def _second_final(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    out.at[int(np.flatnonzero(~out["is_final"].to_numpy())[0]), "is_final"] = True
    return out


def _cross_task(df: pd.DataFrame) -> pd.DataFrame:
    # row 0's rejected artifact is replaced by an artifact that other pairs tie to another task
    out = df.copy()
    foreign = out.loc[out["task_id"] != out.at[0, "task_id"], "rejected_artifact_id"].iloc[0]
    out.at[0, "rejected_artifact_id"] = foreign
    return out


def _longer_always_wins(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(chosen=df["chosen"] + " " + df["rejected"].str.len().map(lambda n: "+" * n))


def _flip_split(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    out.at[0, "split"] = "test" if out.at[0, "split"] != "test" else "train"
    return out


#: expectation name -> how to break a good artifact table so that it fires
ARTIFACT_CASES: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {
    "required_columns": lambda df: df.drop(columns=["cost"]),
    "row_count_positive": lambda df: df.iloc[0:0],
    "artifact_id_not_null": _set("artifact_id", None),
    "artifact_id_unique": lambda df: _set("artifact_id", df.at[1, "artifact_id"])(df),
    "task_id_not_null": _set("task_id", None),
    "plan_id_not_null": _set("plan_id", None),
    "node_id_not_null": _set("node_id", None),
    "domain_not_null": _set("domain", None),
    "plan_text_not_null": _set("plan_text", None),
    "question_not_null": _set("question", None),  # the blank check skips nulls
    "question_not_blank": _set("question", "   "),
    "question_is_text": _set("question", ["What", "?"]),  # a list reads as text to the blank check
    "one_question_per_task": _set("question", "a different question under the same task_id"),
    "content_not_null": _set("content", None),
    "content_not_blank": _set("content", " \n\t"),
    "content_is_text": _set("content", 123),
    "content_length_bounded": _set("content", "x" * 100_001),
    "prompt_tokens_not_null": _set("prompt_tokens", np.nan),  # range checks skip nulls
    "completion_tokens_not_null": _set("completion_tokens", None),
    "cost_not_null": _set("cost", np.nan),
    "depth_not_null": _set("depth", np.nan),
    "is_final_not_null": _set("is_final", None),
    "prompt_tokens_nonnegative": _set("prompt_tokens", -1),
    "completion_tokens_nonnegative": _set("completion_tokens", -3),
    "prompt_tokens_bounded": _set("prompt_tokens", 10**6),
    "completion_tokens_bounded": _set("completion_tokens", 10**6),
    "cost_nonnegative": _set("cost", -1.0),
    "quality_in_unit_interval": _set("quality", 1.5),
    "quality_mostly_known": _all("quality", np.nan),
    "depth_in_range": _set("depth", -1),
    "is_final_boolean": _set("is_final", "yes"),
    "one_final_per_execution": _second_final,
    "node_once_per_execution": lambda df: _dup_row(df, "artifact_id"),
    "parse_failed_boolean": _set("parse_failed", "no"),
    "parse_failure_has_no_answer": lambda df: _set("parse_failed", True, int(df["answer"].notna().to_numpy().argmax()))(df),
    "parse_failures_few": lambda df: df.assign(parse_failed=True, answer=None),
}

#: expectation name -> how to break a good pair table so that it fires
PAIR_CASES: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {
    "required_columns": lambda df: df.drop(columns=["collection_tokens"]),
    "row_count_positive": lambda df: df.iloc[0:0],
    "pair_id_not_null": _set("pair_id", None),
    "pair_id_unique": lambda df: _set("pair_id", df.at[1, "pair_id"])(df),
    "task_id_not_null": _set("task_id", None),
    "domain_not_null": _set("domain", None),
    "chosen_artifact_id_not_null": _set("chosen_artifact_id", None),
    "rejected_artifact_id_not_null": _set("rejected_artifact_id", None),
    "granularity_not_null": _set("granularity", None),  # the set check skips nulls
    "granularity_known": _set("granularity", "trajectory"),
    "source_not_null": _set("source", None),
    "split_not_null": _set("split", None),
    "split_known": _set("split", "holdout"),
    "no_task_in_two_splits": _flip_split,
    "pair_within_one_task": _cross_task,
    "chosen_differs_from_rejected": lambda df: _set("rejected", df.at[0, "chosen"])(df),
    "margin_not_null": _set("margin", np.nan),
    "margin_positive": _set("margin", 0.0),
    "prompt_not_null": _set("prompt", None),
    "prompt_not_blank": _set("prompt", "  "),
    "prompt_is_text": _set("prompt", [{"role": "user", "content": "q"}]),
    "chosen_not_null": _set("chosen", None),
    "chosen_not_blank": _set("chosen", "\n"),
    "chosen_is_text": _set("chosen", 5),
    "rejected_not_null": _set("rejected", None),
    "rejected_not_blank": _set("rejected", " "),
    "rejected_is_text": _set("rejected", 2.5),
    "prompt_length_bounded": _set("prompt", "q" * 40_001),
    "chosen_length_bounded": _set("chosen", "c" * 40_001),
    "rejected_length_bounded": _set("rejected", "r" * 40_001),
    "collection_tokens_not_null": _set("collection_tokens", np.nan),
    "collection_tokens_nonnegative": _set("collection_tokens", -5),
    "collection_tokens_bounded": _set("collection_tokens", 10**8),
    "pairs_unique": lambda df: _dup_row(df, "pair_id"),
    "length_bias_bounded": lambda df: _longer_always_wins(df),
}

CASES = {"artifacts": ARTIFACT_CASES, "pairs": PAIR_CASES}


# the suites -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("suite", ["artifacts", "pairs"])
def test_suite_loads_every_expectation_in_the_file(suite):
    spec = read_suite_file(suite)
    loaded = load_suite(suite)
    assert len(loaded.expectations) == len(spec["expectations"])
    for exp in spec["expectations"]:
        assert exp["severity"] in ("critical", "warning"), exp["meta"]["name"]
        assert len(exp["notes"]) > 20, f"{exp['meta']['name']}: the intent note says why"
    assert spec["meta"]["orchrm_suite_version"]
    derived = {e["kwargs"].get("column") for e in spec["expectations"]} - {None}
    assert {c for c in derived if c.startswith("dq_")} == set(spec["meta"]["derived_columns"])


@pytest.mark.parametrize("suite", ["artifacts", "pairs"])
def test_every_expectation_has_a_crafted_bad_table(suite):
    names = {e["meta"]["name"] for e in read_suite_file(suite)["expectations"]}
    assert names == set(CASES[suite])


def test_a_suite_that_gx_would_silently_shrink_is_refused(tmp_path):
    spec = read_suite_file("pairs")
    spec["expectations"].append(
        {"type": "expect_column_values_to_be_sparkly", "kwargs": {"column": "margin"}, "severity": "critical",
         "meta": {"name": "margin_sparkly"}, "notes": "an expectation type GX does not know"}
    )
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(ConfigError, match=r"loaded 35 of 36 expectations.*margin_sparkly.*not found"):
        load_suite(str(path))
    spec["expectations"][-1]["meta"] = {}
    path.write_text(json.dumps(spec))
    with pytest.raises(ConfigError, match="needs meta.name and an intent note"):
        load_suite(str(path))


# each expectation fires on its bad table and passes on the good one -------------------------------
@pytest.fixture(scope="module")
def good_outcomes(artifacts, pairs) -> dict[str, dict[str, bool]]:
    return {
        suite: {o.name: o.success for o in run_expectations(suite, frame)}
        for suite, frame in (("artifacts", artifacts), ("pairs", pairs))
    }


@pytest.mark.parametrize(
    ("suite", "name"), [(s, n) for s, cases in CASES.items() for n in cases], ids=lambda v: v
)
def test_expectation_fires_on_bad_table_and_passes_on_good(suite, name, artifacts, pairs, good_outcomes):
    good = artifacts if suite == "artifacts" else pairs
    assert good_outcomes[suite][name], f"{suite}.{name} fails on the good table"
    (outcome,) = run_expectations(suite, CASES[suite][name](good), [name])
    assert outcome.name == name
    assert not outcome.success, f"{suite}.{name} did not fire on its bad table"


def test_an_infinite_cost_is_not_a_cost(artifacts):
    (outcome,) = run_expectations("artifacts", _set("cost", np.inf)(artifacts), ["cost_nonnegative"])
    assert not outcome.success


# the gate -------------------------------------------------------------------------------------------
def test_good_tables_pass_and_leave_results_and_data_docs(artifacts, pairs, tmp_path):
    report = validate_files(
        artifacts=write_table(artifacts, tmp_path / "a.parquet"),
        pairs=write_table(pairs, tmp_path / "p.parquet"),
        out_dir=tmp_path / "run",
    )
    assert report.success and not report.warnings
    assert report.rows == {"artifacts": len(artifacts), "pairs": len(pairs)}
    results = json.loads((tmp_path / "run" / "pairs.results.json").read_text())
    assert results["success"] is True and len(results["results"]) == len(read_suite_file("pairs")["expectations"])
    assert (tmp_path / "run" / "artifacts.results.json").exists()
    index = (tmp_path / "run" / "data_docs" / "index.html").read_text()
    assert "orchrm.pairs" in index and "orchrm.artifacts" in index
    assert "passed" in str(report)


@pytest.mark.parametrize(
    ("name", "break_table", "rows"),
    [
        ("no_task_in_two_splits", _flip_split, r'"row": 0, "pair_id"'),
        ("chosen_differs_from_rejected", lambda df: _set("rejected", df.at[3, "chosen"], row=3)(df), r'"row": 3, "pair_id"'),
        ("margin_not_null", _set("margin", np.nan, row=5), r'"row": 5, "pair_id".*"margin": null'),
    ],
)
def test_gate_refuses_leaks_self_pairs_and_nan_margins(name, break_table, rows, pairs, tmp_path):
    bad = break_table(pairs)
    with pytest.raises(DataQualityError, match=rf"pairs\.{name} \[critical\][\s\S]*why: [\s\S]*{rows}"):
        validate_pairs(bad, out_dir=tmp_path)
    # the results and Data Docs are written either way
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert f"pairs.{name}" in summary["failures"] and summary["success"] is False
    assert (tmp_path / "data_docs" / "index.html").exists()


def test_artifact_gate_refuses_bad_quality_and_names_the_artifact(artifacts, tmp_path):
    bad = _set("quality", 1.7, row=4)(artifacts)
    with pytest.raises(DataQualityError, match=rf'artifacts\.quality_in_unit_interval[\s\S]*"row": 4, "artifact_id": "{bad.at[4, "artifact_id"]}"'):
        validate_artifacts(bad, out_dir=tmp_path)
    assert (tmp_path / "artifacts.results.json").exists()


def test_pair_crossing_tasks_is_caught_against_the_artifact_table(artifacts):
    from orchrm.data.pairs import build_pairs

    pairs = build_pairs(artifacts)
    bad = pairs.copy()
    in_pairs = set(pairs["chosen_artifact_id"]) | set(pairs["rejected_artifact_id"])
    elsewhere = artifacts[(artifacts["task_id"] != bad.at[0, "task_id"]) & ~artifacts["artifact_id"].isin(in_pairs)]
    other_task = elsewhere["artifact_id"].iloc[0]
    bad.at[0, "chosen_artifact_id"] = other_task  # appears nowhere else in the pair table
    assert derive_pair_columns(bad)["dq_artifact_task_count"].max() == 1  # invisible without artifacts
    (outcome,) = run_expectations("pairs", bad, ["pair_within_one_task"], artifacts=artifacts)
    assert not outcome.success and outcome.examples[0]["chosen_artifact_id"] == other_task
    (outcome,) = run_expectations("pairs", pairs, ["pair_within_one_task"], artifacts=artifacts)
    assert outcome.success


def test_warnings_are_reported_not_raised(pairs, tmp_path):
    biased = _longer_always_wins(pairs)
    report = validate_pairs(biased, out_dir=tmp_path)  # does not raise
    assert report.success
    assert [o.name for o in report.warnings] == ["length_bias_bounded"]
    assert report.warnings[0].observed == pytest.approx(1.0)
    assert "length_bias_bounded [warning]" in str(report)


def test_validate_files_reads_the_orchrm_dataset_format(tmp_path):
    rows = [
        {"input": "What is 2 + 2?", "chosen": '<agent id="a1" type="CoT" model="large"/>',
         "rejected": '<agent id="a1" type="CoT" model="small"/>', "source": "correct-over-incorrect"},
        {"input": "What is 3 + 3?", "chosen": '<agent id="a1" type="CoT" model="small"/>',
         "rejected": '<agent id="a1" type="CoT" model="large"/>', "source": "specialized-over-base"},
    ]
    path = tmp_path / "orchrm.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    report = validate_files(pairs=path, out_dir=tmp_path / "run")
    assert report.success and report.rows == {"pairs": 2}


# the CLI --------------------------------------------------------------------------------------------
def test_cli_validate_exit_codes(artifacts, pairs, tmp_path, capsys):
    a = write_table(artifacts, tmp_path / "a.parquet")
    assert main(["validate", "--artifacts", str(a), "--out-dir", str(tmp_path / "ok")]) == 0
    assert "artifacts: passed" in capsys.readouterr().out
    # two defects: every failed expectation is listed, with rows, and the exit code is non-zero
    p = write_table(_set("margin", np.nan, row=2)(_flip_split(pairs)), tmp_path / "p.jsonl")
    assert main(["validate", "--pairs", str(p), "--out-dir", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "2 critical expectation(s) failed" in err
    assert "pairs.no_task_in_two_splits" in err and '"row": 0' in err
    assert "pairs.margin_not_null" in err and '"row": 2' in err
    assert str(tmp_path / "bad") in err and (tmp_path / "bad" / "pairs.results.json").exists()


def test_lists_where_text_belongs_are_named_not_a_crash(artifacts, pairs, tmp_path, capsys):
    """JSON traces can hold a message list where text belongs: the derived columns group on it."""
    a = tmp_path / "a.jsonl"
    a.write_text(_set("question", ["What", "?"], row=1)(artifacts).to_json(orient="records", lines=True, date_format="iso"))
    assert main(["validate", "--artifacts", str(a), "--out-dir", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "artifacts.question_is_text" in err and '"row": 1' in err and "Traceback" not in err
    p = tmp_path / "p.jsonl"
    p.write_text(_set("task_id", ["t", 1], row=0)(_set("split", ["train"], row=2)(pairs)).to_json(orient="records", lines=True))
    assert main(["validate", "--pairs", str(p), "--out-dir", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "pairs.split_known" in err and "Traceback" not in err


def test_gx_analytics_are_off_before_gx_is_imported(tmp_path):
    """GX reads GX_ANALYTICS_ENABLED when it is imported: the switch must come first."""
    import subprocess
    import sys

    probe = (
        "import os, sys, importlib.abc\n"
        "seen = []\n"
        "class Watch(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'great_expectations' and not seen:\n"
        "            seen.append(os.environ.get('GX_ANALYTICS_ENABLED'))\n"
        "sys.meta_path.insert(0, Watch())\n"
        "os.environ.pop('GX_ANALYTICS_ENABLED', None)\n"
        "from orchrm.data.validation import run_expectations\n"
        "from tests.fixtures.tables import make_pairs\n"
        "run_expectations('pairs', make_pairs(n_tasks=2, plans_per_task=3, seed=0))\n"
        "print(seen)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=str(tmp_path.cwd()))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['false']"


def test_raw_traces_are_sent_to_ingest_and_a_bare_validate_is_a_usage_error(tmp_path, capsys):
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps({"task_id": "t1", "question": "q?", "plan_text": "p", "content": "c", "quality": 1.0}) + "\n")
    assert main(["validate", "--artifacts", str(traces), "--out-dir", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err
    assert "looks like raw traces, not an artifact table" in err and f"orchrm ingest --traces {traces}" in err
    with pytest.raises(SystemExit) as info:
        main(["validate"])
    assert info.value.code == 2 and "error: give --artifacts and/or --pairs" in capsys.readouterr().err


def test_a_table_written_before_parse_failed_existed_still_passes(artifacts):
    older = artifacts.drop(columns=["parse_failed"])
    outcomes = {o.name: o.success for o in run_expectations("artifacts", older)}
    assert outcomes["required_columns"] and outcomes["parse_failed_boolean"] and outcomes["parse_failure_has_no_answer"]
    validate_artifacts(older)  # no DataQualityError
