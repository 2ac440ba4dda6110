"""The ledger of trace files the pipeline has trained on, kept in the MLflow tracking store that
every worker shares rather than on one machine's disk.

A pipeline parent run records the files it trained on right after it registered a version: one tag
per file, ``orchrm.ingested.<sha256 of the file's bytes>`` = the file's name, then the marker
``orchrm.ingest`` = ``1``, set last, so a run only counts once every tag of it is written.
The same list is logged as the run's artifact ``ingest/ingested.json``, which is the file a
reviewer opens in the MLflow UI. :func:`seen_digests` reads the digests back by searching the
experiment's runs that carry the marker, so a worker that shares no disk with the one that
trained sees the same set. Deleting such a run in MLflow makes its files new again.

>>> record(config, parent_run_id, traces)        # doctest: +SKIP
('3f1c...', '9a0b...')
>>> "3f1c..." in seen_digests(config)            # doctest: +SKIP
True
"""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from orchrm.config import PipelineConfig
    from orchrm.ops.stages import NewTraces

#: marker tag of a parent run whose trace files are recorded (set after every file's tag)
INGEST_TAG = "orchrm.ingest"
#: prefix of the tag of one trained-on file: ``orchrm.ingested.<sha256>`` = its name
DIGEST_PREFIX = "orchrm.ingested."
#: the run artifact listing the same files: ``<ARTIFACT_DIR>/<ARTIFACT_NAME>``
ARTIFACT_DIR, ARTIFACT_NAME = "ingest", "ingested.json"
#: runs read per page of the ledger search
PAGE_SIZE = 1000


def digest_tag(digest: str) -> str:
    """The tag key recording the file whose bytes hash to ``digest``."""
    return f"{DIGEST_PREFIX}{digest}"


def legacy_path(config: PipelineConfig) -> Path:
    """Where earlier versions kept the ledger on local disk: ``<data_dir>/ingest/ingested.json``."""
    return config.data_path("ingest", "ingested.json")


def seen_digests(config: PipelineConfig) -> frozenset[str]:
    """The sha256 digests of every trace file a pipeline run trained on and registered a version
    from: the tags of the experiment's runs marked :data:`INGEST_TAG`, read page by page.

    A local ledger of an earlier version (:func:`legacy_path`), if there is one, is read too and
    its files count as seen, so that upgrading does not retrain on every file. It is only read
    and never written; delete it to make its files new again."""
    from orchrm.ops import tracking

    uri = tracking.tracking_uri(config)
    experiment_id = tracking.configure(config)
    c = tracking.client(uri)
    query = f"tags.`{INGEST_TAG}` = '1'"
    seen: set[str] = set()
    token: str | None = None
    while True:
        page = tracking.with_server_retries(
            uri,
            lambda t=token: c.search_runs([experiment_id], filter_string=query, max_results=PAGE_SIZE, page_token=t),
            "reading the ingest ledger (the runs that recorded their trace files)",
        )
        for run in page:
            seen.update(key.removeprefix(DIGEST_PREFIX) for key in run.data.tags if key.startswith(DIGEST_PREFIX))
        token = page.token
        if not token:
            return frozenset(seen) | _legacy(config)


def _legacy(config: PipelineConfig) -> frozenset[str]:
    path = legacy_path(config)
    return frozenset(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else frozenset()


def record(config: PipelineConfig, run_id: str, traces: NewTraces) -> tuple[str, ...]:
    """Record every file of ``traces.digests`` as trained on by the parent run ``run_id``: its
    tags, the artifact ``ingest/ingested.json``, then the marker. Returns the digests, sorted.

    Every write replaces the same tag or file, so a retried or repeated call records the same
    thing again. If a write fails before the marker is set, the run does not count and the next
    night trains on the files again, which is the safe side."""
    from mlflow.entities import RunTag

    from orchrm.ops import tracking

    uri = tracking.tracking_uri(config)
    c = tracking.client(uri)
    files = {digest: Path(path).name for path, digest in sorted(traces.digests.items())}
    tracking.log_batch(uri, run_id, tags=[RunTag(digest_tag(d), name) for d, name in sorted(files.items())],
                       what=f"recording the trace files run {run_id} trained on")
    listing = {
        "run_id": run_id,
        "recorded_at": datetime.now(UTC).isoformat(),
        "folder": str(traces.folder),
        "files": [{"file": name, "sha256": digest} for digest, name in sorted(files.items())],
    }
    with tempfile.TemporaryDirectory(prefix="orchrm-ingest-") as tmp:
        path = Path(tmp) / ARTIFACT_NAME
        path.write_text(json.dumps(listing, indent=1), encoding="utf-8")
        tracking.with_server_retries(uri, lambda: c.log_artifact(run_id, str(path), ARTIFACT_DIR), "logging the ingest ledger's file list")
    tracking.with_server_retries(uri, lambda: c.set_tag(run_id, INGEST_TAG, "1"), "marking the run's trace files as recorded")
    return tuple(sorted(files))
