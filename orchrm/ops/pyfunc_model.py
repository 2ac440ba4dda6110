"""The MLflow pyfunc of an OrchRM reward model, logged from code (``orchrm.ops.registry.log_model``).

MLflow executes this file when it loads the model; :func:`mlflow.models.set_model` names the
class. Input: a DataFrame with string columns ``prompt`` and ``action``, in the formats the model
was trained on (:mod:`orchrm.model.texts`: a plan is scored under ``plan_prompt(question)``, a
node's output as ``node_action`` under ``node_prompt``); output: a DataFrame with one float column
``reward`` (``BradleyTerryModel.score`` of each row); the parameter ``normalize`` (boolean,
default false, declared in the signature) asks for rewards normalised by the training rewards'
mean and std. The weights are the model's safetensors file, the artifact ``model``. The orchrm
it imports is the model's own ``code/orchrm`` (MLflow puts ``code/`` first on ``sys.path``), unless
the loading process imported orchrm before.

The texts of an intermediate step depend on the format the model's intermediate pairs were
written in (``node`` or ``plan_prefix``), which its manifest records: ``intermediate_format``
holds it, and :meth:`RewardModelPyfunc.step_rows` builds a step's rows in it, the texts
:class:`orchrm.ops.serving.RewardGuidedOrchestrator` scores (``load_model(uri).unwrap_python_model()``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mlflow.models
import mlflow.pyfunc


class RewardModelPyfunc(mlflow.pyfunc.PythonModel):
    """Scores ``(prompt, action)`` rows with the reward model of the ``model`` artifact."""

    def load_context(self, context: Any) -> None:
        from orchrm.model.reward_model import BradleyTerryModel
        from orchrm.model.texts import intermediate_format

        self.model = BradleyTerryModel.load(context.artifacts["model"])
        #: the texts of an intermediate step, ``node`` or ``plan_prefix``: the model's manifest's
        #: (``node``, with a log line, for a model saved before the format was recorded)
        self.intermediate_format = intermediate_format(self.model.manifest, what=f"the reward model {context.artifacts['model']}")

    def step_rows(self, question: str, plan: str, depth: int, outputs: Mapping[str, str] | None = None):
        """The ``prompt``/``action`` rows that score the nodes at ``depth`` of the plan text ``plan``
        for ``question``, in the model's format (:func:`orchrm.model.texts.step_texts`); ``outputs``
        maps node ids to what they wrote (``node`` texts hold it). Send them to ``predict``."""
        import pandas as pd

        from orchrm.model.texts import plan_nodes, step_texts

        nodes = plan_nodes(plan)
        if nodes is None:
            raise ValueError("plan is not a plan text (<agent .../> and <edge .../> elements): only plans have steps to score")
        here = [n for n in nodes if n.depth == depth]
        if not here:
            raise ValueError(f"the plan has no node at depth {depth} (its deepest is {max(n.depth for n in nodes)})")
        prompts, actions = step_texts(self.intermediate_format, question, here, outputs or {})
        return pd.DataFrame({"prompt": prompts, "action": actions})

    # no type hints: MLflow would read them as a schema; the logged signature is the schema
    def predict(self, context, model_input, params=None):
        import pandas as pd

        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        missing = [c for c in ("prompt", "action") if c not in frame.columns]
        if missing:
            raise ValueError(f"input lacks column(s) {missing}: send rows with string columns 'prompt' and 'action'")
        prompts = frame["prompt"].astype(str).tolist()
        actions = frame["action"].astype(str).tolist()
        normalize = bool((params or {}).get("normalize", False))
        rewards = self.model.score(prompts, actions, normalize=normalize).numpy() if actions else []
        return pd.DataFrame({"reward": pd.Series(rewards, dtype="float32")}, index=frame.index)


mlflow.models.set_model(RewardModelPyfunc())
