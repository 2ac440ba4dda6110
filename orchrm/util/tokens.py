"""Token accounting on the text agents actually consume and produce.

The sandbox has no LLM tokenizer, so it counts with a fixed, documented rule that tracks a
BPE tokenizer closely enough for cost comparisons: a run of letters costs one token per started
4 letters, a run of digits one token per started 3 digits (GPT-style tokenizers split long
numbers in groups of three), and every other non-space character is one token. Real LLM
backends report their own usage instead.

Because the rule never lets a token cross whitespace, the count of texts joined by newlines is
the sum of their counts; prompts are therefore assembled from pieces (instruction, question,
retrieved documents) whose counts are cached.

>>> count_tokens("Natalia sold 48 clips.")
7
>>> count_joined(["Natalia sold 48 clips.", "How many?"]) == count_tokens("Natalia sold 48 clips.\\nHow many?")
True
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

_TOKEN = re.compile(r"[^\W\d_]{1,4}|\d{1,3}|[^\w\s]|_")


def count_tokens(text: str) -> int:
    """Number of tokens in ``text`` under the sandbox rule (0 for the empty string)."""
    if len(text) > 64:
        return _count_cached(text)
    return len(_TOKEN.findall(text))


@lru_cache(maxsize=1 << 16)
def _count_cached(text: str) -> int:
    return len(_TOKEN.findall(text))


def count_joined(pieces: Sequence[str]) -> int:
    """Tokens of ``"\\n".join(pieces)``, computed from the (cached) counts of the pieces."""
    return sum(count_tokens(p) for p in pieces)
