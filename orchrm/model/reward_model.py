"""The Bradley-Terry reward model R(s, a): an encoder, mean pooling over the action, a scalar head.

>>> model = BradleyTerryModel(hidden_dim=256, num_layers=3, lr=1e-4)  # doctest: +SKIP
>>> Trainer(model=model, batch_size=32).train(pairs=pairs, epochs=10)  # doctest: +SKIP
>>> model.score("What is 2 + 3?", ['<agent id="a1" type="CoT" model="small"/>'])  # doctest: +SKIP
tensor([0.7310])

Training maximises P(chosen beats rejected) = sigmoid(r_w - r_l) (:func:`bt_loss`). The encoder and
the input layout are described in :mod:`orchrm.model.encoders`.

**File format.** :meth:`BradleyTerryModel.save` writes *one* safetensors file whatever its name
(``orchrm_reward_model.pt`` included): fp32 tensors of the encoder and head, and in the header's
metadata the model config, the encoder's ``transformers`` config, the tokenizer (its JSON), the
special token ids, the reward mean/std, the learning rate and a manifest (data hash, counts,
metrics). Loading parses JSON and tensors only: no pickle, no code from the file, no download, and
the round trip is bit-exact. Training checkpoints are the same format with extra ``trainer.*``
tensors (:meth:`BradleyTerryModel.write_file`), so a checkpoint also loads as a model. The file is
read and checked by :class:`orchrm.model.modelfile.ModelFile`.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from orchrm.config import ModelConfig, TrainConfig, settings_error, with_overrides
from orchrm.errors import ConfigError, ModelFileError
from orchrm.model import encoders
from orchrm.model.encoders import SpecialIds, TokenBatch
from orchrm.model.modelfile import FILE_FORMAT, FILE_VERSION, MODEL_FILE, ModelFile
from orchrm.util.fileio import atomic_write_bytes


def bt_loss(
    r_chosen: Tensor,
    r_rejected: Tensor,
    margin: Tensor | None = None,
    *,
    center_rewards_coefficient: float | None = None,
) -> Tensor:
    """Bradley-Terry loss ``mean(-log sigmoid(r_w - r_l - margin))``, a scalar.

    With ``center_rewards_coefficient`` c, adds ``c * mean((r_w + r_l)^2)`` (TRL; Eisenstein et al.
    2023) to keep rewards centred on zero.

    >>> import math
    >>> round(bt_loss(torch.tensor([2.0]), torch.tensor([0.0])).item(), 6) == round(math.log1p(math.exp(-2)), 6)
    True
    """
    diff = r_chosen - r_rejected
    if margin is not None:
        diff = diff - margin
    loss = -F.logsigmoid(diff).mean()
    if center_rewards_coefficient:
        loss = loss + center_rewards_coefficient * torch.mean((r_chosen + r_rejected) ** 2)
    return loss


def pair_up(prompts: str | Sequence[str], actions: Sequence[str]) -> tuple[list[str], list[str]]:
    """Equal-length prompt and action lists for scoring; one prompt string is shared by every action."""
    if isinstance(actions, str):
        raise TypeError("actions must be a list of texts, not one string (it would score each character): pass [action]")
    if isinstance(actions, bytes) or not isinstance(actions, Iterable):
        raise TypeError(f"actions must be a list of texts, not {type(actions).__name__}")
    if not isinstance(prompts, str) and (isinstance(prompts, bytes) or not isinstance(prompts, Iterable)):
        raise TypeError(f"prompts must be one text or a list of texts, not {type(prompts).__name__}")
    actions = list(actions)
    prompts = [prompts] * len(actions) if isinstance(prompts, str) else list(prompts)
    for name, texts in (("action", actions), ("prompt", prompts)):
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise TypeError(f"{name} {bad} is {type(texts[bad]).__name__} ({texts[bad]!r:.40}), not text")
    if len(prompts) != len(actions):
        raise ValueError(
            f"got {len(prompts)} prompts for {len(actions)} actions; give one prompt string (shared by every "
            "action) or a list with one prompt per action"
        )
    return prompts, actions


@contextlib.contextmanager
def _seeded(seed: int):
    """Run a block under ``torch.manual_seed(seed)`` without disturbing the caller's RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


#: where the settings of :class:`BradleyTerryModel` come from, in the errors that name a bad one
_ORIGIN = "BradleyTerryModel(...)"


def _model_config(config: ModelConfig | None, fields: dict[str, Any]) -> ModelConfig:
    return with_overrides(ModelConfig() if config is None else config, fields, origin=_ORIGIN)


def member_config(cfg: ModelConfig, k: int) -> ModelConfig:
    """The config of member ``k`` of an ensemble (``ModelConfig.members``): one model, seed ``seed + k``."""
    return cfg.model_copy(update={"members": 1, "seed": cfg.seed + k})


def _learning_rate(lr: Any) -> float:
    """``lr`` checked as the Trainer checks its own (:attr:`TrainConfig.lr`: a finite number > 0;
    None, the Trainer's "the model's lr", and text are no learning rate here)."""
    if lr is None or isinstance(lr, str | bytes):
        raise settings_error(_ORIGIN, [("lr", f"give a positive number, not {lr!r}")])
    return float(with_overrides(TrainConfig(), {"lr": lr}, origin=_ORIGIN).lr)


class BradleyTerryModel(nn.Module):
    """Reward model R(prompt, action) -> float (DESIGN §6).

    ``BradleyTerryModel(encoder="scratch", hidden_dim=256, num_layers=3, lr=3e-4, **fields)`` where
    ``fields`` are the other :class:`ModelConfig` fields (``architecture``, ``max_length``,
    ``train_layers``, ...), or ``BradleyTerryModel(config=ModelConfig(...))``. ``lr`` is the
    :class:`~orchrm.model.trainer.Trainer`'s default learning rate for this model.

    A ``scratch`` model has no tokenizer until :meth:`fit_tokenizer` (the Trainer calls it on the
    training texts). Attributes: ``config``, ``lr``, ``reward_mean``/``reward_std`` (of the
    training rewards, for :meth:`score` with ``normalize=True``), ``manifest`` (saved metadata).

    With ``members=K`` > 1 the model is an ensemble of K models of this config, member ``k``
    initialised with seed ``seed + k``: ``encoder`` and ``head`` are member 0, ``extra`` holds the
    others, and the reward is the mean of the members' rewards, each standardised by its own
    training reward statistics (``member_stats``). The Trainer trains the members apart
    (:meth:`member` / :meth:`set_member`); scoring runs every member.
    """

    def __init__(
        self,
        encoder: str = "scratch",
        hidden_dim: int = 256,
        num_layers: int = 3,
        lr: float = 3e-4,
        *,
        config: ModelConfig | None = None,
        **fields: Any,
    ) -> None:
        super().__init__()
        named = {"encoder": encoder, "hidden_dim": hidden_dim, "num_layers": num_layers}
        if config is None:
            fields = named | fields
        elif named != {"encoder": "scratch", "hidden_dim": 256, "num_layers": 3}:
            raise ConfigError("give encoder, hidden_dim and num_layers inside config=ModelConfig(...), or leave config out")
        cfg = _model_config(config, fields)
        lr = _learning_rate(lr)
        with _seeded(cfg.seed):
            if cfg.encoder == "scratch":
                encoder_module, tokenizer, special = encoders.build_scratch_encoder(cfg), None, encoders.scratch_special_ids()
            else:
                encoder_module, tokenizer, special = encoders.load_pretrained_encoder(cfg.encoder, cfg)
            self._setup(cfg, encoder_module, tokenizer, special, lr=lr)
        if cfg.members > 1:
            self._attach([BradleyTerryModel(config=member_config(cfg, k), lr=lr) for k in range(1, cfg.members)])

    def _setup(self, cfg: ModelConfig, encoder: nn.Module, tokenizer, special: SpecialIds, *, lr: float) -> None:
        if cfg.architecture == "shared_prompt" and not encoders.supports_shared_prompt(encoder):
            raise ConfigError(
                f"encoder {cfg.encoder!r} ({encoder.config.model_type}) supports only architecture='joint'; "
                "'shared_prompt' needs a BERT-family encoder"
            )
        width = encoder.config.hidden_size
        positions = encoders.usable_positions(encoder)
        if positions is not None and cfg.max_length > positions:
            raise ConfigError(
                f"max_length={cfg.max_length} exceeds the {positions} tokens a sequence of this encoder may hold "
                f"(its position table); lower max_length to at most {positions}"
            )
        layers = getattr(encoder.config, "num_hidden_layers", 0)
        if cfg.train_layers is not None and cfg.train_layers > layers:
            raise ConfigError(f"train_layers={cfg.train_layers} but the encoder has only {layers} layers")
        self.config = cfg
        self.lr = lr
        self.special = special
        self.tokenizer = tokenizer
        self.encoder = encoder
        self.head = nn.Sequential(
            nn.Dropout(cfg.dropout), nn.Linear(width, cfg.hidden_dim), nn.GELU(), nn.Linear(cfg.hidden_dim, 1)
        )
        self.reward_mean = 0.0
        self.reward_std = 1.0
        self.manifest: dict[str, Any] = {}
        self.extra = nn.ModuleList()
        self._apply_train_layers()

    def _attach(self, others: Sequence[BradleyTerryModel]) -> None:
        """Make this model an ensemble of itself (member 0) and ``others`` (members 1...); the
        ensemble tokenizes for all of them (:meth:`member` hands each copy its tokenizer)."""
        self.extra = nn.ModuleList(others)
        stats = torch.zeros(len(others) + 1, 2)
        stats[:, 1] = 1.0
        self.register_buffer("member_stats", stats)  # (K, 2): each member's training reward mean and std

    @classmethod
    def _assemble(cls, cfg: ModelConfig, encoder: nn.Module, tokenizer, special: SpecialIds, *, lr: float):
        model = cls.__new__(cls)
        nn.Module.__init__(model)
        with _seeded(cfg.seed):
            model._setup(cfg, encoder, tokenizer, special, lr=lr)
        return model

    def _apply_train_layers(self) -> None:
        k = self.config.train_layers
        if k is None:
            return
        self.encoder.requires_grad_(False)
        layers = self.encoder.encoder.layer if hasattr(self.encoder, "encoder") else []
        for layer in list(layers)[len(layers) - k :] if k else []:
            layer.requires_grad_(True)

    # ---------------------------------------------------------------------------------------
    # properties

    @property
    def members(self) -> int:
        """How many models this one scores with (``ModelConfig.members``)."""
        return len(self.extra) + 1

    def member(self, k: int) -> BradleyTerryModel:
        """A copy of member ``k`` as a model of its own (config :func:`member_config`), for training."""
        if not 0 <= k < self.members:
            raise IndexError(f"member {k} of a model with {self.members} member(s)")
        source = self.extra[k - 1] if k else self
        one = type(self)._assemble(member_config(self.config, k), copy.deepcopy(source.encoder), self.tokenizer, self.special, lr=self.lr)
        one.head.load_state_dict(source.head.state_dict())
        return one

    @torch.no_grad()
    def set_member(self, k: int, trained: BradleyTerryModel) -> None:
        """Take ``trained`` (a :meth:`member` copy, trained) as member ``k``: its weights, its reward
        statistics, and its tokenizer when this model has none yet."""
        if self.members == 1:
            raise ConfigError("set_member is for an ensemble (ModelConfig.members > 1)")
        if self.tokenizer is not None and trained.tokenizer is not None and trained.tokenizer.to_str() != self.tokenizer.to_str():
            raise ConfigError(
                f"member {k} reads text with another tokenizer than this ensemble's: train every member from the "
                "ensemble's member() copies, or on a pair table with a val split, so that each fits the same one"
            )
        target = self.extra[k - 1] if k else self
        target.encoder.load_state_dict(trained.encoder.state_dict())
        target.head.load_state_dict(trained.head.state_dict())
        self.member_stats[k] = torch.tensor([trained.reward_mean, trained.reward_std])
        if self.tokenizer is None:
            self.tokenizer = trained.tokenizer

    @property
    def fitted(self) -> bool:
        """Whether the model has a tokenizer (a scratch model gets one from :meth:`fit_tokenizer`)."""
        return self.tokenizer is not None

    @property
    def encoder_trainable(self) -> bool:
        """False when the encoder is frozen (``train_layers=0``): its features can be cached."""
        return self.config.train_layers != 0

    @property
    def shared_prompt(self) -> bool:
        return self.config.architecture == "shared_prompt"

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    # ---------------------------------------------------------------------------------------
    # text -> tokens

    def fit_tokenizer(self, texts: Sequence[str]) -> None:
        """Train the scratch encoder's WordPiece tokenizer on ``texts`` (prompts and actions)."""
        if self.config.encoder != "scratch":
            raise ConfigError(f"encoder {self.config.encoder!r} brings its own tokenizer; only 'scratch' is fitted")
        texts = [encoders.valid_text(t) for t in texts if t and not t.isspace()]
        if not texts:
            raise ConfigError("cannot fit the tokenizer on no text: give pairs with non-empty prompts and actions")
        tok = encoders.train_wordpiece(
            texts, vocab_size=self.config.vocab_size, pretokenizer=self.config.pretokenizer
        )
        self.tokenizer = encoders.raw_tokenizer(tok)

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens or truncation."""
        if self.tokenizer is None:
            raise ConfigError(
                "this scratch model has no tokenizer yet: train it (Trainer.train fits one on the pairs) "
                "or call model.fit_tokenizer(texts)"
            )
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)  # fast: no offsets
        return [e.ids for e in encode([encoders.valid_text(t) for t in texts], add_special_tokens=False)]

    def pack(
        self, prompt_ids: Sequence[Sequence[int]], action_ids: Sequence[Sequence[int]], action_prompt: Sequence[int]
    ) -> TokenBatch:
        """Frame, truncate and pack token ids (see :func:`orchrm.model.encoders.pack`)."""
        return encoders.pack(
            prompt_ids,
            action_ids,
            action_prompt,
            special=self.special,
            max_length=self.config.max_length,
            prompt_length=self.config.prompt_length(),
            shared=self.shared_prompt,
        )

    # ---------------------------------------------------------------------------------------
    # forward

    def features(self, batch: TokenBatch) -> Tensor:
        """Pooled action vectors (A, width) before the head."""
        if encoders.supports_shared_prompt(self.encoder):
            hidden = encoders.encode_packed(self.encoder, batch)
        else:
            hidden = encoders.encode_generic(self.encoder, batch, self.special.pad)
        return encoders.pool_actions(hidden, batch)

    def forward(self, inputs: TokenBatch | Tensor) -> Tensor:
        """Rewards (A,) for a packed batch, or for pooled ``features`` (A, width) of a frozen encoder
        (one model only: an ensemble's members each have their own)."""
        if isinstance(inputs, Tensor):
            if self.extra:
                raise ConfigError("an ensemble (members > 1) scores packed batches; cached features belong to one member")
            return self.head(inputs).squeeze(-1).float()
        own = self.head(self.features(inputs)).squeeze(-1).float()
        if not self.extra:
            return own
        rewards = torch.stack([own, *(m(inputs) for m in self.extra)])
        stats = self.member_stats.to(rewards.dtype)
        return ((rewards - stats[:, :1]) / stats[:, 1:]).mean(0)

    @torch.no_grad()
    def scale_rewards(self, factor: float) -> None:
        """Multiply every reward by ``factor`` > 0 (the head's last layer; an ensemble's every
        member and the means it standardises them by); the order of any rewards is kept."""
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"the reward scale must be a finite positive number, got {factor}")
        for m in (self, *self.extra):
            last = m.head[-1]
            last.weight.mul_(factor)
            last.bias.mul_(factor)
        if self.extra:
            self.member_stats[:, 0].mul_(factor)

    def score(
        self,
        prompts: str | Sequence[str],
        actions: Sequence[str],
        *,
        batch_size: int = 64,
        normalize: bool = False,
    ) -> Tensor:
        """Rewards (N,) float32 on the CPU for N (prompt, action) texts; no gradients, eval mode.

        ``prompts`` is one string shared by every action, or one per action. Deterministic; a
        text's reward does not depend on ``batch_size`` or on the other texts of the call (to
        within float32 rounding in attention, < 1e-5; tests pin it). Each distinct prompt of a
        batch is encoded once. ``normalize`` maps rewards to ``(r - reward_mean) / reward_std``.
        """
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        prompts, actions = pair_up(prompts, actions)
        if not actions:
            return torch.zeros(0)
        modes = [(m, m.training) for m in self.modules()]  # every module's own, restored after
        self.eval()
        device = self.device
        out = []
        try:
            with torch.inference_mode(), encoders.cached_qkv(self):
                for batch in self._scoring_batches(prompts, actions, batch_size):
                    out.append(self(batch.to(device)).cpu())
        finally:
            for m, training in modes:
                m.training = training
        rewards = torch.cat(out)
        return (rewards - self.reward_mean) / self.reward_std if normalize else rewards

    def _scoring_batches(self, prompts: list[str], actions: list[str], batch_size: int) -> Iterator[TokenBatch]:
        """Packed batches of at most ``batch_size`` actions, in order, each with every prompt it
        uses once; all texts tokenized in one call, each distinct prompt once."""
        distinct = list(dict.fromkeys(prompts))
        index = {p: i for i, p in enumerate(distinct)}
        ids = self.tokenize(distinct + actions)  # one tokenizer call
        prompt_ids, action_ids = ids[: len(distinct)], ids[len(distinct) :]
        which = [index[p] for p in prompts]
        for lo in range(0, len(actions), batch_size):
            chunk = range(lo, min(lo + batch_size, len(actions)))
            local = {j: k for k, j in enumerate(dict.fromkeys(which[i] for i in chunk))}
            yield self.pack(
                [prompt_ids[j] for j in local], [action_ids[i] for i in chunk], [local[which[i]] for i in chunk]
            )

    # ---------------------------------------------------------------------------------------
    # save / load

    def save(self, path: str | os.PathLike) -> Path:
        """Write the model to one safetensors file at ``path`` (atomically); returns the path.

        A directory (existing, or a path ending in a separator) gets ``model.safetensors`` inside.
        """
        return self.write_file(path)

    def write_file(
        self,
        path: str | os.PathLike,
        *,
        extra_tensors: dict[str, Tensor] | None = None,
        extra_metadata: dict[str, str] | None = None,
    ) -> Path:
        """:meth:`save`, with ``extra_tensors`` and ``extra_metadata`` stored beside the model's own
        (a training checkpoint's ``trainer.*`` state); the file still loads as a model."""
        from safetensors.torch import save_file

        if self.tokenizer is None:
            raise ConfigError("cannot save a scratch model before its tokenizer is fitted: train it first")
        if not (math.isfinite(self.reward_mean) and math.isfinite(self.reward_std) and self.reward_std > 0):
            raise ConfigError(
                f"reward_mean {self.reward_mean} / reward_std {self.reward_std}: the statistics must be finite and "
                "the std > 0 (Trainer.train sets them)"
            )
        target = Path(path)
        if target.is_dir() or str(path).endswith(os.sep):
            target = target / MODEL_FILE
        tensors = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in self.state_dict().items()}
        overlap = set(tensors) & set(extra_tensors or {})
        if overlap:
            raise ValueError(f"extra tensors clash with model tensors: {sorted(overlap)[:3]}")
        tensors.update(extra_tensors or {})
        metadata = {
            "format": FILE_FORMAT,
            "format_version": str(FILE_VERSION),
            "model_config": self.config.model_dump_json(),
            "encoder_config": json.dumps(encoders.hf_config_dict(self.encoder), sort_keys=True),
            "tokenizer": self.tokenizer.to_str(),
            "special_ids": json.dumps(vars(self.special)),
            "lr": repr(self.lr),
            "reward_mean": repr(float(self.reward_mean)),
            "reward_std": repr(float(self.reward_std)),
            "manifest": json.dumps(self.manifest, sort_keys=True, default=str),
            **(extra_metadata or {}),
        }
        return atomic_write_bytes(target, lambda tmp: save_file(tensors, tmp, metadata=metadata))

    @classmethod
    def load(cls, path: str | os.PathLike, *, device: str | torch.device = "cpu") -> BradleyTerryModel:
        """Load a model written by :meth:`save` (or a training checkpoint); eval mode.

        Raises :class:`ModelFileError` naming the problem for a missing, truncated, foreign or
        corrupt file.
        """
        reader = ModelFile(path)
        with _seeded(reader.model_config.seed):  # its random initialisation is overwritten by the weights
            encoder = encoders.encoder_from_config(reader.json("encoder_config"))
        ids = reader.json("special_ids")
        try:
            special = SpecialIds(**ids)
        except TypeError as exc:
            raise ModelFileError(f"{reader.path}: metadata 'special_ids' is damaged ({exc})") from None
        vocab = getattr(encoder.config, "vocab_size", None) or math.inf
        if not all(type(v) is int and 0 <= v < vocab for v in ids.values()):
            raise ModelFileError(f"{reader.path}: metadata 'special_ids' is damaged ({ids}: not token ids); re-save the model")
        cfg, tokenizer, lr = reader.model_config, reader.tokenizer(), reader.number("lr")
        model = cls._assemble(cfg, encoder, tokenizer, special, lr=lr)
        if cfg.members > 1:
            model._attach([
                cls._assemble(member_config(cfg, k), encoders.encoder_from_config(reader.json("encoder_config")), tokenizer, special, lr=lr)
                for k in range(1, cfg.members)
            ])
        model.load_weights(reader)
        return model.to(device).eval()

    def load_weights(self, source: str | os.PathLike | ModelFile) -> None:
        """Copy weights, tokenizer and reward statistics from a model file into this model, in place."""
        reader = source if isinstance(source, ModelFile) else ModelFile(source)
        state = reader.tensors(prefix_excluded="trainer.")
        mine = self.state_dict()
        missing, unexpected = sorted(set(mine) - set(state)), sorted(set(state) - set(mine))
        if missing or unexpected:
            raise ModelFileError(
                f"{reader.path}: weights do not match this architecture "
                f"(missing {missing[:3]}{'...' if len(missing) > 3 else ''}, "
                f"unexpected {unexpected[:3]}{'...' if len(unexpected) > 3 else ''})"
            )
        for key, value in state.items():
            if mine[key].shape != value.shape:
                raise ModelFileError(f"{reader.path}: tensor {key} has shape {tuple(value.shape)}, expected {tuple(mine[key].shape)}")
        self.load_state_dict(state, strict=True)
        self.tokenizer = reader.tokenizer()
        self.reward_mean = reader.number("reward_mean")
        self.reward_std = reader.number("reward_std")
        self.manifest = reader.json("manifest")


__all__ = ["BradleyTerryModel", "ModelFile", "bt_loss", "MODEL_FILE"]
