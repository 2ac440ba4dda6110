"""Writing a benchmark's results files: each written whole or not at all (a crash leaves the old file),
each naming the machine it was measured on."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

from orchrm.offline import apply_offline_env
from orchrm.traces import atomic_write_bytes

# telemetry off, no downloads (orchrm/offline.env) in every benchmark that imports this module; the
# scripts that import a library reading these settings before this module call it first themselves
apply_offline_env()


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; the platform's processor string elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def use_sibling_data() -> None:
    """Read the real data sets from a ``shared/data`` folder beside the project when
    ``$ORCHRM_DATA_DIR`` is unset (the layout of this project's checkouts)."""
    sibling = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    if "ORCHRM_DATA_DIR" not in os.environ and sibling.is_dir():
        os.environ["ORCHRM_DATA_DIR"] = str(sibling)


def machine(**extra: Any) -> dict[str, Any]:
    """What a results file records of the machine: OS, CPU model and count, Python, load average now."""
    return {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        **extra,
    }


def write_text(path: str | Path, text: str) -> Path:
    """``text`` to ``path`` (parent folders made) through a temporary file moved into place."""
    return atomic_write_bytes(path, lambda tmp: Path(tmp).write_text(text))


def write_json(path: str | Path, data: Any) -> Path:
    """``data`` as indented JSON (values JSON lacks written as strings), atomically."""
    return write_text(path, json.dumps(data, indent=2, default=str) + "\n")
