"""Where the artifacts come from: the sandbox collection (cached on its inputs; the pipeline's in chunks) or new trace files,
and the record of the files a run trained on (in the tracking store: :mod:`orchrm.ops.ledger`)."""

from prefect import task
from prefect.cache_policies import INPUTS, NO_CACHE, TASK_SOURCE

from flows import ON_THIS_MACHINE, folder_unreadable
from orchrm.ops import stages

# cached on every input (task source, seed, plans, samplers, sandbox config, code version) and the
# machine (its result names a file there); the results persist as JSON (never pickle) in the result
# storage (flows.pipeline.stages sets it)
collect = task(stages.collect_stage, name="collect", cache_policy=INPUTS + TASK_SOURCE + ON_THIS_MACHINE, persist_result=True, result_serializer="json")
# the pipeline's collection: one task run per chunk of tasks, all submitted at once, so the task runner spreads them
# (a Dask cluster over its workers); each returns its rows as data and is cached on its inputs as `collect` is
collect_chunk = task(stages.collect_chunk_stage, name="collect-chunk", task_run_name="collect-chunk-{chunk.index}",
                     cache_policy=INPUTS + TASK_SOURCE, persist_result=True, result_serializer="json")
# read-only: retried when the folder cannot be read (flows.pipeline.stages sets how often)
find_new_traces = task(stages.find_new_traces, name="find-new-traces", cache_policy=NO_CACHE, retry_condition_fn=folder_unreadable)
# no retries: a retry would find the rejected files already moved
ingest = task(stages.ingest_stage, name="ingest", cache_policy=NO_CACHE)
# its tracking calls retry themselves
record_ingested = task(stages.record_ingested, name="record-ingested", cache_policy=NO_CACHE)
