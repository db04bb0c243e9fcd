"""Summary of one metric's sample: mean, percentiles, each with a bootstrap 95% CI.

>>> import numpy as np
>>> d = summarize("ttft_ms", "TTFT", np.arange(1.0, 1001.0), unit="ms", seed=0)
>>> d.percentiles["p50"].value, d.count
(500.5, 1000)
>>> d.percentiles["p99.9"].supported   # one sample beyond P99.9 of 1000: noise
False
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ridgeline.jsonsafe import finite_or_none

# The percentiles reported (defined with the ranks they read), re-exported here.
from ridgeline.metrics.order_stats import PERCENTILES, ensure_sorted_ranks
from ridgeline.theory.stats import (
    DEFAULT_BOOTSTRAP_DRAWS,
    MIN_TAIL_SAMPLES,
    RequestSample,
    bootstrap_mean_draws,
    bootstrap_percentile_draws,
    ci_from_draws,
    min_samples_for_percentile,
    request_bootstrap_draws,
)


def pct_key(q: float) -> str:
    """50 → 'p50', 99.9 → 'p99.9' (vLLM's key style)."""
    return f"p{int(q)}" if float(q).is_integer() else f"p{q:g}"


@dataclass
class Percentile:
    q: float
    value: float
    ci_low: float
    ci_high: float
    supported: bool  # at least MIN_TAIL_SAMPLES samples beyond it

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": finite_or_none(self.value), "ci95_low": finite_or_none(self.ci_low),
            "ci95_high": finite_or_none(self.ci_high), "supported": self.supported,
        }


@dataclass
class Distribution:
    """One metric over its sample. `unavailable` says why when it cannot be computed."""

    name: str  # key with unit, e.g. "ttft_ms"
    label: str
    unit: str
    description: str
    count: int = 0
    mean: float = math.nan
    mean_ci: tuple[float, float] = (math.nan, math.nan)
    std: float = math.nan
    min: float = math.nan
    max: float = math.nan
    percentiles: dict[str, Percentile] = field(default_factory=dict)
    unavailable: str | None = None
    # Circular block bootstrap over requests in send order: its block length (requests);
    # None when the values were resampled as independent.
    block_requests: float | None = None

    @property
    def median(self) -> float:
        p = self.percentiles.get("p50")
        return p.value if p else math.nan

    def to_dict(self) -> dict[str, Any]:
        if self.unavailable:
            return {"label": self.label, "unit": self.unit, "description": self.description,
                    "available": False, "reason": self.unavailable}
        return {
            "label": self.label,
            "unit": self.unit,
            "description": self.description,
            "available": True,
            "count": self.count,
            "mean": finite_or_none(self.mean),
            "mean_ci95": [finite_or_none(self.mean_ci[0]), finite_or_none(self.mean_ci[1])],
            "std": finite_or_none(self.std),
            "min": finite_or_none(self.min),
            "median": finite_or_none(self.median),
            "max": finite_or_none(self.max),
            "percentiles": {k: p.to_dict() for k, p in self.percentiles.items()},
            "ci_method": ("i.i.d. percentile bootstrap" if self.block_requests is None else
                          "circular block bootstrap of whole requests in send order, "
                          f"block {self.block_requests:.1f} requests (Politis-White)"),
        }


def summarize(
    name: str,
    label: str,
    values: np.ndarray,
    *,
    unit: str,
    description: str = "",
    seed: int = 0,
    stream: int = 0,
    n_draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    percentiles: tuple[float, ...] = PERCENTILES,
) -> Distribution:
    """Summarize `values` (NaN dropped). `stream` separates the random streams of metrics."""
    return summarize_sorted(name, label, sorted_finite(values), unit=unit,
                            description=description, seed=seed, stream=stream,
                            n_draws=n_draws, percentiles=percentiles)


def finite_copy(values: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The finite values as a new float64 array, or in the first elements of `out` (float64,
    large enough) when given: the one copy that sorting or selection then works in place."""
    x = np.asarray(values, dtype=np.float64)
    # A finite sum means no NaN or infinity anywhere: one pass and no mask in the common
    # case (a sum that overflows only takes the mask path).
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(np.add.reduce(x)) if x.size else 0.0
    if math.isfinite(total):
        if out is None:
            return x.copy()
        xs = out[:x.size]
        np.copyto(xs, x)
        return xs
    finite = np.isfinite(x)
    if out is None:
        return x.copy() if finite.all() else x[finite]
    xs = out[:int(np.count_nonzero(finite))]
    if xs.size == x.size:
        np.copyto(xs, x)
    else:
        xs[...] = x[finite]
    return xs


# Above this many values `sort_in_place` splits the sort over the CPUs it may use.
PARALLEL_SORT_MIN = 1_000_000
PARALLEL_SORT_MAX_PARTS = 4


def _usable_cpus() -> int:
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


try:  # the counting sort (metrics/_kernels.c); numpy's sort without it
    from ridgeline.metrics import _kernels  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a build without the extension
    _kernels = None

# From this many values `sort_in_place` first tries counting the distinct values; it gives
# up (and sorts) past one distinct value in REPEATS_SORT_MAX_DISTINCT_FRACTION of them.
REPEATS_SORT_MIN = 1 << 20
REPEATS_SORT_MAX_DISTINCT_FRACTION = 8


def _sort_repeats(xs: np.ndarray) -> bool:
    """Sort `xs` by counting its distinct values (metrics/_kernels.c `sort_repeats`), when
    it is large, has few of them, and the compiled kernel is there; False: not sorted."""
    if (xs.size < REPEATS_SORT_MIN or xs.ndim != 1 or xs.dtype != np.float64
            or not xs.flags.c_contiguous or not xs.flags.writeable):
        return False
    if _kernels is None:  # pragma: no cover - a build without the extension
        return False
    return bool(_kernels.sort_repeats(xs, xs.size // REPEATS_SORT_MAX_DISTINCT_FRACTION))


def sort_in_place(xs: np.ndarray) -> None:
    """``xs.sort()``, bit for bit. A large sample of few distinct values (a simulated
    run's pooled ITL gaps: 20 M values, 0.4 M distinct, one per engine step or so) is
    sorted by counting them (`_sort_repeats`: 1.4 s -> 0.15 s of CPU on the 2-core box).
    Otherwise on up to PARALLEL_SORT_MAX_PARTS CPUs: a partition at
    the parts' edge ranks (O(n), in place) leaves every value in its part, then the parts
    sort in threads (numpy releases the GIL while it sorts). 20 M values: 1.39 s -> 0.92 s
    on a 2-core box (benchmarks/speed/bench_sort.py, docs/BENCHMARKS.md)."""
    if _sort_repeats(xs):
        return
    parts = min(PARALLEL_SORT_MAX_PARTS, _usable_cpus(), max(1, xs.size // PARALLEL_SORT_MIN))
    if parts < 2 or xs.ndim != 1:
        xs.sort()
        return
    import itertools
    import threading

    edges = [xs.size * i // parts for i in range(parts + 1)]
    xs.partition(edges[1:-1])
    threads = [threading.Thread(target=xs[lo:hi].sort)
               for lo, hi in itertools.pairwise(edges[1:])]
    for t in threads:
        t.start()
    xs[:edges[1]].sort()
    for t in threads:
        t.join()


def sorted_finite(values: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The finite values, sorted ascending, as a new float64 array (one copy, sorted in
    place), or in the first elements of `out` (float64, large enough) when given."""
    xs = finite_copy(values, out)
    sort_in_place(xs)
    return xs


# Leaves of the chunked pairwise sum in `std_into`: 512 KiB of deviations (in cache).
STD_LEAF = 1 << 16


def std_into(xs: np.ndarray, scratch: np.ndarray | None = None) -> float:
    """``float(xs.std())`` bit for bit, without a sample-sized temporary.

    numpy's steps: the mean by a pairwise sum, the squared deviations, their pairwise sum,
    divided by n. numpy's pairwise sum of n values splits them at ``n2 = n // 2 - (n // 2)
    % 8`` and adds the two halves' sums; `_pairwise_sq_dev_sum` follows that tree down to
    leaves of at most STD_LEAF values, whose deviations are squared in `scratch` (float64,
    at least min(len(xs), STD_LEAF) long; allocated when None) and summed by numpy itself,
    so every addition is the one numpy makes. tests/metrics/test_metrics_analysis_fast.py and
    tests/metrics/test_metrics_analysis_speed.py check equality (sizes across the leaf size)."""
    n = np.intp(xs.size)
    mean = np.add.reduce(xs, keepdims=True)
    np.true_divide(mean, n, out=mean, casting="unsafe")
    if scratch is None:
        scratch = np.empty(min(xs.size, STD_LEAF))
    var = _pairwise_sq_dev_sum(xs, mean, scratch)
    var = var.dtype.type(var / np.maximum(n, 0))
    return float(var.dtype.type(np.sqrt(var)))


def _pairwise_sq_dev_sum(xs: np.ndarray, mean: np.ndarray, scratch: np.ndarray) -> np.float64:
    """``np.add.reduce(np.square(xs - mean))`` with numpy's pairwise tree (see `std_into`)."""
    n = xs.size
    if n <= STD_LEAF or n <= scratch.size:
        dev = np.subtract(xs, mean, out=scratch[:n])
        np.square(dev, out=dev)
        return np.add.reduce(dev)
    n2 = n // 2
    n2 -= n2 % 8
    return (_pairwise_sq_dev_sum(xs[:n2], mean, scratch)
            + _pairwise_sq_dev_sum(xs[n2:], mean, scratch))


def summarize_sorted(
    name: str,
    label: str,
    xs: np.ndarray,
    *,
    unit: str,
    description: str = "",
    seed: int = 0,
    stream: int = 0,
    n_draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    percentiles: tuple[float, ...] = PERCENTILES,
    scratch: np.ndarray | None = None,
    requests: RequestSample | None = None,
    sorted_fully: bool = False,
    moments: tuple[float, float] | None = None,
) -> Distribution:
    """`summarize` of a sample already through `sorted_finite`. `scratch` (float64, not
    `xs`'s memory, at least min(len(xs), STD_LEAF) long) is the standard deviation's
    work space (`std_into`: numpy's value, no sample-sized temporary).
    `requests` (the same values grouped by request, in send order) makes the CIs those of
    the block bootstrap over requests (theory/stats.py) instead of the i.i.d. bootstrap.
    `sorted_fully`: `xs` is sorted at every rank (not only selected), so the block draws
    need no check of the ranks they read. `moments`: (mean, std) of this same `xs`, already
    computed for another metric on it (two passes over a pooled sample saved)."""
    d = Distribution(name=name, label=label, unit=unit, description=description)
    if xs.size == 0:
        d.unavailable = "no samples"
        return d
    rng = np.random.default_rng([seed, stream])
    d.count = int(xs.size)
    d.mean, d.std = moments if moments is not None else (float(xs.mean()),
                                                         std_into(xs, scratch))
    d.min = float(xs[0])
    d.max = float(xs[-1])
    if n_draws <= 0:
        # No bootstrap (a caller that reads only the point values): the same values,
        # intervals NaN, none of the draws' cost (`xs` is exact at the percentiles' ranks).
        for q in percentiles:
            d.percentiles[pct_key(q)] = Percentile(
                q=q, value=sorted_percentile(xs, q), ci_low=math.nan, ci_high=math.nan,
                supported=xs.size >= min_samples_for_percentile(q, MIN_TAIL_SAMPLES))
        return d
    block_draws: dict[str, np.ndarray] = {}
    if requests is not None:
        fully_sorted = sorted_fully

        def ensure_ranks(lo: int, hi: int) -> None:
            nonlocal fully_sorted
            if not fully_sorted:
                fully_sorted = ensure_sorted_ranks(xs, lo, hi, percentiles)

        d.block_requests, block_draws = request_bootstrap_draws(
            requests, xs, ("mean", *(pct_key(q) for q in percentiles)), n_draws, rng,
            ensure_ranks=ensure_ranks)
        d.mean_ci = ci_from_draws(block_draws["mean"])
    else:
        d.mean_ci = ci_from_draws(bootstrap_mean_draws(xs, n_draws, rng, mean=d.mean,
                                                       sd=d.std))
    for q in percentiles:
        value = sorted_percentile(xs, q)
        draws = (block_draws[pct_key(q)] if requests is not None else
                 bootstrap_percentile_draws(xs, q, n_draws, rng))
        lo, hi = ci_from_draws(draws)
        d.percentiles[pct_key(q)] = Percentile(
            q=q, value=value, ci_low=lo, ci_high=hi,
            supported=xs.size >= min_samples_for_percentile(q, MIN_TAIL_SAMPLES),
        )
    return d


def sorted_percentile(xs: np.ndarray, q: float) -> float:
    """numpy's linear percentile of an already sorted, non-empty array (no re-partition)."""
    h = (xs.size - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, xs.size - 1)
    return float(xs[lo] + (h - lo) * (xs[hi] - xs[lo]))


def statistic_draws(
    values: np.ndarray, stat: str, *, seed: int, stream: int, n_draws: int,
    requests: RequestSample | None = None,
) -> tuple[float, np.ndarray]:
    """Point value and bootstrap draws of `stat` ('mean' or 'p<q>') for compare/gate; with
    `requests`, by the block bootstrap over requests (see `summarize_sorted`)."""
    x = np.asarray(values, dtype=np.float64)
    x = np.sort(x[np.isfinite(x)])
    rng = np.random.default_rng([seed, stream])
    if x.size == 0:
        return math.nan, np.full(n_draws, np.nan)
    if requests is not None:
        _, draws = request_bootstrap_draws(requests, x, (stat,), n_draws, rng)
        point = float(x.mean()) if stat == "mean" else sorted_percentile(x, float(stat[1:]))
        return point, draws[stat]
    if stat == "mean":
        return float(x.mean()), bootstrap_mean_draws(x, n_draws, rng)
    q = float(stat[1:])
    return (
        float(np.percentile(x, q, method="linear")),
        bootstrap_percentile_draws(x, q, n_draws, rng),
    )
