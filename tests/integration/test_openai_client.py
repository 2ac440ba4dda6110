"""The OpenAI-compatible client against a test server that misbehaves on purpose
(``tests/integration/fault_server.py``, a real HTTP server process on loopback): retries on
timeouts, 429 (honouring Retry-After) and 5xx, no retry on other 4xx, malformed replies refused
naming what they lack, ``n`` made up when the server returns fewer choices, a concurrency cap.
The end-to-end test against a real model is in ``test_local_server.py``."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from orchrm.config import BackendConfig
from orchrm.errors import BackendError
from orchrm.execution.llm import LLMClient, complete_many, make_client
from orchrm.execution.llm.openai_client import OpenAIClient

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "user", "content": "What is 12 + 30?"}]


@contextlib.contextmanager
def fault_server_process() -> Iterator[str]:
    """``python -m tests.integration.fault_server`` on a free port; yields its root URL."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.integration.fault_server"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("port "), f"the fault server did not start: {line!r}"
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def fault_server() -> Iterator[str]:
    with fault_server_process() as url:
        yield url


class Scenario:
    """One test's view of the fault server: a base URL with its own token, and what the server saw."""

    def __init__(self, root: str, scenario: str) -> None:
        self.root, self.token = root, uuid.uuid4().hex
        self.base_url = f"{root}/{scenario}/{self.token}/v1"

    def requests(self) -> list[dict]:
        return httpx.get(f"{self.root}/stats/{self.token}", timeout=5).json()["requests"]

    def client(self, **kwargs) -> OpenAIClient:
        settings = {"timeout_s": 5.0, "max_retries": 2, "backoff_s": 0.01, **kwargs}
        return OpenAIClient("fault-model", base_url=self.base_url, **settings)


@pytest.fixture
def scenario(fault_server):
    return lambda name: Scenario(fault_server, name)


def test_a_healthy_reply_gives_the_texts_and_the_servers_usage(scenario):
    s = scenario("ok")
    out = s.client(api_key="sk-test-secret").complete(MESSAGES, max_tokens=16, temperature=0.7, n=3)
    assert out.texts == ("answer 0", "answer 1", "answer 2")
    assert (out.prompt_tokens, out.completion_tokens) == (10, 9)
    assert out.finish_reasons == ("stop",) * 3
    [request] = s.requests()
    assert request["n"] == 3 and request["model"] == "fault-model"
    assert request["authorization"] == "Bearer sk-test-secret"


def test_the_api_key_and_base_url_come_from_the_environment_and_the_key_is_never_shown(scenario, monkeypatch):
    s = scenario("ok")
    monkeypatch.setenv("OPENAI_BASE_URL", s.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    client = OpenAIClient("fault-model")
    assert isinstance(client, LLMClient)
    client.complete(MESSAGES, max_tokens=4, temperature=0)
    assert s.requests()[0]["authorization"] == "Bearer sk-from-env"
    assert "sk-from-env" not in repr(client) and "sk-from-env" not in str(vars(client))


def test_a_429_is_retried_after_the_servers_retry_after_then_succeeds(scenario, caplog):
    s = scenario("429-then-ok")
    with caplog.at_level(logging.WARNING, logger="orchrm.execution.llm.openai_client"):
        out = s.client(api_key="sk-secret-429").complete(MESSAGES, max_tokens=4, temperature=0.5)
    first, second = s.requests()
    assert out.texts == ("answer 0",)
    assert second["t"] - first["t"] >= 0.9  # the server asked for 1 s; the client's own backoff is 0.01 s
    assert "HTTP 429: rate limited by the fault server" in caplog.text
    assert "sk-secret-429" not in caplog.text


def test_429s_past_the_retries_fail_naming_the_status_and_the_fix(scenario):
    s = scenario("always-429")
    with pytest.raises(BackendError, match=r"HTTP 429: rate limited by the fault server, 3 attempts in all: lower backend.concurrency"):
        s.client(max_retries=2).complete(MESSAGES, max_tokens=4, temperature=0.5)
    assert len(s.requests()) == 3


def test_a_retry_after_longer_than_the_client_waits_fails_at_once(scenario):
    s = scenario("429-wait-an-hour")
    with pytest.raises(BackendError, match=r"retry after 3600 s, longer than this client waits"):
        s.client(max_backoff_s=30).complete(MESSAGES, max_tokens=4, temperature=0.5)
    assert len(s.requests()) == 1


def test_5xx_replies_are_retried_then_succeed(scenario):
    s = scenario("500-then-ok")
    out = s.client(max_retries=2).complete(MESSAGES, max_tokens=4, temperature=0.5)
    assert out.texts == ("answer 0",)
    assert len(s.requests()) == 3


def test_a_reply_slower_than_the_timeout_is_retried_then_fails_naming_the_timeout(scenario):
    s = scenario("slow")
    with pytest.raises(BackendError, match=r"no reply within 0.5 s .*2 attempts in all: raise backend.timeout_s"):
        s.client(timeout_s=0.5, max_retries=1).complete(MESSAGES, max_tokens=4, temperature=0.5)
    assert len(s.requests()) == 2


def test_a_timeout_followed_by_a_prompt_reply_succeeds(scenario):
    s = scenario("slow-then-ok")
    out = s.client(timeout_s=0.5, max_retries=1).complete(MESSAGES, max_tokens=4, temperature=0.5)
    assert out.texts == ("answer 0",)
    assert len(s.requests()) == 2


def test_a_4xx_other_than_429_fails_at_once_with_the_servers_message(scenario):
    s = scenario("bad-request")
    with pytest.raises(BackendError, match=r"answered HTTP 400: max_tokens is too large for the fault server"):
        s.client().complete(MESSAGES, max_tokens=4, temperature=0.5)
    assert len(s.requests()) == 1


@pytest.mark.parametrize(("name", "message"), [
    ("not-json", r"HTTP 200 with a body that is not JSON \(text/html\): '<html>502 Bad Gateway</html>'"),
    ("no-usage", r"replied without a usage block of prompt_tokens and completion_tokens \(usage: None\)"),
    ("no-choices", r"replied without choices"),
])
def test_a_malformed_reply_fails_at_once_naming_what_it_lacks(scenario, name, message):
    s = scenario(name)
    with pytest.raises(BackendError, match=message):
        s.client().complete(MESSAGES, max_tokens=4, temperature=0.5)
    assert len(s.requests()) == 1


def test_a_server_that_ignores_n_is_asked_again_for_the_rest_and_usage_is_summed(scenario):
    s = scenario("one-choice")
    out = s.client().complete(MESSAGES, max_tokens=4, temperature=0.7, n=3)
    assert len(out.texts) == 3
    assert (out.prompt_tokens, out.completion_tokens) == (30, 9)
    assert [r["n"] for r in s.requests()] == [3, 2, None]


def test_greedy_with_n_asks_for_one_completion_and_repeats_it(scenario):
    s = scenario("ok")
    out = s.client().complete(MESSAGES, max_tokens=4, temperature=0, n=4)
    assert out.texts == ("answer 0",) * 4
    assert [r["n"] for r in s.requests()] == [None]


def test_an_unreachable_server_fails_naming_the_url_to_check():
    with fault_server_process() as url:
        dead = url
    with pytest.raises(BackendError, match=r"cannot reach the server .*check backend.base_url"):
        OpenAIClient("m", base_url=f"{dead}/v1", max_retries=1, backoff_s=0.01).complete(MESSAGES, max_tokens=4, temperature=0)


def test_concurrent_calls_never_exceed_the_concurrency_limit(scenario):
    """Four threads through a client of concurrency 2 against a server that takes 3 s per reply:
    the semaphore lets two requests in at a time (the server's arrival times show it)."""
    s = scenario("slow")
    client = s.client(concurrency=2, timeout_s=10)
    with ThreadPoolExecutor(max_workers=4) as pool:
        out = list(pool.map(lambda _: client.complete(MESSAGES, max_tokens=4, temperature=0.5), range(4)))
    assert len(out) == 4
    times = sorted(r["t"] for r in s.requests())
    assert times[2] - times[0] >= 2.5 and times[3] - times[1] >= 2.5  # the 3rd waited for a slot of the 1st pair


def test_the_factory_builds_each_backend_from_its_config(scenario):
    assert make_client(BackendConfig()) is None
    s = scenario("ok")
    client = make_client(BackendConfig(kind="openai", model="fault-model", base_url=s.base_url, timeout_s=3, max_retries=1,
                                       concurrency=2))
    assert isinstance(client, OpenAIClient)
    assert (client.timeout_s, client.max_retries, client.concurrency) == (3, 1, 2)
    assert client.complete(MESSAGES, max_tokens=4, temperature=0).texts == ("answer 0",)


def test_complete_many_keeps_the_order_of_its_conversations(scenario):
    s = scenario("ok")
    out = complete_many(s.client(concurrency=3), [MESSAGES] * 5, max_tokens=4, temperature=0.5, n=2)
    assert [c.texts for c in out] == [("answer 0", "answer 1")] * 5
    assert len(s.requests()) == 5


def test_threads_share_one_client(scenario):
    s = scenario("ok")
    client, results = s.client(concurrency=3), []
    threads = [threading.Thread(target=lambda: results.append(client.complete(MESSAGES, max_tokens=4, temperature=0.5, n=2)))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 6 and all(r.texts == ("answer 0", "answer 1") for r in results)
