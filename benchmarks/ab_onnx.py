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
import inspect
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402

from orchrm import BradleyTerryModel, onnxrt  # noqa: E402
from orchrm.onnxrt import OnnxScorer, session_options  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from ab_runs import alternate, common_args, module_at, record  # noqa: E402
from bench_latency import RESULTS, sandbox_tasks  # noqa: E402


def scorer_class_at(revision: str, tmp: Path):
    """``OnnxScorer`` as ``orchrm/onnxrt.py`` defines it at ``revision``."""
    return module_at(revision, "orchrm/onnxrt.py", tmp).OnnxScorer


def quiet_scorer(cls, model: BradleyTerryModel, threads: int):
    """``cls(model)`` whose ONNX Runtime threads do not spin (revisions before ``spinning=``: session rebuilt)."""
    if "spinning" in inspect.signature(cls).parameters:
        return cls(model, threads=threads, spinning=False)
    scorer = cls(model, threads=threads)
    options = session_options(threads, spinning=False)
    scorer.session = ort.InferenceSession(scorer.proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return scorer


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", required=True, help="git revision whose orchrm/onnxrt.py is the baseline")
    common_args(ap, results=RESULTS / "ab_onnx.json", threads_help="ONNX Runtime intra-op threads (default 1)")
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
    result = alternate(scorers, cases, args) | {
        "dense_max_tokens": onnxrt.DENSE_MAX_TOKENS,
    }
    print(json.dumps(result, indent=2))
    record(args.out, result, scorer="OnnxScorer", setting=f"dense up to {result['dense_max_tokens']} tokens",
           column="dense up to", cell=lambda r: str(r["dense_max_tokens"]), numeric=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
