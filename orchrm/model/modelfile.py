"""The reader of a saved reward model file: one safetensors file, checked before anything is trusted.

:class:`ModelFile` validates a file written by :meth:`orchrm.model.reward_model.BradleyTerryModel.save` (or a
training checkpoint, the same format with extra ``trainer.*`` tensors): its length against its
header, that it is safetensors and not a pickle, the ``orchrm.bradley-terry`` format and version,
the required metadata and the stored model config; tensors are read on demand and checked finite.
It parses JSON and tensors only: no pickle, no code from the file.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError
from torch import Tensor

from orchrm.config import ModelConfig
from orchrm.errors import ModelFileError
from orchrm.model import encoders

FILE_FORMAT = "orchrm.bradley-terry"
FILE_VERSION = 1
#: file name of the model inside a directory (``orchrm train --out DIR`` writes DIR/model.safetensors)
MODEL_FILE = "model.safetensors"


def _data_length(path: Path, header_len: int) -> int:
    """The byte length of a safetensors file's tensor data, from its JSON header (the largest data offset)."""
    with open(path, "rb") as fh:
        fh.seek(8)
        raw = fh.read(header_len)
    try:
        header = json.loads(raw)
        return max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        raise ModelFileError(f"{path} has a damaged safetensors header: copy it again or re-save it") from None


class ModelFile:
    """Read-only view of a saved model file: validated metadata, then tensors on demand."""

    REQUIRED = ("model_config", "encoder_config", "tokenizer", "special_ids", "lr", "reward_mean", "reward_std", "manifest")

    def __init__(self, path: str | os.PathLike) -> None:
        from safetensors import safe_open

        target = Path(path)
        if target.is_dir():
            if not (target / MODEL_FILE).is_file():
                hint = (
                    " (it looks like a Hugging Face model directory: use it as BradleyTerryModel(encoder=...))"
                    if (target / "config.json").exists()
                    else ""
                )
                raise ModelFileError(f"{target} is a directory without {MODEL_FILE}{hint}")
            target = target / MODEL_FILE
        if not target.is_file():
            raise ModelFileError(f"no model file at {target}")
        self.path = target
        with open(target, "rb") as fh:
            head = fh.read(9)
        # safetensors: an 8-byte little-endian header length, then the JSON header's "{"; a pickle
        # starts with PROTO (0x80, protocol 2-5), torch.save's zip with "PK". The header length's
        # first byte can be 0x80 too, so a file that reads as safetensors is never called a pickle.
        pickled = head[:2] == b"PK" or (head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"))
        if pickled and head[8:9] != b"{":
            raise ModelFileError(
                f"{target} is a pickled PyTorch checkpoint, not an OrchRM model file; OrchRM never unpickles "
                "(it could run code). Re-save the model with BradleyTerryModel.save"
            )
        size = target.stat().st_size
        header_len = int.from_bytes(head[:8], "little") if len(head) >= 9 else size
        if header_len + 8 > size:
            raise ModelFileError(
                f"{target} is truncated or not a safetensors file ({size} bytes; the header "
                "announces more): copy it again or re-save it with BradleyTerryModel.save"
            )
        expected = 8 + header_len + _data_length(target, header_len)
        if size != expected:
            what = f"truncated ({size} of its {expected} bytes)" if size < expected else f"{size - expected} bytes longer than its data"
            raise ModelFileError(f"{target} is {what}: copy it again or re-save it with BradleyTerryModel.save")
        try:
            with safe_open(str(target), framework="pt") as f:
                metadata = f.metadata() or {}
                self._keys = list(f.keys())
        except Exception as exc:  # safetensors raises its own error type for a damaged header
            raise ModelFileError(f"{target} is not a readable safetensors file ({exc})") from None
        if metadata.get("format") != FILE_FORMAT:
            raise ModelFileError(
                f"{target} is a safetensors file but not an OrchRM reward model (no '{FILE_FORMAT}' metadata); "
                "to use a Hugging Face encoder, pass its directory as BradleyTerryModel(encoder=...)"
            )
        try:
            version = int(metadata.get("format_version", "0"))
        except ValueError:
            raise ModelFileError(f"{target}: metadata 'format_version' is damaged ({metadata['format_version']!r})") from None
        if version > FILE_VERSION:
            raise ModelFileError(f"{target} has format version {version}; this orchrm reads up to {FILE_VERSION}: upgrade orchrm")
        missing = [k for k in self.REQUIRED if k not in metadata]
        if missing:
            raise ModelFileError(f"{target} lacks metadata {missing}: the file is damaged; re-save it")
        self.metadata = metadata
        try:
            self.model_config = ModelConfig.model_validate_json(metadata["model_config"])
        except ValidationError as exc:
            raise ModelFileError(f"{target}: stored model config is invalid ({exc.errors()[0]['msg']})") from None

    def number(self, key: str) -> float:
        """A finite float of the metadata (``lr`` and ``reward_std`` also > 0), or :class:`ModelFileError`."""
        try:
            value = float(self.metadata[key])
        except (KeyError, ValueError):
            value = math.nan
        if not math.isfinite(value) or (key in ("lr", "reward_std") and value <= 0):
            raise ModelFileError(f"{self.path}: metadata {key!r} is damaged ({self.metadata.get(key)!r}); re-save the model")
        return value

    def json(self, key: str) -> dict[str, Any]:
        """A JSON object of the metadata, or :class:`ModelFileError`."""
        try:
            value = json.loads(self.metadata[key])
        except (KeyError, json.JSONDecodeError) as exc:
            raise ModelFileError(f"{self.path}: metadata {key!r} is damaged ({exc})") from None
        if not isinstance(value, dict):
            raise ModelFileError(f"{self.path}: metadata {key!r} is damaged (a JSON {type(value).__name__}, not an object); re-save the model")
        return value

    def tokenizer(self):
        try:
            return encoders.tokenizer_from_json(self.metadata["tokenizer"])
        except Exception as exc:  # tokenizers raises a bare Exception for bad JSON
            raise ModelFileError(f"{self.path}: stored tokenizer cannot be read ({exc})") from None

    def tensors(self, *, prefix: str = "", prefix_excluded: str | None = None) -> dict[str, Tensor]:
        """Tensors whose names start with ``prefix`` (the prefix removed)."""
        from safetensors import safe_open

        out = {}
        try:
            with safe_open(str(self.path), framework="pt") as f:
                for key in self._keys:
                    if key.startswith(prefix) and not (prefix_excluded and key.startswith(prefix_excluded)):
                        out[key[len(prefix) :]] = f.get_tensor(key)
        except Exception as exc:
            raise ModelFileError(f"{self.path}: tensor data is damaged ({exc}); copy it again or re-save it") from None
        for key, value in out.items():
            if value.is_floating_point() and not torch.isfinite(value).all():
                raise ModelFileError(f"{self.path}: tensor {prefix}{key} holds NaN or infinite values")
        return out


__all__ = ["FILE_FORMAT", "FILE_VERSION", "MODEL_FILE", "ModelFile"]
