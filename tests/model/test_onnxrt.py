"""ONNX Runtime scoring: the same rewards as ``model.score`` for every layout and attention graph; the
contract both CPU scorers keep is tested in test_cpu_scorers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orchrm import BradleyTerryModel

pytest.importorskip("onnxruntime", reason="the 'onnx' extra is not installed")

from orchrm import onnxrt  # noqa: E402
from orchrm.onnxrt import OnnxScorer, graph_inputs  # noqa: E402

from ._scoring_helpers import sharpen_attention  # noqa: E402
from ._scoring_helpers import texts as _texts  # noqa: E402


@pytest.fixture(params=["dense when short", "rows always"])
def attention(request, monkeypatch):
    """Both attention graphs of shared_prompt: dense for chunks up to DENSE_MAX_TOKENS, or rows for every chunk."""
    if request.param == "rows always":
        monkeypatch.setattr(onnxrt, "DENSE_MAX_TOKENS", 0)
    return request.param


@pytest.mark.parametrize("architecture", ["shared_prompt", "joint"])
def test_rewards_match_the_pytorch_forward(pairs, tiny_model_kwargs, architecture, attention):
    model = BradleyTerryModel(**{**tiny_model_kwargs, "architecture": architecture})
    model.fit_tokenizer(list(pairs["prompt"]) + list(pairs["chosen"]) + list(pairs["rejected"]))
    prompts, actions = _texts(pairs)
    scorer = OnnxScorer(model)
    torch.testing.assert_close(scorer.score(prompts, actions), model.score(prompts, actions), rtol=0, atol=1e-5)
    question, plans = prompts[0], actions[:8]
    torch.testing.assert_close(scorer.score(question, plans), model.score(question, plans), rtol=0, atol=1e-5)


@pytest.mark.parametrize("architecture", ["shared_prompt", "joint"])
def test_sharp_attention_matches_and_never_sees_masked_keys(pairs, tiny_model_kwargs, architecture, attention):
    # queries and keys scaled up: attention logits spread over hundreds, so a key the query must not see
    # often outscores every key it may see, and exp() of visible scores far below the row's
    # overall maximum would underflow; the masked softmax must still match PyTorch, with no NaN
    model = BradleyTerryModel(**{**tiny_model_kwargs, "architecture": architecture})
    model.fit_tokenizer(list(pairs["prompt"]) + list(pairs["chosen"]) + list(pairs["rejected"]))
    sharpen_attention(model)
    prompts, actions = _texts(pairs)
    logits = _first_layer_logits(model, prompts[0], actions[:8])
    assert logits.max() - logits.min() > 500  # the premise: exp() of most differences underflows
    expected = model.score(prompts, actions)
    got = OnnxScorer(model).score(prompts, actions)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def _first_layer_logits(model, prompt: str, actions: list[str]) -> torch.Tensor:
    """(heads, T, T) attention logits of the first layer over a packed batch, every pair of tokens."""
    batch = model.pack(model.tokenize([prompt]), model.tokenize(actions), [0] * len(actions))
    bert, heads = model.encoder, model.encoder.config.num_attention_heads
    with torch.no_grad():
        x = bert.embeddings(input_ids=batch.input_ids[None], position_ids=batch.positions[None],
                            token_type_ids=batch.segments[None])[0]
        att = bert.encoder.layer[0].attention.self
        q, k = (proj(x).view(len(x), heads, -1).transpose(0, 1) for proj in (att.query, att.key))
        return q @ k.transpose(1, 2) / q.shape[-1] ** 0.5


def test_a_query_that_sees_no_key_gives_finite_rewards_and_leaves_the_others_alone(trained_model):
    # graph_inputs never makes such a row; the softmax must still not divide 0 by 0
    scorer = OnnxScorer(trained_model)
    batch = trained_model.pack(trained_model.tokenize(["What is 2 + 3?"]), trained_model.tokenize(["add them", "guess"]), [0, 0])
    inputs = graph_inputs(batch, dense=True)
    session = scorer.session(dense=True)
    (expected,) = session.run(None, inputs)
    blind = inputs["visible"].copy()
    blind[1, :] = 0.0  # a prompt token: every action sees it, so every reward moves, but stays finite
    (got,) = session.run(None, {**inputs, "visible": blind})
    assert np.isfinite(got).all()
    blind = inputs["visible"].copy()
    last = len(blind) - 1  # the last action's last token: only that action sees it
    blind[last, :] = 0.0
    (got,) = session.run(None, {**inputs, "visible": blind})
    assert np.isfinite(got).all()
    assert got[0] == pytest.approx(expected[0], abs=1e-6)


def test_mask_lets_actions_see_their_prompt_and_themselves_only(trained_model):
    batch = trained_model.pack([[5, 6], [7]], [[8, 9], [10], [11]], [0, 1, 0])
    inputs = graph_inputs(batch)
    assert set(np.unique(inputs["visible"])) == {0.0, 1.0}
    seen = inputs["visible"] == 1
    # tokens: prompt 0 = [CLS] 5 6 [SEP] (0-3), prompt 1 = [CLS] 7 [SEP] (4-6), actions 7-9, 10-11, 12-13
    assert seen[0, :4].all() and not seen[0, 4:].any()
    assert seen[7, list(range(4)) + [7, 8, 9]].all() and seen[7].sum() == 7
    assert seen[10, [4, 5, 6, 10, 11]].all() and seen[10].sum() == 5
    assert inputs["pool"].shape == (3, 14)
    torch.testing.assert_close(torch.from_numpy(inputs["pool"]).sum(1), torch.ones(3))


def test_joint_rows_cover_every_token_once(pairs, tiny_model_kwargs):
    model = BradleyTerryModel(**{**tiny_model_kwargs, "architecture": "joint"})
    batch = model.pack([[5, 6], [7]], [[8, 9], [10], [11, 12, 13]], [0, 1, 0])
    inputs = graph_inputs(batch)
    assert inputs["action_rows"].shape == inputs["action_visible"].shape == (3, 8)  # longest: [CLS] 5 6 [SEP] 11 12 13 [SEP]
    assert (inputs["action_rows"].reshape(-1)[inputs["unpad"]] == range(batch.num_tokens)).all()
    assert inputs["action_visible"].sum() == batch.num_tokens and "visible" not in inputs
    equal = graph_inputs(model.pack([[5]], [[6, 7], [8, 9]], [0, 0]))  # no padding at all
    assert (equal["action_rows"].reshape(-1) == range(12)).all() and (equal["unpad"] == range(12)).all()
    with pytest.raises(ValueError, match="shared_prompt"):
        graph_inputs(batch, dense=True)


def test_shared_prompt_rows_cover_every_token_once(trained_model):
    batch = trained_model.pack([[5, 6], [7]], [[8, 9], [10], [11]], [0, 1, 0])
    inputs = graph_inputs(batch, dense=False)
    # prompt rows [CLS] 5 6 [SEP] and [CLS] 7 [SEP] (+1 pad); action rows 8 9 [SEP], 10 [SEP] (+1), 11 [SEP] (+1)
    assert inputs["prompt_rows"].shape == (2, 4) and inputs["action_rows"].shape == (3, 3)
    slots = np.concatenate([inputs["prompt_rows"].reshape(-1), inputs["action_rows"].reshape(-1)])
    assert (slots[inputs["unpad"]] == range(batch.num_tokens)).all()
    assert inputs["prompt_visible"].sum() + inputs["action_visible"].sum() == batch.num_tokens
    assert inputs["action_prompt"].tolist() == [0, 1, 0] and "visible" not in inputs


def test_minilm_matches(pairs, attention):
    model = BradleyTerryModel(encoder="minilm", max_length=128, dropout=0.0)
    prompts, actions = _texts(pairs, 6)
    torch.testing.assert_close(OnnxScorer(model).score(prompts, actions), model.score(prompts, actions), rtol=0, atol=1e-5)
