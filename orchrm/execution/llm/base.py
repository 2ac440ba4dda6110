"""The interface every LLM client implements: chat messages in, ``n`` completions with their
token usage out. Agents (CoT, SelfConsistency, Debate, Reflexion, WebSearch) are prompts on top of
it; the artifact table's ``prompt_tokens`` and ``completion_tokens`` are its counts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

#: one chat message: ``{"role": "system" | "user" | "assistant", "content": "..."}``
Message = Mapping[str, str]


@dataclass(frozen=True)
class Completions:
    """The ``n`` completions of one call and what they cost.

    - ``texts``: the completions, in order (``len(texts) == n``).
    - ``prompt_tokens``: prompt tokens the call consumed, as the backend counts them: an
      OpenAI-compatible server's ``usage.prompt_tokens`` (the prompt once for all ``n``); a local
      model that runs the prompt once per sample counts it ``n`` times.
    - ``completion_tokens``: tokens generated over all ``n`` completions.
    - ``finish_reasons``: per completion, ``stop`` or ``length`` (cut at ``max_tokens``) where known.
    """

    texts: tuple[str, ...]
    prompt_tokens: int
    completion_tokens: int
    finish_reasons: tuple[str | None, ...] = ()

    def __post_init__(self) -> None:
        if self.prompt_tokens < 0 or self.completion_tokens < 0:
            raise ValueError(f"token counts must be >= 0, got {self.prompt_tokens} and {self.completion_tokens}")
        if self.finish_reasons and len(self.finish_reasons) != len(self.texts):
            raise ValueError(f"{len(self.finish_reasons)} finish reasons for {len(self.texts)} completions")


@runtime_checkable
class LLMClient(Protocol):
    """A chat model. ``name`` says which client (``transformers``, ``openai``), ``model`` which
    model it runs (a path or a served model's name): both land in the artifact table's
    provenance."""

    name: str
    model: str

    def complete(self, messages: Sequence[Message], *, max_tokens: int, temperature: float, n: int = 1) -> Completions:
        """``n`` completions of the chat ``messages``, each at most ``max_tokens`` tokens;
        ``temperature`` 0 is greedy (then ``n`` > 1 repeats one completion). Raises
        :class:`orchrm.errors.BackendError` with what to fix when the model cannot answer."""
        ...


def complete_many(client: LLMClient, conversations: Sequence[Sequence[Message]], *, max_tokens: int, temperature: float,
                  n: int = 1) -> list[Completions]:
    """``client.complete`` for each of ``conversations``, in order: through the client's own
    ``complete_many`` where it has one (the transformers client batches them into one
    ``generate`` call, the OpenAI client sends them side by side), else one call after another."""
    batched = getattr(client, "complete_many", None)
    if callable(batched):
        return list(batched(conversations, max_tokens=max_tokens, temperature=temperature, n=n))
    return [client.complete(c, max_tokens=max_tokens, temperature=temperature, n=n) for c in conversations]
