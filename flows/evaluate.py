"""The held-out pool (cached on its inputs; the sandbox's in chunks), the evaluation of candidate and champion on it, the gates."""

from prefect import task
from prefect.cache_policies import INPUTS, NO_CACHE, TASK_SOURCE

from flows import ON_THIS_MACHINE
from orchrm.ops import stages

build_pool = task(stages.pool_stage, name="build-pool", cache_policy=INPUTS + TASK_SOURCE + ON_THIS_MACHINE, persist_result=True, result_serializer="json")
# the sandbox pool of the pipeline, mapped over chunks of held-out tasks as collect-chunk is (flows/collect.py)
pool_chunk = task(stages.pool_chunk_stage, name="pool-chunk", task_run_name="pool-chunk-{chunk.index}",
                  cache_policy=INPUTS + TASK_SOURCE, persist_result=True, result_serializer="json")
evaluate = task(stages.evaluate_stage, name="evaluate", cache_policy=NO_CACHE)
gate = task(stages.gate_stage, name="gate", cache_policy=NO_CACHE)
