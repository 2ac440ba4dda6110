"""Scoring latency: 8 candidate plans of one task, CPU, beside the machine's own fp32 compute limit.

For each model and runtime, ``model.score(question, plans)`` (PyTorch),
``OnnxScorer(model).score(question, plans)`` (ONNX Runtime, :mod:`orchrm.onnxrt`) or
``NativeScorer(model).score(question, plans)`` (the compiled forward pass, :mod:`orchrm.native`;
where PyTorch carries MKL and a C compiler is installed) on the sandbox's real question + plan texts (8 plans of one task, the test-time-scaling call), p50 over many tasks
and repetitions, end to end (tokenizing included). Beside it, the *compute limit* of the same
work: the forward pass's FLOPs (counted from the real token counts: linear layers 2 * tokens * in
* out, attention 2 * 2 * Lq * Lk * width per row, the head) divided by the rate this machine
reaches on a large fp32 matmul (1024 x 1024, the fastest of the installed kernels: MKL, oneDNN,
MLAS, and oneDNN's brgemm as NativeScorer runs it), measured in the same run. On a shared machine the load changes under us, so the rate is
sampled again before every round of calls and each call's ratio uses its round's rate; the
reported ratio is the median of the per-call ratios. Targets (issue 4): within 1.3x of the
limit, and at most 30 ms for the default model.

Also timed, for scale: a plain 3-layer 256-wide BERT (joint) and MiniLM on 8 x 64-token inputs.

Run niced on a shared machine::

    nice python benchmarks/bench_latency.py            # writes results/latency.{json,md}
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import Tensor  # noqa: E402

from orchrm import BradleyTerryModel, native  # noqa: E402
from orchrm.encoders import TokenBatch  # noqa: E402
from orchrm.errors import ConfigError  # noqa: E402
from orchrm.native import NativeScorer  # noqa: E402
from orchrm.onnxrt import OnnxScorer, session_options  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from results_io import cpu_model, machine, write_json, write_text  # noqa: E402

RESULTS = Path(__file__).parent / "results"
TARGET_RATIO = 1.3
TORCH, ONNX, NATIVE = "PyTorch", "ONNX Runtime", "NativeScorer"
RUNTIMES = (TORCH, ONNX, NATIVE)
TARGET_DEFAULT_MS = 30.0


def sandbox_tasks(tasks_per_domain: int, plans: int, seed: int) -> list[tuple[str, str, list[str]]]:
    """(domain, question, plan texts) for tasks with ``plans`` distinct candidate plans."""
    from orchrm.collect import collect

    art = collect(tasks_per_domain=tasks_per_domain, plans_per_task=plans, seed=seed, progress=False)
    out = []
    for (domain, _task), rows in art.groupby(["domain", "task_id"], sort=True):
        texts = list(dict.fromkeys(rows["plan_text"]))
        if len(texts) >= plans:
            out.append((domain, rows["question"].iloc[0], texts[:plans]))
    return out


def default_model(cases: list[tuple[str, list[str]]]) -> BradleyTerryModel:
    """The default model (scratch 256x3, ``shared_prompt``), its tokenizer fitted on ``cases``'
    texts, in eval mode: the model the latency benchmark and the two profiles time."""
    model = BradleyTerryModel()
    model.fit_tokenizer([q for q, _ in cases] + [p for _, plans in cases for p in plans])
    return model.eval()


def batch_flops(model: BradleyTerryModel, batch: TokenBatch) -> float:
    """Multiply-add FLOPs (x2) of one forward pass over ``batch``, from the real token counts."""
    cfg = model.encoder.config
    h, inter, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    tokens = batch.num_tokens
    linear = 2 * tokens * (4 * h * h + 2 * h * inter)
    lp = batch.prompt_lens.double()
    la = batch.action_lens.double()
    if batch.action_prompt is None:
        scores = float((la * la).sum())
    else:
        scores = float((lp * lp).sum() + (la * (la + lp[batch.action_prompt])).sum())
    attention = 2 * 2 * scores * h  # QK^T and AV
    head = 2 * batch.num_actions * (h * model.config.hidden_dim + model.config.hidden_dim)
    return layers * (linear + attention) + head


def _onednn_matmul(b: Tensor) -> Callable[[Tensor], Tensor] | None:
    """``x @ b`` through oneDNN's fp32 linear kernel with ``b`` prepacked (None where this torch has no oneDNN)."""
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(b.t().contiguous(), None)
        op = torch.ops.mkldnn._linear_pointwise
        op(b[:1], packed, None, "none", [], "")
    except (AttributeError, RuntimeError):
        return None
    return lambda x: op(x, packed, None, "none", [], "")


def _mlas_matmul(b: Tensor) -> Callable[[Tensor], object]:
    """``x @ b`` through ONNX Runtime's MatMul (MLAS, ``b`` an initializer it prepacks), on torch's thread count."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    n = b.shape[0]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "b"], ["y"])], "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
        [numpy_helper.from_array(b.numpy(), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = min(model.ir_version, 10)
    session = ort.InferenceSession(model.SerializeToString(), session_options(torch.get_num_threads()),
                                   providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {"x": x.numpy()})


def matmul_rates(n: int = 1024, reps: int = 3) -> dict[str, float]:
    """FLOP/s of an n x n fp32 matmul on this machine right now, best of ``reps``, by kernel.

    Every fp32 matmul kernel installed here that the runtimes use: MKL (``torch.matmul``), oneDNN
    (PyTorch's other CPU backend, weights prepacked), MLAS (ONNX Runtime's) and oneDNN's brgemm
    micro-kernel as NativeScorer runs it. They differ by machine (on some CPUs oneDNN runs 10%
    faster than MKL), and the machine's limit is the fastest of them, not the one a runtime
    happens to call.
    """
    a, b = torch.randn(n, n), torch.randn(n, n)
    kernels: dict[str, Callable[[Tensor], object]] = {"MKL": lambda x: x @ b, "MLAS": _mlas_matmul(b)}
    onednn = _onednn_matmul(b)
    if onednn is not None:
        kernels["oneDNN"] = onednn
    rates = {}
    with torch.inference_mode():
        for name, matmul in kernels.items():
            matmul(a)
            best = float("inf")
            for _ in range(reps):
                t = time.perf_counter()
                matmul(a)
                best = min(best, time.perf_counter() - t)
            rates[name] = 2 * n**3 / best
    brgemm = _brgemm_ms(n, reps)
    if brgemm is not None:
        rates["oneDNN brgemm"] = 2 * n**3 / (brgemm / 1e3)
    return rates


def _brgemm_ms(n: int, reps: int) -> float | None:
    """oneDNN's brgemm micro-kernel on an n x n matmul as NativeScorer runs it (weights in panels),
    best of ``reps``; None where NativeScorer cannot run here (no C compiler, or no such kernel)."""
    try:
        if not native.library().orm_gemm_available(native.GEMMS.index("onednn")):
            return None
    except ConfigError:
        return None
    return native.matmul_ms("onednn", n, threads=torch.get_num_threads(), reps=reps)


def rates_around(samples: list[dict[str, float]]) -> tuple[list[float], dict[str, float], str]:
    """From :func:`matmul_rates` samples taken before and after some calls: the fastest kernel's
    rate in each (FLOP/s), each kernel's mean (GFLOP/s), and the sentence the profiles print of them."""
    rates = [max(sample.values()) for sample in samples]
    by_kernel = {k: statistics.mean(sample[k] for sample in samples) / 1e9 for k in samples[0]}
    text = ("the fastest 1024x1024 fp32 matmul kernel's rate, sampled before and after the calls: "
            + " and ".join(f"{r / 1e9:.0f}" for r in rates) + " GFLOP/s; by kernel, mean "
            + ", ".join(f"{k} {v:.0f}" for k, v in sorted(by_kernel.items(), key=lambda kv: -kv[1])))
    return rates, by_kernel, text


def measure(model: BradleyTerryModel, cases: list[tuple[str, list[str]]], *, rounds: int,
            scorers: dict[str, Callable[[str, list[str]], object]]) -> dict[str, dict]:
    """p50 latency of each of ``scorers`` (runtime name -> ``score(question, plans)`` of ``model``)
    and its median ratio to the compute limit.

    The runtimes take turns round by round (the order switching every round) after the same
    matmul-rate sample, so both see the same machine load. The calls of a round run back to back,
    as a server scoring one request after another would; the rate is sampled between rounds
    (sampling it before every call would evict the model's weights from the cache and time a cold
    model).
    """
    model.eval()
    for score in scorers.values():
        for q, plans in cases[:3]:
            score(q, plans)
    batches = [model.pack(model.tokenize([q]), model.tokenize(plans), [0] * len(plans)) for q, plans in cases]
    flops = [batch_flops(model, b) for b in batches]
    names = list(scorers)
    lat: dict[str, list[float]] = {n: [] for n in names}
    ratios: dict[str, list[float]] = {n: [] for n in names}
    limits: dict[str, list[float]] = {n: [] for n in names}
    round_ratios: dict[str, list[float]] = {n: [] for n in names}
    kernel_rates: dict[str, list[float]] = {}
    for round_no in range(rounds):
        rates = matmul_rates(1024, reps=3)
        rate = max(rates.values())
        for kernel, kernel_rate in rates.items():
            kernel_rates.setdefault(kernel, []).append(kernel_rate)
        for name in names if round_no % 2 == 0 else names[::-1]:
            score, first = scorers[name], len(ratios[name])
            for (q, plans), f in zip(cases, flops, strict=True):
                t = time.perf_counter()
                score(q, plans)
                dt = time.perf_counter() - t
                lat[name].append(dt)
                limits[name].append(f / rate)
                ratios[name].append(dt / (f / rate))
            round_ratios[name].append(statistics.median(ratios[name][first:]))
    return {
        name: {
            "p50_ms": 1e3 * statistics.median(lat[name]),
            "p90_ms": 1e3 * statistics.quantiles(lat[name], n=10)[-1],
            "limit_ms": 1e3 * statistics.median(limits[name]),
            "matmul_gflops_by_kernel": {k: statistics.median(v) / 1e9 for k, v in kernel_rates.items()},
            "ratio_to_limit": statistics.median(ratios[name]),
            "ratio_by_round": round_ratios[name],
            "gflop": statistics.median(flops) / 1e9,
            "tokens": statistics.median(b.num_tokens for b in batches),
            "samples": len(lat[name]),
        }
        for name in names
    }


def linear_floor(model: BradleyTerryModel, cases: list[tuple[str, list[str]]], *, rounds: int) -> dict:
    """p50 time of the forward pass's matrix products alone (same shapes, back to back), for scale.

    What no implementation of this model at these token counts can go below with this machine's
    fp32 matmul kernels: the gap between it and ``score`` is attention, GELU, LayerNorm and
    bookkeeping; the gap between it and the limit is how much slower small matmuls run than a
    1024 x 1024 one.
    """
    cfg = model.encoder.config
    h, inter, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    shapes = [(3 * h, h), (h, h), (inter, h), (h, inter)] * layers
    weights = [(torch.randn(o, i), torch.randn(o)) for o, i in shapes]
    head = (torch.randn(model.config.hidden_dim, h), torch.randn(model.config.hidden_dim))
    sizes = [model.pack(model.tokenize([q]), model.tokenize(p), [0] * len(p)) for q, p in cases]
    inputs = [(torch.randn(b.num_tokens, h), torch.randn(b.num_tokens, inter), torch.randn(b.num_actions, h)) for b in sizes]
    times = []
    with torch.inference_mode():
        for _ in range(rounds):
            for x, xi, pooled in inputs:
                t = time.perf_counter()
                for w, b in weights:
                    F.linear(xi if w.shape[1] == inter else x, w, b)
                F.linear(pooled, *head)
                times.append(time.perf_counter() - t)
    return {"p50_ms": 1e3 * statistics.median(times)}


def synthetic_cases(model: BradleyTerryModel, n_tasks: int, length: int = 64) -> list[tuple[str, list[str]]]:
    """8 x ``length``-token inputs (joint layout: the whole sequence is one row) from random words."""
    import random

    rng = random.Random(0)
    vocab = [t for t in model.tokenizer.get_vocab() if t.isalpha() and len(t) > 2][:2000]
    cases = []
    for _ in range(n_tasks):
        q = " ".join(rng.choice(vocab) for _ in range(length // 2 - 2))
        plans = [" ".join(rng.choice(vocab) for _ in range(length // 2 - 1)) for _ in range(8)]
        cases.append((q, plans))
    return cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=6, help="tasks per domain (default 6)")
    ap.add_argument("--rounds", type=int, default=4, help="passes over the tasks (default 4)")
    ap.add_argument("--threads", default="1,2", help="torch intra-op thread counts to run (default 1,2)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--spinning", action="store_true", help="let ONNX Runtime's threads spin (OnnxScorer's default: not)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    torch.manual_seed(0)

    tasks = sandbox_tasks(args.tasks, 8, args.seed)
    cases = [(q, plans) for _, q, plans in tasks]
    texts = [q for q, _ in cases] + [p for _, ps in cases for p in ps]
    print(f"{len(cases)} sandbox tasks with 8 plans", file=sys.stderr)

    default = default_model(cases)
    joint = BradleyTerryModel(architecture="joint")
    joint.fit_tokenizer(texts)
    minilm = BradleyTerryModel(encoder="minilm", dropout=0.0)
    minilm_joint = BradleyTerryModel(encoder="minilm", architecture="joint", dropout=0.0)
    runs = [
        ("default (scratch 256x3, shared_prompt)", default, cases, "sandbox question + 8 plans"),
        ("scratch 256x3, joint", joint, cases, "sandbox question + 8 plans"),
        ("scratch 256x3, joint", joint, synthetic_cases(joint, len(cases)), "8 x 64 tokens"),
        ("minilm, shared_prompt", minilm, cases, "sandbox question + 8 plans"),
        ("minilm, joint", minilm_joint, cases, "sandbox question + 8 plans"),
        ("minilm, joint", minilm_joint, synthetic_cases(minilm_joint, len(cases)), "8 x 64 tokens"),
    ]
    try:
        NativeScorer(default)  # compiles on first use (once per machine)
        native_missing = None
    except ConfigError as exc:
        native_missing = str(exc)
        print(f"NativeScorer not timed: {exc}", file=sys.stderr)
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        for name, model, run_cases, note in runs:
            scorer = OnnxScorer(model, threads=threads, spinning=args.spinning)
            scorers = {TORCH: model.score, ONNX: scorer.score}
            if native_missing is None:
                native = NativeScorer(model, threads=threads)  # gemm="auto": the faster matrix kernel here
                scorers[NATIVE] = native.score
            results = measure(model, run_cases, rounds=args.rounds, scorers=scorers)
            if native_missing is None:
                results[NATIVE]["gemm"], results[NATIVE]["gemm_times_ms"] = native.gemm, native.gemm_times
            del scorer, scorers  # ONNX Runtime's threads go with its scorer
            if model is default and note.startswith("sandbox"):
                results[TORCH]["matmuls_only_ms"] = linear_floor(model, run_cases, rounds=args.rounds)["p50_ms"]
            for runtime, r in results.items():
                rows.append({"threads": threads, "runtime": runtime, "model": name, "inputs": note, **r})
                print(f"{threads}t {runtime:12s} {name:40s} {note:28s} p50 {r['p50_ms']:7.2f} ms  "
                      f"limit {r['limit_ms']:7.2f} ms  ratio {r['ratio_to_limit']:.2f}  tokens {r['tokens']:.0f}",
                      file=sys.stderr)

    rows.sort(key=lambda r: (r["threads"], RUNTIMES.index(r["runtime"])))  # the table: one runtime's rows together
    defaults = [r for r in rows if r["model"].startswith("default")]
    meets = {
        f"{r['runtime']}, {r['threads']} thread(s)": {
            "p50": r["p50_ms"] <= TARGET_DEFAULT_MS, "ratio": r["ratio_to_limit"] <= TARGET_RATIO
        }
        for r in defaults
    }
    result = {
        "benchmark": "scoring latency, 8 candidates of one task (CPU, fp32)",
        "machine": machine(torch=torch.__version__),
        "tasks": len(cases),
        "rounds": args.rounds,
        "onnx_spinning": args.spinning,
        "native_not_timed": native_missing,
        "targets": {"ratio_to_limit": TARGET_RATIO, "default_p50_ms": TARGET_DEFAULT_MS},
        "default_meets_targets": meets,
        "rows": rows,
    }
    write_json(args.out / "latency.json", result)
    lines = [
        "# Scoring latency: 8 candidate plans of one task (CPU, fp32)",
        "",
        "`model.score(question, plans)` (PyTorch), `OnnxScorer(model).score(question, plans)` (ONNX Runtime) and "
        "`NativeScorer(model).score(question, plans)` (the compiled forward pass; its linear layers on MKL or oneDNN's brgemm, "
        "whichever timed faster when the scorer was built) "
        f"end to end (tokenizing included), p50 over {len(cases)} sandbox tasks "
        f"x {args.rounds} rounds. Limit = the forward pass's FLOPs (real tokens) / the rate of a 1024x1024 fp32 "
        "matmul, the fastest of the installed kernels (MKL, oneDNN, MLAS, oneDNN's brgemm as NativeScorer runs it), timed before each round of calls, with the same thread count (the runtimes take turns round by round, after the same sample, their order reversed every round); ratio = median of per-call latency / "
        f"limit. Machine: {os.cpu_count()} CPUs ({cpu_model()}), shared with other jobs (load average at the end "
        f"{os.getloadavg()[0]:.1f}).",
        "",
        "| threads | runtime | model | inputs | tokens | GFLOP | p50 ms | p90 ms | limit ms | ratio | ratio by round, min-max |",
        "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['threads']} | {r['runtime']} | {r['model']} | {r['inputs']} | {r['tokens']:.0f} | {r['gflop']:.2f} | "
                     f"{r['p50_ms']:.1f} | {r['p90_ms']:.1f} | {r['limit_ms']:.1f} | {r['ratio_to_limit']:.2f} | "
                     f"{min(r['ratio_by_round']):.2f}-{max(r['ratio_by_round']):.2f} |")
    if native_missing:
        lines += ["", f"NativeScorer not timed: {native_missing}"]
    else:
        lines += ["", "NativeScorer's matrix kernel, as `gemm=\"auto\"` chose it (one layer's products timed when the scorer was built, ms):", ""]
        lines += [f"- {r['threads']} thread(s), {r['model']}, {r['inputs']}: {r['gemm']} ("
                  + ", ".join(f"{k} {v:.2f}" for k, v in r["gemm_times_ms"].items()) + ")"
                  for r in rows if r["runtime"] == NATIVE]
    lines += ["", "The 1024x1024 fp32 matmul by kernel, median GFLOP/s over the default model's rounds:", ""]
    for r in rows:
        if r["model"].startswith("default") and r["runtime"] == TORCH:
            lines.append(f"- {r['threads']} thread(s): " + ", ".join(
                f"{k} {v:.0f}" for k, v in sorted(r["matmul_gflops_by_kernel"].items(), key=lambda kv: -kv[1])))
    lines += ["", f"Targets for the default model: p50 <= {TARGET_DEFAULT_MS:.0f} ms and ratio <= {TARGET_RATIO}.", ""]
    for r in defaults:
        key = f"{r['runtime']}, {r['threads']} thread(s)"
        ok = meets[key]
        line = (f"- {key}: p50 {r['p50_ms']:.1f} ms ({'met' if ok['p50'] else 'not met'}); ratio "
                f"{r['ratio_to_limit']:.2f} ({'met' if ok['ratio'] else 'not met'}; rounds "
                f"{min(r['ratio_by_round']):.2f} to {max(r['ratio_by_round']):.2f}).")
        if "matmuls_only_ms" in r:
            floor = r["matmuls_only_ms"]
            line += (f" The forward pass's matrix products alone, same shapes, back to back: {floor:.1f} ms = "
                     f"{floor / r['limit_ms']:.2f}x the limit.")
        lines.append(line)
    write_text(args.out / "latency.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
