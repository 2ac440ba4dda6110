"""Prefect flows over :mod:`orchrm.ops.pipeline`: thin files whose tasks wrap the stage functions of :mod:`orchrm.ops.stages`.

Each file names one stage's tasks (retries where I/O can fail, caching where a stage is a pure
function of its inputs); :mod:`flows.pipeline` holds the parent flow ``orchrm-pipeline`` and the
scheduled entry points (``nightly``, ``weekly``) that ``prefect.yaml`` deploys. The order of the
stages lives in :func:`orchrm.ops.pipeline.run_pipeline` alone.
"""

from __future__ import annotations

from typing import Any

# the function, not the module: the submodules of this package take the names `pipeline` and `stages`
from orchrm.ops.stages import is_transient
from orchrm.util.offline import apply_offline_env

# telemetry off and no downloads also when a flow runs without make (a worker, a deployment)
apply_offline_env()


def transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry condition: retry a failed I/O call (tracking server, storage), never a verdict
    about the data or the model (a data-quality failure, a failed training)."""
    return is_transient(state.result(raise_on_failure=False))
