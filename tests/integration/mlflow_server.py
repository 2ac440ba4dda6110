"""A real ``mlflow server`` / ``mlflow ui`` process on a store, on a free loopback port, for the
tests that read what the pipeline logged through the REST API the MLflow UI reads."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from orchrm.util.processes import stop_group


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_mlflow(args: list[str], log_path: Path, *, ready_path: str = "/health", env: dict[str, str] | None = None,
                   wait_s: float = 240) -> Iterator[str]:
    """``mlflow <args> --host 127.0.0.1 --port <free> --workers 1`` (``server``/``ui`` with a
    ``--backend-store-uri``, or ``models serve -m ...``); yields its base URL once ``ready_path``
    answers 200, and always stops the process group. ``env``: extra variables (the tracking URI
    of the store is otherwise unset, so nothing is read from the test's own environment)."""
    port = free_port()
    full_env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    full_env.pop("MLFLOW_TRACKING_URI", None)
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "mlflow", *args, "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + wait_s
            while True:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                try:
                    if httpx.get(f"{url}{ready_path}", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"mlflow {args[0]} did not answer {ready_path}: " + log_path.read_text()[-3000:]
                time.sleep(0.5)
            yield url
        finally:
            stop_group(proc)


def api(url: str, endpoint: str, /, **params) -> dict:
    """GET ``/api/2.0/mlflow/<endpoint>?<params>``; asserts a 200 answer."""
    answer = httpx.get(f"{url}/api/2.0/mlflow/{endpoint}", params=params, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()
