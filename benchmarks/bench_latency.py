"""Scoring latency as a user feels it: ``model.score(question, candidates)`` for N candidates of one question.

For N in {1, 4, 8, 16, 64} candidate plans of one question (sampled by the base orchestrator for
the built-in tasks), p50 and p95 of ``model.score(question, plans)`` end to end (tokenizing
included), PyTorch on the CPU, for the default model (``configs/default.yaml``'s model section)
and for MiniLM, on one intra-op thread unless ``--threads`` says otherwise (a server scoring requests
side by side gives each one thread; on a loaded machine more threads than free cores wait for each
other). Beside each, as a figure and not a target, the *compute limit* of the same work:
the forward pass's FLOPs (from the real token counts: linear layers 2 * tokens * in * out,
attention 2 * 2 * Lq * Lk * width per row, the head) divided by the rate this machine reaches on
a 1024 x 1024 fp32 matmul, measured in the same run before each cell's calls. Target (issue 14):
p50 at most 30 ms for 8 candidates with the default model.

Run niced on a shared machine::

    nice python benchmarks/bench_latency.py            # writes results/latency.{json,md}
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

from orchrm.util.offline import apply_offline_env  # noqa: E402

apply_offline_env()  # telemetry off, no downloads (orchrm/util/offline.env), before the libraries read them

import torch  # noqa: E402

from orchrm import BradleyTerryModel  # noqa: E402
from orchrm.config import load_config  # noqa: E402
from orchrm.model.encoders import TokenBatch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from results_io import command_line, cpu_model, provenance, write_json, write_text  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
CANDIDATES = (1, 4, 8, 16, 64)
TARGET_N, TARGET_P50_MS = 8, 30.0


def questions_with_plans(per_domain: int, plans: int, seed: int) -> list[tuple[str, list[str]]]:
    """(question, ``plans`` distinct plan texts) for ``per_domain`` built-in tasks of each domain."""
    from orchrm.execution.samplers import BaseSampler
    from orchrm.execution.tasks import BUILTIN_DOMAINS, load_tasks

    rng, sampler, out = random.Random(seed), BaseSampler(), []
    for domain in BUILTIN_DOMAINS:
        for task in load_tasks(domain, per_domain, seed=seed):
            texts = [p.render() for p in sampler.sample(task, plans, rng)]
            if len(texts) == plans:
                out.append((task.question, texts))
    return out


def batch_flops(model: BradleyTerryModel, batch: TokenBatch) -> float:
    """Multiply-add FLOPs (x2) of one forward pass over ``batch``, from the real token counts."""
    cfg = model.encoder.config
    h, inter, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    linear = 2 * batch.num_tokens * (4 * h * h + 2 * h * inter)
    lp, la = batch.prompt_lens.double(), batch.action_lens.double()
    if batch.action_prompt is None:
        scores = float((la * la).sum())
    else:
        scores = float((lp * lp).sum() + (la * (la + lp[batch.action_prompt])).sum())
    head = 2 * batch.num_actions * (h * model.config.hidden_dim + model.config.hidden_dim)
    return layers * (linear + 2 * 2 * scores * h) + head


def matmul_rate(n: int = 1024, reps: int = 3) -> float:
    """FLOP/s of an n x n fp32 matmul (``torch.matmul``) on this machine right now, best of ``reps``."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def measure(model: BradleyTerryModel, cases: list[tuple[str, list[str]]], n: int, calls: int) -> dict:
    """p50/p95 of ``model.score(question, plans[:n])`` over ``calls`` calls (the questions in
    turn), and the compute limit of the same calls at the matmul rate sampled just before."""
    work = [(q, plans[:n]) for q, plans in cases]
    for q, plans in work[:2]:
        model.score(q, plans)  # warm-up
    batches = [model.pack(model.tokenize([q]), model.tokenize(p), [0] * n) for q, p in work]  # as score packs them
    flops = [batch_flops(model, b) for b in batches]
    tokens = [b.num_tokens for b in batches]
    rate = matmul_rate()
    times, limits = [], []
    for i in range(calls):
        q, plans = work[i % len(work)]
        t = time.perf_counter()
        model.score(q, plans)
        times.append(time.perf_counter() - t)
        limits.append(flops[i % len(work)] / rate)
    return {
        "candidates": n,
        "calls": calls,
        "p50_ms": 1e3 * statistics.median(times),
        "p95_ms": 1e3 * statistics.quantiles(times, n=20, method="inclusive")[-1],
        "limit_ms": 1e3 * statistics.median(limits),
        "tokens": statistics.median(tokens),
        "matmul_gflops": rate / 1e9,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=3, help="built-in tasks per domain (default 3)")
    ap.add_argument("--calls", type=int, default=20, help="calls per model and N (default 20; a quarter, at least 5, for N=64)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    cases = questions_with_plans(args.tasks, max(CANDIDATES), args.seed)
    print(f"{len(cases)} questions with {max(CANDIDATES)} plans each", file=sys.stderr)
    default = BradleyTerryModel(config=load_config(ROOT / "configs" / "default.yaml").model)
    default.fit_tokenizer([q for q, _ in cases] + [p for _, plans in cases for p in plans])
    models = {
        f"default ({default.config.encoder} {default.config.hidden_dim}x{default.config.num_layers}, "
        f"{default.config.architecture})": default.eval(),
        "minilm (shared_prompt)": BradleyTerryModel(encoder="minilm").eval(),
    }
    rows = []
    for name, model in models.items():
        for n in CANDIDATES:
            row = {"model": name, **measure(model, cases, n, args.calls if n <= 16 else max(5, args.calls // 4))}
            rows.append(row)
            print(f"{name:40s} N={n:3d} p50 {row['p50_ms']:8.2f} ms  p95 {row['p95_ms']:8.2f} ms  "
                  f"limit {row['limit_ms']:7.2f} ms  tokens {row['tokens']:.0f}", file=sys.stderr)

    target = next(r for r in rows if r["model"] == next(iter(models)) and r["candidates"] == TARGET_N)
    met = target["p50_ms"] <= TARGET_P50_MS
    threads = torch.get_num_threads()
    write_json(args.out / "latency.json", {
        "benchmark": "scoring latency: model.score for N candidates of one question (CPU, fp32, PyTorch)",
        **provenance(command_line("benchmarks/bench_latency.py", ap, args), torch=torch.__version__, torch_threads=threads),
        "questions": len(cases),
        "target": {"candidates": TARGET_N, "default_p50_ms": TARGET_P50_MS, "met": met},
        "rows": rows,
    })
    lines = [
        "# Scoring latency: `model.score(question, plans)` for N candidates of one question (CPU, fp32)",
        "",
        f"PyTorch, {threads} thread(s), end to end (tokenizing included); {args.calls} calls per cell "
        f"({max(5, args.calls // 4)} for N=64; p95 of so few is near their slowest) over "
        f"{len(cases)} built-in questions, each with plans sampled by the base orchestrator. Limit = the forward "
        "pass's FLOPs (real tokens) / the rate of a 1024x1024 fp32 matmul timed just before the cell's calls: "
        "a figure for scale, not a target. "
        f"Machine: {os.cpu_count()} CPUs ({cpu_model()}), shared with other jobs (load average at the end "
        f"{os.getloadavg()[0]:.1f}). Command: `python benchmarks/bench_latency.py"
        + (f" --threads {threads}" if threads != 1 else "") + "`.",
        "",
        "| model | N | tokens | p50 ms | p95 ms | limit ms | matmul GFLOP/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| {r['model']} | {r['candidates']} | {r['tokens']:.0f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | "
              f"{r['limit_ms']:.2f} | {r['matmul_gflops']:.0f} |" for r in rows]
    lines += ["", f"Target: p50 <= {TARGET_P50_MS:.0f} ms for {TARGET_N} candidates with the default model: "
              f"{target['p50_ms']:.1f} ms, {'met' if met else 'not met'}."]
    write_text(args.out / "latency.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
