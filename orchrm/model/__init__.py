"""The reward model: BradleyTerryModel and the one forward pass (``reward_model``), its encoders,
the model file, the prompt / action texts, the tokens a scorer reads, batching by task, the
Trainer, its callback hooks and checkpoints.

Nothing here imports MLflow, Prefect, Great Expectations or the sandbox: a serving process that
loads a saved model carries only this package (the Trainer reports through
:class:`~orchrm.model.callbacks.TrainCallback`, which :mod:`orchrm.ops.tracking` implements).

>>> from orchrm.model.reward_model import BradleyTerryModel, bt_loss  # doctest: +SKIP
"""
