"""Sandboxed execution of generated Python code (the ``code`` domain's real executor, DESIGN §4).

Untrusted programs never run in the caller's process. :class:`CodeExecutor` keeps one long-lived
*zygote* process (a fresh interpreter started with a scrubbed environment that pre-imports the
standard library modules generated code tends to use) and sends it jobs over a pipe. For every
job the zygote forks a child (about a millisecond, instead of the 30-50 ms of a new interpreter)
that, before running anything it was given:

- becomes the leader of its own process group (on timeout the zygote kills the child by pid
  and its group, and it always reaps the child and removes its directory);
- points stdin/stdout/stderr at ``/dev/null`` and closes every other inherited descriptor but
  the result pipe, on which every line starts with a random per-job token: a program that
  writes to the pipe itself fails every check instead of forging a result;
- moves into a fresh temporary working directory (removed afterwards) and replaces its
  environment with a minimal one (``PATH``, ``HOME`` and ``TMPDIR`` set to that directory, a
  locale), so no secret of the caller's environment is visible;
- sets resource limits: address space (``RLIMIT_AS``), CPU time, file size, open files, no core
  dumps, no child processes;
- installs an audit hook (:pep:`578`) that refuses network access (every ``socket.*`` event),
  process creation (``os.fork``, ``os.posix_spawn``, ``os.exec*``, ``os.system``,
  ``subprocess.Popen``, ...), signals to other processes, native code through ``ctypes``,
  writes, renames or deletions outside the working directory, opening a directory outside it
  (its descriptor would let ``dir_fd=`` calls write there unseen), reading anything under
  ``/proc`` (other processes' environments, the child's own descriptors and memory), and
  importing the C modules that write files without an audit event (``sqlite3``, ``dbm.gnu``,
  ``dbm.ndbm``).

The zygote also moves itself into a new, empty network namespace when the kernel allows it
(``unshare(CLONE_NEWNET)``, usually needs root or user namespaces), so even code that slipped
past the audit hook finds no network interface but loopback.

Each job is the program plus a list of :class:`Check` items, run one by one in the program's
namespace, each under its own CPU-time alarm (a wall-clock alarm timed out, under load, checks
that finish when the machine is idle, and made the same collection differ from run to run; CPU
time narrows that to programs near their budget, which a busy core still makes cost more), with
a wall-clock alarm at four times that for a check that waits instead of computing; the child
streams one result per check, so a program that hangs on one input still gets credit for the
others (after a timeout the next checks get a short alarm, and after two timeouts in a row the
rest fail unrun: see :class:`Limits`). Every failure is a failed check with a reason —
``"timeout after 0.5s"``, ``"memory limit exceeded (MemoryError)"``,
``"network blocked: socket.connect"``, ``"process creation blocked: os.fork"``,
``"crashed (signal SIGSEGV)"`` — never a hang or an exception in the caller. Results are cached
in-process by a hash of the job (mutated programs repeat).

The sandbox stops accidents, loops, bombs and sloppy code; it is not a boundary against a
determined attacker who studies CPython internals (audit hooks can be bypassed from inside the
interpreter, and a program that walks its caller's frames can read the result token). Run a deployment that executes hostile code inside a container or VM as well.

This module imports only the standard library: the zygote loads it on its own, without the
``orchrm`` package.

>>> ex = CodeExecutor()                                                     # doctest: +SKIP
>>> r = ex.run("def f(x):\\n    return x + 1", [Check("assert f(1) == 2"), Check("f(2)", kind="eval")])  # doctest: +SKIP
>>> r.passed, r.results[1].output                                           # doctest: +SKIP
(2, '3')
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_HEADER = struct.Struct(">I")
_OUTPUT_CHARS = 300
_REASON_CHARS = 300
# what generated code for programming puzzles imports; loaded once in the zygote, shared by forks
_PRELOAD = (
    "math", "re", "string", "itertools", "functools", "collections", "heapq", "bisect", "hashlib",
    "statistics", "fractions", "decimal", "random", "typing", "json", "copy", "operator", "datetime",
)


# ----------------------------------------------------------------------------------------------
# public records
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """One thing to run after the program has been loaded.

    - ``kind="exec"``: ``source`` is statements (e.g. an ``assert``); it passes when it raises
      nothing.
    - ``kind="eval"``: ``source`` is an expression; its value's ``repr`` is reported as
      ``output``; with ``expected`` (an expression) it passes when the two are equal (floats
      compared with a relative tolerance of 1e-6), without it whenever it evaluates.
    """

    source: str
    kind: str = "exec"
    expected: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("exec", "eval"):
            raise ValueError(f"Check.kind must be 'exec' or 'eval', got {self.kind!r}")


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one :class:`Check`: ``reason`` is empty when it passed; ``output`` is the
    truncated ``repr`` of an ``eval`` check's value (None otherwise or when it raised);
    ``error`` is the exception type name when it raised (``"Timeout"`` for the alarm)."""

    passed: bool
    reason: str = ""
    output: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class RunResult:
    """All check results of one job, in order. ``status``: ``ok`` (the program loaded and every
    check reported), ``load_error`` (the program itself raised; every check fails with that
    reason), ``timeout`` (the job ran past its total time and was killed), ``crashed`` (the
    child died, e.g. on a signal) or ``error`` (the sandbox itself failed, not the program:
    the checks were not run, so the result says nothing about the program and is not cached)."""

    results: tuple[CheckResult, ...]
    status: str
    message: str = ""

    @property
    def passed(self) -> int:
        return sum(r.passed for r in self.results)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def pass_rate(self) -> float:
        """Fraction of checks passed (0.0 for a job without checks)."""
        return self.passed / self.total if self.results else 0.0


@dataclass(frozen=True)
class Limits:
    """Per-job limits. ``check_timeout_s``: CPU time allowed per check (and for loading the
    program; a check that waits rather than computes is stopped after four times that of wall
    clock); ``strike_timeout_s``: the alarm for the remaining checks once one check of the job
    has timed out, and after ``max_strikes`` timeouts in a row the remaining checks fail without
    running (a program that hangs twice hangs again: like HumanEval's own harness, which fails a
    hanging program outright, this keeps a loop from costing every check's alarm);
    ``total_timeout_s``: wall clock for the whole job,
    after which the child's process group is killed; ``memory_mb``: address-space limit of the
    child; ``file_mb``: largest file it may write; ``open_files``: descriptor limit."""

    check_timeout_s: float = 1.0
    strike_timeout_s: float = 0.1
    max_strikes: int = 2
    total_timeout_s: float = 5.0
    memory_mb: int = 512
    file_mb: int = 16
    open_files: int = 64

    def __post_init__(self) -> None:
        if not (self.check_timeout_s > 0 and self.strike_timeout_s > 0 and self.total_timeout_s > 0 and self.memory_mb > 0):
            raise ValueError("Limits: timeouts and memory_mb must be positive")


# ----------------------------------------------------------------------------------------------
# the caller's side
# ----------------------------------------------------------------------------------------------
_BOOT = (
    "import sys, importlib.util as u\n"
    "s = u.spec_from_file_location('orchrm_codeexec_zygote', sys.argv[1])\n"
    "m = sys.modules[s.name] = u.module_from_spec(s)\n"
    "s.loader.exec_module(m)\n"
    "m._zygote_main()\n"
)


def _minimal_env(workdir: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        # fixed hash seed: set and dict-of-str orders (and so printed outputs) are reproducible
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _stop_process(proc: subprocess.Popen) -> None:
    try:
        if proc.stdin:
            proc.stdin.close()
    except OSError:
        pass
    try:
        proc.kill()
        proc.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        pass
    for stream in (proc.stdout,):
        try:
            if stream:
                stream.close()
        except OSError:
            pass


class CodeExecutor:
    """Runs programs against checks in a sandboxed child process (see the module docstring).

    Thread-safe (one job at a time per executor); after the caller forks, the child process
    starts its own zygote on first use. ``close()`` (or garbage collection, or interpreter exit)
    stops the zygote.
    """

    def __init__(self, limits: Limits | None = None, *, cache_size: int = 50_000) -> None:
        self.limits = limits or Limits()
        self.cache_size = cache_size
        self._cache: OrderedDict[str, RunResult] = OrderedDict()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._owner: int | None = None
        self._finalizer: weakref.finalize | None = None
        self.jobs_run = 0
        self.cache_hits = 0
        self.network_namespace: bool | None = None

    # pickling (e.g. a domain object sent to a worker) carries the settings, not the process
    def __getstate__(self) -> dict:
        return {"limits": self.limits, "cache_size": self.cache_size}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["limits"], cache_size=state["cache_size"])

    def __enter__(self) -> CodeExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the zygote (a later job starts a new one)."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._proc, self._owner, self._finalizer = None, None, None

    # the zygote ---------------------------------------------------------------------------
    def _ensure(self) -> subprocess.Popen:
        if self._proc is not None and self._owner != os.getpid():
            # inherited through fork: the pipes belong to the parent's zygote; leave it alone
            self._proc, self._owner, self._finalizer = None, None, None
        if self._proc is not None and self._proc.poll() is not None:
            self._close_locked()
        if self._proc is None:
            workdir = tempfile.gettempdir()
            proc = subprocess.Popen(
                [sys.executable, "-s", "-P", "-B", "-c", _BOOT, os.path.abspath(__file__)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=_minimal_env(workdir),
                cwd=workdir,
                close_fds=True,
                start_new_session=True,
            )
            self._proc, self._owner = proc, os.getpid()
            self._finalizer = weakref.finalize(self, _stop_process, proc)
            hello = self._recv(proc, deadline=time.monotonic() + 60.0)
            if hello is None or not hello.get("ready"):
                self._close_locked()
                raise RuntimeError("the code sandbox worker failed to start")
            self.network_namespace = bool(hello.get("netns"))
        return self._proc

    @staticmethod
    def _send(proc: subprocess.Popen, message: dict) -> None:
        data = json.dumps(message).encode()
        proc.stdin.write(_HEADER.pack(len(data)) + data)
        proc.stdin.flush()

    @staticmethod
    def _recv(proc: subprocess.Popen, deadline: float) -> dict | None:
        """One length-prefixed JSON message from the zygote, or None on EOF or deadline."""
        fd = proc.stdout.fileno()

        def read(n: int) -> bytes | None:
            buf = b""
            while len(buf) < n:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    return None
                chunk = os.read(fd, n - len(buf))
                if not chunk:
                    return None
                buf += chunk
            return buf

        header = read(_HEADER.size)
        body = None if header is None else read(_HEADER.unpack(header)[0])
        return None if body is None else json.loads(body)

    # jobs ---------------------------------------------------------------------------------
    def run(
        self,
        program: str,
        checks: Sequence[Check],
        *,
        prelude: str = "",
        bind: Mapping[str, str] | None = None,
        limits: Limits | None = None,
    ) -> RunResult:
        """Load ``prelude`` then ``program`` in a fresh namespace, bind ``{alias: name}`` (e.g.
        ``{"candidate": "add"}``, failing every check when ``name`` is not defined), then run
        each check. Never raises for anything the program does."""
        lim = limits or self.limits
        job = {
            "program": program,
            "prelude": prelude,
            "bind": dict(bind or {}),
            "checks": [[c.kind, c.source, c.expected] for c in checks],
            "check_timeout": lim.check_timeout_s,
            "strike_timeout": min(lim.strike_timeout_s, lim.check_timeout_s),
            "max_strikes": lim.max_strikes,
            "total_timeout": lim.total_timeout_s,
            "memory": lim.memory_mb * 2**20,
            "fsize": lim.file_mb * 2**20,
            "nofile": lim.open_files,
        }
        key = hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.cache_hits += 1
                return hit
            result = self._run_locked(job, len(checks))
            if result.status != "error":
                self._cache[key] = result
                if len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
            return result

    def _run_locked(self, job: dict, n_checks: int) -> RunResult:
        for _ in range(2):
            try:
                proc = self._ensure()
                self._send(proc, job)
                reply = self._recv(proc, deadline=time.monotonic() + job["total_timeout"] + 30.0)
            except (OSError, ValueError, RuntimeError) as exc:
                reply, error = None, f"{type(exc).__name__}: {exc}"
            else:
                error = "the sandbox worker stopped answering"
            if reply is not None:
                self.jobs_run += 1
                results = tuple(CheckResult(bool(p), r, o, e) for p, r, o, e in reply["results"])
                return RunResult(results, reply["status"], reply.get("message", ""))
            self._close_locked()  # a dead or stuck zygote: restart it once and retry
        reason = f"sandbox error: {error}"
        return RunResult(tuple(CheckResult(False, reason) for _ in range(n_checks)), "error", reason)


# ----------------------------------------------------------------------------------------------
# the zygote and the child (run in the sandbox worker process, standard library only)
# ----------------------------------------------------------------------------------------------
class SandboxViolation(PermissionError):
    """Raised inside the sandbox by the audit hook when the program attempts a refused action."""


class _Timeout(BaseException):
    """Raised inside the sandbox by the per-check alarm (a BaseException: ``except Exception``
    in the program does not swallow it)."""


_PROCESS_EVENTS = frozenset(
    {
        "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system",
        "os.startfile", "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill",
        "os.setuid", "os.setgid", "os.chroot", "resource.setrlimit", "resource.prlimit",
    }
)
_PATH_EVENTS = {  # event -> indices of the path arguments that must stay inside the workdir
    "os.remove": (0,), "os.rename": (0, 1), "os.rmdir": (0,), "os.mkdir": (0,), "os.chmod": (0,),
    "os.chown": (0,), "os.link": (0, 1), "os.symlink": (0, 1), "os.truncate": (0,),
    "os.utime": (0,), "shutil.rmtree": (0,), "shutil.move": (0, 1), "shutil.copyfile": (1,),
    "os.chflags": (0,), "os.lchown": (0,), "os.mkfifo": (0,), "os.mknod": (0,),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_FOLDER_FLAGS = getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_PATH", 0)
# extension modules that create and write files from C without raising an audit event (SQLite's
# connect, ATTACH and VACUUM INTO; dbm files): the hook cannot see where they write, so they are
# refused on import (the zygote must never preload them, or this check comes too late)
_NATIVE_WRITERS = frozenset({"_sqlite3", "_dbm", "_gdbm"})


def _install_audit_hook(workdir: str, violations: list[str]) -> None:
    root = os.path.realpath(workdir) + os.sep

    def absolute(path: object) -> str:
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            path = os.fspath(path)
        return os.path.normpath(os.path.join(os.getcwd(), path))

    def inside(path: object) -> bool:
        if isinstance(path, int):
            return True  # an already open descriptor
        return (absolute(path) + os.sep).startswith(root)

    def under_proc(full: str) -> bool:
        # /proc/<pid>/environ and cmdline of the caller, /proc/self/fd/<n> (which reopens the
        # result pipe) and /proc/self/mem: all reachable through symlinks too (/dev/fd, /proc/self/root)
        return any(p == "/proc" or p.startswith("/proc/") for p in (full, os.path.realpath(full)))

    def refuse(kind: str, event: str) -> None:
        message = f"{kind} blocked: {event}"
        violations.append(message)
        raise SandboxViolation(message)

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            if path is None or isinstance(path, int):
                return
            flags = flags if isinstance(flags, int) else 0
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or flags & _WRITE_FLAGS
            full = absolute(path)
            if not (full + os.sep).startswith(root):
                if writing:
                    refuse("filesystem write", f"open({path!r}) outside the working directory")
                # the "open" event does not carry os.open's dir_fd: a descriptor of an outside
                # folder would let a later relative open write there unseen
                if flags & _FOLDER_FLAGS or os.path.isdir(full):
                    refuse("filesystem write", f"open({path!r}), a folder outside the working directory")
            if under_proc(full):
                refuse("filesystem read", f"open({path!r}) under /proc (other processes and the sandbox's own pipes)")
        elif event.startswith("socket."):
            refuse("network", event)
        elif event in _PROCESS_EVENTS:
            refuse("process creation" if event not in ("os.kill", "os.killpg", "signal.pthread_kill") else "signal", event)
        elif event.startswith("ctypes."):
            refuse("native code", event)
        elif event == "import" and args and args[0] in _NATIVE_WRITERS:
            # as a missing module, not a violation: the standard library falls back where it can
            # (dbm to the pure-Python dbm.dumb, whose writes the hook sees)
            raise ModuleNotFoundError(
                f"filesystem write blocked: import {args[0]} (it writes files the sandbox cannot check)", name=args[0]
            )
        elif event in _PATH_EVENTS:
            for i in _PATH_EVENTS[event]:
                if i < len(args) and args[i] is not None and not inside(args[i]):
                    refuse("filesystem write", f"{event} outside the working directory")

    sys.addaudithook(hook)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _short_repr(value: object) -> str:
    # object reprs carry memory addresses (`<generator object f at 0x7f...>`); drop them so the
    # same program gives the same text in every run and process (votes and artifacts are stable)
    text = _ADDRESS.sub("", repr(value))
    return text if len(text) <= _OUTPUT_CHARS else text[: _OUTPUT_CHARS - 3] + "..."


def _equal(a: object, b: object) -> bool:
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool) and not isinstance(b, bool):
        if isinstance(a, float) or isinstance(b, float):
            return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
        return a == b
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    result = a == b
    return result if isinstance(result, bool) else bool(result)


def _evaluate(code: object, expected: str | None, scope: dict) -> tuple[str, bool]:
    """The value of ``code`` (its repr) and whether it equals ``expected`` (True without one)."""
    value = eval(code, scope)
    out = _short_repr(value)
    if expected is None:
        return out, True
    return out, _equal(value, eval(compile(expected, "<expected>", "eval"), scope))


def _reason(exc: BaseException, timeout: float, violations: list[str], seen: int) -> tuple[str, str]:
    if len(violations) > seen:
        return violations[seen], type(exc).__name__
    if isinstance(exc, _Timeout):
        return f"timeout after {timeout:g}s", "Timeout"
    if isinstance(exc, MemoryError):
        return "memory limit exceeded (MemoryError)", "MemoryError"
    if isinstance(exc, AssertionError):
        detail = str(exc)
        return ("assertion failed" + (f": {detail}" if detail else ""))[:_REASON_CHARS], "AssertionError"
    try:
        detail = str(exc)
    except Exception:  # a hostile __str__
        detail = ""
    return f"{type(exc).__name__}: {detail}"[:_REASON_CHARS], type(exc).__name__


def _child(job: dict, workdir: str, wfd: int, token: bytes) -> None:
    """Runs in the forked child: isolate, limit, hook, then run the job and stream results, one
    line each, prefixed with the job's ``token`` (the program can write to ``wfd`` too, but
    does not know the token, so it cannot forge a result)."""
    import resource

    os.setpgid(0, 0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else map(str, range(3, 1024)):
        if int(name) > 2 and int(name) not in (wfd, devnull):
            with contextlib.suppress(OSError):
                os.close(int(name))
    os.close(devnull)
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(_minimal_env(workdir))
    tempfile.tempdir = workdir
    total = float(job["total_timeout"])
    for limit, value in (
        (resource.RLIMIT_AS, int(job["memory"])),
        (resource.RLIMIT_CPU, int(math.ceil(total)) + 1),
        (resource.RLIMIT_FSIZE, int(job["fsize"])),
        (resource.RLIMIT_NOFILE, int(job["nofile"])),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, 0),
    ):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(limit, (value, value))
    sys.setrecursionlimit(3000)

    def alarm(signum: int, frame: object) -> None:
        raise _Timeout()

    signal.signal(signal.SIGPROF, alarm)
    signal.signal(signal.SIGALRM, alarm)

    def emit(record: list) -> None:
        os.write(wfd, token + json.dumps(record).encode() + b"\n")

    violations: list[str] = []
    _install_audit_hook(workdir, violations)
    timeout = float(job["check_timeout"])
    # the program's namespace is a real module (the child's own sys.modules: nothing leaks), so
    # what looks its module up by name works: @dataclass, typing.get_type_hints, pickle
    module = types.ModuleType("__sandbox__")
    module.__builtins__ = __builtins__
    sys.modules["__sandbox__"] = module
    ns: dict = module.__dict__

    def timed(fn):
        # the budget is CPU time (user + system), so a check's verdict hardly depends on what
        # else the machine runs; one that waits without computing (a sleep, a blocking read)
        # is stopped by the wall-clock alarm at _WAIT_FACTOR times the budget
        signal.setitimer(signal.ITIMER_PROF, timeout)
        signal.setitimer(signal.ITIMER_REAL, timeout * _WAIT_FACTOR)
        try:
            return fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.setitimer(signal.ITIMER_PROF, 0)

    load_error = None
    seen = len(violations)
    try:
        if job["prelude"]:
            timed(lambda: exec(compile(job["prelude"], "<prelude>", "exec"), ns))
        timed(lambda: exec(compile(job["program"], "<program>", "exec"), ns))
        for alias, name in job["bind"].items():
            if name not in ns:
                raise NameError(f"the program does not define {name!r}")
            ns[alias] = ns[name]
    except BaseException as exc:  # noqa: BLE001 - everything the program does is a result
        reason, _ = _reason(exc, timeout, violations, seen)
        load_error = "program failed to load: " + reason
    emit(["load", load_error])
    if load_error is not None:
        return
    strikes = 0
    for kind, source, expected in job["checks"]:
        if strikes >= int(job["max_strikes"]):
            emit([False, f"not run: the program timed out on {strikes} checks in a row", None, "Timeout"])
            continue
        seen = len(violations)
        try:
            if kind == "exec":
                timed(functools.partial(exec, compile(source, "<check>", "exec"), dict(ns)))
                record = [True, "", None, None]
            else:
                code = compile(source, "<check>", "eval")
                out, ok = timed(functools.partial(_evaluate, code, expected, dict(ns)))
                record = [bool(ok), "" if ok else f"returned {out}, expected {expected}"[:_REASON_CHARS], out, None]
            if len(violations) > seen and not record[0]:
                record[1] = violations[seen]
        except BaseException as exc:  # noqa: BLE001
            reason, error = _reason(exc, timeout, violations, seen)
            record = [False, reason, None, error]
            if isinstance(exc, _Timeout):
                timeout = float(job["strike_timeout"])
        strikes = strikes + 1 if record[3] == "Timeout" else 0
        emit(record)


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


_WAIT_FACTOR = 4.0  # a check's wall-clock alarm, in multiples of its CPU-time budget
_LINE_BYTES = 64 * 1024  # a result line is well under 4 KiB; anything longer is not the harness's
_REAP_S = 5.0  # how long a SIGKILLed child may take to die before the zygote stops waiting
_UNREAPED: set[int] = set()  # children that outlived SIGKILL (e.g. stuck in the kernel): reaped later


def _result(line: bytes, token: bytes, *, first: bool) -> list | None:
    """The record on one line of the result pipe, or None when the harness did not write it
    (no token, not JSON, or the wrong shape: the program wrote to the pipe)."""
    if not line.startswith(token):
        return None
    try:
        rec = json.loads(line[len(token) :])
    except ValueError:
        return None
    if not isinstance(rec, list):
        return None
    if first:
        ok = len(rec) == 2 and rec[0] == "load" and (rec[1] is None or isinstance(rec[1], str))
    else:
        ok = len(rec) == 4 and isinstance(rec[0], bool) and isinstance(rec[1], str) and all(x is None or isinstance(x, str) for x in rec[2:])
    return rec if ok else None


def _wait(pid: int, pidfd: int | None, deadline: float) -> int | None:
    """The wait status of ``pid`` once it has exited, or None if it still runs at ``deadline``."""
    while True:
        done, wstatus = os.waitpid(pid, os.WNOHANG)
        if done:
            return wstatus
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        if pidfd is None:
            time.sleep(min(left, 0.005))
        else:
            select.select([pidfd], [], [], left)  # readable once the process has exited


def _kill(pid: int) -> None:
    """SIGKILL the child and its process group. The child itself is signalled by pid: it may
    have left its group (``os.setpgid`` raises no audit event), and the hook stops it from
    starting processes of its own, so nothing else of the job can be left running."""
    for kill in (os.kill, os.killpg):
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)


def _run_job(job: dict) -> dict:
    """In the zygote: fork a child for ``job``, collect its streamed results within the time
    limit, kill it (and its process group) when the limit passes or when the program writes to
    the result pipe itself, always reap it and remove its folder, and summarise."""
    import shutil

    for pid in list(_UNREAPED):
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                continue
        except ChildProcessError:
            pass
        _UNREAPED.discard(pid)
    n = len(job["checks"])
    total = float(job["total_timeout"])
    token = os.urandom(16).hex().encode()
    workdir = tempfile.mkdtemp(prefix="orchrm-exec-")
    try:
        rfd, wfd = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(rfd)
            os.close(wfd)
            raise
        if pid == 0:  # the child
            status = 0
            try:
                os.close(rfd)
                _child(job, workdir, wfd, token)
            except BaseException:  # noqa: BLE001
                status = 1
            finally:
                os._exit(status)
        os.close(wfd)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        pidfd = None
        with contextlib.suppress(AttributeError, OSError):
            pidfd = os.pidfd_open(pid)
        deadline = time.monotonic() + total + 0.25  # grace for fork and loading
        records: list = []
        load: list | None = None
        killed = forged = False
        wstatus = None
        try:
            buf = b""
            while not forged:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([rfd], [], [], left)[0]:
                    killed = True
                    break
                chunk = os.read(rfd, 65536)
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                forged = len(buf) > _LINE_BYTES
                for line in lines:
                    rec = _result(line, token, first=load is None)
                    if rec is None:
                        forged = True
                        break
                    if load is None:
                        load = rec
                    else:
                        records.append(rec)
            if not (killed or forged):
                # the pipe is closed, but a program that closed it itself may still be running
                wstatus = _wait(pid, pidfd, deadline)
                killed = wstatus is None
        finally:
            if wstatus is None:
                _kill(pid)
                wstatus = _wait(pid, pidfd, time.monotonic() + _REAP_S)
                if wstatus is None:
                    _UNREAPED.add(pid)
            os.close(rfd)
            if pidfd is not None:
                os.close(pidfd)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    if forged:
        status, reason = "crashed", "crashed (the program wrote to the sandbox's result pipe)"
        load, records = None, []
    elif killed:
        status, reason = "timeout", f"timeout after {total:g}s (job killed)"
    elif os.WIFSIGNALED(wstatus):
        sig = os.WTERMSIG(wstatus)
        if sig == signal.SIGXCPU:
            status, reason = "timeout", "cpu time limit exceeded"
        else:
            status, reason = "crashed", f"crashed (signal {_signal_name(sig)})"
    elif load is None or (load[1] is None and len(records) < n):
        status, reason = "crashed", f"crashed (exit status {os.WEXITSTATUS(wstatus)})"
    elif load[1] is not None:
        status, reason = "load_error", load[1]
    else:
        status, reason = "ok", ""
    if load is not None and load[1] is not None:
        reason = load[1]
    records = records[:n] + [[False, reason, None, status] for _ in range(n - len(records))]
    return {"results": records, "status": status, "message": reason}


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _write(fd: int, message: dict) -> None:
    data = json.dumps(message).encode()
    data = _HEADER.pack(len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


def _enter_network_namespace() -> bool:
    """Best effort: a new network namespace with only a down loopback (needs privileges)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.unshare(0x40000000) == 0  # CLONE_NEWNET
        del libc
        sys.modules.pop("ctypes", None)
        return ok
    except Exception:  # noqa: BLE001 - not permitted or no libc: the audit hook still refuses
        return False


def _zygote_main() -> None:
    """The sandbox worker: read length-prefixed JSON jobs on stdin, answer on stdout."""
    import importlib

    netns = _enter_network_namespace()
    for name in _PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    _write(1, {"ready": True, "netns": netns})
    while True:
        header = _read_exact(0, _HEADER.size)
        if header is None:
            return
        body = _read_exact(0, _HEADER.unpack(header)[0])
        if body is None:
            return
        try:
            reply = _run_job(json.loads(body))
        except Exception as exc:  # noqa: BLE001 - report, keep serving
            job = json.loads(body)
            reason = f"sandbox error: {type(exc).__name__}: {exc}"
            reply = {"results": [[False, reason, None, "error"] for _ in job.get("checks", [])], "status": "error", "message": reason}
        _write(1, reply)


__all__ = ["Check", "CheckResult", "CodeExecutor", "Limits", "RunResult", "SandboxViolation"]
