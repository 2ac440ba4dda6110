"""Scoring latency as a user feels it: ``model.score(question, candidates)`` for N candidates of one question.

For N in {1, 4, 8, 16, 64} candidate plans of one question (sampled by the base orchestrator for
the built-in tasks), p50 and p95 of ``model.score(question, plans)`` end to end (tokenizing
included), PyTorch on the CPU, for the default model (``configs/default.yaml``'s model section)
and for MiniLM, on one intra-op thread unless ``--threads`` says otherwise (a server scoring requests
side by side gives each one thread; on a loaded machine more threads than free cores wait for each
other). Beside each, as a figure and not a target, the *compute limit* of the same work:
the forward pass's FLOPs (from the real token counts: linear layers 2 * tokens * in * out,
attention 2 * 2 * Lq * Lk * width per row, the head) divided by the rate this machine reaches on
a 1024 x 1024 fp32 matmul, measured in the same run before each cell's calls. Target (issue 14,
:data:`benchmarks.common.targets.LATENCY`): p50 at most 30 ms for 8 candidates with the default model.

Run niced on a shared machine::

    nice python -m benchmarks.latency            # writes results/latency.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.common.candidates import Question, questions_with_plans
from benchmarks.common.results_io import RESULTS, ROOT, command_line, provenance, write_json
from benchmarks.common.targets import LATENCY
from orchrm import BradleyTerryModel
from orchrm.config import load_config
from orchrm.model.encoders import TokenBatch

CANDIDATES = (1, 4, 8, 16, 64)


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


def measure(model: BradleyTerryModel, cases: list[Question], n: int, calls: int) -> dict:
    """p50/p95 of ``model.score(question, plans[:n])`` over ``calls`` calls (the questions in
    turn), and the compute limit of the same calls at the matmul rate sampled just before."""
    work = [(c.question, list(c.plans[:n])) for c in cases]
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
    default.fit_tokenizer([c.question for c in cases] + [p for c in cases for p in c.plans])
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

    target = next(r for r in rows if r["model"] == next(iter(models)) and r["candidates"] == LATENCY.candidates)
    met = target["p50_ms"] <= LATENCY.p50_ms
    path = write_json(args.out / "latency.json", {
        "benchmark": "scoring latency: model.score for N candidates of one question (CPU, fp32, PyTorch)",
        **provenance(command_line("benchmarks.latency", ap, args), torch=torch.__version__,
                     torch_threads=torch.get_num_threads()),
        "questions": len(cases),
        "target": {"candidates": LATENCY.candidates, "default_p50_ms": LATENCY.p50_ms, "met": met},
        "rows": rows,
    })
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
