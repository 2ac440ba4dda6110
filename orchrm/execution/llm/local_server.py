"""Serve a local model over the OpenAI API: a GGUF file or a model directory behind
``POST /v1/chat/completions`` and ``GET /v1/models``, on the transformers client.

Any OpenAI-compatible client can then use the model, the ``openai`` backend included, with no
llama.cpp or vLLM to build::

    python -m orchrm.execution.llm.local_server --model path/to/SmolLM2-135M-Instruct.Q4_1.gguf --port 8000
    # backend: {kind: openai, model: SmolLM2-135M-Instruct.Q4_1, base_url: http://127.0.0.1:8000/v1}

What it serves: non-streaming chat completions with ``n`` samples generated in one batch and a
``usage`` block from the model's tokenizer (the prompt counted once per sample, as the model ran
it). Requests queue for the one model: it suits a test, a demo or a single user on a CPU, not
many users (vLLM does continuous batching). Errors answer in OpenAI's shape,
``{"error": {"message", "type", "code"}}``: 400 for a bad request, 404 for another model's name,
500 when the model fails.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchrm.errors import BackendError
from orchrm.execution.llm.base import LLMClient


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant"]
    content: str


class ChatRequest(BaseModel):
    """The fields of OpenAI's chat-completions request this server reads; others are ignored."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0, le=2)
    n: int = Field(1, ge=1, le=64)
    stream: bool = False


def _error(status: int, message: str, kind: str, code: str | None = None) -> Any:
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind, "code": code}})


def create_app(client: LLMClient, *, served_model: str, default_max_tokens: int = 256) -> Any:
    """The FastAPI app serving ``client`` under the name ``served_model``."""
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError

    app = FastAPI(title="OrchRM local OpenAI-compatible server", version="1")
    created = int(time.time())

    @app.exception_handler(RequestValidationError)
    def invalid(request: Any, exc: RequestValidationError) -> Any:
        where = "; ".join(f"{'.'.join(map(str, e['loc'][1:])) or 'body'}: {e['msg']}" for e in exc.errors())
        return _error(400, f"invalid request: {where}", "invalid_request_error")

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "model": served_model}

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": served_model, "object": "model", "created": created, "owned_by": "local"}]}

    @app.post("/v1/chat/completions")
    def chat(request: ChatRequest) -> Any:  # a plain def: FastAPI runs it in a worker thread
        if request.stream:
            return _error(400, "streaming is not supported by this server: send stream=false", "invalid_request_error")
        if request.model and request.model != served_model:
            return _error(404, f"model {request.model!r} is not served here; this server serves {served_model!r}",
                          "invalid_request_error", "model_not_found")
        max_tokens = request.max_completion_tokens or request.max_tokens or default_max_tokens
        try:
            out = client.complete([m.model_dump() for m in request.messages], max_tokens=max_tokens,
                                  temperature=request.temperature, n=request.n)
        except BackendError as exc:
            return _error(500, str(exc), "server_error")
        reasons = out.finish_reasons or (None,) * len(out.texts)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()), "model": served_model,
            "choices": [{"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": reason}
                        for i, (text, reason) in enumerate(zip(out.texts, reasons, strict=True))],
            "usage": {"prompt_tokens": out.prompt_tokens, "completion_tokens": out.completion_tokens,
                      "total_tokens": out.prompt_tokens + out.completion_tokens},
        }

    return app


def served_name(model: str | Path, gguf_file: str | None = None) -> str:
    """The default served model name: the GGUF file's or the directory's name, without ``.gguf``.

    >>> served_name("models/SmolLM2-135M-Instruct.Q4_1.gguf")
    'SmolLM2-135M-Instruct.Q4_1'
    """
    return Path(gguf_file or Path(model).name).name.removesuffix(".gguf")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orchrm.execution.llm.local_server", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a model directory, a .gguf file, or the folder of --gguf-file")
    ap.add_argument("--gguf-file", help="a GGUF file inside --model")
    ap.add_argument("--served-model-name", help="the name clients send as `model` (default: the file's or folder's name)")
    ap.add_argument("--device", help="cpu, cuda, cuda:1... (default: a GPU when there is one)")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--max-tokens", type=int, default=256, help="completion tokens when a request names none (default 256)")
    ap.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's; 1 is faster on a busy machine)")
    args = ap.parse_args(argv)

    from orchrm.util.offline import apply_offline_env

    apply_offline_env()  # before transformers loads: nothing is downloaded
    import torch
    import uvicorn

    from orchrm.execution.llm.transformers_client import TransformersClient

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        client = TransformersClient(args.model, gguf_file=args.gguf_file, device=args.device)
    except BackendError as exc:
        print(f"local_server: {exc}", file=sys.stderr)
        return 2
    name = args.served_model_name or served_name(args.model, args.gguf_file)
    print(f"local_server: {client.model} loaded in {client.load_s:.1f} s; serving {name!r} at "
          f"http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    uvicorn.run(create_app(client, served_model=name, default_max_tokens=args.max_tokens), host=args.host, port=args.port,
                log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
