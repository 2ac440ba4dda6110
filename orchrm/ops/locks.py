"""The promotion lock: one critical section around "check the champion, then move the aliases".

Two runs promoting at once could both find ``champion`` still at the version they were evaluated
against, then both move it; the second would silently replace the first, or a worse model the
better one. :func:`promotion_lock` serialises every :func:`orchrm.ops.registry.promote` and
:func:`orchrm.ops.registry.rollback` of one registered model with the real lock the store allows:

- a SQLite (or file) store: an OS file lock (``flock``) beside the store, which every process of
  the machine that opens that store shares;
- a PostgreSQL store: a session-level advisory lock (``pg_advisory_lock``) on the store's own
  database, which every machine that writes to it shares;
- a tracking server (``http(s)://``): a Prefect global concurrency limit of one slot when a Prefect
  API is configured (``PREFECT_API_URL``, as in a deployment's flow run), shared by every run of that
  Prefect server; without one nothing serialises the promotions, and what guards them is the
  read-back after each alias move (a move by another run in between is reported, never hidden):
  a warning says so.

The store's own lock comes first where there is one: it holds for everyone who writes to that
store, whether through Prefect or not. Every wait is bounded (:data:`LOCK_TIMEOUT_S`) and ends in
:class:`orchrm.errors.RegistryError` naming what held the lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from orchrm.errors import RegistryError
from orchrm.ops.tracking import tracking_uri

if TYPE_CHECKING:  # pragma: no cover
    from orchrm.config import PipelineConfig

log = logging.getLogger(__name__)

#: how long a promotion waits for another one to finish (seconds)
LOCK_TIMEOUT_S = 120.0
#: how often a waiting promotion retries the file lock (seconds)
FILE_LOCK_POLL_S = 0.05
#: PostgreSQL's SQLSTATE for "canceling statement due to lock timeout"
PG_LOCK_NOT_AVAILABLE = "55P03"


def lock_name(model_name: str) -> str:
    """The name of the promotion lock of ``model_name`` (the Prefect limit's name, the key's seed)."""
    return f"orchrm-promotion-{model_name}"


@contextlib.contextmanager
def promotion_lock(config: PipelineConfig, *, timeout_s: float | None = None) -> Iterator[str]:
    """Hold the promotion lock of ``config.registry.model_name`` for the block; yields a sentence
    naming the lock held. Raises :class:`RegistryError` when it cannot be had within ``timeout_s``
    (default :data:`LOCK_TIMEOUT_S`; see the module docstring for which lock a store gets)."""
    timeout_s = LOCK_TIMEOUT_S if timeout_s is None else timeout_s
    uri = tracking_uri(config)
    name = lock_name(config.registry.model_name)
    scheme = urllib.parse.urlparse(uri).scheme.split("+", 1)[0] or ("databricks" if uri.startswith("databricks") else "file")
    if scheme == "sqlite":
        lock = _file_lock(_sqlite_lock_path(uri, name), timeout_s=timeout_s)
    elif scheme == "file":
        lock = _file_lock(_file_store_lock_path(uri, name), timeout_s=timeout_s)
    elif scheme == "postgresql":
        lock = _advisory_lock(uri, name, timeout_s=timeout_s)
    elif os.environ.get("PREFECT_API_URL"):
        lock = _prefect_limit(name, timeout_s=timeout_s)
    else:
        lock = _unguarded(uri)
    with lock as held:
        yield held


def _sqlite_lock_path(uri: str, name: str) -> Path:
    db = Path(uri.removeprefix("sqlite:///"))
    if uri == "sqlite://" or str(db) in ("", ":memory:"):
        raise RegistryError(f"{uri!r} is an in-memory SQLite store: registered models do not outlive the process; "
                            "point MLFLOW_TRACKING_URI at a file (sqlite:///path/mlflow.db) or a server")
    return db.with_name(f"{db.name}.{name}.lock")


def _file_store_lock_path(uri: str, name: str) -> Path:
    root = Path(uri.removeprefix("file://") if uri.startswith("file://") else uri)
    return root / f".{name}.lock"


@contextlib.contextmanager
def _file_lock(path: Path, *, timeout_s: float) -> Iterator[str]:
    """An exclusive ``flock`` on ``path`` (created if missing), retried until ``timeout_s``. A lock
    of an open file, not of a process: two threads of one process exclude each other too, and the
    kernel releases it when its holder dies."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    with path.open("a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise RegistryError(
                        f"another promotion or rollback has held the lock {path} for over {timeout_s:.0f} s: wait for it to "
                        "finish and retry (a crashed holder releases it when its process ends)"
                    ) from None
                time.sleep(FILE_LOCK_POLL_S)
        try:
            yield f"file lock {path}"
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def advisory_key(name: str) -> int:
    """A stable signed 64-bit key for ``pg_advisory_lock`` from ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def _sqlstate(exc: BaseException | None) -> str | None:
    return getattr(exc, "pgcode", None) or getattr(exc, "sqlstate", None)


@contextlib.contextmanager
def _advisory_lock(uri: str, name: str, *, timeout_s: float) -> Iterator[str]:
    """A session-level ``pg_advisory_lock`` on the store's database, on a connection of its own
    (autocommit: no transaction stays open while it is held); PostgreSQL's ``lock_timeout`` bounds
    the wait. PostgreSQL releases it when the connection ends, a crashed holder's too."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    key = advisory_key(name)
    engine = sqlalchemy.create_engine(uri, poolclass=NullPool)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sqlalchemy.text("SELECT set_config('lock_timeout', :t, false)"), {"t": f"{int(timeout_s * 1000)}ms"})
            try:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
            except sqlalchemy.exc.DBAPIError as exc:
                if _sqlstate(exc.orig) != PG_LOCK_NOT_AVAILABLE:
                    raise
                raise RegistryError(
                    f"another promotion or rollback has held the PostgreSQL advisory lock {key} ({name}) for over "
                    f"{timeout_s:.0f} s: wait for it to finish and retry (see pg_locks where locktype = 'advisory')"
                ) from None
            try:
                yield f"PostgreSQL advisory lock {key} ({name})"
            finally:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
    finally:
        engine.dispose()


@contextlib.contextmanager
def _prefect_limit(name: str, *, timeout_s: float) -> Iterator[str]:
    """One slot of the Prefect global concurrency limit ``name`` (limit 1), created when missing:
    ``concurrency`` ignores a limit that does not exist unless strict, which would hold nothing."""
    import httpx
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.concurrency.sync import concurrency
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    api = os.environ.get("PREFECT_API_URL")
    try:
        with get_client(sync_client=True) as c:
            try:
                limit = c.read_global_concurrency_limit_by_name(name)
            except ObjectNotFound:
                with contextlib.suppress(ObjectAlreadyExists):  # another run created it first
                    c.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))
            else:
                if limit.limit != 1 or not limit.active:
                    raise RegistryError(
                        f"the Prefect global concurrency limit {name!r} has limit {limit.limit} "
                        f"({'active' if limit.active else 'inactive'}): a promotion lock needs one active slot; "
                        f"`prefect gcl update {name} --limit 1` (and `prefect gcl enable {name}`)"
                    )
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code in (401, 403):
            raise _prefect_refused(api, exc.response.status_code) from None
        raise RegistryError(f"the Prefect API at {api} failed reading the promotion lock {name!r} ({exc}): check the server") from exc
    except httpx.HTTPError as exc:
        raise RegistryError(f"the Prefect API at {api} does not answer ({exc}): start the server, or unset PREFECT_API_URL") from exc
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(concurrency(name, occupy=1, timeout_seconds=timeout_s, strict=True))
        except TimeoutError:
            raise RegistryError(
                f"another promotion or rollback has held the Prefect concurrency limit {name!r} for over {timeout_s:.0f} s: "
                f"wait for it to finish and retry (`prefect gcl inspect {name}`)"
            ) from None
        except httpx.HTTPError as exc:
            raise RegistryError(f"the Prefect API at {api} failed while taking {name!r} ({exc}): check the server, then retry") from exc
        yield f"Prefect global concurrency limit {name!r}"


def _prefect_refused(api: str | None, status: int) -> RegistryError:
    """The error for a Prefect server that refused this client (it runs with
    ``PREFECT_SERVER_API_AUTH_STRING`` and the client sent no or another auth string)."""
    sent = "another auth string" if os.environ.get("PREFECT_API_AUTH_STRING") else "no auth string"
    return RegistryError(
        f"the Prefect API at {api} refused this client (HTTP {status}; it sent {sent}), so the promotion lock cannot "
        "be taken: set PREFECT_API_AUTH_STRING to the server's PREFECT_SERVER_API_AUTH_STRING ('user:password')"
    )


@contextlib.contextmanager
def _unguarded(uri: str) -> Iterator[str]:
    log.warning(
        "no promotion lock for the store %s: nothing serialises promotions by other runs; the read-back after each alias "
        "move reports one that moved it in between. Set PREFECT_API_URL (a Prefect global concurrency limit) or promote "
        "from one deployment with a concurrency limit of 1", uri)
    yield "no lock (read-back only)"
