"""Timing kernels the way careful microbenchmarks must: warm-up, synchronise, median of repeats.

`time_op(op, ...)` runs `op(i)` (i rotates through the input copies, so no repeat finds its
data in cache) a few times to warm up, then picks an inner count so one sample lasts at least
`min_sample_s` by the fastest single call (timer resolution and call overhead then vanish),
and returns the per-call
seconds of each of `repeats` samples. `sync` is called before every clock read, so an
asynchronous device (CUDA) is timed to completion, not to submission.

>>> clock = FakeClock()
>>> s = time_op(lambda i: clock.advance(0.002), repeats=5, timer=clock, min_sample_s=0.01)
>>> round(s.median_s, 6), s.inner, s.repeats
(0.002, 5, 5)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Samples:
    """Per-call seconds of each repeat (each the mean over `inner` back-to-back calls)."""

    seconds: tuple[float, ...]
    inner: int

    @property
    def repeats(self) -> int:
        return len(self.seconds)

    @property
    def median_s(self) -> float:
        return float(np.median(self.seconds))

    @property
    def spread_rel(self) -> float:
        """(max - min) / median over the repeats: how much one sample can be off."""
        return float((max(self.seconds) - min(self.seconds)) / self.median_s)


class FakeClock:
    """A timer that only moves when told: for tests of the timing and fitting logic."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def time_op(op: Callable[[int], object], *, repeats: int = 7, warmup: int = 2,
            min_sample_s: float = 0.05, max_inner: int = 10_000,
            timer: Callable[[], float] = time.perf_counter,
            sync: Callable[[], None] = lambda: None) -> Samples:
    """Median-ready samples of one operation; `op(i)` gets a call counter to rotate inputs."""
    calls = 0

    def run(n: int) -> float:
        nonlocal calls
        sync()
        t0 = timer()
        for _ in range(n):
            op(calls)
            calls += 1
        sync()
        return timer() - t0

    times = [run(1) for _ in range(max(warmup, 1))]
    # The inner count comes from the fastest of a few single calls: one call stalled by
    # another process must not leave every sample a single noisy call.
    while len(times) < max(warmup, 1) + 2 and min(times) < max(4 * min_sample_s, 0.25):
        times.append(run(1))
    first = min(times)
    inner = 1 if first <= 0 else max(1, min(max_inner, math.ceil(min_sample_s / first)))
    seconds = tuple(run(inner) / inner for _ in range(repeats))
    return Samples(seconds, inner)


__all__ = ["FakeClock", "Samples", "time_op"]
