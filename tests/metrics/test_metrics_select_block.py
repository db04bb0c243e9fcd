"""The block bootstrap reads ranks of a selected (not fully sorted) sample: they must be the
true order statistics, whatever ranks its draws reach (metrics/select.py)."""

from __future__ import annotations

import numpy as np

from ridgeline.metrics.distribution import summarize_sorted
from ridgeline.metrics.select import FULL_SORT_MAX, ensure_sorted_ranks, select_finite
from ridgeline.theory.stats import RequestSample


def test_ranks_outside_the_windows_are_made_exact() -> None:
    x = np.random.default_rng(1).lognormal(size=FULL_SORT_MAX + 100_000)
    full = np.sort(x)
    sel = select_finite(x)
    mid = x.size // 2
    assert not ensure_sorted_ranks(sel, mid - 5, mid + 5)       # inside the p50 window
    np.testing.assert_array_equal(sel[mid - 5:mid + 6], full[mid - 5:mid + 6])
    lo = x.size // 10                                           # far from every percentile
    assert not np.array_equal(sel[lo:lo + 50], full[lo:lo + 50])
    assert ensure_sorted_ranks(sel, lo, lo + 50)
    np.testing.assert_array_equal(sel, full)


def test_block_bootstrap_cis_equal_on_selected_and_sorted_samples() -> None:
    rng = np.random.default_rng(2)
    n = FULL_SORT_MAX + 50_000
    # Strongly autocorrelated values (an AR(1) in send order): block draws reach far ranks.
    e = rng.standard_normal(n)
    x = np.empty(n)
    x[0] = e[0]
    for_loop_free = np.frompyfunc(lambda a, b: 0.999 * a + b, 2, 1)
    x[:] = for_loop_free.accumulate(e, dtype=object).astype(np.float64)
    req = RequestSample.per_request(x, np.arange(n, dtype=np.float64))
    a = summarize_sorted("v", "v", select_finite(x), unit="ms", requests=req)
    b = summarize_sorted("v", "v", np.sort(x), unit="ms", requests=req)
    assert a.mean_ci == b.mean_ci
    for k, p in b.percentiles.items():
        q = a.percentiles[k]
        assert (q.value, q.ci_low, q.ci_high) == (p.value, p.ci_low, p.ci_high), k
