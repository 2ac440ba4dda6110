"""The client interface's shared pieces: :class:`Completions`' checks and :func:`complete_many`'s
fallback for a client without a batched entry (the real clients' batching is tested in
tests/integration/test_transformers_client.py and test_openai_client.py)."""

from __future__ import annotations

import pytest

from orchrm.execution.llm import Completions, LLMClient, complete_many


class Echo:
    """The smallest LLMClient: it answers each conversation with its last message, n times."""

    name, model = "echo", "echo"

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, messages, *, max_tokens, temperature, n=1):
        self.calls += 1
        text = messages[-1]["content"][:max_tokens]
        return Completions((text,) * n, prompt_tokens=len(messages), completion_tokens=n * len(text))


def test_complete_many_falls_back_to_one_call_per_conversation_in_order():
    client = Echo()
    assert isinstance(client, LLMClient)
    out = complete_many(client, [[{"role": "user", "content": "a"}], [{"role": "user", "content": "bb"}]],
                        max_tokens=8, temperature=0.5, n=2)
    assert [c.texts for c in out] == [("a", "a"), ("bb", "bb")]
    assert client.calls == 2


def test_completions_refuse_negative_counts_and_mismatched_finish_reasons():
    with pytest.raises(ValueError, match="token counts must be >= 0"):
        Completions(("x",), prompt_tokens=-1, completion_tokens=0)
    with pytest.raises(ValueError, match="2 finish reasons for 1 completions"):
        Completions(("x",), prompt_tokens=1, completion_tokens=1, finish_reasons=("stop", "stop"))
