"""The contract both CPU scorers keep (OnnxScorer, NativeScorer): model.score's rewards within
1e-5, normalized or not, whatever the chunking; the weights as they were when built; bad calls
and encoders they cannot run named. What is particular to each is in test_onnxrt / test_native."""

from __future__ import annotations

import shutil

import pytest
import torch

from orchrm import BradleyTerryModel
from orchrm.errors import ConfigError

from ._scoring_helpers import texts


@pytest.fixture(params=["OnnxScorer", "NativeScorer"])
def scorer_class(request):
    if request.param == "OnnxScorer":
        pytest.importorskip("onnxruntime", reason="the 'onnx' extra is not installed")
        from orchrm.onnxrt import OnnxScorer

        return OnnxScorer
    if not torch.backends.mkl.is_available():
        pytest.skip("NativeScorer runs on the MKL of PyTorch's x86-64 builds; this PyTorch has none")
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("NativeScorer compiles its forward pass with the machine's C compiler; none is installed")
    from orchrm.native import NativeScorer

    return NativeScorer


def test_trained_model_and_normalized_rewards_match(scorer_class, trained_model, pairs):
    prompts, actions = texts(pairs, 20)
    trained_model.reward_mean, trained_model.reward_std = 0.3, 2.0
    try:
        scorer = scorer_class(trained_model)
        for normalize in (False, True):
            torch.testing.assert_close(
                scorer.score(prompts, actions, normalize=normalize),
                trained_model.score(prompts, actions, normalize=normalize),
                rtol=0,
                atol=1e-5,
            )
    finally:
        trained_model.reward_mean, trained_model.reward_std = 0.0, 1.0


def test_chunking_does_not_change_a_reward(scorer_class, trained_model, pairs):
    prompts, actions = texts(pairs, 20)
    middle = scorer_class(trained_model, max_tokens=120)
    assert len(trained_model.scoring_texts(prompts, actions).chunks(middle.model_config, middle.max_tokens)) > 2
    ref = scorer_class(trained_model, max_tokens=100_000).score(prompts, actions)
    torch.testing.assert_close(scorer_class(trained_model, max_tokens=1).score(prompts, actions), ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(middle.score(prompts, actions), ref, rtol=0, atol=1e-5)


def test_the_scorer_keeps_the_weights_it_was_built_with(scorer_class, pairs, tiny_model_kwargs):
    model = BradleyTerryModel(**tiny_model_kwargs)
    model.fit_tokenizer(list(pairs["prompt"]) + list(pairs["chosen"]))
    prompts, actions = texts(pairs, 4)
    scorer = scorer_class(model)
    before = scorer.score(prompts, actions)
    with torch.no_grad():
        model.head[-1].bias.add_(1.0)
        model.encoder.encoder.layer[0].attention.self.key.weight.mul_(2.0)
    assert torch.equal(scorer.score(prompts, actions), before)
    torch.testing.assert_close(scorer_class(model).score(prompts, actions), model.score(prompts, actions), rtol=0, atol=1e-5)


def test_the_scorer_is_built_from_the_weights_as_they_are_now(scorer_class, pairs, tiny_model_kwargs):
    """Weights changed where no version counter sees it (``.data``), the scorer then built without
    gradients (or on a frozen encoder): it still gets the current query/key/value weights."""
    model = BradleyTerryModel(**tiny_model_kwargs)
    model.fit_tokenizer(list(pairs["prompt"]) + list(pairs["chosen"]))
    prompts, actions = texts(pairs, 6)
    before = model.score(prompts, actions)
    for p in model.encoder.parameters():
        p.data.mul_(1.5)
    with torch.no_grad():
        scorer = scorer_class(model)
    now = model.score(prompts, actions)
    assert (now - before).abs().max() > 1e-3
    torch.testing.assert_close(scorer.score(prompts, actions), now, rtol=0, atol=1e-5)


def test_bad_calls_say_what_is_wrong(scorer_class, trained_model, tiny_model_kwargs):
    scorer = scorer_class(trained_model)
    assert scorer.score("q", []).shape == (0,)
    with pytest.raises(ValueError, match="2 prompts for 1 actions"):
        scorer.score(["a", "b"], ["x"])
    with pytest.raises(ConfigError, match="no tokenizer yet"):
        scorer_class(BradleyTerryModel(**tiny_model_kwargs))
    with pytest.raises(ValueError, match="max_tokens"):
        scorer_class(trained_model, max_tokens=0)
    with pytest.raises(ValueError, match="threads"):
        scorer_class(trained_model, threads=0)


def test_an_activation_it_cannot_run_is_refused(scorer_class, pairs, tiny_model_kwargs):
    model = BradleyTerryModel(**tiny_model_kwargs)
    model.fit_tokenizer(list(pairs["prompt"]))
    model.encoder.config.hidden_act = "silu"
    with pytest.raises(ConfigError, match="knows the activations.*'silu'.*model.score"):
        scorer_class(model)


def test_non_bert_encoders_are_refused(scorer_class, pairs, tmp_path):
    from transformers import DistilBertConfig, DistilBertModel, PreTrainedTokenizerFast

    from orchrm.encoders import train_wordpiece

    tok = train_wordpiece(list(pairs["prompt"]), vocab_size=200)
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                            sep_token="[SEP]").save_pretrained(tmp_path)
    DistilBertModel(DistilBertConfig(vocab_size=tok.get_vocab_size(), dim=16, n_layers=1, n_heads=2, hidden_dim=32,
                                     max_position_embeddings=128)).save_pretrained(tmp_path)
    model = BradleyTerryModel(encoder=str(tmp_path), architecture="joint", max_length=96)
    with pytest.raises(ConfigError, match="supports BERT-family encoders.*model.score"):
        scorer_class(model)
