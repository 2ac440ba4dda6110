from pathlib import Path

import pytest

from orchrm.config import PipelineConfig, load_config
from orchrm.errors import ConfigError

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    cfg = load_config(path)
    assert isinstance(cfg, PipelineConfig)


def test_shipped_configs_exist():
    assert {p.name for p in CONFIGS} >= {"default.yaml", "tiny.yaml", "gpu.yaml"}


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
