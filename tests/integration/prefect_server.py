"""A real Prefect server on PostgreSQL for the integration tests: a fresh database, background
processes that are always stopped, bounded waits for the server and for flow runs.

Needs PostgreSQL at 127.0.0.1:5432 (user postgres, trust auth, the pg_trgm extension available);
a test is skipped when it cannot be reached, except under ``CI=true``, where it fails: CI's
machines run PostgreSQL, so a skip there would hide a broken setup.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PG_HOST, PG_PORT, PG_USER = "127.0.0.1", 5432, "postgres"
BIN = Path(sys.executable).parent
#: the states a flow run ends in
FINAL_STATES = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


def _unavailable(reason: str) -> None:
    """Skip (a developer's machine without PostgreSQL), or fail under ``CI=true``."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI=true: the PostgreSQL-backed tests must run (start PostgreSQL, or run without CI=true)")
    pytest.skip(reason)


def _reachable(host: str, port: int) -> bool:
    with closing(socket.socket()) as s:
        s.settimeout(2)
        return s.connect_ex((host, port)) == 0


async def _admin(sql: str, database: str = "postgres") -> list:
    import asyncpg

    conn = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database=database, timeout=10)
    try:
        return await conn.fetch(sql)
    finally:
        await conn.close()


@contextmanager
def postgres_database(prefix: str = "orchrm_prefect") -> Iterator[str]:
    """A fresh PostgreSQL database (with pg_trgm) as a ``postgresql+asyncpg`` URL, dropped afterwards."""
    if not _reachable(PG_HOST, PG_PORT):
        _unavailable(f"PostgreSQL is not reachable at {PG_HOST}:{PG_PORT}")
    available = asyncio.run(_admin("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'"))
    if not available:
        _unavailable("PostgreSQL lacks the pg_trgm extension that Prefect's server needs")
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    try:
        asyncio.run(_admin("CREATE EXTENSION IF NOT EXISTS pg_trgm", database=name))
        yield f"postgresql+asyncpg://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@contextmanager
def _process(cmd: list[str], *, env: dict, log: Path, cwd: Path = ROOT):
    """A background process in its own session; stopped (TERM, then KILL) on exit."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield proc
        finally:
            for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
                if proc.poll() is not None:
                    break
                os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout=wait)
                except subprocess.TimeoutExpired:
                    continue


def _wait_healthy(api: str, server: subprocess.Popen, log: Path, *, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"prefect server exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"prefect server not healthy after {timeout:g} s:\n{log.read_text()[-3000:]}")


def _prefect(*args: str, env: dict) -> str:
    done = subprocess.run([str(BIN / "prefect"), *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"prefect {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


def _wait_for_flow_run(api: str, flow_run_id: str, *, timeout: float, logs: tuple[Path, ...]) -> dict:
    deadline = time.monotonic() + timeout
    state: dict = {}
    while time.monotonic() < deadline:
        state = httpx.get(f"{api}/flow_runs/{flow_run_id}", timeout=10).json().get("state") or {}
        if state.get("type") in FINAL_STATES:
            return state
        time.sleep(3)
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs)
    pytest.fail(f"flow run {flow_run_id} not finished after {timeout:g} s (state {state.get('type')}):\n{tails}")
