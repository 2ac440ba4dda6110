"""Where :class:`orchrm.onnxrt.OnnxScorer`'s time goes: ONNX Runtime's profiler, by operator type.

The default model and the same inputs as ``bench_latency.py`` (the sandbox's question + 8 plans,
one task per call), scored through ``OnnxScorer`` with profiling on. Reports, per call: each
operator type's kernel time (summed over its nodes), the whole ``session.run`` and the Python
side of ``score`` (tokenizing, packing, building the inputs), beside the same run's compute
limit (the forward pass's FLOPs over a 1024x1024 fp32 matmul's rate, the fastest installed kernel's,
sampled before and after the profiled calls). The profiler adds a little time to every operator. Kernel times are medians
over calls, so they need not add up to the median run.

    nice python benchmarks/profile_onnx.py             # writes results/onnx_profile.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402

from orchrm.onnxrt import OnnxScorer, graph_inputs, session_options  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from bench_latency import batch_flops, default_model, matmul_rates, rates_around, sandbox_tasks  # noqa: E402
from results_io import cpu_model, machine, write_json, write_text  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def profiled_session(scorer: OnnxScorer, dense: bool, threads: int, prefix: str) -> ort.InferenceSession:
    """A session of one of the scorer's graphs with ONNX Runtime's profiler on (the scorer's options otherwise)."""
    options = session_options(threads)
    options.enable_profiling = True
    options.profile_file_prefix = prefix
    return ort.InferenceSession(scorer.graphs[dense].SerializeToString(), options, providers=["CPUExecutionProvider"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=6, help="tasks per domain (default 6)")
    ap.add_argument("--rounds", type=int, default=4, help="passes over the tasks (default 4)")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads (default 1)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)

    cases = [(q, plans) for _, q, plans in sandbox_tasks(args.tasks, 8, args.seed)]
    model = default_model(cases)
    scorer = OnnxScorer(model, threads=args.threads)

    packed = [model.pack(model.tokenize([q]), model.tokenize(plans), [0] * len(plans)) for q, plans in cases]
    dense = all(scorer.dense_for(b) for b in packed)  # the graph score() runs them through (rows takes any)
    python_side, batches = [], []
    for _ in range(args.rounds):
        for q, plans in cases:
            t = time.perf_counter()
            ids = model.tokenize([q, *plans])
            batch = model.pack(ids[:1], ids[1:], [0] * len(plans))
            inputs = graph_inputs(batch, dense=dense)
            python_side.append(time.perf_counter() - t)
            batches.append((batch, inputs))

    samples = [matmul_rates(1024, reps=3)]  # before and after the profiled calls
    with tempfile.TemporaryDirectory() as tmp:
        session = profiled_session(scorer, dense, args.threads, str(Path(tmp) / "ort"))
        for _, inputs in batches[: len(cases)]:  # warm-up calls, profiled too: dropped below
            session.run(None, inputs)
        for _, inputs in batches:
            session.run(None, inputs)
        events = json.loads(Path(session.end_profiling()).read_text())
    samples.append(matmul_rates(1024, reps=3))
    rates, by_kernel, rates_text = rates_around(samples)

    runs = [e for e in events if e.get("name") == "model_run"][len(cases) :]
    per_call: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(runs))
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        call = next((i for i, r in enumerate(runs) if r["ts"] <= e["ts"] <= r["ts"] + r["dur"]), None)
        if call is not None:
            per_call[e["args"]["op_name"]][call] += e["dur"] / 1e3
    ops = sorted(((op, statistics.median(t)) for op, t in per_call.items()), key=lambda kv: -kv[1])
    run_ms = statistics.median(r["dur"] / 1e3 for r in runs)
    python_ms = 1e3 * statistics.median(python_side)
    limit_ms = 1e3 * statistics.median(batch_flops(model, b) for b, _ in batches) / statistics.mean(rates)
    gemm_ms = dict(ops).get("Gemm", 0.0)

    result = {
        "benchmark": "ONNX Runtime profile of OnnxScorer, default model, 8 plans of one task",
        "machine": machine(onnxruntime=ort.__version__),
        "threads": args.threads,
        "attention": "dense" if dense else "rows",
        "calls": len(runs),
        "matmul_rate_gflops": [r / 1e9 for r in rates],
        "matmul_gflops_by_kernel": by_kernel,
        "session_run_ms": run_ms,
        "python_side_ms": python_ms,
        "limit_ms": limit_ms,
        "kernel_ms_by_op": dict(ops),
    }
    write_json(args.out / "onnx_profile.json", result)
    lines = [
        "# Where OnnxScorer's time goes (default model, 8 plans of one task)",
        "",
        f"ONNX Runtime's profiler over {len(runs)} calls, {args.threads} thread(s) of a {cpu_model()}, "
        f"{'dense' if dense else 'row-wise'} attention graph; medians per call. "
        f"`session.run`: {run_ms:.2f} ms; the Python side of `score` (tokenize, pack, inputs): {python_ms:.2f} ms; "
        f"the compute limit of the same work in this run: {limit_ms:.2f} ms ({rates_text}"
        f"; ONNX Runtime's Gemm runs on MLAS). The linear layers alone "
        f"(Gemm) take {gemm_ms:.2f} ms = {gemm_ms / limit_ms:.2f}x the limit.",
        "",
        "| operator | kernel ms per call | share of session.run |",
        "|---|---:|---:|",
        *(f"| {op} | {ms:.3f} | {ms / run_ms:.0%} |" for op, ms in ops),
        "",
        "Gemm: the linear layers (q, k, v, attention output, feed-forward, head); FusedMatMul: the "
        "attention's scores and weighted values; ReduceMax, Sub, Max, Softmax: its "
        "masked softmax; Split, Transpose, Reshape: the heads' layout; Add: residuals, embeddings and the mask bias.",
    ]
    write_text(args.out / "onnx_profile.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
