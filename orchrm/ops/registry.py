"""MLflow tracking and the model registry (DESIGN §8).

The store is SQLite under the data folder by default (``<data_dir>/mlflow.db``, artifacts in
``<data_dir>/mlartifacts``); ``MLFLOW_TRACKING_URI`` or ``registry.tracking_uri`` points it at a team
server. Every function takes the run it logs to as ``run_id``: the active run of MLflow is per thread,
and work submitted to another thread or process must not depend on it.

Registering and promoting are separate steps. :func:`register_candidate` gives every candidate the
``challenger`` alias and tags it with its gate verdict; :func:`promote` moves ``champion`` to a
version whose gates pass, and can be rerun on any version (it re-checks the gates from the metrics
stored in the version's run).

>>> exp = configure(config)                                           # doctest: +SKIP
>>> run_id = start_run(config, "orchrm-pipeline")                      # doctest: +SKIP
>>> uri = log_model(".orchrm/model", run_id=run_id, config=config)     # doctest: +SKIP
>>> version = register_candidate(uri, run_id=run_id, verdict=v, data_digest=d, config=config)  # doctest: +SKIP
>>> promote(version, config=config)                                    # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from orchrm.errors import PromotionRejected, RegistryError
from orchrm.model.trainer import TrainCallback

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from mlflow import MlflowClient

    from orchrm.config import PipelineConfig
    from orchrm.evaluation.gates import Verdict
    from orchrm.evaluation.report import EvaluationReport
    from orchrm.model.trainer import EpochRecord, TrainResult

log = logging.getLogger(__name__)

T = TypeVar("T")

CHALLENGER = "challenger"
CHAMPION = "champion"
#: where the pyfunc's class lives; logged from code, never cloudpickled
PYFUNC_CODE = Path(__file__).with_name("pyfunc_model.py")
#: the model's directory inside a run / LoggedModel
MODEL_NAME_IN_RUN = "reward_model"
#: version tag holding the verdict as JSON (what ``promote`` falls back on)
VERDICT_TAG = "verdict_json"
#: run tag: the champion version a candidate was evaluated against, in the same run
CHAMPION_EVALUATED_TAG = "orchrm.champion_version"
#: prefix of the champion's metrics logged in a candidate's run (same pool, same run)
CHAMPION_PREFIX = "champion."

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


def _is_remote(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def _sqlite_path(uri: str) -> Path | None:
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def check_server(uri: str) -> None:
    """Raise :class:`RegistryError` when the tracking server at ``uri`` does not answer its health
    check after :data:`SERVER_ATTEMPTS` tries (exponential back-off); a no-op for local stores.

    MLflow's own HTTP client retries a refused connection for minutes; this bounded check comes
    first so an unreachable server fails fast with what to do."""
    if _is_remote(uri):
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
            f"the MLflow tracking server at {uri} is unreachable ({type(cause).__name__}: {cause}) after "
            f"{SERVER_ATTEMPTS} attempts: start it (e.g. `mlflow server --backend-store-uri sqlite:///<path>/mlflow.db "
            "--host 127.0.0.1 --port 5000`), or point MLFLOW_TRACKING_URI / registry.tracking_uri at a server "
            "that runs (unset both to use the local SQLite store)"
        ) from None


def with_server_retries(uri: str, fn: Callable[[], T], what: str) -> T:
    """``fn()``; against a tracking server, connection failures are retried (bounded) and then
    reported as :class:`RegistryError` naming ``what`` failed."""
    if not _is_remote(uri):
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
            f"{what}: the MLflow tracking server at {uri} stopped answering "
            f"({exc.last_attempt.exception()}); check that it runs and is reachable, then retry"
        ) from None


def client(uri: str) -> MlflowClient:
    """An MlflowClient on ``uri`` (checked reachable first when it is a server)."""
    from mlflow import MlflowClient

    check_server(uri)
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def _client(config: PipelineConfig) -> MlflowClient:
    return client(tracking_uri(config))


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
        if exp is not None:
            return exp.experiment_id
        return c.create_experiment(config.registry.experiment, artifact_location=artifact_root(config))

    return with_server_retries(uri, get_or_create, f"creating experiment {config.registry.experiment!r}")


def start_run(
    config: PipelineConfig,
    name: str,
    *,
    parent_run_id: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> str:
    """Create a run (nested under ``parent_run_id`` when given) in the configured experiment and
    return its id. The run is not made active in any thread: pass the id to every logging call."""
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    experiment_id = configure(config)
    all_tags = {"orchrm.stage": name, "orchrm.git_commit": git_commit(), **(tags or {})}
    if parent_run_id:
        all_tags[MLFLOW_PARENT_RUN_ID] = parent_run_id
    uri = tracking_uri(config)
    run = with_server_retries(uri, lambda: client(uri).create_run(experiment_id, run_name=name, tags=all_tags), f"starting run {name!r}")
    return run.info.run_id


def end_run(config: PipelineConfig, run_id: str, *, status: str = "FINISHED") -> None:
    """Mark ``run_id`` as ``FINISHED`` (or ``FAILED`` / ``KILLED``)."""
    uri = tracking_uri(config)
    with_server_retries(uri, lambda: client(uri).set_terminated(run_id, status=status), f"ending run {run_id}")


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


def _flat(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _flat(f"{prefix}.{k}" if prefix else str(k), v)
    else:
        yield prefix, value


def _params(values: Mapping[str, Any]) -> list:
    from mlflow.entities import Param

    out = []
    for key, value in _flat("", values):
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        out.append(Param(key, text[:6000]))  # MLflow's limit on a param value
    return out


def _metrics(values: Mapping[str, float], *, step: int = 0, prefix: str = "") -> list:
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


def _log_batch(uri: str, run_id: str, *, metrics: list | None = None, params: list | None = None, what: str) -> None:
    """``log_batch`` in chunks MLflow accepts (at most 1000 metrics, 100 params a call)."""
    c = client(uri)
    metrics, params = metrics or [], params or []
    for lo in range(0, len(params), 100):
        with_server_retries(uri, lambda lo=lo: c.log_batch(run_id, params=params[lo : lo + 100]), what)
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
        _log_batch(self.tracking_uri, self.run_id, metrics=metrics, params=params, what=f"logging training to run {self.run_id}")

    def on_train_begin(self, params: Mapping[str, Any]) -> None:
        self._log(params=_params(params))

    def on_log(self, step: int, metrics: Mapping[str, float]) -> None:
        self._log(metrics=_metrics(metrics, step=step))

    def on_eval(self, record: EpochRecord, model: Any) -> None:
        values = {
            "train_loss": record.train_loss,
            "train_accuracy": record.train_accuracy,
            "val_loss": record.val_loss,
            "val_accuracy": record.val_accuracy,
            "lr": record.lr,
            "seconds": record.seconds,
            "step": record.step,
        }
        self._log(metrics=_metrics(values, step=record.epoch, prefix="epoch."))

    def on_train_end(self, result: TrainResult) -> None:
        values = {
            "best_epoch": result.best_epoch,
            "best_val_loss": result.best_val_loss,
            "best_val_accuracy": result.best_val_accuracy,
            "steps": result.steps,
            "train_pairs": result.train_pairs,
            "val_pairs": result.val_pairs,
            "train_seconds": result.train_seconds,
            "pairs_per_second": result.pairs_per_second,
            "reward_mean": result.reward_mean,
            "reward_std": result.reward_std,
            "stopped_early": float(result.stopped_early),
        }
        self._log(metrics=_metrics(values, prefix="train."))
        c = client(self.tracking_uri)
        with_server_retries(self.tracking_uri, lambda: c.set_tag(self.run_id, "orchrm.data_hash", result.data_hash), "tagging the run")


def log_pairs_dataset(pairs: pd.DataFrame, *, run_id: str, source: str, name: str = "pairs", context: str = "training") -> str:
    """Log the pair table as an ``mlflow.data`` dataset input of ``run_id`` (schema, profile,
    ``source`` = where the table lives); returns its digest."""
    import mlflow.data
    from mlflow.entities import DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    dataset = mlflow.data.from_pandas(pairs, source=source, name=name)
    uri = mlflow.get_tracking_uri()
    c = client(uri)
    entity = DatasetInput(dataset._to_mlflow_entity(), tags=[InputTag(MLFLOW_DATASET_CONTEXT, context)])
    with_server_retries(uri, lambda: c.log_inputs(run_id, datasets=[entity]), f"logging the pairs dataset to run {run_id}")
    with_server_retries(uri, lambda: c.set_tag(run_id, "orchrm.data_digest", dataset.digest), "tagging the run")
    return dataset.digest


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
    _log_batch(uri, run_id, metrics=_metrics(values, prefix=f"validation.{name}."), what="logging validation metrics")


def log_evaluation(report: EvaluationReport, *, run_id: str, champion_version: int | None = None) -> None:
    """Log an :class:`orchrm.evaluation.EvaluationReport` to ``run_id``: its flat metrics, the
    champion's (same pool, same run) as ``champion.<name>``, and the files of
    :meth:`EvaluationReport.write` (JSON, CSV tables, PNG plots) under ``evaluation/``.
    ``champion_version``: the version evaluated as champion, kept as a run tag so that
    :func:`promote` can tell whether the champion changed since."""
    import mlflow

    uri = mlflow.get_tracking_uri()
    c = client(uri)
    metrics = _metrics(report.metrics)
    if report.champion_metrics:
        metrics += _metrics(report.champion_metrics, prefix=CHAMPION_PREFIX)
    _log_batch(uri, run_id, metrics=metrics, what=f"logging evaluation metrics to run {run_id}")
    with tempfile.TemporaryDirectory(prefix="orchrm-eval-") as tmp:
        report.write(tmp)
        with_server_retries(uri, lambda: c.log_artifacts(run_id, tmp, "evaluation"), "logging evaluation files")
    if champion_version is not None:
        with_server_retries(uri, lambda: c.set_tag(run_id, CHAMPION_EVALUATED_TAG, str(champion_version)), "tagging the run")


def _model_file(model_dir_or_file: str | os.PathLike) -> Path:
    from orchrm.model.reward_model import MODEL_FILE

    path = Path(model_dir_or_file)
    if path.is_dir():
        path = path / MODEL_FILE
    if not path.is_file():
        raise RegistryError(f"no model file at {path}: train and save a model first (BradleyTerryModel.save)")
    return path


def pip_requirements() -> list[str]:
    """What the pyfunc needs installed to load and score, pinned to the versions that logged it:
    orchrm's core (``pip install orchrm``), MLflow's client (``mlflow-skinny``, not the server) and
    the libraries the model and ``predict`` import; none of the ``[pipeline]`` extra."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for dist in ("orchrm", "mlflow-skinny", "torch", "transformers", "tokenizers", "safetensors", "numpy", "pandas", "pydantic", "pyyaml"):
        try:
            out.append(f"{dist}=={version(dist)}")
        except PackageNotFoundError:
            out.append(dist)
    return out


def signature_and_example() -> tuple[Any, pd.DataFrame]:
    """The pyfunc's signature (``prompt``, ``action`` strings -> ``reward`` float) and an input
    example of two rows."""
    import pandas as pd
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    signature = ModelSignature(
        inputs=Schema([ColSpec("string", "prompt"), ColSpec("string", "action")]),
        outputs=Schema([ColSpec("float", "reward")]),
    )
    example = pd.DataFrame(
        {
            "prompt": ["What is 12 + 30?", "What is 12 + 30?"],
            "action": ['<agent id="a1" type="CoT" model="small"/>', '<agent id="a1" type="SelfConsistency" model="small" k="5"/>'],
        }
    )
    return signature, example


def log_model(model_dir_or_file: str | os.PathLike, *, run_id: str, config: PipelineConfig) -> str:
    """Log a saved reward model as a pyfunc of ``run_id``; returns its ``models:/<model_id>`` URI.

    The Python class is :mod:`orchrm.ops.pyfunc_model`, logged from code (no cloudpickle); the weights
    are the model's safetensors file, an artifact of the pyfunc; the signature, an input example
    and explicit pip requirements go with it."""
    import mlflow.pyfunc
    from mlflow.models import Model

    file = _model_file(model_dir_or_file)
    uri = tracking_uri(config)
    configure(config)
    signature, example = signature_and_example()

    def do() -> str:
        # the LoggedModel is created in the run's experiment, by id: Model.log would create it in
        # the thread's active experiment (the Default one, artifacts under ./mlruns)
        c = client(uri)
        experiment_id = c.get_run(run_id).info.experiment_id
        logged = c.create_logged_model(
            experiment_id, name=MODEL_NAME_IN_RUN, source_run_id=run_id, model_type="orchrm-reward-model"
        )
        info = Model.log(
            artifact_path=None,
            name=MODEL_NAME_IN_RUN,
            flavor=mlflow.pyfunc,
            run_id=run_id,
            python_model=str(PYFUNC_CODE),
            artifacts={"model": str(file)},
            signature=signature,
            input_example=example,
            pip_requirements=pip_requirements(),
            metadata={"orchrm_model_file": file.name},
            model_id=logged.model_id,
        )
        return info.model_uri

    return with_server_retries(uri, do, f"logging the model to run {run_id}")


# --------------------------------------------------------------------------------------------
# the registry


def _ensure_registered_model(c: MlflowClient, name: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        c.get_registered_model(name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        c.create_registered_model(name, description="OrchRM Bradley-Terry reward model: R(prompt, action) -> reward")


def register_candidate(model_uri: str, *, run_id: str, verdict: Verdict, data_digest: str, config: PipelineConfig) -> int:
    """Register ``model_uri`` as a new version of ``config.registry.model_name`` with alias
    ``challenger``; returns the version number.

    Version tags: ``gate.<name>`` per gate and ``verdict`` (:meth:`Verdict.tags`), the verdict as
    JSON, ``data_digest``, ``git_commit`` and ``run_id``. ``champion`` is never touched here."""
    uri = tracking_uri(config)
    configure(config)
    c = client(uri)
    name = config.registry.model_name
    tags = {
        **verdict.tags(),
        VERDICT_TAG: json.dumps(verdict.to_dict()),
        "data_digest": data_digest,
        "git_commit": git_commit(),
        "run_id": run_id,
    }

    def do() -> int:
        _ensure_registered_model(c, name)
        mv = c.create_model_version(name, source=model_uri, run_id=run_id, tags=tags, model_id=_model_id(model_uri))
        c.set_registered_model_alias(name, CHALLENGER, mv.version)
        return int(mv.version)

    version = with_server_retries(uri, do, f"registering {model_uri} as {name!r}")
    log.info("registered %s version %d (%s), alias %s", name, version, verdict.label, CHALLENGER)
    return version


def _model_id(model_uri: str) -> str | None:
    rest = model_uri.removeprefix("models:/")
    return rest if model_uri.startswith("models:/m-") and "/" not in rest else None


def champion_version(config: PipelineConfig) -> int | None:
    """The version that holds ``champion``, or None (no registered model yet, or no champion)."""
    return alias_version(config, CHAMPION)


def alias_version(config: PipelineConfig, alias: str) -> int | None:
    from mlflow.exceptions import MlflowException

    uri = tracking_uri(config)
    c = client(uri)
    try:
        mv = with_server_retries(uri, lambda: c.get_model_version_by_alias(config.registry.model_name, alias), "reading an alias")
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
            return None
        raise
    return int(mv.version)


def stored_verdict(version: int, *, config: PipelineConfig) -> Verdict:
    """The verdict registered with ``version`` (its ``verdict_json`` tag)."""
    from orchrm.evaluation.gates import Verdict

    mv = _get_version(version, config)
    text = mv.tags.get(VERDICT_TAG)
    if not text:
        raise RegistryError(
            f"version {version} of {config.registry.model_name!r} carries no verdict: register it with "
            "orchrm.ops.registry.register_candidate (or pass verdict= to promote)"
        )
    return Verdict.from_dict(json.loads(text))


def _get_version(version: int, config: PipelineConfig) -> Any:
    from mlflow.exceptions import MlflowException

    uri = tracking_uri(config)
    c = client(uri)
    name = config.registry.model_name
    try:
        return with_server_retries(uri, lambda: c.get_model_version(name, str(version)), f"reading version {version}")
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        raise RegistryError(
            f"{name!r} has no version {version} in {uri}: see the versions in the MLflow UI "
            f"(`mlflow ui --backend-store-uri {uri}`), or check MLFLOW_TRACKING_URI points at the right store"
        ) from None


def regate(version: int, *, config: PipelineConfig) -> Verdict:
    """The verdict of ``version`` re-checked from the metrics stored in its run
    (``orchrm.evaluation.check_gates`` with the configured gates and the champion's metrics of the
    same run); the stored verdict where the run holds no evaluation metrics."""
    from orchrm.evaluation.gates import check_gates as check

    mv = _get_version(version, config)
    if not mv.run_id:
        return stored_verdict(version, config=config)
    uri = tracking_uri(config)
    run = with_server_retries(uri, lambda: client(uri).get_run(mv.run_id), f"reading run {mv.run_id}")
    all_metrics = dict(run.data.metrics)
    metrics = {k: v for k, v in all_metrics.items() if not k.startswith(CHAMPION_PREFIX)}
    champion = {k.removeprefix(CHAMPION_PREFIX): v for k, v in all_metrics.items() if k.startswith(CHAMPION_PREFIX)}
    if "pairwise_accuracy" not in metrics:
        return stored_verdict(version, config=config)
    verdict = check(metrics, config.evaluate.gates, champion=champion or None)
    return _champion_still_current(verdict, version=version, evaluated=run.data.tags.get(CHAMPION_EVALUATED_TAG), config=config)


def _champion_still_current(verdict: Verdict, *, version: int, evaluated: str | None, config: PipelineConfig) -> Verdict:
    """Fail the ``beats_champion`` gate when the champion moved since the candidate was evaluated:
    its comparison no longer says anything about the current champion."""
    from orchrm.evaluation.gates import GateResult, Verdict

    if not config.evaluate.gates.beat_champion:
        return verdict
    current = champion_version(config)
    if current is None or current == version or (evaluated is not None and int(evaluated) == current):
        return verdict
    against = f"v{evaluated}" if evaluated is not None else "no champion"
    stale = GateResult(
        name="beats_champion",
        passed=False,
        value=None,
        threshold=None,
        detail=f"the champion is now v{current} but this candidate was evaluated against {against}: re-evaluate it "
        f"against v{current} (orchrm evaluate), then promote",
    )
    return Verdict(tuple(g for g in verdict.gates if g.name != "beats_champion") + (stale,))


def promote(version: int, *, config: PipelineConfig, verdict: Verdict | None = None) -> bool:
    """Give ``version`` the ``champion`` alias when its verdict passed; returns True (also when it
    already was champion: rerunning is a no-op). Raises :class:`PromotionRejected` naming every
    failed gate otherwise, leaving ``champion`` where it was.

    ``verdict`` None re-checks the gates from the metrics stored in the version's run (see
    :func:`regate`); the verdict tags of the version are updated to the one used."""
    uri = tracking_uri(config)
    configure(config)
    name = config.registry.model_name
    verdict = regate(version, config=config) if verdict is None else verdict
    c = client(uri)
    tags = {**verdict.tags(), VERDICT_TAG: json.dumps(verdict.to_dict())}
    for key, value in tags.items():
        with_server_retries(uri, lambda k=key, v=value: c.set_model_version_tag(name, str(version), k, v), "tagging the version")
    if not verdict.passed:
        failed = "; ".join(f"{g.name}: {g.detail}" for g in verdict.failed()) or "no gate was evaluated"
        current = champion_version(config)
        where = f"champion stays at version {current}" if current is not None else "there is still no champion"
        raise PromotionRejected(f"version {version} of {name!r} failed {len(verdict.failed())} gate(s): {failed} ({where})")
    if champion_version(config) == version:
        log.info("%s version %d already is %s", name, version, CHAMPION)
        return True
    with_server_retries(uri, lambda: c.set_registered_model_alias(name, CHAMPION, str(version)), "setting the champion alias")
    log.info("%s version %d is now %s", name, version, CHAMPION)
    return True


def version_info(version: int, *, config: PipelineConfig) -> dict[str, Any]:
    """A version's aliases, tags, run id and source, as a dict (for the CLI and reports)."""
    mv = _get_version(version, config)
    return {"version": int(mv.version), "aliases": list(mv.aliases), "tags": dict(mv.tags), "run_id": mv.run_id, "source": mv.source}
