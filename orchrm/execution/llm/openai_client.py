"""An OpenAI-compatible chat-completions server (vLLM, Ollama, llama.cpp's server, OpenAI, the
local server of :mod:`orchrm.execution.llm.local_server`) over ``httpx``.

Failures a server recovers from (a timeout, a dropped connection, 408, 429, 5xx) are retried with
exponential backoff (tenacity), honouring a 429's ``Retry-After``; any other 4xx and a malformed
reply fail at once with a :class:`~orchrm.errors.BackendError` naming the status, the server's
message or what the reply lacked. A bounded semaphore caps the requests in flight, so one client
can be shared by a thread pool. The API key is sent, never logged or shown.
"""

from __future__ import annotations

import email.utils
import logging
import os
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import tenacity

from orchrm.errors import BackendError
from orchrm.execution.llm.base import Completions, Message

log = logging.getLogger(__name__)

#: where requests go when neither ``base_url`` nor ``$OPENAI_BASE_URL`` says otherwise
DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: statuses worth another attempt: request timeout, rate limit, server errors (>= 500)
RETRY_STATUSES = frozenset({408, 429})


class _Retryable(Exception):
    """One attempt that failed in a way the server may recover from; ``fix`` says what to change
    when every attempt fails, ``retry_after`` the seconds the server asked to wait."""

    def __init__(self, why: str, fix: str, retry_after: float | None = None) -> None:
        super().__init__(why)
        self.why, self.fix, self.retry_after = why, fix, retry_after


def retry_after_s(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for: a number of seconds or an HTTP date.

    >>> retry_after_s("2"), retry_after_s(None), retry_after_s("soon")
    (2.0, None, None)
    """
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _server_message(reply: httpx.Response) -> str:
    """The server's own words: ``error.message`` of an OpenAI-style error body, else the text."""
    try:
        data = reply.json()
    except ValueError:
        return reply.text[:300].strip() or reply.reason_phrase
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return reply.text[:300].strip()


class OpenAIClient:
    """:class:`~orchrm.execution.llm.base.LLMClient` over ``POST {base_url}/chat/completions``.

    ``base_url`` (e.g. ``http://127.0.0.1:8000/v1``) and ``api_key`` default to
    ``$OPENAI_BASE_URL`` and ``$OPENAI_API_KEY``; a local server may need no key. ``timeout_s``
    bounds one attempt; ``max_retries`` more attempts follow a retryable failure, the k-th after
    ``backoff_s * 2**(k-1)`` seconds (jittered, at most ``max_backoff_s``) or the server's
    ``Retry-After``. ``concurrency`` requests are in flight at most, over every thread.

    ``n`` is passed to the server; one that returns fewer choices (llama.cpp's server ignores
    ``n``) is asked again for the rest, and the calls' usage is summed. At temperature 0 one
    completion is requested and repeated ``n`` times.
    """

    name = "openai"

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None, timeout_s: float = 60.0,
                 max_retries: int = 4, concurrency: int = 4, backoff_s: float = 1.0, max_backoff_s: float = 30.0) -> None:
        if not model:
            raise BackendError("the openai backend needs the served model's name: set backend.model")
        if timeout_s <= 0 or max_retries < 0 or concurrency < 1 or backoff_s < 0:
            raise ValueError(f"need timeout_s > 0, max_retries >= 0, concurrency >= 1, backoff_s >= 0; got "
                             f"{timeout_s}, {max_retries}, {concurrency}, {backoff_s}")
        self.model = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.timeout_s, self.max_retries, self.concurrency = timeout_s, max_retries, concurrency
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        key = api_key or os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(headers=headers, timeout=httpx.Timeout(timeout_s),
                                  limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency))
        self._slots = threading.BoundedSemaphore(concurrency)

    # -----------------------------------------------------------------------------------------
    # the interface

    def complete(self, messages: Sequence[Message], *, max_tokens: int, temperature: float, n: int = 1) -> Completions:
        if max_tokens < 1 or n < 1 or temperature < 0:
            raise ValueError(f"need max_tokens >= 1, n >= 1, temperature >= 0; got {max_tokens}, {n}, {temperature}")
        wanted = 1 if temperature == 0 else n
        texts: list[str] = []
        reasons: list[str | None] = []
        prompt_tokens = completion_tokens = 0
        while len(texts) < wanted:
            body: dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in messages],
                                    "max_tokens": max_tokens, "temperature": temperature}
            if wanted - len(texts) > 1:
                body["n"] = wanted - len(texts)
            reply = self._post(body)
            got_texts, got_reasons, used_prompt, used_completion = self._read(reply)
            texts += got_texts
            reasons += got_reasons
            prompt_tokens += used_prompt
            completion_tokens += used_completion
        repeat = n // wanted
        return Completions(tuple(texts[:wanted]) * repeat, prompt_tokens, completion_tokens, tuple(reasons[:wanted]) * repeat)

    def complete_many(self, conversations: Sequence[Sequence[Message]], *, max_tokens: int, temperature: float,
                      n: int = 1) -> list[Completions]:
        """:meth:`complete` for each of ``conversations``, ``concurrency`` at a time; in order."""
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="orchrm-openai") as pool:
            return list(pool.map(lambda c: self.complete(c, max_tokens=max_tokens, temperature=temperature, n=n), conversations))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OpenAIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:  # the API key stays out of logs and tracebacks
        return f"OpenAIClient(model={self.model!r}, base_url={self.base_url!r})"

    # -----------------------------------------------------------------------------------------
    # one request, retried

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        """The JSON object of a 200 reply to ``body``, after retries; BackendError otherwise."""
        retrying = tenacity.Retrying(retry=tenacity.retry_if_exception_type(_Retryable),
                                     stop=tenacity.stop_after_attempt(self.max_retries + 1),
                                     wait=self._wait, before_sleep=self._log_retry, reraise=True)
        try:
            return retrying(self._attempt, body)
        except _Retryable as exc:
            attempts = self.max_retries + 1
            raise BackendError(f"{self.url}: {exc.why}, {attempts} attempt{'s' * (attempts > 1)} in all: {exc.fix}") from None

    def _attempt(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._slots:  # only the request holds a slot, not the backoff between attempts
            try:
                reply = self._http.post(self.url, json=body)
            except httpx.TimeoutException as exc:
                raise _Retryable(f"no reply within {self.timeout_s:g} s ({type(exc).__name__})",
                                 "raise backend.timeout_s or lower backend.max_tokens, or check the server's load") from exc
            except httpx.TransportError as exc:
                raise _Retryable(f"cannot reach the server ({type(exc).__name__}: {exc})",
                                 "check backend.base_url (or $OPENAI_BASE_URL) and that the server is running") from exc
        status = reply.status_code
        if status in RETRY_STATUSES or status >= 500:
            wait = retry_after_s(reply.headers.get("retry-after")) if status == 429 else None
            why = f"HTTP {status}: {_server_message(reply)}"
            if wait is not None and wait > self.max_backoff_s:
                raise BackendError(f"{self.url}: {why}; the server asks to retry after {wait:.0f} s, longer than this "
                                   f"client waits ({self.max_backoff_s:g} s): lower backend.concurrency or try later")
            fix = ("lower backend.concurrency or raise backend.max_retries (the server is rate limiting)" if status == 429
                   else "check the server's logs, or raise backend.max_retries")
            raise _Retryable(why, fix, retry_after=wait)
        if status >= 400:
            hint = {401: "check backend.api_key (or $OPENAI_API_KEY)", 403: "check backend.api_key's permissions",
                    404: f"check backend.base_url (it should end in /v1) and backend.model ({self.model!r})"}.get(status, "")
            raise BackendError(f"{self.url} answered HTTP {status}: {_server_message(reply)}" + (f"; {hint}" if hint else ""))
        try:
            data = reply.json()
        except ValueError:
            raise BackendError(f"{self.url} answered HTTP {status} with a body that is not JSON "
                               f"({reply.headers.get('content-type', 'no content type')}): {reply.text[:200]!r}") from None
        if not isinstance(data, dict):
            raise BackendError(f"{self.url} answered with JSON that is not an object: {reply.text[:200]!r}")
        return data

    def _wait(self, state: tenacity.RetryCallState) -> float:
        """The server's ``Retry-After`` when it gave one, else exponential backoff with jitter."""
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            return exc.retry_after
        return min(self.max_backoff_s, self.backoff_s * 2 ** (state.attempt_number - 1)) * random.uniform(0.5, 1.0)

    def _log_retry(self, state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning("%s: %s; attempt %d of %d, next in %.1f s", self.url, getattr(exc, "why", exc), state.attempt_number,
                    self.max_retries + 1, wait)

    def _read(self, data: dict[str, Any]) -> tuple[list[str], list[str | None], int, int]:
        """(texts, finish reasons, prompt tokens, completion tokens) of a reply, or BackendError
        naming what it lacks."""
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            raise BackendError(f"{self.url} replied without choices (keys: {sorted(data)}): not an OpenAI-compatible "
                               "chat completion")
        usage = data.get("usage")
        counts = [usage.get(k) if isinstance(usage, dict) else None for k in ("prompt_tokens", "completion_tokens")]
        if not all(isinstance(c, int) and c >= 0 for c in counts):
            raise BackendError(f"{self.url} replied without a usage block of prompt_tokens and completion_tokens "
                               f"(usage: {usage!r}): the artifact table needs the server's token counts")
        texts, reasons = [], []
        for i, choice in enumerate(sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)):
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict) or not isinstance(message.get("content", 0), str | None):
                raise BackendError(f"{self.url} replied with choice {i} without a message.content: {choice!r:.200}")
            texts.append(message.get("content") or "")
            reasons.append(choice.get("finish_reason"))
        return texts, reasons, counts[0], counts[1]
