"""Scoring through a compiled forward pass: the rewards of :meth:`BradleyTerryModel.score`, one C call per chunk.

>>> scorer = NativeScorer(model)               # doctest: +SKIP
>>> scorer.score("What is 2 + 3?", plans)      # doctest: +SKIP   # == model.score(...) within 1e-5

Why: at the size of a test-time-scaling call (one question, 8 short plans, about 150 tokens) the
linear layers are small matrix products, and what the runtime does around them decides the
latency. This scorer runs the whole forward pass in one call to ``native_score.c`` (compiled on
first use with the machine's C compiler, ``-O3 -march=native``, and cached): the linear layers on
one of the two matrix kernels PyTorch's x86-64 builds carry, their weights laid out once for it
(MKL's packed sgemm, or oneDNN's brgemm micro-kernel; by default whichever runs this model's
products faster on this machine, timed once per shape in a process: MKL runs its AVX2 code on AMD
CPUs), attention computed only over the keys each block of queries may see (a prompt's tokens
over their prompt; an action's over its prompt, then itself), and every other step one loop over
the data (bias and activation, residual and LayerNorm). ``benchmarks/results/latency.md`` times it
beside :class:`orchrm.onnxrt.OnnxScorer` and ``model.score``.

Needs: a BERT-family encoder (:func:`orchrm.encoders.supports_shared_prompt`), a PyTorch build
with MKL (``torch.backends.mkl.is_available()``: the x86-64 builds) and a C compiler (``$CC``,
else ``cc``). The library is cached under ``$ORCHRM_CACHE_DIR`` (default
``$XDG_CACHE_HOME/orchrm``, else ``~/.cache/orchrm``), one build per source, ``$CC``, PyTorch
and CPU. The scorer copies the weights when it is built: train the model further and build a new one.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
import weakref
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from orchrm import encoders
from orchrm.errors import ConfigError
from orchrm.model import DEFAULT_MAX_TOKENS, BradleyTerryModel, ChunkScorer

#: ``transformers`` activation -> the C code's
_ACTIVATIONS = {"gelu": 0, "gelu_new": 1, "gelu_pytorch_tanh": 1, "relu": 2}
_FLAGS = ["-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp", "-fno-math-errno", "-fPIC", "-shared"]
#: the phases :meth:`NativeScorer.profile` reports, in the C code's order
PHASES = ("embeddings", "linear layers", "bias and keys", "attention", "residual + LayerNorm", "activation", "pooling and head")
#: the C code's error codes; ``{bad}``: the token, block or action at fault
_ERRORS = {
    1: "out of memory",
    2: "token {bad}'s id is outside the vocabulary",
    3: "token {bad}'s position is outside the position table",
    4: "token {bad}'s segment is outside the token-type table",
    5: "attention block {bad} is malformed",
    6: "action {bad}'s pooled tokens are malformed",
    7: "the model's weights are incomplete",
    8: "this PyTorch does not carry that matrix kernel",
    9: "a size or count below 1",
}

#: the linear layers' matrix kernels, in the C code's order: MKL's packed sgemm, oneDNN's brgemm
GEMMS = ("mkl", "onednn")
#: the tokens ``gemm="auto"`` times the kernels on: about one test-time-scaling call (a question and 8 plans)
AUTO_ROWS = 160

_lock = threading.Lock()
_library: ctypes.CDLL | None = None
#: gemm="auto"'s timings (see :func:`gemm_times`) by library, width, inner width, rows and threads
_timed: dict[tuple[str, int, int, int, int], dict[str, float]] = {}


def cache_dir() -> Path:
    """Where compiled libraries are kept: ``$ORCHRM_CACHE_DIR``, else ``$XDG_CACHE_HOME/orchrm``, else ``~/.cache/orchrm``."""
    if os.environ.get("ORCHRM_CACHE_DIR"):
        return Path(os.environ["ORCHRM_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orchrm"


def _cpu_identity() -> str:
    """The CPU's model and feature flags (``-march=native`` compiles for exactly these)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    keep = [line for line in text.splitlines() if line.startswith(("model name", "flags", "Features", "CPU part"))]
    return "\n".join(dict.fromkeys(keep))


def _compiler() -> list[str]:
    """``$CC`` (split like a shell would: it may carry flags), else the first of cc, gcc, clang found."""
    cc = os.environ.get("CC", "").strip() or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise ConfigError(
            "NativeScorer compiles its forward pass on first use and found no C compiler: install one "
            "(e.g. apt-get install gcc) or set CC, or score with orchrm.onnxrt.OnnxScorer"
        )
    return shlex.split(cc)


def _intact(library_path: Path) -> bool:
    """Whether a cached library is whole: the checksum written beside it after it matches. (A
    library cut short, by a crash or a full disk, would crash the process that loads it.)"""
    try:
        expected = library_path.with_name(library_path.name + ".sha256").read_text().strip()
        return hashlib.sha256(library_path.read_bytes()).hexdigest() == expected
    except OSError:
        return False


def _write_synced(path: Path, data: bytes | None = None) -> None:
    """Write ``data`` to ``path`` (or leave its contents) and flush it to the disk."""
    with open(path, "wb" if data is not None else "rb+") as f:
        if data is not None:
            f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _build(source: bytes, torch_lib: Path) -> Path:
    """The compiled library's path: from the cache, else compiled there now.

    One build per source, flags, ``$CC`` (it may carry flags of its own), PyTorch (its version and
    where it lies: the library links to its ``libtorch_cpu``) and CPU (``-march=native``). Which
    compiler ``cc`` is does not matter, so a cached library needs none. A build is cached only
    once it loads, with its checksum beside it; a cached library whose checksum does not match
    is built again.
    """
    key = hashlib.sha256(
        b"\0".join(x.encode() if isinstance(x, str) else x for x in
                   (source, " ".join(_FLAGS), "CC=" + os.environ.get("CC", "").strip(), torch.__version__,
                    str(torch_lib), _cpu_identity()))
    ).hexdigest()[:24]
    folder = cache_dir() / "native" / key
    target = folder / "liborchrm_score.so"
    if _intact(target):
        return target
    cc = _compiler()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        workdir = tempfile.TemporaryDirectory(dir=folder)
    except OSError as exc:
        raise ConfigError(
            f"NativeScorer cannot write its library cache {folder} ({exc}): set ORCHRM_CACHE_DIR to a writable folder"
        ) from exc
    with workdir as tmp:
        src, lib = Path(tmp) / "native_score.c", Path(tmp) / target.name
        src.write_bytes(source)
        cmd = [*cc, *_FLAGS, str(src), "-o", str(lib), f"-L{torch_lib}", "-ltorch_cpu", "-lc10", f"-Wl,-rpath,{torch_lib}", "-lm"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as exc:
            raise ConfigError(
                f"the C compiler {cc[0]!r} does not run ({exc}): install one or set CC to a working one, "
                "or score with orchrm.onnxrt.OnnxScorer"
            ) from exc
        if done.returncode != 0:
            raise ConfigError(
                f"compiling NativeScorer's forward pass failed ({' '.join(cc)} exited with {done.returncode}):\n"
                f"{done.stderr.strip()[-2000:]}\nfix the compiler (or set CC), or score with orchrm.onnxrt.OnnxScorer"
            )
        try:
            load(lib)
        except OSError as exc:
            raise ConfigError(
                f"NativeScorer's freshly compiled library does not load ({exc}): fix the compiler (or set CC), "
                "or score with orchrm.onnxrt.OnnxScorer"
            ) from exc
        _write_synced(lib)
        checksum = Path(tmp) / "checksum"
        _write_synced(checksum, hashlib.sha256(lib.read_bytes()).hexdigest().encode())
        os.replace(lib, target)  # atomic: another process sees the whole library or none; the
        os.replace(checksum, target.with_name(target.name + ".sha256"))  # checksum last
    return target


def library() -> ctypes.CDLL:
    """The compiled forward pass, built on first use (see the module's docstring)."""
    global _library
    with _lock:
        if _library is None:
            if not torch.backends.mkl.is_available():
                raise ConfigError(
                    "NativeScorer runs on the MKL that PyTorch's x86-64 builds carry, and this PyTorch has none "
                    f"({torch.__version__} on {platform.machine()}): score with orchrm.onnxrt.OnnxScorer"
                )
            source = resources.files("orchrm").joinpath("native_score.c").read_bytes()
            path = _build(source, Path(torch.__file__).parent / "lib")
            try:
                _library = load(path)
            except OSError as exc:
                raise ConfigError(
                    f"NativeScorer's compiled library {path} does not load ({exc}): remove {path.parent} to "
                    "build it again, or score with orchrm.onnxrt.OnnxScorer"
                ) from exc
        return _library


def load(path: Path) -> ctypes.CDLL:
    """The library at ``path`` (built by :func:`_build`), its functions' signatures declared."""
    lib = ctypes.CDLL(str(path))
    f32, i32 = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int)
    c_int, c_float, ptr = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    lib.orm_new.restype = ptr
    lib.orm_new.argtypes = [c_int] * 7
    lib.orm_gemm_available.argtypes = [c_int]
    lib.orm_time_gemm.argtypes = [c_int] * 5 + [ctypes.POINTER(ctypes.c_double)]
    lib.orm_time_matmul.argtypes = [c_int] * 4 + [ctypes.POINTER(ctypes.c_double)]
    lib.orm_free.argtypes = [ptr]
    lib.orm_free.restype = None
    lib.orm_set_embeddings.argtypes = [ptr, f32, c_int, f32, c_int, f32, c_int, f32, f32, c_float]
    lib.orm_set_layer.argtypes = [ptr, c_int, f32, f32, f32, f32, f32, f32, c_float, f32, f32, f32, f32, f32, f32, c_float]
    lib.orm_set_head.argtypes = [ptr, f32, f32, f32, c_float]
    # addresses (NativeScorer._run passes arrays of the right types; a typed pointer costs 5 us each)
    lib.orm_score.argtypes = [ptr, c_int, ptr, ptr, ptr, c_int, ptr, c_int, ptr, c_int, ptr, i32]
    lib.orm_profile.argtypes = [ptr, c_int, ctypes.POINTER(ctypes.c_double)]
    lib.orm_profile.restype = None
    for name in ("orm_set_embeddings", "orm_set_layer", "orm_set_head", "orm_score", "orm_gemm_available", "orm_time_gemm",
                 "orm_time_matmul"):
        getattr(lib, name).restype = c_int
    return lib


def _check_gemm(gemm: str, *, auto: bool) -> None:
    names = (*GEMMS, "auto") if auto else GEMMS
    if gemm not in names:
        raise ConfigError(f"gemm must be one of {', '.join(map(repr, names))}, got {gemm!r}")


def gemm_times(width: int, inter: int, *, rows: int = AUTO_ROWS, threads: int = 1, reps: int = 7,
               lib: ctypes.CDLL | None = None) -> dict[str, float]:
    """Median milliseconds of one encoder layer's four matrix products (``width`` wide, a
    feed-forward ``inter`` wide) on ``rows`` tokens, by kernel (:data:`GEMMS`), on random weights,
    the kernels taking turns over ``reps`` rounds. A kernel this PyTorch lacks is left out."""
    lib = library() if lib is None else lib
    out = (ctypes.c_double * len(GEMMS))()
    rc = lib.orm_time_gemm(rows, width, inter, threads, reps, out)
    if rc:
        raise RuntimeError(f"NativeScorer: timing the matrix kernels ({rows} rows, {width} wide, {inter} inner, "
                           f"{reps} rounds): {_ERRORS.get(rc, f'error {rc}')}")
    return {name: out[i] for i, name in enumerate(GEMMS) if not np.isnan(out[i])}


def matmul_ms(gemm: str, n: int = 1024, *, threads: int = 1, reps: int = 3, lib: ctypes.CDLL | None = None) -> float:
    """The fewest milliseconds of ``reps`` (n, n) x (n, n) fp32 products through kernel ``gemm``
    (:data:`GEMMS`), weights laid out as the scorer lays them out: a large matmul's rate per kernel."""
    _check_gemm(gemm, auto=False)
    lib = library() if lib is None else lib
    best = ctypes.c_double()
    rc = lib.orm_time_matmul(GEMMS.index(gemm), n, threads, reps, ctypes.byref(best))
    if rc:
        raise RuntimeError(f"NativeScorer: timing {gemm} on {n} x {n}, {reps} rounds: {_ERRORS.get(rc, f'error {rc}')}")
    return best.value


def _floats(t: Tensor | np.ndarray) -> np.ndarray:
    a = t.detach().cpu().float().numpy() if isinstance(t, Tensor) else t
    return np.ascontiguousarray(a, dtype=np.float32)


def _ptr(a: np.ndarray, kind=ctypes.c_float):
    return a.ctypes.data_as(ctypes.POINTER(kind))


class NativeScorer(ChunkScorer):
    """Scores (prompt, action) texts like :meth:`BradleyTerryModel.score`, through one compiled call per chunk.

    ``threads``: the threads of a call (default: ``torch.get_num_threads()``): the matrix
    products, attention's heads and the element-wise passes are shared out over them (the
    embeddings, the bias + key transpose and the head run on the calling thread).
    ``max_tokens``: the most tokens one chunk holds.

    ``gemm``: the linear layers' matrix kernel (:data:`GEMMS`). ``"mkl"``: MKL, the weights packed
    for it (it runs its AVX2 code on AMD CPUs). ``"onednn"``: oneDNN's brgemm micro-kernel, the
    weights in panels of 64 columns; it compiles a kernel for each new row count (at most 64 per
    layer shape) on its first use in a thread, about 0.1 ms each. ``"auto"`` (the default): the
    faster of the two here, timed on one layer's products of :data:`AUTO_ROWS` tokens (a fraction
    of a second) when the first scorer of this shape and thread count is built in the process.
    The choice is ``self.gemm``, the timings ``self.gemm_times`` (empty unless ``"auto"`` chose).

    ``lib``: the compiled library (default: :func:`library`, this package's, built on first use).
    """

    def __init__(
        self,
        model: BradleyTerryModel,
        *,
        threads: int | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        gemm: str = "auto",
        lib: ctypes.CDLL | None = None,
    ) -> None:
        bert = model.encoder
        act = encoders.scorer_activation(bert, _ACTIVATIONS, "NativeScorer")
        cfg = bert.config
        super().__init__(model, threads=threads, max_tokens=max_tokens)
        _check_gemm(gemm, auto=True)
        lib = library() if lib is None else lib
        head = [m for m in model.head if isinstance(m, torch.nn.Linear)]
        width, heads = cfg.hidden_size, cfg.num_attention_heads
        self.gemm_times: dict[str, float] = {}
        self.gemm = self._pick_gemm(lib, gemm, width, cfg.intermediate_size)
        handle = lib.orm_new(width, heads, len(bert.encoder.layer), cfg.intermediate_size, head[0].out_features, act,
                             GEMMS.index(self.gemm))
        if not handle:
            raise ConfigError(f"NativeScorer cannot hold this encoder's shape ({width} wide, {heads} heads): score with model.score(...)")
        self._lib, self._handle = lib, handle
        self._finalizer = weakref.finalize(self, lib.orm_free, handle)
        with torch.no_grad():
            self._load_weights(model, width // heads, head)

    def _pick_gemm(self, lib: ctypes.CDLL, gemm: str, width: int, inter: int) -> str:
        if gemm != "auto":
            if not lib.orm_gemm_available(GEMMS.index(gemm)):
                raise ConfigError(f"this PyTorch ({torch.__version__}) does not carry the {gemm!r} kernel: use gemm='auto'")
            return gemm
        if not lib.orm_gemm_available(GEMMS.index("onednn")):
            return "mkl"
        rows = min(self.max_tokens, AUTO_ROWS)
        key = (lib._name, width, inter, rows, self.threads)
        with _lock:  # one timing per shape and thread count in a process: scorers built later take it
            if key not in _timed:
                _timed[key] = gemm_times(width, inter, rows=rows, threads=self.threads, lib=lib)
            self.gemm_times = dict(_timed[key])
        return min(self.gemm_times, key=self.gemm_times.__getitem__)

    def _check(self, rc: int, what: str, bad: int = -1) -> None:
        if rc:
            raise RuntimeError(f"NativeScorer: {what}: {_ERRORS.get(rc, f'error {rc}').format(bad=bad)}")

    def _load_weights(self, model: BradleyTerryModel, head_dim: int, head: list[torch.nn.Linear]) -> None:
        lib, handle, bert = self._lib, self._handle, model.encoder
        emb = bert.embeddings
        word, pos, types = (_floats(t.weight) for t in (emb.word_embeddings, emb.position_embeddings, emb.token_type_embeddings))
        self._types = types.shape[0]
        g, b = _floats(emb.LayerNorm.weight), _floats(emb.LayerNorm.bias)
        self._check(lib.orm_set_embeddings(handle, _ptr(word), word.shape[0], _ptr(pos), pos.shape[0], _ptr(types),
                                           types.shape[0], _ptr(g), _ptr(b), float(emb.LayerNorm.eps)), "embeddings")
        for i, layer in enumerate(bert.encoder.layer):
            w, bias = encoders.scaled_qkv(layer.attention.self, head_dim)
            out, ffn = layer.attention.output, layer.output
            arrays = [_floats(x) for x in (w, bias, out.dense.weight, out.dense.bias, out.LayerNorm.weight, out.LayerNorm.bias,
                                           layer.intermediate.dense.weight, layer.intermediate.dense.bias, ffn.dense.weight,
                                           ffn.dense.bias, ffn.LayerNorm.weight, ffn.LayerNorm.bias)]
            p = [_ptr(a) for a in arrays]
            self._check(lib.orm_set_layer(handle, i, *p[:6], float(out.LayerNorm.eps), *p[6:], float(ffn.LayerNorm.eps)), f"layer {i}")
        w1, b1, w2 = _floats(head[0].weight), _floats(head[0].bias), _floats(head[1].weight).reshape(-1)
        self._check(lib.orm_set_head(handle, _ptr(w1), _ptr(b1), _ptr(w2), float(head[1].bias.item())), "head")

    def _run(self, batch: encoders.TokenBatch) -> np.ndarray:
        """The rewards of one packed chunk, from one call of the compiled forward pass."""
        lens = np.concatenate([batch.prompt_lens.numpy(), batch.action_lens.numpy()]).astype(np.int32)
        ends = np.cumsum(lens, dtype=np.int32)
        starts = ends - lens
        n_prompts = len(batch.prompt_lens)
        # attention blocks (q0, q1, a0, a1, b0, b1): prompt rows over themselves; action rows over
        # themselves (joint) or over their prompt's keys, then their own (shared_prompt)
        blocks = np.zeros((len(lens), 6), dtype=np.int32)
        blocks[:, 0], blocks[:, 1] = starts, ends
        blocks[:, 2], blocks[:, 3] = starts, ends
        if batch.action_prompt is not None:
            which = batch.action_prompt.numpy()
            blocks[n_prompts:, 2], blocks[n_prompts:, 3] = starts[which], ends[which]
            blocks[n_prompts:, 4], blocks[n_prompts:, 5] = starts[n_prompts:], ends[n_prompts:]
        action_ends = ends[n_prompts:]
        pool = np.ascontiguousarray(np.stack([action_ends - batch.pool_lens.numpy().astype(np.int32), action_ends], axis=1))
        ids, positions = (np.ascontiguousarray(x.numpy(), dtype=np.int64) for x in (batch.input_ids, batch.positions))
        segments = np.ascontiguousarray(batch.segments.numpy(), dtype=np.int64) if self._types > 1 else np.zeros_like(ids)  # one row: every token adds it
        out = np.empty(batch.num_actions, dtype=np.float32)
        bad = ctypes.c_int(-1)
        rc = self._lib.orm_score(
            self._handle, batch.num_tokens, ids.ctypes.data, positions.ctypes.data, segments.ctypes.data,
            len(blocks), blocks.ctypes.data, batch.num_actions, pool.ctypes.data, self.threads, out.ctypes.data,
            ctypes.byref(bad),
        )
        self._check(rc, "scoring", bad.value)
        return out

    def profile(self, *, on: bool = True) -> dict[str, float]:
        """Time the compiled call's phases: ``on=True`` starts (from zero), ``on=False`` stops.

        Returns what was measured so far (before this call's change): milliseconds per scored
        chunk by phase (:data:`PHASES`), and ``"chunks"``. The timers read the clock a few
        dozen times a chunk; not for a scorer that several threads call at once.
        """
        out = (ctypes.c_double * (len(PHASES) + 1))()
        self._lib.orm_profile(self._handle, int(on), out)
        chunks = out[len(PHASES)]
        return {**{p: 1e3 * out[i] / chunks if chunks else 0.0 for i, p in enumerate(PHASES)}, "chunks": chunks}

