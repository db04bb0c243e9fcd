"""Progress of long work (plan's search, simulate's runs): a bar with an ETA in a terminal,
and in a log (stderr not a terminal) one line every few seconds, so a piped run never sits
silent for minutes.

Both have rich Progress's `add_task(description, total=)` and `update(task, completed=,
total=, description=)`, so a command writes to either the same way:

>>> import io
>>> log = io.StringIO()
>>> p = LogProgress("plan", every_s=0.0, stream=log, clock=iter([0.0, 0, 10.0, 10.0]).__next__)
>>> with p:
...     t = p.add_task("screening", total=4)
...     p.update(t, completed=1)
>>> print(log.getvalue().strip())
plan: screening 1/4 (25%), 10 s elapsed, ETA 30 s
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

# Seconds between two log lines (RIDGELINE_PROGRESS_INTERVAL_S overrides: 0 logs every
# update, as the tests do).
DEFAULT_INTERVAL_S = 5.0


def _interval_s() -> float:
    try:
        return max(0.0, float(os.environ.get("RIDGELINE_PROGRESS_INTERVAL_S",
                                             DEFAULT_INTERVAL_S)))
    except ValueError:
        return DEFAULT_INTERVAL_S


def _dur(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


class LogProgress:
    """One stderr line per `every_s` seconds: '<label>: <task> done/total (pct), elapsed,
    ETA'. Prints nothing for work shorter than `every_s`."""

    def __init__(self, label: str, every_s: float | None = None, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.every_s = _interval_s() if every_s is None else every_s
        self.stream = stream
        self.clock = clock
        self.tasks: list[dict[str, Any]] = []
        self.t0 = 0.0
        self.last = 0.0

    def __enter__(self) -> LogProgress:
        self.t0 = self.last = self.clock()
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def add_task(self, description: str, total: float | None = None, **_: Any) -> int:
        self.tasks.append({"description": description, "total": total, "completed": 0.0,
                           "t0": self.clock()})
        return len(self.tasks) - 1

    def update(self, task: int, *, completed: float | None = None, total: float | None = None,
               description: str | None = None, advance: float | None = None,
               **_: Any) -> None:
        t = self.tasks[task]
        if description is not None:
            t["description"] = description
        if total is not None:
            t["total"] = total
        if completed is not None:
            t["completed"] = completed
        if advance is not None:
            t["completed"] += advance
        now = self.clock()
        if now - self.last >= self.every_s and now > self.t0:
            self.last = now
            self._line(t, now)

    def _line(self, t: dict[str, Any], now: float) -> None:
        done, total = t["completed"], t["total"]
        elapsed = now - t["t0"]
        text = f"{self.label}: {t['description']}"
        if total:
            frac = min(done / total, 1.0)
            text += f" {done:,.0f}/{total:,.0f} ({frac:.0%}), {_dur(elapsed)} elapsed"
            if 0 < frac < 1:
                text += f", ETA {_dur(elapsed * (1 - frac) / frac)}"
        else:
            text += f" {done:,.0f}, {_dur(elapsed)} elapsed"
        stream = self.stream if self.stream is not None else sys.stderr
        stream.write(text + "\n")
        stream.flush()


def progress_for(label: str) -> Any:
    """A rich bar with an ETA when stderr is a terminal, else a `LogProgress`."""
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("ETA"), TimeRemainingColumn(),
                        console=Console(stderr=True), transient=True)
    return LogProgress(label)


__all__ = ["LogProgress", "progress_for"]
