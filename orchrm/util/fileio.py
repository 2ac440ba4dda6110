"""Atomic file writes and output-folder checks, shared by the tables (:mod:`orchrm.data.ingest`), the
model files (:mod:`orchrm.model.reward_model`) and the trainer.

A write goes to a temporary file in the target folder, is flushed to disk and then renamed over
the target, so a crash never leaves half a file behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from orchrm.errors import OutputPathError


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _new_file_mode() -> int:
    """The permissions ``open()`` gives a new file: 0o666 less the process's umask."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


#: read once at import: reading the umask means setting it, which is not thread-safe
_NEW_FILE_MODE = _new_file_mode()


def atomic_write_bytes(path: str | os.PathLike, write) -> Path:
    """Call ``write(tmp_path)`` then move the finished file onto ``path`` atomically.

    The file gets the permissions of the file it replaces, or those ``open()`` would give a new
    one (not the owner-only mode of the temporary file), so a model or table shared with a team
    stays readable to it. A write the system refuses (no permission, a file where a folder must
    be, a full disk) raises :class:`OutputPathError` naming the path; the old file stays.
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise _cannot_write(target, exc) from exc
    os.close(fd)
    try:
        mode = target.stat().st_mode & 0o7777
    except OSError:
        mode = _NEW_FILE_MODE
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _cannot_write(target, exc) from exc
        raise
    return target


def _cannot_write(target: Path, exc: OSError) -> OutputPathError:
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(target) else ""
    return OutputPathError(f"cannot write {target}: {exc.strerror or exc}{where}; choose another path")


def folder_problem(folder: Path) -> str | None:
    """Why files could not be written in ``folder`` (made where missing), or None."""
    existing = folder
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"no permission to write in {existing}"
    return None


def check_output_dir(path: str | os.PathLike) -> Path:
    """Fail now, before any work, where ``path`` cannot be a folder to write in: it is a file, a
    file stands where one of its parents must be, or the nearest existing parent is not
    writable. Creates nothing."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise OutputPathError(f"output folder {target} is a file; give a folder (new or existing)")
    problem = folder_problem(target)
    if problem:
        raise OutputPathError(f"cannot write in {target}: {problem}; choose another path")
    return target


__all__ = ["atomic_write_bytes", "check_output_dir", "folder_problem"]
