"""benchmarks/report.py: docs/results.md and the README's headline block come from the results
JSON alone, say so when a file predates recording its commit, and fail naming the file."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from benchmarks import report

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
BEST_OF_N = json.loads((RESULTS / "best_of_n.json").read_text())


def _readme_with_markers(path: Path) -> Path:
    path.write_text(f"# Project\n\nBefore.\n\n{report.START}\nold numbers\n{report.END}\n\nAfter.\n")
    return path


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """The report of the committed results, written into a fresh folder (``docs/``, ``README.md``)."""
    root = tmp_path_factory.mktemp("report")
    readme = _readme_with_markers(root / "README.md")
    assert report.main(["--out", str(root / "docs"), "--readme", str(readme)]) == 0
    return root


def _rows_at_target(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["N"] == report.TARGET_N]


def test_results_md_and_readme_block_hold_every_best_of_5_figure_of_the_json(generated):
    markdown = (generated / "docs" / "results.md").read_text()
    readme = (generated / "README.md").read_text()
    block = readme[readme.index(report.START): readme.index(report.END)]
    for r in _rows_at_target(BEST_OF_N["best_of_n"]):
        cell = f"{r['quality']:.3f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
        assert cell in markdown and cell in block, (r["selector"], r["domain"], cell)
    for domain, t in BEST_OF_N["targets"].items():
        row = f"| {domain} | {t['gain_over_n1_points']:+.1f} |"
        assert row in markdown and row in block
    assert f"Commit: `{BEST_OF_N['commit']}`" in markdown
    assert f"Command: `{BEST_OF_N['command']}`" in markdown
    assert "old numbers" not in readme and readme.startswith("# Project") and readme.endswith("After.\n")


def test_every_results_file_has_a_section_and_the_plots_are_written(generated):
    markdown = (generated / "docs" / "results.md").read_text()
    for path in sorted(RESULTS.glob("*.json")):
        stem = path.stem
        title = report.SECTIONS[stem].title if stem in report.SECTIONS else stem
        assert f"\n## {title}\n" in markdown, stem
    for name in ("best_of_n.quality_vs_n.png", "best_of_n.quality_vs_tokens.png"):
        assert f"]({name})" in markdown
        assert (generated / "docs" / name).stat().st_size > 0


def test_the_same_json_gives_the_same_markdown_bytes(generated):
    first = report.build_report(RESULTS, generated / "docs", generated / "README.md")
    second = report.build_report(RESULTS, generated / "docs", generated / "README.md")
    assert first.markdown == second.markdown == (generated / "docs" / "results.md").read_text()


def test_check_passes_on_the_committed_docs_and_readme(capsys):
    """Nobody edits a figure of docs/results.md or the README block by hand: rerun the report."""
    assert report.main(["--check"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    ("tampered", "edit"),
    [
        ("docs/results.md", lambda text: text.replace("| reward_model | ", "| reward_model | 0.999 | ", 1)),
        ("README.md", lambda text: text.replace("| reward_model | ", "| reward_model | 0.999 | ", 1)),
        ("README.md", lambda text: text.replace(report.START, "")),
    ],
    ids=["results.md figure", "README figure", "README marker"],
)
def test_check_fails_naming_the_stale_file_and_writes_nothing(generated, tmp_path, capsys, tampered, edit):
    root = tmp_path / "copy"
    shutil.copytree(generated, root)
    target = root / tampered
    target.write_text(edit(target.read_text()))
    before = target.read_text()
    args = ["--out", str(root / "docs"), "--readme", str(root / "README.md"), "--check"]
    assert report.main(args) != 0
    assert str(target) in capsys.readouterr().err
    assert target.read_text() == before


def test_check_passes_on_a_fresh_copy(generated, capsys):
    args = ["--out", str(generated / "docs"), "--readme", str(generated / "README.md"), "--check"]
    assert report.main(args) == 0, capsys.readouterr().err


COLLECT = {
    "machine": {"platform": "Linux", "cpu": "AMD EPYC", "cpus": 2, "python": "3.11.7", "load_average": [1.26, 0.9, 0.74]},
    "workers": 2, "plans_per_task": 8,
    "domains": {"math": {"tasks": 100, "single_process_per_s": 3346.4, "parallel_per_s": 729.6, "target_per_s": 200,
                         "meets_target": True}},
}


@pytest.mark.parametrize(
    ("extra", "commit_line"),
    [
        ({}, "Commit: not recorded: measured before results recorded their commit; rerun `python benchmarks/bench_collect.py`"),
        ({"command": "python benchmarks/bench_collect.py --tasks 7"},
         "Commit: not recorded: measured before results recorded their commit; rerun `python benchmarks/bench_collect.py --tasks 7`"),
        ({"command": "python benchmarks/bench_collect.py", "commit": "0123abc"}, "Commit: `0123abc`"),
    ],
    ids=["neither", "command only", "both"],
)
def test_a_file_without_its_commit_says_so_and_names_the_command_to_rerun(tmp_path, extra, commit_line):
    (tmp_path / "collect.json").write_text(json.dumps({**COLLECT, **extra}))
    markdown = report.build_report(tmp_path, tmp_path / "docs", tmp_path / "README.md").markdown
    assert commit_line in markdown
    assert "Machine: 2 CPUs (AMD EPYC), load average 1.26 / 0.9 / 0.74" in markdown
    assert "| math | 100 | 3346 | 730 | 200 | yes |" in markdown


def test_malformed_json_fails_naming_the_file(tmp_path, capsys):
    (tmp_path / "collect.json").write_text('{"machine": ')
    with pytest.raises(report.ResultsError, match=r"collect\.json: not a readable JSON file"):
        report.build_report(tmp_path, tmp_path / "docs", tmp_path / "README.md")
    assert report.main(["--results", str(tmp_path), "--out", str(tmp_path / "docs"), "--check"]) == 2
    assert "collect.json" in capsys.readouterr().err


def test_a_missing_key_fails_naming_the_file_and_the_key(tmp_path):
    broken = copy.deepcopy(BEST_OF_N)
    del broken["best_of_n"][0]["quality"]
    (tmp_path / "best_of_n.json").write_text(json.dumps(broken))
    with pytest.raises(report.ResultsError, match=r"best_of_n\.json: missing key 'best_of_n\[0\]\.quality'"):
        report.build_report(tmp_path, tmp_path / "docs", tmp_path / "README.md")


CURVE = [
    {"source": source, "collection_tokens": tokens, "quality": q, "ci_low": q - 0.05, "ci_high": q + 0.05}
    for source, base in (("intermediate", 0.61), ("correct-over-incorrect", 0.55))
    for tokens, q in ((1200, base), (9600, base + 0.08))
]


def test_the_intermediate_pair_curve_renders_when_its_file_exists_and_says_so_when_not(tmp_path):
    absent = report.build_report(tmp_path, tmp_path / "docs", tmp_path / "README.md")
    assert "## Intermediate-pair curve\n\nNot measured yet: `" in absent.markdown
    assert "token_efficiency.json` does not exist" in absent.markdown

    data = {"command": "python benchmarks/bench_token_efficiency.py", "commit": "feed", "curve": CURVE,
            "machine": COLLECT["machine"]}
    (tmp_path / "token_efficiency.json").write_text(json.dumps(data))
    present = report.build_report(tmp_path, tmp_path / "docs", tmp_path / "README.md")
    for r in CURVE:
        assert f"| {r['source']} | {r['collection_tokens']:,} | {r['quality']:.3f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}] |" in present.markdown
    assert "](token_efficiency.curve.png)" in present.markdown and "token_efficiency.curve.png" in present.plots

    del data["curve"][1]["collection_tokens"]
    (tmp_path / "token_efficiency.json").write_text(json.dumps(data))
    with pytest.raises(report.ResultsError, match=r"token_efficiency\.json: missing key 'curve\[1\]\.collection_tokens'"):
        report.build_report(tmp_path, tmp_path / "docs", tmp_path / "README.md")


def test_per_encoder_rows_of_best_of_n_get_their_own_table(tmp_path):
    data = copy.deepcopy(BEST_OF_N)
    data.pop("by_source", None)  # the committed file may carry both tables; this test is about one
    data["by_encoder"] = [{**r, "encoder": enc, "quality": r["quality"] - shift}
                          for enc, shift in (("scratch", 0.0), ("minilm", 0.01)) for r in data["best_of_n"]]
    (tmp_path / "best_of_n.json").write_text(json.dumps(data))
    markdown = report.build_report(tmp_path, tmp_path / "docs", tmp_path / "README.md").markdown
    assert f"### Best-of-{report.TARGET_N} by encoder" in markdown and "### Best-of-5 by source" not in markdown
    for r in _rows_at_target(data["by_encoder"]):
        if r["domain"] == "all":
            assert f"| {r['encoder']} | {r['selector']} | " in markdown
        assert f"{r['quality']:.3f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]" in markdown
