"""MLflow tracking (DESIGN §8): the store, runs, and what the pipeline logs to them.

The store is SQLite under the data folder by default (``<data_dir>/mlflow.db``, artifacts in
``<data_dir>/mlartifacts``); ``MLFLOW_TRACKING_URI`` or ``registry.tracking_uri`` points it at a team
server, whose connection failures are retried a bounded number of times. Every function takes the
run it logs to as ``run_id``: the active run of MLflow is per thread, and work submitted to another
thread or process must not depend on it. The model registry is :mod:`orchrm.ops.registry`.

>>> exp = configure(config)                                             # doctest: +SKIP
>>> run_id = start_run(config, "orchrm-pipeline")                        # doctest: +SKIP
>>> digest = log_pairs_dataset(pairs, run_id=run_id, source="pairs.parquet")  # doctest: +SKIP
>>> end_run(config, run_id)                                              # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from orchrm.errors import RegistryError
from orchrm.evaluation.gates import CHAMPION_PREFIX
from orchrm.model.callbacks import TrainCallback

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from mlflow import MlflowClient

    from orchrm.config import PipelineConfig
    from orchrm.evaluation.report import EvaluationReport
    from orchrm.model.trainer import EpochRecord, TrainResult

T = TypeVar("T")

#: run tag: the champion version a candidate was evaluated against, in the same run
CHAMPION_EVALUATED_TAG = "orchrm.champion_version"

#: experiment tag the MLflow UI reads to choose its view: ``custom_model_development`` opens on the
#: training runs, where an experiment without it opens on the GenAI overview ("Traces 0")
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"

#: tracking-server retries: attempts, and the longest wait between two (seconds)
SERVER_ATTEMPTS = 4
SERVER_MAX_WAIT_S = 2.0


# --------------------------------------------------------------------------------------------
# the store


def tracking_uri(config: PipelineConfig) -> str:
    """``MLFLOW_TRACKING_URI``, else ``config.registry.tracking_uri``, else
    ``sqlite:///<absolute data_dir>/mlflow.db``."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    if config.registry.tracking_uri:
        return config.registry.tracking_uri
    return f"sqlite:///{config.data_path('mlflow.db').resolve()}"


def is_remote(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def _sqlite_path(uri: str) -> Path | None:
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def check_server(uri: str) -> None:
    """Raise :class:`RegistryError` when the tracking server at ``uri`` does not answer its health
    check after :data:`SERVER_ATTEMPTS` tries (exponential back-off); a no-op for local stores.

    MLflow's own HTTP client retries a refused connection for minutes; this bounded check comes
    first so an unreachable server fails fast with what to do."""
    if is_remote(uri):
        _check_server_cached(uri.rstrip("/"))


@lru_cache(maxsize=16)
def _check_server_cached(uri: str) -> None:
    import httpx
    from tenacity import RetryError, retry, stop_after_attempt, wait_exponential

    @retry(stop=stop_after_attempt(SERVER_ATTEMPTS), wait=wait_exponential(multiplier=0.25, max=SERVER_MAX_WAIT_S))
    def ping() -> None:
        httpx.get(f"{uri}/health", timeout=5.0).raise_for_status()

    try:
        ping()
    except RetryError as exc:
        cause = exc.last_attempt.exception()
        raise RegistryError(
            f"the MLflow tracking server at {redacted(uri)} is unreachable ({type(cause).__name__}: {cause}) after "
            f"{SERVER_ATTEMPTS} attempts: start it (e.g. `mlflow server --backend-store-uri sqlite:///<path>/mlflow.db "
            "--host 127.0.0.1 --port 5000`), or point MLFLOW_TRACKING_URI / registry.tracking_uri at a server "
            "that runs (unset both to use the local SQLite store)"
        ) from None


#: what a client needs by default when a server with authentication refuses it (:mod:`orchrm.ops.auth`)
DEFAULT_NEEDS = ("an account allowed to do this: the pipeline's service account (MANAGE on the experiment and the "
                 "registered model) to log, register and move aliases, any account to read")
#: MLflow's error codes for the HTTP statuses of a refused request
REFUSED_CODES = {"UNAUTHENTICATED": 401, "CUSTOMER_UNAUTHORIZED": 401, "PERMISSION_DENIED": 403}


def refused_status(exc: BaseException) -> int | None:
    """401 or 403 when ``exc`` is a tracking server's refusal (no, wrong or insufficient
    credentials), from MLflow's REST client or its artifact client; None for anything else."""
    from mlflow.exceptions import MlflowException

    if isinstance(exc, MlflowException):
        return REFUSED_CODES.get(str(exc.error_code))
    response = getattr(exc, "response", None)  # requests.HTTPError of the artifact proxy's client
    status = getattr(response, "status_code", None)
    return status if status in (401, 403) else None


def refused(uri: str, status: int, *, what: str, needs: str | None = None) -> RegistryError:
    """The error for a refusal (HTTP ``status`` 401 or 403) of ``what`` by the server at ``uri``:
    who was refused (``MLFLOW_TRACKING_USERNAME``, or an anonymous client), why, and the account to use."""
    user = os.environ.get("MLFLOW_TRACKING_USERNAME")
    who = f"user {user!r}" if user else "an anonymous client"
    if status == 401:
        why = "wrong user name or password" if user else "the server requires a login"
    else:
        why = "permission denied"
    return RegistryError(
        f"{what}: the MLflow server at {redacted(uri)} refused {who}: {why} (HTTP {status}). Set "
        f"MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD to {needs or DEFAULT_NEEDS}"
    )


def with_server_retries(uri: str, fn: Callable[[], T], what: str, *, needs: str | None = None) -> T:
    """``fn()``; against a tracking server, connection failures are retried (bounded) and then
    reported as :class:`RegistryError` naming ``what`` failed. A refusal (HTTP 401 / 403 of a
    server with authentication) is never retried: it is a :class:`RegistryError` at once, saying
    who was refused and, with ``needs``, which account to use (:func:`refused`)."""
    if not is_remote(uri):
        return fn()
    import requests
    from tenacity import (
        RetryError,
        retry,
        retry_if_exception_type,
        stop_after_attempt,
        wait_exponential,
    )

    check_server(uri)
    guarded = retry(
        stop=stop_after_attempt(SERVER_ATTEMPTS),
        wait=wait_exponential(multiplier=0.25, max=SERVER_MAX_WAIT_S),
        retry=retry_if_exception_type((requests.exceptions.ConnectionError, ConnectionError)),
    )(fn)
    try:
        return guarded()
    except RetryError as exc:
        raise RegistryError(
            f"{what}: the MLflow tracking server at {redacted(uri)} stopped answering "
            f"({exc.last_attempt.exception()}); check that it runs and is reachable, then retry"
        ) from None
    except Exception as exc:
        status = refused_status(exc)
        if status is None:
            raise
        raise refused(uri, status, what=what, needs=needs) from None


def client(uri: str) -> MlflowClient:
    """An MlflowClient on ``uri`` (checked reachable first when it is a server)."""
    from mlflow import MlflowClient

    check_server(uri)
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def artifact_root(config: PipelineConfig) -> str | None:
    """The experiment's artifact location: ``<data_dir>/mlartifacts`` beside a local SQLite store
    (else artifacts land relative to the current directory); None for a server, which decides."""
    uri = tracking_uri(config)
    db = _sqlite_path(uri)
    if db is not None:
        return (db.parent / "mlartifacts").resolve().as_uri()
    return None


@contextmanager
def _environment_kept(*names: str) -> Iterator[None]:
    """Put ``names`` back in ``os.environ`` as they were (set or unset) when the block ends."""
    before = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def configure(config: PipelineConfig) -> str:
    """Point MLflow at the configured store, create it and the experiment; returns the experiment id.

    Call it once before processes log in parallel: creating a SQLite store migrates its schema, and
    two processes migrating one file at once race."""
    import mlflow

    uri = tracking_uri(config)
    db = _sqlite_path(uri)
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
    with _environment_kept("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
        # both also export the URI to os.environ (for subprocesses), where tracking_uri() would
        # then read it for every later config of this process: a second pipeline with another
        # data_dir would log into the first one's store. Subprocesses get the URI explicitly.
        mlflow.set_tracking_uri(uri)
        mlflow.set_registry_uri(uri)
    c = client(uri)

    def get_or_create() -> str:
        exp = c.get_experiment_by_name(config.registry.experiment)
        if exp is None:
            return c.create_experiment(config.registry.experiment, artifact_location=artifact_root(config),
                                       tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        if EXPERIMENT_KIND_TAG not in exp.tags:  # made before the kind was set; a kind set by hand stays
            c.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        return exp.experiment_id

    return with_server_retries(uri, get_or_create, f"creating experiment {config.registry.experiment!r}")


def start_run(
    config: PipelineConfig,
    name: str,
    *,
    parent_run_id: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> str:
    """Create a run (nested under ``parent_run_id`` when given) in the configured experiment and
    return its id. The run is not made active in any thread: pass the id to every logging call.
    Inside a Prefect flow run it is tagged with the flow run's id (:func:`prefect_flow_run_tag`)."""
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    experiment_id = configure(config)
    all_tags = {"orchrm.stage": name, "orchrm.git_commit": git_commit(), **prefect_flow_run_tag(), **(tags or {})}
    if parent_run_id:
        all_tags[MLFLOW_PARENT_RUN_ID] = parent_run_id
    uri = tracking_uri(config)
    run = with_server_retries(uri, lambda: client(uri).create_run(experiment_id, run_name=name, tags=all_tags), f"starting run {name!r}")
    return run.info.run_id


def end_run(config: PipelineConfig, run_id: str, *, status: str = "FINISHED") -> None:
    """Mark ``run_id`` as ``FINISHED`` (or ``FAILED`` / ``KILLED``)."""
    uri = tracking_uri(config)
    with_server_retries(uri, lambda: client(uri).set_terminated(run_id, status=status), f"ending run {run_id}")


#: run tag: the Prefect flow run a run was started in (:func:`end_runs_of_flow_run` ends them)
FLOW_RUN_TAG = "orchrm.prefect.flow_run_id"


def prefect_flow_run_tag() -> dict[str, str]:
    """``{FLOW_RUN_TAG: <id>}`` while this code runs inside a Prefect flow run (in the flow or in
    one of its tasks), else ``{}``. Prefect is never imported here: a process that has not
    imported it runs no flow, and the core does not depend on it."""
    if "prefect" not in sys.modules:
        return {}
    from prefect.runtime import flow_run

    flow_run_id = flow_run.id
    return {FLOW_RUN_TAG: str(flow_run_id)} if flow_run_id else {}


def end_runs_of_flow_run(config: PipelineConfig, flow_run_id: str, *, status: str = "FAILED") -> tuple[str, ...]:
    """End every run of the experiment still ``RUNNING`` that was started in the Prefect flow run
    ``flow_run_id`` (tag :data:`FLOW_RUN_TAG`) with ``status`` (``FAILED`` / ``KILLED``); returns
    their ids. The flows call it when a flow run fails, crashes or is cancelled, so that a killed
    process leaves no run that looks alive in the MLflow UI."""
    uri = tracking_uri(config)
    experiment_id = configure(config)
    c = client(uri)
    query = f"tags.`{FLOW_RUN_TAG}` = '{flow_run_id}' and attributes.status = 'RUNNING'"
    ended: list[str] = []
    token: str | None = None
    while True:
        page = with_server_retries(uri, lambda t=token: c.search_runs([experiment_id], filter_string=query, page_token=t),
                                   f"finding the runs of flow run {flow_run_id}")
        ended += [r.info.run_id for r in page]
        token = page.token
        if not token:
            break
    for run_id in ended:
        end_run(config, run_id, status=status)
    return tuple(ended)


@contextmanager
def run(config: PipelineConfig, name: str, *, parent_run_id: str | None = None) -> Iterator[str]:
    """``with run(config, "train", parent_run_id=p) as run_id:`` — a run ended ``FINISHED``, or
    ``FAILED`` when the block raises."""
    run_id = start_run(config, name, parent_run_id=parent_run_id)
    try:
        yield run_id
    except BaseException:
        end_run(config, run_id, status="FAILED")
        raise
    end_run(config, run_id)


def git_commit() -> str:
    """The commit of the checkout this package runs from, ``unknown`` outside a git checkout
    (``-dirty`` appended when tracked files differ from it)."""
    return _git_commit(str(Path(__file__).resolve().parent))


@lru_cache(maxsize=4)
def _git_commit(where: str) -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha}-dirty" if dirty else (sha or "unknown")


# --------------------------------------------------------------------------------------------
# logging


#: a key MLflow accepts in a param or metric name
_NAME_PART = r"[\w\-. :/]+"


def _flat(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    """``(dotted key, leaf)`` pairs of nested mappings; a mapping whose keys MLflow would not
    accept in a name (``op_error: {"+": 0.1}``) stays one leaf, logged as JSON."""
    import re

    if isinstance(value, Mapping) and value and all(re.fullmatch(_NAME_PART, str(k)) for k in value):
        for k, v in value.items():
            yield from _flat(f"{prefix}.{k}" if prefix else str(k), v)
    else:
        yield prefix, value


def as_params(values: Mapping[str, Any]) -> list:
    from mlflow.entities import Param

    out = []
    for key, value in _flat("", values):
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        out.append(Param(key, text[:6000]))  # MLflow's limit on a param value
    return out


#: a config key whose value is a credential, never logged (``***`` instead): ``password``,
#: ``api_key``, ``auth_token``, ``client_secret``... (not ``max_tokens``)
SECRET_KEY = r"(^|_)(password|passwd|secret|api_key|apikey|access_key|token|auth_string|credentials?)$"


def redacted(values: Any) -> Any:
    """``values`` (a config's ``model_dump``) with credentials masked, for logging: the value of a
    key naming a secret (:data:`SECRET_KEY`) becomes ``***``, and a URI's ``user:password@`` part
    is dropped (``http://u:p@host`` is logged as ``http://***@host``)."""
    import re

    if isinstance(values, Mapping):
        return {k: "***" if v is not None and re.search(SECRET_KEY, str(k).lower()) else redacted(v) for k, v in values.items()}
    if isinstance(values, list | tuple):
        return [redacted(v) for v in values]
    if isinstance(values, str):
        return re.sub(r"^([a-z][a-z0-9+.-]*://)[^/@\s]+@", r"\1***@", values)
    return values


def log_config(config: PipelineConfig, *, run_id: str) -> None:
    """Log the resolved config of a run to ``run_id``: every section as parameters (flattened,
    ``evaluate.gates.min_pairwise_accuracy``; lists as JSON) and the whole as the artifact
    ``config.yaml``, the file ``orchrm pipeline --config`` reads back. Credentials are masked
    (:func:`redacted`)."""
    import yaml

    values = redacted(config.model_dump(mode="json"))
    uri = tracking_uri(config)
    log_batch(uri, run_id, params=as_params(values), what=f"logging the config to run {run_id}")
    with tempfile.TemporaryDirectory(prefix="orchrm-config-") as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
        c = client(uri)
        with_server_retries(uri, lambda: c.log_artifact(run_id, str(path)), f"logging config.yaml to run {run_id}")


def as_metrics(values: Mapping[str, float], *, step: int = 0, prefix: str = "") -> list:
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    out = []
    for key, value in values.items():
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(float(value)):
            continue
        out.append(Metric(f"{prefix}{key}", float(value), now, step))
    return out


def log_batch(uri: str, run_id: str, *, metrics: list | None = None, params: list | None = None,
              tags: list | None = None, what: str) -> None:
    """``log_batch`` in chunks MLflow accepts (at most 1000 metrics, 100 params, 100 tags a call)."""
    c = client(uri)
    metrics, params, tags = metrics or [], params or [], tags or []
    for lo in range(0, len(params), 100):
        with_server_retries(uri, lambda lo=lo: c.log_batch(run_id, params=params[lo : lo + 100]), what)
    for lo in range(0, len(tags), 100):
        with_server_retries(uri, lambda lo=lo: c.log_batch(run_id, tags=tags[lo : lo + 100]), what)
    for lo in range(0, len(metrics), 1000):
        with_server_retries(uri, lambda lo=lo: c.log_batch(run_id, metrics=metrics[lo : lo + 1000]), what)


class MlflowCallback(TrainCallback):
    """Logs a training run to the MLflow run ``run_id``: params at the start (flattened
    ``model.*`` / ``train.*`` keys and the data hash), ``loss`` / ``lr`` / ``grad_norm`` every
    ``log_interval`` steps (MLflow step = optimizer step), ``epoch.*`` metrics after each
    evaluation (MLflow step = epoch) and the result's summary figures at the end.

    It holds only strings, so it can be handed to another thread or process; the client is made
    there on first use."""

    def __init__(self, run_id: str, *, tracking_uri: str | None = None) -> None:
        import mlflow

        self.run_id = run_id
        self.tracking_uri = tracking_uri or mlflow.get_tracking_uri()

    def _log(self, *, metrics: list | None = None, params: list | None = None) -> None:
        log_batch(self.tracking_uri, self.run_id, metrics=metrics, params=params, what=f"logging training to run {self.run_id}")

    def on_train_begin(self, params: Mapping[str, Any]) -> None:
        self._log(params=as_params(params))

    def on_log(self, step: int, metrics: Mapping[str, float]) -> None:
        self._log(metrics=as_metrics(metrics, step=step))

    def on_eval(self, record: EpochRecord, model: Any) -> None:
        self._log(metrics=as_metrics(record.figures(), step=record.epoch, prefix="epoch."))

    def on_train_end(self, result: TrainResult) -> None:
        values = {
            "best_epoch": result.best_epoch,
            "best_val_loss": result.best_val_loss,
            "best_val_accuracy": result.best_val_accuracy,
            # the model's own validation figures (the mean of the weights from the best epoch on)
            "averaged_epochs": result.averaged_epochs,
            "final_val_loss": result.final_val_loss,
            "final_val_accuracy": result.final_val_accuracy,
            "temperature": result.temperature,
            "steps": result.steps,
            "train_pairs": result.train_pairs,
            "val_pairs": result.val_pairs,
            "train_seconds": result.train_seconds,
            "pairs_per_second": result.pairs_per_second,
            "reward_mean": result.reward_mean,
            "reward_std": result.reward_std,
            "stopped_early": float(result.stopped_early),
        }
        self._log(metrics=as_metrics(values, prefix="train."))
        c = client(self.tracking_uri)
        with_server_retries(self.tracking_uri, lambda: c.set_tag(self.run_id, "orchrm.data_hash", result.data_hash), "tagging the run")


#: the MLflow data sets the pipeline logs: the pair table (context ``training``) and the held-out
#: candidate pool (context ``evaluation``)
PAIRS_DATASET = "pairs"
POOL_DATASET = "pool"
#: run tags holding those data sets' digests
DATA_DIGEST_TAG = "orchrm.data_digest"
POOL_DIGEST_TAG = "orchrm.pool_digest"


@dataclass(frozen=True)
class DatasetRef:
    """An ``mlflow.data`` data set as a metric names it (``dataset_name`` / ``dataset_digest``)."""

    name: str
    digest: str
    context: str


def log_dataset(df: pd.DataFrame, *, run_ids: Sequence[str], name: str, digest: str, source: str, context: str,
                tag: str | None = None) -> DatasetRef:
    """Log ``df`` as an ``mlflow.data`` data set (schema, profile, ``source`` = where the table
    lives, the given ``digest``) with ``context`` (``training`` / ``evaluation``) as an input of
    every run of ``run_ids``, and tag each with the digest under ``tag``. Logging it again to the
    same run adds nothing (MLflow keeps one input per data set and run)."""
    import mlflow.data
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    dataset = mlflow.data.from_pandas(df, source=source, name=name, digest=digest)
    fields = dataset.to_dict()
    entity = Dataset(name=fields["name"], digest=fields["digest"], source_type=fields["source_type"], source=fields["source"],
                     schema=fields.get("schema"), profile=fields.get("profile"))
    entry = DatasetInput(entity, tags=[InputTag(MLFLOW_DATASET_CONTEXT, context)])
    uri = mlflow.get_tracking_uri()
    c = client(uri)
    for run_id in dict.fromkeys(r for r in run_ids if r):
        with_server_retries(uri, lambda r=run_id: c.log_inputs(r, datasets=[entry]), f"logging the {name} data set to run {run_id}")
        if tag:
            with_server_retries(uri, lambda r=run_id: c.set_tag(r, tag, dataset.digest), "tagging the run")
    return DatasetRef(name=name, digest=dataset.digest, context=context)


#: where a ``build-pairs`` run keeps its pair table, so that a later run on another machine (the
#: weekly re-evaluation) reads the held-out pairs from the tracking server, never from a local folder
PAIRS_ARTIFACT = "pairs/pairs.parquet"
#: tag of a pipeline's parent run: the id of its ``build-pairs`` run (whose artifact is :data:`PAIRS_ARTIFACT`)
PAIRS_RUN_TAG = "orchrm.pairs_run_id"


def set_tag(config: PipelineConfig, run_id: str, key: str, value: str) -> None:
    """Tag ``run_id`` with ``key`` = ``value`` (retried against a server)."""
    uri = tracking_uri(config)
    c = client(uri)
    with_server_retries(uri, lambda: c.set_tag(run_id, key, value), f"tagging run {run_id} with {key}")


def log_file_artifact(path: Path, *, run_id: str, artifact_path: str) -> str:
    """Log the file ``path`` to ``run_id`` as ``artifact_path`` (its folder part the artifact
    directory, its file name kept) on the tracking server's artifact store; returns
    ``runs:/<run_id>/<artifact_path>``."""
    import mlflow

    folder, _, name = artifact_path.rpartition("/")
    if name != Path(path).name:
        raise ValueError(f"the artifact {artifact_path!r} must keep the file's name {Path(path).name!r}")
    uri = mlflow.get_tracking_uri()
    c = client(uri)
    with_server_retries(uri, lambda: c.log_artifact(run_id, str(path), folder or None), f"logging {artifact_path} to run {run_id}")
    return f"runs:/{run_id}/{artifact_path}"


def has_artifact(config: PipelineConfig, run_id: str, artifact_path: str) -> bool:
    """Whether ``run_id`` has the artifact file ``artifact_path``."""
    uri = tracking_uri(config)
    c = client(uri)
    folder, _, name = artifact_path.rpartition("/")
    listed = with_server_retries(uri, lambda: c.list_artifacts(run_id, folder or None), f"listing the artifacts of run {run_id}")
    return any(f.path == artifact_path for f in listed)


def download_artifact_uri(artifact_uri: str, dst_dir: Path, *, uri: str | None = None) -> Path:
    """Download the MLflow artifact ``artifact_uri`` (``runs:/<run>/<path>`` and the like) into
    ``dst_dir`` (through a tracking server's artifact proxy, or the store's folder) from the store
    ``uri``, by default ``MLFLOW_TRACKING_URI`` (else the process's tracking URI); returns the
    local file. :class:`RegistryError` when it is not there."""
    import mlflow
    import mlflow.artifacts
    from mlflow.exceptions import MlflowException

    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or mlflow.get_tracking_uri()
    dst_dir.mkdir(parents=True, exist_ok=True)
    try:
        local = with_server_retries(uri, lambda: mlflow.artifacts.download_artifacts(
            artifact_uri=artifact_uri, dst_path=str(dst_dir), tracking_uri=uri), f"downloading {artifact_uri}")
    except (MlflowException, OSError) as exc:
        raise RegistryError(f"cannot download {artifact_uri} from the tracking store at {uri} ({type(exc).__name__}: {exc}); "
                            "check MLFLOW_TRACKING_URI and the run id") from None
    return Path(local)


def log_pairs_dataset(pairs: pd.DataFrame, *, run_id: str, source: str, also: Sequence[str] = ()) -> str:
    """Log the pair table as the data set :data:`PAIRS_DATASET` (context ``training``) of
    ``run_id`` and of the runs ``also`` (:func:`log_dataset`), whose digest is
    :func:`orchrm.data.tables.pairs_digest`, the ``data_hash`` of a model trained on it, and tag
    each run with it (``orchrm.data_digest``); returns the digest."""
    from orchrm.data.tables import pairs_digest

    ref = log_dataset(pairs, run_ids=(run_id, *also), name=PAIRS_DATASET, digest=pairs_digest(pairs), source=source,
                      context="training", tag=DATA_DIGEST_TAG)
    return ref.digest


def log_pool_dataset(pool: Any, *, run_ids: Sequence[str], source: str) -> DatasetRef:
    """Log a :class:`orchrm.evaluation.pool.CandidatePool` as the data set :data:`POOL_DATASET`
    (context ``evaluation``, digest :meth:`CandidatePool.digest`) of ``run_ids``, each tagged
    ``orchrm.pool_digest``."""
    return log_dataset(pool.frame, run_ids=run_ids, name=POOL_DATASET, digest=pool.digest(), source=source,
                       context="evaluation", tag=POOL_DIGEST_TAG)


def log_model_inputs(run_id: str, model_ids: Sequence[str | None]) -> None:
    """Record the LoggedModels ``model_ids`` (None skipped) as inputs of ``run_id``: the models an
    evaluation scored, listed on the run's page and linked back from each model's."""
    import mlflow
    from mlflow.entities import LoggedModelInput

    models = [LoggedModelInput(m) for m in dict.fromkeys(model_ids) if m]
    if not models:
        return
    uri = mlflow.get_tracking_uri()
    c = client(uri)
    with_server_retries(uri, lambda: c.log_inputs(run_id, models=models), f"logging the evaluated models to run {run_id}")


def run_params(uri: str, run_id: str) -> dict[str, str]:
    """The parameters of ``run_id``, as MLflow stores them (strings)."""
    c = client(uri)
    return dict(with_server_retries(uri, lambda: c.get_run(run_id), f"reading run {run_id}").data.params)


def log_validation(report: Any, *, run_id: str, name: str) -> None:
    """Log a :class:`orchrm.data.validation.ValidationReport`: its result JSON files and Data Docs
    folder under ``validation/<name>/``, and ``validation.<name>.*`` metrics (success, failures,
    warnings)."""
    import mlflow

    uri = mlflow.get_tracking_uri()
    c = client(uri)
    where = f"validation/{name}"
    for key, path in dict(report.files).items():
        path = Path(path)
        if key == "data_docs":
            folder = path if path.is_dir() else path.parent
            with_server_retries(uri, lambda f=folder: c.log_artifacts(run_id, str(f), f"{where}/data_docs"), "logging Data Docs")
        elif path.is_file():
            with_server_retries(uri, lambda p=path: c.log_artifact(run_id, str(p), where), "logging GX results")
    values = {"success": float(report.success), "failures": len(report.failures), "warnings": len(report.warnings)}
    values.update({f"rows.{k}": v for k, v in dict(report.rows).items()})
    log_batch(uri, run_id, metrics=as_metrics(values, prefix=f"validation.{name}."), what="logging validation metrics")


def log_evaluation(report: EvaluationReport, *, run_id: str, champion_version: int | None = None, model_id: str | None = None,
                   datasets: Mapping[str, DatasetRef] | None = None) -> None:
    """Log an :class:`orchrm.evaluation.EvaluationReport` to ``run_id``: its flat metrics, the
    champion's (same pool, same run) as ``champion.<name>``, the best-of-N curves
    (:meth:`EvaluationReport.curves`: ``best_of_n.<selector>[.<domain>]`` and the like at step N)
    and the files of :meth:`EvaluationReport.write` (JSON, CSV tables, PNG plots) under
    ``evaluation/``.

    ``model_id``: the LoggedModel evaluated; every metric is linked to it (its page lists them),
    and to the data set it was measured on (``datasets``: ``"pairs"`` for the pairwise figures,
    measured on the held-out split, ``"pool"`` for the rest, :func:`orchrm.evaluation.report.measured_on`).
    ``champion_version``: the version evaluated as champion, kept as a run tag so that
    :func:`promote` can tell whether the champion changed since."""
    import time

    import mlflow
    from mlflow.entities import Metric

    from orchrm.evaluation.report import measured_on

    uri = mlflow.get_tracking_uri()
    c = client(uri)
    datasets = dict(datasets or {})
    now = int(time.time() * 1000)

    def metric(key: str, value: float, step: int = 0) -> Metric:
        ref = datasets.get(measured_on(key))
        return Metric(key, float(value), now, step, model_id=model_id,
                      dataset_name=ref.name if ref else None, dataset_digest=ref.digest if ref else None)

    flat = dict(report.metrics) | {f"{CHAMPION_PREFIX}{k}": v for k, v in (report.champion_metrics or {}).items()}
    metrics = [metric(k, v) for k, v in flat.items() if _finite(v)]
    metrics += [metric(name, v, step=n) for name, points in report.curves().items() for n, v in points.items() if _finite(v)]
    log_batch(uri, run_id, metrics=metrics, what=f"logging evaluation metrics to run {run_id}")
    with tempfile.TemporaryDirectory(prefix="orchrm-eval-") as tmp:
        report.write(tmp)
        with_server_retries(uri, lambda: c.log_artifacts(run_id, tmp, "evaluation"), "logging evaluation files")
    if champion_version is not None:
        with_server_retries(uri, lambda: c.set_tag(run_id, CHAMPION_EVALUATED_TAG, str(champion_version)), "tagging the run")


def _finite(value: Any) -> bool:
    """A number MLflow can store as a metric (not None, not a bool, not NaN or infinite)."""
    return value is not None and not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(float(value))
