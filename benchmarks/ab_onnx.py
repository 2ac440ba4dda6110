"""A/B of ``OnnxScorer``: this checkout's against another git revision's, calls alternating in one process.

For a change to ``orchrm/onnxrt.py``: both scorers score the same sandbox tasks (a question and
its 8 plans per call), call for call in turn, so the machine's load falls on both alike; prints
each one's p50, the median of the per-call time ratios (new / old) and the largest reward
difference between them. The other revision's ``onnxrt.py`` runs against this checkout's
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
from orchrm.onnxrt import OnnxScorer  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from bench_latency import sandbox_tasks  # noqa: E402

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
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    scorer.session = ort.InferenceSession(scorer.proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return scorer


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
    print(f"{args.encoder}, {args.architecture}, {args.threads} thread(s), {len(ratios)} calls each, "
          f"baseline orchrm/onnxrt.py at {args.against}; new: dense attention up to {onnxrt.DENSE_MAX_TOKENS} tokens")
    for name, ts in times.items():
        print(f"  {name}: p50 {1e3 * statistics.median(ts):.2f} ms")
    print(f"  new / old, median of per-call ratios: {statistics.median(ratios):.3f}")
    print(f"  largest reward difference: {largest_diff:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
