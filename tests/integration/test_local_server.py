"""The OpenAI client end to end against a real model: ``python -m
orchrm.execution.llm.local_server`` (our own OpenAI-compatible server over the transformers
client; llama-cpp-python[server] does not install here) serving the SmolLM2 GGUF in its own
process on loopback."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from orchrm.config import BackendConfig
from orchrm.errors import BackendError
from orchrm.execution.llm import make_client
from orchrm.execution.llm.models import smollm2_gguf
from orchrm.execution.llm.openai_client import OpenAIClient
from orchrm.util.processes import stop_group
from tests.integration.mlflow_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # the server loads the GGUF (20 s or more)

ROOT = Path(__file__).resolve().parents[2]
NAME = "SmolLM2-135M-Instruct.Q4_1"
QUESTION = [{"role": "user", "content": "What is 12 + 30?"}]


@contextlib.contextmanager
def local_server(log_path: Path, wait_s: float = 600) -> Iterator[str]:
    """The local server on a free port; yields its ``/v1`` URL once ``/health`` answers."""
    port = free_port()
    cmd = [sys.executable, "-m", "orchrm.execution.llm.local_server", "--model", str(smollm2_gguf()), "--port", str(port),
           "--device", "cpu", "--threads", "1"]
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                        break
                assert time.monotonic() < deadline, "the local server did not answer /health: " + log_path.read_text()[-3000:]
                time.sleep(1)
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            stop_group(proc)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    with local_server(tmp_path_factory.mktemp("local-server") / "server.log") as url:
        yield url


def test_the_server_lists_its_model(server):
    listed = httpx.get(f"{server}/models", timeout=10).json()
    assert [m["id"] for m in listed["data"]] == [NAME]


def test_a_real_chat_completion_through_the_openai_client_carries_the_models_usage(server):
    client = make_client(BackendConfig(kind="openai", model=NAME, base_url=server, timeout_s=300, max_retries=0))
    one = client.complete(QUESTION, max_tokens=8, temperature=0)
    assert isinstance(client, OpenAIClient)
    assert one.texts[0].strip()
    assert one.prompt_tokens > 5 and 1 <= one.completion_tokens <= 8
    again = client.complete(QUESTION, max_tokens=8, temperature=0)
    assert again == one  # greedy on the server too


def test_n_samples_come_back_as_n_choices_with_the_prompt_counted_per_sample(server):
    client = OpenAIClient(NAME, base_url=server, timeout_s=300, max_retries=0)
    one = client.complete(QUESTION, max_tokens=6, temperature=0)
    three = client.complete(QUESTION, max_tokens=6, temperature=0.8, n=3)
    assert len(three.texts) == 3 and len(three.finish_reasons) == 3
    assert three.prompt_tokens == 3 * one.prompt_tokens
    assert 3 <= three.completion_tokens <= 18


def test_another_models_name_is_refused_naming_the_served_one(server):
    client = OpenAIClient("gpt-4o", base_url=server, timeout_s=60, max_retries=0)
    with pytest.raises(BackendError, match=rf"HTTP 404: model 'gpt-4o' is not served here; this server serves '{NAME}'"):
        client.complete(QUESTION, max_tokens=4, temperature=0)


@pytest.mark.parametrize(("body", "message"), [
    ({"messages": [], "max_tokens": 4}, r"invalid request: messages: List should have at least 1 item"),
    ({"messages": QUESTION, "max_tokens": 0}, r"invalid request: max_tokens: Input should be greater than or equal to 1"),
    ({"messages": QUESTION, "stream": True}, r"streaming is not supported"),
])
def test_a_bad_request_answers_400_in_openais_error_shape(server, body, message):
    reply = httpx.post(f"{server}/chat/completions", json={"model": NAME, **body}, timeout=60)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert re.search(message, error["message"]), error["message"]
