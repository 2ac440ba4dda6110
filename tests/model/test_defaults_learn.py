"""The defaults learn a user's own system: a support desk's traces, where the plan that resolves a
ticket depends on its category and urgency (both in the question), through ``orchrm ingest`` ->
``pairs`` -> ``train`` with no flags, rank the held-out tickets' plans by their expected quality.

The generator (:mod:`orchrm.execution.support_desk`) runs here at a seed the defaults were not
tuned on (``benchmarks/sweep_defaults.py`` uses 101).
"""

from __future__ import annotations

import inspect

import pytest

from orchrm.cli import main
from orchrm.config import ModelConfig, TrainConfig
from orchrm.data.tables import read_table, write_table
from orchrm.execution.support_desk import make_tickets, traces_of, true_pair_accuracy
from orchrm.model.reward_model import BradleyTerryModel
from orchrm.model.trainer import Trainer, fit

SEED = 7  # not the sweep's tuning seed


@pytest.mark.slow
def test_orchrm_train_without_flags_learns_which_plan_a_ticket_needs(tmp_path):
    tickets = make_tickets(300, seed=SEED)
    write_table(traces_of(tickets, seed=SEED), tmp_path / "traces.jsonl")
    assert main(["ingest", "--traces", str(tmp_path / "traces.jsonl"), "--out", str(tmp_path / "artifacts.parquet")]) == 0
    assert main(["pairs", "--artifacts", str(tmp_path / "artifacts.parquet"), "--out", str(tmp_path / "pairs.parquet")]) == 0
    assert main(["train", "--pairs", str(tmp_path / "pairs.parquet"), "--out", str(tmp_path / "model")]) == 0

    pairs = read_table(tmp_path / "pairs.parquet")
    held_out = set(pairs.task_id[pairs.split == "test"])
    model = BradleyTerryModel.load(tmp_path / "model").eval()
    accuracy = true_pair_accuracy(lambda q, plans: model.score(q, plans).tolist(),
                                  [t for t in tickets if t.task_id in held_out])
    assert len(held_out) >= 40
    # the target: 0.95. The best epoch alone (6 of 12 by validation loss, while validation
    # accuracy still rose) reached 0.945 here; the default model, the mean of the weights from it
    # to the last epoch (TrainConfig.weight_average), reaches the target
    assert accuracy >= 0.95, f"held-out accuracy on pairs whose plans truly differ: {accuracy:.3f}"


def test_fit_without_an_lr_trains_at_the_models_default_as_bradleyterrymodel_and_trainer_do(pairs, tiny_model_kwargs):
    tasks = sorted(pairs.task_id[pairs.split == "train"].unique())[:4] + sorted(pairs.task_id[pairs.split == "val"].unique())[:2]
    few = pairs[pairs.task_id.isin(tasks)]
    default_lr = inspect.signature(BradleyTerryModel).parameters["lr"].default
    assert TrainConfig().lr is None  # the Trainer takes the model's
    result = fit(few, ModelConfig(**tiny_model_kwargs), TrainConfig(epochs=1), progress=False)
    assert result.model.lr == default_lr == Trainer(BradleyTerryModel(**tiny_model_kwargs)).model.lr
    assert max(r.lr for r in result.history) <= default_lr
