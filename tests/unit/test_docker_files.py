"""The image and the Kubernetes example, read by the parsers of the tools that use them: the
Dockerfile by BuildKit's parser (the ``dockerfile`` package), the GPU work pool's job template and
the deployment's job variables by Prefect's own schema validation and templating (what its server
does when a deployment is created, and its worker when a flow run starts)."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"


# --------------------------------------------------------------------------------------------
# docker/Dockerfile


@pytest.fixture(scope="module")
def stages() -> dict[str, dict]:
    """Each stage of the Dockerfile: its base, and its instructions in order as (cmd, value, flags)."""
    import dockerfile

    found: dict[str, dict] = {}
    current = None
    for command in dockerfile.parse_file(str(DOCKER / "Dockerfile")):
        if command.cmd == "FROM":
            base, _as, name = command.value
            current = found[name] = {"base": base, "steps": []}
        elif current is not None:
            current["steps"].append((command.cmd, command.value, command.flags))
    return found


def chain(stages: dict, name: str) -> list[str]:
    """The stage ``name`` and the stages it is built on, nearest first."""
    names = [name]
    while stages[names[-1]]["base"] in stages:
        names.append(stages[names[-1]]["base"])
    return names


def steps(stages: dict, name: str, cmd: str) -> list:
    return [value for stage in chain(stages, name) for c, value, _ in stages[stage]["steps"] if c == cmd]


def test_the_dockerfile_has_a_cpu_and_a_cuda_target_and_cpu_is_the_default(stages):
    assert {"cpu", "cuda"} <= set(stages)
    assert list(stages)[-1] == "cpu", "the last stage is what `docker build` without --target gives"


def test_each_target_takes_its_own_pytorch_build(stages):
    def torch_install(target):
        [copy] = [flags for c, _, flags in stages[target]["steps"] if c == "COPY" and any(f.startswith("--from=") for f in flags)]
        venv = next(f.split("=", 1)[1] for f in copy if f.startswith("--from="))
        return " ".join(" ".join(v) for v in steps(stages, venv, "RUN") if "torch==" in " ".join(v)), chain(stages, venv)

    cpu_run, cpu_chain = torch_install("cpu")
    cuda_run, cuda_chain = torch_install("cuda")
    assert "torch-cpu" in cpu_chain and "torch-cuda" in cuda_chain
    cpu_index = [v for c, v, _ in stages["torch-cpu"]["steps"] if c == "ARG" and v[0].startswith("TORCH_INDEX_URL=")]
    cuda_index = [v for c, v, _ in stages["torch-cuda"]["steps"] if c == "ARG" and v[0].startswith("TORCH_INDEX_URL=")]
    assert cpu_index == [("TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu",)]
    assert cuda_index and "whl/cpu" not in cuda_index[0][0]
    assert "--index-url" in cpu_run and "--index-url" in cuda_run


def test_the_image_installs_the_pipeline_and_server_extras_under_the_torch_constraint(stages):
    for venv in ("venv-cpu", "venv-cuda"):
        runs = [" ".join(v) for v in steps(stages, venv, "RUN")]
        install = [r for r in runs if '".[pipeline,server]"' in r]
        assert install and all("-c \"$VIRTUAL_ENV/torch-constraint.txt\"" in r for r in install), venv


def test_the_image_runs_as_a_user_that_is_not_root_with_the_orchrm_cli_as_entrypoint(stages):
    for target in ("cpu", "cuda"):
        users = steps(stages, target, "USER")
        assert users, f"{target} sets no USER"
        user = users[0][0]  # the nearest stage's USER is the one in force
        assert user.split(":")[0] not in ("root", "0"), target
        entrypoint = steps(stages, target, "ENTRYPOINT")[0]
        assert entrypoint[-1] == "orchrm"
        assert "WORKDIR" in {c for stage in chain(stages, target) for c, _, _ in stages[stage]["steps"]}
        # what that user writes lies under its home, not in the root-owned virtual environment
        env = dict(pair for value in steps(stages, target, "ENV") for pair in zip(value[::2], value[1::2], strict=True))
        for key in ("HOME", "PREFECT_HOME", "PREFECT_SERVER_UI_STATIC_DIRECTORY"):
            assert env[key].startswith("/home/orchrm"), key


def test_what_the_dockerfile_copies_is_in_the_build_context():
    import dockerfile

    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip() and not line.startswith("#")]
    for command in dockerfile.parse_file(str(DOCKER / "Dockerfile")):
        if command.cmd != "COPY" or any(f.startswith("--from=") for f in command.flags):
            continue
        for source in command.value[:-1]:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
            assert not any(fnmatch.fnmatch(source, pattern) or source.split("/")[0] == pattern for pattern in ignored), \
                f"COPY {source}: .dockerignore leaves it out of the build context"


def test_requirements_lists_the_core_and_the_extras_dependencies_without_orchrm_itself():
    # the script beside the Dockerfile, loaded from its path (`docker` is also the Docker SDK's name)
    import importlib.util

    spec = importlib.util.spec_from_file_location("docker_requirements", DOCKER / "requirements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    requirements = module.requirements

    lines = requirements(ROOT / "pyproject.toml", ["pipeline", "server"])
    names = {re.split(r"[<>=!\[;]", line)[0] for line in lines}
    assert {"torch", "mlflow-skinny", "mlflow", "prefect", "great-expectations", "psycopg", "boto3"} <= names
    assert "mlflow[auth]>=3.17,<3.18" in lines
    assert not any(line.startswith("orchrm") for line in lines)
    with pytest.raises(SystemExit, match="no extra 'nosuch'"):
        requirements(ROOT / "pyproject.toml", ["nosuch"])


# --------------------------------------------------------------------------------------------
# the Kubernetes work pool with a GPU (docker/prefect.kubernetes.yaml)


@pytest.fixture(scope="module")
def template() -> dict:
    return json.loads((DOCKER / "kubernetes-gpu-job-template.json").read_text())


@pytest.fixture(scope="module")
def gpu_deployment() -> dict:
    [deployment] = yaml.safe_load((DOCKER / "prefect.kubernetes.yaml").read_text())["deployments"]
    return deployment


def defaults(template: dict) -> dict:
    return {k: v["default"] for k, v in template["variables"]["properties"].items() if "default" in v}


def test_the_gpu_deployment_asks_for_a_gpu_on_a_gpu_node_from_the_cuda_image(gpu_deployment):
    pool = gpu_deployment["work_pool"]
    assert pool["name"] == "orchrm-gpu"
    variables = pool["job_variables"]
    assert variables["gpu_limit"] == 1
    assert variables["image"].endswith(":cuda")
    assert variables["node_selector"] and variables["tolerations"][0]["key"] == "nvidia.com/gpu"
    # the Job's container runs the flows from the image's project folder (docker/Dockerfile WORKDIR)
    [pull] = gpu_deployment["pull"]
    assert pull["prefect.deployments.steps.set_working_directory"]["directory"] == "/app"
    assert "WORKDIR /app" in (DOCKER / "Dockerfile").read_text()


def test_the_gpu_deployment_loads_its_flow_and_runs_one_at_a_time(gpu_deployment):
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
    from prefect.flows import load_flow_from_entrypoint

    limit = ConcurrencyLimitConfig.model_validate(gpu_deployment["concurrency_limit"])
    assert (limit.limit, limit.collision_strategy) == (1, ConcurrencyLimitStrategy.ENQUEUE)
    path, name = gpu_deployment["entrypoint"].split(":")
    assert load_flow_from_entrypoint(f"{ROOT / path}:{name}", use_placeholder_flow=False).name == "orchrm-pipeline"
    assert (ROOT / gpu_deployment["parameters"]["config"]).exists()


def test_the_job_template_is_a_valid_schema_whose_every_variable_is_used(template):
    from prefect.utilities.schema_tools import is_valid_schema

    is_valid_schema(template["variables"], preprocess=False)
    placeholders = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", json.dumps(template["job_configuration"])))
    declared = set(template["variables"]["properties"])
    # a variable that job_configuration never names is silently ignored by the worker
    assert declared == placeholders, f"unused: {declared - placeholders}, undeclared: {placeholders - declared}"


def test_the_deployments_job_variables_validate_against_the_pool_as_prefects_server_checks_them(template, gpu_deployment):
    from prefect.utilities.schema_tools import ValidationError, validate

    variables = gpu_deployment["work_pool"]["job_variables"]
    validate({**defaults(template), **variables}, template["variables"], raise_on_error=True, ignore_required=True)
    with pytest.raises(ValidationError, match="gpu_limit"):
        validate({**defaults(template), **variables, "gpu_limit": "one"}, template["variables"], raise_on_error=True, ignore_required=True)


def test_the_rendered_job_has_the_gpu_limit_node_selector_tolerations_and_image(template, gpu_deployment):
    from prefect.utilities.templating import apply_values

    values = {**defaults(template), **gpu_deployment["work_pool"]["job_variables"],
              "name": "orchrm-run", "command": "prefect flow-run execute"}  # the two the worker fills in
    configuration = apply_values(template["job_configuration"], values)
    pod = configuration["job_manifest"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["resources"]["requests"] == {"cpu": "4", "memory": "16Gi"}
    assert container["image"] == "registry.example.com/orchrm:cuda"
    assert container["envFrom"] == [{"secretRef": {"name": "orchrm-credentials"}}]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert configuration["namespace"] == "orchrm"
    assert "{{" not in json.dumps(configuration)


def test_prefect_yaml_deploys_only_to_the_process_pool_and_points_at_the_gpu_example():
    """``prefect deploy --all`` of prefect.yaml (``make serve``, the tests) needs only the ``orchrm``
    process pool: the Kubernetes example lives in its own file."""
    text = (ROOT / "prefect.yaml").read_text()
    assert {d["work_pool"]["name"] for d in yaml.safe_load(text)["deployments"]} == {"orchrm"}
    assert "docker/prefect.kubernetes.yaml" in text
