"""A flow run that is cancelled, crashes or fails while training leaves no training process behind."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from uuid import uuid4

import pytest

from orchrm.config import config_from_dict
from orchrm.errors import TrainingError
from orchrm.ops import stages


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


@pytest.fixture
def sleeping_trainer(tmp_path, monkeypatch):
    """``train_stage`` starting, through its own code path, a trainer that starts a worker (as
    torchrun does) and sleeps; returns the stage's arguments and the worker's pid file."""
    worker_pid = tmp_path / "worker.pid"
    script = (
        "import subprocess, sys, time; "
        "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        f"open({str(worker_pid)!r}, 'w').write(str(w.pid)); time.sleep(600)"
    )
    monkeypatch.setattr(stages, "train_command", lambda config, **_: [sys.executable, "-c", script])
    monkeypatch.setattr(stages, "_stage_run", lambda config, name, parent: contextlib.nullcontext("run"))
    config = config_from_dict({"data_dir": str(tmp_path / "data")})
    pairs = stages.Pairs(tmp_path / "pairs.parquet", 0, {}, "digest", "run")
    return {"pairs": pairs, "config": config, "out_dir": str(tmp_path / "run"), "parent_run_id": "parent"}, worker_pid


def _wait_for(path: Path) -> int:
    """The pid in ``path`` once the trainer has written it (it fails the test after two minutes)."""
    deadline = time.monotonic() + 120
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, "the fake trainer never started its worker"
        time.sleep(0.05)
    return int(path.read_text())


def test_the_cancellation_hook_stops_the_trainer_and_its_workers(sleeping_trainer):
    from prefect.client.schemas.objects import FlowRun
    from prefect.states import Cancelling

    from flows.pipeline import STOP_TRAINERS, run_stages

    kwargs, worker_pid = sleeping_trainer
    raised: list[BaseException] = []

    def train() -> None:
        try:
            stages.train_stage(kwargs.pop("pairs"), **kwargs)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=train)
    thread.start()
    worker = _wait_for(worker_pid)
    (trainer,) = stages.running_trainers()
    assert _alive(trainer) and _alive(worker)
    # what Prefect calls when the flow run is cancelled (the same hook on crash and failure)
    assert STOP_TRAINERS["on_cancellation"] == STOP_TRAINERS["on_crashed"] == STOP_TRAINERS["on_failure"]
    for hook in STOP_TRAINERS["on_cancellation"]:
        hook(run_stages, FlowRun(id=uuid4(), flow_id=uuid4(), name="cancelled-run"), Cancelling())
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], TrainingError) and "killed by signal 9" in str(raised[0])
    assert not _alive(trainer) and not _alive(worker)
    assert stages.running_trainers() == ()


def test_a_flow_that_fails_while_training_runs_leaves_no_trainer(sleeping_trainer):
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE

    from flows.pipeline import STOP_TRAINERS

    kwargs, worker_pid = sleeping_trainer
    train = task(stages.train_stage, name="train", cache_policy=NO_CACHE)
    seen: dict[str, int] = {}

    @flow(**STOP_TRAINERS)
    def fails_while_training():
        future = train.submit(kwargs.pop("pairs"), **kwargs)
        seen["worker"] = _wait_for(worker_pid)
        (seen["trainer"],) = stages.running_trainers()
        raise RuntimeError("the run stops here")
        return future

    state = fails_while_training(return_state=True)
    assert state.is_failed()
    assert not _alive(seen["trainer"]) and not _alive(seen["worker"])
    assert stages.running_trainers() == ()


DRIVER = """
import contextlib, pathlib, sys
import flows.pipeline
from prefect import flow
from orchrm.config import config_from_dict
from orchrm.ops import stages

folder, script = pathlib.Path(sys.argv[1]), sys.argv[2]
stages.train_command = lambda config, **_: [sys.executable, "-c", script]
stages._stage_run = lambda config, name, parent: contextlib.nullcontext("run")
PAIRS = stages.Pairs(folder / "pairs.parquet", 0, {}, "digest", "run")

def train_only(config, *, stages, **_):
    return stages.train.submit(PAIRS, config=config, out_dir=str(folder / "run"), parent_run_id="p").result()

flows.pipeline.pipeline.run_pipeline = train_only

@flow
def deployed():
    return flows.pipeline.run_stages(config_from_dict({"data_dir": str(folder / "data")}))

deployed()
"""


def test_a_flow_run_terminated_by_a_signal_leaves_no_trainer(tmp_path):
    """SIGTERM, what a worker sends a flow run it cancels, to a process whose deployed flow runs
    ``orchrm-stages`` (its pipeline cut down to the training task) while it trains: the run stops
    its trainer on the way out."""
    import signal
    import subprocess

    from prefect.settings import get_current_settings

    worker_pid = tmp_path / "worker.pid"
    script = (
        "import subprocess, sys, time; "
        "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        f"open({str(worker_pid)!r}, 'w').write(str(w.pid)); time.sleep(600)"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "PREFECT_API_URL": str(get_current_settings().api.url)}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path), script], cwd=root, env=env)
    trainer = None
    try:
        worker = _wait_for(worker_pid)
        trainer = os.getpgid(worker)  # the trainer leads the worker's process group
        assert _alive(trainer) and trainer != driver.pid
        driver.send_signal(signal.SIGTERM)
        driver.wait(timeout=120)
        assert not _alive(trainer) and not _alive(worker)
    finally:
        if driver.poll() is None:
            driver.kill()
        if trainer is not None:  # whatever the test found, it leaves nothing running
            with contextlib.suppress(ProcessLookupError):
                os.killpg(trainer, signal.SIGKILL)
