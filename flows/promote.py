"""Register every candidate (alias challenger) and promote the one whose gates passed (champion)."""

from prefect import task
from prefect.cache_policies import NO_CACHE

from flows import transient
from orchrm.ops import stages

register = task(stages.register_stage, name="register", cache_policy=NO_CACHE, retries=2, retry_condition_fn=transient)
promote = task(stages.promote_stage, name="promote", cache_policy=NO_CACHE, retries=2, retry_condition_fn=transient)
