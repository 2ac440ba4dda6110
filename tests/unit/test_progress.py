"""Progress bars: redrawn on a terminal, plain lines (per bar, or every few seconds) elsewhere."""

from __future__ import annotations

import io
import itertools

from orchrm.util.progress import LINE_INTERVAL_S, LineProgress, is_terminal, progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_written_to_a_file_prints_one_line_when_it_closes():
    log = io.StringIO()
    assert not is_terminal(log)
    assert list(progress_bar(range(500), desc="epoch 1/3", unit="step", stream=log)) == list(range(500))
    lines = log.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("epoch 1/3: 500/500 step (")
    assert "\r" not in log.getvalue()


def test_a_long_bar_prints_a_line_every_interval_not_every_step():
    log = io.StringIO()
    ticks = itertools.count(0.0, 1.0)  # every reading of the clock is one second later
    bar = LineProgress(total=60, desc="collect", unit="task", stream=log, clock=lambda: next(ticks))
    for _ in range(60):
        bar.update(1)
    bar.close()
    bar.close()  # closing twice reports once
    lines = log.getvalue().splitlines()
    assert len(lines) == 60 // int(LINE_INTERVAL_S) + 1
    assert lines[0].startswith("collect: 5/60 task") and lines[-1].startswith("collect: 60/60 task")


def test_update_style_bars_and_disabled_bars():
    log = io.StringIO()
    with progress_bar(total=4, desc="collect", unit="task", stream=log) as bar:
        bar.update(3)
        bar.update(1)
    assert log.getvalue().startswith("collect: 4/4 task (")
    quiet = io.StringIO()
    bar = progress_bar(total=4, desc="collect", enabled=False, stream=quiet)
    bar.update(4)
    bar.close()
    assert list(progress_bar([1, 2], enabled=False)) == [1, 2] and quiet.getvalue() == ""


def test_a_terminal_gets_the_redrawn_bar():
    tty = _Terminal()
    for _ in progress_bar(range(3), desc="epoch 1/1", unit="step", stream=tty):
        pass
    assert "\r" in tty.getvalue()  # tqdm redraws in place
