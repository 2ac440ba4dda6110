"""Inputs shared by the CPU scorers' tests: texts past the prompt budget and past max_length."""

from __future__ import annotations

import torch

LONG_PLAN = "\n".join(f'<agent id="a{i}" type="CoT" model="small"/>' for i in range(1, 40))


def texts(pairs, n: int = 12) -> tuple[list[str], list[str]]:
    """``n`` (prompt, chosen plan) rows of ``pairs``, then one prompt beyond prompt_length with one
    action beyond max_length."""
    rows = pairs.iloc[:n]
    return list(rows["prompt"]) + [rows["prompt"].iloc[0] * 6], list(rows["chosen"]) + [LONG_PLAN]


def sharpen_attention(model, factor: float = 300.0) -> None:
    """Scale every layer's query and key projections by ``factor``: attention logits then spread
    over hundreds, so exp() of most differences underflows (and a masked key often outscores every
    visible one)."""
    with torch.no_grad():
        for layer in model.encoder.encoder.layer:
            for projection in (layer.attention.self.query, layer.attention.self.key):
                projection.weight.mul_(factor)
                projection.bias.mul_(factor)
