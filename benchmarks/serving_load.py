"""The reward-model server under load: ``mlflow models serve`` of the champion, driven by concurrent clients.

What an RL loop or a best-of-N orchestrator sees when many callers share one server: a SQLite
registry whose champion is the default model (``configs/default.yaml``'s model section, its
tokenizer fitted on the benchmark's texts, untrained weights: speed does not depend on them), served
by ``mlflow models serve -m models:/orchrm-reward@champion --env-manager local --workers W`` on
loopback (uvicorn, FastAPI). At 1, 4 and 16 concurrent clients (threads, one HTTP connection
each), every request scores the 8 candidate plans of one built-in question
(``{"dataframe_split": {"columns": ["prompt", "action"], ...}}``, the plan texts the base
orchestrator sampled); a level runs for ``--requests`` requests or ``--seconds``, whichever ends
first, after a short warm-up. Recorded per level: requests/s, p50 and p99 latency (client side:
request sent to answer parsed), failed requests (an answer other than 200 with 8 rewards, or a
transport error: must be 0), and the server's worker count. One answer is checked against
``model.score`` of the same rows in this process.

The server's torch runs on ``--threads`` intra-op threads per worker (``OMP_NUM_THREADS``); the
clients run in this process. On a shared machine clients and server compete for the same cores:
read the figures with the load average the results file records.

Run niced on a shared machine::

    nice python -m benchmarks.serving_load              # writes results/serving_load.json
    nice python -m benchmarks.serving_load --workers 2  # two uvicorn workers
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import torch

from benchmarks.common.candidates import Question, questions_with_plans
from benchmarks.common.results_io import RESULTS, ROOT, command_line, provenance, write_json
from benchmarks.registry import registry_with_champion
from orchrm import BradleyTerryModel
from orchrm.config import load_config
from orchrm.model.texts import plan_prompt
from orchrm.util.processes import stop_group

CLIENTS = (1, 4, 16)
CANDIDATES = 8


def request_body(case: Question) -> dict:
    """The ``/invocations`` body that scores the candidates of ``case``: one row per plan."""
    prompt = plan_prompt(case.question)
    return {"dataframe_split": {"columns": ["prompt", "action"], "data": [[prompt, plan] for plan in case.plans[:CANDIDATES]]}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(tracking_uri: str, *, workers: int, threads: int, log_path: Path, wait_s: float = 240) -> Iterator[str]:
    """``mlflow models serve`` of ``models:/orchrm-reward@champion`` on a free loopback port; yields
    its base URL once ``/ping`` answers, and always stops its process group."""
    port = _free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri, "OMP_NUM_THREADS": str(threads),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "-m", "models:/orchrm-reward@champion", "--env-manager", "local",
           "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    url = f"http://127.0.0.1:{port}"
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"mlflow models serve exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}")
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{url}/ping", timeout=2).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"mlflow models serve did not answer /ping in {wait_s:.0f} s:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.5)
            yield url
        finally:
            stop_group(proc)


def _ok(answer: httpx.Response) -> bool:
    if answer.status_code != 200:
        return False
    predictions = answer.json().get("predictions", [])
    return len(predictions) == CANDIDATES and all(isinstance(p.get("reward"), float) for p in predictions)


def load_level(url: str, bodies: list[dict], *, clients: int, requests: int, seconds: float) -> dict:
    """``clients`` threads send ``bodies`` in turn until ``requests`` were sent or ``seconds`` passed;
    requests/s over the level's wall time, latency percentiles over the answered requests."""
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    sent = 0
    deadline = time.perf_counter() + seconds

    def next_index() -> int | None:
        nonlocal sent
        with lock:
            if sent >= requests or time.perf_counter() >= deadline:
                return None
            sent += 1
            return sent - 1

    def client() -> None:
        with httpx.Client(timeout=120) as http:
            while (i := next_index()) is not None:
                t = time.perf_counter()
                try:
                    answer = http.post(f"{url}/invocations", json=bodies[i % len(bodies)])
                    ok, why = _ok(answer), f"HTTP {answer.status_code}: {answer.text[:200]}"
                except httpx.HTTPError as exc:
                    ok, why = False, repr(exc)
                elapsed = time.perf_counter() - t
                with lock:
                    (latencies.append(elapsed) if ok else failures.append(why))

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - start
    ms = sorted(1e3 * x for x in latencies)
    return {
        "clients": clients,
        "requests": len(latencies) + len(failures),
        "failed": len(failures),
        "failures": failures[:5],
        "wall_s": wall,
        "requests_per_s": len(latencies) / wall,
        "candidates_per_s": CANDIDATES * len(latencies) / wall,
        "p50_ms": statistics.median(ms) if ms else None,
        "p99_ms": statistics.quantiles(ms, n=100, method="inclusive")[98] if len(ms) > 1 else (ms[0] if ms else None),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=3, help="built-in tasks per domain (default 3)")
    ap.add_argument("--requests", type=int, default=400, help="requests per level at most (default 400)")
    ap.add_argument("--seconds", type=float, default=30.0, help="seconds per level at most (default 30)")
    ap.add_argument("--workers", type=int, default=1, help="uvicorn workers of the server (default 1)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per worker (default 1)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    cases = questions_with_plans(args.tasks, CANDIDATES, args.seed)
    print(f"{len(cases)} questions with {CANDIDATES} plans each", file=sys.stderr)
    model = BradleyTerryModel(config=load_config(ROOT / "configs" / "default.yaml").model)
    model.fit_tokenizer([c.question for c in cases] + [p for c in cases for p in c.plans])
    model.eval()
    bodies = [request_body(c) for c in cases]
    rows = []
    with tempfile.TemporaryDirectory(prefix="orchrm-serving-load-") as tmp:
        tracking_uri, _ = registry_with_champion(Path(tmp), model)
        with served(tracking_uri, workers=args.workers, threads=args.threads, log_path=Path(tmp) / "serve.log") as url:
            answer = httpx.post(f"{url}/invocations", json=bodies[0], timeout=120)
            answer.raise_for_status()
            served_rewards = torch.tensor([p["reward"] for p in answer.json()["predictions"]], dtype=torch.float32)
            expected = model.score(plan_prompt(cases[0].question), list(cases[0].plans[:CANDIDATES]))
            identical = bool(torch.allclose(served_rewards, expected, atol=1e-5))
            load_level(url, bodies, clients=max(CLIENTS), requests=2 * max(CLIENTS), seconds=args.seconds)  # warm-up, every worker
            for clients in CLIENTS:
                row = load_level(url, bodies, clients=clients, requests=args.requests, seconds=args.seconds)
                rows.append(row)
                print(f"clients {clients:3d}: {row['requests']:4d} requests in {row['wall_s']:5.1f} s, "
                      f"{row['requests_per_s']:6.1f} req/s, p50 {row['p50_ms']:7.1f} ms, p99 {row['p99_ms']:7.1f} ms, "
                      f"failed {row['failed']}", file=sys.stderr)
    failed = sum(r["failed"] for r in rows)
    path = write_json(args.out / "serving_load.json", {
        "benchmark": "the reward-model server under load: mlflow models serve of the champion, concurrent clients",
        **provenance(command_line("benchmarks.serving_load", ap, args), torch=torch.__version__, torch_threads=args.threads),
        "model": f"default ({model.config.encoder} {model.config.hidden_dim}x{model.config.num_layers}, {model.config.architecture})",
        "server": {"command": "mlflow models serve -m models:/orchrm-reward@champion --env-manager local "
                              f"--workers {args.workers}", "workers": args.workers, "torch_threads_per_worker": args.threads},
        "candidates_per_request": CANDIDATES,
        "questions": len(cases),
        "bounds": {"requests": args.requests, "seconds": args.seconds},
        "served_rewards_match_model_score": identical,
        "failed": failed,
        "rows": rows,
    })
    print(f"wrote {path}")
    return 0 if failed == 0 and identical else 1


if __name__ == "__main__":
    sys.exit(main())
