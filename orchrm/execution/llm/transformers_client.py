"""A local causal LM through ``transformers``: a model directory or a GGUF file, no download.

Loading a GGUF file dequantizes every tensor (about 20 s for SmolLM2-135M on two cores), so loaded
models are cached per (path, GGUF file, device) for the life of the process: every client, agent
and server thread that names the same model shares one copy. Samples are batched: the ``n``
samples of one call (SelfConsistency's k votes) and the conversations of :meth:`complete_many`
go through one ``generate`` call, left-padded, which is where a CPU gets most of its tokens/s.

>>> from orchrm.execution.llm.models import smollm2_gguf      # doctest: +SKIP
>>> client = TransformersClient(smollm2_gguf())                # doctest: +SKIP
>>> client.complete([{"role": "user", "content": "2+3?"}], max_tokens=16, temperature=0).texts  # doctest: +SKIP
('2 + 3 = 5',)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchrm.errors import BackendError
from orchrm.execution.llm.base import Completions, Message

#: architectures ``generate`` can continue a chat with (``LlamaForCausalLM``, ``GPT2LMHeadModel``...)
_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")


@dataclass
class LoadedModel:
    """A model and its tokenizer on ``device``, as the cache holds them. ``lock`` serialises
    ``generate``: one batch at a time uses all the cores better than several that compete."""

    model: Any
    tokenizer: Any
    device: str
    load_s: float
    eos_ids: tuple[int, ...]
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


_CACHE: dict[tuple[str, str | None, str], LoadedModel] = {}
_CACHE_LOCK = threading.Lock()


def _resolve(model: str | Path, gguf_file: str | None) -> tuple[Path, str | None]:
    """(model directory, GGUF file name in it or None), checked to exist. A ``model`` that is
    itself a ``.gguf`` file stands for its folder and its name."""
    path = Path(model).expanduser()
    if gguf_file is None and path.suffix == ".gguf":
        path, gguf_file = path.parent, path.name
    if gguf_file is not None:
        full = path / gguf_file  # an absolute gguf_file stands on its own
        if not full.is_file():
            raise BackendError(f"GGUF file {str(full)!r} does not exist: set backend.gguf_file to a .gguf file inside "
                               "backend.model (or backend.model to the .gguf file itself)")
        return full.parent.resolve(), full.name
    if not path.is_dir():
        raise BackendError(f"model path {str(path)!r} does not exist: set backend.model to a local model directory "
                           "(config.json, weights, tokenizer) or to a .gguf file; nothing is downloaded")
    if not (path / "config.json").is_file():
        ggufs = sorted(p.name for p in path.glob("*.gguf"))
        hint = f"; it holds {ggufs}: set backend.gguf_file to one" if ggufs else ""
        raise BackendError(f"{str(path)!r} is not a transformers model directory (no config.json){hint}")
    return path.resolve(), None


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _check_causal(directory: Path) -> None:
    """Refuse an encoder (BERT...) before its weights load: it would load as a language-model
    head on top of random weights and write noise."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise BackendError(f"cannot read the model config of {str(directory)!r}: {exc}") from exc
    architectures = list(getattr(config, "architectures", None) or [])
    if getattr(config, "is_encoder_decoder", False) or (architectures and not any(a.endswith(_CAUSAL_SUFFIXES) for a in architectures)):
        raise BackendError(f"{str(directory)!r} is a {'/'.join(architectures) or config.model_type} model, not a causal "
                           "language model: the transformers backend needs a chat (instruct) causal LM")


def load_causal_lm(model: str | Path, *, gguf_file: str | None = None, device: str | None = None) -> LoadedModel:
    """The causal LM at ``model`` (a directory, or a GGUF file in it) on ``device`` (None: a GPU
    when there is one), loaded once per process; later calls with the same arguments return the
    same :class:`LoadedModel`. Raises :class:`BackendError` naming the path and the fix."""
    directory, gguf_file = _resolve(model, gguf_file)
    device = device or _default_device()
    key = (str(directory), gguf_file, device)
    with _CACHE_LOCK:  # held while loading: a second thread waits for the first copy, not loads its own
        if key not in _CACHE:
            _CACHE[key] = _load(directory, gguf_file, device)
        return _CACHE[key]


def _load(directory: Path, gguf_file: str | None, device: str) -> LoadedModel:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import is_accelerate_available, is_gguf_available

    if gguf_file and not (is_gguf_available() and is_accelerate_available()):
        raise BackendError("loading a GGUF file needs the `gguf` and `accelerate` packages: pip install gguf accelerate "
                           "(or pip install 'orchrm[llm]')")
    if gguf_file is None:  # a GGUF file holds a causal LM by construction (and reading its config costs seconds)
        _check_causal(directory)
    where = str(directory / (gguf_file or ""))
    start = time.perf_counter()
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=gguf_file, local_files_only=True)
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        lm = AutoModelForCausalLM.from_pretrained(directory, gguf_file=gguf_file, local_files_only=True, dtype=dtype)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise BackendError(f"cannot load the causal LM {where!r}: {exc}") from exc
    if not getattr(tokenizer, "chat_template", None):
        raise BackendError(f"the tokenizer of {where!r} has no chat template: use a chat (instruct) model")
    try:
        lm = lm.to(device).eval()
    except (RuntimeError, AssertionError) as exc:  # an unknown or absent device
        raise BackendError(f"cannot put {where!r} on device {device!r}: {exc}; set backend.device (cpu, cuda, cuda:1)") from exc
    tokenizer.padding_side = "left"  # decoder-only batches: every prompt ends where generation starts
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    eos = lm.generation_config.eos_token_id
    eos_ids = {*(eos if isinstance(eos, list) else [eos] if eos is not None else []), tokenizer.eos_token_id}
    return LoadedModel(lm, tokenizer, device, time.perf_counter() - start, tuple(sorted(i for i in eos_ids if i is not None)))


class TransformersClient:
    """:class:`~orchrm.execution.llm.base.LLMClient` over a local causal LM.

    ``model`` is a model directory, a ``.gguf`` file, or the folder of ``gguf_file``. Token counts
    come from the model's tokenizer: ``prompt_tokens`` is the chat-templated prompt once per sample
    run (``n`` times for ``n`` samples), ``completion_tokens`` the generated tokens, the stop token
    included. At temperature 0 the one greedy completion is generated once and repeated ``n``
    times, and counted once. ``max_batch_size`` bounds the sequences of one ``generate`` call.
    """

    name = "transformers"

    def __init__(self, model: str | Path, *, gguf_file: str | None = None, device: str | None = None,
                 max_batch_size: int = 16) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self._loaded = load_causal_lm(model, gguf_file=gguf_file, device=device)
        directory, gguf = _resolve(model, gguf_file)
        self.model = str(directory / gguf) if gguf else str(directory)
        self.device = self._loaded.device
        self.max_batch_size = max_batch_size

    @property
    def load_s(self) -> float:
        """Seconds the first load of this model took in this process (0 cost for later clients)."""
        return self._loaded.load_s

    def prompt_token_ids(self, messages: Sequence[Message]) -> list[int]:
        """The chat-templated prompt of ``messages`` as the model reads it, assistant turn opened."""
        try:
            ids = self._loaded.tokenizer.apply_chat_template([dict(m) for m in messages], add_generation_prompt=True,
                                                             tokenize=True, return_dict=True)["input_ids"]
        except (KeyError, TypeError, ValueError) as exc:
            raise BackendError(f"cannot apply the chat template of {self.model!r} to the messages: {exc}") from exc
        return list(ids)

    def complete(self, messages: Sequence[Message], *, max_tokens: int, temperature: float, n: int = 1) -> Completions:
        return self.complete_many([messages], max_tokens=max_tokens, temperature=temperature, n=n)[0]

    def complete_many(self, conversations: Sequence[Sequence[Message]], *, max_tokens: int, temperature: float,
                      n: int = 1) -> list[Completions]:
        """:meth:`complete` for each of ``conversations``, their samples batched together (in
        chunks of ``max_batch_size`` sequences); one :class:`Completions` per conversation, in order."""
        if max_tokens < 1 or n < 1 or temperature < 0:
            raise ValueError(f"need max_tokens >= 1, n >= 1, temperature >= 0; got {max_tokens}, {n}, {temperature}")
        prompts = [self.prompt_token_ids(c) for c in conversations]
        limit = getattr(self._loaded.model.config, "max_position_embeddings", None)
        for ids in prompts:
            if limit and len(ids) + max_tokens > limit:
                raise BackendError(f"a prompt of {len(ids)} tokens plus max_tokens={max_tokens} exceeds the context of "
                                   f"{self.model!r} ({limit} tokens): shorten the prompt or lower backend.max_tokens")
        runs = 1 if temperature == 0 else n
        rows = [i for i in range(len(prompts)) for _ in range(runs)]
        done: list[tuple[str, int, str]] = []
        for start in range(0, len(rows), self.max_batch_size):
            chunk = rows[start:start + self.max_batch_size]
            done += self._generate([prompts[i] for i in chunk], max_tokens=max_tokens, temperature=temperature)
        out = []
        for i, ids in enumerate(prompts):
            mine = done[i * runs:(i + 1) * runs]
            texts = [t for t, _, _ in mine] * (n // runs)
            reasons = [r for _, _, r in mine] * (n // runs)
            out.append(Completions(tuple(texts), prompt_tokens=len(ids) * runs,
                                   completion_tokens=sum(k for _, k, _ in mine), finish_reasons=tuple(reasons)))
        return out

    def _generate(self, prompts: list[list[int]], *, max_tokens: int, temperature: float) -> list[tuple[str, int, str]]:
        """(text, generated tokens, finish reason) for each prompt, in one left-padded batch."""
        import torch

        loaded = self._loaded
        tok, width = loaded.tokenizer, max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), tok.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids):] = torch.tensor(ids)
            attention[row, width - len(ids):] = 1
        sampling = ({"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature > 0
                    else {"do_sample": False, "temperature": None, "top_k": None, "top_p": None})
        with loaded.lock, torch.inference_mode():
            generated = loaded.model.generate(
                input_ids=input_ids.to(loaded.device), attention_mask=attention.to(loaded.device),
                max_new_tokens=max_tokens, pad_token_id=tok.pad_token_id, eos_token_id=list(loaded.eos_ids), **sampling)
        new = generated[:, width:].tolist()
        out = []
        for ids in new:
            stop = next((k for k, t in enumerate(ids) if t in loaded.eos_ids), None)
            kept = ids if stop is None else ids[:stop]
            count = len(ids) if stop is None else stop + 1
            out.append((tok.decode(kept, skip_special_tokens=True), count, "length" if stop is None else "stop"))
        return out

    def __repr__(self) -> str:
        return f"TransformersClient(model={self.model!r}, device={self.device!r})"
