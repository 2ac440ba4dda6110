"""Stopping a server process this project started in a session of its own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen, *, grace_s: float = 20.0) -> None:
    """Stop ``proc`` and every process it started (its process group: start it with
    ``start_new_session=True``): SIGTERM, then SIGKILL after ``grace_s`` seconds; wait for it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
