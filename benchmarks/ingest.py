"""Ingest speed: a user's trace file read, normalised and written, at three sizes.

What it measures (issue 25, "Ingest keeps up"), written to ``benchmarks/results/ingest.json``:

- Trace files of the support-desk system (:mod:`orchrm.execution.support_desk`: 6 plans per
  ticket, 3 runs each, 24 rows per ticket) at about 60k, 300k and 1M rows, written as JSON Lines
  (the form a user's system writes and ``orchrm ingest`` reads) before any timing.
- For each file, a fresh Python process times ``orchrm.data.ingest.ingest_file`` (read + ingest +
  write a Parquet artifact table), split into its three steps, and reports its peak resident
  memory (``VmHWM`` of ``/proc/self/status``, which includes the interpreter and its imports: the
  figure after the imports is recorded beside it; ``getrusage``'s ``ru_maxrss`` is not used, as a
  spawned process inherits its parent's peak).
- Rows per second, and the time ratio against the row ratio from the smallest file (1.0: linear).
- With ``--before-sizes``, the same for the implementation before issue 25 (``--before-ref``'s
  ``orchrm/data/ingest.py``, loaded from git into a temporary module) on the smaller files.

Targets (issue 25): 1M rows in under 30 s on 2 cores, linear in rows (here: time ratio within
1.5x of the row ratio). Run niced on a shared machine::

    nice python -m benchmarks.ingest
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common.results_io import RESULTS, ROOT, command_line, provenance, write_json

#: rows per ticket of the support desk's traces: 6 plans (8 agents in all) x 3 runs
ROWS_PER_TICKET = 24
TARGET_ROWS, TARGET_SECONDS, LINEARITY = 1_000_000, 30.0, 1.5
#: the commit whose ``orchrm/data/ingest.py`` filled columns row by row (the issue's measurement)
BEFORE_REF = "5db269d9a0d8a0350b498e5528d96dd8f1e7fd2e"

# run in a fresh interpreter per file: its peak memory is the ingest's alone
WORKER = """
import json, resource, sys, time

def peak_kib():
    try:
        with open("/proc/self/status") as status:  # this process's own high-water mark
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

t0 = time.perf_counter()
{load}
imported_s = time.perf_counter() - t0
rss_after_import = peak_kib()
seconds = {{}}
for name in ("read_table", "ingest_traces", "write_table"):  # ingest_file calls these module names
    def timed(*args, _f=getattr(ingest, name), _name=name, **kwargs):
        t = time.perf_counter()
        result = _f(*args, **kwargs)
        seconds[_name] = time.perf_counter() - t
        return result
    setattr(ingest, name, timed)
t0 = time.perf_counter()
rows = len(ingest.ingest_file({traces!r}, {out!r}))
total = time.perf_counter() - t0
print(json.dumps({{"rows": rows, "seconds": total, "steps": seconds, "import_seconds": imported_s,
                  "peak_rss_kib": peak_kib(), "rss_after_import_kib": rss_after_import}}))
"""
LOAD_CURRENT = "from orchrm.data import ingest"
LOAD_FILE = """import importlib.util
spec = importlib.util.spec_from_file_location("ingest_before", {path!r})
ingest = sys.modules["ingest_before"] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
spec.loader.exec_module(ingest)"""


def write_traces(rows: int, folder: Path, *, seed: int) -> tuple[Path, int]:
    """The support desk's traces of ``ceil(rows / 24)`` tickets as ``folder/traces-<rows>.jsonl``;
    the file and its row count."""
    from orchrm.data.tables import write_table
    from orchrm.execution.support_desk import make_traces

    traces = make_traces(math.ceil(rows / ROWS_PER_TICKET), seed=seed)
    path = write_table(traces, folder / f"traces-{rows}.jsonl")
    return path, len(traces)


def measure(traces: Path, out: Path, *, module_file: Path | None = None) -> dict:
    """``ingest_file(traces, out)`` in a fresh process (the current module, or the one at
    ``module_file``): its seconds, per step, and its peak memory."""
    load = LOAD_CURRENT if module_file is None else LOAD_FILE.format(path=str(module_file))
    code = WORKER.format(load=load, traces=str(traces), out=str(out))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"ingest of {traces.name} failed:\n{done.stderr[-3000:]}")
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    out.unlink(missing_ok=True)
    return {
        "seconds": round(raw["seconds"], 2),
        "read_seconds": round(raw["steps"]["read_table"], 2),
        "ingest_seconds": round(raw["steps"]["ingest_traces"], 2),
        "write_seconds": round(raw["steps"]["write_table"], 2),
        "rows_per_second": round(raw["rows"] / raw["seconds"]),
        "peak_rss_mib": round(raw["peak_rss_kib"] / 1024),
        "rss_after_imports_mib": round(raw["rss_after_import_kib"] / 1024),
    }


def before_module(ref: str, folder: Path) -> Path | None:
    """``ref``'s ``orchrm/data/ingest.py`` written to ``folder``, or None when git cannot show it."""
    done = subprocess.run(["git", "show", f"{ref}:orchrm/data/ingest.py"], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        return None
    path = folder / "ingest_before.py"
    path.write_text(done.stdout)
    return path


def linearity(sizes: list[dict]) -> None:
    """Each size's ``row_ratio`` and ``time_ratio`` against the smallest, and their quotient
    ``time_per_row_ratio`` (1.0: exactly linear), added in place."""
    base = sizes[0]
    for s in sizes:
        s["row_ratio"] = round(s["rows"] / base["rows"], 2)
        s["time_ratio"] = round(s["seconds"] / base["seconds"], 2)
        s["time_per_row_ratio"] = round(s["time_ratio"] / s["row_ratio"], 2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[60_000, 300_000, 1_000_000], help="trace rows per file (rounded up to whole tickets)")
    ap.add_argument("--before-sizes", type=int, nargs="*", default=[60_000, 300_000],
                    help="of --rows, the files also ingested by the implementation before issue 25 (none: skip it)")
    ap.add_argument("--before-ref", default=BEFORE_REF, help="the commit whose orchrm/data/ingest.py is the one before")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS / "ingest.json")
    args = ap.parse_args(argv)
    import pandas as pd

    report: dict = {**provenance(command_line("benchmarks.ingest", ap, args), pandas=pd.__version__),
                    "source": "orchrm.execution.support_desk.make_traces (6 plans x 3 runs per ticket), one row per agent output",
                    "format": "jsonl", "output_format": "parquet", "seed": args.seed,
                    "memory": "peak resident set of a fresh process per file (VmHWM), imports included",
                    "target": {"rows": TARGET_ROWS, "seconds": TARGET_SECONDS, "time_per_row_ratio_at_most": LINEARITY}}
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        folder = Path(tmp)
        files = []
        for rows in sorted(args.rows):
            path, n = write_traces(rows, folder, seed=args.seed)
            files.append((rows, path, n))
            print(f"wrote {n:,} rows ({path.stat().st_size / 1e6:.0f} MB)", flush=True)
        sizes = []
        for rows, path, n in files:
            t0 = time.perf_counter()
            result = measure(path, folder / "artifacts.parquet")
            sizes.append({"rows": n, "tickets": math.ceil(rows / ROWS_PER_TICKET), "file_mb": round(path.stat().st_size / 1e6, 1), **result})
            print(f"{n:,} rows: {result['seconds']} s ({result['rows_per_second']:,} rows/s), peak {result['peak_rss_mib']} MiB "
                  f"[{time.perf_counter() - t0:.0f} s]", flush=True)
        linearity(sizes)
        report["sizes"] = sizes
        largest = max(sizes, key=lambda s: s["rows"])
        report["meets_target"] = {
            "seconds": largest["rows"] >= TARGET_ROWS and largest["seconds"] < TARGET_SECONDS,
            "linear": all(s["time_per_row_ratio"] <= LINEARITY for s in sizes),
        }
        module = before_module(args.before_ref, folder) if args.before_sizes else None
        if module is None:
            report["before"] = {"skipped": "--before-sizes is empty" if not args.before_sizes else f"git cannot show {args.before_ref}"}
        else:
            before = []
            for rows, path, n in files:
                if rows in args.before_sizes:
                    result = measure(path, folder / "artifacts.parquet", module_file=module)
                    before.append({"rows": n, **result})
                    print(f"before issue 25, {n:,} rows: {result['seconds']} s", flush=True)
            linearity(before)
            report["before"] = {"ref": args.before_ref, "sizes": before}
    print(f"wrote {write_json(args.out, report)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
