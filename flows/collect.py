"""Where the artifacts come from: the sandbox collection (cached on its inputs) or new trace files."""

from prefect import task
from prefect.cache_policies import INPUTS, NO_CACHE, TASK_SOURCE

from flows import transient
from orchrm.ops import stages

# cached on every input (task source, seed, plans, samplers, sandbox config, code version);
# the results persist as JSON (never pickle) under the data dir (flows.pipeline.stages sets the storage)
collect = task(stages.collect_stage, name="collect", cache_policy=INPUTS + TASK_SOURCE, persist_result=True, result_serializer="json")
find_new_traces = task(stages.find_new_traces, name="find-new-traces", cache_policy=NO_CACHE, retries=2, retry_condition_fn=transient)
ingest = task(stages.ingest_stage, name="ingest", cache_policy=NO_CACHE, retries=2, retry_condition_fn=transient)
record_ingested = task(stages.record_ingested, name="record-ingested", cache_policy=NO_CACHE, retries=2, retry_condition_fn=transient)
