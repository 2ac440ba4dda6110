"""Imports point one way (DESIGN §2): a config or a saved model pulls in no simulator and no task
suite, ``tasks/`` never imports ``agents/``, the executor does not need the orchestrators to load,
and no module reaches into another's private names.

The runtime checks run in a fresh interpreter, so what this test process already imported
cannot hide a dependency.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchrm.execution.sandbox.config import MATH_TRAP_KINDS, NoiseConfig

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "orchrm"
#: the simulator: the sandbox's agents (its noise config aside: configuration only) and the task suites
SIMULATOR = ("orchrm.execution.sandbox.", "orchrm.execution.tasks")
SANDBOX_AGENTS = "orchrm.execution.sandbox."
SANDBOX_CONFIG = "orchrm.execution.sandbox.config"


def loaded_after(code: str) -> list[str]:
    """The ``orchrm`` modules a fresh interpreter holds after running ``code``."""
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('orchrm'))))\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def simulator_modules(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(SIMULATOR) and m != SANDBOX_CONFIG]


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
        "import torch\n"
        "from orchrm.model.reward_model import BradleyTerryModel\n"
        "model = BradleyTerryModel(hidden_dim=32, num_layers=2, num_heads=2, max_length=96, vocab_size=300, dropout=0.0)\n"
        "model.fit_tokenizer(['Who founded Avalon?', '<agent id=\"a1\" type=\"CoT\" model=\"small\"/>'] * 4)\n"
        f"model.save({str(tmp_path / 'model')!r})\n"
        f"loaded = BradleyTerryModel.load({str(tmp_path / 'model')!r})\n"
        "actions = ['<agent id=\"a1\" type=\"CoT\" model=\"small\"/>', '<agent id=\"a1\" type=\"CoT\" model=\"large\"/>']\n"
        "assert torch.allclose(loaded.score('Who founded Avalon?', actions), model.score('Who founded Avalon?', actions))\n"
    )
    assert "orchrm.model.reward_model" in modules
    assert simulator_modules(modules) == []


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
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in PACKAGE.rglob("*.py")}
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("orchrm")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("orchrm"):
            names |= {a.asname or a.name for a in node.names if f"{node.module}.{a.name}" in modules}
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
