"""Writing a benchmark's results files: each written whole or not at all (a crash leaves the old file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchrm.traces import atomic_write_bytes


def write_text(path: str | Path, text: str) -> Path:
    """``text`` to ``path`` (parent folders made) through a temporary file moved into place."""
    return atomic_write_bytes(path, lambda tmp: Path(tmp).write_text(text))


def write_json(path: str | Path, data: Any) -> Path:
    """``data`` as indented JSON (values JSON lacks written as strings), atomically."""
    return write_text(path, json.dumps(data, indent=2, default=str) + "\n")
