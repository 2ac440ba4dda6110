"""Programs that try to get out of the code sandbox: write outside their folder through a
directory descriptor or SQLite, read the caller's environment through /proc, leave their
process group to outlive the job, or write to the result pipe to forge a pass. Each is refused
or turned into a failed check, and the child never outlives its job nor leaves its folder."""

from __future__ import annotations

import os
import tempfile
import time

import pytest

from orchrm.execution.sandbox.codeexec import Check, CodeExecutor, Limits

LIMITS = Limits(check_timeout_s=0.5, total_timeout_s=1.0, memory_mb=256)
HANG_GUARD_S = 20.0  # the jobs below take about a second; a stuck zygote took a minute


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A fresh executor whose worker puts every job's folder under ``tmp_path / "jobs"``."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(jobs))
    with CodeExecutor(LIMITS) as executor:
        executor.run("x = 1", [Check("x", kind="eval")])  # start the worker while tempdir points there
        yield executor, jobs


def run(ex: CodeExecutor, program: str, *calls: str):
    return ex.run(program, [Check(c, kind="eval") for c in calls or ("f()",)])


# writing outside the working folder ------------------------------------------------------------
def test_a_directory_descriptor_outside_cannot_be_used_to_write_there(sandbox, tmp_path):
    ex, _ = sandbox
    prog = (
        "import os\n"
        "def f():\n"
        f"    d = os.open({str(tmp_path)!r}, os.O_RDONLY)\n"
        "    os.write(os.open('escaped', os.O_WRONLY | os.O_CREAT, dir_fd=d), b'x')\n"
    )
    res = run(ex, prog)
    assert res.results[0].reason == f"filesystem write blocked: open({str(tmp_path)!r}), a folder outside the working directory"
    assert not (tmp_path / "escaped").exists()


def test_directory_descriptors_inside_the_working_folder_still_work(sandbox):
    ex, _ = sandbox
    prog = (
        "import os\n"
        "def f():\n"
        "    os.mkdir('sub')\n"
        "    d = os.open('sub', os.O_RDONLY)\n"
        "    os.close(os.open('x', os.O_WRONLY | os.O_CREAT, dir_fd=d))\n"
        "    return os.listdir('sub')\n"
    )
    assert run(ex, prog).results[0].output == "['x']"


@pytest.mark.parametrize(
    "body",
    [
        "    sqlite3.connect({db!r}).execute('create table t (x)')\n",
        "    sqlite3.connect(':memory:').execute(\"attach database {db!r} as other\")\n",
    ],
    ids=["connect", "attach"],
)
def test_sqlite_cannot_create_files_outside(sandbox, tmp_path, body):
    ex, _ = sandbox
    db = str(tmp_path / "escaped.db")
    res = run(ex, "def f():\n    import sqlite3\n" + body.format(db=db))
    assert "filesystem write blocked: import _sqlite3 (it writes files the sandbox cannot check)" in res.results[0].reason
    assert not (tmp_path / "escaped.db").exists()


def test_dbm_and_shelve_fall_back_to_the_pure_python_store_in_the_working_directory(sandbox):
    ex, _ = sandbox
    prog = (
        "import dbm, shelve\n"
        "def f():\n"
        "    with shelve.open('s') as db:\n"
        "        db['k'] = [1, 2]\n"
        "    with shelve.open('s') as db:\n"
        "        return (db['k'], dbm.whichdb('s'))\n"
    )
    assert run(ex, prog).results[0].output == "([1, 2], 'dbm.dumb')"


# reading the caller's secrets -------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/proc/{pid}/environ", "/proc/self/root/proc/{pid}/environ", "/proc/{pid}/cmdline"])
def test_the_callers_proc_entries_are_unreadable(sandbox, path):
    """The caller (this process) is the worker's parent: its environment holds its secrets."""
    ex, _ = sandbox
    target = path.format(pid=os.getpid())
    res = run(ex, f"def f():\n    return open({target!r}, 'rb').read()\n")
    assert res.results[0].reason.startswith(f"filesystem read blocked: open({target!r}) under /proc")
    assert res.results[0].output is None


# outliving the job -------------------------------------------------------------------------------
LEAVES_ITS_GROUP = (
    "import os, signal, time\n"
    "os.setpgid(0, os.getppid())\n"  # joins the worker's group: killing the job's group misses it
    "signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
    "def f():\n"
    "    time.sleep(45)\n"
)
CLOSES_ITS_PIPE = (
    "import os, signal, time\n"
    "def f():\n"
    "    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
    "    for fd in range(3, 64):\n"
    "        try:\n"
    "            os.close(fd)\n"
    "        except OSError:\n"
    "            pass\n"
    "    time.sleep(45)\n"
)


@pytest.mark.parametrize("program", [LEAVES_ITS_GROUP, CLOSES_ITS_PIPE], ids=["leaves-its-group", "closes-its-pipe"])
def test_a_program_that_dodges_the_alarm_and_the_group_kill_is_killed_and_reaped(sandbox, program):
    ex, jobs = sandbox
    t0 = time.monotonic()
    res = run(ex, program, "os.getpid()", "os.getcwd()", "f()")
    assert time.monotonic() - t0 < HANG_GUARD_S
    assert res.status == "timeout"
    assert res.results[2].reason == "timeout after 1s (job killed)"
    pid, workdir = int(res.results[0].output), eval(res.results[1].output)  # noqa: S307 - a repr of a str
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped (a zombie would still accept signal 0)
    assert not os.path.exists(workdir) and list(jobs.iterdir()) == []
    assert run(ex, "def f():\n    return 1\n").results[0].output == "1"  # the worker still serves


# forging results ---------------------------------------------------------------------------------
def writes_to_every_descriptor(data: bytes) -> str:
    return (
        "import os\n"
        "for name in os.listdir('/proc/self/fd'):\n"
        "    if int(name) > 2:\n"
        "        try:\n"
        f"            os.write(int(name), {data!r})\n"
        "        except OSError:\n"
        "            pass\n"
        "def f():\n"
        "    return 0\n"
    )


@pytest.mark.parametrize(
    "data",
    [b'["load", null]\n[true, "", "1", null]\n', b"not json\n", b"x" * 100_000],
    ids=["forged-pass", "garbage", "endless-line"],
)
def test_a_program_writing_to_the_result_pipe_fails_every_check(sandbox, data):
    ex, jobs = sandbox
    res = ex.run(writes_to_every_descriptor(data), [Check("f()", kind="eval", expected="1"), Check("assert True")])
    assert res.status == "crashed"
    assert [r.passed for r in res.results] == [False, False]
    assert res.results[0].reason == "crashed (the program wrote to the sandbox's result pipe)"
    assert list(jobs.iterdir()) == []
    assert run(ex, "def f():\n    return 1\n").results[0].output == "1"


def test_ordinary_programs_are_not_caught_by_the_stricter_rules(sandbox):
    """namedtuple and enum read their caller's frame, logging and traceback read frames and
    files, rmtree and tempfile open folders inside the working folder: all keep working."""
    ex, _ = sandbox
    prog = (
        "import collections, enum, logging, os, shutil, tempfile, traceback\n"
        "Point = collections.namedtuple('Point', 'x y')\n"
        "Color = enum.Enum('Color', 'red green')\n"
        "def f():\n"
        "    logging.warning('ignored')\n"
        "    try:\n"
        "        1 / 0\n"
        "    except ZeroDivisionError:\n"
        "        caught = 'ZeroDivisionError' in traceback.format_exc()\n"
        "    os.makedirs('a/b')\n"
        "    open('a/b/x.txt', 'w').write('x')\n"
        "    shutil.rmtree('a')\n"
        "    with tempfile.NamedTemporaryFile('w') as tmp:\n"
        "        tmp.write('y')\n"
        "    return Point(1, 2), Color.green.value, caught, os.listdir('.'), len(open(os.__file__).read()) > 0\n"
    )
    res = run(ex, prog)
    assert res.results[0].output == "(Point(x=1, y=2), 2, True, [], True)", res.results[0].reason
