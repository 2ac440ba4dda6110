"""The Great Expectations gates on both tables; a failure raises DataQualityError and fails the flow."""

from prefect import task
from prefect.cache_policies import NO_CACHE

from orchrm.ops import stages

validate_artifacts = task(stages.validate_artifacts_stage, name="validate-artifacts", cache_policy=NO_CACHE)
validate_pairs = task(stages.validate_pairs_stage, name="validate-pairs", cache_policy=NO_CACHE)
