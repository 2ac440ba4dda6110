"""Where :class:`orchrm.native.NativeScorer`'s time goes: its compiled call's phases, beside the limit.

The default model and the same inputs as ``bench_latency.py`` (the sandbox's question + 8 plans,
one task per call), scored through ``NativeScorer`` with its phase timers on
(:meth:`NativeScorer.profile`). Reports, per call: the mean time of each phase of the compiled
forward pass (the linear layers, attention, LayerNorm, ...), the rest of ``score`` (tokenizing,
packing, the call itself: the mean call less the phases) and the p50 of the whole call, beside
the same run's compute limit (the forward pass's FLOPs over a 1024x1024 fp32 matmul's rate, the
fastest installed kernel's, sampled before and after the calls). The timers read the clock about
20 times a call.

    nice python benchmarks/profile_native.py           # writes results/native_profile.{json,md}
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from orchrm.errors import ConfigError  # noqa: E402
from orchrm.native import GEMMS, PHASES, NativeScorer  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from bench_latency import batch_flops, default_model, matmul_rates, rates_around, sandbox_tasks  # noqa: E402
from results_io import cpu_model, machine, write_json, write_text  # noqa: E402

#: the kernels by NativeScorer's names for them
KERNELS = {"mkl": "MKL (weights packed for it)", "onednn": "oneDNN's brgemm (weights in panels)"}
RESULTS = Path(__file__).parent / "results"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=6, help="tasks per domain (default 6)")
    ap.add_argument("--rounds", type=int, default=4, help="passes over the tasks (default 4)")
    ap.add_argument("--threads", type=int, default=1, help="threads of each call: the linear layers, attention's heads, the element-wise rows (default 1)")
    ap.add_argument("--gemm", choices=[*GEMMS, "auto"], default="auto",
                    help="the linear layers' matrix kernel (default auto: the faster here, timed when the first scorer of this shape is built)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)

    cases = [(q, plans) for _, q, plans in sandbox_tasks(args.tasks, 8, args.seed)]
    model = default_model(cases)
    try:
        scorer = NativeScorer(model, threads=args.threads, gemm=args.gemm)
    except ConfigError as exc:  # no MKL in this PyTorch, or no C compiler: nothing to profile here
        print(f"NativeScorer not profiled: {exc}", file=sys.stderr)
        return 0
    flops = [batch_flops(model, model.pack(model.tokenize([q]), model.tokenize(p), [0] * len(p))) for q, p in cases]
    for q, plans in cases:  # warm-up
        scorer.score(q, plans)

    samples = [matmul_rates(1024, reps=3)]  # before and after the profiled calls
    scorer.profile()
    calls = []
    for _ in range(args.rounds):
        for q, plans in cases:
            t = time.perf_counter()
            scorer.score(q, plans)
            calls.append(time.perf_counter() - t)
    phases = scorer.profile(on=False)
    samples.append(matmul_rates(1024, reps=3))
    rates, by_kernel, rates_text = rates_around(samples)

    assert phases["chunks"] == len(calls), "one chunk per call: 8 plans of one task fit in one"
    phase_ms = {p: phases[p] for p in PHASES}
    mean_ms, p50_ms = 1e3 * statistics.mean(calls), 1e3 * statistics.median(calls)
    rest_ms = mean_ms - sum(phase_ms.values())
    limit_ms = 1e3 * statistics.median(flops) / statistics.mean(rates)
    rows = sorted(phase_ms.items(), key=lambda kv: -kv[1]) + [("the rest of score (Python, the call)", rest_ms)]

    result = {
        "benchmark": "phase profile of NativeScorer, default model, 8 plans of one task",
        "machine": machine(torch=torch.__version__),
        "threads": args.threads,
        "gemm": scorer.gemm,
        "gemm_times_ms": scorer.gemm_times,
        "calls": len(calls),
        "matmul_rate_gflops": [r / 1e9 for r in rates],
        "matmul_gflops_by_kernel": by_kernel,
        "call_p50_ms": p50_ms,
        "call_mean_ms": mean_ms,
        "limit_ms": limit_ms,
        "phase_ms": phase_ms,
        "rest_ms": rest_ms,
    }
    write_json(args.out / "native_profile.json", result)
    lines = [
        "# Where NativeScorer's time goes (default model, 8 plans of one task)",
        "",
        f"Its phase timers over {len(calls)} calls, {args.threads} thread(s) of a {cpu_model()}; means per call. "
        f"Whole call: mean {mean_ms:.2f} ms, p50 {p50_ms:.2f} ms ({p50_ms / limit_ms:.2f}x the limit); the compute limit of the same work in this run: "
        f"{limit_ms:.2f} ms ({rates_text}). The linear layers run on {KERNELS[scorer.gemm]}"
        + (" (chosen by timing one layer's products when the first scorer of this shape was built: "
           + ", ".join(f"{KERNELS[k]} {v:.2f} ms" for k, v in scorer.gemm_times.items()) + ")" if scorer.gemm_times else "")
        + ".",
        "",
        "| phase | ms per call | x the limit |",
        "|---|---:|---:|",
        *(f"| {name} | {ms:.3f} | {ms / limit_ms:.2f} |" for name, ms in rows),
        "",
        "linear layers: the q/k/v, attention output and feed-forward products; "
        "bias and keys: the q/k/v bias and the keys transposed for the score tiles; attention: scores, "
        "softmax and the weighted values; activation: the feed-forward's bias and GELU; the rest: "
        "tokenizing, packing and preparing the call in Python, and the call itself.",
    ]
    write_text(args.out / "native_profile.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
