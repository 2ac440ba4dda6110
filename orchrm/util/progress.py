"""Progress bars that suit where they are written.

On a terminal (or in a notebook) a bar redraws in place, as tqdm does. Written to a file or a
pipe (CI logs, ``make demo > log``, a Prefect worker's log), a redraw per step is a line per step:
there the bar prints one plain line when it closes (once per epoch for the Trainer) and, in
between, at most one line every ``interval`` seconds.

>>> import io
>>> log = io.StringIO()  # not a terminal
>>> for step in progress_bar(range(300), desc="epoch 1/2", unit="step", stream=log):
...     pass
>>> print(log.getvalue().split(" (")[0])
epoch 1/2: 300/300 step
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

#: seconds between two lines of a bar written to a file or a pipe
LINE_INTERVAL_S = 5.0


def is_terminal(stream: IO[str]) -> bool:
    """Whether ``stream`` is an interactive terminal (False for files, pipes and captures)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class LineProgress:
    """A progress report as plain lines: ``desc: n/total unit (rate unit/s, elapsed s)``.

    Prints when ``interval`` seconds have passed since the last line (a bar that finishes sooner
    prints only its closing line) and once on :meth:`close`. ``clock`` is the time source, in
    seconds.
    """

    def __init__(
        self,
        iterable: Iterable[Any] | None = None,
        *,
        total: int | None = None,
        desc: str = "",
        unit: str = "it",
        stream: IO[str],
        interval: float = LINE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.iterable = iterable
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.total, self.desc, self.unit = total, desc, unit
        self.stream, self.interval, self.clock = stream, interval, clock
        self.n = 0
        self.start = self.last = clock()
        self.closed = False

    def __iter__(self) -> Iterator[Any]:
        try:
            for item in self.iterable or ():
                yield item
                self.update(1)
        finally:
            self.close()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last >= self.interval:
            self.last = now
            self._line(now)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._line(self.clock())

    def _line(self, now: float) -> None:
        elapsed = now - self.start
        done = f"{self.n}/{self.total}" if self.total is not None else f"{self.n}"
        rate = f"{self.n / elapsed:.1f} {self.unit}/s, " if elapsed > 0 else ""
        self.stream.write(f"{self.desc}: {done} {self.unit} ({rate}{elapsed:.1f} s)\n")
        self.stream.flush()


class _Silent:
    """A bar that reports nothing (``enabled=False``)."""

    def __init__(self, iterable: Iterable[Any] | None) -> None:
        self.iterable = iterable

    def __iter__(self) -> Iterator[Any]:
        return iter(self.iterable or ())

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(
    iterable: Iterable[Any] | None = None,
    *,
    total: int | None = None,
    desc: str = "",
    unit: str = "it",
    enabled: bool = True,
    stream: IO[str] | None = None,
) -> Any:
    """A progress bar over ``iterable`` (iterate it) or over ``total`` units (call ``.update(n)``,
    then ``.close()``, or use it as a context manager).

    ``stream`` defaults to ``sys.stderr`` at call time. A terminal gets tqdm's bar, redrawn in
    place and cleared when it closes; a notebook gets tqdm's widget; any other stream gets a
    :class:`LineProgress`. ``enabled=False`` reports nothing.
    """
    if not enabled:
        return _Silent(iterable)
    out = sys.stderr if stream is None else stream
    in_notebook = type(out).__module__.startswith("ipykernel")  # Jupyter's stderr: tqdm.auto draws a widget
    if is_terminal(out) or in_notebook:
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, file=out, leave=False, dynamic_ncols=True)
    return LineProgress(iterable, total=total, desc=desc, unit=unit, stream=out)
