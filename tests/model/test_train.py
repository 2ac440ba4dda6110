"""Trainer: learning, determinism, checkpoints and exact resume, divergence, small data, CLI."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch

from orchrm import BradleyTerryModel, Trainer
from orchrm.cli import main as cli_main
from orchrm.config import ModelConfig, TrainConfig
from orchrm.data.pair_reader import read_pairs, task_id_of
from orchrm.data.tables import pairs_digest, write_table
from orchrm.data.validation import validate_files
from orchrm.errors import ConfigError, TraceSchemaError, TrainingError
from orchrm.model.batching import training_pairs
from orchrm.model.callbacks import TrainCallback
from orchrm.model.reward_model import ModelFile
from orchrm.model.texts import task_text
from orchrm.model.trainer import LAST_CHECKPOINT, TrainResult, fit

SMALL = dict(batch_size=16, lr=3e-3, progress=False)


def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def small_pairs(pairs):
    """8 training and 3 validation tasks of the synthetic pairs (loop tests take a second or two)."""
    tasks = pairs.groupby("split")["task_id"].unique()
    keep = set(sorted(tasks["train"])[:8]) | set(sorted(tasks["val"])[:3])
    return pairs[pairs["task_id"].isin(keep)].reset_index(drop=True)


def test_training_lowers_the_loss_and_changes_every_trainable_parameter(small_pairs, tiny_model_kwargs):
    model = BradleyTerryModel(**tiny_model_kwargs)
    model.fit_tokenizer(list(small_pairs["prompt"]) + list(small_pairs["chosen"]) + list(small_pairs["rejected"]))
    before = _weights(model)
    result = Trainer(model=model, **SMALL).train(pairs=small_pairs, epochs=6)
    assert isinstance(result, TrainResult) and len(result.history) == 6
    assert result.losses[-1] < 0.5 * result.losses[0]
    assert result.val_losses[-1] < result.val_losses[0] and result.val_accuracies[-1] > 0.8
    for name, p in model.named_parameters():
        assert p.requires_grad and not torch.equal(p.detach(), before[name]), f"{name} did not change"
    assert result.pairs_per_second > 0 and result.steps > 0
    assert "val_loss" in str(result) and "best epoch" in str(result)


def test_same_seed_same_model(small_pairs, tiny_model_kwargs):
    kwargs = tiny_model_kwargs | {"dropout": 0.1}  # dropout makes the RNG matter
    runs = []
    for _ in range(2):
        model = BradleyTerryModel(**kwargs)
        Trainer(model=model, **SMALL).train(pairs=small_pairs, epochs=2)
        runs.append(_weights(model))
    for k in runs[0]:
        assert torch.equal(runs[0][k], runs[1][k]), k


class _Crash(TrainCallback):
    """Simulates a killed job right after the checkpoint of epoch ``at``."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_eval(self, record, model):
        if record.epoch == self.at:
            raise KeyboardInterrupt


def test_resume_from_checkpoint_reproduces_an_uninterrupted_run(small_pairs, tiny_model_kwargs, tmp_path):
    kwargs = tiny_model_kwargs | {"dropout": 0.1}
    settings = SMALL | {"patience": 10}
    full = BradleyTerryModel(**kwargs)
    full_result = Trainer(model=full, checkpoint_dir=tmp_path / "full", **settings).train(pairs=small_pairs, epochs=4)

    crashed = BradleyTerryModel(**kwargs)
    with pytest.raises(KeyboardInterrupt):
        Trainer(model=crashed, checkpoint_dir=tmp_path / "resumed", callbacks=[_Crash(at=2)], **settings).train(
            pairs=small_pairs, epochs=4
        )
    resumed = BradleyTerryModel(**kwargs)  # a fresh process: unfitted tokenizer, new weights
    result = Trainer(model=resumed, checkpoint_dir=tmp_path / "resumed", **settings).train(
        pairs=small_pairs, epochs=4, resume=True
    )
    for k, v in _weights(full).items():
        assert torch.equal(v, resumed.state_dict()[k]), k
    strip = lambda rs: [(r.epoch, r.step, r.train_loss, r.train_accuracy, r.val_loss, r.val_accuracy, r.lr) for r in rs]  # noqa: E731
    assert strip(result.history) == strip(full_result.history)
    assert result.best_epoch == full_result.best_epoch


def test_resume_refuses_other_pairs_or_settings(small_pairs, pairs, tiny_model_kwargs, tmp_path):
    Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path, **SMALL).train(pairs=small_pairs, epochs=1)
    with pytest.raises(TrainingError, match="trained on other pairs"):
        Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path, **SMALL).train(
            pairs=pairs, epochs=2, resume=True
        )
    with pytest.raises(TrainingError, match="batch_size=16, now batch_size=8"):
        Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path, **(SMALL | {"batch_size": 8})).train(
            pairs=small_pairs, epochs=2, resume=True
        )
    # another validation share would re-split the tasks: pairs trained on would be validated on
    with pytest.raises(TrainingError, match="val_fraction=0.1, now val_fraction=0.5"):
        Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path, **(SMALL | {"val_fraction": 0.5})).train(
            pairs=small_pairs, epochs=2, resume=True
        )


class _LrLog(TrainCallback):
    """The learning rate of every logged step (use with ``log_interval=1``)."""

    def __init__(self) -> None:
        self.lrs = []

    def on_log(self, step, metrics):
        self.lrs.append(metrics["lr"])


def _linear_factor(step: int, total: int, warmup: int) -> float:
    """The default schedule by hand: linear warmup over ``warmup`` steps, then linear decay to 0 at ``total``."""
    return (step + 1) / (warmup + 1) if step < warmup else 1 - (step - warmup) / (total - warmup)


def test_the_learning_rate_reported_is_the_one_the_step_trained_at(small_pairs, tiny_model_kwargs):
    log = _LrLog()
    result = Trainer(model=BradleyTerryModel(**tiny_model_kwargs), callbacks=[log], log_interval=1, **SMALL).train(
        pairs=small_pairs, epochs=2
    )
    total = result.steps
    used = [3e-3 * _linear_factor(s, total, round(0.1 * total)) for s in range(total)]
    assert log.lrs == pytest.approx(used, rel=1e-12)
    # an epoch's lr is its last step's: the final epoch trained at a rate above 0
    assert [r.lr for r in result.history] == pytest.approx([used[r.step - 1] for r in result.history], rel=1e-12)
    assert result.history[-1].lr > 0


def test_resume_with_more_epochs_trains_on_the_longer_schedule_from_its_first_step(small_pairs, tiny_model_kwargs, tmp_path):
    short = Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path, **SMALL).train(
        pairs=small_pairs, epochs=2
    )
    done = short.steps  # the 2-epoch schedule ended at lr 0
    log = _LrLog()
    longer = Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path, callbacks=[log], log_interval=1,
                     **SMALL).train(pairs=small_pairs, epochs=4, resume=True)
    total = longer.steps
    assert total == 2 * done
    assert log.lrs == pytest.approx([3e-3 * _linear_factor(s, total, round(0.1 * total)) for s in range(done, total)], rel=1e-12)
    assert log.lrs[0] > 0


def _store_lr_as_none(checkpoint):
    """Rewrite a checkpoint as one written before the Trainer recorded the lr it took from the model."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(checkpoint), framework="pt") as f:
        metadata = f.metadata()
    state = json.loads(metadata["trainer_state"])
    state["train_config"]["lr"] = None
    save_file(load_file(checkpoint), checkpoint, metadata=metadata | {"trainer_state": json.dumps(state)})


def test_a_learning_rate_from_the_model_is_recorded_and_checked_on_resume(small_pairs, tiny_model_kwargs, tmp_path):
    settings = dict(batch_size=16, progress=False)  # no lr: the model's is used
    Trainer(model=BradleyTerryModel(lr=3e-3, **tiny_model_kwargs), checkpoint_dir=tmp_path, **settings).train(
        pairs=small_pairs, epochs=1
    )
    last = tmp_path / LAST_CHECKPOINT
    assert json.loads(ModelFile(last).metadata["trainer_state"])["train_config"]["lr"] == 3e-3
    faster = BradleyTerryModel(lr=0.3, **tiny_model_kwargs)
    with pytest.raises(TrainingError, match=r"used lr=0.003, now lr=0.3; resume needs the same settings"):
        Trainer(model=faster, checkpoint_dir=tmp_path, **settings).train(pairs=small_pairs, epochs=2, resume=True)
    # a checkpoint that stored no lr is checked against the lr its optimizer trained at
    _store_lr_as_none(last)
    with pytest.raises(TrainingError, match=r"used lr=0.003, now lr=0.3"):
        Trainer(model=faster, checkpoint_dir=tmp_path, **settings).train(pairs=small_pairs, epochs=2, resume=True)
    resumed = BradleyTerryModel(lr=3e-3, **tiny_model_kwargs)
    result = Trainer(model=resumed, checkpoint_dir=tmp_path, **settings).train(pairs=small_pairs, epochs=2, resume=True)
    assert [r.epoch for r in result.history] == [1, 2] and resumed.manifest["train_config"]["lr"] == 3e-3


def _contradicting_validation(pairs):
    """Validation pairs whose labels contradict the training signal: val loss rises as training works."""
    flipped = pairs.copy()
    val = flipped["split"] == "val"
    flipped.loc[val, ["chosen", "rejected"]] = flipped.loc[val, ["rejected", "chosen"]].to_numpy()
    return flipped


def test_a_run_that_stopped_early_stays_stopped_when_resumed(small_pairs, tiny_model_kwargs, tmp_path):
    flipped = _contradicting_validation(small_pairs)
    settings = SMALL | {"patience": 2}
    full_model = BradleyTerryModel(**tiny_model_kwargs)
    full = Trainer(model=full_model, checkpoint_dir=tmp_path / "full", **settings).train(pairs=flipped, epochs=12)
    assert full.stopped_early
    stop = len(full.history)
    # killed right after the checkpoint of the epoch that stopped it
    with pytest.raises(KeyboardInterrupt):
        Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path / "killed", callbacks=[_Crash(at=stop)],
                **settings).train(pairs=flipped, epochs=12)
    resumed_model = BradleyTerryModel(**tiny_model_kwargs)
    resumed = Trainer(model=resumed_model, checkpoint_dir=tmp_path / "killed", **settings).train(
        pairs=flipped, epochs=12, resume=True
    )
    assert resumed.stopped_early and [r.epoch for r in resumed.history] == list(range(1, stop + 1))
    assert resumed.steps == full.steps and resumed.best_epoch == full.best_epoch
    for k, v in _weights(full_model).items():
        assert torch.equal(v, resumed_model.state_dict()[k]), k
    # and resuming a run that has finished trains nothing further
    again = Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path / "full", **settings).train(
        pairs=flipped, epochs=12, resume=True
    )
    assert len(again.history) == stop and again.steps == full.steps


def test_patience_running_out_at_the_last_epoch_stops_the_run_for_good(small_pairs, tiny_model_kwargs, tmp_path):
    settings = SMALL | {"patience": 2}
    flipped = _contradicting_validation(small_pairs)  # validation loss only rises after epoch 1
    result = Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path, **settings).train(
        pairs=flipped, epochs=3
    )
    assert result.stopped_early and len(result.history) == 3
    assert "patience ran out at epoch 3" in str(result)
    # an uninterrupted 6-epoch run would have stopped after epoch 3 too
    longer = Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path, **settings).train(
        pairs=flipped, epochs=6, resume=True
    )
    assert longer.stopped_early and len(longer.history) == 3 and longer.steps == result.steps


class _Poison(TrainCallback):
    """After the checkpoint of epoch 1, corrupt a weight the way a diverging update would."""

    def __init__(self, checkpoint):
        self.checkpoint = checkpoint
        self.saved = None

    def on_eval(self, record, model):
        self.saved = self.checkpoint.read_bytes()
        with torch.no_grad():
            model.head[3].weight.fill_(float("nan"))


def test_nan_loss_stops_with_an_error_and_keeps_the_last_good_checkpoint(small_pairs, tiny_model_kwargs, tmp_path):
    poison = _Poison(tmp_path / LAST_CHECKPOINT)
    model = BradleyTerryModel(**tiny_model_kwargs)
    with pytest.raises(TrainingError, match=r"diverged at epoch 2.*last good checkpoint is kept.*epoch 1"):
        Trainer(model=model, checkpoint_dir=tmp_path, callbacks=[poison], **SMALL).train(pairs=small_pairs, epochs=3)
    assert (tmp_path / LAST_CHECKPOINT).read_bytes() == poison.saved
    good = BradleyTerryModel.load(tmp_path / LAST_CHECKPOINT)  # a checkpoint is also a model file
    assert torch.isfinite(good.score(small_pairs["prompt"][:4].tolist(), small_pairs["chosen"][:4].tolist())).all()


class _PoisonNextEpochEnd(TrainCallback):
    """After an evaluated epoch, corrupt a weight on the last update of the epoch after it."""

    def __init__(self, model) -> None:
        self.model, self.at, self.saved = model, None, {}

    def on_eval(self, record, model):
        self.at = record.step // record.epoch * (record.epoch + 1)

    def on_log(self, step, metrics):
        if step == self.at:
            with torch.no_grad():
                self.model.head[3].weight.fill_(float("nan"))


def test_divergence_names_the_epoch_of_the_checkpoint_it_keeps(small_pairs, tiny_model_kwargs, tmp_path):
    # evaluated (and checkpointed) every 2 epochs; poisoned at the end of epoch 3: diverges in epoch 4
    model = BradleyTerryModel(**tiny_model_kwargs)
    poison = _PoisonNextEpochEnd(model)
    with pytest.raises(TrainingError, match=r"diverged at epoch 4: loss nan.*kept at .*\(epoch 2\)"):
        Trainer(model=model, checkpoint_dir=tmp_path, callbacks=[poison], log_interval=1, **SMALL).train(
            pairs=small_pairs, epochs=4, eval_interval=2
        )
    state = json.loads(ModelFile(tmp_path / LAST_CHECKPOINT).metadata["trainer_state"])
    assert state["epoch"] == 2


def test_a_nan_validation_loss_stops_before_the_checkpoint_is_overwritten(small_pairs, tiny_model_kwargs, tmp_path):
    model = BradleyTerryModel(**tiny_model_kwargs)
    poison = _PoisonNextEpochEnd(model)  # the weights go bad on the last update of epoch 2, before its evaluation
    with pytest.raises(TrainingError, match=r"diverged at epoch 2: validation loss nan.*kept at .*\(epoch 1\)"):
        Trainer(model=model, checkpoint_dir=tmp_path, callbacks=[poison], log_interval=1, **SMALL).train(
            pairs=small_pairs, epochs=4
        )
    resumed = Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path, **SMALL).train(
        pairs=small_pairs, epochs=2, resume=True
    )
    assert [r.epoch for r in resumed.history] == [1, 2] and all(math.isfinite(r.val_loss) for r in resumed.history)


def test_early_stopping_restores_the_best_weights(small_pairs, tiny_model_kwargs):
    flipped = _contradicting_validation(small_pairs)
    val = flipped["split"] == "val"
    model = BradleyTerryModel(**tiny_model_kwargs)
    result = Trainer(model=model, patience=2, monitor="val_loss", weight_average="none", calibrate=False, **SMALL).train(pairs=flipped, epochs=12)
    assert result.stopped_early and len(result.history) < 12
    assert result.best_epoch == min(range(len(result.history)), key=lambda i: result.history[i].val_loss) + 1
    val_rows = flipped[val]
    prompts, chosen, rejected = val_rows["prompt"].tolist(), val_rows["chosen"].tolist(), val_rows["rejected"].tolist()
    r_c, r_r = model.score(prompts, chosen), model.score(prompts, rejected)
    margin = torch.tensor(val_rows["margin"].to_numpy(), dtype=torch.float32)
    best_loss = torch.nn.functional.softplus(-(r_c - r_r - margin)).mean().item()
    assert best_loss == pytest.approx(result.best_val_loss, rel=1e-4)


def test_monitor_val_accuracy_keeps_the_epoch_that_ranks_validation_pairs_best(small_pairs, tiny_model_kwargs):
    model = BradleyTerryModel(**tiny_model_kwargs)
    result = Trainer(model=model, patience=3, monitor="val_accuracy", weight_average="none", **SMALL).train(pairs=small_pairs, epochs=6)
    accuracies = [r.val_accuracy for r in result.history]
    first_best = accuracies.index(max(accuracies)) + 1  # ties keep the earlier epoch
    assert result.best_epoch == first_best and result.best_val_accuracy == max(accuracies)
    val_rows = small_pairs[small_pairs["split"] == "val"]
    r_c = model.score(val_rows["prompt"].tolist(), val_rows["chosen"].tolist())
    r_r = model.score(val_rows["prompt"].tolist(), val_rows["rejected"].tolist())
    assert (r_c > r_r).float().mean().item() == pytest.approx(result.best_val_accuracy)


def test_the_model_is_the_mean_of_the_weights_from_the_best_epoch_on_and_reports_its_own_validation_figures(small_pairs, tiny_model_kwargs):
    class Snapshots(TrainCallback):
        def __init__(self):
            self.weights = []

        def on_eval(self, record, model):
            self.weights.append({k: v.detach().clone() for k, v in model.named_parameters()})

    flipped = _contradicting_validation(small_pairs)  # the validation loss is lowest early, then rises
    snapshots = Snapshots()
    model = BradleyTerryModel(**tiny_model_kwargs)
    result = Trainer(model=model, patience=10, callbacks=[snapshots], calibrate=False, **SMALL).train(pairs=flipped, epochs=4)
    averaged = snapshots.weights[result.best_epoch - 1:]
    assert result.best_epoch < 4 and result.averaged_epochs == len(averaged) == 5 - result.best_epoch
    for name, p in model.named_parameters():
        assert torch.allclose(p, sum(w[name] for w in averaged) / len(averaged), atol=1e-6), name
    assert not any(torch.equal(p, snapshots.weights[result.best_epoch - 1][name]) for name, p in model.named_parameters())
    val_rows = flipped[flipped["split"] == "val"]
    r_c = model.score(val_rows["prompt"].tolist(), val_rows["chosen"].tolist())
    r_r = model.score(val_rows["prompt"].tolist(), val_rows["rejected"].tolist())
    assert (r_c > r_r).float().mean().item() == pytest.approx(result.final_val_accuracy)
    assert model.manifest["averaged_epochs"] == result.averaged_epochs
    assert f"the mean of the weights of {result.averaged_epochs} epoch(s), {result.best_epoch} to 4" in str(result)


def test_a_new_best_epoch_restarts_the_mean(small_pairs, tiny_model_kwargs):
    result = Trainer(model=BradleyTerryModel(**tiny_model_kwargs), patience=10, **SMALL).train(pairs=small_pairs, epochs=3)
    assert result.averaged_epochs == 4 - result.best_epoch
    none = Trainer(model=BradleyTerryModel(**tiny_model_kwargs), patience=10, weight_average="none", calibrate=False,
                   **SMALL).train(pairs=small_pairs, epochs=3)
    assert none.averaged_epochs == 0 and none.final_val_loss == pytest.approx(none.best_val_loss)


def _nll(diffs: torch.Tensor) -> float:
    """The validation pairs' Bradley-Terry loss without margins."""
    return float(-torch.nn.functional.logsigmoid(diffs.double()).mean())


def test_calibration_divides_the_rewards_by_the_temperature_that_best_fits_the_validation_pairs(small_pairs, tiny_model_kwargs):
    val_rows = small_pairs[small_pairs["split"] == "val"]
    prompts = val_rows["prompt"].tolist()

    def diffs(model):
        return model.score(prompts, val_rows["chosen"].tolist()) - model.score(prompts, val_rows["rejected"].tolist())

    raw_model, calibrated_model = BradleyTerryModel(**tiny_model_kwargs), BradleyTerryModel(**tiny_model_kwargs)
    raw = Trainer(model=raw_model, calibrate=False, **SMALL).train(pairs=small_pairs, epochs=4)
    calibrated = Trainer(model=calibrated_model, **SMALL).train(pairs=small_pairs, epochs=4)
    assert raw.temperature is None and "calibrated" not in str(raw)
    t = calibrated.temperature
    assert t is not None and math.isfinite(t) and t > 0 and t != 1.0
    # the same weights but the head's scale: every reward divided by T, so no ranking changes
    texts = (prompts, val_rows["chosen"].tolist())
    assert torch.allclose(calibrated_model.score(*texts), raw_model.score(*texts) / t, rtol=1e-4, atol=1e-5)
    assert calibrated.final_val_accuracy == pytest.approx(raw.final_val_accuracy)
    # T is the best temperature for these pairs: 10% either way fits them worse
    d = diffs(calibrated_model)
    assert _nll(d) < min(_nll(d * 1.1), _nll(d / 1.1))
    assert _nll(d) <= _nll(diffs(raw_model))
    assert calibrated_model.manifest["temperature"] == pytest.approx(t)
    assert f"rewards divided by temperature {t:.3f}" in str(calibrated)


def test_the_temperature_of_pairs_that_say_nothing_or_everything():
    from orchrm.model.trainer import _Dist, _inverse_temperature

    assert _inverse_temperature(np.zeros(0), _Dist(), None) == 1.0
    assert _inverse_temperature(np.zeros(5), _Dist(), None) == 1.0
    # every pair ordered right: the loss falls without end as the scale grows; the scale stops at its bound
    assert _inverse_temperature(np.array([0.5, 1.0, 2.0]), _Dist(), None) == pytest.approx(100.0)
    assert _inverse_temperature(np.array([-0.5, 0.0, -2.0]), _Dist(), None) == pytest.approx(0.01)
    # three right, one as wrong: sigmoid(s * d) = 0.75 at the optimum, whatever the scale of d
    for scale in (0.1, 1.0, 30.0):
        s = _inverse_temperature(scale * np.array([1.0, 1.0, 1.0, -1.0]), _Dist(), None)
        assert 1 / (1 + math.exp(-s * scale)) == pytest.approx(0.75, abs=1e-6)


def test_a_model_that_ends_with_non_finite_rewards_is_not_calibrated_but_named(small_pairs, tiny_model_kwargs):
    class Spoil(TrainCallback):  # the last epoch's weights go bad after its checkpoint was written
        def on_eval(self, record, model):
            if record.epoch == 2:
                with torch.no_grad():
                    model.head[-1].bias.fill_(math.nan)

    model = BradleyTerryModel(**tiny_model_kwargs)
    trainer = Trainer(model=model, weight_average="none", restore_best=False, callbacks=[Spoil()], **SMALL)
    with pytest.raises(TrainingError, match=r"non-finite rewards to \d+ validation pair"):
        trainer.train(pairs=small_pairs, epochs=2)


def test_the_reward_scale_must_be_positive(tiny_model_kwargs):
    model = BradleyTerryModel(**tiny_model_kwargs)
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="finite positive"):
            model.scale_rewards(bad)


def test_callbacks_see_the_run(small_pairs, tiny_model_kwargs):
    class Recorder(TrainCallback):
        def __init__(self):
            self.events = []

        def on_train_begin(self, params):
            self.events.append(("begin", params["train_pairs"], params["data_hash"]))

        def on_log(self, step, metrics):
            self.events.append(("log", step, sorted(metrics)))

        def on_eval(self, record, model):
            self.events.append(("eval", record.epoch))

        def on_train_end(self, result):
            self.events.append(("end", result.best_epoch))

    rec = Recorder()
    result = Trainer(model=BradleyTerryModel(**tiny_model_kwargs), callbacks=[rec], log_interval=2, **SMALL).train(
        pairs=small_pairs, epochs=2
    )
    kinds = [e[0] for e in rec.events]
    assert kinds[0] == "begin" and kinds[-1] == "end" and kinds.count("eval") == 2
    assert rec.events[0][1] == result.train_pairs and rec.events[0][2] == result.data_hash
    assert ("log", 2, ["grad_norm", "loss", "lr"]) in rec.events


def test_progress_written_to_a_log_is_a_line_per_epoch(small_pairs, tiny_model_kwargs, capsys):
    """Not a terminal (CI, `make demo > log`): one line per epoch, no redrawn bar per step."""
    Trainer(model=BradleyTerryModel(**tiny_model_kwargs), batch_size=16, lr=3e-3, progress=True).train(pairs=small_pairs, epochs=3)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in lines] == ["epoch 1/3", "epoch 2/3", "epoch 3/3"]
    assert "\r" not in err and " step (" in lines[0]


def test_eval_interval_skips_validation_but_always_validates_the_last_epoch(small_pairs, tiny_model_kwargs):
    result = Trainer(model=BradleyTerryModel(**tiny_model_kwargs), **SMALL).train(pairs=small_pairs, epochs=3, eval_interval=2)
    assert [r.val_loss is not None for r in result.history] == [False, True, True]


# --- data shapes ---------------------------------------------------------------------------------


def test_design_section_12_call_on_a_few_pairs_of_one_task(tmp_path, monkeypatch):
    """A handful of list-of-dict pairs of one task (what one executor run yields) trains and saves."""
    q = "Solve: integral of x^2 from 0 to 1"
    plans = ['<agent id="a1" type="CoT" model="small"/>', '<agent id="a1" type="SelfConsistency" model="large" k="5"/>',
             '<agent id="a1" type="Reflexion" model="large" iterations="2"/>']
    win_loss_pairs = [dict(prompt=q, chosen=plans[1], rejected=plans[0], margin=0.5),
                      dict(prompt=q, chosen=plans[2], rejected=plans[0], margin=0.3)]
    model = BradleyTerryModel(hidden_dim=32, num_layers=1, num_heads=2, lr=1e-3)
    trainer = Trainer(model=model, batch_size=32, progress=False)
    result = trainer.train(pairs=win_loss_pairs, epochs=10, eval_interval=1)
    assert result.train_pairs == 2 and result.val_pairs == 0 and result.best_val_loss is None
    monkeypatch.chdir(tmp_path)
    model.save("orchrm_reward_model.pt")
    loaded = BradleyTerryModel.load("orchrm_reward_model.pt")
    scores = loaded.score(q, plans)
    assert scores[1] > scores[0] and scores[2] > scores[0]


def test_zero_pairs_is_a_clear_error(tiny_model_kwargs):
    empty = pd.DataFrame(columns=["prompt", "chosen", "rejected"])
    with pytest.raises(TraceSchemaError, match="no pairs to train on"):
        Trainer(model=BradleyTerryModel(**tiny_model_kwargs), progress=False).train(pairs=empty)
    with pytest.raises(TraceSchemaError, match="no pairs to train on"):
        Trainer(model=BradleyTerryModel(**tiny_model_kwargs), progress=False).train(pairs=[])


def test_not_a_pair_table_or_an_absent_gpu_is_a_clear_error(tiny_model_kwargs):
    with pytest.raises(TraceSchemaError, match="pairs must be a pair table .*, not NoneType"):
        Trainer(model=BradleyTerryModel(**tiny_model_kwargs), progress=False).train(pairs=None)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="sees no CUDA GPU"):
            Trainer(model=BradleyTerryModel(**tiny_model_kwargs), device="cuda:7")


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([dict(prompt="q", chosen="a")], "not a pair table: lacks rejected"),
        ([dict(prompt="q", chosen="a", rejected="a")], "chosen == rejected"),
        ([dict(prompt="q", chosen="a", rejected="b", margin=float("nan"))], "finite number"),
        ([dict(prompt="q", chosen="a", rejected="b", margin=1e39)], r"finite number >= 0 \(and within float32\); rows \[0\]"),
        ([dict(prompt="q", chosen="a", rejected="b", split=None)], r"'split' must be one of \['train', 'val', 'test'\]"),
        ([dict(prompt="q", chosen="a", rejected="b", split="validation")], "'validation'"),
    ],
)
def test_bad_pair_tables_name_the_problem(rows, message, tiny_model_kwargs):
    with pytest.raises(TraceSchemaError, match=message):
        Trainer(model=BradleyTerryModel(**tiny_model_kwargs), progress=False).train(pairs=rows)


def test_pairs_without_a_train_split_train_on_every_row_with_a_warning(tiny_model_kwargs, caplog):
    rows = [dict(task_id="t1", prompt="q", chosen=f"plan a {i}", rejected="plan c d", split="test", margin=0.2) for i in range(3)]
    with caplog.at_level("WARNING", logger="orchrm.model.trainer"):
        result = Trainer(model=BradleyTerryModel(**tiny_model_kwargs), progress=False).train(pairs=rows, epochs=1)
    assert result.train_pairs == 3 and "no pairs with split == 'train'" in caplog.text
    assert "all 3 pairs count as training pairs, less the val_fraction=0.1 of their tasks held out" in caplog.text


def test_a_pair_without_a_task_id_belongs_to_its_questions_task(small_pairs, tiny_model_kwargs):
    rows = small_pairs.copy()
    node = rows.index[rows["granularity"] == "node"][:3]
    rows.loc[node, "task_id"] = None
    frame = training_pairs(rows)
    assert frame["task_id"].notna().all() and "nan" not in set(frame["task_id"])
    # a node pair's prompt is its question plus a plan prefix: its task is the question's
    assert frame.loc[node, "task_id"].tolist() == [task_id_of(p.split("\n")[0]) for p in rows.loc[node, "prompt"]]
    result = Trainer(model=BradleyTerryModel(**tiny_model_kwargs), **SMALL).train(pairs=rows, epochs=1)
    assert result.train_pairs + result.val_pairs == len(rows)


def test_a_table_without_splits_is_split_by_task_and_test_tasks_are_never_trained_on(small_pairs, tiny_model_kwargs):
    own = small_pairs[["prompt", "chosen", "rejected", "source"]].rename(columns={"prompt": "input"})
    split = read_pairs(own)["split"]
    assert set(split) == {"train", "val", "test"}  # the fixture's tasks hash into all three
    result = Trainer(model=BradleyTerryModel(**tiny_model_kwargs), **SMALL).train(pairs=own, epochs=1)
    assert (result.train_pairs, result.val_pairs) == ((split == "train").sum(), (split == "val").sum())


@pytest.mark.parametrize("fmt", ["trl", "orchrm-dataset"])
def test_validate_and_train_read_a_pair_file_the_same_way(fmt, small_pairs, tiny_model_kwargs, tmp_path):
    """One reader (issue 14): every pair gets the same task, split and margin in `orchrm validate`
    and in training. Node pairs' prompts carry a plan prefix; read as tasks of their own, a
    question's node pairs could train while its plan pairs validated."""
    if fmt == "trl":
        foreign = small_pairs[["prompt", "chosen", "rejected", "margin"]]
    else:
        foreign = small_pairs[["prompt", "chosen", "rejected", "source"]].rename(columns={"prompt": "input"})
    path = write_table(foreign, tmp_path / "pairs.jsonl")
    read = read_pairs(path)  # what `orchrm validate` checks
    by_question = read.groupby(read["prompt"].map(task_text))
    assert (by_question["task_id"].nunique() == 1).all() and (by_question["split"].nunique() == 1).all()
    assert read["task_id"].nunique() == small_pairs["task_id"].nunique()
    report = validate_files(pairs=path, out_dir=tmp_path / "validation")
    assert report.success and report.rows == {"pairs": len(read)}

    result = fit(path, ModelConfig(**tiny_model_kwargs), TrainConfig(epochs=1, batch_size=16, lr=3e-3), progress=False)
    # the data hash covers each row's task_id, prompt, chosen, rejected, margin and split
    assert result.data_hash == pairs_digest(read)
    assert result.train_pairs == (read["split"] == "train").sum()
    assert result.model.manifest["train_tasks"] == read.loc[read["split"] == "train", "task_id"].nunique()
    # Trainer.train(pairs=<row dicts>) reads them the same way too
    assert pairs_digest(training_pairs(foreign.to_dict("records"))) == result.data_hash


def test_bad_trainer_settings_name_the_field(tiny_model_kwargs):
    with pytest.raises(ConfigError, match="batch_size"):
        Trainer(model=BradleyTerryModel(**tiny_model_kwargs), batch_size=0)
    with pytest.raises(ConfigError, match="seed"):  # numpy's generators take no negative seed
        Trainer(model=BradleyTerryModel(**tiny_model_kwargs), seed=-1)
    with pytest.raises(ConfigError, match="lr"):  # would only fail after a step, as a divergence
        Trainer(model=BradleyTerryModel(**tiny_model_kwargs), lr=float("inf"))
    with pytest.raises(ConfigError, match="needs a CUDA device"):
        Trainer(model=BradleyTerryModel(**tiny_model_kwargs), precision="bf16", device="cpu", progress=False).train(
            pairs=[dict(prompt="q", chosen="a b", rejected="c d")]
        )


def test_frozen_encoder_trains_only_the_head_on_cached_features(small_pairs, tiny_model_kwargs):
    model = BradleyTerryModel(**tiny_model_kwargs, train_layers=0)
    model.fit_tokenizer(list(small_pairs["prompt"]) + list(small_pairs["chosen"]) + list(small_pairs["rejected"]))
    before = _weights(model)
    result = Trainer(model=model, **SMALL).train(pairs=small_pairs, epochs=3)
    assert result.losses[-1] < result.losses[0]
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]) == name.startswith("encoder."), name


def test_fit_verb_builds_the_model_from_configs(small_pairs, tiny_model_kwargs):
    result = fit(small_pairs, ModelConfig(**tiny_model_kwargs), TrainConfig(epochs=1, batch_size=16, lr=2e-3), progress=False)
    assert result.model is not None and result.model.lr == 2e-3 and len(result.history) == 1


def test_cli_train_writes_model_and_result(small_pairs, tmp_path, capsys):
    from orchrm.data.tables import write_table

    write_table(small_pairs, tmp_path / "pairs.parquet")
    (tmp_path / "tiny.yaml").write_text(
        "model: {hidden_dim: 32, num_layers: 1, num_heads: 2, max_length: 96, vocab_size: 300}\n"
        "train: {batch_size: 16, lr: 3.0e-3}\n"
    )
    argv = ["train", "--pairs", str(tmp_path / "pairs.parquet"), "--out", str(tmp_path / "out"),
            "--epochs", "2", "--config", str(tmp_path / "tiny.yaml")]
    assert cli_main(argv) == 0
    assert "best epoch" in capsys.readouterr().out
    model = BradleyTerryModel.load(tmp_path / "out")
    assert model.config.hidden_dim == 32 and model.manifest["train_pairs"] > 0
    summary = json.loads((tmp_path / "out" / "train_result.json").read_text())
    assert len(summary["history"]) == 2 and summary["model_path"].endswith("model.safetensors")
    assert (tmp_path / "out" / "checkpoints" / LAST_CHECKPOINT).is_file()
    # a command-line override is validated with the config it changes
    (tmp_path / "odd.yaml").write_text("model: {encoder: minilm, hidden_dim: 30, num_heads: 4}\n")
    bad = argv[:-4] + ["--epochs", "1", "--config", str(tmp_path / "odd.yaml"), "--encoder", "scratch"]
    assert cli_main(bad) == 2
    assert "multiple of num_heads" in capsys.readouterr().err
    # --resume continues from the checkpoint to a longer run
    assert cli_main(argv[:-4] + ["--epochs", "3", "--config", str(tmp_path / "tiny.yaml"), "--resume"]) == 0
    summary = json.loads((tmp_path / "out" / "train_result.json").read_text())
    assert [r["epoch"] for r in summary["history"]] == [1, 2, 3]


def test_cli_train_downloads_pairs_and_config_given_as_mlflow_artifact_uris(small_pairs, tmp_path, monkeypatch, capsys):
    """What another torchrun node runs: the run's files from the tracking store, no shared disk."""
    import mlflow
    from mlflow import MlflowClient

    from orchrm import load_reward_model
    from orchrm.data.tables import write_table

    # another store set in this process earlier (as other tests do): the environment's is the one read
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'elsewhere.db'}")
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    c = MlflowClient(tracking_uri=store)
    run = c.create_run(c.create_experiment("nodes", artifact_location=(tmp_path / "artifacts").as_uri())).info.run_id
    shared = tmp_path / "node-0"
    shared.mkdir()
    write_table(small_pairs, shared / "pairs.parquet")
    (shared / "config.yaml").write_text("model: {hidden_dim: 32, num_layers: 1, num_heads: 2, max_length: 96, vocab_size: 300}\n"
                                        "train: {batch_size: 16, lr: 3.0e-3, epochs: 1}\n")
    c.log_artifact(run, str(shared / "pairs.parquet"), "pairs")
    c.log_artifact(run, str(shared / "config.yaml"))
    out = tmp_path / "node-1" / "model"
    assert cli_main(["train", "--pairs", f"runs:/{run}/pairs/pairs.parquet", "--config", f"runs:/{run}/config.yaml", "--out", str(out)]) == 0
    assert len(json.loads((out / "train_result.json").read_text())["history"]) == 1  # the config's epochs
    assert load_reward_model(out).config.hidden_dim == 32  # and its model
    assert cli_main(["train", "--pairs", f"runs:/{run}/pairs/missing.parquet", "--out", str(tmp_path / "other")]) == 2
    assert "cannot download runs:/" in capsys.readouterr().err
    mlflow.set_tracking_uri(previous)


def test_cli_train_never_replaces_a_model_unasked_and_checks_out_before_training(small_pairs, tmp_path, capsys):
    from orchrm.data.tables import write_table

    write_table(small_pairs, tmp_path / "pairs.parquet")
    (tmp_path / "tiny.yaml").write_text(
        "model: {hidden_dim: 32, num_layers: 1, num_heads: 2, max_length: 96, vocab_size: 300}\n"
        "train: {batch_size: 16, lr: 3.0e-3}\n"
    )
    out = tmp_path / "out"
    argv = ["train", "--pairs", str(tmp_path / "pairs.parquet"), "--epochs", "1", "--config", str(tmp_path / "tiny.yaml")]
    (tmp_path / "afile").write_text("not a folder")
    for bad_out in (tmp_path / "afile", tmp_path / "afile" / "model"):  # refused before any epoch runs
        assert cli_main([*argv, "--out", str(bad_out)]) == 2
        captured = capsys.readouterr()
        assert "afile is a file" in captured.err and "Traceback" not in captured.err and "best epoch" not in captured.out
    assert cli_main([*argv, "--out", str(out)]) == 0
    first = (out / "model.safetensors").read_bytes()
    assert cli_main([*argv, "--out", str(out)]) == 2
    assert "already holds a trained model" in capsys.readouterr().err
    assert (out / "model.safetensors").read_bytes() == first
    # resuming another model (here: another tokenizer) is refused, naming what changed
    (tmp_path / "bert.yaml").write_text(
        "model: {hidden_dim: 32, num_layers: 1, num_heads: 2, max_length: 96, vocab_size: 300, pretokenizer: bert}\n"
        "train: {batch_size: 16, lr: 3.0e-3}\n"
    )
    resumed = ["train", "--pairs", str(tmp_path / "pairs.parquet"), "--epochs", "2", "--out", str(out), "--resume"]
    assert cli_main([*resumed, "--config", str(tmp_path / "bert.yaml")]) == 2
    assert "pretokenizer='whitespace', now pretokenizer='bert'" in capsys.readouterr().err
    assert cli_main([*argv, "--out", str(out), "--overwrite"]) == 0
    assert BradleyTerryModel.load(out).config.pretokenizer == "whitespace"


def test_a_bad_setting_or_a_frozen_model_fails_before_the_earlier_checkpoints_are_removed(
    small_pairs, tiny_model_kwargs, tmp_path
):
    Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path, **SMALL).train(pairs=small_pairs, epochs=1)
    earlier = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert sorted(earlier) == ["best.safetensors", "last.safetensors"]
    with pytest.raises(ConfigError, match="precision='bf16' needs a CUDA device"):
        Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path, precision="bf16", device="cpu",
                **SMALL).train(pairs=small_pairs, epochs=1)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == earlier
    frozen = BradleyTerryModel(**tiny_model_kwargs).requires_grad_(False)
    with pytest.raises(ConfigError, match="no trainable parameters"):
        Trainer(model=frozen, checkpoint_dir=tmp_path, **SMALL).train(pairs=small_pairs, epochs=1)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == earlier


def test_a_damaged_checkpoint_cannot_be_resumed_and_a_fresh_run_replaces_it(small_pairs, tiny_model_kwargs, tmp_path, caplog):
    Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path, **SMALL).train(pairs=small_pairs, epochs=1)
    last = tmp_path / LAST_CHECKPOINT
    last.write_bytes(last.read_bytes()[:-10])
    with pytest.raises(TrainingError, match="cannot resume: .* is truncated.*start afresh"):
        Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path, **SMALL).train(
            pairs=small_pairs, epochs=2, resume=True
        )
    # a fresh run first removes the earlier run's checkpoints (a crash before its own first one
    # must not leave them to be resumed as if they were its own)
    with caplog.at_level("WARNING", logger="orchrm.model.trainer"):
        Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path, **SMALL).train(pairs=small_pairs, epochs=1)
    assert f"removing the earlier run's checkpoint {last}" in caplog.text
    resumed = Trainer(model=BradleyTerryModel(**tiny_model_kwargs), checkpoint_dir=tmp_path, **SMALL)
    assert [r.epoch for r in resumed.train(pairs=small_pairs, epochs=2, resume=True).history] == [1, 2]


@pytest.mark.slow
def test_cli_train_interrupted_by_ctrl_c_points_to_the_checkpoint_to_resume(small_pairs, tmp_path):
    from orchrm.data.tables import write_table

    write_table(small_pairs, tmp_path / "pairs.parquet")
    (tmp_path / "tiny.yaml").write_text(
        "model: {hidden_dim: 32, num_layers: 1, num_heads: 2, max_length: 96, vocab_size: 300}\n"
        "train: {batch_size: 16, lr: 3.0e-3, patience: 1000}\n"
    )
    out = tmp_path / "out"
    # Ctrl-C as in a terminal: a suite started in the background of a script (`make test &`) runs
    # with SIGINT ignored, which a child inherits and keeps (training would run on); a handler in
    # its place is reset to the default in the child, where Python turns it into KeyboardInterrupt
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchrm.cli", "train", "--pairs", str(tmp_path / "pairs.parquet"), "--out", str(out),
             "--epochs", "1000", "--config", str(tmp_path / "tiny.yaml")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
    finally:
        signal.signal(signal.SIGINT, inherited)
    checkpoint = out / "checkpoints" / LAST_CHECKPOINT
    deadline = time.monotonic() + 300  # only against a hang
    while not checkpoint.is_file():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "no checkpoint was written"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert f"the last checkpoint is {checkpoint}: continue with the same command and --resume" in err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_bf16_training_and_fp32_scoring(small_pairs, tiny_model_kwargs, tmp_path):
    model = BradleyTerryModel(**tiny_model_kwargs)
    result = Trainer(model=model, device="cuda", precision="auto", **SMALL).train(pairs=small_pairs, epochs=3)
    assert model.device.type == "cuda" and result.losses[-1] < result.losses[0]
    prompts, actions = small_pairs["prompt"][:6].tolist(), small_pairs["chosen"][:6].tolist()
    on_cpu = BradleyTerryModel.load(model.save(tmp_path / "m.pt")).score(prompts, actions)
    torch.testing.assert_close(model.score(prompts, actions), on_cpu, rtol=1e-4, atol=1e-4)
