"""Typed, frozen, per-stage configuration, loaded from YAML and validated on load.

One section per stage, nested in :class:`PipelineConfig`; unknown keys are rejected with a
:class:`ConfigError` that names the field. Derived values are methods, never mutated fields.

>>> cfg = PipelineConfig()
>>> cfg.collect.plans_per_task
8
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchrm.agents.sandbox.noise import NoiseConfig
from orchrm.errors import ConfigError


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CollectConfig(_Frozen):
    """Artifact collection: which tasks, how many candidate plans each, which samplers."""

    domains: tuple[str, ...] = ("math", "code", "multihop", "webqa")
    tasks_per_domain: int = Field(50, ge=1)
    plans_per_task: int = Field(8, ge=1, le=64)
    seed: int = 0
    #: task source per domain ("builtin" generators by default; e.g. math: gsm8k)
    sources: dict[str, str] = Field(default_factory=dict)
    #: share of each task's plans written by each sampler (normalised)
    orchestrators: dict[str, float] = Field(default_factory=lambda: {"base": 0.5, "specialized": 0.5})
    #: worker processes; None = one per CPU core
    workers: int | None = Field(None, ge=1)

    @field_validator("orchestrators")
    @classmethod
    def _known_samplers(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = set(value) - {"base", "specialized"}
        if unknown:
            raise ValueError(f"unknown sampler(s) {sorted(unknown)}; use base and/or specialized")
        if not value or sum(value.values()) <= 0 or min(value.values()) < 0:
            raise ValueError("sampler shares must be >= 0 and sum to more than 0")
        return value

    def source(self, domain: str) -> str:
        return self.sources.get(domain, "builtin")


class PairsConfig(_Frozen):
    """Pair building (DESIGN §5)."""

    granularity: tuple[Literal["plan", "node"], ...] = ("plan", "node")
    min_margin: float = Field(0.1, ge=0.0, le=1.0)
    max_pairs_per_task: int = Field(64, ge=1)
    seed: int = 0
    #: fraction of tasks in val and test; the rest trains
    val_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    test_fraction: float = Field(0.2, ge=0.0, lt=1.0)


class ModelConfig(_Frozen):
    """Reward model architecture (DESIGN §6)."""

    encoder: str = "scratch"
    hidden_dim: int = Field(256, ge=8)
    num_layers: int = Field(3, ge=1)
    num_heads: int = Field(4, ge=1)
    max_length: int = Field(256, ge=16)
    vocab_size: int = Field(8000, ge=100)


class TrainConfig(_Frozen):
    """Trainer settings (DESIGN §6)."""

    batch_size: int = Field(32, ge=1)
    lr: float = Field(1e-4, gt=0)
    epochs: int = Field(10, ge=1)
    eval_interval: int = Field(1, ge=1)
    weight_decay: float = Field(0.01, ge=0)
    warmup_ratio: float = Field(0.1, ge=0, lt=1)
    grad_clip: float = Field(1.0, gt=0)
    patience: int = Field(3, ge=1)
    seed: int = 0


class PipelineConfig(_Frozen):
    """The whole pipeline. ``data_dir`` holds run data (tables, models, tracking store)."""

    data_dir: str = ".orchrm"
    sandbox: NoiseConfig = Field(default_factory=NoiseConfig)
    collect: CollectConfig = Field(default_factory=CollectConfig)
    pairs: PairsConfig = Field(default_factory=PairsConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)

    def data_path(self, *parts: str) -> Path:
        """A path under ``data_dir`` (relative paths resolve from the current directory)."""
        return Path(self.data_dir).expanduser().joinpath(*parts)


def _format_errors(exc: ValidationError, origin: str) -> str:
    lines = [f"invalid configuration in {origin}:"]
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see orchrm/config.py for the fields)"
        lines.append(f"  {where}: {msg}")
    return "\n".join(lines)


def config_from_dict(data: dict[str, Any] | None, *, origin: str = "<dict>") -> PipelineConfig:
    """Validate a plain dict into a :class:`PipelineConfig` (ConfigError names each bad field)."""
    try:
        return PipelineConfig.model_validate(data or {})
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, origin)) from None


def load_config(path: str | os.PathLike | None = None) -> PipelineConfig:
    """Load and validate a YAML config; ``None`` gives the defaults."""
    if path is None:
        return PipelineConfig()
    source = Path(path)
    if not source.exists():
        raise ConfigError(f"config file {source} not found; see configs/ for examples")
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source} is not valid YAML: {exc}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections (collect:, pairs:, ...)")
    return config_from_dict(data, origin=str(source))
