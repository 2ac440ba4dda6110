"""Serving: best-of-N and step-by-step orchestration under a loaded reward model, and the
registered pyfunc over HTTP (`mlflow models serve`), the reward-model server RL loops call, and
what a fresh environment needs to serve it (the project's code inside the model, pinned
requirements that name no package missing from an index, the build context of
`mlflow models generate-dockerfile`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import httpx
import pytest
import torch
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from orchrm.ops import registry, tracking
from tests.integration.mlflow_server import running_mlflow
from tests.integration.test_registry import Store, build_store
from tests.unit.test_extras import (
    _BLOCKER,
    _REPORT,
    _environment,
    pipeline_only_modules,
    providers,
    requirement_closure,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    import mlflow

    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        before = mlflow.get_tracking_uri()
        yield build_store(tmp_path_factory.mktemp("serving"))
        mlflow.set_tracking_uri(before)


@pytest.fixture(scope="module")
def executor():
    from orchrm import MultiAgentExecutor

    return MultiAgentExecutor(orchestrator="default", seed=3)


@pytest.fixture(scope="module")
def math_task():
    from orchrm.execution.tasks.base import load_tasks

    return load_tasks("math", 1, seed=11)[0]


# --------------------------------------------------------------------------------------------
# best-of-N


def test_design_section_12_best_of_n_runs_as_written(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from orchrm import BradleyTerryModel, TestTimeScalableOrchestrator

    store.good.save("orchrm_reward_model.pt")
    model = BradleyTerryModel.load("orchrm_reward_model.pt")
    orch = TestTimeScalableOrchestrator(reward_model=model, num_candidates=5)
    result = orch.execute(task="Answer: what is the capital of France?")
    print(result.score)
    assert isinstance(result.score, float)
    assert len(result.candidates) == 5


def test_best_of_n_scores_every_candidate_and_executes_only_the_best(store, executor, math_task):
    from orchrm import TestTimeScalableOrchestrator

    orch = TestTimeScalableOrchestrator(reward_model=store.good, num_candidates=5, executor=executor)
    result = orch.execute(task=math_task)
    texts = [c.plan.render() for c in result.candidates]
    rewards = store.good.score(math_task.question, texts).tolist()
    assert [c.score for c in result.candidates] == rewards == sorted(rewards, reverse=True)
    assert result.plan == result.candidates[0].plan and result.score == max(rewards)
    assert {r["plan_id"] for r in result.run.rows} == {result.plan.plan_id}  # only the best ran
    assert result.quality is not None and 0.0 <= result.quality <= 1.0  # the task has a reference
    assert result.answer == result.run.answer
    assert result.execution_tokens == result.run.tokens > 0
    assert result.scoring_tokens > 0 and result.tokens == result.scoring_tokens + result.execution_tokens


def test_best_of_n_loads_the_champion_by_alias(store, executor, math_task):
    from orchrm import TestTimeScalableOrchestrator

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", tracking.tracking_uri(store.config))
        orch = TestTimeScalableOrchestrator(reward_model="models:/orchrm-reward@champion", num_candidates=4, executor=executor)
    direct = TestTimeScalableOrchestrator(reward_model=store.good, num_candidates=4, executor=executor)
    assert [c.score for c in orch.rank(math_task)[1]] == [c.score for c in direct.rank(math_task)[1]]


def test_free_text_tasks_have_no_quality(store, executor):
    from orchrm import TestTimeScalableOrchestrator

    result = TestTimeScalableOrchestrator(reward_model=store.good, num_candidates=3, executor=executor).execute(
        task="Answer: what is the capital of France?"
    )
    assert result.quality is None


# --------------------------------------------------------------------------------------------
# step by step


def test_reward_guided_orchestrator_keeps_the_best_scored_step_at_each_depth(store, executor, math_task):
    from orchrm import RewardGuidedOrchestrator

    orch = RewardGuidedOrchestrator(reward_model=store.good, num_candidates=6, executor=executor)
    result = orch.execute(task=math_task)
    assert orch.steps, "no step was taken"
    for step in orch.steps:
        scores = dict(step.options)
        assert scores[step.chosen] == max(scores.values())
    sampled = {p.plan_id for p in executor.sample_plans(math_task, 6)}
    assert result.plan.plan_id in sampled
    assert result.run.final is not None and result.answer == result.run.answer
    assert result.quality is not None
    assert result.execution_tokens >= result.run.tokens and result.scoring_tokens > 0


def test_reward_guided_scores_nodes_in_the_intermediate_pairs_format(store, executor, math_task):
    """The depth-0 step is scored R(question, "<agent .../>\\n" + its output), the format of the
    node-level pairs (orchrm.data.pairs)."""
    from orchrm import RewardGuidedOrchestrator

    orch = RewardGuidedOrchestrator(reward_model=store.good, num_candidates=6, executor=executor)
    orch.execute(task=math_task)
    first = orch.steps[0]
    plans = executor.sample_plans(math_task, 6)
    by_line = {}
    for plan in plans:
        roots = [n for n, d in plan.depths().items() if d == 0]
        if len(roots) == 1:
            by_line.setdefault(plan.node(roots[0]).render(), plan)
    checked = 0
    for key, score in first.options:
        if key in by_line:
            plan = by_line[key]
            run = executor.run_plan(math_task, plan, stop_after_depth=0)
            (row,) = run.rows
            expected = store.good.score([math_task.question], [key + "\n" + row["content"]])
            assert score == pytest.approx(float(expected[0]), abs=1e-5)
            checked += 1
    assert checked >= 1


# --------------------------------------------------------------------------------------------
# the pyfunc over HTTP


@pytest.mark.slow
def test_mlflow_models_serve_scores_candidates_like_model_score(store, tmp_path):
    env = {"MLFLOW_TRACKING_URI": tracking.tracking_uri(store.config), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    args = ["models", "serve", "-m", "models:/orchrm-reward@champion", "--env-manager", "local"]
    with running_mlflow(args, tmp_path / "serve.log", ready_path="/ping", env=env) as url:
        rows = store.pairs.head(8)
        body = {"dataframe_split": {"columns": ["prompt", "action"], "data": rows[["prompt", "chosen"]].values.tolist()}}
        answer = httpx.post(f"{url}/invocations", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        rewards = [p["reward"] for p in answer.json()["predictions"]]
        expected = store.good.score(rows["prompt"].tolist(), rows["chosen"].tolist())
        assert torch.tensor(rewards, dtype=torch.float32).tolist() == expected.tolist()
        # the signature declares `normalize`: the server passes it on to predict
        answer = httpx.post(f"{url}/invocations", json={**body, "params": {"normalize": True}}, timeout=60)
        assert answer.status_code == 200, answer.text
        normalized = [p["reward"] for p in answer.json()["predictions"]]
        expected = store.good.score(rows["prompt"].tolist(), rows["chosen"].tolist(), normalize=True)
        assert torch.tensor(normalized, dtype=torch.float32).tolist() == expected.tolist() != rewards


# --------------------------------------------------------------------------------------------
# a fresh environment: orchrm from the model's code/, the rest from requirements.txt

#: what a new virtualenv holds besides the requirements (pip and its build tools)
_VENV_TOOLS = frozenset({"pip", "setuptools", "pkg_resources", "_distutils_hack", "wheel"})


def run_without_orchrm(code: str, *, blocked: frozenset[str], cwd: Path) -> dict:
    """Run ``code`` (which sets ``result``, a JSON value) in an interpreter where orchrm is not
    installed and the modules ``blocked`` fail to import; returns ``{"result": ..., "blocked_loaded": [...]}``.

    The test venv installs orchrm in editable mode: a ``.pth`` file in site-packages installs a
    finder that maps ``orchrm`` to the checkout. ``python -I -S`` processes no ``.pth`` file, reads
    no ``PYTHONPATH`` and puts neither the current directory nor the script's on ``sys.path``; the
    site-packages directories are then appended by hand, so every installed distribution imports
    but orchrm, whose files are not there (only its ``.dist-info``). ``cwd`` is outside the checkout."""
    site = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    probe = (
        f"import sys\nsys.path.extend({site!r})\n"
        f"BLOCKED = frozenset({sorted(blocked)!r})\n" + _BLOCKER +
        "import importlib.util\nassert importlib.util.find_spec('orchrm') is None, 'orchrm is importable before the model is loaded'\n"
        + code + _REPORT
    )
    done = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _score_rows(store: Store) -> tuple[list[str], list[str]]:
    rows = store.pairs.head(8)
    return rows["prompt"].tolist(), rows["chosen"].tolist()


def _predict_code(model_uri: str, prompts: list[str], actions: list[str]) -> str:
    """Code that loads the pyfunc ``model_uri`` and sets ``result`` to its rewards (plain and
    normalized) and the file orchrm was imported from."""
    return (
        "import mlflow.pyfunc\nimport pandas as pd\n"
        f"pyfunc = mlflow.pyfunc.load_model({model_uri!r})\n"
        f"rows = pd.DataFrame({{'prompt': {prompts!r}, 'action': {actions!r}}})\n"
        "import orchrm\n"
        "result = [pyfunc.predict(rows)['reward'].tolist(), pyfunc.predict(rows, params={'normalize': True})['reward'].tolist(), orchrm.__file__]\n"
    )


@pytest.mark.slow
def test_the_champion_loads_by_alias_and_scores_where_orchrm_is_not_installed(store, tmp_path):
    """MLflow puts the model's code/ on sys.path: the orchrm that scores is the one logged with it."""
    prompts, actions = _score_rows(store)
    code = f"import mlflow\nmlflow.set_tracking_uri({tracking.tracking_uri(store.config)!r})\n" + _predict_code(
        "models:/orchrm-reward@champion", prompts, actions
    )
    report = run_without_orchrm(code, blocked=frozenset(pipeline_only_modules()), cwd=tmp_path)
    assert report["blocked_loaded"] == []
    plain, normalized, orchrm_file = report["result"]
    assert Path(orchrm_file).parts[-3:] == ("code", "orchrm", "__init__.py")
    assert plain == pytest.approx(store.good.score(prompts, actions).tolist(), abs=1e-6)
    assert normalized == pytest.approx(store.good.score(prompts, actions, normalize=True).tolist(), abs=1e-6)


def _requirements(path: Path) -> tuple[list[str], list[Requirement]]:
    """The option lines and the requirements of a requirements.txt."""
    lines = [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return [line for line in lines if line.startswith("-")], [Requirement(line) for line in lines if not line.startswith("-")]


def test_the_logged_requirements_are_pinned_and_name_only_packages_from_an_index():
    """orchrm is not on any index (it travels with the model as code): a requirements.txt naming it
    cannot install in a fresh environment. Every listed distribution is installed here from an index
    (no direct_url.json: not editable, not a local path or VCS checkout), at the pinned version."""
    options, reqs = [], []
    for line in registry.pip_requirements():
        (options if line.startswith("-") else reqs).append(line)
    assert options == [f"--extra-index-url {registry.TORCH_CPU_INDEX}"]
    for req in map(Requirement, reqs):
        name = canonicalize_name(req.name)
        assert name != "orchrm"
        (spec,) = req.specifier
        assert spec.operator == "==" and "+" not in spec.version, req
        dist = metadata.distribution(name)
        assert dist.read_text("direct_url.json") is None, f"{name} is installed from a local path, not from an index"
        assert dist.version.partition("+")[0] == spec.version


@pytest.mark.slow
def test_generate_dockerfile_builds_a_context_that_installs_the_requirements_and_ships_orchrm(store, tmp_path):
    """No docker daemon here: the build context is checked, and its model loaded in an interpreter
    that imports only what requirements.txt installs (and not orchrm, which the model carries)."""
    out = tmp_path / "context"
    done = subprocess.run(
        [sys.executable, "-m", "mlflow", "models", "generate-dockerfile", "-m", "models:/orchrm-reward@champion", "-d", str(out),
         "--env-manager", "virtualenv"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**_environment(), "MLFLOW_TRACKING_URI": tracking.tracking_uri(store.config)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    dockerfile = (out / "Dockerfile").read_text()
    copied = re.search(r"^COPY (model_dir\S*) /opt/ml/model$", dockerfile, re.M)
    assert copied is not None, dockerfile
    assert "_install_pyfunc_deps('/opt/ml/model', install_mlflow=False, env_manager='virtualenv')" in dockerfile
    model = out / copied.group(1)
    assert (model / "artifacts" / "model.safetensors").is_file()
    assert (model / "code" / "orchrm" / "model" / "reward_model.py").is_file()
    assert (model / "code" / "orchrm" / "ops" / "pyfunc_model.py").is_file()
    assert "-r requirements.txt" in (model / "python_env.yaml").read_text()

    options, reqs = _requirements(model / "requirements.txt")
    assert options == [f"--extra-index-url {registry.TORCH_CPU_INDEX}"]
    assert [str(r) for r in reqs] == [r for r in registry.pip_requirements() if not r.startswith("-")]
    # what the image's virtualenv holds: the requirements and what they require, nothing else
    installs = requirement_closure(str(r) for r in reqs)
    absent = frozenset(m for m, dists in providers().items() if not dists & installs) - _VENV_TOOLS - {"orchrm"}
    assert {"prefect", "great_expectations", "sqlalchemy", "alembic"} <= absent
    prompts, actions = _score_rows(store)
    report = run_without_orchrm(_predict_code(str(model), prompts, actions), blocked=absent, cwd=tmp_path)
    assert report["blocked_loaded"] == []
    plain, normalized, orchrm_file = report["result"]
    assert Path(orchrm_file).parts[-3:] == ("code", "orchrm", "__init__.py")
    assert plain == pytest.approx(store.good.score(prompts, actions).tolist(), abs=1e-6)
    assert normalized == pytest.approx(store.good.score(prompts, actions, normalize=True).tolist(), abs=1e-6)
