"""Real LLMs behind the agents: one small client interface (:class:`LLMClient`), the clients that
implement it, and the backend that runs every agent type as prompts on a client.

The sandbox stays the embedded default (``backend.kind: sandbox``); ``transformers`` and ``openai``
run the same plans on a real model, so the executor, collection, the pipeline and both
orchestrators work unchanged.

The clients: :class:`~orchrm.execution.llm.transformers_client.TransformersClient` (a local
model directory or GGUF file), :class:`~orchrm.execution.llm.openai_client.OpenAIClient` (any
OpenAI-compatible server), :func:`make_client`, which builds the one a config names, and
:func:`complete_many`, many conversations at once on any client (batched where it can be).
``python -m orchrm.execution.llm.local_server`` serves a local model over the OpenAI API.
"""

from orchrm.execution.llm.base import Completions, LLMClient, Message, complete_many
from orchrm.execution.llm.factory import make_client

__all__ = ["Completions", "LLMClient", "Message", "complete_many", "make_client"]
