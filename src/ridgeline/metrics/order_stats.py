"""The percentiles reported, and which ranks of a sorted sample they read.

`rank_windows` gives the rank windows around each percentile that its value and its
bootstrap draws read; `ensure_sorted_ranks` makes a range of ranks true order statistics.
Its own module so that `distribution` (the summaries) and `select` (the partial sort) share
it without importing each other.
"""

from __future__ import annotations

import math

import numpy as np

# The percentiles every summary reports.
PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)

# Below this many values a full sort is cheap and exact everywhere: use it.
FULL_SORT_MAX = 2_000_000
WINDOW_SD = 10.0
WINDOW_PAD = 64


def rank_windows(n: int, percentiles: tuple[float, ...] = PERCENTILES) -> list[tuple[int, int]]:
    """Merged [lo, hi] rank windows (inclusive) that hold every rank read for `percentiles`."""
    wins = [(0, 0), (n - 1, n - 1)]
    for q in percentiles:
        p = q / 100.0
        h = (n - 1) * p
        w = math.ceil(WINDOW_SD * math.sqrt(n * p * (1.0 - p))) + WINDOW_PAD
        wins.append((max(0, math.floor(h) - w), min(n - 1, math.floor(h) + 1 + w)))
    wins.sort()
    merged = [wins[0]]
    for lo, hi in wins[1:]:
        if lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def ensure_sorted_ranks(xs: np.ndarray, lo: int, hi: int,
                        percentiles: tuple[float, ...] = PERCENTILES) -> bool:
    """Make ranks [lo, hi] of a `select_finite` result true order statistics: they already are
    when the sample was fully sorted or the range lies inside one selected window; otherwise
    `xs` is sorted in place (the block bootstrap over requests can read ranks farther from a
    percentile than the i.i.d. windows allow), unless it already is (another metric shares
    the array). Returns True when `xs` is now fully sorted: no later range needs a check."""
    n = xs.size
    if n <= FULL_SORT_MAX:
        return True
    if any(wlo <= lo and hi <= whi for wlo, whi in rank_windows(n, percentiles)):
        return False
    if not bool(np.all(xs[:-1] <= xs[1:])):
        xs.sort()
    return True
