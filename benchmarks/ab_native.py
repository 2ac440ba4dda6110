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

import torch  # noqa: E402

from orchrm import BradleyTerryModel  # noqa: E402
from orchrm.native import GEMMS, NativeScorer  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from ab_onnx import ROOT, git_revision, orchrm_changed  # noqa: E402
from bench_latency import RESULTS, default_model, sandbox_tasks  # noqa: E402
from results_io import cpu_model, write_json, write_text  # noqa: E402


def _git_show(revision: str, path: str) -> str:
    out = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode:
        sys.exit(f"cannot read {path} at {revision!r}: {out.stderr.strip()}")
    return out.stdout


def scorer_at(revision: str, tmp: Path):
    """``(NativeScorer, library)`` as ``orchrm/native.py`` and ``native_score.c`` define them at ``revision``."""
    path = tmp / "native_other.py"
    path.write_text(_git_show(revision, "orchrm/native.py"))
    spec = importlib.util.spec_from_file_location("native_other", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if "lib" not in inspect.signature(module.NativeScorer).parameters:
        sys.exit(f"NativeScorer at {revision!r} takes no lib=: compare against 8cc7532 or later")
    source = _git_show(revision, "orchrm/native_score.c").encode()
    lib = module.load(module._build(source, Path(torch.__file__).parent / "lib"))
    return module.NativeScorer, lib


def record(out: Path, result: dict) -> None:
    """Add ``result`` to ``out`` (.json, one entry per comparison, a rerun replacing its entry) and its .md table."""
    key = (f"{result['checkout']} vs {result['baseline']} on {result['cpu']}: {result['encoder']}, "
           f"{result['architecture']}, {result['threads']} thread(s), gemm {result['gemm']}")
    runs = json.loads(out.read_text())["comparisons"] if out.exists() else {}
    runs[key] = result
    write_json(out, {"benchmark": "NativeScorer A/B, calls alternating in one process", "comparisons": runs})
    lines = [
        "# NativeScorer A/B: this checkout against another revision",
        "",
        "`python benchmarks/ab_native.py --against REV [...]`: both scorers score the same sandbox tasks (a question "
        "and its 8 plans a call), call for call in turn; ratio = median of the per-call time ratios (new / old). "
        "gemm: this checkout's matrix kernel as asked (auto: as it chose), and the baseline's where it has a choice.",
        "",
        "| checkout | baseline | CPU | encoder | layout | threads | gemm (new, old) | calls | old p50 ms | new p50 ms | new / old | largest reward diff |",
        "|---|---|---|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in runs.values():
        lines.append(f"| {r['checkout']} | {r['baseline']} | {r['cpu']} | {r['encoder']} | {r['architecture']} | {r['threads']} | "
                     f"{r['new_gemm']}, {r['old_gemm']} | {r['calls']} | {r['old_p50_ms']:.2f} | {r['new_p50_ms']:.2f} | "
                     f"{r['new_over_old']:.3f} | {r['largest_reward_difference']:.1e} |")
    write_text(out.with_suffix(".md"), "\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", required=True, help="git revision whose orchrm/native.py and native_score.c are the baseline")
    ap.add_argument("--encoder", default="scratch", help="scratch (default: the default model) or minilm")
    ap.add_argument("--architecture", default="shared_prompt", help="shared_prompt (default) or joint")
    ap.add_argument("--threads", type=int, default=1, help="threads of each call (default 1)")
    ap.add_argument("--gemm", choices=[*GEMMS, "auto"], default="auto",
                    help="the matrix kernel of both scorers, where the baseline has a choice (default auto)")
    ap.add_argument("--tasks", type=int, default=6, help="tasks per domain (default 6)")
    ap.add_argument("--rounds", type=int, default=4, help="passes over the tasks (default 4)")
    ap.add_argument("--out", type=Path, default=RESULTS / "ab_native.json",
                    help="results file, one entry per comparison (default results/ab_native.json, and .md beside it)")
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
        "gemm": args.gemm,
        "new_gemm": scorers["new"].gemm,
        "old_gemm": getattr(scorers["old"], "gemm", "mkl"),
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
