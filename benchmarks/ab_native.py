"""A/B of ``NativeScorer``: this checkout's against another git revision's, calls alternating in one process.

For a change to ``orchrm/native.py`` or ``orchrm/native_score.c``: the other revision's two files
are built (its C source compiled into the library cache like this checkout's) and loaded beside
this checkout's, and both scorers score the same sandbox tasks (a question and its 8 plans per
call), call for call in turn, so the machine's load falls on both alike. Prints each one's p50,
the median of the per-call time ratios (new / old) and the largest reward difference between
them, and records them in ``results/ab_native.{json,md}`` (a rerun of the same comparison
replaces its entry). The other revision's ``native.py`` runs against this checkout's ``orchrm``
package; it must take ``lib=`` (8cc7532 and later).

    python benchmarks/ab_native.py --against 8cc7532              # MKL only, against gemm="auto"
    python benchmarks/ab_native.py --against 05305d8 --threads 2 --gemm onednn
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

import torch  # noqa: E402

from orchrm import BradleyTerryModel  # noqa: E402
from orchrm.native import GEMMS, NativeScorer  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from ab_runs import alternate, common_args, module_at, record, source_at  # noqa: E402
from bench_latency import RESULTS, default_model, sandbox_tasks  # noqa: E402


def scorer_at(revision: str, tmp: Path):
    """``(NativeScorer, library)`` as ``orchrm/native.py`` and ``native_score.c`` define them at ``revision``."""
    module = module_at(revision, "orchrm/native.py", tmp)
    if "lib" not in inspect.signature(module.NativeScorer).parameters:
        sys.exit(f"NativeScorer at {revision!r} takes no lib=: compare against 8cc7532 or later")
    source = source_at(revision, "orchrm/native_score.c").encode()
    lib = module.load(module._build(source, Path(torch.__file__).parent / "lib"))
    return module.NativeScorer, lib


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", required=True, help="git revision whose orchrm/native.py and native_score.c are the baseline")
    common_args(ap, results=RESULTS / "ab_native.json", threads_help="threads of each call (default 1)")
    ap.add_argument("--gemm", choices=[*GEMMS, "auto"], default="auto",
                    help="the matrix kernel of both scorers, where the baseline has a choice (default auto)")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)

    cases = [(q, plans) for _, q, plans in sandbox_tasks(args.tasks, 8, 7)]
    if args.encoder == "scratch" and args.architecture == "shared_prompt":
        model = default_model(cases)
    else:
        model = BradleyTerryModel(encoder=args.encoder, architecture=args.architecture, dropout=0.0)
        if not model.fitted:
            model.fit_tokenizer([q for q, _ in cases] + [p for _, ps in cases for p in ps])
        model.eval()
    with tempfile.TemporaryDirectory() as tmp:
        old_class, old_lib = scorer_at(args.against, Path(tmp))
    old_takes_gemm = "gemm" in inspect.signature(old_class).parameters
    scorers = {
        "old": old_class(model, threads=args.threads, lib=old_lib, **({"gemm": args.gemm} if old_takes_gemm else {})),
        "new": NativeScorer(model, threads=args.threads, gemm=args.gemm),
    }
    result = alternate(scorers, cases, args) | {
        "gemm": args.gemm,
        "new_gemm": scorers["new"].gemm,
        "old_gemm": getattr(scorers["old"], "gemm", "mkl"),
    }
    print(json.dumps(result, indent=2))
    record(args.out, result, scorer="NativeScorer", setting=f"gemm {result['gemm']}",
           column="gemm (new, old)", cell=lambda r: f"{r['new_gemm']}, {r['old_gemm']}",
           note="gemm: this checkout's matrix kernel as asked (auto: as it chose), and the baseline's where it has a choice.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
