"""Real LLMs behind the agents: one small client interface (:class:`LLMClient`), the clients that
implement it, and the backend that runs every agent type as prompts on a client.

The sandbox stays the embedded default (``backend.kind: sandbox``); ``transformers`` and ``openai``
run the same plans on a real model, so the executor, collection, the pipeline and both
orchestrators work unchanged.
"""

from orchrm.execution.llm.base import Completions, LLMClient, Message

__all__ = ["Completions", "LLMClient", "Message"]
