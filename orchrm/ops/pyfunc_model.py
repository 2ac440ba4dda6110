"""The MLflow pyfunc of an OrchRM reward model, logged from code (``orchrm.ops.registry.log_model``).

MLflow executes this file when it loads the model; :func:`mlflow.models.set_model` names the
class. Input: a DataFrame with string columns ``prompt`` and ``action``, in the formats the model
was trained on (:mod:`orchrm.model.texts`: a plan is scored under ``plan_prompt(question)``, a
node's output as ``node_action`` under ``node_prompt``); output: a DataFrame with one float column
``reward`` (``BradleyTerryModel.score`` of each row). The weights are the model's safetensors
file, the artifact ``model``.
"""

from __future__ import annotations

from typing import Any

import mlflow.models
import mlflow.pyfunc


class RewardModelPyfunc(mlflow.pyfunc.PythonModel):
    """Scores ``(prompt, action)`` rows with the reward model of the ``model`` artifact."""

    def load_context(self, context: Any) -> None:
        from orchrm.model.reward_model import BradleyTerryModel

        self.model = BradleyTerryModel.load(context.artifacts["model"])

    # no type hints: MLflow would read them as a schema; the logged signature is the schema
    def predict(self, context, model_input, params=None):
        import pandas as pd

        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        missing = [c for c in ("prompt", "action") if c not in frame.columns]
        if missing:
            raise ValueError(f"input lacks column(s) {missing}: send rows with string columns 'prompt' and 'action'")
        prompts = frame["prompt"].astype(str).tolist()
        actions = frame["action"].astype(str).tolist()
        rewards = self.model.score(prompts, actions).numpy() if actions else []
        return pd.DataFrame({"reward": pd.Series(rewards, dtype="float32")}, index=frame.index)


mlflow.models.set_model(RewardModelPyfunc())
