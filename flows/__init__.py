"""Prefect flows over :mod:`orchrm.ops.pipeline`: thin files whose tasks wrap the stage functions of :mod:`orchrm.ops.stages`.

Each file names one stage's tasks (caching where a stage is a pure function of its inputs);
:mod:`flows.pipeline` holds the parent flow ``orchrm-pipeline`` and the scheduled entry points
(``nightly``, ``weekly``) that ``prefect.yaml`` deploys. The order of the stages lives in
:func:`orchrm.ops.pipeline.run_pipeline` alone.

Retries: one layer, around each I/O call, never around a whole stage. Every call to the tracking
server and the registry is retried where it is made (:func:`orchrm.ops.tracking.with_server_retries`,
bounded), so no stage that talks to them is a retried task: a retried stage would run them again
on top of those retries and log a second nested run, train or evaluate again. The one task with
retries is ``find-new-traces`` (``pipeline.retries`` times, ``pipeline.retry_delay_s`` apart) and
only when reading the traces folder fails (:func:`folder_unreadable`): a read-only stage, whose
retry repeats no write.
"""

from __future__ import annotations

import socket
from typing import Any

from prefect.cache_policies import CacheKeyFnPolicy

from orchrm.util.offline import apply_offline_env

# telemetry off and no downloads also when a flow runs without make (a worker, a deployment)
apply_offline_env()


def folder_unreadable(task: Any, task_run: Any, state: Any) -> bool:
    """Retry condition of ``find-new-traces``: the traces folder or a file in it could not be
    read (an :class:`OSError`, e.g. a network share that dropped), never a missing folder (a
    :class:`~orchrm.errors.ConfigError`) nor the tracking store (retried inside, then a
    :class:`~orchrm.errors.RegistryError`)."""
    return isinstance(state.result(raise_on_failure=False), OSError)


def _this_machine(context: Any, parameters: dict[str, Any]) -> str:
    return socket.gethostname()


#: the part of a cache key that keeps a cached result naming a local file (``collect``'s artifact
#: table, ``build-pool``'s pool) to the machine that wrote it: with the results on a store every
#: worker shares (``pipeline.result_storage``), another machine's cached path would name a file it
#: does not have. (The chunk tasks return their rows as data, cached for every machine.)
ON_THIS_MACHINE = CacheKeyFnPolicy(cache_key_fn=_this_machine)
