import re
from pathlib import Path

import pytest

from orchrm.config import (
    PipelineConfig,
    TrainConfig,
    config_from_dict,
    load_config,
    settings_error,
    with_overrides,
)
from orchrm.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
#: the benchmarks' ablation configs, loaded by the same code
BENCH_CONFIGS = sorted((ROOT / "benchmarks" / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS + BENCH_CONFIGS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_shipped_config_loads(path):
    cfg = load_config(path)
    assert isinstance(cfg, PipelineConfig)


def test_shipped_configs_exist():
    assert {p.name for p in CONFIGS} >= {"default.yaml", "tiny.yaml", "gpu.yaml"}
    assert {p.name for p in BENCH_CONFIGS} >= {"no_prior_pairs.yaml", "prior_margin_1.yaml"}


def test_an_ablation_changes_only_what_it_says():
    default = load_config(ROOT / "configs" / "default.yaml")
    no_prior = load_config(ROOT / "benchmarks" / "configs" / "no_prior_pairs.yaml")
    assert "specialized-over-base" not in no_prior.pairs.sources
    assert no_prior != default and no_prior.model_copy(update={"pairs": default.pairs}) == default


def test_every_ablation_extends_the_demo_config_and_changes_only_its_own_section():
    default = load_config(ROOT / "configs" / "default.yaml")
    for path in BENCH_CONFIGS:
        cfg = load_config(path)
        assert cfg.evaluate == default.evaluate and cfg.data_dir == default.data_dir, path.name
        changed = {name for name in type(cfg).model_fields if getattr(cfg, name) != getattr(default, name)}
        assert len(changed) == 1, (path.name, changed)


def test_extends_merges_section_by_section_relative_to_the_file(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "team.yaml").write_text(
        "collect: {tasks_per_domain: 30, plans_per_task: 4}\ntrain: {epochs: 5}\n"
    )
    (tmp_path / "mine.yaml").write_text(
        "extends: base/team.yaml\ncollect: {tasks_per_domain: 12, domains: [math]}\nmodel: {hidden_dim: 64}\n"
    )
    cfg = load_config(tmp_path / "mine.yaml")
    assert cfg.collect.tasks_per_domain == 12 and cfg.collect.plans_per_task == 4  # merged key by key
    assert cfg.collect.domains == ("math",)  # a list replaces the one it extends
    assert cfg.train.epochs == 5 and cfg.model.hidden_dim == 64
    # an extended file may itself extend another
    (tmp_path / "night.yaml").write_text("extends: mine.yaml\ntrain: {epochs: 2}\n")
    night = load_config(tmp_path / "night.yaml")
    assert night.train.epochs == 2 and night.collect.plans_per_task == 4 and night.model.hidden_dim == 64


def test_extends_refuses_a_loop_a_missing_file_and_a_non_path(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ConfigError, match=r"extends makes a loop .*a\.yaml -> .*b\.yaml -> .*a\.yaml"):
        load_config(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("extends: nowhere.yaml\n")
    with pytest.raises(ConfigError, match=r"extends nowhere\.yaml, but .*nowhere\.yaml is not a file"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "d.yaml").write_text("extends: [a.yaml]\n")
    with pytest.raises(ConfigError, match="extends must be the path of another config file"):
        load_config(tmp_path / "d.yaml")
    (tmp_path / "e.yaml").write_text("extends: e.yaml\n")
    with pytest.raises(ConfigError, match="extends makes a loop"):
        load_config(tmp_path / "e.yaml")


def test_a_bad_value_in_an_extended_file_is_named(tmp_path):
    (tmp_path / "base.yaml").write_text("train: {epochs: 0}\n")
    (tmp_path / "mine.yaml").write_text("extends: base.yaml\n")
    (tmp_path / "night.yaml").write_text("extends: mine.yaml\n")
    with pytest.raises(ConfigError, match=r"night\.yaml \(which extends .*mine\.yaml -> .*base\.yaml\):\n  train\.epochs"):
        load_config(tmp_path / "night.yaml")


def test_unknown_field_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("collect:\n  plans_per_taks: 8\n")
    with pytest.raises(ConfigError, match=r"collect\.plans_per_taks: unknown field"):
        load_config(bad)


def test_out_of_range_value_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("collect:\n  plans_per_task: 0\n")
    with pytest.raises(ConfigError, match=r"collect\.plans_per_task: Input should be greater than or equal to 1"):
        load_config(bad)


def test_sandbox_noise_is_validated(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sandbox:\n  generic:\n    confidence_noise: -1\n")
    with pytest.raises(ConfigError, match=r"sandbox\.generic\.confidence_noise"):
        load_config(bad)


def test_config_is_frozen():
    cfg = PipelineConfig()
    with pytest.raises(Exception, match="frozen"):
        cfg.collect.plans_per_task = 3


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("collect: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("collect: {seed: 1}  # café\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(latin1)
    negative = tmp_path / "negative.yaml"
    negative.write_text("train: {seed: -1}\n")
    with pytest.raises(ConfigError, match="train.seed"):
        load_config(negative)


def _model(**fields):
    from orchrm import BradleyTerryModel

    return BradleyTerryModel(hidden_dim=32, num_layers=1, num_heads=2, **fields)


def _trainer(**settings):
    from orchrm import Trainer

    return Trainer(_model(), progress=False, **settings)


def _comparator(**settings):
    from orchrm.data.pairs import PairwiseComparator

    return PairwiseComparator(**settings)


@pytest.mark.parametrize(
    ("make", "origin", "problem"),
    [
        (lambda: with_overrides(TrainConfig(), {"epochs": 0}), "the command line", "epochs: Input should be greater than or equal to 1"),
        (lambda: _model(hidden_sise=64), "BradleyTerryModel(...)", "hidden_sise: unknown field"),
        # the model's lr is the Trainer's: an infinite one used to pass here and fail in train()
        (lambda: _model(lr=float("inf")), "BradleyTerryModel(...)", "lr: Input should be a finite number"),
        (lambda: _model(lr=None), "BradleyTerryModel(...)", "lr: give a positive number, not None"),
        (lambda: _trainer(batch_sise=8), "Trainer(...)", "batch_sise: unknown field"),
        (lambda: _trainer().train(pairs=[], epochs=0), "Trainer.train(...)", "epochs: Input should be greater than or equal to 1"),
        (lambda: _comparator(min_margin=2.0), "PairwiseComparator(...)", "min_margin: Input should be less than or equal to 1"),
    ],
    ids=["command line", "model field", "model lr", "model lr None", "trainer", "train", "comparator"],
)
def test_settings_beside_a_config_are_refused_in_one_wording(make, origin, problem):
    with pytest.raises(ConfigError, match=rf"^invalid configuration in {re.escape(origin)}:\n  {re.escape(problem)}"):
        make()


def test_settings_error_words_hand_made_problems_like_validation_errors():
    error = settings_error("Trainer(...)", [("lr", "give a positive number"), ("epochs", "too many")])
    assert str(error) == "invalid configuration in Trainer(...):\n  lr: give a positive number\n  epochs: too many"


MULTI_NODE = {"launcher": "torchrun", "torchrun": {"nnodes": 2, "rdzv_endpoint": "10.0.0.1:29400"}}


@pytest.mark.parametrize(
    ("pipeline", "problem"),
    [
        ({"launcher": "torchrun", "torchrun": {"nnodes": 2}}, r"pipeline\.torchrun: .*nnodes 2 needs rdzv_endpoint"),
        ({"launcher": "torchrun", "torchrun": {**MULTI_NODE["torchrun"], "node_rank": 2}},
         r"pipeline\.torchrun: .*node_rank 2 must be below nnodes \(2\)"),
        ({"launcher": "torchrun", "torchrun": {"rdzv_endpoint": "10.0.0.1"}}, r"pipeline\.torchrun\.rdzv_endpoint: .*is not host:port"),
        ({"launcher": "torchrun", "torchrun": {"rdzv_endpoint": "node0:99999"}}, r"pipeline\.torchrun\.rdzv_endpoint: .*port 1-65535"),
        ({"launcher": "torchrun", "torchrun": {"rdzv_endpoint": "http://node0:29400"}}, r"rdzv_endpoint: .*is not host:port"),
        ({"launcher": "torchrun", "torchrun": {"rdzv_backend": "etcd"}}, r"pipeline\.torchrun\.rdzv_backend"),
        ({"launcher": "torchrun", "torchrun": {"nnode": 2}}, r"pipeline\.torchrun\.nnode: unknown field"),
        ({"torchrun": MULTI_NODE["torchrun"]}, r"pipeline: .*2 training processes .* set launcher: torchrun"),
        ({"launcher": "torchrun", "nproc_per_node": 2, "torchrun": {"nproc_per_node": 4}}, r"pipeline: .*disagree"),
    ],
)
def test_torchrun_settings_are_checked_on_load(pipeline, problem):
    with pytest.raises(ConfigError, match=problem):
        config_from_dict({"pipeline": pipeline})


def test_torchrun_settings_of_a_node():
    node = config_from_dict({"pipeline": {**MULTI_NODE, "torchrun": {**MULTI_NODE["torchrun"], "node_rank": 1,
                                                                     "nproc_per_node": 4}}}).pipeline.torchrun
    assert (node.world_size(), node.rdzv_backend, node.rdzv_id) == (8, "static", "orchrm-train")
    ipv6 = config_from_dict({"pipeline": {"launcher": "torchrun", "torchrun": {"rdzv_endpoint": "[fd00::1]:29400"}}})
    assert ipv6.pipeline.torchrun.rdzv_endpoint == "[fd00::1]:29400"
    # the setting's earlier place still reads
    assert config_from_dict({"pipeline": {"launcher": "torchrun", "nproc_per_node": 2}}).pipeline.torchrun.nproc_per_node == 2
