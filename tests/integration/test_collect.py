"""`orchrm collect` end to end on the sandbox: the artifact table and its invariants."""

import os
import subprocess
import sys

import pandas as pd
import pytest

from orchrm.config import CollectConfig
from orchrm.data.tables import ARTIFACT_COLUMNS, read_table
from orchrm.errors import ConfigError, TaskError
from orchrm.execution.collect import collect
from orchrm.execution.sandbox.engine import RESULTS_MARKER
from orchrm.execution.sandbox.noise import NoiseConfig, TierConfig
from orchrm.execution.tasks import load_tasks
from orchrm.plans import Plan
from orchrm.util.tokens import count_tokens

pytestmark = pytest.mark.integration


def check_artifact_table(df: pd.DataFrame, *, tasks_per_domain: int, plans: int, repeats: int = 1,
                         domains=("math", "code", "multihop", "webqa")) -> None:
    assert list(df.columns) == list(ARTIFACT_COLUMNS)
    assert df.artifact_id.is_unique
    assert set(df.domain) == set(domains)
    assert df.groupby("domain").task_id.nunique().eq(tasks_per_domain).all()
    finals = df[df.is_final]
    # every execution of a plan (``repeats`` of them, each its own run) has exactly one final
    # artifact, and every task has `plans` distinct plans
    assert finals.groupby(["task_id", "plan_id"]).size().eq(repeats).all()
    assert finals.groupby(["task_id", "plan_id"]).run_id.nunique().eq(repeats).all()
    assert finals.groupby("task_id").plan_id.nunique().eq(plans).all()
    assert (df.prompt_tokens > 0).all() and (df.completion_tokens > 0).all()
    for row in df.itertuples():
        produced = row.content.split(RESULTS_MARKER)[0] if row.agent == "WebSearch" else row.content
        assert row.completion_tokens == count_tokens(produced)
    # every row's plan text parses and names the node that produced it
    plans_seen = {t: Plan.parse(t) for t in df.plan_text.unique()}
    for row in df[["plan_text", "plan_id", "node_id", "agent", "depth"]].itertuples():
        plan = plans_seen[row.plan_text]
        assert plan.plan_id == row.plan_id
        assert plan.node(row.node_id).agent == row.agent
        assert plan.depths()[row.node_id] == row.depth
    # quality is known for every final artifact of the built-in domains, and in [0, 1]
    assert finals.quality.notna().all()
    assert df.quality.dropna().between(0, 1).all()
    assert set(df.orchestrator) == {"base", "specialized"}


def test_cli_collect_writes_the_artifact_table(tmp_path):
    out = tmp_path / "artifacts.parquet"
    proc = subprocess.run(
        [sys.executable, "-m", "orchrm.cli", "collect", "--domain", "all", "--tasks", "3", "--plans", "8", "--seed", "0", "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and "multihop" in proc.stdout
    check_artifact_table(read_table(out), tasks_per_domain=3, plans=8, repeats=CollectConfig().repeats)  # the built-in 3


def test_cli_collect_takes_sizes_from_the_config_and_checks_source(tmp_path):
    (tmp_path / "small.yaml").write_text("collect: {tasks_per_domain: 2, plans_per_task: 3, seed: 5}\n")
    out = tmp_path / "artifacts.parquet"
    argv = [sys.executable, "-m", "orchrm.cli", "collect", "--domain", "math", "--out", str(out), "--quiet", "--workers", "1"]
    proc = subprocess.run([*argv, "--config", str(tmp_path / "small.yaml")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    df = read_table(out)
    finals = df[df["is_final"]]
    assert finals["task_id"].nunique() == 2 and finals.groupby("task_id")["plan_id"].nunique().max() <= 3
    proc = subprocess.run([*argv, "--source", "math:builtin,webqa"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "DOMAIN:NAME" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([*argv, "--seed", "-1"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "must be at least 0, got -1" in proc.stderr
    proc = subprocess.run([*argv, "--source", "maths:gsm8k"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "unknown domain(s) 'maths'" in proc.stderr


def test_cli_collect_refuses_an_output_it_cannot_write_before_collecting(tmp_path, capsys):
    from orchrm.cli import main

    (tmp_path / "afile").write_text("x")
    for out, message in ((tmp_path / "afile" / "a.parquet", "afile is a file, not a folder"),
                         (tmp_path / "a.csv", "use a .parquet or .jsonl file name"),
                         (tmp_path, "is a folder; give a file name")):
        assert main(["collect", "--domain", "math", "--tasks", "1", "--plans", "2", "--workers", "1", "--out", str(out)]) == 2
        captured = capsys.readouterr()
        assert message in captured.err and "Traceback" not in captured.err
        assert captured.out == ""  # nothing was collected: no summary, no progress


def test_collection_is_deterministic_whatever_the_workers():
    a = collect(domains=["math", "webqa"], tasks_per_domain=4, plans_per_task=4, seed=11, workers=1, progress=False)
    b = collect(domains=["math", "webqa"], tasks_per_domain=4, plans_per_task=4, seed=11, workers=2, progress=False)
    pd.testing.assert_frame_equal(a.drop(columns="created_at"), b.drop(columns="created_at"))
    c = collect(domains=["math", "webqa"], tasks_per_domain=4, plans_per_task=4, seed=12, workers=1, progress=False)
    assert set(c.artifact_id).isdisjoint(a.artifact_id)


def test_a_task_given_twice_is_refused():
    task = load_tasks("math", 1, seed=0)[0]
    with pytest.raises(TaskError, match=rf"task id\(s\) '{task.task_id}' given more than once: .* pass each task once"):
        collect(tasks=[task, task], plans_per_task=2, seed=0, workers=1, progress=False)


def test_the_noise_config_is_part_of_the_run_and_artifact_ids():
    kwargs = dict(domains=["math"], tasks_per_domain=2, plans_per_task=2, seed=0, workers=1, progress=False)
    default = collect(**kwargs)
    # the default config named explicitly is the same run
    explicit = collect(noise=NoiseConfig(), **kwargs)
    pd.testing.assert_frame_equal(default.drop(columns="created_at"), explicit.drop(columns="created_at"))
    # another config costs differently, so it is another run with other artifact ids
    pricey = NoiseConfig(tiers={"small": TierConfig(cost_weight=1.0, skill=1.0), "large": TierConfig(cost_weight=20.0, skill=0.1)})
    other = collect(noise=pricey, **kwargs)
    assert other.run_id.nunique() == 1 and other.run_id.iloc[0] != default.run_id.iloc[0]
    assert set(other.artifact_id).isdisjoint(default.artifact_id)


def test_repeats_execute_every_plan_again_as_runs_of_their_own_and_the_first_is_the_single_collection():
    kwargs = dict(domains=["math", "code"], tasks_per_domain=3, plans_per_task=3, seed=4, workers=1, progress=False)
    once = collect(**kwargs)
    thrice = collect(repeats=3, **kwargs)
    base = once.run_id.iloc[0]
    assert sorted(thrice.run_id.unique()) == sorted([base, f"{base}-r1", f"{base}-r2"])
    assert thrice.artifact_id.is_unique
    finals = thrice[thrice.is_final]
    assert finals.groupby(["task_id", "plan_id"]).run_id.nunique().eq(3).all()
    first = thrice[thrice.run_id == base].reset_index(drop=True)
    pd.testing.assert_frame_equal(first.drop(columns="created_at"), once.drop(columns="created_at"))
    # the re-executions are independent draws, not copies
    assert not thrice.groupby(["task_id", "plan_id", "node_id"]).content.nunique().eq(1).all()


def test_plan_pairs_from_repeated_runs_compare_mean_qualities():
    from orchrm.config import PairsConfig
    from orchrm.data.pairs import build_pairs

    artifacts = collect(domains=["math"], tasks_per_domain=4, plans_per_task=4, seed=5, repeats=3, workers=1, progress=False)
    mean = artifacts[artifacts.is_final].groupby(["task_id", "plan_text"]).quality.mean()
    config = PairsConfig(granularity=("plan",), sources=("correct-over-incorrect",), max_pairs_per_task=None)
    pairs = build_pairs(artifacts, config)
    assert len(pairs) > 0
    for p in pairs.itertuples():
        assert p.margin == pytest.approx(mean[(p.task_id, p.chosen)] - mean[(p.task_id, p.rejected)])


def test_collect_from_config_runs_every_setting_of_the_config():
    from orchrm.config import CollectConfig
    from orchrm.execution.collect import collect_from_config

    cfg = CollectConfig(domains=("math",), tasks_per_domain=2, plans_per_task=3, seed=9, repeats=2, workers=1)
    direct = collect(domains=["math"], tasks_per_domain=2, plans_per_task=3, seed=9, repeats=2, workers=1, progress=False)
    pd.testing.assert_frame_equal(collect_from_config(cfg, progress=False).drop(columns="created_at"),
                                  direct.drop(columns="created_at"))


@pytest.mark.parametrize("settings", [
    {"tasks_per_domain": 5, "plans_per_task": 3, "chunk_tasks": 2},
    {"tasks_per_domain": 3, "plans_per_task": 2, "repeats": 2, "chunk_tasks": 16},
    {"tasks_per_domain": 3, "mode": "branch", "branches": 3, "branch_depth": 1, "chunk_tasks": 1},
], ids=["chunks-of-2", "repeats-one-chunk-per-domain", "branch-mode-chunks-of-1"])
def test_the_collection_in_chunks_is_the_collection(settings):
    """What the flows map over chunks (plan, one chunk per call, its rows as JSON data, combine)
    gives the table of the collection in one call: the same rows, ids and order."""
    import json
    from dataclasses import asdict

    from orchrm.config import CollectConfig
    from orchrm.execution.collect import (
        ChunkRows,
        collect_chunk,
        collect_from_config,
        combine_collection,
        plan_collection,
    )

    cfg = CollectConfig(domains=("math", "code", "webqa"), seed=3, workers=1, **settings)
    whole = collect_from_config(cfg, progress=False)
    plan = plan_collection(cfg)
    assert [c.domain for c in plan.chunks] == sorted((c.domain for c in plan.chunks), key=cfg.domains.index)
    assert plan.tasks == 3 * cfg.tasks_per_domain and max(len(c.task_ids) for c in plan.chunks) <= cfg.chunk_tasks
    # each chunk as a worker hands it back: JSON, no path; in any order
    shipped = [ChunkRows(**json.loads(json.dumps(asdict(collect_chunk(c, cfg, run_id=plan.run_id))))) for c in reversed(plan.chunks)]
    combined = combine_collection(plan, shipped)
    pd.testing.assert_frame_equal(combined.drop(columns="created_at"), whole.drop(columns="created_at"))
    assert combined.created_at.nunique() == 1 and combined.created_at.dtype == whole.created_at.dtype
    assert combined.run_id.iloc[0] == plan.run_id


def test_chunks_never_mix_domains_and_are_near_equal():
    from orchrm.execution.collect import chunk_tasks, even_parts
    from orchrm.execution.tasks.base import Task

    assert even_parts(10, 4) == [4, 3, 3] and even_parts(8, 4) == [4, 4] and even_parts(3, 16) == [3] and even_parts(0, 4) == []
    tasks = [Task(f"m{i}", "math", "q") for i in range(5)] + [Task("c0", "code", "q")]
    assert [(c.index, c.domain, c.task_ids) for c in chunk_tasks(tasks, 2)] == [
        (0, "math", ("m0", "m1")), (1, "math", ("m2", "m3")), (2, "math", ("m4",)), (3, "code", ("c0",))]
    with pytest.raises(ConfigError, match="at least one task"):
        chunk_tasks(tasks, 0)


def test_a_chunk_whose_tasks_this_process_does_not_load_says_so():
    from orchrm.config import CollectConfig
    from orchrm.errors import CollectionError
    from orchrm.execution.collect import TaskChunk, collect_chunk

    cfg = CollectConfig(domains=("math",), tasks_per_domain=2, workers=1)
    with pytest.raises(CollectionError, match=r"task\(s\) 'not-a-task' are not among the tasks .* same version of orchrm and the same data sets"):
        collect_chunk(TaskChunk(0, "math", ("not-a-task",)), cfg, run_id="r")


def test_repeats_must_be_a_whole_number_at_least_one():
    with pytest.raises(ConfigError, match="repeats must be a whole number >= 1"):
        collect(domains=["math"], tasks_per_domain=1, plans_per_task=2, repeats=0, workers=1, progress=False)


def test_prefix_collection_spends_fewer_tokens():
    full = collect(domains=["multihop"], tasks_per_domain=3, plans_per_task=6, seed=2, workers=1, progress=False)
    prefix = collect(domains=["multihop"], tasks_per_domain=3, plans_per_task=6, seed=2, workers=1, progress=False, stop_after_depth=0)
    assert (prefix.depth == 0).all()
    assert (prefix.prompt_tokens + prefix.completion_tokens).sum() < (full.prompt_tokens + full.completion_tokens).sum()


@pytest.mark.slow
def test_acceptance_size_collection(tmp_path):
    """The issue's acceptance command: 50 tasks per domain, 8 plans each."""
    out = tmp_path / "X.parquet"
    proc = subprocess.run(
        [sys.executable, "-m", "orchrm.cli", "collect", "--domain", "all", "--tasks", "50", "--plans", "8", "--seed", "0", "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr
    check_artifact_table(read_table(out), tasks_per_domain=50, plans=8, repeats=CollectConfig().repeats)


def test_collection_does_not_depend_on_the_hash_seed(tmp_path):
    """Worker processes start with random hash seeds: nothing in a table may depend on it
    (set iteration order, memory addresses in reprs of returned objects)."""
    script = (
        "import sys; from orchrm.execution.collect import collect; "
        "collect(domains=['code', 'multihop', 'webqa'], tasks_per_domain=12, plans_per_task=8, seed=3, workers=1, progress=False)"
        ".drop(columns='created_at').to_parquet(sys.argv[1])"
    )
    frames = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"h{hash_seed}.parquet"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        subprocess.run([sys.executable, "-c", script, str(out)], check=True, env=env, timeout=600)
        frames.append(pd.read_parquet(out))
    pd.testing.assert_frame_equal(frames[0], frames[1])


def test_a_script_without_a_main_guard_is_told_how_to_fix_it(tmp_path):
    """Workers start with 'spawn' and import the calling script again: unguarded, it breaks them."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from orchrm.execution.collect import collect\n"
        "collect(domains=['math'], tasks_per_domain=4, plans_per_task=2, workers=2, progress=False)\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode != 0
    assert "CollectionError: a collection worker process died" in proc.stderr
    assert 'put the call under `if __name__ == "__main__":`' in proc.stderr
