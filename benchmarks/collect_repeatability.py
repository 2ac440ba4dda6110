"""Does a collection give the same artifacts twice, whatever else the machine is doing?

The built-in collection (``orchrm collect`` without ``--config``: 200 tasks per domain, 8 plans,
3 runs each) of ``--domains`` (by default ``code``, the one domain whose quality comes from
running programs under time limits), collected twice from an empty cache: once with the machine
otherwise quiet, once beside ``--busy`` processes that spin on the CPU (each in its own session,
so the scheduler shares the CPUs between them and the collection). Reported: the artifacts whose
quality or content differ between the two, their tasks, and the pairs (the built-in
``orchrm pairs``) that differ. A collection whose code checks were timed by a wall-clock alarm
changed on a busy machine (a program near its limit timed out, and a vote among samples went the
other way); the sandbox now times a check in CPU time.

    python -m benchmarks.collect_repeatability    # benchmarks/results/ablations/collect_repeatability.json
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from benchmarks.common import steps
from benchmarks.common.results_io import RESULTS, command_line, provenance, write_json
from orchrm.config import CollectConfig, PairsConfig, with_overrides


@contextlib.contextmanager
def busy(n: int) -> Iterator[None]:
    """``n`` processes that spin on the CPU, each in a session of its own, for the block's duration."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(n)]
    try:
        time.sleep(0.5)
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def collect_once(collect: CollectConfig, cache: Path) -> tuple[object, object, float]:
    """The artifacts and pairs of ``collect`` collected into the empty ``cache``, and the seconds it took."""
    t0 = time.perf_counter()
    pairs = steps.pair_table(collect, None, PairsConfig(), cache=cache).frame
    artifacts = steps.collected(collect, None, cache=cache).frame()
    return artifacts, pairs, round(time.perf_counter() - t0, 1)


def differences(quiet, loaded, quiet_pairs, loaded_pairs, *, max_examples: int = 8) -> dict:
    """What differs between two collections of the same artifacts (matched by ``artifact_id``),
    with the first ``max_examples`` differing artifacts: task, agent, quality in each, and the
    lines of their content that differ (quiet ``-``, busy ``+``); and the pairs (matched by
    ``pair_id``) in one table only, in all and in tasks whose artifacts do not differ."""
    both = quiet.merge(loaded, on="artifact_id", suffixes=("_quiet", "_loaded"))
    q, b = both["quality_quiet"].astype(float), both["quality_loaded"].astype(float)
    quality = ~((q == b) | (q.isna() & b.isna()))
    content = both["content_quiet"] != both["content_loaded"]
    changed = both[quality | content]
    examples = [{"task_id": r.task_id_quiet, "agent": r.agent_quiet, "quality": [r.quality_quiet, r.quality_loaded],
                 "lines": [line for line in difflib.ndiff(r.content_quiet.splitlines(), r.content_loaded.splitlines())
                           if line[:1] in "+-"][:6]}
                for r in changed.head(max_examples).itertuples()]
    tasks = set(map(str, changed["task_id_quiet"].unique()))
    only_quiet = quiet_pairs[~quiet_pairs["pair_id"].isin(loaded_pairs["pair_id"])]
    only_loaded = loaded_pairs[~loaded_pairs["pair_id"].isin(quiet_pairs["pair_id"])]
    only = pd.concat([only_quiet, only_loaded])
    return {
        "artifacts": int(len(quiet)), "matched": int(len(both)),
        "quality_differs": int(quality.sum()), "content_differs": int(content.sum()),
        "tasks_differing": sorted(tasks),
        "pairs": int(len(quiet_pairs)),
        "pairs_only_quiet": int(len(only_quiet)),
        "pairs_only_loaded": int(len(only_loaded)),
        # pairs in one table only although their task's artifacts are the same in both: what a
        # selection that draws every task's pairs from one random stream moves
        "pairs_moved_elsewhere": int((~only["task_id"].astype(str).isin(tasks)).sum()),
        "identical": bool(len(changed) == 0 and len(only) == 0),
        "examples": examples,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--domains", nargs="+", default=["code"], help="domains to collect (default: code)")
    ap.add_argument("--busy", type=int, default=2 * (os.cpu_count() or 1),
                    help="CPU-spinning processes beside the second collection (default: two per core)")
    ap.add_argument("--out", type=Path, default=RESULTS / "ablations" / "collect_repeatability.json")
    args = ap.parse_args(argv)
    if args.busy < 1:
        ap.error(f"--busy {args.busy}: give at least 1 (the point is a busy machine)")

    collect = with_overrides(CollectConfig(), {"domains": tuple(args.domains)})
    with tempfile.TemporaryDirectory() as tmp:
        print("collecting on a quiet machine", file=sys.stderr, flush=True)
        quiet, quiet_pairs, quiet_s = collect_once(collect, Path(tmp) / "quiet")
        print(f"collecting beside {args.busy} busy processes", file=sys.stderr, flush=True)
        with busy(args.busy):
            loaded, loaded_pairs, loaded_s = collect_once(collect, Path(tmp) / "loaded")
    found = differences(quiet, loaded, quiet_pairs, loaded_pairs)
    result = {
        "benchmark": "collection repeatability: the same collection on a quiet machine and on a busy one",
        **provenance(command_line("benchmarks.collect_repeatability", ap, args)),
        "collection": collect.model_dump(mode="json"),
        "busy_processes": args.busy,
        "seconds": {"quiet": quiet_s, "loaded": loaded_s},
        **found,
    }
    print(f"{found['quality_differs']} artifacts' quality and {found['content_differs']} contents differ "
          f"({', '.join(found['tasks_differing']) or 'no task'}); pairs in one table only: "
          f"{found['pairs_only_quiet']} quiet, {found['pairs_only_loaded']} busy, "
          f"{found['pairs_moved_elsewhere']} of them in tasks whose artifacts are the same",
          file=sys.stderr)
    print(f"wrote {write_json(args.out, result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
