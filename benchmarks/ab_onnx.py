"""A/B of ``OnnxScorer``: this checkout's against another git revision's, calls alternating in one process.

For a change to ``orchrm/onnxrt.py``: both scorers score the same sandbox tasks (a question and
its 8 plans per call), call for call in turn, so the machine's load falls on both alike; prints
each one's p50, the median of the per-call time ratios (new / old) and the largest reward
difference between them, and records them in ``results/ab_onnx.{json,md}`` (a rerun of the same
comparison replaces its entry). The other revision's ``onnxrt.py`` runs against this checkout's
``orchrm`` package. With more than one thread, ONNX Runtime's spinning is turned off for both
sessions (two spinning thread pools in one process slow each other down).

    python benchmarks/ab_onnx.py --against 1c04b9c
    python benchmarks/ab_onnx.py --against HEAD~1 --encoder minilm --threads 2
    python benchmarks/ab_onnx.py --against HEAD --dense-max-tokens 0   # row-wise attention vs the default
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402

from orchrm import BradleyTerryModel, onnxrt  # noqa: E402
from orchrm.onnxrt import OnnxScorer, session_options  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from bench_latency import RESULTS, sandbox_tasks  # noqa: E402
from results_io import cpu_model, write_json, write_text  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def scorer_class_at(revision: str, tmp: Path):
    """``OnnxScorer`` as ``orchrm/onnxrt.py`` defines it at ``revision``."""
    source = subprocess.run(
        ["git", "show", f"{revision}:orchrm/onnxrt.py"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if source.returncode:
        sys.exit(f"cannot read orchrm/onnxrt.py at {revision!r}: {source.stderr.strip()}")
    path = tmp / "onnxrt_other.py"
    path.write_text(source.stdout)
    spec = importlib.util.spec_from_file_location("onnxrt_other", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.OnnxScorer


def quiet_scorer(cls, model: BradleyTerryModel, threads: int):
    """``cls(model)`` whose ONNX Runtime threads do not spin (revisions before ``spinning=``: session rebuilt)."""
    if "spinning" in inspect.signature(cls).parameters:
        return cls(model, threads=threads, spinning=False)
    scorer = cls(model, threads=threads)
    options = session_options(threads, spinning=False)
    scorer.session = ort.InferenceSession(scorer.proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return scorer


def git_revision(revision: str) -> str:
    """``revision`` as a short commit hash."""
    out = subprocess.run(["git", "rev-parse", "--short", revision], cwd=ROOT, capture_output=True, text=True, check=False)
    return out.stdout.strip() or revision


def orchrm_changed() -> bool:
    """Whether this checkout's ``orchrm/`` differs from its commit."""
    out = subprocess.run(["git", "status", "--porcelain", "orchrm"], cwd=ROOT, capture_output=True, text=True, check=False)
    return bool(out.stdout.strip())


def record(out: Path, result: dict) -> None:
    """Add ``result`` to ``out`` (.json, one entry per comparison, a rerun replacing its entry) and its .md table."""
    key = (f"{result['checkout']} vs {result['baseline']} on {result.get('cpu', 'an unrecorded CPU')}: {result['encoder']}, {result['architecture']}, "
           f"{result['threads']} thread(s), dense up to {result['dense_max_tokens']} tokens")
    runs = json.loads(out.read_text())["comparisons"] if out.exists() else {}
    runs[key] = result
    write_json(out, {"benchmark": "OnnxScorer A/B, calls alternating in one process", "comparisons": runs})
    lines = [
        "# OnnxScorer A/B: this checkout against another revision",
        "",
        "`python benchmarks/ab_onnx.py --against REV [...]`: both scorers score the same sandbox tasks (a question "
        "and its 8 plans a call), call for call in turn; ratio = median of the per-call time ratios (new / old).",
        "",
        "| checkout | baseline | CPU | encoder | layout | threads | dense up to | calls | old p50 ms | new p50 ms | new / old | largest reward diff |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs.values():
        lines.append(f"| {r['checkout']} | {r['baseline']} | {r.get('cpu', 'not recorded')} | {r['encoder']} | {r['architecture']} | {r['threads']} | "
                     f"{r['dense_max_tokens']} | {r['calls']} | {r['old_p50_ms']:.2f} | {r['new_p50_ms']:.2f} | "
                     f"{r['new_over_old']:.3f} | {r['largest_reward_difference']:.1e} |")
    write_text(out.with_suffix(".md"), "\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", required=True, help="git revision whose orchrm/onnxrt.py is the baseline")
    ap.add_argument("--encoder", default="scratch", help="scratch (default) or minilm")
    ap.add_argument("--architecture", default="shared_prompt", help="shared_prompt (default) or joint")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads (default 1)")
    ap.add_argument("--tasks", type=int, default=6, help="tasks per domain (default 6)")
    ap.add_argument("--rounds", type=int, default=4, help="passes over the tasks (default 4)")
    ap.add_argument("--dense-max-tokens", type=int, default=None, metavar="N",
                    help="this checkout's scorer attends densely up to N tokens a chunk (default: "
                         "orchrm.onnxrt.DENSE_MAX_TOKENS; 0: rows always)")
    ap.add_argument("--out", type=Path, default=RESULTS / "ab_onnx.json",
                    help="results file, one entry per comparison (default results/ab_onnx.json, and .md beside it)")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    if args.dense_max_tokens is not None:
        onnxrt.DENSE_MAX_TOKENS = args.dense_max_tokens

    cases = [(q, plans) for _, q, plans in sandbox_tasks(args.tasks, 8, 7)]
    model = BradleyTerryModel(encoder=args.encoder, architecture=args.architecture, dropout=0.0)
    if not model.fitted:
        model.fit_tokenizer([q for q, _ in cases] + [p for _, ps in cases for p in ps])
    model.eval()
    with tempfile.TemporaryDirectory() as tmp:
        classes = {"old": scorer_class_at(args.against, Path(tmp)), "new": OnnxScorer}
    if args.threads > 1:
        scorers = {name: quiet_scorer(cls, model, args.threads) for name, cls in classes.items()}
    else:
        scorers = {name: cls(model, threads=args.threads) for name, cls in classes.items()}
    for scorer in scorers.values():
        for q, plans in cases[:3]:
            scorer.score(q, plans)

    times: dict[str, list[float]] = {name: [] for name in scorers}
    ratios, largest_diff = [], 0.0
    for r in range(args.rounds):
        order = list(scorers) if r % 2 == 0 else list(reversed(scorers))  # neither always goes first
        for q, plans in cases:
            rewards = {}
            for name in order:
                t = time.perf_counter()
                rewards[name] = scorers[name].score(q, plans)
                times[name].append(time.perf_counter() - t)
            ratios.append(times["new"][-1] / times["old"][-1])
            largest_diff = max(largest_diff, float((rewards["new"] - rewards["old"]).abs().max()))
    result = {
        "baseline": git_revision(args.against),
        "checkout": git_revision("HEAD") + ("+changes" if orchrm_changed() else ""),
        "cpu": cpu_model(),
        "encoder": args.encoder,
        "architecture": args.architecture,
        "threads": args.threads,
        "dense_max_tokens": onnxrt.DENSE_MAX_TOKENS,
        "calls": len(ratios),
        "old_p50_ms": 1e3 * statistics.median(times["old"]),
        "new_p50_ms": 1e3 * statistics.median(times["new"]),
        "new_over_old": statistics.median(ratios),
        "largest_reward_difference": largest_diff,
    }
    print(json.dumps(result, indent=2))
    record(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
