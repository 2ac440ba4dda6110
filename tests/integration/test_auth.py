"""Nobody moves the champion who should not: a real ``mlflow server --app-name basic-auth`` with the
accounts ``orchrm auth provision`` sets up, and a real Prefect server with an API auth string.

The pipeline's service account logs, registers, promotes and rolls back through orchrm's own
registry functions; a reviewer reads (the champion, the runs, the model by alias) but cannot
register a version or move an alias; an anonymous client can do neither, and each refused client
gets an error that says who was refused and which account to use. One MLflow server for the module.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from orchrm.config import PipelineConfig, config_from_dict
from orchrm.data.tables import pairs_digest
from orchrm.errors import ConfigError, RegistryError
from orchrm.evaluation.gates import check_gates
from orchrm.ops import auth, registry, tracking
from orchrm.ops.serving import load_reward_model
from tests.integration.mlflow_server import free_port, running_mlflow
from tests.integration.prefect_server import BIN, ROOT, _process, _wait_healthy
from tests.integration.test_registry import gate_metrics, log_evaluated, train
from tests.model.conftest import make_pairs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ADMIN = auth.Account("admin", "admin-Secret-4711")
PIPELINE = auth.Account("orchrm-pipeline", "pipeline-Secret-0815")
REVIEWER = auth.Account("reviewer", "reviewer-Secret-2342")
PASSWORDS = (ADMIN.password, PIPELINE.password, REVIEWER.password)
#: what the compose stack's env file sets
ACCOUNTS_ENV = {
    auth.ADMIN_USER_ENV: ADMIN.username, auth.ADMIN_PASSWORD_ENV: ADMIN.password,
    auth.PIPELINE_USER_ENV: PIPELINE.username, auth.PIPELINE_PASSWORD_ENV: PIPELINE.password,
    auth.REVIEWER_USER_ENV: REVIEWER.username, auth.REVIEWER_PASSWORD_ENV: REVIEWER.password,
}
CREDENTIALS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


def login(monkeypatch: pytest.MonkeyPatch, account: auth.Account | None) -> None:
    """Make this process's MLflow client ``account`` (None: anonymous)."""
    for name in CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    if account is not None:
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", account.username)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", account.password)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING", "MLFLOW_AUTH", "ORCHRM_MLFLOW", "PREFECT_"))}


@dataclass
class Registry:
    """What the pipeline's account built on the server: v1 promoted, then v2 promoted over it
    (champion v2, previous v1), and a third candidate's run with a logged model, never registered."""

    url: str
    config: PipelineConfig
    provision_output: str
    model: object
    pairs: object
    parent_run: str
    v1: int
    v2: int
    spare_run: str
    spare_uri: str


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> tuple[str, Path]:
    """``mlflow server --app-name basic-auth`` on SQLite (its auth database too), artifacts
    proxied to a folder; the admin made on first start from MLFLOW_AUTH_ADMIN_PASSWORD."""
    root = tmp_path_factory.mktemp("auth-server")
    ini = root / "basic_auth.ini"
    ini.write_text(
        "[mlflow]\ndefault_permission = READ\n"
        f"database_uri = sqlite:///{root / 'auth.db'}\nadmin_username = {ADMIN.username}\n"
        # a password is hashed on every request its cache misses: slow on a busy machine
        "auth_cache_ttl_seconds = 300\n"
    )
    env = {"MLFLOW_AUTH_CONFIG_PATH": str(ini), "MLFLOW_AUTH_ADMIN_PASSWORD": ADMIN.password,
           "MLFLOW_FLASK_SERVER_SECRET_KEY": "a-test-key-for-csrf-0123456789", "MLFLOW_DISABLE_TELEMETRY": "true"}
    args = ["server", "--app-name", "basic-auth", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination", str(root / "artifacts")]
    with pytest.MonkeyPatch.context() as mp:
        for name in CREDENTIALS:
            mp.delenv(name, raising=False)
        with running_mlflow(args, root / "server.log", env=env) as url:
            yield url, root


@pytest.fixture(scope="module")
def store(server) -> Registry:
    import mlflow

    url, root = server
    config = config_from_dict({"data_dir": str(root / "data"), "registry": {"tracking_uri": url}})
    provisioned = subprocess.run([str(BIN / "orchrm"), "auth", "provision"], env=clean_env() | ACCOUNTS_ENV | {"MLFLOW_TRACKING_URI": url},
                                 cwd=root, capture_output=True, text=True, timeout=600)
    assert provisioned.returncode == 0, provisioned.stderr[-3000:]
    before = mlflow.get_tracking_uri()
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        login(mp, PIPELINE)
        torch.set_num_threads(1)
        pairs = make_pairs(40, seed=0)
        model = train(pairs)
        file = model.save(root / "model" / "model.safetensors")
        digest = pairs_digest(pairs)
        parent = tracking.start_run(config, "orchrm-pipeline")
        tracking.log_config(config, run_id=parent)
        versions = []
        for name in ("first", "second"):
            run_id = tracking.start_run(config, f"candidate-{name}", parent_run_id=parent)
            uri = registry.log_model(file, run_id=run_id, config=config)
            metrics, champion = gate_metrics(rm=0.7), None
            if versions:  # the second beats the first
                metrics |= {"best_of_8.reward_model": 0.75, "champion_delta.best_of_8": 0.05,
                            "champion_delta.best_of_8.ci_low": 0.01, "champion_delta.best_of_8.ci_high": 0.09}
                champion = gate_metrics(rm=0.7)
            log_evaluated(config, run_id, metrics, champion=champion, champion_version=versions[-1] if versions else None)
            verdict = check_gates(metrics, config.evaluate.gates, champion=champion)
            versions.append(registry.register_candidate(uri, run_id=run_id, verdict=verdict, data_digest=digest, config=config))
            registry.promote(versions[-1], config=config)
        spare_run = tracking.start_run(config, "candidate-spare", parent_run_id=parent)
        spare_uri = registry.log_model(file, run_id=spare_run, config=config)
        tracking.end_run(config, parent)
    mlflow.set_tracking_uri(before)
    return Registry(url, config, provisioned.stdout, model, pairs, parent, versions[0], versions[1], spare_run, spare_uri)


# --------------------------------------------------------------------------------------------
# provisioning


def test_provisioning_reads_every_account_from_the_environment():
    accounts = auth.accounts_from_env(ACCOUNTS_ENV)
    assert accounts == auth.Accounts(ADMIN, PIPELINE, REVIEWER)
    assert PIPELINE.password not in repr(accounts)
    only_mlflows_name = {k: v for k, v in ACCOUNTS_ENV.items() if k != auth.ADMIN_USER_ENV} | {auth.MLFLOW_ADMIN_USER_ENV: "root"}
    assert auth.accounts_from_env(only_mlflows_name).admin.username == "root"


def test_provisioning_names_every_missing_variable():
    with pytest.raises(ConfigError, match="ORCHRM_MLFLOW_PIPELINE_PASSWORD, ORCHRM_MLFLOW_REVIEWER_USER"):
        auth.accounts_from_env({auth.ADMIN_PASSWORD_ENV: "x", auth.PIPELINE_USER_ENV: "p", auth.REVIEWER_PASSWORD_ENV: "r"})


def test_provisioning_needs_a_server_not_a_local_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(ConfigError, match="mlflow server --app-name basic-auth"):
        auth.provision_from_env(PipelineConfig(data_dir=str(tmp_path)), ACCOUNTS_ENV)


def test_provisioning_created_the_accounts_the_experiment_and_the_model_as_the_pipeline(store):
    assert "users created: orchrm-pipeline, reviewer" in store.provision_output
    assert "(created), registered model 'orchrm-reward' (created)" in store.provision_output
    assert not any(p in store.provision_output for p in PASSWORDS)


def test_provisioning_again_changes_nothing(store):
    done = auth.provision(store.url, auth.Accounts(ADMIN, PIPELINE, REVIEWER), experiment="orchrm", model_name="orchrm-reward")
    assert (done.created_users, done.granted, done.created_experiment, done.created_model) == ((), (), False, False)


def test_provisioning_as_a_wrong_admin_password_says_what_to_set(store):
    with pytest.raises(RegistryError, match=r"refused user 'admin': wrong user name or password .*MLFLOW_AUTH_ADMIN_PASSWORD"):
        auth.provision(store.url, auth.Accounts(auth.Account("admin", "wrong"), PIPELINE), experiment="orchrm", model_name="orchrm-reward")


# --------------------------------------------------------------------------------------------
# the pipeline's account


def test_the_pipeline_account_registered_and_promoted_through_the_server(store, monkeypatch):
    login(monkeypatch, REVIEWER)  # what it did, read by someone else
    assert registry.champion_version(store.config) == store.v2
    assert registry.alias_version(store.config, registry.PREVIOUS) == store.v1
    assert registry.version_info(store.v2, config=store.config)["tags"]["verdict"] == "promoted"


def test_the_pipeline_account_can_roll_back(store, monkeypatch):
    login(monkeypatch, PIPELINE)
    done = registry.rollback(store.config, reason="auth test", who="ops")
    assert (done.restored, done.demoted) == (store.v1, store.v2)
    registry.promote(store.v2, config=store.config)  # back as it was, for the other tests
    assert registry.champion_version(store.config) == store.v2


def test_credentials_are_never_logged(store, monkeypatch):
    login(monkeypatch, PIPELINE)
    c = tracking.client(store.url)
    run = c.get_run(store.parent_run)
    values = [*run.data.params.values(), *run.data.tags.values()]
    config_yaml = Path(c.download_artifacts(store.parent_run, "config.yaml", dst_path=str(Path(store.config.data_dir) / "dl"))).read_text()
    for password in PASSWORDS:
        assert not any(password in v for v in values)
        assert password not in config_yaml
    assert run.data.params["registry.tracking_uri"] == store.url
    assert tracking.redacted({"tracking_uri": "http://u:pw@host:5000", "auth_string": "u:pw"}) == {
        "tracking_uri": "http://***@host:5000", "auth_string": "***"}


# --------------------------------------------------------------------------------------------
# a reviewer


def test_a_reviewer_reads_the_champion_the_runs_and_the_model(store, monkeypatch):
    login(monkeypatch, REVIEWER)
    assert registry.champion_version(store.config) == store.v2
    experiment = tracking.client(store.url).get_experiment_by_name("orchrm")
    runs = tracking.client(store.url).search_runs([experiment.experiment_id])
    assert store.parent_run in {r.info.run_id for r in runs}
    model = load_reward_model("models:/orchrm-reward@champion", tracking_uri=store.url)
    prompts, actions = store.pairs["prompt"].tolist()[:4], store.pairs["chosen"].tolist()[:4]
    assert torch.equal(model.score(prompts, actions), store.model.score(prompts, actions))


def test_a_reviewer_cannot_register_a_version(store, monkeypatch):
    login(monkeypatch, REVIEWER)
    verdict = registry.stored_verdict(store.v1, config=store.config)
    with pytest.raises(RegistryError, match=r"registering .* as a version of 'orchrm-reward': the MLflow server at .* refused user "
                                            r"'reviewer': permission denied \(HTTP 403\)\. Set MLFLOW_TRACKING_USERNAME and "
                                            r"MLFLOW_TRACKING_PASSWORD to an account with MANAGE permission"):
        registry.register_candidate(store.spare_uri, run_id=store.spare_run, verdict=verdict, data_digest="d", config=store.config)
    assert registry.version_for_run(store.spare_run, config=store.config) is None


def test_a_reviewer_cannot_move_the_champion(store, monkeypatch):
    login(monkeypatch, REVIEWER)
    with pytest.raises(RegistryError, match=r"refused user 'reviewer': permission denied \(HTTP 403\).*pipeline's service account"):
        registry.promote(store.v1, config=store.config)
    with pytest.raises(RegistryError, match=r"refused user 'reviewer': permission denied \(HTTP 403\)"):
        registry.rollback(store.config, reason="not mine to do")
    from mlflow.exceptions import MlflowException

    with pytest.raises(MlflowException, match="403"):  # the alias itself, straight to the server
        tracking.client(store.url).set_registered_model_alias("orchrm-reward", registry.CHAMPION, str(store.v1))
    assert registry.champion_version(store.config) == store.v2


def test_orchrm_promote_and_rollback_as_a_reviewer_exit_with_the_reason(store):
    env = clean_env() | {"MLFLOW_TRACKING_URI": store.url, "MLFLOW_TRACKING_USERNAME": REVIEWER.username,
                         "MLFLOW_TRACKING_PASSWORD": REVIEWER.password}
    for args in (["promote", "--version", str(store.v1)], ["rollback", "--reason", "test"]):
        done = subprocess.run([str(BIN / "orchrm"), *args], env=env, cwd=store.config.data_dir, capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, done.stderr[-2000:]
        assert "refused user 'reviewer': permission denied (HTTP 403)" in done.stderr
        assert REVIEWER.password not in done.stderr + done.stdout


# --------------------------------------------------------------------------------------------
# an anonymous client


def test_an_anonymous_client_can_neither_register_nor_promote_nor_read(store, monkeypatch):
    login(monkeypatch, None)
    anonymous = r"refused an anonymous client: the server requires a login \(HTTP 401\)\. Set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
    with pytest.raises(RegistryError, match=anonymous):
        registry.register_candidate(store.spare_uri, run_id=store.spare_run, verdict=check_gates(gate_metrics(rm=0.7), store.config.evaluate.gates),
                                    data_digest="d", config=store.config)
    with pytest.raises(RegistryError, match=anonymous):
        registry.promote(store.v1, config=store.config)
    with pytest.raises(RegistryError, match=anonymous):
        load_reward_model("models:/orchrm-reward@champion", tracking_uri=store.url)
    login(monkeypatch, REVIEWER)
    assert registry.champion_version(store.config) == store.v2
    assert registry.version_for_run(store.spare_run, config=store.config) is None


def test_a_wrong_password_is_told_apart_from_no_login(store, monkeypatch):
    login(monkeypatch, auth.Account(PIPELINE.username, "not-the-password"))
    with pytest.raises(RegistryError, match=r"refused user 'orchrm-pipeline': wrong user name or password \(HTTP 401\)"):
        registry.champion_version(store.config)


# --------------------------------------------------------------------------------------------
# Prefect's API auth


LOCK = (
    "from orchrm.config import config_from_dict\n"
    "from orchrm.ops.locks import promotion_lock\n"
    "config = config_from_dict({'registry': {'tracking_uri': 'http://127.0.0.1:9'}})\n"
    "with promotion_lock(config, timeout_s=30) as held:\n"
    "    print('held:', held)\n"
)


def test_a_prefect_server_with_an_auth_string_refuses_a_client_without_it(tmp_path):
    secret = "orchrm:prefect-Secret-1234"
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    base = clean_env() | {"PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                          "PREFECT_SERVER_UI_ENABLED": "false"}
    server_env = base | {"PREFECT_SERVER_API_AUTH_STRING": secret}
    anonymous = base | {"PREFECT_API_URL": api}
    allowed = anonymous | {"PREFECT_API_AUTH_STRING": secret}
    log = tmp_path / "server.log"

    def run(args: list[str], env: dict) -> subprocess.CompletedProcess:
        return subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)

    with _process([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)], env=server_env, log=log,
                  cwd=ROOT) as server:
        _wait_healthy(api, server, log)
        refused = run([str(BIN / "prefect"), "work-pool", "create", "orchrm", "--type", "process"], anonymous)
        assert refused.returncode != 0
        assert "401" in refused.stdout + refused.stderr
        locked_out = run([sys.executable, "-c", LOCK], anonymous)
        assert locked_out.returncode != 0
        assert "refused this client (HTTP 401; it sent no auth string)" in locked_out.stderr
        assert "set PREFECT_API_AUTH_STRING to the server's PREFECT_SERVER_API_AUTH_STRING" in locked_out.stderr

        created = run([str(BIN / "prefect"), "work-pool", "create", "orchrm", "--type", "process"], allowed)
        assert created.returncode == 0, created.stdout[-2000:] + created.stderr[-2000:]
        listed = run([str(BIN / "prefect"), "deployment", "ls"], allowed)
        assert listed.returncode == 0, listed.stderr[-2000:]
        locked = run([sys.executable, "-c", LOCK], allowed)
        assert locked.returncode == 0, locked.stderr[-2000:]
        assert "held: Prefect global concurrency limit 'orchrm-promotion-orchrm-reward'" in locked.stdout
