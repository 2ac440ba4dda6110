"""Trainer: fit a :class:`BradleyTerryModel` on pairs, in one process, on one GPU, or under torchrun.

>>> trainer = Trainer(model=model, batch_size=32)                       # doctest: +SKIP
>>> result = trainer.train(pairs=pairs, epochs=10, eval_interval=1)     # doctest: +SKIP
>>> print(result)                                                        # doctest: +SKIP

The loop (:meth:`Trainer.train`) reads top to bottom: AdamW with warmup and linear/cosine decay,
gradient clipping, validation every ``eval_interval`` epochs with early stopping on the validation
loss, checkpoints, bf16 autocast on CUDA. Steps are grouped by task and encode each distinct
(prompt, action) once (:mod:`orchrm.model.batching`, DESIGN §6). Everything random is drawn from
``(seed, epoch, rank)``, so a run is reproducible and a resumed run equals an uninterrupted one.

Under ``torchrun`` (``WORLD_SIZE`` > 1) the Trainer joins the process group (gloo on CPU, nccl on
GPU), wraps the model in DDP and gives each rank its share of every epoch's steps; ``batch_size``
is per rank. Only rank 0 reports to callbacks, shows progress and writes files; progress written
to a file or a pipe is a line per epoch (:mod:`orchrm.util.progress`).

Checkpoints (with ``checkpoint_dir``; their format and resume: :mod:`orchrm.model.checkpoints`):
``last.safetensors`` after every evaluation and ``best.safetensors`` when the monitored validation
figure (``TrainConfig.monitor``: the loss unless set to accuracy) improves. A NaN or infinite loss raises :class:`TrainingError` before the bad update is applied and
leaves both files as they were.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn
from torch.optim.swa_utils import AveragedModel

from orchrm.config import ModelConfig, TrainConfig, with_overrides
from orchrm.data.pair_reader import PairSource
from orchrm.data.tables import pairs_digest
from orchrm.errors import ConfigError, TrainingError
from orchrm.model.batching import (
    PairIndex,
    split_pairs,
    step_inputs,
    task_batches,
    training_pairs,
)
from orchrm.model.callbacks import TrainCallback
from orchrm.model.checkpoints import (
    BEST_CHECKPOINT,
    LAST_CHECKPOINT,
    Checkpoints,
    EpochRecord,
    LoopState,
)
from orchrm.model.encoders import tokenizer_from_json
from orchrm.model.modelfile import MODEL_FILE
from orchrm.model.reward_model import BradleyTerryModel, bt_loss
from orchrm.model.texts import (
    INTERMEDIATE_FORMAT_KEY,
    LEGACY_INTERMEDIATE_FORMAT,
    intermediate_format_of,
)
from orchrm.util.fileio import atomic_write_bytes, check_output_dir
from orchrm.util.progress import progress_bar

__all__ = [
    "BEST_CHECKPOINT",
    "LAST_CHECKPOINT",
    "EpochRecord",
    "TrainResult",
    "Trainer",
    "fit",
    "train_from_file",
]

log = logging.getLogger("orchrm.model.trainer")

#: caps the texts scored after training for the stored reward mean/std
_STATS_SAMPLE = 4096


# --------------------------------------------------------------------------------------------
# results and callbacks (EpochRecord, one epoch's metrics, lives with the loop state it is part of:
# orchrm.model.checkpoints)


@dataclass
class TrainResult:
    """What :meth:`Trainer.train` returns: the history and the figures a report needs.

    ``pairs_per_second`` counts training pairs (all ranks) per second of training steps in this
    call (evaluation and checkpoints excluded). ``model`` is the trained model: the mean of the
    weights of the ``averaged_epochs`` evaluated epochs from the best one on
    (``weight_average="from_best"``), else the best validation weights when ``restore_best``;
    ``final_val_loss``/``final_val_accuracy`` are its validation figures, after its rewards were
    divided by ``temperature`` (``calibrate``). ``stopped_early``: the monitored validation figure did not
    improve for ``patience`` evaluations, which may have happened at the last epoch, with every epoch run.
    """

    history: list[EpochRecord]
    best_epoch: int
    best_val_loss: float | None
    best_val_accuracy: float | None
    stopped_early: bool
    steps: int
    train_pairs: int
    val_pairs: int
    train_seconds: float
    pairs_per_second: float
    reward_mean: float
    reward_std: float
    data_hash: str
    #: processes that trained together (``WORLD_SIZE`` under torchrun, else 1)
    world_size: int = 1
    checkpoint_dir: str | None = None
    model_path: str | None = None
    #: evaluated epochs whose weights the model is the mean of (0: not averaged)
    averaged_epochs: int = 0
    final_val_loss: float | None = None
    final_val_accuracy: float | None = None
    #: the rewards were divided by this temperature, fitted on the validation pairs
    #: (``TrainConfig.calibrate``); None: not calibrated
    temperature: float | None = None
    #: an ensemble's (``ModelConfig.members`` > 1) members' own results, in order; the fields above
    #: are then member 0's history and best epoch, the sums of steps and seconds, and the
    #: ensemble's own validation figures, temperature and reward statistics
    members: list[TrainResult] = field(default_factory=list)
    model: BradleyTerryModel | None = field(default=None, repr=False, compare=False)

    @property
    def losses(self) -> list[float]:
        return [r.train_loss for r in self.history]

    @property
    def accuracies(self) -> list[float]:
        return [r.train_accuracy for r in self.history]

    @property
    def val_losses(self) -> list[float | None]:
        return [r.val_loss for r in self.history]

    @property
    def val_accuracies(self) -> list[float | None]:
        return [r.val_accuracy for r in self.history]

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("model", "history", "members")}
        data["history"] = [asdict(r) for r in self.history]
        if self.members:
            data["members"] = [m.to_dict() for m in self.members]
        return data

    def __str__(self) -> str:
        fmt = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
        if self.members:
            lines = [f"member {k} (seed + {k}):\n" + "\n".join("  " + line for line in str(m).splitlines())
                     for k, m in enumerate(self.members)]
            lines.append(
                f"ensemble of {len(self.members)} members, trained apart in {self.train_seconds:.1f} s: val loss "
                f"{fmt(self.final_val_loss)}, accuracy {fmt(self.final_val_accuracy)}"
                + ("" if self.temperature is None else f"; rewards divided by temperature {self.temperature:.3f}")
            )
            if self.model_path:
                lines.append(f"model: {self.model_path}")
            return "\n".join(lines)
        lines = [
            f"trained on {self.train_pairs} pairs (validated on {self.val_pairs}) in {self.steps} steps, "
            f"{self.train_seconds:.1f} s, {self.pairs_per_second:.1f} pairs/s"
            + ("" if self.world_size == 1 else f", {self.world_size} processes"),
            "epoch  train_loss  train_acc  val_loss  val_acc        lr",
        ]
        for r in self.history:
            mark = " *" if r.epoch == self.best_epoch and r.val_loss is not None else ""
            lines.append(
                f"{r.epoch:5d}  {r.train_loss:10.4f}  {r.train_accuracy:9.3f}  {fmt(r.val_loss):>8}  "
                f"{fmt(r.val_accuracy):>7}  {r.lr:.2e}{mark}"
            )
        stop = f"patience ran out at epoch {self.history[-1].epoch}" if self.stopped_early else "ran all epochs"
        lines.append(
            f"best epoch {self.best_epoch} (val loss {fmt(self.best_val_loss)}, accuracy "
            f"{fmt(self.best_val_accuracy)}); {stop}; reward mean {self.reward_mean:.3f} std {self.reward_std:.3f}"
        )
        if self.averaged_epochs:
            lines.append(f"model: the mean of the weights of {self.averaged_epochs} epoch(s), {self.best_epoch} to {self.history[-1].epoch} (val loss "
                         f"{fmt(self.final_val_loss)}, accuracy {fmt(self.final_val_accuracy)})")
        if self.temperature is not None:
            lines.append(f"calibrated: rewards divided by temperature {self.temperature:.3f}, fitted on the validation pairs")
        if self.model_path:
            lines.append(f"model: {self.model_path}")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# small helpers: distribution, device, schedule, data


@dataclass(frozen=True)
class _Dist:
    rank: int = 0
    world: int = 1
    owns_group: bool = False

    @property
    def main(self) -> bool:
        return self.rank == 0

    def sum(self, values: Sequence[float], device: torch.device) -> list[float]:
        if self.world == 1:
            return list(values)
        t = torch.tensor(list(values), dtype=torch.float64, device=device)
        torch.distributed.all_reduce(t)
        return t.tolist()


def _start_distributed() -> tuple[_Dist, torch.device | None]:
    """Join the torchrun process group when ``WORLD_SIZE`` > 1; returns the rank's device for GPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return _Dist(), None
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = None
    if torch.cuda.is_available():
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    owns = not dist.is_initialized()
    if owns:
        dist.init_process_group(backend="nccl" if device is not None else "gloo")
    return _Dist(rank=dist.get_rank(), world=dist.get_world_size(), owns_group=owns), device


def _epoch_seed(seed: int, epoch: int, rank: int) -> int:
    return (seed * 1_000_003 + epoch * 7_919 + rank) % (2**63 - 1)


def _shard(batches: list[np.ndarray], dist: _Dist, *, pad: bool) -> list[np.ndarray]:
    """This rank's steps: ``batches[rank::world]``. ``pad`` repeats early steps after the last so every
    rank runs the same number (training); this rank's step ``j`` is a repeat when ``rank + j * world``
    is past the end of ``batches``, and its pairs are trained on but not counted again."""
    if dist.world == 1:
        return batches
    if pad and batches:
        steps = math.ceil(len(batches) / dist.world)
        batches = batches + [batches[i % len(batches)] for i in range(steps * dist.world - len(batches))]
    return batches[dist.rank :: dist.world]


def _lr_lambda(schedule: str, warmup: int, total: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 1.0 - progress if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def _param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on matrices only (not on biases, LayerNorm or embeddings' norms)."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


@dataclass(frozen=True)
class _Encoded:
    """A split's pairs with the token ids of its distinct texts."""

    index: PairIndex
    prompt_ids: list[list[int]]
    action_ids: list[list[int]]

    @classmethod
    def of(cls, df: pd.DataFrame, model: BradleyTerryModel) -> _Encoded | None:
        if len(df) == 0:
            return None
        index = PairIndex.build(df)
        return cls(index, model.tokenize(index.prompts), model.tokenize(index.actions))


@dataclass
class _Run:
    """What one call of :meth:`Trainer.train` works with, set up by :meth:`Trainer._prepare`."""

    cfg: TrainConfig
    dist: _Dist
    device: torch.device
    autocast: Any
    frame: pd.DataFrame
    train_df: pd.DataFrame
    val_df: pd.DataFrame
    fingerprint: str
    train: _Encoded
    val: _Encoded | None
    #: pooled features of every candidate when the encoder is frozen (else None)
    train_features: Tensor | None
    val_features: Tensor | None
    net: nn.Module
    params: list[nn.Parameter]
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LambdaLR
    state: LoopState
    checkpoints: Checkpoints
    #: the running mean of the weights from the best evaluation on (``weight_average="from_best"``), else None
    average: AveragedModel | None = None


# --------------------------------------------------------------------------------------------
# the Trainer


class Trainer:
    """Trains a :class:`BradleyTerryModel` (DESIGN §6).

    ``Trainer(model, batch_size=32, lr=..., ...)``: keyword settings are :class:`TrainConfig`
    fields and override ``config``; ``lr`` defaults to ``model.lr``. ``checkpoint_dir`` enables
    checkpoints and ``train(resume=True)``; ``device`` defaults to CUDA when available (the rank's
    GPU under torchrun); ``callbacks`` receive progress on rank 0.
    """

    def __init__(
        self,
        model: BradleyTerryModel,
        *,
        config: TrainConfig | None = None,
        checkpoint_dir: str | os.PathLike | None = None,
        callbacks: Sequence[TrainCallback] = (),
        device: str | torch.device | None = None,
        progress: bool = True,
        **settings: Any,
    ) -> None:
        if not isinstance(model, BradleyTerryModel):
            raise TypeError(f"Trainer needs a BradleyTerryModel, got {type(model).__name__}")
        self.model = model
        self.config = with_overrides(config or TrainConfig(), settings, origin="Trainer(...)")
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.callbacks = list(callbacks)
        self.device = None if device is None else torch.device(device)
        if self.device is not None and self.device.type == "cuda":
            if not torch.cuda.is_available():
                raise ConfigError(f"device {device!r}: this PyTorch sees no CUDA GPU; use device='cpu' (or leave it unset)")
            if (self.device.index or 0) >= torch.cuda.device_count():
                raise ConfigError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
        self.progress = progress

    # -- the loop ----------------------------------------------------------------------------

    def train(
        self,
        pairs: PairSource,
        *,
        epochs: int | None = None,
        eval_interval: int | None = None,
        resume: bool = False,
    ) -> TrainResult:
        """Train on ``split == "train"`` pairs, validate on ``split == "val"`` (or held-out tasks).

        ``pairs``: a pair table (DataFrame, list of row dicts, or Parquet/JSONL path; DESIGN §3),
        read as every command reads one (:func:`orchrm.data.pair_reader.read_pairs`: TRL's and the
        OrchRM data set's formats too; a table without ``split`` is split by task).
        ``resume`` continues from ``checkpoint_dir/last.safetensors`` (same pairs, model and
        settings). More epochs extend a run that has not stopped early, its schedule stretched to
        the new length from the next step on. A run that stopped early stays stopped, also when
        its patience ran out at its last epoch (``stopped_early`` with every epoch run): an
        uninterrupted longer run would have stopped there too. Without ``resume`` the run starts
        afresh, and first removes an earlier run's checkpoints from ``checkpoint_dir`` (once the
        settings and the model are checked).
        """
        overrides = {k: v for k, v in {"epochs": epochs, "eval_interval": eval_interval}.items() if v is not None}
        # the learning rate used is the one a resume checks and the checkpoint and manifest record
        cfg = with_overrides(self.config, overrides | {"lr": self.config.lr or self.model.lr}, origin="Trainer.train(...)")
        if self.model.members > 1:
            return self._train_members(pairs, cfg, resume=resume)
        dist, rank_device = _start_distributed()
        try:
            return self._train(self._prepare(pairs, cfg, dist, rank_device, resume=resume))
        finally:
            if dist.owns_group:
                torch.distributed.destroy_process_group()

    def _train(self, run: _Run) -> TrainResult:
        """The loop: each epoch's steps (loss, backward, clip, refuse a non-finite step, update), then
        validation, early stopping and checkpoints (:meth:`_after_evaluation`)."""
        cfg, dist, device, state, optimizer = run.cfg, run.dist, run.device, run.state, run.optimizer
        train_seconds, pairs_seen = 0.0, 0
        first = cfg.epochs + 1 if state.stopped_early else state.epoch + 1  # a run that stopped early stays stopped
        for epoch in range(first, cfg.epochs + 1):
            torch.manual_seed(_epoch_seed(cfg.seed, epoch, dist.rank))
            run.net.train()
            t0 = time.perf_counter()
            sums = np.zeros(3)  # loss * pairs, correct, pairs
            batches = task_batches(run.train.index, cfg.batch_size, seed=cfg.seed, epoch=epoch)
            lr = optimizer.param_groups[0]["lr"]
            for j, pair_ids in enumerate(self._progress(_shard(batches, dist, pad=True), epoch, cfg.epochs, dist)):
                with run.autocast:
                    loss, correct = self._loss(run.net, run.train, pair_ids, cfg, device, run.train_features)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = float(torch.nn.utils.clip_grad_norm_(run.params, cfg.grad_clip))
                loss_value = float(loss.detach())
                if not (math.isfinite(loss_value) and math.isfinite(grad_norm)):
                    what = f"loss {loss_value}, gradient norm {grad_norm} at step {state.step + 1}"
                    raise self._diverged(what, epoch, run)
                lr = optimizer.param_groups[0]["lr"]  # this step's; schedule.step() sets the next one's
                optimizer.step()
                run.schedule.step()
                state.step += 1
                if dist.rank + j * dist.world < len(batches):  # not a repeat that only evens out the ranks' steps
                    sums += (loss_value * len(pair_ids), float(correct), len(pair_ids))
                if dist.main and state.step % cfg.log_interval == 0:
                    for cb in self.callbacks:
                        cb.on_log(state.step, {"loss": loss_value, "lr": lr, "grad_norm": grad_norm})
            loss_sum, correct_sum, n = dist.sum(list(sums), device)
            train_seconds += time.perf_counter() - t0
            pairs_seen += int(n)

            evaluate = epoch % cfg.eval_interval == 0 or epoch == cfg.epochs
            val_loss, val_acc = self._evaluate(self.model, run.val, cfg, device, dist, run.val_features) if evaluate else (None, None)
            if val_loss is not None and not math.isfinite(val_loss):  # the weights went bad: keep the good checkpoint
                raise self._diverged(f"validation loss {val_loss}", epoch, run)
            state.history.append(EpochRecord(
                epoch=epoch, step=state.step, train_loss=loss_sum / max(n, 1), train_accuracy=correct_sum / max(n, 1),
                val_loss=val_loss, val_accuracy=val_acc, lr=float(lr), seconds=time.perf_counter() - t0,
            ))
            if evaluate and self._after_evaluation(run):
                break
        return self._finish(run, train_seconds=train_seconds, pairs_seen=pairs_seen)

    def _train_members(self, pairs: PairSource, cfg: TrainConfig, *, resume: bool) -> TrainResult:
        """An ensemble (``ModelConfig.members`` > 1): member ``k`` trained apart by a Trainer of its own,
        training seed ``seed + k``, checkpoints (and resume) under ``checkpoint_dir/member-k``; then
        the ensemble is calibrated and evaluated on the validation pairs and given its reward statistics."""
        model, frame, results = self.model, training_pairs(pairs), []
        dist, rank_device = _start_distributed()  # one torchrun process group for every member
        try:
            for k in range(model.members):
                if dist.main:
                    log.info("ensemble member %d of %d: training seed %d", k + 1, model.members, cfg.seed + k)
                member = Trainer(
                    model.member(k),
                    config=with_overrides(cfg, {"seed": cfg.seed + k}, origin="Trainer.train(...)"),
                    checkpoint_dir=None if self.checkpoint_dir is None else self.checkpoint_dir / f"member-{k}",
                    callbacks=[_MemberCallback(cb, k, model) for cb in self.callbacks],
                    device=rank_device or self.device,
                    progress=self.progress,
                )
                result = member.train(frame, resume=resume)
                model.set_member(k, result.model)
                results.append(result)
            return self._finish_members(frame, cfg, results, rank_device or self.device, main=dist.main)
        finally:
            if dist.owns_group:
                torch.distributed.destroy_process_group()

    @torch.no_grad()
    def _finish_members(self, frame: pd.DataFrame, cfg: TrainConfig, results: list[TrainResult], device: torch.device | None,
                        *, main: bool) -> TrainResult:
        """Every rank calibrates and evaluates the ensemble on all the validation pairs, alike; rank 0 reports."""
        model, dist, first = self.model, _Dist(), results[0]
        device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model.to(device)
        train_df, val_df = split_pairs(frame, val_fraction=cfg.val_fraction, seed=cfg.seed, warn=False)
        train, val = _Encoded.of(train_df, model), _Encoded.of(val_df, model)
        temperature = None
        if cfg.calibrate and val is not None:
            kept = "each member's checkpoints are kept" if self.checkpoint_dir is not None else "no checkpoints were written"
            temperature = self._fit_temperature(model, val, cfg, dist, device, None, kept=lambda: kept)
        final_loss, final_acc = self._evaluate(model, val, cfg, device, dist, None)
        model.reward_mean, model.reward_std = self._reward_stats(model, val or train, device)
        seconds = sum(r.train_seconds for r in results)
        result = TrainResult(
            history=first.history, best_epoch=first.best_epoch, best_val_loss=first.best_val_loss,
            best_val_accuracy=first.best_val_accuracy, stopped_early=all(r.stopped_early for r in results),
            steps=sum(r.steps for r in results), train_pairs=first.train_pairs, val_pairs=first.val_pairs,
            train_seconds=seconds,
            pairs_per_second=sum(r.pairs_per_second * r.train_seconds for r in results) / seconds if seconds > 0 else 0.0,
            reward_mean=model.reward_mean, reward_std=model.reward_std, data_hash=first.data_hash,
            world_size=first.world_size, checkpoint_dir=None if self.checkpoint_dir is None else str(self.checkpoint_dir),
            averaged_epochs=first.averaged_epochs, final_val_loss=final_loss, final_val_accuracy=final_acc,
            temperature=temperature, members=results, model=model,
        )
        model.manifest = first.model.manifest | {
            "final_val_loss": final_loss,
            "final_val_accuracy": final_acc,
            "temperature": temperature,
            "train_config": cfg.model_dump(mode="json"),
            "members": [
                {"seed": cfg.seed + k, "epochs_run": len(r.history), "best_epoch": r.best_epoch,
                 "averaged_epochs": r.averaged_epochs, "final_val_loss": r.final_val_loss,
                 "final_val_accuracy": r.final_val_accuracy, "temperature": r.temperature}
                for k, r in enumerate(results)
            ],
        }
        if main:
            for cb in self.callbacks:
                cb.on_train_end(result)
        return result

    # -- before and after the loop -------------------------------------------------------------

    def _prepare(self, pairs: PairSource, cfg: TrainConfig, dist: _Dist, rank_device, *, resume: bool) -> _Run:
        """Device, pairs and their split, the start state (resumed or fresh), tokenizer, optimizer."""
        model = self.model
        device = rank_device or self.device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
        # checked before a fresh run removes the earlier run's checkpoints, which a failed start must keep
        autocast = self._autocast(cfg, device)
        if not any(p.requires_grad for p in model.parameters()):
            raise ConfigError(
                "the model has no trainable parameters (requires_grad is False everywhere); unfreeze the head, "
                "or train encoder layers with train_layers"
            )
        frame = training_pairs(pairs)
        train_df, val_df = split_pairs(frame, val_fraction=cfg.val_fraction, seed=cfg.seed, warn=dist.main)
        fingerprint = pairs_digest(frame)
        checkpoints = Checkpoints(self.checkpoint_dir)
        state = checkpoints.start(model, resume=resume, fingerprint=fingerprint, cfg=cfg, world=dist.world, main=dist.main)
        if not model.fitted:
            self._fit_tokenizer(model, train_df, dist)
        train, val = _Encoded.of(train_df, model), _Encoded.of(val_df, model)

        model.to(device)
        optimizer = torch.optim.AdamW(_param_groups(model, cfg.weight_decay), lr=cfg.lr)
        steps_per_epoch = len(_shard(task_batches(train.index, cfg.batch_size, seed=cfg.seed, epoch=1), dist, pad=True))
        total = steps_per_epoch * cfg.epochs
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, _lr_lambda(cfg.lr_schedule, round(cfg.warmup_ratio * total), total)
        )
        state.restore_optimizer(optimizer, schedule)
        net = self._wrap(model, dist, device)
        # a frozen encoder's features never change: compute them once, train the head on them
        frozen = not model.encoder_trainable
        run = _Run(
            cfg=cfg, dist=dist, device=device, autocast=autocast, frame=frame, train_df=train_df, val_df=val_df,
            fingerprint=fingerprint, train=train, val=val,
            train_features=self._features(train, device) if frozen else None,
            val_features=self._features(val, device) if frozen else None,
            net=net, params=[p for p in model.parameters() if p.requires_grad],
            optimizer=optimizer, schedule=schedule, state=state, checkpoints=checkpoints,
            average=_averager(model, state) if cfg.weight_average == "from_best" else None,
        )
        if dist.main:
            for cb in self.callbacks:
                cb.on_train_begin(self._params(run))
        return run

    def _after_evaluation(self, run: _Run) -> bool:
        """Early stopping, checkpoints and ``on_eval`` for the epoch just evaluated; True when the
        run stops here (patience ran out)."""
        state, record = run.state, run.state.history[-1]
        improved = state.observe(record, run.cfg)
        if improved:
            state.best_weights = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        if run.average is not None:  # the mean restarts at each new best evaluation
            if improved:
                run.average.n_averaged.zero_()
            run.average.update_parameters(self.model)
            state.average, state.averaged = dict(run.average.module.named_parameters()), int(run.average.n_averaged)
        state.stopped_early = state.bad_evals >= run.cfg.patience
        if run.dist.main:
            run.checkpoints.save(
                self.model, run.optimizer, run.schedule, state,
                fingerprint=run.fingerprint, cfg=run.cfg, world=run.dist.world, improved=improved,
            )
            for cb in self.callbacks:
                cb.on_eval(record, self.model)
        if run.checkpoints.enabled:
            state.checkpoint_epoch = record.epoch
        return state.stopped_early

    def _finish(self, run: _Run, *, train_seconds: float, pairs_seen: int) -> TrainResult:
        """Best weights back, reward statistics, the result and the model's manifest; ``on_train_end``."""
        model, state = self.model, run.state
        if run.average is not None and state.averaged:
            with torch.no_grad():
                for p, mean in zip(model.parameters(), run.average.module.parameters(), strict=True):
                    p.copy_(mean)
        elif run.cfg.restore_best:
            run.checkpoints.restore_best(model, state)
        temperature = self._calibrate(model, run) if run.cfg.calibrate else None
        final_loss, final_acc = self._evaluate(model, run.val, run.cfg, run.device, run.dist, run.val_features)
        model.reward_mean, model.reward_std = self._reward_stats(model, run.val or run.train, run.device)
        result = TrainResult(
            history=list(state.history),
            best_epoch=state.best_epoch,
            best_val_loss=state.best_val_loss,
            best_val_accuracy=state.best_val_accuracy,
            stopped_early=state.stopped_early,
            steps=state.step,
            train_pairs=len(run.train.index),
            val_pairs=0 if run.val is None else len(run.val.index),
            train_seconds=train_seconds,
            pairs_per_second=pairs_seen / train_seconds if train_seconds > 0 else 0.0,
            reward_mean=model.reward_mean,
            reward_std=model.reward_std,
            data_hash=run.fingerprint,
            world_size=run.dist.world,
            checkpoint_dir=None if self.checkpoint_dir is None else str(self.checkpoint_dir),
            averaged_epochs=state.averaged if run.average is not None else 0,
            final_val_loss=final_loss,
            final_val_accuracy=final_acc,
            temperature=temperature,
            model=model,
        )
        model.manifest = self._manifest(result, run)
        if run.dist.main:
            for cb in self.callbacks:
                cb.on_train_end(result)
        return result

    # -- one step ----------------------------------------------------------------------------

    def _loss(self, net, data: _Encoded, pair_ids, cfg: TrainConfig, device, features: Tensor | None) -> tuple[Tensor, Tensor]:
        """Mean BT loss of the pairs ``pair_ids`` and how many of them rank right."""
        r_chosen, r_rejected, s = self._pair_rewards(net, data, pair_ids, device, features)
        margin = torch.from_numpy(s.margin).to(device) if cfg.use_margin else None
        loss = bt_loss(r_chosen, r_rejected, margin, center_rewards_coefficient=cfg.center_rewards_coefficient)
        return loss, (r_chosen > r_rejected).sum()

    def _pair_rewards(self, net, data: _Encoded, pair_ids, device, features: Tensor | None):
        """The chosen and rejected rewards of the pairs ``pair_ids`` and their step inputs; each
        distinct candidate is encoded once and its reward gathered by every pair that uses it."""
        s = step_inputs(data.index, pair_ids)
        if features is not None:
            rewards = net(features[torch.from_numpy(s.candidates).to(device)])
        else:
            batch = self.model.pack(
                [data.prompt_ids[p] for p in s.prompts],
                [data.action_ids[a] for a in data.index.cand_action[s.candidates]],
                s.cand_prompt_local.tolist(),
            )
            rewards = net(batch.to(device))
        r_chosen = rewards[torch.from_numpy(s.chosen_pos).to(device)]
        r_rejected = rewards[torch.from_numpy(s.rejected_pos).to(device)]
        return r_chosen, r_rejected, s

    @torch.no_grad()
    def _evaluate(self, model, data: _Encoded | None, cfg, device, dist: _Dist, features) -> tuple[float | None, float | None]:
        if data is None:
            return None, None
        model.eval()
        sums = np.zeros(3)
        for pair_ids in _eval_batches(data, cfg, dist):
            loss, correct = self._loss(model, data, pair_ids, cfg, device, features)
            sums += (float(loss) * len(pair_ids), float(correct), len(pair_ids))
        loss_sum, correct_sum, n = dist.sum(list(sums), device)
        return loss_sum / n, correct_sum / n

    def _calibrate(self, model: BradleyTerryModel, run: _Run) -> float | None:
        """Scale the rewards by the inverse of the temperature fitted on the validation pairs
        (``TrainConfig.calibrate``) and return the temperature; None without validation pairs."""
        if run.val is None:
            return None
        return self._fit_temperature(model, run.val, run.cfg, run.dist, run.device, run.val_features,
                                     kept=lambda: run.checkpoints.kept(run.state))

    @torch.no_grad()
    def _fit_temperature(self, model: BradleyTerryModel, val: _Encoded, cfg: TrainConfig, dist: _Dist, device,
                         features: Tensor | None, *, kept: Callable[[], str]) -> float:
        model.eval()
        diffs = []
        for pair_ids in _eval_batches(val, cfg, dist):
            r_chosen, r_rejected, _ = self._pair_rewards(model, val, pair_ids, device, features)
            diffs.append((r_chosen - r_rejected).double().cpu().numpy())
        diffs = np.concatenate(diffs) if diffs else np.zeros(0)
        if not np.isfinite(diffs).all():
            raise TrainingError(
                f"the trained model gives non-finite rewards to {int((~np.isfinite(diffs)).sum())} validation pair(s); "
                f"{kept()}. Lower the learning rate or check the pairs."
            )
        scale = _inverse_temperature(diffs, dist, device)
        model.scale_rewards(scale)
        return 1.0 / scale

    # -- helpers -------------------------------------------------------------------------------

    @staticmethod
    def _fit_tokenizer(model: BradleyTerryModel, train_df: pd.DataFrame, dist: _Dist) -> None:
        """Fit the scratch tokenizer on the training texts; under torchrun rank 0 fits, all get its copy."""
        if dist.main:
            model.fit_tokenizer(list(dict.fromkeys([*train_df["prompt"], *train_df["chosen"], *train_df["rejected"]])))
        if dist.world > 1:
            box = [model.tokenizer.to_str() if dist.main else None]
            torch.distributed.broadcast_object_list(box, src=0)
            if not dist.main:
                model.tokenizer = tokenizer_from_json(box[0])

    @torch.no_grad()
    def _features(self, data: _Encoded | None, device) -> Tensor | None:
        """Pooled features of every candidate of a frozen encoder, computed once (eval mode)."""
        if data is None:
            return None
        model, out = self.model, []
        model.eval()
        idx = data.index
        for lo in range(0, idx.num_candidates, 256):
            cands = np.arange(lo, min(lo + 256, idx.num_candidates))
            prompts, local = np.unique(idx.cand_prompt[cands], return_inverse=True)
            batch = model.pack(
                [data.prompt_ids[p] for p in prompts], [data.action_ids[a] for a in idx.cand_action[cands]], local.reshape(-1).tolist()
            )
            out.append(model.features(batch.to(device)).float())
        return torch.cat(out)

    @torch.no_grad()
    def _reward_stats(self, model: BradleyTerryModel, data: _Encoded, device) -> tuple[float, float]:
        idx = data.index
        cands = np.arange(idx.num_candidates)
        if len(cands) > _STATS_SAMPLE:
            cands = np.sort(np.random.default_rng(self.config.seed).choice(cands, _STATS_SAMPLE, replace=False))
        prompts = [idx.prompts[p] for p in idx.cand_prompt[cands]]
        actions = [idx.actions[a] for a in idx.cand_action[cands]]
        rewards = model.score(prompts, actions, batch_size=128).double()
        std = float(rewards.std()) if len(rewards) > 1 else 1.0
        return float(rewards.mean()), std if std > 0 else 1.0

    def _wrap(self, model: nn.Module, dist: _Dist, device: torch.device) -> nn.Module:
        if dist.world == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)

    @staticmethod
    def _autocast(cfg: TrainConfig, device: torch.device):
        bf16 = cfg.precision == "bf16" or (
            cfg.precision == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported()
        )
        if bf16 and device.type != "cuda":
            raise ConfigError("precision='bf16' needs a CUDA device; use 'auto' or 'fp32' on CPU")
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    def _progress(self, steps, epoch: int, epochs: int, dist: _Dist):
        return progress_bar(steps, desc=f"epoch {epoch}/{epochs}", unit="step", enabled=self.progress and dist.main)

    def _diverged(self, what: str, epoch: int, run: _Run) -> TrainingError:
        """The error for a run gone non-finite (``what``: its loss, gradient or validation loss), naming the
        checkpoint this run can resume from."""
        lr = run.optimizer.param_groups[0]["lr"]
        return TrainingError(
            f"training diverged at epoch {epoch}: {what} (learning rate {lr:.3g}). Nothing of it was saved; "
            f"{run.checkpoints.kept(run.state)}. Lower the learning rate or check the pairs (margins, empty texts)."
        )

    def _params(self, run: _Run) -> dict[str, Any]:
        return {
            "model": self.model.config.model_dump(mode="json"),
            "train": run.cfg.model_dump(mode="json"),
            "data_hash": run.fingerprint,
            "pairs": len(run.frame),
            "train_pairs": len(run.train.index),
            "val_pairs": 0 if run.val is None else len(run.val.index),
            "train_candidates": run.train.index.num_candidates,
            # batch_size is per process: the optimiser step sees world_size times as many pairs
            "world_size": run.dist.world,
        }

    def _manifest(self, result: TrainResult, run: _Run) -> dict[str, Any]:
        from orchrm import __version__

        frame, train_df, val_df = run.frame, run.train_df, run.val_df
        return {
            "orchrm_version": __version__,
            "data_hash": result.data_hash,
            "train_pairs": result.train_pairs,
            "val_pairs": result.val_pairs,
            "train_tasks": int(train_df["task_id"].nunique()),
            "val_tasks": int(val_df["task_id"].nunique()) if len(val_df) else 0,
            "domains": {str(k): int(v) for k, v in frame["domain"].value_counts().sort_index().items()},
            "granularity": {str(k): int(v) for k, v in frame["granularity"].value_counts().sort_index().items()},
            "epochs_run": len(result.history),
            "best_epoch": result.best_epoch,
            "best_val_loss": result.best_val_loss,
            "best_val_accuracy": result.best_val_accuracy,
            "averaged_epochs": result.averaged_epochs,
            "final_val_loss": result.final_val_loss,
            "final_val_accuracy": result.final_val_accuracy,
            "temperature": result.temperature,
            "train_config": run.cfg.model_dump(mode="json"),
            INTERMEDIATE_FORMAT_KEY: _intermediate_format(frame),
        }


class _MemberCallback(TrainCallback):
    """A callback as an ensemble's member ``k`` reports to it: the run's parameters once (member 0's,
    with the ensemble's model config), step and epoch metrics under ``member_k.``, and no end (the
    ensemble reports its own)."""

    def __init__(self, callback: TrainCallback, k: int, ensemble: BradleyTerryModel) -> None:
        self.callback, self.k, self.ensemble = callback, k, ensemble

    def on_train_begin(self, params: Mapping[str, Any]) -> None:
        if self.k == 0:
            self.callback.on_train_begin({**params, "model": self.ensemble.config.model_dump(mode="json")})

    def on_log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.callback.on_log(step, {f"member_{self.k}.{name}": v for name, v in metrics.items()})

    def on_eval(self, record: EpochRecord, model: BradleyTerryModel) -> None:
        self.callback.on_log(record.epoch, {f"member_{self.k}.epoch.{name}": v for name, v in record.figures().items() if v is not None})


def _averager(model: BradleyTerryModel, state: LoopState) -> AveragedModel:
    """The running mean of ``model``'s weights over the evaluations from the best one on
    (``TrainConfig.weight_average``), holding a resumed run's mean and its count where the checkpoint had one."""
    average = AveragedModel(model, use_buffers=False)
    if state.average is not None:
        with torch.no_grad():
            for name, p in average.module.named_parameters():
                p.copy_(state.average[name])
        average.n_averaged.fill_(state.averaged)
    return average


def _eval_batches(data: _Encoded, cfg: TrainConfig, dist: _Dist) -> list[np.ndarray]:
    """This rank's share of ``data``'s pairs in evaluation batches: in order, unpadded."""
    return _shard(task_batches(data.index, max(cfg.batch_size, 64), seed=0, epoch=0, shuffle=False), dist, pad=False)


def _inverse_temperature(diffs: np.ndarray, dist: _Dist, device, *, bounds: tuple[float, float] = (1e-2, 1e2)) -> float:
    """The ``s`` in ``bounds`` that minimises ``sum(log(1 + exp(-s * d)))`` over every rank's
    reward differences ``d`` (chosen minus rejected): Newton's method on this convex function of
    one number, its gradient and curvature summed across ranks. 1.0 when the pairs say nothing
    (none, or every difference zero); a bound when every pair is ordered right (or every one wrong).

    >>> d = np.array([2.0, 2.0, 2.0, -2.0])  # 3 in 4 right: sigmoid(s * 2) = 0.75 at the optimum
    >>> round(float(1 / (1 + np.exp(-2 * _inverse_temperature(d, _Dist(), None)))), 4)
    0.75
    """
    lo, hi = bounds
    right, wrong = dist.sum([float(np.sum(diffs > 0)), float(np.sum(diffs < 0))], device)
    if right == 0 and wrong == 0:
        return 1.0
    if wrong == 0 or right == 0:  # the loss falls without end as the scale grows (shrinks): its bound
        return hi if wrong == 0 else lo
    s = 1.0
    for _ in range(200):
        z = s * diffs
        p = 0.5 * (1.0 + np.tanh(-0.5 * z))  # sigmoid(-z), stable
        grad, curve = dist.sum([float(np.sum(-diffs * p)), float(np.sum(diffs * diffs * p * (1.0 - p)))], device)
        step = grad / curve if curve > 0 else -np.sign(grad) * s
        new = float(np.clip(s - step, max(lo, s / 4), min(hi, s * 4)))
        if abs(new - s) <= 1e-9 * s:
            return new
        s = new
    return s


def _intermediate_format(frame: pd.DataFrame) -> str:
    """The format of the node-level pairs the model trained on, read from their texts
    (:func:`orchrm.model.texts.intermediate_format_of`), for the manifest: serving scores steps
    with it. A table without node-level pairs records ``node``, the default of ``pairs.intermediate_action``."""
    nodes = frame[frame["granularity"] == "node"]
    found = intermediate_format_of(nodes["prompt"].tolist(), nodes["chosen"].tolist(), nodes["rejected"].tolist())
    return found or LEGACY_INTERMEDIATE_FORMAT


# --------------------------------------------------------------------------------------------
# verbs


def fit(
    pairs: PairSource,
    model_config: ModelConfig | None = None,
    train_config: TrainConfig | None = None,
    *,
    model: BradleyTerryModel | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    callbacks: Sequence[TrainCallback] = (),
    resume: bool = False,
    progress: bool = True,
    device: str | torch.device | None = None,
) -> TrainResult:
    """Build a model from ``model_config`` (or take ``model``) and train it; ``result.model`` holds it."""
    train_config = train_config or TrainConfig()
    if model is None:
        # no lr given: the model's default, the one BradleyTerryModel() + Trainer train at
        model = BradleyTerryModel(config=model_config or ModelConfig(), **({"lr": train_config.lr} if train_config.lr else {}))
    trainer = Trainer(
        model, config=train_config, checkpoint_dir=checkpoint_dir, callbacks=callbacks, device=device, progress=progress
    )
    return trainer.train(pairs, resume=resume)


def train_from_file(
    pairs_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    model_config: ModelConfig,
    train_config: TrainConfig,
    resume: bool = False,
    overwrite: bool = False,
    callbacks: Sequence[TrainCallback] = (),
    progress: bool = True,
) -> TrainResult:
    """``orchrm train``: fit on a pair table, write ``out_dir/model.safetensors`` and
    ``out_dir/train_result.json`` (rank 0), checkpoints under ``out_dir/checkpoints``.

    A folder that already holds a model or a checkpoint is continued (``resume``) or replaced
    (``overwrite``), never replaced unasked; an output that cannot be written is refused before
    any training.
    """
    out = check_output_dir(out_dir)
    if not resume and not overwrite:
        earlier = [p for p in (out / MODEL_FILE, out / "checkpoints" / LAST_CHECKPOINT) if p.is_file()]
        if earlier:
            raise ConfigError(
                f"{out} already holds a trained model ({earlier[0]}): continue its run with --resume, replace "
                "it with --overwrite, or choose another --out"
            )
    result = fit(
        pairs_path,
        model_config,
        train_config,
        checkpoint_dir=out / "checkpoints",
        callbacks=callbacks,
        resume=resume,
        progress=progress,
    )
    result.model_path = str(out / MODEL_FILE)
    if int(os.environ.get("RANK", "0")) == 0:
        result.model.save(out / MODEL_FILE)
        payload = json.dumps(result.to_dict(), indent=2).encode()
        atomic_write_bytes(out / "train_result.json", lambda tmp: Path(tmp).write_bytes(payload))
    return result
