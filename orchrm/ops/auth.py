"""Who may move the champion: the accounts and permissions of an MLflow server that runs its
basic-auth app (``mlflow server --app-name basic-auth``).

Three kinds of account, read from the environment (:func:`accounts_from_env`): the server's admin,
who provisions the others; the pipeline's service account, which owns (``MANAGE``) the experiment
and the registered model, so it alone logs runs, registers versions and moves ``champion``,
``challenger`` and ``previous``; and a reviewer, who reads (``READ``). Every client passes its own
account through ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``, which MLflow's client
reads on every request.

:func:`provision` is idempotent: it creates the users that are missing, sets every password to the
environment's, creates the experiment and the registered model *as the pipeline's account* when
they do not exist yet (their creator gets ``MANAGE``, and no one else can claim the name first),
and grants what is missing. Run it after each start of the server:

>>> provision_from_env(config)        # doctest: +SKIP
or ``orchrm auth provision`` / ``python -m orchrm.ops.auth``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchrm.errors import ConfigError, RegistryError

if TYPE_CHECKING:  # pragma: no cover
    from orchrm.config import PipelineConfig

#: the environment variables :func:`accounts_from_env` reads (the compose stack's env file sets them)
ADMIN_USER_ENV, ADMIN_PASSWORD_ENV = "MLFLOW_AUTH_ADMIN_USER", "MLFLOW_AUTH_ADMIN_PASSWORD"
#: MLflow's own name for the admin's user name (the server reads it on its first start); accepted too
MLFLOW_ADMIN_USER_ENV = "MLFLOW_AUTH_ADMIN_USERNAME"
PIPELINE_USER_ENV, PIPELINE_PASSWORD_ENV = "ORCHRM_MLFLOW_PIPELINE_USER", "ORCHRM_MLFLOW_PIPELINE_PASSWORD"
REVIEWER_USER_ENV, REVIEWER_PASSWORD_ENV = "ORCHRM_MLFLOW_REVIEWER_USER", "ORCHRM_MLFLOW_REVIEWER_PASSWORD"
#: MLflow's default admin user name (``admin_username`` of its basic_auth.ini)
DEFAULT_ADMIN = "admin"

#: what the pipeline's account holds on the experiment and the registered model: setting an alias
#: needs EDIT, removing one (``challenger``, ``previous``) and deleting a duplicate version MANAGE
PIPELINE_PERMISSION = "MANAGE"
REVIEWER_PERMISSION = "READ"

#: one request's time limit (seconds): the server hashes a password on every authenticated request
#: that its credential cache misses, which takes a while on a busy machine
REQUEST_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Account:
    """A user name and its password (left out of ``repr``, so a log line never shows it)."""

    username: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class Accounts:
    """The accounts :func:`provision` sets up; ``reviewer`` is optional."""

    admin: Account
    pipeline: Account
    reviewer: Account | None = None


def accounts_from_env(environ: Mapping[str, str] | None = None) -> Accounts:
    """The accounts named by the environment: the admin (:data:`ADMIN_USER_ENV`, else MLflow's
    :data:`MLFLOW_ADMIN_USER_ENV`, else ``admin``; :data:`ADMIN_PASSWORD_ENV`), the pipeline's
    service account (:data:`PIPELINE_USER_ENV` / :data:`PIPELINE_PASSWORD_ENV`) and, when both of
    its variables are set, a reviewer (:data:`REVIEWER_USER_ENV` / :data:`REVIEWER_PASSWORD_ENV`).
    Raises :class:`ConfigError` naming every variable that is missing."""
    env = os.environ if environ is None else environ
    admin_user = env.get(ADMIN_USER_ENV) or env.get(MLFLOW_ADMIN_USER_ENV) or DEFAULT_ADMIN
    required = (ADMIN_PASSWORD_ENV, PIPELINE_USER_ENV, PIPELINE_PASSWORD_ENV)
    missing = [name for name in required if not env.get(name)]
    reviewer_vars = (REVIEWER_USER_ENV, REVIEWER_PASSWORD_ENV)
    if any(env.get(v) for v in reviewer_vars):
        missing += [v for v in reviewer_vars if not env.get(v)]
    if missing:
        raise ConfigError(
            f"provisioning MLflow accounts needs {', '.join(missing)}: set them in the environment (the compose "
            "stack's env file), the admin's as the server was started with"
        )
    reviewer = Account(env[REVIEWER_USER_ENV], env[REVIEWER_PASSWORD_ENV]) if env.get(REVIEWER_USER_ENV) else None
    accounts = Accounts(Account(admin_user, env[ADMIN_PASSWORD_ENV]), Account(env[PIPELINE_USER_ENV], env[PIPELINE_PASSWORD_ENV]), reviewer)
    names = [a.username for a in (accounts.admin, accounts.pipeline, accounts.reviewer) if a is not None]
    if len(set(names)) != len(names):
        raise ConfigError(f"the admin, pipeline and reviewer accounts must be different users, got {names}")
    return accounts


@dataclass(frozen=True)
class Provisioned:
    """What :func:`provision` found or did."""

    experiment_id: str
    model_name: str
    #: users it created (the others existed; their passwords were set to the environment's)
    created_users: tuple[str, ...]
    #: ``"<user> <PERMISSION> <resource type> <resource>"`` for every grant it wrote
    granted: tuple[str, ...]
    #: whether it created the experiment / the registered model (as the pipeline's account)
    created_experiment: bool = False
    created_model: bool = False


class _Server:
    """The REST calls provisioning makes, each as an explicit account (never the process's
    ``MLFLOW_TRACKING_*``), with a refusal turned into :class:`RegistryError`."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")

    def call(self, account: Account, method: str, endpoint: str, *, json: dict | None = None,
             params: dict | None = None, ok_errors: Sequence[str] = ()) -> dict[str, Any]:
        """The JSON answer of ``endpoint``; an answer whose ``error_code`` is in ``ok_errors`` is
        returned (``{"error_code": ...}``) rather than raised."""
        import httpx

        from orchrm.ops.tracking import redacted

        try:
            answer = httpx.request(method, f"{self.uri}{endpoint}", json=json, params=params,
                                   auth=(account.username, account.password), timeout=REQUEST_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise RegistryError(f"the MLflow server at {redacted(self.uri)} did not answer {endpoint} ({exc}): check that it runs") from None
        if answer.status_code in (401, 403):
            why = "wrong user name or password" if answer.status_code == 401 else "permission denied"
            raise RegistryError(
                f"the MLflow server at {redacted(self.uri)} refused user {account.username!r}: {why} for {endpoint} "
                f"(HTTP {answer.status_code}). Provisioning runs as the server's admin: set {ADMIN_USER_ENV} and "
                f"{ADMIN_PASSWORD_ENV} to the admin the server was first started with (MLflow creates it then; "
                "a later change of the variable does not change its password)"
            )
        try:
            body = answer.json() if answer.content else {}
        except ValueError:
            body = {}
        if answer.status_code == 200:
            return body
        if body.get("error_code") in ok_errors:
            return body
        raise RegistryError(
            f"the MLflow server at {redacted(self.uri)} answered {endpoint} with HTTP {answer.status_code} "
            f"({body.get('message', answer.text[:300])}): is it running the basic-auth app (`mlflow server --app-name basic-auth`)?"
        )


def _ensure_user(server: _Server, admin: Account, account: Account) -> bool:
    """Create ``account`` when missing, else set its password to ``account.password``; True when created."""
    found = server.call(admin, "GET", "/api/2.0/mlflow/users/get", params={"username": account.username},
                        ok_errors=("RESOURCE_DOES_NOT_EXIST",))
    if "user" in found:
        server.call(admin, "PATCH", "/api/2.0/mlflow/users/update-password",
                    json={"username": account.username, "password": account.password})
        return False
    server.call(admin, "POST", "/api/2.0/mlflow/users/create", json={"username": account.username, "password": account.password})
    return True


def _grant(server: _Server, admin: Account, username: str, resource_type: str, resource_id: str, permission: str) -> bool:
    """Give ``username`` exactly ``permission`` on the resource; True when a grant was written.

    A grant that exists with another level is replaced (revoked, then granted again): the
    environment says what each account holds."""
    endpoint = "/api/3.0/mlflow/users/permissions"
    target = {"username": username, "resource_type": resource_type, "resource_id": resource_id}
    done = server.call(admin, "POST", f"{endpoint}/grant", json={**target, "permission": permission},
                       ok_errors=("RESOURCE_ALREADY_EXISTS",))
    if "error_code" not in done:
        return True
    current = server.call(admin, "GET", f"{endpoint}/get", params=target).get("permission")
    if current == permission:
        return False
    server.call(admin, "POST", f"{endpoint}/revoke", json=target)
    server.call(admin, "POST", f"{endpoint}/grant", json={**target, "permission": permission})
    return True


def provision(tracking_uri: str, accounts: Accounts, *, experiment: str, model_name: str) -> Provisioned:
    """Set up the accounts and permissions of the basic-auth MLflow server at ``tracking_uri``
    (idempotent; see the module docstring): the users, the experiment ``experiment`` and the
    registered model ``model_name`` (created by the pipeline's account when missing),
    :data:`PIPELINE_PERMISSION` on both for the pipeline, :data:`REVIEWER_PERMISSION` for the
    reviewer. Raises :class:`RegistryError` when the server is unreachable or refuses the admin."""
    from orchrm.ops.registry import REGISTERED_MODEL_DESCRIPTION
    from orchrm.ops.tracking import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, check_server

    check_server(tracking_uri)
    server, admin, pipeline = _Server(tracking_uri), accounts.admin, accounts.pipeline
    created = tuple(a.username for a in (pipeline, accounts.reviewer) if a is not None and _ensure_user(server, admin, a))

    found = server.call(pipeline, "GET", "/api/2.0/mlflow/experiments/get-by-name", params={"experiment_name": experiment},
                        ok_errors=("RESOURCE_DOES_NOT_EXIST",))
    new_experiment = "experiment" not in found
    if new_experiment:
        # the same experiment tracking.configure would create (the server chooses the artifact location)
        made = server.call(pipeline, "POST", "/api/2.0/mlflow/experiments/create",
                           json={"name": experiment, "tags": [{"key": EXPERIMENT_KIND_TAG, "value": EXPERIMENT_KIND}]})
        experiment_id = str(made["experiment_id"])
    else:
        experiment_id = str(found["experiment"]["experiment_id"])
    found = server.call(pipeline, "GET", "/api/2.0/mlflow/registered-models/get", params={"name": model_name},
                        ok_errors=("RESOURCE_DOES_NOT_EXIST",))
    new_model = "registered_model" not in found
    if new_model:
        server.call(pipeline, "POST", "/api/2.0/mlflow/registered-models/create",
                    json={"name": model_name, "description": REGISTERED_MODEL_DESCRIPTION})

    wanted = [(pipeline.username, PIPELINE_PERMISSION)]
    if accounts.reviewer is not None:
        wanted.append((accounts.reviewer.username, REVIEWER_PERMISSION))
    granted = []
    for username, permission in wanted:
        for resource_type, resource_id in (("experiment", experiment_id), ("registered_model", model_name)):
            if _grant(server, admin, username, resource_type, resource_id, permission):
                granted.append(f"{username} {permission} {resource_type} {resource_id}")
    return Provisioned(experiment_id, model_name, created, tuple(granted), new_experiment, new_model)


def provision_from_env(config: PipelineConfig, environ: Mapping[str, str] | None = None) -> Provisioned:
    """:func:`provision` on the configured tracking server (``MLFLOW_TRACKING_URI``, else
    ``registry.tracking_uri``) for ``registry.experiment`` and ``registry.model_name``, with the
    accounts of :func:`accounts_from_env`. Raises :class:`ConfigError` when the store is not a server."""
    from orchrm.ops.tracking import is_remote, tracking_uri

    uri = tracking_uri(config)
    if not is_remote(uri):
        raise ConfigError(
            f"accounts live on an MLflow server, and the tracking store is {uri}: set MLFLOW_TRACKING_URI "
            "(or registry.tracking_uri) to the server started with `mlflow server --app-name basic-auth`"
        )
    return provision(uri, accounts_from_env(environ), experiment=config.registry.experiment, model_name=config.registry.model_name)


def describe(done: Provisioned) -> str:
    """A few lines saying what :func:`provision` did, for the CLI."""
    lines = [
        f"experiment {done.experiment_id} ({'created' if done.created_experiment else 'found'}), "
        f"registered model {done.model_name!r} ({'created' if done.created_model else 'found'})",
        f"users created: {', '.join(done.created_users) or 'none (their passwords were set to the environment)'}",
        f"grants written: {'; '.join(done.granted) or 'none (all were in place)'}",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m orchrm.ops.auth [--config FILE]``: :func:`provision_from_env`, what it did on stdout."""
    from orchrm.config import load_config
    from orchrm.errors import OrchRMError

    parser = argparse.ArgumentParser(prog="python -m orchrm.ops.auth", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None, help="YAML config (registry: section)")
    args = parser.parse_args(argv)
    try:
        print(describe(provision_from_env(load_config(args.config))))
    except OrchRMError as exc:
        print(f"orchrm auth provision: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
