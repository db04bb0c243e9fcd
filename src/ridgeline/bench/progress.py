"""Live progress for `ridgeline bench` (rich): done / in flight, errors, throughput, P50 TTFT.

The running P50 TTFT and throughput here are a progress display only; the reported
numbers come from `ridgeline.metrics` reading the finished trace.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

# Throughput shown live is over this trailing window.
WINDOW_S = 10.0


class LiveProgress:
    """Feed it records; it renders a one-line status 4 times a second when enabled."""

    def __init__(self, total: int | None = None, enabled: bool = True,
                 label: str = "bench") -> None:
        self.total = total
        self.enabled = enabled
        self.label = label
        self.done = 0
        self.errors = 0
        self.in_flight = 0
        self.max_lag_s = 0.0
        self._ttft_ms: list[float] = []
        self._recent: deque[tuple[float, int]] = deque()
        self._live: Any = None
        self._start = time.perf_counter()

    def record(self, rec: dict[str, Any]) -> None:
        self.done += 1
        if rec.get("status") != "ok":
            self.errors += 1
        ev = rec.get("event_times_s")
        if rec.get("status") == "ok" and ev:
            self._ttft_ms.append((ev[0] - rec["sent_s"]) * 1e3)
        now = time.perf_counter()
        self._recent.append((now, int(rec.get("output_tokens") or 0)))
        while self._recent and self._recent[0][0] < now - WINDOW_S:
            self._recent.popleft()

    def line(self) -> str:
        import statistics

        now = time.perf_counter()
        span = min(WINDOW_S, max(now - self._start, 1e-9))
        tok_s = sum(n for t, n in self._recent if t >= now - WINDOW_S) / span
        total = f"/{self.total}" if self.total else ""
        ttft = (f"{statistics.median(self._ttft_ms[-5000:]):.0f} ms" if self._ttft_ms
                else "-")
        return (f"{self.label}: done {self.done}{total} · in flight {self.in_flight} · "
                f"errors {self.errors} · {tok_s:,.0f} output tok/s · P50 TTFT {ttft} · "
                f"{now - self._start:.0f} s")

    def __rich__(self) -> str:
        return self.line()

    def __enter__(self) -> LiveProgress:
        if self.enabled:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self, console=Console(stderr=True), refresh_per_second=4,
                              transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None


__all__ = ["LiveProgress"]
