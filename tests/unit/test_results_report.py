"""The results renderer (``python -m benchmarks.render``), run as its command line: every results
page, docs/results.md and the README's headline block come from the results JSON alone, say so
when a file predates recording its command or commit, and fail naming the file."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
BEST_OF_N = json.loads((RESULTS / "best_of_n.json").read_text())
START, END = "<!-- results:headline:start -->", "<!-- results:headline:end -->"
TARGET_N = 5  # the README's best-of-N


def render(*args: object) -> subprocess.CompletedProcess:
    """``python -m benchmarks.render ARGS`` from the project's root."""
    return subprocess.run([sys.executable, "-m", "benchmarks.render", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def readme_with_markers(path: Path) -> Path:
    path.write_text(f"# Project\n\nBefore.\n\n{START}\nold numbers\n{END}\n\nAfter.\n")
    return path


def site(root: Path, results: dict[str, dict] | None = None) -> dict[str, Path]:
    """A fresh site under ``root``: ``results`` (the committed results files and plots when None),
    an empty ``docs`` and a README with the two markers; the renderer's folder arguments."""
    folder = root / "results"
    if results is None:
        shutil.copytree(RESULTS, folder, ignore=shutil.ignore_patterns("*.md"))
    else:
        folder.mkdir(parents=True)
        for stem, data in results.items():
            (folder / f"{stem}.json").write_text(data if isinstance(data, str) else json.dumps(data))
    return {"results": folder, "docs": root / "docs", "readme": readme_with_markers(root / "README.md")}


def flags(paths: dict[str, Path]) -> list[str]:
    return [str(x) for key, path in paths.items() for x in (f"--{key}", path)]


def rendered(tmp_path: Path, results: dict[str, dict]) -> dict[str, Path]:
    paths = site(tmp_path, results)
    done = render(*flags(paths))
    assert done.returncode == 0, done.stderr
    return paths


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[str, Path]:
    """The committed results rendered into a fresh folder."""
    paths = site(tmp_path_factory.mktemp("site"))
    done = render(*flags(paths))
    assert done.returncode == 0, done.stderr
    return paths


def _rows_at_target(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["N"] == TARGET_N]


def test_results_md_the_page_and_the_readme_block_hold_every_best_of_5_figure_of_the_json(generated):
    markdown = (generated["docs"] / "results.md").read_text()
    page = (generated["results"] / "best_of_n.md").read_text()
    readme = generated["readme"].read_text()
    block = readme[readme.index(START): readme.index(END)]
    for r in _rows_at_target(BEST_OF_N["best_of_n"]):
        cell = f"{r['quality']:.3f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
        assert cell in markdown and cell in block and cell in page, (r["selector"], r["domain"], cell)
    for domain, t in BEST_OF_N["targets"].items():
        row = f"| {domain} | {t['gain_over_n1_points']:+.1f} |"
        assert row in markdown and row in block and row in page
    for text in (markdown, page):
        assert f"Commit: `{BEST_OF_N['commit']}`" in text
        assert f"Command: `{BEST_OF_N['command']}`" in text
    assert "old numbers" not in readme and readme.startswith("# Project") and readme.endswith("After.\n")


def test_every_results_file_has_a_page_and_a_section_and_the_plots_are_written(generated):
    markdown = (generated["docs"] / "results.md").read_text()
    for path in sorted(RESULTS.glob("*.json")):
        assert f"`{path.stem}.json`" in markdown, path.stem  # the contents table
        page = generated["results"] / f"{path.stem}.md"
        assert page.read_text().startswith("# "), path.stem
        assert f"/{page.name})" in markdown  # linked from its section
    for name in ("best_of_n.quality_vs_n.png", "best_of_n.quality_vs_tokens.png", "token_efficiency.png"):
        assert f"]({name})" in markdown
        assert (generated["docs"] / name).stat().st_size > 0 and (generated["results"] / name).stat().st_size > 0


def test_the_same_json_gives_the_same_markdown_bytes(tmp_path):
    paths = site(tmp_path)
    texts = []
    for _ in range(2):
        assert render(*flags(paths)).returncode == 0
        texts.append({p.name: p.read_bytes() for folder in (paths["results"], paths["docs"]) for p in folder.glob("*.md")})
    assert texts[0] == texts[1] and len(texts[0]) == len(list(RESULTS.glob("*.json"))) + 1


def test_check_passes_on_the_committed_pages_docs_and_readme():
    """Nobody edits a figure of a results page, docs/results.md or the README block by hand: rerun the renderer."""
    done = render("--check")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("tampered", "edit"),
    [
        ("docs/results.md", lambda text: text.replace("| reward_model | ", "| reward_model | 0.999 | ", 1)),
        ("results/best_of_n.md", lambda text: text.replace("| reward_model | ", "| reward_model | 0.999 | ", 1)),
        ("README.md", lambda text: text.replace("| reward_model | ", "| reward_model | 0.999 | ", 1)),
        ("README.md", lambda text: text.replace(START, "")),
    ],
    ids=["results.md figure", "page figure", "README figure", "README marker"],
)
def test_check_fails_naming_the_stale_file_and_writes_nothing(generated, tmp_path, tampered, edit):
    root = tmp_path / "copy"
    shutil.copytree(generated["readme"].parent, root)
    paths = {"results": root / "results", "docs": root / "docs", "readme": root / "README.md"}
    target = root / tampered
    target.write_text(edit(target.read_text()))
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    done = render(*flags(paths), "--check")
    assert done.returncode != 0
    assert str(target) in done.stderr
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_check_names_a_missing_plot(generated, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(generated["readme"].parent, root)
    (root / "docs" / "token_efficiency.png").unlink()
    done = render("--results", root / "results", "--docs", root / "docs", "--readme", root / "README.md", "--check")
    assert done.returncode == 1 and f"{root / 'docs' / 'token_efficiency.png'} is missing" in done.stderr


def test_check_passes_on_a_fresh_copy(generated):
    done = render(*flags(generated), "--check")
    assert done.returncode == 0, done.stderr


COLLECT = {
    "machine": {"platform": "Linux", "cpu": "AMD EPYC", "cpus": 2, "python": "3.11.7", "load_average": [1.26, 0.9, 0.74]},
    "workers": 2, "plans_per_task": 8,
    "domains": {"math": {"tasks": 100, "single_process_per_s": 3346.4, "parallel_per_s": 729.6, "target_per_s": 200,
                         "meets_target": True}},
}


@pytest.mark.parametrize(
    ("extra", "command_line", "commit_line"),
    [
        ({}, "Command: not recorded: measured before results recorded their command (the script: `python -m benchmarks.collect`)",
         "Commit: not recorded: measured before results recorded their commit; rerun `python -m benchmarks.collect`"),
        ({"command": "python benchmarks/bench_collect.py --tasks 7"},
         "Command: `python benchmarks/bench_collect.py --tasks 7` (today `python -m benchmarks.collect --tasks 7`)",
         "Commit: not recorded: measured before results recorded their commit; rerun `python -m benchmarks.collect --tasks 7`"),
        ({"command": "python -m benchmarks.collect", "commit": "0123abc"}, "Command: `python -m benchmarks.collect`  ",
         "Commit: `0123abc`"),
    ],
    ids=["neither", "command only, in the old form", "both"],
)
def test_a_file_without_its_command_or_commit_says_so_on_its_page_and_in_results_md(tmp_path, extra, command_line, commit_line):
    paths = rendered(tmp_path, {"collect": {**COLLECT, **extra}})
    for text in ((paths["docs"] / "results.md").read_text(), (paths["results"] / "collect.md").read_text()):
        assert command_line in text and commit_line in text
        assert "Machine: 2 CPUs (AMD EPYC), load average 1.26 / 0.9 / 0.74" in text
    assert "| math | 100 | 3346 | 730 | 200 | yes |" in (paths["docs"] / "results.md").read_text()
    assert "| math | 100 | 3346 | 730 | 200 | yes |" in (paths["results"] / "collect.md").read_text()


def test_malformed_json_fails_naming_the_file(tmp_path):
    paths = site(tmp_path, {"collect": '{"machine": '})
    for extra in ([], ["--check"]):
        done = render(*flags(paths), *extra)
        assert done.returncode == 2 and "collect.json: not a readable JSON file" in done.stderr
    assert not (paths["docs"] / "results.md").exists() and not (paths["results"] / "collect.md").exists()


def test_a_missing_key_fails_naming_the_file_and_the_key(tmp_path):
    broken = copy.deepcopy(BEST_OF_N)
    del broken["best_of_n"][0]["quality"]
    done = render(*flags(site(tmp_path, {"best_of_n": broken})))
    assert done.returncode == 2
    assert "best_of_n.json: missing key 'best_of_n[0].quality'" in done.stderr


def test_the_intermediate_pair_curve_is_a_section_when_its_file_exists_and_says_so_when_not(tmp_path):
    absent = rendered(tmp_path / "absent", {"collect": COLLECT})
    markdown = (absent["docs"] / "results.md").read_text()
    assert "## Intermediate-pair curve\n\nNot measured yet: `" in markdown
    assert "token_efficiency.json` does not exist (`python -m benchmarks.token_efficiency` writes it)" in markdown

    data = json.loads((RESULTS / "token_efficiency.json").read_text())
    present = rendered(tmp_path / "present", {"token_efficiency": data})
    markdown = (present["docs"] / "results.md").read_text()
    for r in data["curve"]:
        assert (f"| {r['source']} | {r['collection_tokens']:,} | {r['pairs']} | "
                f"{r['quality']:.3f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}] |") in markdown
    assert "](token_efficiency.png)" in markdown and (present["docs"] / "token_efficiency.png").stat().st_size > 0

    del data["curve"][1]["collection_tokens"]
    done = render(*flags(site(tmp_path / "broken", {"token_efficiency": data})))
    assert done.returncode == 2 and "token_efficiency.json: missing key 'curve[1].collection_tokens'" in done.stderr


def test_per_encoder_rows_of_best_of_n_get_their_own_table(tmp_path):
    data = copy.deepcopy(BEST_OF_N)
    for key in ("by_source", "gap_closed_by_source", "targets_by_source", "models_by_source", "real_sources"):
        data.pop(key, None)  # the committed file may carry both groups; this test is about one
    data["by_encoder"] = [{**r, "encoder": enc, "quality": r["quality"] - shift}
                          for enc, shift in (("scratch", 0.0), ("minilm", 0.01)) for r in data["best_of_n"]]
    paths = rendered(tmp_path, {"best_of_n": data})
    markdown = (paths["docs"] / "results.md").read_text()
    assert f"### Best-of-{TARGET_N} by encoder" in markdown and f"### Best-of-{TARGET_N} by source" not in markdown
    for r in _rows_at_target(data["by_encoder"]):
        if r["domain"] == "all":
            assert f"| {r['encoder']} | {r['selector']} | " in markdown
        assert f"{r['quality']:.3f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]" in markdown
    page = (paths["results"] / "best_of_n.md").read_text()
    assert f"## By encoder (the same pairs and pool; each encoder trained on them): N = {TARGET_N}" in page
    assert "## Built-in generators against the real data sets" not in page


def test_the_gpu_section_of_train_json_is_on_its_page(tmp_path):
    train = json.loads((RESULTS / "train.json").read_text())
    without = rendered(tmp_path / "cpu", {"train": train})
    assert "Not measured yet: `python -m benchmarks.gpu_train`" in (without["results"] / "train.md").read_text()

    train["gpu"] = {"command": "python -m benchmarks.gpu_train", "commit": "beef", "device": "NVIDIA H200",
                    "train_pairs": 8100, "settings": {"epochs": 2, "batch_size": 128, "max_length": 256},
                    "rows": [{"architecture": "shared_prompt", "precision": "bf16 autocast", "pairs_per_second": 1234.56,
                              "peak_memory_mib": 2048.4, "test_accuracy": 0.6812}]}
    paths = rendered(tmp_path / "gpu", {"train": train})
    page = (paths["results"] / "train.md").read_text()
    assert "## GPU\n\nNVIDIA H200, MiniLM, 8100 plan pairs, 2 epochs, 128 pairs per step, max_length 256." in page
    assert "| shared_prompt | bf16 autocast | 1234.6 | 2048 | 0.681 |" in page
    assert "Command: `python -m benchmarks.gpu_train`" in page and "Commit: `beef`" in page
    assert "| shared_prompt | bf16 autocast | 1234.6 | 2048 | 0.681 |" in (paths["docs"] / "results.md").read_text()


def test_configs_timed_beside_the_nightly_default_get_their_own_table(tmp_path):
    nightly = json.loads((RESULTS / "nightly_retrain.json").read_text())
    nightly.pop("configs", None)
    without = rendered(tmp_path / "default", {"nightly_retrain": nightly})
    assert "Other configs on the same pairs" not in (without["results"] / "nightly_retrain.md").read_text()

    nightly["configs"] = [{"config": "benchmarks/configs/joint_small.yaml", "worst_seconds": 301.4, "met": False,
                           "runs": [{**nightly["runs"][0], "seconds": 151.2, "epochs_run": "9"},
                                    {**nightly["runs"][0], "seconds": 301.4, "epochs_run": "12"}]}]
    paths = rendered(tmp_path / "configs", {"nightly_retrain": nightly})
    page = (paths["results"] / "nightly_retrain.md").read_text()
    assert "Other configs on the same pairs, in the same run (`orchrm train --config`):" in page
    assert "| `benchmarks/configs/joint_small.yaml` | 151 / 301 | 9 / 12 | not met |" in page
