"""Pretrained encoders: all-MiniLM-L6-v2 offline, and any local Hugging Face model directory."""

from __future__ import annotations

import pytest
import torch

from orchrm import BradleyTerryModel, Trainer
from orchrm.errors import ConfigError

from .test_model import _reference_rewards


@pytest.fixture(scope="module")
def task_pairs(pairs):
    """Two training tasks and one validation task: enough for a step or two of MiniLM."""
    keep = sorted(pairs.loc[pairs["split"] == "train", "task_id"].unique())[:2] + sorted(
        pairs.loc[pairs["split"] == "val", "task_id"].unique()
    )[:1]
    return pairs[pairs["task_id"].isin(keep)].reset_index(drop=True)


@pytest.fixture(scope="module")
def minilm():
    return BradleyTerryModel(encoder="minilm", max_length=128, dropout=0.0)


def test_minilm_loads_offline_with_its_own_tokenizer(minilm):
    assert minilm.fitted and minilm.encoder.config.hidden_size == 384 and len(minilm.encoder.encoder.layer) == 6
    assert minilm.tokenizer.encode("Hello world", add_special_tokens=False).tokens == ["hello", "world"]
    assert (minilm.special.cls, minilm.special.sep, minilm.special.pad) == (101, 102, 0)


def test_max_length_beyond_the_encoders_positions_is_refused():
    with pytest.raises(ConfigError, match="exceeds the 512 tokens a sequence of this encoder may hold"):
        BradleyTerryModel(encoder="minilm", max_length=1024)


def test_roberta_position_offset_counts_against_max_length(task_pairs, tmp_path):
    """RoBERTa numbers positions from padding_idx + 1: a 66-row table holds 64 tokens (pad id 1)."""
    from transformers import PreTrainedTokenizerFast, RobertaConfig, RobertaModel

    from orchrm.model.encoders import train_wordpiece

    tok = train_wordpiece(list(task_pairs["prompt"]) + list(task_pairs["chosen"]), vocab_size=300)
    assert tok.token_to_id("[PAD]") != 1  # RoBERTa pads with id 1: give the config the tokenizer's ids
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                            sep_token="[SEP]").save_pretrained(tmp_path)
    torch.manual_seed(0)
    RobertaModel(RobertaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=64, max_position_embeddings=66,
                               pad_token_id=tok.token_to_id("[PAD]"))).save_pretrained(tmp_path)
    offset = tok.token_to_id("[PAD]") + 1
    with pytest.raises(ConfigError, match=f"lower max_length to at most {66 - offset}"):
        BradleyTerryModel(encoder=str(tmp_path), architecture="joint", max_length=66 - offset + 1)
    model = BradleyTerryModel(encoder=str(tmp_path), architecture="joint", max_length=66 - offset)
    long = " ".join(task_pairs["chosen"][:20])  # far beyond max_length: truncated to exactly max_length
    rewards = model.score([long, "short"], [long, long])
    assert rewards.shape == (2,) and torch.isfinite(rewards).all()


def test_minilm_shared_prompt_matches_transformers_forward(minilm, task_pairs):
    prompts, actions = list(task_pairs["prompt"][:3]), list(task_pairs["chosen"][:3])
    with torch.no_grad():
        torch.testing.assert_close(minilm.eval().score(prompts, actions), _reference_rewards(minilm, prompts, actions),
                                   rtol=1e-4, atol=1e-5)


def test_minilm_train_top_layers_only(task_pairs):
    model = BradleyTerryModel(encoder="minilm", max_length=128, train_layers=2, architecture="joint")
    trainable = {n.split(".")[3] if n.startswith("encoder.encoder.layer.") else n.split(".")[0]
                 for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"4", "5", "head"}
    before = {k: v.clone() for k, v in model.state_dict().items()}
    Trainer(model=model, batch_size=64, lr=1e-4, progress=False).train(pairs=task_pairs, epochs=1)
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert any(k.startswith("encoder.encoder.layer.5.") for k in changed)
    assert not any(k.startswith(("encoder.embeddings.", "encoder.encoder.layer.0.")) for k in changed)


def test_minilm_frozen_round_trips_without_the_wheel_files(task_pairs, tmp_path):
    model = BradleyTerryModel(encoder="minilm", max_length=128, train_layers=0)
    Trainer(model=model, batch_size=64, lr=1e-3, progress=False).train(pairs=task_pairs, epochs=1)
    path = model.save(tmp_path / "minilm.pt")
    loaded = BradleyTerryModel.load(path)
    assert loaded.config.encoder == "minilm" and loaded.config.train_layers == 0
    prompts, actions = list(task_pairs["prompt"][:4]), list(task_pairs["rejected"][:4])
    assert torch.equal(loaded.score(prompts, actions), model.score(prompts, actions))


@pytest.fixture(scope="module")
def distilbert_dir(tmp_path_factory, pairs):
    """A tiny DistilBERT (no token types, no shared-prompt support) saved like any HF model."""
    from transformers import DistilBertConfig, DistilBertModel, PreTrainedTokenizerFast

    from orchrm.model.encoders import train_wordpiece

    path = tmp_path_factory.mktemp("distilbert")
    tok = train_wordpiece(list(pairs["prompt"]) + list(pairs["chosen"]), vocab_size=300)
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                            sep_token="[SEP]").save_pretrained(path)
    torch.manual_seed(0)
    config = DistilBertConfig(vocab_size=tok.get_vocab_size(), dim=32, n_layers=1, n_heads=2, hidden_dim=64,
                              max_position_embeddings=128)
    DistilBertModel(config).save_pretrained(path)
    return path


def test_local_model_directory_trains_joint_and_round_trips(distilbert_dir, task_pairs, tmp_path):
    model = BradleyTerryModel(encoder=str(distilbert_dir), architecture="joint", max_length=96)
    result = Trainer(model=model, batch_size=16, lr=3e-3, progress=False).train(pairs=task_pairs, epochs=3)
    assert result.losses[-1] < result.losses[0]
    loaded = BradleyTerryModel.load(model.save(tmp_path / "distil.pt"))
    prompts, actions = list(task_pairs["prompt"][:5]), list(task_pairs["chosen"][:5])
    assert torch.equal(loaded.score(prompts, actions), model.score(prompts, actions))
    one = torch.cat([model.score([p], [a]) for p, a in zip(prompts, actions, strict=True)])
    torch.testing.assert_close(model.score(prompts, actions), one, rtol=1e-6, atol=1e-6)


def test_shared_prompt_needs_a_bert_family_encoder(distilbert_dir):
    with pytest.raises(ConfigError, match="supports only architecture='joint'"):
        BradleyTerryModel(encoder=str(distilbert_dir))
