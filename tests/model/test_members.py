"""An ensemble (``ModelConfig.members``): members trained apart, scored as the mean of their
standardised rewards, saved and loaded as one file, resumed member by member."""

from __future__ import annotations

import pytest
import torch

from orchrm import BradleyTerryModel, Trainer
from orchrm.config import ModelConfig, TrainConfig
from orchrm.errors import ConfigError
from orchrm.model.callbacks import TrainCallback
from orchrm.model.trainer import fit

SETTINGS = dict(batch_size=16, lr=3e-3, epochs=3, progress=False)


@pytest.fixture(scope="module")
def small_pairs(pairs):
    """8 training and 3 validation tasks of the synthetic pairs."""
    tasks = pairs.groupby("split")["task_id"].unique()
    keep = set(sorted(tasks["train"])[:8]) | set(sorted(tasks["val"])[:3])
    return pairs[pairs["task_id"].isin(keep)].reset_index(drop=True)


class _Record(TrainCallback):
    """Every hook call, by name, as the Trainer makes it."""

    def __init__(self) -> None:
        self.begins, self.logged, self.evals, self.ends = [], set(), [], []

    def on_train_begin(self, params):
        self.begins.append(params)

    def on_log(self, step, metrics):
        self.logged |= set(metrics)

    def on_eval(self, record, model):
        self.evals.append(record)

    def on_train_end(self, result):
        self.ends.append(result)


@pytest.fixture(scope="module")
def ensemble(small_pairs, tiny_model_kwargs, tmp_path_factory):
    record = _Record()
    model = BradleyTerryModel(**tiny_model_kwargs, members=3)
    folder = tmp_path_factory.mktemp("members")
    result = Trainer(model=model, checkpoint_dir=folder, callbacks=[record], log_interval=1, **SETTINGS).train(small_pairs)
    return model, result, record, folder


def _texts(pairs, n=24):
    rows = pairs.head(n)
    return list(rows["prompt"]), list(rows["chosen"])


def test_the_reward_is_the_mean_of_the_members_standardised_rewards(ensemble, small_pairs):
    model, _, _, _ = ensemble
    prompts, actions = _texts(small_pairs)
    each = torch.stack([model.member(k).score(prompts, actions) for k in range(3)])
    stats = model.member_stats
    expected = ((each - stats[:, :1]) / stats[:, 1:]).mean(0)
    torch.testing.assert_close(model.score(prompts, actions), expected, atol=1e-5, rtol=1e-5)
    # the members differ: they were initialised and trained with seeds 0, 1, 2
    assert not torch.allclose(each[0], each[1]) and not torch.allclose(each[1], each[2])


def test_a_member_is_the_model_its_seed_trains_alone(ensemble, small_pairs, tiny_model_kwargs):
    model, result, _, _ = ensemble
    alone = BradleyTerryModel(**tiny_model_kwargs, seed=2)
    Trainer(model=alone, seed=2, **SETTINGS).train(small_pairs)
    prompts, actions = _texts(small_pairs)
    # the same rewards, but for the ensemble's own calibration, which scales every member alike
    scale = 1 / result.temperature
    torch.testing.assert_close(model.member(2).score(prompts, actions), scale * alone.score(prompts, actions), atol=1e-5, rtol=1e-4)
    assert model.member_stats[2].tolist() == pytest.approx([scale * alone.reward_mean, alone.reward_std])


def test_the_result_reports_each_member_and_the_ensemble(ensemble):
    model, result, _, _ = ensemble
    assert len(result.members) == 3
    assert result.steps == sum(m.steps for m in result.members)
    assert result.final_val_accuracy is not None and result.temperature is not None
    assert [m["seed"] for m in model.manifest["members"]] == [0, 1, 2]
    assert result.to_dict()["members"][1]["best_epoch"] == result.members[1].best_epoch
    assert "ensemble of 3 members" in str(result)


def test_callbacks_hear_each_member_under_its_own_name_and_the_end_once(ensemble):
    _, result, record, _ = ensemble
    assert len(record.begins) == 1 and record.begins[0]["model"]["members"] == 3
    assert {"member_0.loss", "member_2.loss", "member_1.epoch.val_loss"} <= record.logged
    assert record.ends == [result]


def test_the_ensemble_saves_and_loads_as_one_file(ensemble, small_pairs, tmp_path):
    model, _, _, _ = ensemble
    path = model.save(tmp_path / "model.safetensors")
    loaded = BradleyTerryModel.load(path)
    assert loaded.members == 3 and loaded.manifest["members"] == model.manifest["members"]
    prompts, actions = _texts(small_pairs)
    torch.testing.assert_close(loaded.score(prompts, actions), model.score(prompts, actions), atol=1e-6, rtol=1e-6)


def test_each_member_checkpoints_apart_and_a_finished_ensemble_resumes_to_the_same_model(ensemble, small_pairs, tiny_model_kwargs):
    model, _, _, folder = ensemble
    assert all((folder / f"member-{k}" / "last.safetensors").is_file() for k in range(3))
    again = BradleyTerryModel(**tiny_model_kwargs, members=3)
    Trainer(model=again, checkpoint_dir=folder, **SETTINGS).train(small_pairs, resume=True)
    prompts, actions = _texts(small_pairs)
    torch.testing.assert_close(again.score(prompts, actions), model.score(prompts, actions), atol=1e-5, rtol=1e-5)


def test_scaling_an_ensemble_scales_its_rewards(ensemble, small_pairs):
    model, _, _, _ = ensemble
    prompts, actions = _texts(small_pairs)
    before = model.score(prompts, actions)
    model.scale_rewards(2.0)
    try:
        torch.testing.assert_close(model.score(prompts, actions), 2 * before, atol=1e-5, rtol=1e-5)
    finally:
        model.scale_rewards(0.5)


def test_an_ensemble_refuses_cached_features_and_a_bad_member_count(ensemble):
    model, _, _, _ = ensemble
    with pytest.raises(ConfigError, match="packed batches"):
        model(torch.zeros(2, 32))
    with pytest.raises(ConfigError, match="members"):
        BradleyTerryModel(hidden_dim=32, num_heads=2, members=0)


def test_fit_builds_an_ensemble_from_the_model_config(small_pairs, tiny_model_kwargs):
    result = fit(small_pairs, ModelConfig(**tiny_model_kwargs, members=2),
                 TrainConfig(batch_size=16, lr=3e-3, epochs=2), progress=False)
    assert result.model.members == 2 and len(result.members) == 2
