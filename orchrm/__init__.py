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
    "Task": "orchrm.tasks.base",
    "load_tasks": "orchrm.tasks.base",
    "MultiAgentExecutor": "orchrm.executor",
    "PlanRun": "orchrm.executor",
    "BaseSampler": "orchrm.orchestrators",
    "SpecializedSampler": "orchrm.orchestrators",
    "collect": "orchrm.collect",
    "ingest_traces": "orchrm.traces",
    "read_table": "orchrm.traces",
    "write_table": "orchrm.traces",
    "PairwiseComparator": "orchrm.pairs",
    "build_pairs": "orchrm.pairs",
    "validate_artifacts": "orchrm.validation",
    "validate_pairs": "orchrm.validation",
    "BradleyTerryModel": "orchrm.model",
    "bt_loss": "orchrm.model",
    "Trainer": "orchrm.train",
    "load_reward_model": "orchrm.serving",
    "TestTimeScalableOrchestrator": "orchrm.serving",
    "RewardGuidedOrchestrator": "orchrm.serving",
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
