"""``python -m benchmarks.render``: every page of the benchmarks, from ``benchmarks/results/*.json``
alone (the benchmarks themselves only measure and write those files).

It writes

- ``benchmarks/results/<name>.md``: each results file's page, with its plots beside it;
- ``docs/results.md``: a section per results file (its headline table, its plots, copied into
  ``docs/``, and the command, commit and machine the file records, or a line saying it predates
  recording them);
- the README's best-of-N headline, between ``<!-- results:headline:start -->`` and
  ``<!-- results:headline:end -->``.

    python -m benchmarks.render              # make report
    python -m benchmarks.render --check      # write nothing; exit 1 naming each stale file

The same JSON gives the same Markdown bytes. The plots are redrawn (PNG bytes may differ by a few);
``--check`` asks only that each exists. A results file no page is defined for still gets a section
listing its keys; add its :class:`~benchmarks.render.records.Benchmark` to :data:`BENCHMARKS`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common.results_io import RESULTS, ROOT, shown_path, write_text
from benchmarks.render import (
    best_of_n,
    collection,
    cost_aware,
    ensemble_reading,
    ingest,
    llm_backend,
    question_reading,
    serving,
    token_efficiency,
    training,
)
from benchmarks.render.records import (
    Benchmark,
    Figures,
    Record,
    ResultsError,
    load_results,
    provenance_lines,
    script,
    table,
)

_ALL = {"best_of_n": best_of_n.BENCHMARK, "question_reading": question_reading.BENCHMARK,
        "ensemble_reading": ensemble_reading.BENCHMARK,
        "token_efficiency": token_efficiency.BENCHMARK, "cost_aware": cost_aware.BENCHMARK,
        **collection.BENCHMARKS, **ingest.BENCHMARKS, **training.BENCHMARKS, **serving.BENCHMARKS,
        **llm_backend.BENCHMARKS}
#: every results file with a page, in the order of ``docs/results.md``
BENCHMARKS: dict[str, Benchmark] = {stem: _ALL[stem] for stem in (
    "best_of_n", "question_reading", "ensemble_reading", "cost_aware", "token_efficiency", "plan_choice", "collect", "scale_out", "ingest", "pairs", "accuracy",
    "train", "nightly_retrain", "latency", "registry", "serving_load", "llm_backend", "sweep_defaults")}
#: shown in ``docs/results.md`` even before its file exists (it says so)
ALWAYS_SHOWN = ("token_efficiency",)
START, END = "<!-- results:headline:start -->", "<!-- results:headline:end -->"
DOCS, README = ROOT / "docs", ROOT / "README.md"


@dataclass(frozen=True)
class Site:
    """What the results give: every Markdown file to write (path -> text), the README block
    (markers included) and each page's plots (results file stem -> :class:`Figures`)."""

    texts: dict[Path, str]
    readme_block: str
    figures: dict[str, Figures]


# ---------------------------------------------------------------------------------------------
# paths and links


def _rel(target: Path, start: Path) -> str:
    """``target`` relative to the folder ``start`` (a link's path)."""
    return Path(os.path.relpath(Path(target).resolve(), Path(start).resolve())).as_posix()


def _anchor(title: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return "".join(c for c in title.lower().replace(" ", "-") if c.isalnum() or c in "-_")


def _title(stem: str) -> str:
    return BENCHMARKS[stem].title if stem in BENCHMARKS else stem


def _images(figures: Figures) -> list[str]:
    return [line for name, caption in figures.captions.items() for line in (f"![{caption}]({name})", "")]


# ---------------------------------------------------------------------------------------------
# the pages, docs/results.md and the README block


def page_text(stem: str, res: Record, figures: Figures) -> str:
    """``results/<stem>.md``: the benchmark's page, its plots, and the file's command, commit and machine."""
    lines = [*BENCHMARKS[stem].page(res), "", *_images(figures)]
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join([*lines, "", *provenance_lines(stem, res)]) + "\n"


def _contents(order: list[str], results: dict[str, Record]) -> list[str]:
    """The table at the top: each section, its results file and the commit it records."""
    def commit(stem: str) -> str:
        if stem not in results:
            return "-"
        return f"`{results[stem]['commit'][:12]}`" if results[stem].get("commit") else "not recorded"

    return table(["benchmark", "results file", "commit"],
                 [[f"[{_title(s)}](#{_anchor(_title(s))})", f"`{s}.json`" if s in results else "not measured yet", commit(s)]
                  for s in order], right=3)


def _section(stem: str, res: Record | None, figures: Figures | None, *, results_dir: Path, docs_dir: Path) -> list[str]:
    """One section of ``docs/results.md``."""
    lines = [f"## {_title(stem)}", ""]
    if res is None:
        return [*lines, f"Not measured yet: `{shown_path(Path(results_dir) / f'{stem}.json')}` does not exist "
                f"(`{script(stem)}` writes it).", ""]
    if stem not in BENCHMARKS:
        lines += [f"No page is defined for `{stem}.json` in `benchmarks/render`; its keys: "
                  + ", ".join(f"`{k}`" for k in res) + ".", ""]
    else:
        page = Path(results_dir) / f"{stem}.md"
        lines += [BENCHMARKS[stem].measures, "", *BENCHMARKS[stem].section(res), *_images(figures or Figures()),
                  f"Details: [{shown_path(page)}]({_rel(page, docs_dir)})  "]
    return [*lines, *provenance_lines(stem, res), ""]


def _readme_block(res: Record | None, *, docs_dir: Path, readme: Path) -> str:
    lines = [START, "<!-- generated by `python -m benchmarks.render` from benchmarks/results/best_of_n.json: rerun it, "
             "do not edit these lines -->", ""]
    if res is None:
        lines += ["Not measured yet: `benchmarks/results/best_of_n.json` does not exist.", ""]
    else:
        results_md = Path(docs_dir) / "results.md"
        lines += [*best_of_n.headline(res),
                  f"All of it, with the plots, the command and the commit: [{shown_path(results_md)}]"
                  f"({_rel(results_md, Path(readme).parent)}#{_anchor(BENCHMARKS['best_of_n'].title)}).", ""]
    return "\n".join([*lines, END])


def build_site(results_dir: Path, docs_dir: Path, readme: Path) -> Site:
    """Read every results file of ``results_dir`` and render its page (into ``results_dir``),
    ``docs_dir/results.md`` and the block for ``readme`` (links are relative to them); writes nothing."""
    results = load_results(results_dir)
    order = [s for s in BENCHMARKS if s in results or s in ALWAYS_SHOWN] + [s for s in results if s not in BENCHMARKS]
    figures = {s: BENCHMARKS[s].figures(results[s], Path(results_dir)) for s in results if s in BENCHMARKS}
    texts = {Path(results_dir) / f"{s}.md": page_text(s, results[s], figures[s]) for s in figures}
    lines = ["# Measured results", "",
             "Generated by `python -m benchmarks.render` (`make report`) from `benchmarks/results/*.json`: do not edit by "
             "hand; `python -m benchmarks.render --check` fails when this file is stale. Each section names the command, "
             "commit and machine its results file records, and links the benchmark's page, which has the rest.", "",
             *_contents(order, results), ""]
    for stem in order:
        lines += _section(stem, results.get(stem), figures.get(stem), results_dir=results_dir, docs_dir=docs_dir)
    texts[Path(docs_dir) / "results.md"] = "\n".join(lines).rstrip("\n") + "\n"
    return Site(texts, _readme_block(results.get("best_of_n"), docs_dir=docs_dir, readme=readme), figures)


# ---------------------------------------------------------------------------------------------
# checking and writing


def readme_with_block(text: str, block: str, readme: Path) -> str:
    """``text`` with the part between the markers (included) replaced by ``block``."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ResultsError(f"{readme}: no `{START}` ... `{END}` block; put the two marker lines where the "
                           "best-of-N headline goes")
    return text[:start] + block + text[end + len(END):]


def stale(site: Site, *, results_dir: Path, docs_dir: Path, readme: Path) -> list[str]:
    """What differs from what the results give: one line per stale or missing file."""
    problems = [f"{shown_path(path)} is stale: it differs from what {shown_path(Path(results_dir))}/*.json give"
                for path, text in site.texts.items() if not path.is_file() or path.read_text() != text]
    current = Path(readme).read_text()
    if readme_with_block(current, site.readme_block, readme) != current:
        problems.append(f"{shown_path(readme)} is stale: its results:headline block differs from best_of_n.json")
    for figures in site.figures.values():
        problems += [f"{shown_path(folder / name)} is missing" for name in figures.captions for folder in (Path(results_dir), Path(docs_dir))
                     if not (folder / name).is_file()]
    return problems


def write_site(site: Site, *, results_dir: Path, docs_dir: Path, readme: Path) -> None:
    """The plots into ``results_dir`` and copied into ``docs_dir``, every Markdown file, and the
    block into ``readme``; each file atomically."""
    from orchrm.util.fileio import atomic_write_bytes

    for figures in site.figures.values():
        figures.draw(Path(results_dir))
        for name in figures.captions:
            source = Path(results_dir) / name
            if source.is_file() and Path(docs_dir).resolve() != Path(results_dir).resolve():
                atomic_write_bytes(Path(docs_dir) / name, lambda tmp, src=source: shutil.copyfile(src, tmp))
    for path, text in site.texts.items():
        write_text(path, text)
    current = Path(readme).read_text()
    new = readme_with_block(current, site.readme_block, readme)
    if new != current:
        write_text(readme, new)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.render", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder of the results JSON files; the pages go beside them")
    ap.add_argument("--docs", type=Path, default=DOCS, help="folder of results.md and its plots")
    ap.add_argument("--readme", type=Path, default=README, help="the README whose headline block is rewritten")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page, results.md or the README block is stale")
    args = ap.parse_args(argv)
    folders = {"results_dir": args.results, "docs_dir": args.docs, "readme": args.readme}
    try:
        site = build_site(args.results, args.docs, args.readme)
        if args.check:
            problems = stale(site, **folders)
            for p in problems:
                print(f"benchmarks.render --check: {p}; run `python -m benchmarks.render` (make report)", file=sys.stderr)
            return 1 if problems else 0
        write_site(site, **folders)
    except ResultsError as exc:
        print(f"benchmarks.render: {exc}", file=sys.stderr)
        return 2
    plots = sum(len(f.captions) for f in site.figures.values())
    print(f"wrote {len(site.texts) - 1} pages, {shown_path(args.docs / 'results.md')}, {plots} plots and the headline block of "
          f"{shown_path(args.readme)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
