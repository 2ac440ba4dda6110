"""OrchRM: reward models for multi-agent orchestration.

The public names are imported lazily so that ``import orchrm`` stays fast and does no work:

>>> from orchrm import MultiAgentExecutor, PairwiseComparator, BradleyTerryModel, Trainer  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Plan": "orchrm.plans",
    "PlanError": "orchrm.errors",
    "Task": "orchrm.execution.tasks.base",
    "load_tasks": "orchrm.execution.tasks.base",
    "MultiAgentExecutor": "orchrm.execution.executor",
    "PlanRun": "orchrm.execution.executor",
    "BaseSampler": "orchrm.execution.samplers",
    "SpecializedSampler": "orchrm.execution.samplers",
    "collect": "orchrm.execution.collect",
    "ingest_traces": "orchrm.data.ingest",
    "read_table": "orchrm.data.tables",
    "write_table": "orchrm.data.tables",
    "PairwiseComparator": "orchrm.data.pairs",
    "build_pairs": "orchrm.data.pairs",
    "validate_artifacts": "orchrm.data.validation",
    "validate_pairs": "orchrm.data.validation",
    "BradleyTerryModel": "orchrm.model.reward_model",
    "bt_loss": "orchrm.model.reward_model",
    "Trainer": "orchrm.model.trainer",
    "load_reward_model": "orchrm.ops.serving",
    "TestTimeScalableOrchestrator": "orchrm.ops.serving",
    "RewardGuidedOrchestrator": "orchrm.ops.serving",
    "load_config": "orchrm.config",
    "PipelineConfig": "orchrm.config",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'orchrm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
