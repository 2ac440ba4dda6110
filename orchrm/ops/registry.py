"""The model registry (DESIGN §8): a reward model logged as a pyfunc, registered, gated and promoted by alias.

Registering and promoting are separate steps. :func:`register_candidate` tags every candidate with
its gate verdict and gives ``challenger`` to one that passed every absolute gate; :func:`promote`
moves ``champion`` to a version whose gates pass, and can be rerun on any version (it re-checks
the gates from the metrics stored in the version's run, against the settings recorded when it was
registered); the champion it replaces keeps ``previous``, which :func:`rollback` restores. Both
run under the promotion lock (:mod:`orchrm.ops.locks`). The store, runs and retries are :mod:`orchrm.ops.tracking`'s.

>>> run_id = tracking.start_run(config, "orchrm-pipeline")             # doctest: +SKIP
>>> uri = log_model(".orchrm/model", run_id=run_id, config=config)     # doctest: +SKIP
>>> version = register_candidate(uri, run_id=run_id, verdict=v, data_digest=d, config=config)  # doctest: +SKIP
>>> promote(version, config=config)                                    # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchrm.errors import PromotionRejected, RegistryError
from orchrm.ops.locks import promotion_lock
from orchrm.ops.tracking import (
    CHAMPION_EVALUATED_TAG,
    CHAMPION_PREFIX,
    client,
    configure,
    git_commit,
    tracking_uri,
    with_server_retries,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from mlflow import MlflowClient

    from orchrm.config import GatesConfig, PipelineConfig
    from orchrm.evaluation.gates import Verdict

log = logging.getLogger(__name__)

CHALLENGER = "challenger"
CHAMPION = "champion"
#: the champion a promotion replaced, which ``orchrm rollback`` restores
PREVIOUS = "previous"
#: where the pyfunc's class lives; logged from code, never cloudpickled
PYFUNC_CODE = Path(__file__).with_name("pyfunc_model.py")
#: the model's directory inside a run / LoggedModel
MODEL_NAME_IN_RUN = "reward_model"
#: version tag holding the verdict as JSON (what ``promote`` falls back on)
VERDICT_TAG = "verdict_json"
#: version tag holding the gate settings it was registered under, as JSON (what ``promote`` checks against)
GATES_TAG = "gates_json"
#: the registered model's description
REGISTERED_MODEL_DESCRIPTION = "OrchRM Bradley-Terry reward model: R(prompt, action) -> reward"
#: what a client needs to write to the registry (register, tag, move or remove an alias) on a server
#: with authentication (:mod:`orchrm.ops.auth`)
WRITE_NEEDS = "an account with MANAGE permission on the registered model (the pipeline's service account)"


# --------------------------------------------------------------------------------------------
# the model


def _model_file(model_dir_or_file: str | os.PathLike) -> Path:
    from orchrm.model.reward_model import MODEL_FILE

    path = Path(model_dir_or_file)
    if path.is_dir():
        path = path / MODEL_FILE
    if not path.is_file():
        raise RegistryError(f"no model file at {path}: train and save a model first (BradleyTerryModel.save)")
    return path


#: the project's code, shipped inside the pyfunc (its ``code/orchrm``): orchrm is not on a package
#: index, so a fresh environment (``mlflow models serve --env-manager virtualenv``, an image from
#: ``mlflow models generate-dockerfile``) gets it from the model, which MLflow puts on ``sys.path``
#: when it loads the pyfunc
PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: the distributions loading and scoring import (the model, its config and texts, ``predict``):
#: orchrm's core, less what only the registry client needs; none of the ``[pipeline]`` extra
SERVING_DISTRIBUTIONS = (
    "mlflow-skinny", "torch", "transformers", "tokenizers", "safetensors", "numpy", "pandas", "pydantic", "pyyaml", "tqdm",
)
#: where pip finds torch's CPU build: PyPI's Linux torch is the CUDA build (several GB of nvidia-*
#: wheels) that a CPU scoring server never uses; the CPU index holds the same version as ``+cpu``
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def pip_requirements() -> list[str]:
    """What a fresh environment installs to load and score the pyfunc (its ``requirements.txt``):
    :data:`SERVING_DISTRIBUTIONS` pinned to the versions that logged it, behind an
    ``--extra-index-url`` line for torch's CPU build. orchrm itself is not listed: it travels with
    the model (:data:`PACKAGE_DIR`).

    A pin drops the local version label (``torch==2.13.0``, not ``2.13.0+cpu``, which no index but
    the CPU one holds), so the same version resolves wherever pip looks; with the CPU index beside
    PyPI, pip takes ``2.13.0+cpu`` (a local label sorts after the bare version; on macOS and
    Windows PyPI's torch is the CPU build anyway). A server with a GPU runs in an environment of
    its own with CUDA torch (``mlflow models serve --env-manager local``)."""
    from importlib.metadata import PackageNotFoundError, version

    out = [f"--extra-index-url {TORCH_CPU_INDEX}"]
    for dist in SERVING_DISTRIBUTIONS:
        try:
            out.append(f"{dist}=={version(dist).partition('+')[0]}")
        except PackageNotFoundError:
            out.append(dist)
    return out


def signature_and_example() -> tuple[Any, pd.DataFrame]:
    """The pyfunc's signature (``prompt``, ``action`` strings -> ``reward`` float; parameter
    ``normalize``, a boolean, default false: rewards as ``(r - reward_mean) / reward_std`` of the
    training rewards, :meth:`BradleyTerryModel.score`) and an input example of two rows."""
    import pandas as pd
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, ParamSchema, ParamSpec, Schema

    signature = ModelSignature(
        inputs=Schema([ColSpec("string", "prompt"), ColSpec("string", "action")]),
        outputs=Schema([ColSpec("float", "reward")]),
        params=ParamSchema([ParamSpec("normalize", "boolean", False)]),
    )
    example = pd.DataFrame(
        {
            "prompt": ["What is 12 + 30?", "What is 12 + 30?"],
            "action": ['<agent id="a1" type="CoT" model="small"/>', '<agent id="a1" type="SelfConsistency" model="small" k="5"/>'],
        }
    )
    return signature, example


def log_model(model_dir_or_file: str | os.PathLike, *, run_id: str, config: PipelineConfig,
              params: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None) -> str:
    """Log a saved reward model as a pyfunc of ``run_id`` (the run that trained it); returns its
    ``models:/<model_id>`` URI. ``params`` and ``tags`` go on the LoggedModel (the pipeline passes
    the training run's parameters, so the model's page shows the settings it was trained with).

    The Python class is :mod:`orchrm.ops.pyfunc_model`, logged from code (no cloudpickle); the weights
    are the model's safetensors file, an artifact of the pyfunc; the orchrm package goes with it as
    code (:data:`PACKAGE_DIR`), and so do the signature, an input example and explicit pip
    requirements (:func:`pip_requirements`)."""
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
            experiment_id, name=MODEL_NAME_IN_RUN, source_run_id=run_id, model_type="orchrm-reward-model",
            params={k: str(v) for k, v in (params or {}).items()} or None, tags=dict(tags or {}) or None,
        )
        info = Model.log(
            artifact_path=None,
            name=MODEL_NAME_IN_RUN,
            flavor=mlflow.pyfunc,
            run_id=run_id,
            python_model=str(PYFUNC_CODE),
            artifacts={"model": str(file)},
            code_paths=[str(PACKAGE_DIR)],
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
        c.create_registered_model(name, description=REGISTERED_MODEL_DESCRIPTION)


def register_candidate(model_uri: str, *, run_id: str, verdict: Verdict, data_digest: str, config: PipelineConfig) -> int:
    """Register ``model_uri`` as a new version of ``config.registry.model_name``; returns the
    version number.

    Idempotent per run: called again for ``run_id`` (a retry after a lost answer, a retried
    stage) it returns the version already registered from that run, never a second one. The
    version gets alias ``challenger`` (shadow traffic) only when it passed every absolute gate
    (:func:`passed_absolute_gates`); otherwise ``challenger`` stays where it was.

    Version tags: ``gate.<name>`` per gate and ``verdict`` (:meth:`Verdict.tags`), the verdict as
    JSON, the gate settings as JSON (``gates_json``: what :func:`promote` re-checks against),
    ``data_digest``, ``git_commit`` and ``run_id``. ``champion`` is never touched here."""
    uri = tracking_uri(config)
    configure(config)
    c = client(uri)
    name = config.registry.model_name
    tags = {
        **verdict.tags(),
        VERDICT_TAG: json.dumps(verdict.to_dict()),
        GATES_TAG: config.evaluate.gates.model_dump_json(),
        "data_digest": data_digest,
        "git_commit": git_commit(),
        "run_id": run_id,
    }

    def do() -> int:
        # looked up on every attempt: a retry after a lost answer finds the version the first made
        _ensure_registered_model(c, name)
        existing = _versions_of_run(c, name, run_id)
        if existing:
            log.info("%s already has version %d for run %s: registering is idempotent", name, existing[0], run_id)
            return existing[0]
        mv = c.create_model_version(name, source=model_uri, run_id=run_id, tags=tags, model_id=model_id_of_uri(model_uri))
        return int(mv.version)

    with_server_retries(uri, do, f"registering {model_uri} as a version of {name!r}", needs=WRITE_NEEDS)
    version = _one_version_of_run(c, name, run_id, uri=uri)
    if passed_absolute_gates(verdict):
        _set_alias(config, CHALLENGER, version)
        log.info("registered %s version %d (%s), alias %s", name, version, verdict.label, CHALLENGER)
    else:
        failed = ", ".join(g.name for g in verdict.failed() if g.name not in RELATIVE_GATES) or "no gate was evaluated"
        log.info("registered %s version %d (%s); %s not moved: it failed %s", name, version, verdict.label, CHALLENGER, failed)
    return version


def _versions_of_run(c: MlflowClient, name: str, run_id: str) -> list[int]:
    """The versions of ``name`` registered from ``run_id``, lowest first."""
    found = c.search_model_versions(f"name='{name}' and run_id='{run_id}'")
    return sorted(int(mv.version) for mv in found)


def _one_version_of_run(c: MlflowClient, name: str, run_id: str, *, uri: str) -> int:
    """The lowest version registered from ``run_id``, after deleting any other: MLflow's HTTP client
    retries a request whose answer was lost, POST included, below every layer here, so a second
    ``create_model_version`` can land; one run is one candidate, one version."""
    versions = with_server_retries(uri, lambda: _versions_of_run(c, name, run_id), "listing the versions of a run")
    if not versions:
        raise RegistryError(f"run {run_id} has no version of {name!r} right after registering it: check the store at {uri}")
    for extra in versions[1:]:
        log.warning("%s version %d duplicates version %d (same run %s, a retried request): deleting it", name, extra, versions[0], run_id)
        with_server_retries(uri, lambda v=extra: c.delete_model_version(name, str(v)), "deleting a duplicate version", needs=WRITE_NEEDS)
    return versions[0]


def version_for_run(run_id: str, *, config: PipelineConfig) -> int | None:
    """The version registered from ``run_id`` (the lowest, should a retry have made two), or None."""
    uri = tracking_uri(config)
    c = client(uri)
    versions = with_server_retries(uri, lambda: _versions_of_run(c, config.registry.model_name, run_id), "listing the versions of a run")
    return versions[0] if versions else None


#: gates that compare with the champion rather than with a fixed bar
RELATIVE_GATES = frozenset({"beats_champion"})


def passed_absolute_gates(verdict: Verdict) -> bool:
    """Whether ``verdict`` passed every gate except those comparing with the champion
    (:data:`RELATIVE_GATES`): what a ``challenger`` needs, so shadow traffic never reaches a
    model that failed a fixed bar. False for a verdict with no absolute gate at all."""
    absolute = [g for g in verdict.gates if g.name not in RELATIVE_GATES]
    return bool(absolute) and all(g.passed for g in absolute)


def model_id_of_uri(model_uri: str) -> str | None:
    """The LoggedModel id of a ``models:/m-...`` URI (what :func:`log_model` returns); None for
    any other URI (``models:/<name>@<alias>``, a path)."""
    rest = model_uri.removeprefix("models:/")
    return rest if model_uri.startswith("models:/m-") and "/" not in rest else None


def version_model_id(version: int, *, config: PipelineConfig) -> str | None:
    """The LoggedModel behind ``version``: its ``model_id`` or, where the store leaves that empty,
    the id in its ``models:/m-...`` source; None for a version registered from another kind of
    source."""
    mv = _get_version(version, config)
    return getattr(mv, "model_id", None) or model_id_of_uri(mv.source or "")


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


def recorded_gates(version: int, *, config: PipelineConfig) -> GatesConfig:
    """The gate settings ``version`` was registered under (its ``gates_json`` tag)."""
    from orchrm.config import GatesConfig

    text = _get_version(version, config).tags.get(GATES_TAG)
    if not text:
        raise PromotionRejected(
            f"version {version} of {config.registry.model_name!r} carries no recorded gate settings ({GATES_TAG}), so its "
            "verdict cannot be re-checked: register it again with orchrm.ops.registry.register_candidate (orchrm pipeline does)"
        )
    return GatesConfig.model_validate(json.loads(text))


def loosened_gates(recorded: GatesConfig, configured: GatesConfig) -> list[str]:
    """Every setting of ``configured`` that lets through a candidate ``recorded`` would stop, as
    ``"<field> <recorded> -> <configured>"``; a changed ``best_of`` counts (it measures at another N)."""
    looser = {
        "min_pairwise_accuracy": configured.min_pairwise_accuracy < recorded.min_pairwise_accuracy,
        "best_of": configured.best_of != recorded.best_of,
        "min_best_of_n_gain": configured.min_best_of_n_gain < recorded.min_best_of_n_gain,
        "beat_cost_only": recorded.beat_cost_only and not configured.beat_cost_only,
        "max_scoring_latency_ms": configured.max_scoring_latency_ms > recorded.max_scoring_latency_ms,
        "beat_champion": recorded.beat_champion and not configured.beat_champion,
        "champion_margin": configured.champion_margin < recorded.champion_margin,
    }
    return [f"{k} {getattr(recorded, k)} -> {getattr(configured, k)}" for k, loose in looser.items() if loose]


def required_gates(gates: GatesConfig) -> tuple[str, ...]:
    """The gates a verdict must hold under ``gates`` (those :func:`orchrm.evaluation.check_gates` runs)."""
    optional = (("beats_cost_only", gates.beat_cost_only), ("beats_champion", gates.beat_champion))
    return ("pairwise_accuracy", "best_of_n_gain", *(n for n, on in optional if on), "scoring_latency")


@dataclass(frozen=True)
class PromotionCheck:
    """What :func:`check_promotion` found: the verdict re-checked under ``gates`` (the recorded
    settings, or the configured ones where they are as strict or ``override`` allows them)."""

    version: int
    verdict: Verdict
    gates: GatesConfig
    #: the loosened settings an override let through (empty without one)
    loosened: tuple[str, ...] = ()
    override: str | None = None


def check_promotion(version: int, *, config: PipelineConfig, override_gates: str | None = None) -> PromotionCheck:
    """Re-check ``version`` for promotion without moving anything.

    The gates are those recorded at registration; ``config.evaluate.gates`` replaces them only
    where no setting is looser (then a pass under them is a pass under the recorded ones) or
    ``override_gates`` gives the reason for loosening. The verdict is re-computed from the metrics
    stored in the version's run (:func:`regate`) and must hold every gate those settings require;
    ``beats_champion`` fails when ``champion`` is no longer the version it was evaluated against.
    Raises :class:`PromotionRejected` for loosened settings without a reason, a missing gate or
    missing recorded settings; a verdict that merely failed is returned (see :func:`promote`)."""
    name = config.registry.model_name
    recorded = recorded_gates(version, config=config)
    configured = config.evaluate.gates
    loosened = tuple(loosened_gates(recorded, configured))
    if loosened and not (override_gates and override_gates.strip()):
        raise PromotionRejected(
            f"version {version} of {name!r}: the configured gates are looser than those recorded at its registration "
            f"({'; '.join(loosened)}): promote with the recorded settings, or pass --override-gates REASON "
            "(override_gates=...; the reason is recorded on the version)"
        )
    # not looser anywhere: passing the configured gates passes the recorded ones too
    gates = configured
    verdict = regate(version, config=config, gates=gates)
    missing = [g for g in required_gates(gates) if g not in {r.name for r in verdict.gates}]
    if missing:
        raise PromotionRejected(
            f"version {version} of {name!r} has no result for gate(s) {', '.join(missing)}: its run holds no evaluation "
            "metrics and its stored verdict lacks them; evaluate it with every configured gate (orchrm pipeline), then promote"
        )
    return PromotionCheck(version, verdict, gates, loosened, override_gates if loosened else None)


def regate(version: int, *, config: PipelineConfig, gates: GatesConfig | None = None) -> Verdict:
    """The verdict of ``version`` re-checked from the metrics stored in its run
    (``orchrm.evaluation.check_gates`` with ``gates``, default the configured ones, and the
    champion's metrics of the same run); the stored verdict where the run holds no evaluation
    metrics. Either way ``beats_champion`` fails when the champion moved since (see
    :func:`_champion_still_current`)."""
    from orchrm.evaluation.gates import check_gates as check

    gates = config.evaluate.gates if gates is None else gates
    mv = _get_version(version, config)
    run = None
    if mv.run_id:
        uri = tracking_uri(config)
        run = with_server_retries(uri, lambda: client(uri).get_run(mv.run_id), f"reading run {mv.run_id}")
    all_metrics = dict(run.data.metrics) if run is not None else {}
    metrics = {k: v for k, v in all_metrics.items() if not k.startswith(CHAMPION_PREFIX)}
    champion = {k.removeprefix(CHAMPION_PREFIX): v for k, v in all_metrics.items() if k.startswith(CHAMPION_PREFIX)}
    if "pairwise_accuracy" not in metrics:
        verdict = stored_verdict(version, config=config)
    else:
        verdict = check(metrics, gates, champion=champion or None)
    evaluated = run.data.tags.get(CHAMPION_EVALUATED_TAG) if run is not None else None
    return _champion_still_current(verdict, version=version, evaluated=evaluated, gates=gates, config=config)


def _champion_still_current(verdict: Verdict, *, version: int, evaluated: str | None, gates: GatesConfig, config: PipelineConfig) -> Verdict:
    """Fail the ``beats_champion`` gate when the champion moved since the candidate was evaluated:
    its comparison no longer says anything about the current champion."""
    from orchrm.evaluation.gates import GateResult, Verdict

    if not gates.beat_champion:
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


def promote(version: int, *, config: PipelineConfig, override_gates: str | None = None, who: str | None = None) -> PromotionCheck:
    """Give ``version`` the ``champion`` alias when it passes :func:`check_promotion`; returns that
    check (also when it already was champion: rerunning is a no-op). The champion it replaces
    keeps ``previous``. Raises :class:`PromotionRejected` naming every failed gate otherwise,
    leaving ``champion`` where it was (and taking ``challenger`` off it when an absolute gate failed).

    The version's verdict tags are updated to the re-checked verdict; a loosening let through by
    ``override_gates`` is tagged ``gates_override.reason`` / ``.settings`` / ``.by`` / ``.at``.

    The check and the alias moves are one critical section (:func:`orchrm.ops.locks.promotion_lock`):
    of two runs promoting candidates evaluated against the same champion, the second to take the
    lock finds the champion moved and is rejected, so ``previous`` always names the champion
    actually replaced."""
    configure(config)
    with promotion_lock(config) as held:
        log.debug("promoting version %d under %s", version, held)
        return _promote_locked(version, config=config, override_gates=override_gates, who=who)


def _promote_locked(version: int, *, config: PipelineConfig, override_gates: str | None, who: str | None) -> PromotionCheck:
    """:func:`promote`'s check and alias moves, run under the promotion lock."""
    name = config.registry.model_name
    check = check_promotion(version, config=config, override_gates=override_gates)
    verdict = check.verdict
    tags = {**verdict.tags(), VERDICT_TAG: json.dumps(verdict.to_dict())}
    if check.override:
        tags.update({"gates_override.reason": check.override, "gates_override.settings": "; ".join(check.loosened),
                     "gates_override.by": _who(who), "gates_override.at": datetime.now(UTC).isoformat(timespec="seconds")})
    _tag_version(config, version, tags)
    if not verdict.passed:
        if not passed_absolute_gates(verdict) and alias_version(config, CHALLENGER) == version:
            uri = tracking_uri(config)
            with_server_retries(uri, lambda: client(uri).delete_registered_model_alias(name, CHALLENGER),
                                f"removing alias {CHALLENGER} from {name!r}", needs=WRITE_NEEDS)
        failed = "; ".join(f"{g.name}: {g.detail}" for g in verdict.failed()) or "no gate was evaluated"
        current = champion_version(config)
        where = f"champion stays at version {current}" if current is not None else "there is still no champion"
        raise PromotionRejected(f"version {version} of {name!r} failed {len(verdict.failed())} gate(s): {failed} ({where})")
    replaced = champion_version(config)
    if replaced == version:
        log.info("%s version %d already is %s", name, version, CHAMPION)
        return check
    if replaced is not None:
        # `previous` first: a crash between the two calls leaves previous == champion, never a lost champion
        _set_alias(config, PREVIOUS, replaced)
    _set_alias(config, CHAMPION, version)
    log.info("%s version %d is now %s (%s: %s)", name, version, CHAMPION, PREVIOUS, replaced)
    return check


def _set_alias(config: PipelineConfig, alias: str, version: int) -> None:
    """Point ``alias`` at ``version``, then read it back: raise :class:`RegistryError` when the
    store says otherwise (another run moved it in between)."""
    uri = tracking_uri(config)
    name = config.registry.model_name
    c = client(uri)
    with_server_retries(uri, lambda: c.set_registered_model_alias(name, alias, str(version)),
                        f"setting alias {alias} on {name!r} to version {version}", needs=WRITE_NEEDS)
    now = alias_version(config, alias)
    if now != version:
        raise RegistryError(
            f"{name}@{alias} reads version {now} right after it was set to {version}: another run moved it; "
            f"check the versions in the MLflow UI and rerun `orchrm promote --version {version}` if it should win"
        )


def _who(who: str | None) -> str:
    if who:
        return who
    import getpass

    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name in a container without a passwd entry
        return "unknown"


@dataclass(frozen=True)
class Rollback:
    """What :func:`rollback` did: ``champion`` moved from ``demoted`` back to ``restored``."""

    restored: int
    demoted: int
    reason: str
    who: str
    at: str


def rollback(config: PipelineConfig, *, reason: str, who: str | None = None) -> Rollback:
    """Move ``champion`` back to the version holding ``previous`` (the champion the last promotion
    replaced) and remove ``previous``; returns what moved.

    ``previous`` is removed rather than pointed at the demoted version: a second rollback would
    otherwise put back, without any gate, the model just rolled back for a reason; the demoted
    version returns only through ``orchrm promote``. Both versions get tags ``rollback.reason``,
    ``rollback.by`` (``who``, default the login name), ``rollback.at`` (UTC, ISO 8601) and
    ``rollback.role`` (``restored`` / ``demoted``), and ``rollback.from`` / ``rollback.to``.
    Raises :class:`RegistryError` when there is no champion or no previous champion. Runs under
    the promotion lock, as :func:`promote` does: a rollback never interleaves with a promotion."""
    if not reason.strip():
        raise RegistryError("a rollback needs a reason (recorded on both versions): pass --reason 'why'")
    configure(config)
    with promotion_lock(config) as held:
        log.debug("rolling back under %s", held)
        return _rollback_locked(config, reason=reason, who=who)


def _rollback_locked(config: PipelineConfig, *, reason: str, who: str | None) -> Rollback:
    """:func:`rollback`'s reads and alias moves, run under the promotion lock."""
    name = config.registry.model_name
    current, previous = champion_version(config), alias_version(config, PREVIOUS)
    if current is None:
        raise RegistryError(f"{name!r} has no champion to roll back: nothing was promoted yet (orchrm promote --version N)")
    if previous is None:
        raise RegistryError(
            f"{name!r} has no previous champion (alias {PREVIOUS!r}) to roll back to: version {current} was the first champion, "
            "or the last rollback already used it; promote the version you want with `orchrm promote --version N`"
        )
    done = Rollback(restored=previous, demoted=current, reason=reason, who=_who(who), at=datetime.now(UTC).isoformat(timespec="seconds"))
    common = {"rollback.reason": done.reason, "rollback.by": done.who, "rollback.at": done.at,
              "rollback.from": str(current), "rollback.to": str(previous)}
    _tag_version(config, current, {**common, "rollback.role": "demoted"})
    _tag_version(config, previous, {**common, "rollback.role": "restored"})
    _set_alias(config, CHAMPION, previous)
    uri = tracking_uri(config)
    with_server_retries(uri, lambda: client(uri).delete_registered_model_alias(name, PREVIOUS),
                        f"removing alias {PREVIOUS} from {name!r}", needs=WRITE_NEEDS)
    log.info("%s: champion rolled back from version %d to %d by %s (%s)", name, current, previous, done.who, reason)
    return done


def _tag_version(config: PipelineConfig, version: int, tags: dict[str, str]) -> None:
    uri = tracking_uri(config)
    name = config.registry.model_name
    c = client(uri)
    for key, value in tags.items():
        with_server_retries(uri, lambda k=key, v=value: c.set_model_version_tag(name, str(version), k, v),
                            f"tagging version {version} of {name!r}", needs=WRITE_NEEDS)


#: version tags of the weekly re-evaluation: ``reevaluated.<YYYY-MM-DD>`` per run, and the latest
REEVALUATED_PREFIX = "reevaluated."
LAST_REEVALUATION = "last_reevaluation"


def reevaluation_verdict(verdict: Verdict) -> str:
    """A re-evaluation's verdict as a tag value: ``pass`` or ``fail: <gate>, <gate>``."""
    return "pass" if verdict.passed else "fail: " + (", ".join(g.name for g in verdict.failed()) or "no gate was evaluated")


def tag_reevaluation(version: int, *, verdict: Verdict, run_id: str, config: PipelineConfig, when: datetime | None = None) -> dict[str, str]:
    """Record a re-evaluation of ``version`` on the version itself, so its page tells its
    history: ``reevaluated.<YYYY-MM-DD>`` = :func:`reevaluation_verdict` (one tag per day, UTC;
    a second run that day replaces it), ``last_reevaluation`` = that date,
    ``last_reevaluation.verdict`` and ``last_reevaluation.run_id`` (the run holding the figures,
    linked to the version's LoggedModel). Returns the tags set. Moves no alias."""
    day = (when or datetime.now(UTC)).astimezone(UTC).date().isoformat()
    label = reevaluation_verdict(verdict)
    tags = {f"{REEVALUATED_PREFIX}{day}": label, LAST_REEVALUATION: day,
            f"{LAST_REEVALUATION}.verdict": label, f"{LAST_REEVALUATION}.run_id": run_id}
    _tag_version(config, version, tags)
    return tags


def version_info(version: int, *, config: PipelineConfig) -> dict[str, Any]:
    """A version's aliases, tags, run id and source, as a dict (for the CLI and reports)."""
    mv = _get_version(version, config)
    return {"version": int(mv.version), "aliases": list(mv.aliases), "tags": dict(mv.tags), "run_id": mv.run_id, "source": mv.source}
