"""Register every candidate (alias challenger) and promote the one whose gates passed (champion).
No task retries: every registry call retries itself, once (see :mod:`flows`)."""

from prefect import task
from prefect.cache_policies import NO_CACHE

from orchrm.ops import stages

register = task(stages.register_stage, name="register", cache_policy=NO_CACHE)
promote = task(stages.promote_stage, name="promote", cache_policy=NO_CACHE)
