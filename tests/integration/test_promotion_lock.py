"""Two overlapping promotions leave one champion, never a worse one (issue 25 §3: the lock).

Two candidates, both evaluated against the same champion v1 and both better than it, are promoted
at once, from two threads and from two processes, on a real SQLite store and on a real
PostgreSQL-backed MLflow store. To make the overlap certain rather than likely, each promotion is
held on purpose right after its gate check until the other one has checked too (or a few seconds
passed): without the lock both pass the check and both move the alias, which the test without the
lock shows; with it the second check waits for the first promotion to finish, finds the champion
moved and is rejected.

The PostgreSQL tests need PostgreSQL at 127.0.0.1:5432 (user postgres, trust auth) and a driver
for MLflow's store (psycopg, the driver SQLAlchemy 2.1 reads ``postgresql://`` with); they skip without them, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import multiprocessing
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import httpx
import mlflow
import pytest

from orchrm.config import PipelineConfig
from orchrm.errors import PromotionRejected, RegistryError
from orchrm.ops import locks, registry, tracking
from tests.integration import test_promotion
from tests.integration.mlflow_server import free_port, running_mlflow
from tests.integration.prefect_server import (
    BIN,
    PG_HOST,
    PG_PORT,
    PG_USER,
    _admin,
    _process,
    _reachable,
    _unavailable,
    _wait_healthy,
)
from tests.integration.test_promotion import aliases, candidate, metrics

pytestmark = pytest.mark.integration

#: test_promotion's fixtures: a SQLite store per test, one tiny saved model per module
config = test_promotion.config
model_file = test_promotion.model_file

#: how long a promotion held after its check waits for the other one to check too (seconds): with
#: the lock the other one never can, so this bounds the wait; without it the other arrives at once
OVERLAP_WAIT_S = 5.0


# --------------------------------------------------------------------------------------------
# the overlap, forced on purpose


def hold_after_check(checked: threading.Barrier | multiprocessing.synchronize.Barrier) -> None:
    """Fault injection on purpose: wrap :func:`registry.check_promotion` so that each promotion,
    once checked, waits for the other promotion to be checked too (``checked``, two parties)
    before moving any alias. A broken or timed-out barrier lets it go on: the lock kept the other
    one out."""
    real = registry.check_promotion

    def checked_then_held(*args, **kwargs):
        result = real(*args, **kwargs)
        with contextlib.suppress(threading.BrokenBarrierError):
            checked.wait(OVERLAP_WAIT_S)
        return result

    registry.check_promotion = checked_then_held


def outcome(version: int, config: PipelineConfig) -> str:
    """``"promoted"``, or ``"rejected: <message>"``."""
    try:
        registry.promote(version, config=config)
    except PromotionRejected as exc:
        return f"rejected: {exc}"
    return "promoted"


def race_in_threads(config: PipelineConfig, versions: tuple[int, int]) -> dict[int, str]:
    """Promote both ``versions`` from two threads at once; their outcomes by version."""
    start, checked = threading.Barrier(2), threading.Barrier(2)
    results: dict[int, str] = {}

    def run(version: int) -> None:
        start.wait()
        results[version] = outcome(version, config)

    threads = [threading.Thread(target=run, args=(v,)) for v in versions]
    original = registry.check_promotion
    hold_after_check(checked)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        registry.check_promotion = original
    return results


def _promote_in_child(config_json: dict, version: int, start, checked, out) -> None:
    """A child process's promotion (spawned: its own interpreter, its own MLflow client)."""
    hold_after_check(checked)
    config = PipelineConfig.model_validate(config_json)
    start.wait()
    out.put((version, outcome(version, config)))


def race_in_processes(config: PipelineConfig, versions: tuple[int, int]) -> dict[int, str]:
    """Promote both ``versions`` from two spawned processes at once; their outcomes by version."""
    ctx = multiprocessing.get_context("spawn")
    start, checked, out = ctx.Barrier(2), ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_promote_in_child, args=(config.model_dump(mode="json"), v, start, checked, out)) for v in versions]
    for p in procs:
        p.start()
    try:
        results = dict(out.get(timeout=300) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    return results


def two_rivals(config: PipelineConfig, model_file: Path) -> tuple[int, int, int]:
    """Champion v1 (0.70), then two candidates both evaluated against it: 0.90 and 0.80."""
    first = candidate(config, model_file, metrics(rm=0.7))
    registry.promote(first, config=config)
    better = candidate(config, model_file, metrics(rm=0.9), champion=metrics(rm=0.7))
    good = candidate(config, model_file, metrics(rm=0.8), champion=metrics(rm=0.7))
    return first, better, good


def assert_one_champion(config: PipelineConfig, results: dict[int, str], first: int) -> None:
    """Exactly one rival won; the other was told the champion moved; ``previous`` is v1, the
    champion the winner actually replaced."""
    won = [v for v, r in results.items() if r == "promoted"]
    lost = [v for v, r in results.items() if r != "promoted"]
    assert len(won) == 1 and len(lost) == 1, results
    assert f"the champion is now v{won[0]} but this candidate was evaluated against v{first}" in results[lost[0]]
    assert aliases(config)["champion"] == won[0] and aliases(config)["previous"] == first


# --------------------------------------------------------------------------------------------
# SQLite store


def test_two_overlapping_promotions_in_threads_leave_one_champion(config, model_file):
    first, better, good = two_rivals(config, model_file)
    assert_one_champion(config, race_in_threads(config, (better, good)), first)


def test_two_overlapping_promotions_in_processes_leave_one_champion(config, model_file):
    first, better, good = two_rivals(config, model_file)
    assert_one_champion(config, race_in_processes(config, (better, good)), first)


def test_without_the_lock_both_overlapping_promotions_win_and_a_worse_model_ends_champion(config, model_file, monkeypatch):
    """The race the lock closes, shown with the lock removed on purpose: both promotions pass the
    check before either moves the alias; the worse one, moving last, replaces the better one it
    was never compared with."""
    first, better, good = two_rivals(config, model_file)
    monkeypatch.setattr(registry, "promotion_lock", lambda config: contextlib.nullcontext("no lock (removed by the test)"))
    checked, better_done = threading.Barrier(2), threading.Event()
    real = registry.check_promotion

    def checked_then_ordered(version, **kwargs):
        result = real(version, **kwargs)
        checked.wait(OVERLAP_WAIT_S)  # both checked: no BrokenBarrierError without the lock
        if version == good:
            better_done.wait(OVERLAP_WAIT_S)  # the worse one moves last
        return result

    monkeypatch.setattr(registry, "check_promotion", checked_then_ordered)
    results: dict[int, str] = {}

    def run(version: int) -> None:
        results[version] = outcome(version, config)
        if version == better:
            better_done.set()

    threads = [threading.Thread(target=run, args=(v,)) for v in (better, good)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {better: "promoted", good: "promoted"}
    assert aliases(config)["champion"] == good and aliases(config)["previous"] == better  # 0.80 over 0.90


def test_a_second_holder_waits_a_bounded_time_and_is_told_why(config):
    taken = r"another promotion or rollback has held the lock .*\.lock for over 0 s: wait for it to finish"
    with locks.promotion_lock(config), pytest.raises(RegistryError, match=taken), locks.promotion_lock(config, timeout_s=0.2):
        pass
    with locks.promotion_lock(config, timeout_s=0.2):  # released: had at once
        pass


def test_a_rollback_takes_the_promotion_lock(config, model_file, monkeypatch):
    first, better, _ = two_rivals(config, model_file)
    registry.promote(better, config=config)
    monkeypatch.setattr(locks, "LOCK_TIMEOUT_S", 0.2)
    errors: list[Exception] = []

    def roll_back() -> None:
        try:
            registry.rollback(config, reason="test")
        except RegistryError as exc:
            errors.append(exc)

    with locks.promotion_lock(config, timeout_s=5):  # a promotion in progress elsewhere
        t = threading.Thread(target=roll_back)
        t.start()
        t.join()
    assert len(errors) == 1 and "another promotion or rollback has held the lock" in str(errors[0])
    assert registry.champion_version(config) == better and aliases(config)["previous"] == first
    assert registry.rollback(config, reason="test").restored == first  # the lock free again


def test_the_sqlite_lock_lives_beside_the_store(config):
    with locks.promotion_lock(config) as held:
        db = Path(tracking.tracking_uri(config).removeprefix("sqlite:///"))
        assert held == f"file lock {db.with_name(f'{db.name}.orchrm-promotion-{config.registry.model_name}.lock')}"


@pytest.mark.parametrize("store", ["{tmp}/mlruns", "file://{tmp}/mlruns"])
def test_a_file_store_is_locked_inside_its_folder(store, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = PipelineConfig.model_validate({"registry": {"tracking_uri": store.format(tmp=tmp_path)}})
    with locks.promotion_lock(config) as held:
        assert held == f"file lock {tmp_path / 'mlruns' / '.orchrm-promotion-orchrm-reward.lock'}"


# --------------------------------------------------------------------------------------------
# PostgreSQL-backed MLflow store


@pytest.fixture
def pg_config(tmp_path, monkeypatch) -> PipelineConfig:
    """A config on a fresh PostgreSQL database as the MLflow store (dropped afterwards); the
    artifacts under ``tmp_path`` (a database store keeps them relative to the working folder)."""
    if not _reachable(PG_HOST, PG_PORT):
        _unavailable(f"PostgreSQL is not reachable at {PG_HOST}:{PG_PORT}")
    if importlib.util.find_spec("psycopg") is None:
        _unavailable("psycopg is not installed: MLflow's PostgreSQL store needs it (pip install 'psycopg[binary]')")
    import asyncio

    name = f"orchrm_lock_{uuid.uuid4().hex[:8]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    before = mlflow.get_tracking_uri()
    config = PipelineConfig.model_validate({"data_dir": str(tmp_path / "data"),
                                            "registry": {"tracking_uri": f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"}})
    tracking.configure(config)
    yield config
    mlflow.set_tracking_uri(before)
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_on_postgresql_the_lock_is_an_advisory_lock_of_the_store(pg_config):
    with locks.promotion_lock(pg_config) as held:
        assert held.startswith("PostgreSQL advisory lock") and "orchrm-promotion-" in held
        taken = r"held the PostgreSQL advisory lock .* for over 0 s"
        with pytest.raises(RegistryError, match=taken), locks.promotion_lock(pg_config, timeout_s=0.2):
            pass


def test_two_overlapping_promotions_on_postgresql_leave_one_champion(pg_config, model_file):
    first, better, good = two_rivals(pg_config, model_file)
    assert_one_champion(pg_config, race_in_threads(pg_config, (better, good)), first)
    # and from two processes, on the next pair of rivals
    third = candidate(pg_config, model_file, metrics(rm=0.95), champion=metrics(rm=0.9))
    fourth = candidate(pg_config, model_file, metrics(rm=0.97), champion=metrics(rm=0.9))
    champion = registry.champion_version(pg_config)
    results = race_in_processes(pg_config, (third, fourth))
    assert_one_champion(pg_config, results, champion)


# --------------------------------------------------------------------------------------------
# a tracking server: the Prefect global concurrency limit


def _prefect_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_TRACKING"))}
    return env | {"PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                  "PREFECT_SERVER_UI_ENABLED": "false"}


@pytest.fixture
def prefect_api(tmp_path, monkeypatch) -> str:
    """A real Prefect server (SQLite under ``tmp_path``) on a free port; its API URL exported as
    ``PREFECT_API_URL`` for the processes this test spawns; always stopped."""
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    log = tmp_path / "prefect-server.log"
    cmd = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with _process(cmd, env=_prefect_env(tmp_path), log=log) as server:
        _wait_healthy(api, server, log)
        monkeypatch.setenv("PREFECT_API_URL", api)
        yield api


@pytest.fixture
def server_config(tmp_path, monkeypatch) -> PipelineConfig:
    """A config whose store is a real ``mlflow server`` (SQLite and artifacts under ``tmp_path``)."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    before = mlflow.get_tracking_uri()
    args = ["server", "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}", "--artifacts-destination", str(tmp_path / "artifacts")]
    with running_mlflow(args, tmp_path / "mlflow-server.log") as url:
        config = PipelineConfig.model_validate({"data_dir": str(tmp_path / "data"), "registry": {"tracking_uri": url}})
        tracking.configure(config)
        yield config
    mlflow.set_tracking_uri(before)


@pytest.mark.slow
def test_on_a_tracking_server_with_prefect_two_overlapping_promotions_leave_one_champion(prefect_api, server_config, model_file):
    first, better, good = two_rivals(server_config, model_file)
    assert_one_champion(server_config, race_in_processes(server_config, (better, good)), first)
    # the limit the first promotion created: one slot, free again
    name = locks.lock_name(server_config.registry.model_name)
    limit = httpx.get(f"{prefect_api}/v2/concurrency_limits/{name}", timeout=10).json()
    assert (limit["limit"], limit["active"], limit["active_slots"]) == (1, True, 0)


def test_an_unreachable_prefect_api_fails_the_promotion_lock_with_the_fix(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    env = _prefect_env(tmp_path) | {"PREFECT_API_URL": f"http://127.0.0.1:{free_port()}/api", "PREFECT_CLIENT_MAX_RETRIES": "0"}
    take = ("from orchrm.config import PipelineConfig\nfrom orchrm.ops.locks import promotion_lock\n"
            f"with promotion_lock(PipelineConfig.model_validate({{'registry': {{'tracking_uri': {url!r}}}}})):\n    pass\n")
    done = subprocess.run([sys.executable, "-c", take], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "RegistryError: the Prefect API at" in done.stderr and "start the server, or unset PREFECT_API_URL" in done.stderr


def test_on_a_tracking_server_without_prefect_a_warning_says_only_the_read_back_guards(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    config = PipelineConfig.model_validate({"registry": {"tracking_uri": f"http://127.0.0.1:{free_port()}"}})
    with caplog.at_level(logging.WARNING, logger="orchrm.ops.locks"), locks.promotion_lock(config) as held:
        assert held == "no lock (read-back only)"
    assert "nothing serialises promotions by other runs; the read-back after each alias move reports" in caplog.text
