"""What scoring costs: the tokens a reward model reads for a call of ``score(prompts, actions)``.

Serving reports them with every orchestration (``OrchestrationResult.scoring_tokens``) and the
evaluation charges them to the reward-model selectors of best-of-N; both count with
:func:`scoring_tokens`. How often a prompt is read depends on the architecture
(:attr:`orchrm.config.ModelConfig.architecture`): a ``shared_prompt`` model encodes each distinct
prompt once for all of its actions, a ``joint`` model encodes the prompt again with every action.
An ensemble (:attr:`orchrm.config.ModelConfig.members`) reads every text once per member.

>>> class Words:  # a model that reads words
...     def __init__(self, shared_prompt):
...         self.shared_prompt = shared_prompt
...     def tokenize(self, texts):
...         return [t.split() for t in texts]
>>> scoring_tokens(Words(shared_prompt=False), "two words", ["a b c", "d"]).total  # (2 + 3) + (2 + 1)
8
>>> scoring_tokens(Words(shared_prompt=True), "two words", ["a b c", "d"]).total  # 2 once, then 3 + 1
6
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ScoringTokens:
    """Tokens read to score N (prompt, action) rows: token ids of the texts, without special
    tokens or truncation (the cost of the texts, whatever the model's ``max_length``).

    ``per_action``: (N,) int64, row ``i``'s action, plus its prompt for a model that reads the
    prompt with every action. ``per_prompt``: (N,) int64, row ``i``'s prompt when the model reads
    each distinct prompt once for all its actions, else 0. ``total``: every ``per_action``, plus
    each distinct prompt's ``per_prompt`` once. An ensemble of K members reads everything K times,
    so every count is K times one member's.
    """

    per_action: np.ndarray
    per_prompt: np.ndarray
    total: int


def _count(model: Any, texts: list[str]) -> np.ndarray:
    """Token counts of ``texts``: ``model.tokenize`` when the model has one, else the sandbox's
    documented rule (:func:`orchrm.util.tokens.count_tokens`) for any other scorer."""
    tokenize = getattr(model, "tokenize", None)
    if tokenize is None:
        from orchrm.util.tokens import count_tokens

        return np.array([count_tokens(t) for t in texts], dtype=np.int64)
    return np.array([len(ids) for ids in tokenize(texts)], dtype=np.int64)


def _codes(texts: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Per text the index of its first occurrence among the distinct texts, and those texts."""
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(t, len(index)) for t in texts), dtype=np.int64, count=len(texts))
    return codes, list(index)


def scoring_tokens(model: Any, prompts: str | Sequence[str], actions: Sequence[str]) -> ScoringTokens:
    """The tokens ``model`` reads to score ``actions`` under ``prompts`` (one prompt string for
    every action, or one per action). ``model``: a :class:`~orchrm.model.reward_model.BradleyTerryModel`
    or any scorer; one without ``shared_prompt`` counts as reading the prompt with every action,
    one without ``tokenize`` is counted with the sandbox's token rule, one with ``members`` (an
    ensemble) reads every text once per member. Each distinct text is tokenized once, in one call."""
    actions = list(actions)
    prompts = [prompts] * len(actions) if isinstance(prompts, str) else list(prompts)
    if len(prompts) != len(actions):
        raise ValueError(f"got {len(prompts)} prompts for {len(actions)} actions; give one prompt, or one per action")
    prompt_code, distinct_prompts = _codes(prompts)
    action_code, distinct_actions = _codes(actions)
    lengths = _count(model, distinct_prompts + distinct_actions)
    prompt_len, action_len = lengths[: len(distinct_prompts)], lengths[len(distinct_prompts) :]
    reads = int(getattr(model, "members", 1))  # each member of an ensemble encodes the texts itself
    prompt_len, action_len = reads * prompt_len, reads * action_len
    prompt, action = prompt_len[prompt_code], action_len[action_code]
    if bool(getattr(model, "shared_prompt", False)):
        return ScoringTokens(per_action=action, per_prompt=prompt, total=int(action.sum() + prompt_len.sum()))
    joint = action + prompt
    return ScoringTokens(per_action=joint, per_prompt=np.zeros_like(prompt), total=int(joint.sum()))


__all__ = ["ScoringTokens", "scoring_tokens"]
