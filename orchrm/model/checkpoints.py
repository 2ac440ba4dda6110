"""Checkpoints of a training run: what they hold, and how a run resumes from them.

``last.safetensors`` is a model file (:mod:`orchrm.model.modelfile`) with two additions: the
optimizer's tensors (``trainer.optim.<param>.<name>``) and the loop state as JSON metadata
(``trainer_state``: epoch, step, early-stopping state, history, data hash, world size, settings,
optimizer groups, schedule). ``best.safetensors`` is a plain model file of the best validation
weights. Rank 0 writes both after each evaluation, atomically.

A resumed run must be the run of its checkpoint: same pairs (data hash), model settings, the
settings in :data:`RESUME_KEYS` and number of processes; anything else raises
:class:`TrainingError` saying what differs. It then continues exactly: the batches are rebuilt
from ``(seed, epoch)`` and the optimizer and schedule restored.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from orchrm.config import TrainConfig
from orchrm.errors import ModelFileError, TrainingError
from orchrm.model.modelfile import ModelFile
from orchrm.model.reward_model import BradleyTerryModel

log = logging.getLogger("orchrm.model.trainer")

LAST_CHECKPOINT = "last.safetensors"
BEST_CHECKPOINT = "best.safetensors"
#: what decides the split, the batches, the loss or the updates: a resumed run keeps each of them
RESUME_KEYS: tuple[str, ...] = (
    "batch_size", "seed", "lr", "lr_schedule", "warmup_ratio", "weight_decay", "val_fraction",
    "grad_clip", "use_margin", "center_rewards_coefficient", "weight_average",
)
#: the names under which ``last.safetensors`` holds the running mean of the epochs' weights
AVERAGE_PREFIX = "trainer.average."


@dataclass(frozen=True)
class EpochRecord:
    """Metrics of one epoch. Validation fields are None on epochs without evaluation; ``lr`` is the
    learning rate of the epoch's last step."""

    epoch: int
    step: int
    train_loss: float
    train_accuracy: float
    val_loss: float | None
    val_accuracy: float | None
    lr: float
    seconds: float

    def figures(self) -> dict[str, float | None]:
        """Every figure of the epoch by name (the epoch itself aside): what callbacks log."""
        return {k: v for k, v in asdict(self).items() if k != "epoch"}


@dataclass
class LoopState:
    """Where the training loop stands; all of it but the tensors' copies goes into ``last.safetensors``."""

    epoch: int = 0
    step: int = 0
    best_epoch: int = 0
    best_val_loss: float | None = None
    best_val_accuracy: float | None = None
    bad_evals: int = 0
    stopped_early: bool = False
    #: the epoch of ``last.safetensors`` when this run wrote it or resumed from it (None: none of this run's)
    checkpoint_epoch: int | None = None
    history: list[EpochRecord] = field(default_factory=list)
    best_weights: dict[str, Tensor] | None = None
    #: the running mean of the epochs' weights (``TrainConfig.weight_average``) and how many epochs it holds
    average: dict[str, Tensor] | None = None
    averaged: int = 0
    #: a resumed run's optimizer tensors, groups and schedule, until :meth:`restore_optimizer`
    optimizer_state: tuple[dict[str, Tensor], list, dict] | None = None

    def observe(self, record: EpochRecord, cfg: TrainConfig) -> bool:
        """Update the early-stopping state with an evaluated epoch; True if it is the new best."""
        if record.val_loss is None:  # nothing to validate on: the latest epoch is the best
            self.best_epoch = record.epoch
            return True
        if cfg.monitor == "val_accuracy":
            better = self.best_val_accuracy is None or record.val_accuracy > self.best_val_accuracy + cfg.min_delta
        else:
            better = self.best_val_loss is None or record.val_loss < self.best_val_loss - cfg.min_delta
        if better:
            self.best_epoch, self.best_val_loss, self.best_val_accuracy = record.epoch, record.val_loss, record.val_accuracy
            self.bad_evals = 0
            return True
        self.bad_evals += 1
        return False

    def restore_optimizer(self, optimizer: torch.optim.Optimizer, schedule: Any) -> None:
        """Load a resumed run's optimizer and schedule state (nothing for a fresh run)."""
        if self.optimizer_state is None:
            return
        tensors, groups, sched = self.optimizer_state
        per_param: dict[int, dict[str, Tensor]] = {}
        for key, value in tensors.items():
            pid, name = key.split(".", 1)
            per_param.setdefault(int(pid), {})[name] = value
        optimizer.load_state_dict({"state": per_param, "param_groups": groups})
        schedule.load_state_dict(sched)
        # the groups' lr came with the checkpoint, from the schedule it was written under; with more epochs
        # the schedule is longer, and the next step must train at the new schedule's rate (same epochs: same lr)
        for group, base_lr, factor in zip(optimizer.param_groups, schedule.base_lrs, schedule.lr_lambdas, strict=True):
            group["lr"] = base_lr * factor(schedule.last_epoch)
        self.optimizer_state = None


class Checkpoints:
    """The checkpoint folder of one run; ``directory`` None: the run writes no checkpoints."""

    def __init__(self, directory: str | Path | None) -> None:
        self.directory = None if directory is None else Path(directory)

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def path(self, name: str = LAST_CHECKPOINT) -> Path | None:
        return None if self.directory is None else self.directory / name

    def start(self, model: BradleyTerryModel, *, resume: bool, fingerprint: str, cfg: TrainConfig, world: int, main: bool) -> LoopState:
        """The state a run starts from. With ``resume`` and a ``last.safetensors``: its weights
        loaded into ``model`` and its loop state, after checking it is this run's. Otherwise a
        fresh state, and (on rank 0) an earlier run's checkpoints removed, so that neither its best
        weights nor its last state can be mistaken for this run's."""
        last = self.path(LAST_CHECKPOINT)
        if resume and last is not None and last.is_file():
            try:
                reader = ModelFile(last)
                _check_same_model(reader, model)
                model.load_weights(reader)
                return _state_from(reader, fingerprint=fingerprint, cfg=cfg, world=world)
            except ModelFileError as exc:
                raise TrainingError(
                    f"cannot resume: {exc}. Restore the checkpoint, or start afresh (without resume; "
                    "`orchrm train --overwrite`)"
                ) from None
        if main:
            if resume:
                log.warning("resume requested but no checkpoint at %s; starting from scratch", last)
            for name in (LAST_CHECKPOINT, BEST_CHECKPOINT):
                path = self.path(name)
                if path is not None and path.is_file():
                    log.warning("fresh run: removing the earlier run's checkpoint %s", path)
                    path.unlink()
        return LoopState()

    def save(self, model: BradleyTerryModel, optimizer: torch.optim.Optimizer, schedule: Any, state: LoopState, *,
             fingerprint: str, cfg: TrainConfig, world: int, improved: bool) -> None:
        """Write ``last.safetensors`` (and ``best.safetensors`` when ``improved``); rank 0 only."""
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        if improved:
            model.save(self.directory / BEST_CHECKPOINT)
        tensors, groups = _optimizer_tensors(optimizer)
        if state.average is not None:
            tensors |= {f"{AVERAGE_PREFIX}{k}": v.detach().to("cpu", copy=True).contiguous() for k, v in state.average.items()}
        meta = {
            "epoch": state.history[-1].epoch,
            "step": state.step,
            "best_epoch": state.best_epoch,
            "best_val_loss": state.best_val_loss,
            "best_val_accuracy": state.best_val_accuracy,
            "bad_evals": state.bad_evals,
            "stopped_early": state.stopped_early,
            "averaged": state.averaged,
            "history": [asdict(r) for r in state.history],
            "data_hash": fingerprint,
            "world_size": world,
            "train_config": cfg.model_dump(mode="json"),
            "optimizer_groups": groups,
            "schedule": schedule.state_dict(),
        }
        model.write_file(
            self.directory / LAST_CHECKPOINT, extra_tensors=tensors, extra_metadata={"trainer_state": json.dumps(meta)}
        )

    def restore_best(self, model: BradleyTerryModel, state: LoopState) -> None:
        """Put the best validation weights back into ``model`` (held in memory, else ``best.safetensors``)."""
        best = self.path(BEST_CHECKPOINT)
        if state.best_weights is not None:
            model.load_state_dict(state.best_weights)
        elif best is not None and best.is_file() and state.best_epoch:
            model.load_weights(best)

    def kept(self, state: LoopState) -> str:
        """What a failed run leaves to resume from, in words (for its error)."""
        if state.checkpoint_epoch is None:
            return "no checkpoint of this run was written yet"
        return (f"the last good checkpoint is kept at {self.path(LAST_CHECKPOINT)} (epoch "
                f"{state.checkpoint_epoch}); resume from it with resume=True")


def _check_same_model(reader: ModelFile, model: BradleyTerryModel) -> None:
    """A resumed run continues the model of its checkpoint: every model setting the same."""
    saved, now = reader.model_config.model_dump(mode="json"), model.config.model_dump(mode="json")
    changed = [k for k in sorted(set(saved) | set(now)) if saved.get(k) != now.get(k)]
    if changed:
        was = ", ".join(f"{k}={saved.get(k)!r}" for k in changed)
        is_ = ", ".join(f"{k}={now.get(k)!r}" for k in changed)
        raise TrainingError(
            f"checkpoint {reader.path} is of a model with {was}, now {is_}; resume with the same model "
            "settings, or start a new output directory"
        )


def _state_from(reader: ModelFile, *, fingerprint: str, cfg: TrainConfig, world: int) -> LoopState:
    """The loop state in a ``last.safetensors``, once its pairs, settings and world size are checked."""
    try:
        meta = json.loads(reader.metadata["trainer_state"])
    except KeyError:
        raise TrainingError(f"{reader.path} is a model file, not a training checkpoint (no trainer state)") from None
    if meta["data_hash"] != fingerprint:
        raise TrainingError(
            f"checkpoint {reader.path} was trained on other pairs (data hash {meta['data_hash']}, now "
            f"{fingerprint}); resume with the same pair table or start a new output directory"
        )
    saved, now = dict(meta["train_config"]), cfg.model_dump(mode="json")
    saved.setdefault("weight_average", "none")  # written before weights were averaged
    if saved.get("lr") is None:  # written before the lr was resolved from model.lr: the optimizer's is the one used
        saved["lr"] = meta["optimizer_groups"][0]["initial_lr"]
    for key in RESUME_KEYS:
        if saved.get(key) != now.get(key):
            raise TrainingError(f"checkpoint {reader.path} used {key}={saved.get(key)!r}, now {key}={now.get(key)!r}; resume needs the same settings")
    if meta["world_size"] != world:
        raise TrainingError(f"checkpoint {reader.path} was written by {meta['world_size']} processes, now {world}; resume with the same number")
    state = LoopState(
        epoch=meta["epoch"],
        step=meta["step"],
        best_epoch=meta["best_epoch"],
        best_val_loss=meta["best_val_loss"],
        best_val_accuracy=meta["best_val_accuracy"],
        bad_evals=meta["bad_evals"],
        stopped_early=meta.get("stopped_early", meta["bad_evals"] >= cfg.patience),
        checkpoint_epoch=meta["epoch"],
        history=[EpochRecord(**r) for r in meta["history"]],
    )
    best = reader.path.parent / BEST_CHECKPOINT
    if best.is_file():
        state.best_weights = ModelFile(best).tensors(prefix_excluded="trainer.")
    state.optimizer_state = (reader.tensors(prefix="trainer.optim."), meta["optimizer_groups"], meta["schedule"])
    if meta.get("averaged"):
        state.average = reader.tensors(prefix=AVERAGE_PREFIX)
        state.averaged = int(meta["averaged"])
    return state


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, Tensor], list]:
    sd = optimizer.state_dict()
    tensors = {}
    for pid, st in sd["state"].items():
        for name, value in st.items():
            tensors[f"trainer.optim.{pid}.{name}"] = torch.as_tensor(value).detach().to("cpu", copy=True).contiguous()
    return tensors, json.loads(json.dumps(sd["param_groups"]))
