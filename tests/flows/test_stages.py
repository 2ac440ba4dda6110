"""The stage functions the flows wrap, called plainly (no Prefect): the cheap contracts."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import pytest

from orchrm.config import PipelineConfig, config_from_dict
from orchrm.errors import ConfigError
from orchrm.ops import pipeline, stages


def test_a_trace_file_is_new_until_a_run_has_trained_on_it(tmp_path):
    from orchrm.ops import tracking

    folder = tmp_path / "incoming"
    folder.mkdir()
    config = config_from_dict({"data_dir": str(tmp_path / "data")})
    (folder / "monday.jsonl").write_text('{"a": 1}\n')
    found = stages.find_new_traces(folder, config=config)
    assert [p.name for p in found.new] == ["monday.jsonl"]

    stages.record_ingested(found, config=config, run_id=tracking.start_run(config, "pipeline"))
    (folder / "monday.jsonl").rename(folder / "renamed.jsonl")  # same bytes: not new
    (folder / "tuesday.parquet").write_bytes(b"PAR1 new bytes")
    (folder / "notes.txt").write_text("not a trace file")
    found = stages.find_new_traces(folder, config=config)
    assert [p.name for p in found.files] == ["renamed.jsonl", "tuesday.parquet"]
    assert [p.name for p in found.new] == ["tuesday.parquet"]


def test_a_missing_traces_folder_says_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="does not exist: create it"):
        stages.find_new_traces(tmp_path / "nowhere", config=config_from_dict({"data_dir": str(tmp_path)}))


def test_training_runs_orchrm_train_or_torchrun_in_a_subprocess(tmp_path):
    paths = {"pairs_path": tmp_path / "p.parquet", "model_dir": tmp_path / "m", "config_path": tmp_path / "c.yaml"}
    plain = stages.train_command(PipelineConfig(), run_id="abc", **paths)
    assert plain[:3] == [sys.executable, "-m", "orchrm.cli"] and plain[3] == "train"
    assert plain[-2:] == ["--mlflow-run-id", "abc"] and "--overwrite" in plain
    ddp = config_from_dict({"pipeline": {"launcher": "torchrun", "nproc_per_node": 2}})
    cmd = stages.train_command(ddp, run_id=None, **paths)
    assert cmd[:5] == [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--standalone"]
    assert cmd[5:8] == ["-m", "orchrm.cli", "train"] and "--mlflow-run-id" not in cmd
    nodes = {"launcher": "torchrun", "torchrun": {"nnodes": 2, "node_rank": 1, "nproc_per_node": 4,
                                                  "rdzv_endpoint": "node0.cluster:29400", "rdzv_id": "nightly"}}
    cmd = stages.train_command(config_from_dict({"pipeline": nodes}), run_id=None, **paths)
    assert cmd[3:10] == ["--nproc-per-node=4", "--nnodes=2", "--node-rank=1", "--rdzv-backend=static",
                         "--rdzv-endpoint=node0.cluster:29400", "--rdzv-id=nightly", "-m"]
    # train.log starts with what every other node runs to join
    note = stages.other_nodes_note(config_from_dict({"pipeline": {**nodes, "torchrun": {**nodes["torchrun"], "node_rank": 0}}}),
                                   **paths).splitlines()
    assert len(note) == 2 and note[1].startswith("#   node 1: torchrun --nproc-per-node=4 --nnodes=2 --node-rank=1 ")
    assert stages.other_nodes_note(ddp, **paths) == ""
    # c10d gives ranks itself and ignores a node rank
    elastic = config_from_dict({"pipeline": {**nodes, "torchrun": {**nodes["torchrun"], "rdzv_backend": "c10d"}}})
    assert "--rdzv-backend=c10d" in (cmd := stages.train_command(elastic, run_id=None, **paths))
    assert not any(arg.startswith("--node-rank") for arg in cmd)


def test_the_weekly_seed_changes_every_week_and_is_never_the_collection_seed():
    cfg = PipelineConfig()
    monday = pipeline.weekly_seed(cfg, datetime(2026, 11, 30, tzinfo=UTC))
    sunday = pipeline.weekly_seed(cfg, datetime(2026, 12, 6, tzinfo=UTC))
    next_week = pipeline.weekly_seed(cfg, datetime(2026, 12, 7, tzinfo=UTC))
    assert monday == sunday == 202649 and next_week == 202650
    clash = config_from_dict({"collect": {"seed": 202649}})
    assert pipeline.weekly_seed(clash, datetime(2026, 11, 30, tzinfo=UTC)) != 202649


def test_collection_output_is_keyed_on_every_input(tmp_path):
    cfg = config_from_dict({"data_dir": str(tmp_path), "collect": {"domains": ["math"], "tasks_per_domain": 1, "plans_per_task": 2, "workers": 1}})
    a = stages.collect_stage(cfg.collect, cfg.sandbox, data_dir=cfg.data_dir, code_version="v1")
    b = stages.collect_stage(cfg.collect, cfg.sandbox, data_dir=cfg.data_dir, code_version="v2")
    c = stages.collect_stage(cfg.collect.model_copy(update={"seed": 1}), cfg.sandbox, data_dir=cfg.data_dir, code_version="v1")
    assert len({a.path, b.path, c.path}) == 3
    assert a.rows > 0 and a.origin == "sandbox"


def test_the_pipeline_config_section_is_validated_on_load():
    with pytest.raises(ConfigError, match=r"pipeline\.task_runner"):
        config_from_dict({"pipeline": {"task_runner": "ray"}})
    with pytest.raises(ConfigError, match=r"pipeline\.train_timeout_s"):
        config_from_dict({"pipeline": {"train_timeout_s": 0}})


def test_the_cached_stages_persist_in_the_named_storage_block_or_say_that_it_is_missing(tmp_path):
    from prefect.filesystems import LocalFileSystem

    from flows.pipeline import result_storage

    local = config_from_dict({"data_dir": str(tmp_path / "data")})
    assert result_storage(local) == (tmp_path / "data" / "prefect-results").resolve()
    LocalFileSystem(basepath=str(tmp_path / "shared")).save("orchrm-test-results", overwrite=True)
    shared = config_from_dict({"data_dir": str(tmp_path / "data"), "pipeline": {"result_storage": "local-file-system/orchrm-test-results"}})
    assert result_storage(shared).basepath == str(tmp_path / "shared")
    missing = config_from_dict({"pipeline": {"result_storage": "remote-file-system/nowhere"}})
    with pytest.raises(ConfigError, match="no Prefect storage block 'remote-file-system/nowhere'"):
        result_storage(missing)
    with pytest.raises(ConfigError, match="result_storage"):
        config_from_dict({"pipeline": {"result_storage": "s3://bucket/path"}})
