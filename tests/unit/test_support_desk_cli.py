"""``python -m orchrm.execution.support_desk``: a sample trace file that ``orchrm ingest`` and the
nightly read, written the way the README asks a user's own system to write (dot-name, rename)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchrm.data.ingest import ingest_traces
from orchrm.data.tables import read_table
from orchrm.execution.support_desk import PLANS, main


def test_the_desk_file_is_whole_and_ingests(tmp_path, capsys):
    out = tmp_path / "incoming" / "desk.jsonl"
    assert main(["--tickets", "3", "--runs", "2", "--seed", "4", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["desk.jsonl"]  # no dot-file left behind
    artifacts = ingest_traces(read_table(out))
    assert artifacts.task_id.nunique() == 3
    assert set(artifacts.plan_id) == set(PLANS) and set(artifacts.run_id) == {"run-0", "run-1"}
    assert artifacts.is_final.sum() == 3 * len(PLANS) * 2  # one final reply per ticket, plan and run
    assert "wrote 3 tickets x 6 plans x 2 runs" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["--out", "desk.csv"], "*.jsonl or *.parquet"),
    (["--tickets", "0", "--out", "desk.jsonl"], "at least 1"),
])
def test_bad_arguments_say_what_to_change(tmp_path, args, message):
    done = subprocess.run([sys.executable, "-m", "orchrm.execution.support_desk", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr
    assert not list(tmp_path.iterdir())
