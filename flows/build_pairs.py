"""Win/loss pairs from the artifacts, logged to MLflow as a dataset."""

from prefect import task
from prefect.cache_policies import NO_CACHE

from orchrm.ops import stages

build_pairs = task(stages.pairs_stage, name="build-pairs", cache_policy=NO_CACHE)
