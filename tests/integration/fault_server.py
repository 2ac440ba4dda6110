"""A test server that misbehaves on purpose: an OpenAI-shaped ``/chat/completions`` on loopback
whose faults (429s, 5xx, slow or malformed replies, ``n`` ignored) the URL chooses.

Not a model: each answer is a fixed text. Run as its own process (``python -m
tests.integration.fault_server``), which prints ``port <N>`` once it listens. A client's base URL
is ``http://127.0.0.1:<N>/<scenario>/<token>/v1``: ``scenario`` is one of :data:`SCENARIOS`,
``token`` keeps one test's request count apart from another's. ``GET /stats/<token>`` returns
what the server saw for that token: each request's arrival time, ``n`` and Authorization header.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: scenario -> what it does to the k-th request (k from 1) of a token
SCENARIOS = {
    "ok": "answers every request with the n choices asked for",
    "one-choice": "ignores n: one choice per reply (llama.cpp's server does this)",
    "429-then-ok": "429 with Retry-After: 1 on the first request, then answers",
    "always-429": "429 with Retry-After: 0 on every request",
    "429-wait-an-hour": "429 with Retry-After: 3600",
    "500-then-ok": "500 on the first request, 503 on the second, then answers",
    "slow": "sleeps 3 s before every answer",
    "slow-then-ok": "sleeps 3 s on the first request, then answers at once",
    "not-json": "200 with an HTML body",
    "no-usage": "200 with choices but no usage block",
    "no-choices": "200 with an empty list of choices",
    "bad-request": "400 with an OpenAI-style error message",
}
SLOW_S = 3.0

_seen: dict[str, list[dict]] = defaultdict(list)
_lock = threading.Lock()


def completion(n: int) -> dict:
    return {"id": "chatcmpl-fault", "object": "chat.completion", "created": int(time.time()), "model": "fault",
            "choices": [{"index": i, "message": {"role": "assistant", "content": f"answer {i}"}, "finish_reason": "stop"}
                        for i in range(n)],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3 * n, "total_tokens": 10 + 3 * n}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes | dict, *, content_type: str = "application/json", headers: dict | None = None) -> None:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "stats":
            with _lock:
                self._send(200, {"requests": list(_seen[parts[1]])})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        parts = self.path.strip("/").split("/")
        if len(parts) != 5 or parts[0] not in SCENARIOS or parts[2:] != ["v1", "chat", "completions"]:
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        scenario, token, n = parts[0], parts[1], int(body.get("n", 1))
        with _lock:
            _seen[token].append({"t": time.time(), "n": body.get("n"), "authorization": self.headers.get("Authorization"),
                                 "model": body.get("model")})
            k = len(_seen[token])
        if scenario == "ok" or (scenario == "429-then-ok" and k > 1) or (scenario == "500-then-ok" and k > 2):
            self._send(200, completion(n))
        elif scenario == "one-choice":
            self._send(200, completion(1))
        elif scenario in ("429-then-ok", "always-429", "429-wait-an-hour"):
            wait = {"429-then-ok": "1", "always-429": "0", "429-wait-an-hour": "3600"}[scenario]
            self._send(429, {"error": {"message": "rate limited by the fault server"}}, headers={"Retry-After": wait})
        elif scenario == "500-then-ok":
            self._send(500 if k == 1 else 503, {"error": {"message": f"fault server error {k}"}})
        elif scenario in ("slow", "slow-then-ok"):
            if scenario == "slow" or k == 1:
                time.sleep(SLOW_S)
            self._send(200, completion(n))
        elif scenario == "not-json":
            self._send(200, b"<html>502 Bad Gateway</html>", content_type="text/html")
        elif scenario == "no-usage":
            self._send(200, {key: v for key, v in completion(n).items() if key != "usage"})
        elif scenario == "no-choices":
            self._send(200, {**completion(n), "choices": []})
        else:  # bad-request
            self._send(400, {"error": {"message": "max_tokens is too large for the fault server", "type": "invalid_request_error"}})


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
