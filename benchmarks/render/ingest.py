"""The page of the ingest benchmark (``ingest.json``): a user's trace file read, normalised and
written, per size, against issue 25's target."""

from __future__ import annotations

from benchmarks.render.records import Benchmark, Record, met, num, table

FORMATS = {"jsonl": "JSON Lines", "parquet": "Parquet"}


def _target(res: Record) -> str:
    t = res["target"]
    return (f"{t['rows']:,} rows in under {num(t['seconds'], 'g')} s on 2 cores, linear in rows (time per row within "
            f"{num(t['time_per_row_ratio_at_most'], 'g')}x of the smallest file's)")


def _verdict(res: Record) -> str:
    m, largest = res["meets_target"], max(res.rows("sizes"), key=lambda s: s["rows"])
    return (f"{largest['rows']:,} rows in {num(largest['seconds'], '.1f')} s: {met(m['seconds'])}; "
            f"linear: {met(m['linear'])}.")


def _size_rows(res: Record, key: str = "sizes") -> list[list[str]]:
    return [[f"{s['rows']:,}", num(s["read_seconds"], ".2f"), num(s["ingest_seconds"], ".2f"), num(s["write_seconds"], ".2f"),
             num(s["seconds"], ".2f"), f"{s['rows_per_second']:,}", num(s["row_ratio"], ".1f"), num(s["time_ratio"], ".1f"),
             num(s["time_per_row_ratio"], ".2f"), f"{s['peak_rss_mib']:,}"] for s in res.rows(key)]


HEADER = ["rows", "read (s)", "ingest (s)", "write (s)", "total (s)", "rows/s", "row ratio", "time ratio", "time / row ratio",
          "peak memory (MiB)"]


def _before(res: Record) -> list[str]:
    before = res["before"]
    if "skipped" in before:
        return [f"Not measured: {before['skipped']}.", ""]
    return [f"The implementation before issue 25 (`orchrm/data/ingest.py` at `{before['ref'][:12]}`, which filled columns "
            "row by row), on the same files:", "", *table(HEADER, _size_rows(before)), ""]


def ingest_page(res: Record) -> list[str]:
    sizes = res.rows("sizes")
    files = ", ".join(f"{s['file_mb']:g} MB" for s in sizes)
    return [
        "# Ingest speed", "",
        f"`orchrm.data.ingest.ingest_file` (read the traces, validate and normalise them with `ingest_traces`, write the "
        f"{FORMATS[res['output_format']]} artifact table) on {FORMATS[res['format']]} trace files of {res['source']}; "
        f"seed {res['seed']}, files of {files}. Each file in a fresh process; "
        f"memory: {res['memory']} ({sizes[0]['rss_after_imports_mib']} MiB after the imports). Ratios are against the "
        "smallest file; a time / row ratio of 1.0 is exactly linear.", "",
        *table(HEADER, _size_rows(res)), "",
        f"Target (issue 25): {_target(res)}. {_verdict(res)}", "",
        "## Before", "", *_before(res)]


def ingest_section(res: Record) -> list[str]:
    lines = [*table(["rows", "total (s)", "rows/s", "time / row ratio", "peak memory (MiB)"],
                    [[f"{s['rows']:,}", num(s["seconds"], ".2f"), f"{s['rows_per_second']:,}", num(s["time_per_row_ratio"], ".2f"),
                      f"{s['peak_rss_mib']:,}"] for s in res.rows("sizes")]), "",
             f"{FORMATS[res['format']]} trace files read, ingested and written as {FORMATS[res['output_format']]}. Target: {_target(res)}. "
             f"{_verdict(res)}"]
    before = res["before"]
    if "sizes" in before:
        lines += ["", "Before issue 25: " + ", ".join(f"{s['rows']:,} rows in {num(s['seconds'], '.1f')} s" for s in before.rows("sizes")) + "."]
    return [*lines, ""]


BENCHMARKS = {
    "ingest": Benchmark("Ingest speed", "A user's trace file read, validated, normalised and written (`orchrm ingest`), "
                        "per size, with peak memory.", ingest_page, ingest_section),
}
