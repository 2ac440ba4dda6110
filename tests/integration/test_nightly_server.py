"""Night after night on a real Prefect server: the nightly retrain of a user's own traces.

One Prefect server on PostgreSQL, prefect.yaml deployed with ``prefect deploy --all``, a process
worker in a working directory of its own, and one MLflow store (SQLite, shared by path) serve the
whole module. A synthetic support desk (orchrm.execution.support_desk: the plan that resolves a
ticket depends on its category and urgency) writes its traces to the traces folder, and the tests
are the nights that follow, in order, on that one store:

1. both schedules (nightly, weekly) are on their deployments and active;
2. night 1: the desk's first file; the run is promoted and the champion ranks unseen tickets' plans
   the way the desk's rule does;
3. night 2: no new file; the run says so and registers nothing;
4. a run that crashes right after registering (injected); no alias moves;
5. night 3: a new valid file, a malformed one and one older than the retention window; the
   malformed file goes to ``rejected/``, only the window's files are read, the crashed run's
   among them (the pipeline carries on), and a new version is registered;
6. two runs at once on the same store: one champion, one version per run;
7. ``orchrm rollback`` puts the previous champion back.

Needs PostgreSQL (see tests/integration/prefect_server.py: skipped without it, failed under
``CI=true``). Every wait is bounded, every process stopped and the database dropped.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from orchrm.config import PipelineConfig, load_config
from orchrm.data.tables import read_table, write_table
from orchrm.execution.support_desk import Ticket, make_tickets, traces_of, true_pair_accuracy
from tests.integration.mlflow_server import free_port
from tests.integration.prefect_server import (
    BIN,
    ROOT,
    _prefect,
    _process,
    _wait_for_flow_run,
    _wait_healthy,
    postgres_database,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: a small model that learns the desk's rule in seconds (tests/integration/test_replay_pipeline.py's
#: model; measured on 160 tickets: true pair accuracy 0.69 on unseen tickets, chance 0.5). Up to 30
#: epochs, patience 8: with 15 / 4 it once stopped after 12 epochs at held-out pairwise accuracy
#: 0.58, under the 0.6 gate (training is not bit-for-bit reproducible across runs)
MODEL = {"encoder": "scratch", "hidden_dim": 64, "num_layers": 1, "num_heads": 2, "max_length": 128, "vocab_size": 500}
TRAIN = {"batch_size": 32, "lr": 3.0e-3, "epochs": 30, "patience": 8}
#: the retention window of the test's nightly: the files modified in the last WINDOW_DAYS days,
#: at most the MAX_FILES newest of them; the rest are never read
WINDOW_DAYS, MAX_FILES = 7, 3
#: the desk's first night (tickets, seed) and each later night's file (seed 13: test_replay_pipeline's)
NIGHT_1, LATER_TICKETS = (160, 13), 64
#: how long one nightly flow run may take, start-up of its process included
RUN_TIMEOUT_S = 900


@dataclass(frozen=True)
class Nights:
    """What the nights share: the server's API, the nightly's config, its folders and the logs."""

    api: str
    config_path: Path
    config: PipelineConfig
    traces: Path
    logs: tuple[Path, ...]

    @property
    def model_name(self) -> str:
        return self.config.registry.model_name


def nightly_config(base: Path, traces: Path) -> Path:
    """configs/own_traces.yaml with a small model, a retention window and a quick evaluation.

    ``beat_champion`` is off: every candidate that passes the absolute gates is promoted, so that
    the later nights' promotions (and with them ``previous``, which rollback needs) do not hinge on
    a model beating a champion trained on nearly the same tickets (that gate has tests of its own).
    The scoring-latency gate is loosened: a machine busy with other work must not fail it. The
    pairwise gate is 0.55 (above chance, 0.5): this small model's held-out accuracy on one night
    has measured 0.58 to 0.70 from run to run, and what the model learned is checked on unseen
    tickets by night 1 itself.
    """
    data = yaml.safe_load((ROOT / "configs" / "own_traces.yaml").read_text())
    data["data_dir"] = str(base / "data")
    data["model"], data["train"] = MODEL, TRAIN
    data["evaluate"] = {**data["evaluate"], "bootstrap": 100, "gates": {**data["evaluate"]["gates"], "beat_champion": False, "max_scoring_latency_ms": 10_000,
                                                                                "min_pairwise_accuracy": 0.55}}
    data["pipeline"] = {**data["pipeline"], "traces_dir": str(traces), "window_days": WINDOW_DAYS, "max_files": MAX_FILES}
    path = base / "nightly.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def write_desk(folder: Path, name: str, n_tickets: int, seed: int, *, days_old: float = 0) -> list[Ticket]:
    """The desk's traces of ``n_tickets`` tickets as ``folder/name`` (written, then renamed into
    place, as a user's system should); ``days_old`` sets its modification time back."""
    tickets = make_tickets(n_tickets, seed=seed)
    partial = write_table(traces_of(tickets, seed=seed), folder / f".{name}")
    path = partial.rename(folder / name)
    if days_old:
        then = time.time() - days_old * 86400
        os.utime(path, (then, then))
    return tickets


@pytest.fixture(scope="module")
def nights(tmp_path_factory) -> Iterator[Nights]:
    """A Prefect server on a fresh PostgreSQL database, the ``orchrm`` process work pool,
    prefect.yaml deployed (``--all``) and a worker started in a folder of its own."""
    base = tmp_path_factory.mktemp("nights")
    traces, worker_dir = base / "incoming", base / "worker"
    traces.mkdir()
    worker_dir.mkdir()
    config_path = nightly_config(base, traces)
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    with postgres_database("orchrm_nights") as database:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_TRACKING"))}
        env |= {
            "PREFECT_HOME": str(base / "prefect-home"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_SERVER_UI_ENABLED": "false",
            "PREFECT_API_DATABASE_CONNECTION_URL": database,
        }
        client_env = {k: v for k, v in env.items() if k != "PREFECT_API_DATABASE_CONNECTION_URL"}
        client_env |= {"PREFECT_API_URL": api, "PREFECT_WORKER_QUERY_SECONDS": "2"}
        server_log, worker_log = base / "server.log", base / "worker.log"
        server_cmd = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
        with _process(server_cmd, env=env, log=server_log) as server:
            _wait_healthy(api, server, server_log)
            _prefect("work-pool", "create", "orchrm", "--type", "process", env=client_env)
            _prefect("--no-prompt", "deploy", "--all", "--prefect-file", str(ROOT / "prefect.yaml"), env=client_env)
            worker_cmd = [str(BIN / "prefect"), "worker", "start", "--pool", "orchrm"]
            with _process(worker_cmd, env=client_env, log=worker_log, cwd=worker_dir):
                yield Nights(api=api, config_path=config_path, config=load_config(config_path), traces=traces,
                             logs=(worker_log, server_log))


def deployment(nights: Nights, name: str) -> dict:
    answer = httpx.get(f"{nights.api}/deployments/name/{name}", timeout=10)
    assert answer.status_code == 200, f"no deployment {name}: {answer.text}"
    return answer.json()


def run_nightly(nights: Nights) -> dict:
    """One flow run of the ``nightly-retrain`` deployment on the test's config and traces folder,
    through the REST API; returns its final state."""
    nightly = deployment(nights, "orchrm-nightly/nightly-retrain")
    parameters = {"config": str(nights.config_path), "traces_dir": str(nights.traces)}
    created = httpx.post(f"{nights.api}/deployments/{nightly['id']}/create_flow_run", json={"parameters": parameters}, timeout=30)
    assert created.status_code == 201, created.text
    return _wait_for_flow_run(nights.api, created.json()["id"], timeout=RUN_TIMEOUT_S, logs=nights.logs)


def versions(nights: Nights) -> list[int]:
    from orchrm.ops import tracking

    client = tracking.client(tracking.tracking_uri(nights.config))
    return sorted(int(mv.version) for mv in client.search_model_versions(f"name='{nights.model_name}'"))


def aliases(nights: Nights) -> tuple[int | None, int | None]:
    """(``champion``, ``previous``)."""
    from orchrm.ops import registry

    return registry.champion_version(nights.config), registry.alias_version(nights.config, "previous")


def trained_tickets(nights: Nights, version: int) -> set[str]:
    """The task ids of the artifact table the pipeline run that registered ``version`` trained on
    (its run folder is a tag of its MLflow parent run)."""
    from orchrm.ops import registry, tracking

    client = tracking.client(tracking.tracking_uri(nights.config))
    stage_run = client.get_run(registry.version_info(version, config=nights.config)["run_id"])
    parent = client.get_run(stage_run.data.tags["mlflow.parentRunId"])
    return set(read_table(Path(parent.data.tags["orchrm.run_dir"]) / "artifacts.parquet").task_id)


def tickets_of(desk: tuple[int, int]) -> set[str]:
    """The task ids of the desk file of (tickets, seed)."""
    n_tickets, seed = desk
    return {t.task_id for t in make_tickets(n_tickets, seed=seed)}


def test_deploy_all_puts_both_schedules_active_on_their_deployments(nights):
    """``prefect deploy --all`` of prefect.yaml: the nightly's and the weekly's cron schedules are
    on their deployments, active, as the REST API shows them."""
    expected = {"orchrm-nightly/nightly-retrain": "0 2 * * *", "orchrm-weekly-reevaluation/weekly-reevaluation": "0 4 * * 0"}
    scheduled = {name: deployment(nights, name) for name in expected}
    for name, cron in expected.items():
        schedules = scheduled[name]["schedules"]
        assert [(s["schedule"].get("cron"), s["schedule"].get("timezone"), s["active"]) for s in schedules] == [(cron, "UTC", True)], schedules
    assert deployment(nights, "orchrm-pipeline/on-demand")["schedules"] == []
    # their runs would carry prefect.yaml's own parameters (a folder under the repository): paused
    # once checked, so that none falls due while this module's worker polls the pool
    for d in scheduled.values():
        for s in d["schedules"]:
            paused = httpx.patch(f"{nights.api}/deployments/{d['id']}/schedules/{s['id']}", json={"active": False}, timeout=10)
            assert paused.status_code == 204, paused.text


def test_night_1_trains_a_champion_that_ranks_unseen_tickets_by_the_desks_rule(nights):
    """The desk's first file, then a run of the nightly deployment: Completed, promoted; the
    champion, loaded by its registry alias here, orders the plans of tickets it never saw the way
    the desk's rule does, far above chance (0.5)."""
    from orchrm.ops import tracking
    from orchrm.ops.serving import load_reward_model

    n_tickets, seed = NIGHT_1
    write_desk(nights.traces, "night-1.parquet", n_tickets, seed)
    state = run_nightly(nights)
    assert state["type"] == "COMPLETED" and state["message"].startswith("promoted"), state
    assert versions(nights) == [1] and aliases(nights) == (1, None)

    model = load_reward_model(f"models:/{nights.model_name}@champion", tracking_uri=tracking.tracking_uri(nights.config))
    unseen = make_tickets(80, seed=777)
    accuracy = true_pair_accuracy(lambda q, plans: model.score(q, plans).tolist(), unseen)
    assert accuracy >= 0.6, f"true pair accuracy {accuracy:.3f} on unseen tickets (chance 0.5)"


def test_night_2_without_a_new_file_ends_early_and_registers_nothing(nights):
    """No new file since night 1: Completed, the message says there is nothing new, no version."""
    state = run_nightly(nights)
    assert state["type"] == "COMPLETED" and state["message"].startswith("no-new-traces"), state
    assert "no new traces" in state["message"], state
    assert versions(nights) == [1] and aliases(nights) == (1, None)


def injected_crash(*args, **kwargs):
    raise RuntimeError("injected crash: the process died after registering, before promoting")


def test_an_injected_crash_after_register_moves_no_alias(nights):
    """A run with a new file whose promote stage raises (an injected crash, right after the
    version is registered): the run fails, the version stays registered, ``champion`` and
    ``previous`` stay where they were. Night 3 (next test) carries on from here."""
    from orchrm.ops import registry, tracking
    from orchrm.ops.pipeline import Stages, run_pipeline

    write_desk(nights.traces, "crash-night.parquet", LATER_TICKETS, 21)
    with pytest.raises(RuntimeError, match="injected crash"):
        run_pipeline(nights.config, traces_dir=nights.traces, stages=Stages(promote=injected_crash))
    assert versions(nights) == [1, 2]
    assert aliases(nights) == (1, None)
    client = tracking.client(tracking.tracking_uri(nights.config))
    stage_run = client.get_run(registry.version_info(2, config=nights.config)["run_id"])
    assert client.get_run(stage_run.data.tags["mlflow.parentRunId"]).info.status == "FAILED"


def test_night_3_rejects_a_malformed_file_honours_the_window_and_carries_on_after_the_crash(nights):
    """A new valid file, a malformed one and one modified before the retention window, then a run
    of the nightly deployment: the malformed file is moved to ``rejected/`` beside the folder with
    its report; the run reads the files of the window only (not the old one, nor night 1's, the
    fourth newest); it trains on the crashed run's file too and registers a new version, and the
    crashed version never takes an alias."""
    write_desk(nights.traces, "night-3.parquet", LATER_TICKETS, 22)
    old = write_desk(nights.traces, "last-month.parquet", LATER_TICKETS, 31, days_old=4 * WINDOW_DAYS)
    (nights.traces / "broken.jsonl").write_text('{"task_id": "t"}\nnot json\n')

    state = run_nightly(nights)
    assert state["type"] == "COMPLETED", state
    assert state["message"].startswith(("promoted", "rejected")), state
    assert versions(nights) == [1, 2, 3]
    assert aliases(nights) in ((3, 1), (1, None)), aliases(nights)

    rejected = nights.traces.parent / "rejected"
    assert not (nights.traces / "broken.jsonl").exists()
    assert (rejected / "broken.jsonl").is_file()
    report = json.loads((rejected / "broken.jsonl.rejected.json").read_text())
    assert report["file"] == "broken.jsonl" and report["error"], report
    assert (nights.traces / "last-month.parquet").is_file() and not (rejected / "last-month.parquet").exists()

    # the window: the three newest files inside WINDOW_DAYS are broken.jsonl, night-3 and crash-night
    trained = trained_tickets(nights, 3)
    assert not trained & {t.task_id for t in old}, "a file older than window_days was read"
    assert not trained & tickets_of(NIGHT_1), "a file beyond the max_files newest was read"
    assert tickets_of((LATER_TICKETS, 21)) | tickets_of((LATER_TICKETS, 22)) == trained


def test_two_overlapping_runs_leave_one_champion_and_one_version_per_run(nights):
    """Two pipeline runs at once (two threads, each with its own training process) on the same
    store and folder: each registers exactly one version, and ``champion`` / ``previous`` end on
    those two versions, one each."""
    from orchrm.ops import tracking
    from orchrm.ops.pipeline import PipelineResult, run_pipeline

    write_desk(nights.traces, "night-4.parquet", LATER_TICKETS, 23)
    before = versions(nights)
    results: dict[str, PipelineResult | Exception] = {}

    def run(name: str) -> None:
        try:
            results[name] = run_pipeline(nights.config, traces_dir=nights.traces)
        except Exception as exc:  # reported below with the other run's outcome
            results[name] = exc

    threads = [threading.Thread(target=run, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=RUN_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "an overlapping run did not finish"
    assert all(getattr(r, "status", None) == "promoted" for r in results.values()), results

    client = tracking.client(tracking.tracking_uri(nights.config))
    parents = [client.get_run(r.run_id).info for r in results.values()]
    assert max(p.start_time for p in parents) < min(p.end_time for p in parents), "the two runs did not overlap"
    ran = set()
    for r in results.values():
        registered = client.search_model_versions(f"name='{nights.model_name}' and run_id='{r.evaluation.run_id}'")
        assert [int(mv.version) for mv in registered] == [r.registered.version], registered
        ran.add(r.registered.version)
    assert versions(nights) == [*before, *sorted(ran)] and len(ran) == 2
    champion, previous = aliases(nights)
    # needs the two promotions serialised (the promotion lock): the one promoted second then replaces
    # the first, which holds previous; unserialised, both may read the same old champion as the one
    # they replace (previous then points at it), or one's read-back of its alias sees the other's
    assert {champion, previous} == ran, (champion, previous, ran)


def test_rollback_restores_the_previous_champion(nights):
    """``orchrm rollback``: ``champion`` goes back to the version ``previous`` held, which is
    removed; both versions record the reason."""
    from orchrm.ops import registry

    champion, previous = aliases(nights)
    assert previous is not None and previous != champion
    done = subprocess.run([str(BIN / "orchrm"), "rollback", "--config", str(nights.config_path), "--reason", "night 4 misroutes refunds"],
                          env={k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING")}, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert f"from version {champion} to version {previous}" in done.stdout, done.stdout
    assert aliases(nights) == (previous, None)
    tags = {v: registry.version_info(v, config=nights.config)["tags"] for v in (champion, previous)}
    assert tags[champion]["rollback.role"] == "demoted" and tags[previous]["rollback.role"] == "restored"
    assert tags[previous]["rollback.reason"] == "night 4 misroutes refunds"
