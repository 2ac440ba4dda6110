"""Serving a reward model: load it (from the registry or a file) and use it to pick plans.

- :func:`load_reward_model` takes ``models:/orchrm-reward@champion``, ``models:/orchrm-reward/3``,
  ``models:/<model_id>``, a ``runs:/`` URI, a local directory or a model file, and returns a ready
  :class:`~orchrm.model.reward_model.BradleyTerryModel`. It imports neither the sandbox nor the task suites.
- :class:`TestTimeScalableOrchestrator`: best-of-N at test time. Sample N candidate plans, score
  each *before* any agent runs, execute only the best one.
- :class:`RewardGuidedOrchestrator`: build the plan one step at a time, scoring each candidate next
  agent call R(s, a) with the texts of the intermediate pairs the model trained on, in the format
  its manifest records (``node``: question plus the plan prefix so far, the agent's line and its
  output; ``plan_prefix``: the question, the step and its ancestors as a plan), executing as it goes.

Every prompt and action text comes from :mod:`orchrm.model.texts`, the module pair building
writes the pair table with; scoring tokens are counted by :func:`orchrm.model.scoring.scoring_tokens`.

>>> from orchrm import TestTimeScalableOrchestrator                          # doctest: +SKIP
>>> orch = TestTimeScalableOrchestrator(reward_model="models:/orchrm-reward@champion", num_candidates=5)  # doctest: +SKIP
>>> result = orch.execute(task="Answer: what is the capital of France?")    # doctest: +SKIP
>>> result.score, result.answer                                              # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchrm.errors import ModelFileError, RegistryError
from orchrm.model.scoring import scoring_tokens
from orchrm.model.texts import NodeInfo, intermediate_format, plan_nodes, plan_prompt, step_texts

if TYPE_CHECKING:  # pragma: no cover
    from orchrm.execution.executor import MultiAgentExecutor
    from orchrm.execution.tasks.base import Task
    from orchrm.model.reward_model import BradleyTerryModel
    from orchrm.plans import Plan

_REMOTE_SCHEMES = ("models:/", "runs:/", "mlflow-artifacts:/", "s3://", "gs://", "http://", "https://")


# --------------------------------------------------------------------------------------------
# loading


def _default_tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI``, a URI set in this process with ``mlflow.set_tracking_uri``, else the
    default project store (``sqlite:///<abs .orchrm>/mlflow.db``)."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    import mlflow
    from mlflow.tracking._tracking_service.utils import is_tracking_uri_set

    if is_tracking_uri_set():
        return mlflow.get_tracking_uri()
    from orchrm.config import PipelineConfig
    from orchrm.ops.tracking import tracking_uri

    return tracking_uri(PipelineConfig())


def _find_model_file(root: Path) -> Path:
    """The safetensors file in a downloaded pyfunc / model folder (``artifacts/model.safetensors``)."""
    from orchrm.model.reward_model import MODEL_FILE

    if root.is_file():
        return root
    for candidate in (root / MODEL_FILE, root / "artifacts" / MODEL_FILE):
        if candidate.is_file():
            return candidate
    found = sorted(root.rglob("*.safetensors"))
    if len(found) == 1:
        return found[0]
    raise ModelFileError(
        f"{root} holds {'no' if not found else len(found)} safetensors file(s): expected one model file "
        f"({MODEL_FILE}); point at the file itself, or at a model logged with orchrm.ops.registry.log_model"
    )


def _describe_uri_error(uri: str, exc: Exception, tracking: str) -> str:
    text = str(exc)
    if uri.startswith("models:/") and "@" in uri:
        name, alias = uri.removeprefix("models:/").split("@", 1)
        if "alias" in text.lower() or "RESOURCE_DOES_NOT_EXIST" in text or "not found" in text.lower():
            return (
                f"{uri}: no version of {name!r} has the alias {alias!r} in {tracking}. "
                f"Promote a version first (`orchrm promote --version N`), load a version by number "
                f"(models:/{name}/N), or check MLFLOW_TRACKING_URI points at the store that holds it"
            )
    if uri.startswith("models:/"):
        return (
            f"{uri}: not found in {tracking} ({text.splitlines()[0] if text else type(exc).__name__}). "
            "Check the name and version in the MLflow UI, or MLFLOW_TRACKING_URI"
        )
    return f"{uri}: cannot be read from {tracking} ({text.splitlines()[0] if text else type(exc).__name__})"


def load_reward_model(uri_or_path: str | os.PathLike, *, tracking_uri: str | None = None, device: str = "cpu") -> BradleyTerryModel:
    """A ready :class:`BradleyTerryModel` (eval mode) from a registry URI or a local path.

    ``uri_or_path``: ``models:/<name>@<alias>``, ``models:/<name>/<version>``, ``models:/<model_id>``,
    ``runs:/<run_id>/<path>``, a directory (``model.safetensors`` inside, or a downloaded pyfunc),
    or a model file. ``tracking_uri`` defaults to ``MLFLOW_TRACKING_URI``, else the project's
    SQLite store. Raises :class:`RegistryError` for a missing alias or version, an unreachable
    tracking server (after bounded retries) or files gone from the artifact store, and
    :class:`ModelFileError` for a corrupt or foreign model file; each says what to do.
    """
    from orchrm.model.reward_model import BradleyTerryModel

    text = os.fspath(uri_or_path)
    if not text.startswith(_REMOTE_SCHEMES):
        path = Path(text).expanduser()
        if not path.exists():
            raise ModelFileError(
                f"no model at {path}: give a model file or folder written by BradleyTerryModel.save, "
                "or a registry URI such as models:/orchrm-reward@champion"
            )
        return BradleyTerryModel.load(_find_model_file(path), device=device)

    from orchrm.ops.tracking import check_server

    tracking = tracking_uri or _default_tracking_uri()
    check_server(tracking)  # bounded retries, then RegistryError saying what to check
    tmp = Path(tempfile.mkdtemp(prefix="orchrm-model-"))
    try:
        local = _download(text, tracking, tmp)
        if not any(local.rglob("*.safetensors")):
            raise RegistryError(
                f"{text}: its files are gone from the artifact store (no model file came back from "
                f"{tracking}). The version is registered but its model is lost: re-log and register the "
                "model (orchrm.ops.registry.log_model / register_candidate), or load another version"
            )
        file = _find_model_file(local)
        try:
            return BradleyTerryModel.load(file, device=device)
        except ModelFileError as exc:
            raise ModelFileError(
                f"{text}: the registered model file is unusable ({exc}); re-log and register the model "
                "(orchrm.ops.registry.log_model / register_candidate) or load another version"
            ) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _artifact_location(uri: str, client: Any) -> str:
    """Where the files of a ``models:/`` URI live, resolved through ``client`` (its own tracking
    and registry URI: MLflow's URI resolution would read the process-wide registry instead)."""
    rest = uri.removeprefix("models:/").rstrip("/")
    if "@" in rest:
        name, alias = rest.split("@", 1)
        version = client.get_model_version_by_alias(name, alias).version
        return client.get_model_version_download_uri(name, version)
    if "/" in rest:
        name, version = rest.split("/", 1)
        return client.get_model_version_download_uri(name, version)
    return client.get_logged_model(rest).artifact_location


def _download(uri: str, tracking: str, dst: Path) -> Path:
    import mlflow.artifacts
    from mlflow.exceptions import MlflowException

    from orchrm.ops.tracking import client, with_server_retries

    location = uri
    if uri.startswith("models:/"):
        try:
            location = with_server_retries(tracking, lambda: _artifact_location(uri, client(tracking)), f"resolving {uri}")
        except MlflowException as exc:
            raise RegistryError(_describe_uri_error(uri, exc, tracking)) from None
    try:
        fetch = lambda: mlflow.artifacts.download_artifacts(artifact_uri=location, dst_path=str(dst), tracking_uri=tracking)  # noqa: E731
        return Path(with_server_retries(tracking, fetch, f"downloading {uri}"))
    except MlflowException as exc:
        if location == uri and "RESOURCE_DOES_NOT_EXIST" in str(exc.error_code):
            raise RegistryError(_describe_uri_error(uri, exc, tracking)) from None
        raise RegistryError(_gone(uri, location, exc)) from None
    except OSError as exc:
        raise RegistryError(_gone(uri, location, exc)) from None


def _gone(uri: str, location: str, exc: Exception) -> str:
    return (
        f"{uri}: its files are gone from the artifact store ({location}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}). "
        "The version is registered but its model cannot be downloaded: re-log and register the model "
        "(orchrm.ops.registry.log_model / register_candidate), or load another version"
    )


def _as_model(reward_model: BradleyTerryModel | str | os.PathLike) -> BradleyTerryModel:
    if isinstance(reward_model, str | os.PathLike):
        return load_reward_model(reward_model)
    if not callable(getattr(reward_model, "score", None)):
        raise TypeError(f"reward_model must be a BradleyTerryModel or a URI/path, got {type(reward_model).__name__}")
    return reward_model


# --------------------------------------------------------------------------------------------
# best-of-N


@dataclass(frozen=True)
class ScoredPlan:
    """One candidate plan and its score (higher is better): the reward, or with a cost weight
    ``λ`` the normalised reward minus ``λ`` times the plan's cost (then ``reward`` and ``cost`` say
    which)."""

    plan: Plan
    score: float
    #: the reward model's reward (the score itself without a cost weight)
    reward: float | None = None
    #: the plan's rough cost from its text (:func:`orchrm.execution.tasks.base.plan_cost`), where weighed
    cost: float | None = None

    @property
    def text(self) -> str:
        return self.plan.render()


@dataclass(frozen=True)
class OrchestrationResult:
    """What an orchestrator's ``execute`` returns.

    ``candidates``: the scored candidates, best first. ``quality``: the executed plan's final
    quality when the task has a reference, else None. Tokens are counted apart:
    ``scoring_tokens`` the reward model read, ``execution_tokens`` the agents spent
    (``tokens`` is their sum)."""

    task: Task
    plan: Plan
    score: float
    answer: str | None
    quality: float | None
    candidates: tuple[ScoredPlan, ...]
    scoring_tokens: int
    execution_tokens: int
    run: Any = None  # the executed PlanRun (its artifact rows)

    @property
    def tokens(self) -> int:
        return self.scoring_tokens + self.execution_tokens


def _default_executor(backend: Any = "sandbox") -> MultiAgentExecutor:
    from orchrm.execution.executor import MultiAgentExecutor

    return MultiAgentExecutor(orchestrator="default", backend=backend)


class _ScoredOrchestrator:
    """What both orchestrators hold: a reward model (or a URI/path for :func:`load_reward_model`),
    the number of candidates, an executor (built on first use when None: the default orchestrator
    on ``backend``, the sandbox unless a :class:`orchrm.config.BackendConfig` or a backend names a
    real model) and the sampling seed."""

    def __init__(
        self,
        reward_model: BradleyTerryModel | str | os.PathLike,
        num_candidates: int = 5,
        executor: MultiAgentExecutor | None = None,
        *,
        seed: int | None = None,
        backend: Any = "sandbox",
    ) -> None:
        if not isinstance(num_candidates, int) or num_candidates < 1:
            raise ValueError(f"num_candidates must be an int >= 1, got {num_candidates!r}")
        self.reward_model = _as_model(reward_model)
        self.num_candidates = num_candidates
        if executor is not None and backend != "sandbox":
            raise ValueError("give an executor or a backend, not both: the executor already holds its backend")
        self.executor = executor
        self.backend = backend
        self.seed = seed

    def _executor(self) -> MultiAgentExecutor:
        if self.executor is None:
            self.executor = _default_executor(self.backend)
        return self.executor


class TestTimeScalableOrchestrator(_ScoredOrchestrator):
    """Best-of-N orchestration: ``num_candidates`` plans sampled by ``executor`` (the default
    orchestrator when None), scored by the reward model before anything runs, and only the best
    one executed (on ``backend``: the sandbox, or a real model, e.g.
    ``backend=BackendConfig(kind="transformers", model=...)``).

    ``reward_model``: a :class:`BradleyTerryModel`, or a URI/path for :func:`load_reward_model`.

    ``cost_weight`` ``λ`` (default 0: the highest reward wins) ranks by normalised reward minus
    ``λ`` times the plan's cost from its text (:mod:`orchrm.evaluation.cost_aware`), so a cheaper
    plan wins unless the model rates a pricier one enough higher;
    :func:`orchrm.evaluation.cost_aware.choose_cost_weight` chooses ``λ`` on validation tasks for
    a token budget.
    """

    __test__ = False  # not a pytest test class despite its name

    def __init__(
        self,
        reward_model: BradleyTerryModel | str | os.PathLike,
        num_candidates: int = 5,
        executor: MultiAgentExecutor | None = None,
        *,
        seed: int | None = None,
        cost_weight: float = 0.0,
    ) -> None:
        super().__init__(reward_model, num_candidates, executor, seed=seed)
        if not isinstance(cost_weight, int | float) or not math.isfinite(cost_weight) or cost_weight < 0:
            raise ValueError(f"cost_weight must be a finite number >= 0, got {cost_weight!r}")
        self.cost_weight = float(cost_weight)

    def rank(self, task: Task | str) -> tuple[Task, tuple[ScoredPlan, ...], int]:
        """The task, its candidates scored and sorted best first, and the scoring tokens; nothing runs."""
        executor = self._executor()
        task = executor.as_task(task)
        plans = executor.sample_plans(task, self.num_candidates, seed=self.seed)
        prompt, texts = plan_prompt(task.question), [p.render() for p in plans]
        rewards = [float(r) for r in self.reward_model.score(prompt, texts).tolist()]
        if self.cost_weight:
            from orchrm.evaluation.cost_aware import (
                cost_aware_scores,
                normalised_rewards,
                plan_costs,
            )

            costs = plan_costs(texts)
            scores = cost_aware_scores(normalised_rewards(self.reward_model, rewards), costs, self.cost_weight)
        else:
            costs, scores = [None] * len(plans), rewards
        order = sorted(range(len(plans)), key=lambda i: (-scores[i], i))  # ties: sampling order
        scored = tuple(ScoredPlan(plans[i], float(scores[i]), reward=float(rewards[i]),
                                  cost=None if costs[i] is None else float(costs[i])) for i in order)
        return task, scored, scoring_tokens(self.reward_model, prompt, texts).total

    def execute(self, task: Task | str) -> OrchestrationResult:
        """Sample, score, and execute only the best candidate on ``task`` (a Task or free text,
        routed to a domain)."""
        task, scored, scoring = self.rank(task)
        best = scored[0]
        run = self._executor().run_plan(task, best.plan, seed=self.seed)
        return OrchestrationResult(
            task=task,
            plan=best.plan,
            score=best.score,
            answer=run.answer,
            quality=run.quality,
            candidates=scored,
            scoring_tokens=scoring,
            execution_tokens=run.tokens,
            run=run,
        )


# --------------------------------------------------------------------------------------------
# step by step


@dataclass(frozen=True)
class GuidedStep:
    """One step of :class:`RewardGuidedOrchestrator`: the candidate next steps at ``depth`` (their
    agent lines, joined when a step runs several nodes in parallel) with their rewards, and the one
    kept."""

    depth: int
    options: tuple[tuple[str, float], ...]
    chosen: str


class RewardGuidedOrchestrator(_ScoredOrchestrator):
    """Builds the plan one step at a time under the reward model.

    ``num_candidates`` plans are sampled once; at each depth the candidate next steps are the
    distinct depth-``d`` nodes of the candidates that share the prefix chosen so far. Each one is
    executed (its prefix up to depth ``d``) and scored R(s, a) with the texts of the intermediate
    pairs the model trained on, built by the same function (:func:`orchrm.model.texts.step_texts`)
    in the format its manifest records (``intermediate_format``): ``node``: ``s`` =
    :func:`~orchrm.model.texts.node_prompt` (question, newline, the rendered ancestor nodes and
    edges; the question alone at depth 0), ``a`` = :func:`~orchrm.model.texts.node_action` (the
    node's ``<agent .../>`` line, newline, its output); ``plan_prefix``: ``s`` = the question,
    ``a`` = the node and its ancestors as a plan of their own. A model whose manifest records no
    format (saved before it was recorded) is read as ``node``, and a log line says so. A step of
    several parallel nodes scores their mean. The best step is kept and the others dropped, until
    the plan is complete. Every execution counts in ``execution_tokens``.
    """

    #: the last :meth:`execute`'s steps, in order (each instance sets its own)
    steps: tuple[GuidedStep, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: the texts each step is scored with: ``node`` or ``plan_prefix``, from the model's manifest
        self.intermediate_format = intermediate_format(getattr(self.reward_model, "manifest", {}) or {}, what="the reward model")

    def execute(self, task: Task | str) -> OrchestrationResult:
        executor = self._executor()
        task = executor.as_task(task)
        alive = list(executor.sample_plans(task, self.num_candidates, seed=self.seed))
        nodes = {p.plan_id: plan_nodes(p.render()) for p in alive}
        scoring = execution = 0
        steps: list[GuidedStep] = []
        last_run = None
        last_options: list = []
        depth = 0
        while True:
            deeper = [p for p in alive if p.max_depth >= depth]
            if not deeper:
                break
            groups: dict[str, list[Plan]] = {}
            for p in deeper:
                groups.setdefault(_step_key(nodes[p.plan_id], depth), []).append(p)
            options: list[tuple[str, float, Plan, Any]] = []
            for key, members in groups.items():
                plan = members[0]
                run = executor.run_plan(task, plan, stop_after_depth=depth, seed=self.seed)
                execution += run.tokens
                content = {r["node_id"]: r["content"] for r in run.rows}
                infos = [n for n in nodes[plan.plan_id] if n.depth == depth]
                prompts, actions = step_texts(self.intermediate_format, task.question, infos, content)
                rewards = self.reward_model.score(prompts, actions)
                scoring += scoring_tokens(self.reward_model, prompts, actions).total
                options.append((key, float(rewards.mean()), plan, run))
            best_key, _, _, last_run = max(options, key=lambda o: o[1])
            steps.append(GuidedStep(depth, tuple((k, s) for k, s, _, _ in options), best_key))
            alive, last_options = groups[best_key], options
            if all(p.max_depth == depth for p in alive):
                break
            alive = [p for p in alive if p.max_depth > depth] or alive
            depth += 1
        plan = alive[0]
        final = last_run if last_run is not None and last_run.plan.plan_id == plan.plan_id and last_run.final else None
        if final is None:
            final = executor.run_plan(task, plan, seed=self.seed)
            execution += final.tokens
        self.steps = tuple(steps)
        score = dict(steps[-1].options)[steps[-1].chosen]
        last = sorted(last_options, key=lambda o: -o[1])
        candidates = tuple(ScoredPlan(p, s) for _, s, p, _ in last)
        return OrchestrationResult(
            task=task,
            plan=plan,
            score=score,
            answer=final.answer,
            quality=final.quality,
            candidates=candidates,
            scoring_tokens=scoring,
            execution_tokens=execution,
            run=final,
        )


def _step_key(infos: Sequence[NodeInfo], depth: int) -> str:
    """A step's identity: its prefix and its nodes' lines at ``depth`` (plans that agree on both
    are at the same state and take the same step)."""
    here = [n for n in infos if n.depth == depth]
    prefixes = sorted({n.prefix for n in here} - {""})
    return "\n".join(prefixes + sorted(n.line for n in here))
