"""Reading results files, and the Markdown pieces every page is made of.

A results file is read into a :class:`Record`, whose missing keys raise :class:`ResultsError`
naming the file and the key's path, so a page never shows a figure the file does not hold.

>>> table(["domain", "tasks"], [["math", "100"]])
['| domain | tasks |', '|---|---:|', '| math | 100 |']
>>> ci(0.8731, 0.81, 0.93)
'0.873 [0.81, 0.93]'
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NOT_RECORDED = "not recorded: measured before results recorded their {what}"


class ResultsError(ValueError):
    """A results file that is not JSON, or lacks a key a page needs; the message names both."""


class Record:
    """A JSON object from a results file whose missing keys raise :class:`ResultsError` naming the
    file and the key's path (``best_of_n.json: missing key 'best_of_n[3].quality'``)."""

    def __init__(self, data: Any, file: str, trail: str = "") -> None:
        if not isinstance(data, dict):
            raise ResultsError(f"{file}: expected an object at {trail or 'the top level'}, found {type(data).__name__}")
        self._data, self.file, self._trail = data, file, trail

    def _path(self, key: str) -> str:
        return f"{self._trail}.{key}" if self._trail else key

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def __getitem__(self, key: str) -> Any:
        if key not in self._data:
            raise ResultsError(f"{self.file}: missing key {self._path(key)!r}")
        value = self._data[key]
        return Record(value, self.file, self._path(key)) if isinstance(value, dict) else value

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self._data else default

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def rows(self, key: str) -> list[Record]:
        """The list of objects under ``key``, each a :class:`Record`."""
        value = self[key]
        if not isinstance(value, list):
            raise ResultsError(f"{self.file}: expected a list at {self._path(key)!r}, found {type(value).__name__}")
        return [Record(v, self.file, f"{self._path(key)}[{i}]") for i, v in enumerate(value)]

    def frame(self, key: str, columns: Iterable[str]):
        """The list of objects under ``key`` as a DataFrame; each of ``columns`` must be in every row."""
        import pandas as pd

        rows = self.rows(key)
        for row in rows:
            for column in columns:
                row[column]  # raises ResultsError naming the row and the column
        return pd.DataFrame([r._data for r in rows])


def load_results(results_dir: Path) -> dict[str, Record]:
    """Every ``*.json`` of ``results_dir`` by file stem, in name order."""
    out = {}
    for path in sorted(Path(results_dir).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ResultsError(f"{path}: not a readable JSON file ({exc}); rerun its benchmark or restore it from git") from exc
        out[path.stem] = Record(data, str(path))
    return out


# ---------------------------------------------------------------------------------------------
# formatting


def num(x: Any, spec: str = ".3f") -> str:
    """``x`` formatted with ``spec``; ``n/a`` for a missing or NaN figure."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return format(x, spec)


def ci(value: Any, low: Any, high: Any, *, value_spec: str = ".3f", bound_spec: str = ".2f") -> str:
    """``0.873 [0.81, 0.93]``: a figure with its 95% interval."""
    return f"{num(value, value_spec)} [{num(low, bound_spec)}, {num(high, bound_spec)}]"


def yes(flag: Any) -> str:
    return "n/a" if flag is None else ("yes" if flag else "no")


def met(flag: Any) -> str:
    return "met" if flag else "not met"


def table(header: list[str], rows: Iterable[list[str]], *, right: int = 1, align: str | None = None) -> list[str]:
    """A Markdown table; every column from the ``right``-th on is right-aligned, unless ``align``
    gives each column's alignment (``l`` or ``r``, e.g. ``"lrl"``)."""
    align = align or "".join("l" if i < right else "r" for i in range(len(header)))
    rule = ["---:" if a == "r" else "---" for a in align]
    return ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|", *("| " + " | ".join(r) + " |" for r in rows)]


# ---------------------------------------------------------------------------------------------
# where a results file came from


def script(stem: str) -> str:
    """The command that writes ``<stem>.json``."""
    return f"python -m benchmarks.{stem}"


def current_command(recorded: str) -> str:
    """A command as a results file recorded it, in today's form: the scripts ran as files before
    they were a package (``python benchmarks/bench_collect.py --tasks 7`` is now ``python -m
    benchmarks.collect --tasks 7``).

    >>> current_command("python benchmarks/bench_collect.py --tasks 7")
    'python -m benchmarks.collect --tasks 7'
    """
    return re.sub(r"^python benchmarks/(?:bench_)?(\w+)\.py\b", r"python -m benchmarks.\1", recorded)


def machine_line(res: Record) -> str:
    if "machine" not in res:
        return "Machine: not recorded."
    m = res["machine"]
    load = m.get("load_average")
    extras = [f"{k} {m[k]}" for k in m if k not in ("cpu", "cpus", "load_average", "platform", "python")]
    rest = [*([m["platform"]] if "platform" in m else []), *([f"Python {m['python']}"] if "python" in m else []), *extras]
    return (f"Machine: {m.get('cpus', '?')} CPUs ({m.get('cpu', 'CPU not recorded')}), load average "
            f"{' / '.join(map(str, load)) if isinstance(load, list) else 'not recorded'}"
            + (f"; {', '.join(rest)}." if rest else "."))


def provenance_lines(stem: str, res: Record) -> list[str]:
    """Command, commit and machine as the file records them, or a line saying it does not; a
    command recorded in an older form also given in today's."""
    commands = res.get("commands") or ([res["command"]] if "command" in res else [])
    rerun = current_command(commands[-1]) if commands else script(stem)
    lines = [f"Command: `{c}`" + (f" (today `{current_command(c)}`)" if current_command(c) != c else "") + "  "
             for c in commands]
    lines = lines or [f"Command: {NOT_RECORDED.format(what='command')} (the script: `{script(stem)}`)  "]
    lines.append(f"Commit: `{res['commit']}`  " if res.get("commit") else
                 f"Commit: {NOT_RECORDED.format(what='commit')}; rerun `{rerun}`  ")
    return [*lines, machine_line(res)]


# ---------------------------------------------------------------------------------------------
# what the renderer knows of a benchmark


@dataclass(frozen=True)
class Figures:
    """The plots of one page: file name -> caption, in page order (the same names in
    ``benchmarks/results/`` and ``docs/``), and ``draw(folder)``, which writes every one of them it
    can draw from the results file into ``folder``; one it cannot (the file lacks its data) is the
    file the benchmark drew, kept as it is."""

    captions: dict[str, str] = field(default_factory=dict)
    draw: Callable[[Path], None] = lambda folder: None


@dataclass(frozen=True)
class Benchmark:
    """How one results file is rendered: its page ``results/<stem>.md`` is the lines ``page(res)``
    (a ``# `` title first), the plots of ``figures(res, results_dir)`` and the file's command, commit
    and machine; its section of ``docs/results.md`` is ``## title``, the ``measures`` line, the
    lines ``section(res)`` and the same plots."""

    title: str
    measures: str
    page: Callable[[Record], list[str]]
    section: Callable[[Record], list[str]]
    figures: Callable[[Record, Path], Figures] = lambda res, results_dir: Figures()
