"""The client a config's ``backend:`` section names (:class:`orchrm.config.BackendConfig`)."""

from __future__ import annotations

from orchrm.config import BackendConfig
from orchrm.execution.llm.base import LLMClient


def make_client(config: BackendConfig) -> LLMClient | None:
    """The LLM client of ``config``; None for ``sandbox``, whose agents need none. A
    ``transformers`` model loads here (once per process, :func:`~orchrm.execution.llm.transformers_client.load_causal_lm`)."""
    if config.kind == "sandbox":
        return None
    if config.kind == "transformers":
        from orchrm.execution.llm.transformers_client import TransformersClient

        return TransformersClient(config.model, gguf_file=config.gguf_file, device=config.device)
    from orchrm.execution.llm.openai_client import OpenAIClient

    return OpenAIClient(config.model, base_url=config.base_url, api_key=config.api_key, timeout_s=config.timeout_s,
                        max_retries=config.max_retries, concurrency=config.concurrency)
