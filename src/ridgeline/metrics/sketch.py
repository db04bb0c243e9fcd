"""A mergeable quantile sketch with a stated relative error (DDSketch's log-spaced buckets).

Bucket i holds the values in (gamma^(i-1), gamma^i] with gamma = (1 + a) / (1 - a); its
representative 2 gamma^i / (gamma + 1) is within relative error `a` of every value in it
(Masson, Rim & Lee, "DDSketch", VLDB 2019). So any order statistic read from the sketch is
within `a` (relative) of the exact one, and the linear-method percentile, a convex
combination of two order statistics, is too. Values at or below `min_value` count in a
zero bucket reported as 0 (absolute error at most `min_value`). Buckets are a fixed numpy
array (about 1,800 int64 counts for a = 1% over 1e-6..1e9): adding is one vectorized
bincount, merging is an addition, memory is constant.

>>> import numpy as np
>>> s = LogSketch(0.01)
>>> x = np.random.default_rng(0).lognormal(3.0, 1.0, 100_000)
>>> s.add(x)
>>> exact = float(np.percentile(x, 99))
>>> abs(s.percentile(99) - exact) <= 0.01 * exact
True
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_RELATIVE_ERROR = 0.01


class LogSketch:
    """Counts in log-spaced buckets; percentiles within `relative_error` of exact."""

    def __init__(self, relative_error: float = DEFAULT_RELATIVE_ERROR,
                 min_value: float = 1e-6, max_value: float = 1e9) -> None:
        if not 0 < relative_error < 1:
            raise ValueError("relative_error must be in (0, 1)")
        self.relative_error = relative_error
        self.min_value = min_value
        self.max_value = max_value
        self.gamma = (1 + relative_error) / (1 - relative_error)
        self._log_gamma = math.log(self.gamma)
        self._offset = math.ceil(math.log(min_value) / self._log_gamma)
        top = math.ceil(math.log(max_value) / self._log_gamma)
        self.counts = np.zeros(top - self._offset + 1, dtype=np.int64)
        self.zero_count = 0
        self.count = 0
        self.min = math.inf
        self.max = -math.inf

    def add(self, values: np.ndarray) -> None:
        """Add the finite values (NaN and inf are ignored; negatives count as zero)."""
        x = np.asarray(values, dtype=np.float64)
        if x.size == 0:
            return
        # Masks only where needed (a streamed fleet adds ~250 ITL values a request; most
        # chunks hold neither NaN nor values below min_value). min/max propagate NaN.
        lo, hi = float(x.min()), float(x.max())
        if not (math.isfinite(lo) and math.isfinite(hi)):
            x = x[np.isfinite(x)]
            if x.size == 0:
                return
            lo, hi = float(x.min()), float(x.max())
        self.count += int(x.size)
        self.min = min(self.min, lo)
        self.max = max(self.max, hi)
        pos = x if lo > self.min_value else x[x > self.min_value]
        self.zero_count += int(x.size - pos.size)
        if pos.size:
            logs = np.log(pos)
            np.divide(logs, self._log_gamma, out=logs)
            np.ceil(logs, out=logs)
            idx = logs.astype(np.int64)
            idx -= self._offset
            np.clip(idx, 0, self.counts.size - 1, out=idx)
            self.counts += np.bincount(idx, minlength=self.counts.size)

    def merge(self, other: LogSketch) -> None:
        """Add another sketch's counts (same relative error and range)."""
        if (other.gamma, other._offset, other.counts.size) != (
                self.gamma, self._offset, self.counts.size):
            raise ValueError("sketches with different parameters cannot be merged")
        self.counts += other.counts
        self.zero_count += other.zero_count
        self.count += other.count
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    def _value_at_rank(self, cum: np.ndarray, k: int) -> float:
        """Estimate of the k-th smallest value (0-based)."""
        if k < self.zero_count:
            return max(0.0, min(self.min, 0.0)) if self.min <= 0 else self.min
        i = int(np.searchsorted(cum, k - self.zero_count, side="right"))
        v = 2.0 * self.gamma ** (i + self._offset) / (self.gamma + 1.0)
        return min(max(v, self.min), self.max)   # the exact ends only tighten the bound

    def percentile(self, q: float) -> float:
        """numpy's linear percentile (0..100), each order statistic from its bucket."""
        if self.count == 0:
            return math.nan
        cum = np.cumsum(self.counts)
        h = (self.count - 1) * q / 100.0
        lo = math.floor(h)
        hi = min(lo + 1, self.count - 1)
        v_lo = self._value_at_rank(cum, lo)
        v_hi = self._value_at_rank(cum, hi) if hi != lo else v_lo
        return v_lo + (h - lo) * (v_hi - v_lo)
