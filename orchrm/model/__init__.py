"""The reward model: BradleyTerryModel (the one forward pass), its encoders, the model file,
batching by task, the Trainer and its checkpoints; the prompt and action texts it reads
(:mod:`orchrm.model.texts`, built there for pair building and serving alike) and the tokens a
scoring call reads (:mod:`orchrm.model.scoring`).

Nothing here imports MLflow, Prefect, Great Expectations or the sandbox: a serving process that
loads a saved model carries only this package (the Trainer reports through a callback that
:mod:`orchrm.ops` implements).

>>> from orchrm.model import BradleyTerryModel, bt_loss  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BradleyTerryModel": "orchrm.model.reward_model",
    "bt_loss": "orchrm.model.reward_model",
    "Trainer": "orchrm.model.trainer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'orchrm.model' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
