"""Training, in a subprocess (``orchrm train`` or torchrun) with its own timeout: no retries, since
a crash is reported and the next run starts afresh with nothing half-registered."""

from prefect import task
from prefect.cache_policies import NO_CACHE

from orchrm.ops import stages

train = task(stages.train_stage, name="train", cache_policy=NO_CACHE)
