"""Writing a benchmark's results file: written whole or not at all (a crash leaves the old file).

Every results JSON carries :func:`provenance` at its top level: the ``command`` that reproduces it,
the ``commit`` it was measured at and the ``machine`` it ran on; :mod:`benchmarks.render` quotes
all three on the benchmark's page and in ``docs/results.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from orchrm.util.fileio import atomic_write_bytes

ROOT = Path(__file__).resolve().parents[2]
#: where every benchmark writes ``<name>.json`` (and the renderer ``<name>.md`` beside it)
RESULTS = ROOT / "benchmarks" / "results"


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
    sibling = ROOT.parent / "shared" / "data"
    if "ORCHRM_DATA_DIR" not in os.environ and sibling.is_dir():
        os.environ["ORCHRM_DATA_DIR"] = str(sibling)


def machine(**extra: Any) -> dict[str, Any]:
    """What a results file records of the machine: OS, CPU model and count, Python, load average now,
    and, where the run imported torch, the vector instructions its CPU kernels dispatch to (AVX2,
    AVX512, ...): training at one thread is bit-for-bit repeatable on one kind of kernel, but two
    CPUs that report the same model name may dispatch differently and so train other weights."""
    torch = sys.modules.get("torch")
    return {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        **({"torch_cpu_capability": torch.backends.cpu.get_cpu_capability()} if torch is not None else {}),
        **extra,
    }


def git_commit() -> str:
    """The checkout's commit, with ``+dirty`` when tracked files differ from it."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def command_line(module: str, parser: argparse.ArgumentParser, args: argparse.Namespace, *,
                 skip: tuple[str, ...] = ("out",)) -> str:
    """``python -m <module>`` and every option of ``args`` that differs from ``parser``'s default
    (``skip``: options that only say where to write).

    >>> ap = argparse.ArgumentParser(); _ = ap.add_argument("--tasks", type=int, default=3)
    >>> _ = ap.add_argument("--no-real", action="store_true")
    >>> command_line("benchmarks.collect", ap, ap.parse_args(["--tasks", "5", "--no-real"]))
    'python -m benchmarks.collect --tasks 5 --no-real'
    """
    parts = [f"python -m {module}"]
    for key, value in vars(args).items():
        if key in skip or value == parser.get_default(key):
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            parts.append(flag)
        elif isinstance(value, list | tuple):
            parts.append(" ".join([flag, *map(str, value)]))
        else:
            parts.append(f"{flag} {value}")
    return " ".join(parts)


def provenance(command: str, **machine_extra: Any) -> dict[str, Any]:
    """The top-level keys every results JSON carries: ``command`` (as given), ``commit``
    (:func:`git_commit`) and ``machine`` (:func:`machine` with ``machine_extra``)."""
    return {"command": command, "commit": git_commit(), "machine": machine(**machine_extra)}


def shown_path(path: str | Path) -> str:
    """``path`` as a results file records it: from the project's root when inside it (a results
    file names no folder of the machine it ran on)."""
    path = Path(path).resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.as_posix()


def write_text(path: str | Path, text: str) -> Path:
    """``text`` to ``path`` (parent folders made) through a temporary file moved into place."""
    return atomic_write_bytes(path, lambda tmp: Path(tmp).write_text(text))


def _read_object(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def write_json(path: str | Path, data: dict[str, Any], *, keep: tuple[str, ...] = ()) -> Path:
    """``data`` as indented JSON (values JSON lacks written as strings), atomically. The top-level
    sections named in ``keep`` that the file already there holds and ``data`` lacks are carried
    over: a section another script measures (``train.json``'s ``gpu``) survives a rerun."""
    path = Path(path)
    old = _read_object(path) if keep else {}
    kept = {k: old[k] for k in keep if k in old and k not in data}
    return write_text(path, json.dumps({**data, **kept}, indent=2, default=str) + "\n")


def write_section(path: str | Path, key: str, section: Any) -> Path:
    """The results file at ``path`` with its top-level ``key`` set to ``section`` and every other
    key left as it was (a missing file starts empty), atomically."""
    path = Path(path)
    return write_json(path, {**_read_object(path), key: section})
