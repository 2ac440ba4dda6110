"""The hooks the Trainer calls while it trains: a tracker implements them without loading training.

:mod:`orchrm.ops.tracking` subclasses :class:`TrainCallback` for MLflow; this module imports
nothing heavy, so a process that only serves models and logs runs never loads the training loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchrm.model.checkpoints import EpochRecord
    from orchrm.model.reward_model import BradleyTerryModel
    from orchrm.model.trainer import TrainResult


class TrainCallback:
    """Hooks the Trainer calls on rank 0; override the ones you need.

    MLflow logging is one of these (``orchrm.ops.tracking.MlflowCallback``); the Trainer itself imports no tracker.
    """

    def on_train_begin(self, params: Mapping[str, Any]) -> None:
        """Once, with the configs, data hash and pair counts."""

    def on_log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Every ``log_interval`` steps: ``loss``, ``lr`` (the one this step trained at), ``grad_norm``."""

    def on_eval(self, record: EpochRecord, model: BradleyTerryModel) -> None:
        """After each evaluation, once its checkpoint is written."""

    def on_train_end(self, result: TrainResult) -> None:
        """Once, with the final result."""
