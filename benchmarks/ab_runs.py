"""What the A/B scripts (``ab_onnx.py``, ``ab_native.py``) share: the revisions compared, the
calls alternating between two scorers, and the results file that keeps one entry per comparison."""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from results_io import cpu_model, write_json, write_text

ROOT = Path(__file__).resolve().parent.parent


def git_revision(revision: str) -> str:
    """``revision`` as a short commit hash."""
    out = subprocess.run(["git", "rev-parse", "--short", revision], cwd=ROOT, capture_output=True, text=True, check=False)
    return out.stdout.strip() or revision


def orchrm_changed() -> bool:
    """Whether this checkout's ``orchrm/`` differs from its commit."""
    out = subprocess.run(["git", "status", "--porcelain", "orchrm"], cwd=ROOT, capture_output=True, text=True, check=False)
    return bool(out.stdout.strip())


def source_at(revision: str, path: str) -> str:
    """The text of ``path`` (from the repository's root) at ``revision``; exits naming both if git has none."""
    out = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode:
        sys.exit(f"cannot read {path} at {revision!r}: {out.stderr.strip()}")
    return out.stdout


def module_at(revision: str, path: str, tmp: Path):
    """The Python module ``path`` as it is at ``revision``, imported from a copy in ``tmp`` (it
    imports this checkout's packages)."""
    name = Path(path).stem + "_other"
    copy = tmp / f"{name}.py"
    copy.write_text(source_at(revision, path))
    spec = importlib.util.spec_from_file_location(name, copy)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def alternate(scorers: dict, cases: Sequence[tuple[str, list[str]]], args: argparse.Namespace) -> dict:
    """Warm both scorers up, then score every case with ``scorers["old"]`` and ``scorers["new"]``
    in turn (who goes first switching every round), ``args.rounds`` times. Returns the comparison
    (the revisions, the CPU, the model and threads of ``args``): their p50s, the median per-call
    ratio (new / old) and the largest reward difference."""
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
    return {
        "baseline": git_revision(args.against),
        "checkout": git_revision("HEAD") + ("+changes" if orchrm_changed() else ""),
        "cpu": cpu_model(),
        "encoder": args.encoder,
        "architecture": args.architecture,
        "threads": args.threads,
        "calls": len(ratios),
        "old_p50_ms": 1e3 * statistics.median(times["old"]),
        "new_p50_ms": 1e3 * statistics.median(times["new"]),
        "new_over_old": statistics.median(ratios),
        "largest_reward_difference": largest_diff,
    }


def common_args(ap: argparse.ArgumentParser, *, results: Path, threads_help: str) -> None:
    """The A/B scripts' shared options: the model, the threads, how many calls, the results file."""
    ap.add_argument("--encoder", default="scratch", help="scratch (default) or minilm")
    ap.add_argument("--architecture", default="shared_prompt", help="shared_prompt (default) or joint")
    ap.add_argument("--threads", type=int, default=1, help=threads_help)
    ap.add_argument("--tasks", type=int, default=6, help="tasks per domain (default 6)")
    ap.add_argument("--rounds", type=int, default=4, help="passes over the tasks (default 4)")
    ap.add_argument("--out", type=Path, default=results,
                    help=f"results file, one entry per comparison (default results/{results.name}, and .md beside it)")


def record(out: Path, result: dict, *, scorer: str, setting: str, column: str, cell: Callable[[dict], str],
           numeric: bool = False, note: str = "") -> None:
    """Add ``result`` to ``out`` (.json, one entry per comparison, a rerun replacing its entry) and
    write the .md table beside it. ``scorer``: the class compared; ``setting``: what else tells
    this comparison apart (in its key); ``column`` and ``cell`` (of a result): the script's own
    column, right-aligned when ``numeric``; ``note``: said under the table's intro."""
    key = (f"{result['checkout']} vs {result['baseline']} on {result.get('cpu', 'an unrecorded CPU')}: {result['encoder']}, "
           f"{result['architecture']}, {result['threads']} thread(s), {setting}")
    runs = json.loads(out.read_text())["comparisons"] if out.exists() else {}
    runs[key] = result
    write_json(out, {"benchmark": f"{scorer} A/B, calls alternating in one process", "comparisons": runs})
    script = Path(sys.argv[0]).name
    lines = [
        f"# {scorer} A/B: this checkout against another revision",
        "",
        f"`python benchmarks/{script} --against REV [...]`: both scorers score the same sandbox tasks (a question "
        "and its 8 plans a call), call for call in turn; ratio = median of the per-call time ratios (new / old)."
        + (f" {note}" if note else ""),
        "",
        f"| checkout | baseline | CPU | encoder | layout | threads | {column} | calls | old p50 ms | new p50 ms | new / old | largest reward diff |",
        f"|---|---|---|---|---|---:|{'---:' if numeric else '---'}|---:|---:|---:|---:|---:|",
    ]
    for r in runs.values():
        lines.append(f"| {r['checkout']} | {r['baseline']} | {r.get('cpu', 'not recorded')} | {r['encoder']} | {r['architecture']} | "
                     f"{r['threads']} | {cell(r)} | {r['calls']} | {r['old_p50_ms']:.2f} | {r['new_p50_ms']:.2f} | "
                     f"{r['new_over_old']:.3f} | {r['largest_reward_difference']:.1e} |")
    write_text(out.with_suffix(".md"), "\n".join(lines) + "\n")
