"""BradleyTerryModel: construction, input layout, scoring invariances, save/load (DESIGN §6)."""

from __future__ import annotations

import json
import pickle
import struct

import pytest
import torch
from safetensors.torch import save_file

from orchrm import BradleyTerryModel, bt_loss
from orchrm.errors import ConfigError, ModelFileError
from orchrm.model import encoders
from orchrm.model.encoders import SpecialIds, pack, truncate_prompt

# Float32 tolerance of the batch-invariance tests: a text's reward may move by a few ulps when the
# batch around it changes shape, because BLAS picks other kernels for other matrix sizes and the
# attention softmax sums over a different count of masked keys; it never moves more than this.
INVARIANCE = dict(rtol=1e-6, atol=1e-6)


def _texts(pairs, split="test"):
    rows = pairs[pairs["split"] == split]
    return list(rows["prompt"]) * 2, list(rows["chosen"]) + list(rows["rejected"])


# --- construction ----------------------------------------------------------------------------


def test_design_constructor_builds_an_unfitted_scratch_model():
    model = BradleyTerryModel(hidden_dim=256, num_layers=3, lr=1e-4)
    assert model.lr == 1e-4
    assert model.config.encoder == "scratch" and model.encoder.config.hidden_size == 256
    assert model.encoder.config.num_hidden_layers == 3
    assert not model.fitted
    with pytest.raises(ConfigError, match="no tokenizer yet"):
        model.score("q", ["a"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(hidden_dim=30, num_heads=4), "multiple of num_heads"),
        (dict(max_length=64, max_prompt_length=63), "max_prompt_length"),
        (dict(hidden_sise=64), "hidden_sise"),
        (dict(architecture="siamese"), "architecture"),
        (dict(encoder="/no/such/model/dir"), "not a Hugging Face model directory"),
    ],
)
def test_bad_arguments_name_the_problem(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        BradleyTerryModel(**kwargs)


def test_fields_next_to_a_config_are_validated_with_it():
    from orchrm.config import ModelConfig

    base = ModelConfig(hidden_dim=32, num_layers=1, num_heads=2)
    assert BradleyTerryModel(config=base, max_length=64).config.max_length == 64
    with pytest.raises(ConfigError, match="max_prompt_length"):
        BradleyTerryModel(config=base, max_length=16, max_prompt_length=90)
    with pytest.raises(ConfigError, match="inside config"):  # would be ignored silently otherwise
        BradleyTerryModel(config=base, hidden_dim=64)


def test_same_seed_same_initial_weights_and_global_rng_untouched():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b = BradleyTerryModel(hidden_dim=32, num_layers=1, num_heads=2), BradleyTerryModel(hidden_dim=32, num_layers=1, num_heads=2)
    assert torch.equal(torch.random.get_rng_state(), before)
    for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(pa, pb), name
    c = BradleyTerryModel(hidden_dim=32, num_layers=1, num_heads=2, seed=1)
    assert not torch.equal(a.head[1].weight, c.head[1].weight)


@pytest.mark.parametrize("encoder", ["scratch", "minilm"])
def test_hidden_and_attention_dropout_are_set_separately(encoder):
    model = BradleyTerryModel(encoder=encoder, dropout=0.2, attention_dropout=0.05)
    assert model.encoder.config.hidden_dropout_prob == 0.2
    assert model.encoder.config.attention_probs_dropout_prob == 0.05
    assert model.head[0].p == 0.2
    # the default keeps attention dropout off, so training runs the fused attention kernel
    assert BradleyTerryModel(encoder=encoder).encoder.config.attention_probs_dropout_prob == 0.0


def test_tokenizer_training_is_deterministic_and_keeps_plan_attributes_whole(pairs):
    texts = list(pairs["prompt"]) + list(pairs["chosen"])
    a, b = BradleyTerryModel(vocab_size=400), BradleyTerryModel(vocab_size=400)
    a.fit_tokenizer(texts)
    b.fit_tokenizer(list(texts))
    assert a.tokenizer.to_str() == b.tokenizer.to_str()
    tokens = a.tokenizer.encode('<agent id="a1" type="WebSearch" queries="2" top_k="5"/>', add_special_tokens=False).tokens
    assert 'type="websearch"' in tokens and len(tokens) <= 6


def test_more_characters_than_vocab_size_never_give_ids_beyond_the_embeddings(pairs, tiny_model_kwargs):
    cjk = " ".join(chr(0x4E00 + i) for i in range(400))  # 400 distinct characters, each seen twice
    model = BradleyTerryModel(**(tiny_model_kwargs | {"vocab_size": 300})).eval()
    model.fit_tokenizer(list(pairs["prompt"]) + list(pairs["chosen"]) + [cjk, cjk])
    assert model.tokenizer.get_vocab_size() <= 300
    assert max(max(ids) for ids in model.tokenize([cjk, *pairs["chosen"]])) < 300
    rewards = model.score("question", [cjk, pairs["chosen"].iloc[0]])
    assert torch.isfinite(rewards).all()


def test_whitespace_is_no_text_to_fit_a_tokenizer_on():
    with pytest.raises(ConfigError, match="no text"):
        BradleyTerryModel(hidden_dim=32, num_layers=1, num_heads=2).fit_tokenizer(["  ", "\n\t", ""])


# --- input layout ----------------------------------------------------------------------------

SPECIAL = SpecialIds(pad=0, cls=2, sep=3)


def test_truncate_prompt_keeps_beginning_and_end():
    assert truncate_prompt(list(range(10)), 4) == [0, 1, 8, 9]
    assert truncate_prompt(list(range(10)), 5) == [0, 1, 2, 8, 9]
    assert truncate_prompt([1, 2], 5) == [1, 2]


@pytest.mark.parametrize("shared", [True, False])
def test_pack_never_drops_the_start_of_the_action(shared):
    prompt, action = list(range(100, 160)), list(range(500, 580))
    b = pack([prompt], [action], [0], special=SPECIAL, max_length=32, prompt_length=12, shared=shared)
    ids = b.input_ids.tolist()
    assert len(ids) == 32  # prompt row + action row, or one joint row
    assert ids[:12] == [2, 100, 101, 102, 103, 104, 155, 156, 157, 158, 159, 3]
    assert ids[12:] == list(range(500, 519)) + [3]
    assert b.positions.tolist() == list(range(32))
    assert b.segments.tolist() == [0] * 12 + [1] * 20
    assert b.pool_lens.tolist() == [20]
    assert b.action_lens.tolist() == ([20] if shared else [32])


def test_pack_shares_one_prompt_row_between_actions():
    b = pack([[7, 7], [8]], [[1], [2, 2], [3]], [0, 1, 0], special=SPECIAL, max_length=16, prompt_length=8, shared=True)
    assert b.prompt_lens.tolist() == [4, 3] and b.action_lens.tolist() == [2, 3, 2]
    assert b.action_prompt.tolist() == [0, 1, 0]
    # action positions continue after their own prompt
    assert b.positions.tolist()[7:] == [4, 5, 3, 4, 5, 4, 5]


def _reference_rewards(model, prompts, actions):
    """Rewards through transformers' own BertModel.forward: one row per (prompt, action), with a
    block mask in shared_prompt mode (prompt tokens do not see the action)."""
    out = []
    for p, a in zip(prompts, actions, strict=True):
        b = pack(model.tokenize([p]), model.tokenize([a]), [0], special=model.special,
                 max_length=model.config.max_length, prompt_length=model.config.prompt_length(), shared=False)
        n, n_action = b.num_tokens, int(b.pool_lens[0])
        kwargs = dict(input_ids=b.input_ids[None], token_type_ids=b.segments[None], position_ids=b.positions[None])
        if model.shared_prompt:
            mask = torch.ones(n, n, dtype=torch.bool)
            mask[: n - n_action, n - n_action :] = False
            kwargs["attention_mask"] = mask[None, None]
        hidden = model.encoder(**kwargs).last_hidden_state[0]
        out.append(model.head(hidden[n - n_action :].mean(0)).squeeze())
    return torch.stack(out)


@pytest.mark.parametrize("bucketed", [False, True], ids=["one-block", "length-buckets"])
@pytest.mark.parametrize("architecture", ["shared_prompt", "joint"])
def test_packed_forward_equals_transformers_forward(pairs, tiny_model_kwargs, architecture, bucketed, monkeypatch):
    if bucketed:  # attend in groups of similar length, as a training batch of plans and long artifacts does
        monkeypatch.setattr(encoders, "BUCKET_MIN_SLOTS", 0)
        monkeypatch.setattr(encoders, "BUCKET_MAX_FILL", 1.0)
        monkeypatch.setattr(encoders, "BUCKET_SPREAD", 1.2)
    model = BradleyTerryModel(**tiny_model_kwargs, architecture=architecture, seed=3).eval()
    model.fit_tokenizer(list(pairs["prompt"]) + list(pairs["chosen"]))
    torch.nn.init.normal_(model.head[3].weight, std=1.0)  # spread the untrained rewards out
    prompts, actions = _texts(pairs)
    if bucketed:
        batch = model.pack(model.tokenize(list(dict.fromkeys(prompts))), model.tokenize(actions), [0] * len(actions))
        assert len(encoders._action_buckets(batch.action_lens, 0)[0]) > 1
    with torch.no_grad():
        torch.testing.assert_close(model.score(prompts, actions), _reference_rewards(model, prompts, actions), rtol=1e-5, atol=1e-5)


def test_length_buckets_give_the_same_loss_and_gradients(pairs, tiny_model_kwargs, monkeypatch):
    from orchrm import bt_loss

    model = BradleyTerryModel(**tiny_model_kwargs, seed=5)
    model.fit_tokenizer(list(pairs["prompt"]) + list(pairs["chosen"]) + list(pairs["rejected"]))
    rows = pairs.head(48)
    prompts = list(dict.fromkeys(rows["prompt"]))
    where = {p: i for i, p in enumerate(prompts)}
    texts = list(rows["chosen"]) + list(rows["rejected"])
    batch = model.pack(model.tokenize(prompts), model.tokenize(texts), [where[p] for p in rows["prompt"]] * 2)

    def loss_and_grads():
        model.zero_grad()
        r = model(batch)
        loss = bt_loss(r[: len(rows)], r[len(rows) :])
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    one_block = loss_and_grads()
    monkeypatch.setattr(encoders, "BUCKET_MIN_SLOTS", 0)
    monkeypatch.setattr(encoders, "BUCKET_MAX_FILL", 1.0)
    monkeypatch.setattr(encoders, "BUCKET_SPREAD", 1.2)
    assert len(encoders._action_buckets(batch.action_lens, 0)[0]) > 1
    bucketed = loss_and_grads()
    torch.testing.assert_close(bucketed[0], one_block[0], rtol=1e-5, atol=1e-6)
    for a, b in zip(bucketed[1], one_block[1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


# --- scoring ---------------------------------------------------------------------------------


def test_scores_do_not_depend_on_batch_size_order_or_neighbours(trained_model, pairs):
    prompts, actions = _texts(pairs)
    one_by_one = torch.cat([trained_model.score([p], [a]) for p, a in zip(prompts, actions, strict=True)])
    for batch_size in (2, 3, 7, 16, 1000):
        torch.testing.assert_close(trained_model.score(prompts, actions, batch_size=batch_size), one_by_one, **INVARIANCE)
    perm = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(0))
    shuffled = trained_model.score([prompts[i] for i in perm], [actions[i] for i in perm])
    torch.testing.assert_close(shuffled, one_by_one[perm], **INVARIANCE)
    assert one_by_one.std() > 0.1  # the model separates texts, so the comparison means something


def test_score_is_deterministic_no_grad_and_keeps_train_mode(trained_model, pairs):
    prompts, actions = _texts(pairs)
    trained_model.train()
    try:
        a = trained_model.score(prompts, actions)
        assert trained_model.training
    finally:
        trained_model.eval()
    b = trained_model.score(prompts, actions)
    assert torch.equal(a, b) and not a.requires_grad and a.dtype == torch.float32


def test_score_broadcasts_one_prompt_and_checks_lengths(trained_model):
    q = "Who founded the city of Brask and in which year was its castle built?"
    plans = ['<agent id="a1" type="CoT" model="small"/>', '<agent id="a1" type="CoT" model="large"/>']
    torch.testing.assert_close(trained_model.score(q, plans), trained_model.score([q, q], plans), **INVARIANCE)
    assert trained_model.score(q, []).shape == (0,)
    with pytest.raises(ValueError, match="2 prompts for 1 actions"):
        trained_model.score([q, q], plans[:1])
    with pytest.raises(TypeError, match="not one string"):  # it would score each character
        trained_model.score(q, plans[0])
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        trained_model.score(q, [], batch_size=0)


@pytest.mark.parametrize(
    ("prompts", "actions", "message"),
    [
        ("q", ["plan", None], "action 1 is NoneType"),
        ("q", [b"plan"], "action 0 is bytes"),
        (["q", 7], ["a", "b"], "prompt 1 is int"),
        (None, ["a"], "prompts must be one text or a list of texts, not NoneType"),
        (b"q", ["a"], "prompts must be one text or a list of texts, not bytes"),
        ("q", 5, "actions must be a list of texts, not int"),
    ],
)
def test_scoring_something_that_is_not_text_names_it(trained_model, prompts, actions, message):
    with pytest.raises(TypeError, match=message):
        trained_model.score(prompts, actions)


def test_text_with_surrogates_is_scored(trained_model):
    """A JSON escape of half an emoji (a truncated trace) decodes to a str the tokenizers refuse;
    so does an emoji written as its two UTF-16 halves."""
    whole, split, half = "plan \U0001F600 step", "plan \ud83d\ude00 step", json.loads('"plan \\ud83d step"')
    assert split != whole and "\ud83d" in half
    rewards = trained_model.score("q", [whole, split, half, "plan \ufffd step"])
    assert rewards[0] == rewards[1] and rewards[2] == rewards[3]  # a split pair is joined; a lone half is U+FFFD


def test_score_is_deterministic_whatever_mode_each_submodule_is_in(trained_model, pairs):
    prompts, actions = _texts(pairs)
    reference = trained_model.score(prompts, actions)
    modes = {m: m.training for m in trained_model.modules()}
    try:
        trained_model.eval()
        trained_model.encoder.train()  # its dropout must not run while scoring
        assert torch.equal(trained_model.score(prompts, actions), reference)
        assert trained_model.encoder.training and not trained_model.head.training
        trained_model.train()
        trained_model.encoder.eval()
        assert torch.equal(trained_model.score(prompts, actions), reference)
        assert trained_model.training and not trained_model.encoder.training  # each mode as it was
    finally:
        for m, training in modes.items():
            m.training = training


def test_normalized_scores_use_stored_mean_and_std(trained_model, pairs):
    prompts, actions = _texts(pairs)
    raw = trained_model.score(prompts, actions)
    norm = trained_model.score(prompts, actions, normalize=True)
    torch.testing.assert_close(norm, (raw - trained_model.reward_mean) / trained_model.reward_std)
    assert trained_model.reward_std > 0


# --- save / load -------------------------------------------------------------------------------


def test_save_load_round_trip_is_bit_exact(trained_model, pairs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = trained_model.save("orchrm_reward_model.pt")  # DESIGN §12, as written
    assert path.name == "orchrm_reward_model.pt" and [p.name for p in tmp_path.iterdir()] == [path.name]
    loaded = BradleyTerryModel.load("orchrm_reward_model.pt")
    for (k, a), (k2, b) in zip(trained_model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(a, b), k
    assert loaded.config == trained_model.config and loaded.lr == trained_model.lr
    assert loaded.tokenizer.to_str() == trained_model.tokenizer.to_str()
    assert (loaded.reward_mean, loaded.reward_std) == (trained_model.reward_mean, trained_model.reward_std)
    assert loaded.manifest["train_pairs"] == trained_model.manifest["train_pairs"] > 0
    prompts, actions = _texts(pairs)
    assert torch.equal(loaded.score(prompts, actions), trained_model.score(prompts, actions))


def test_saved_file_is_plain_safetensors_without_pickle(trained_model, tmp_path):
    path = trained_model.save(tmp_path / "m.pt")
    raw = path.read_bytes()
    header_len = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + header_len])
    assert header["__metadata__"]["format"] == "orchrm.bradley-terry"
    assert json.loads(header["__metadata__"]["model_config"])["hidden_dim"] == trained_model.config.hidden_dim
    assert all(v["dtype"] == "F32" for k, v in header.items() if k != "__metadata__")


def test_save_into_directory_and_load_from_it(trained_model, tmp_path):
    path = trained_model.save(tmp_path)
    assert path == tmp_path / "model.safetensors"
    assert BradleyTerryModel.load(tmp_path).config == trained_model.config


def test_unfitted_scratch_model_cannot_be_saved(tmp_path):
    with pytest.raises(ConfigError, match="tokenizer is fitted"):
        BradleyTerryModel(hidden_dim=32, num_layers=1, num_heads=2).save(tmp_path / "m.pt")


def _damaged_files(trained_model, tmp_path):
    good = trained_model.save(tmp_path / "good.pt").read_bytes()
    half = tmp_path / "half.pt"
    half.write_bytes(good[: len(good) // 2])
    one_short = tmp_path / "one_short.pt"
    one_short.write_bytes(good[:-1])
    appended = tmp_path / "appended.pt"
    appended.write_bytes(good + b"junk")
    foreign = tmp_path / "foreign.safetensors"
    save_file({"weight": torch.zeros(2)}, str(foreign))
    pickled = tmp_path / "pickled.pt"
    torch.save({"weight": torch.zeros(2)}, pickled)
    plain_pickle = tmp_path / "plain.pkl"
    plain_pickle.write_bytes(pickle.dumps({"weight": [0.0, 0.0]}, protocol=4))
    # a safetensors header 128 (0x80) bytes long starts like a pickle's PROTO opcode
    header = json.dumps({"__metadata__": {"format": "other"}}).encode().ljust(0x80)
    header_0x80 = tmp_path / "header_0x80.safetensors"
    header_0x80.write_bytes(len(header).to_bytes(8, "little") + header)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00" * 3)
    hf_dir = tmp_path / "hf_model"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text("{}")
    return [
        (half, rf"truncated \({len(good) // 2} of its {len(good)} bytes\)"),
        (one_short, rf"truncated \({len(good) - 1} of its {len(good)} bytes\)"),
        (appended, "4 bytes longer than its data"),
        (foreign, "not an OrchRM reward model"),
        (pickled, "pickled PyTorch checkpoint"),
        (plain_pickle, "pickled PyTorch checkpoint"),
        (header_0x80, "not an OrchRM reward model"),
        (garbage, "truncated or not a safetensors file"),
        (hf_dir, "Hugging Face model directory"),
        (tmp_path / "missing.pt", "no model file"),
    ]


def test_damaged_or_foreign_files_give_errors_that_say_what_is_wrong(trained_model, tmp_path):
    for path, message in _damaged_files(trained_model, tmp_path):
        with pytest.raises(ModelFileError, match=message):
            BradleyTerryModel.load(path)


def _with_metadata(path, out, **changes):
    """A copy of the model file ``path`` at ``out`` with metadata entries replaced."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not iterable)
    save_file(tensors, str(out), metadata=meta | changes)
    return out


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("lr", "abc", "metadata 'lr' is damaged"),
        ("reward_std", "0.0", "metadata 'reward_std' is damaged"),
        ("reward_mean", "nan", "metadata 'reward_mean' is damaged"),
        ("format_version", "x", "metadata 'format_version' is damaged"),
        ("special_ids", "{}", "metadata 'special_ids' is damaged"),
        ("special_ids", '{"pad": "x", "cls": 2, "sep": 3}', "metadata 'special_ids' is damaged"),
        ("special_ids", '{"pad": 0, "cls": 2, "sep": 100000}', "metadata 'special_ids' is damaged"),
        ("encoder_config", "[1, 2]", "metadata 'encoder_config' is damaged \\(a JSON list, not an object\\)"),
        ("manifest", '"text"', "metadata 'manifest' is damaged"),
        ("encoder_config", None, "saved encoder config is damaged"),
    ],
)
def test_damaged_metadata_gives_a_model_file_error(trained_model, tmp_path, key, value, message):
    path = trained_model.save(tmp_path / "m.pt")
    if value is None:  # a field of the wrong type
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            config = json.loads(f.metadata()["encoder_config"])
        value = json.dumps(config | {"hidden_size": "big"})
    with pytest.raises(ModelFileError, match=message):
        BradleyTerryModel.load(_with_metadata(path, tmp_path / "bad.pt", **{key: value}))


def test_save_refuses_reward_statistics_that_load_would_refuse(trained_model, tmp_path):
    model = BradleyTerryModel.load(trained_model.save(tmp_path / "m.pt"))
    model.reward_std = 0.0
    with pytest.raises(ConfigError, match="std > 0"):
        model.save(tmp_path / "zero_std.pt")
    assert not (tmp_path / "zero_std.pt").exists()


def test_loading_leaves_the_callers_random_state_alone(trained_model, tmp_path):
    path = trained_model.save(tmp_path / "m.pt")
    torch.manual_seed(123)
    state = torch.get_rng_state()
    BradleyTerryModel.load(path)
    assert torch.equal(torch.get_rng_state(), state)


def test_loading_refuses_architectures_that_would_need_remote_code(trained_model, tmp_path):
    from safetensors import safe_open

    path = trained_model.save(tmp_path / "m.pt")
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not iterable)
    config = json.loads(meta["encoder_config"])
    config.update(model_type="totally_custom", auto_map={"AutoModel": "evil.Model"})
    meta["encoder_config"] = json.dumps(config)
    save_file(tensors, str(tmp_path / "evil.pt"), metadata=meta)
    with pytest.raises(ModelFileError, match="unknown model_type 'totally_custom'"):
        BradleyTerryModel.load(tmp_path / "evil.pt")


def test_scores_follow_in_place_weight_updates(trained_model, pairs, tmp_path):
    """Inference caches the stacked query/key/value weights; an in-place update must invalidate it."""
    prompts, actions = _texts(pairs)
    path = trained_model.save(tmp_path / "m.pt")
    model = BradleyTerryModel.load(path)
    before = model.score(prompts, actions)
    with torch.no_grad():
        model.encoder.encoder.layer[0].attention.self.key.weight.mul_(3.0)
    assert not torch.equal(model.score(prompts, actions), before)
    model.load_weights(path)
    assert torch.equal(model.score(prompts, actions), before)
    # writes that leave the version counter alone: through .data, and a fused AdamW step
    key = model.encoder.encoder.layer[0].attention.self.key.weight
    version = key._version
    key.data.mul_(3.0)
    assert key._version == version
    fresh = BradleyTerryModel.load(path)
    fresh.load_state_dict(model.state_dict())
    assert torch.equal(model.score(prompts, actions), fresh.score(prompts, actions))
    model.load_weights(path)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    r = model.score(prompts[:4], actions[:4])  # caches the stacks
    model.train()
    bt_loss(model(model.pack(model.tokenize(prompts[:2]), model.tokenize(actions[:2]), [0, 1])), torch.zeros(2)).backward()
    optimizer.step()
    fresh.load_state_dict(model.state_dict())
    assert not torch.equal(model.score(prompts[:4], actions[:4]), r)
    assert torch.equal(model.score(prompts, actions), fresh.score(prompts, actions))
