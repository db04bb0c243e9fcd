"""Statistics of measurements: percentiles, bootstrap confidence intervals, sample sizes.

Percentile method: numpy's default ``method="linear"`` (Hyndman–Fan type 7), the method
vLLM, SGLang, AIPerf, LLMPerf and inference-perf use. GuideLLM uses an inverted CDF
(no interpolation); docs/metrics.md shows the difference.

Bootstrap of a percentile, exactly and in O(B) after one sort: a bootstrap resample of
size n draws indices i.i.d. uniform on {0..n-1}, i.e. ``floor(n * U)`` with U uniform on
[0, 1). Sorting is monotone, so the resample's k-th smallest value is ``x_sorted[floor(n *
U_(k))]`` where ``U_(k)`` is the k-th order statistic of n uniforms, ``Beta(k, n - k + 1)``;
the next order statistic is ``U_(k) + (1 - U_(k)) * Beta(1, n - k)``. Linear interpolation
needs exactly those two. This gives the same distribution as resampling all n values B
times (``bootstrap_resample_percentiles`` does that, in chunks, and the tests check that
the two agree), at a cost independent of n: a 1,000,000-request trace gets 2,000 bootstrap
draws of every percentile in milliseconds.

>>> import numpy as np
>>> x = np.arange(1, 101, dtype=float)
>>> round(percentile(x, 90), 6)
90.1
>>> lo, hi = percentile_ci(x, 90, rng=np.random.default_rng(0))
>>> bool(lo < 90.1 < hi)
True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PERCENTILE_METHOD = "linear"
DEFAULT_BOOTSTRAP_DRAWS = 2000
CONFIDENCE = 0.95
# A percentile is "supported" when at least this many samples lie beyond it. P99 from 200
# samples is set by the two largest values (the serving-math chapter): noise.
MIN_TAIL_SAMPLES = 10
# Politis-White block length: correlations examined up to BLOCK_LAG_FACTOR sqrt(n) lags and
# at least BLOCK_MIN_BLOCKS blocks per resample. Politis & White's defaults (sqrt(n) lags,
# blocks <= 3 sqrt(n)) cut off the correlation of a queue near saturation (hundreds of
# requests at rho = 0.9) and under-cover: 91.5% for the mean in the M/M/1 test
# (tests/theory/test_theory_block_bootstrap.py) against 92-93% with these.
BLOCK_LAG_FACTOR = 4.0
BLOCK_MIN_BLOCKS = 10.0


def percentile(x: np.ndarray, q: float) -> float:
    """The q-th percentile (0..100) with numpy's linear method; NaN for an empty sample."""
    if x.size == 0:
        return math.nan
    return float(np.percentile(x, q, method=PERCENTILE_METHOD))


def bootstrap_percentile_draws(
    sorted_x: np.ndarray, q: float, n_draws: int, rng: np.random.Generator
) -> np.ndarray:
    """B bootstrap replicates of the linear-method q-th percentile (q in 0..100).

    `sorted_x` must be sorted ascending. Exact (see the module docstring), O(n_draws).
    """
    n = sorted_x.size
    if n == 0:
        return np.full(n_draws, np.nan)
    if n == 1:
        return np.full(n_draws, float(sorted_x[0]))
    h = (n - 1) * q / 100.0
    lo = math.floor(h)
    frac = h - lo
    k = lo + 1  # 1-based rank of the lower order statistic
    u_lo = rng.beta(k, n - k + 1, size=n_draws)
    idx_lo = np.minimum((n * u_lo).astype(np.int64), n - 1)
    lo_vals = sorted_x[idx_lo]
    if frac == 0.0 or k >= n:
        return lo_vals.astype(np.float64)
    u_hi = u_lo + (1.0 - u_lo) * rng.beta(1.0, n - k, size=n_draws)
    idx_hi = np.minimum((n * u_hi).astype(np.int64), n - 1)
    return lo_vals + frac * (sorted_x[idx_hi] - lo_vals)


def bootstrap_resample_percentiles(
    x: np.ndarray,
    qs: np.ndarray | list[float],
    n_draws: int,
    rng: np.random.Generator,
    chunk_elements: int = 4_000_000,
) -> np.ndarray:
    """Reference bootstrap: resample indices as a 2-D array in chunks, percentiles per row.

    Returns an array of shape (n_draws, len(qs)). Memory is bounded by `chunk_elements`.
    Used for small samples, for statistics without a shortcut, and to check the exact
    method in the tests.
    """
    qs_arr = np.asarray(qs, dtype=np.float64)
    n = x.size
    out = np.empty((n_draws, qs_arr.size))
    if n == 0:
        out.fill(np.nan)
        return out
    rows = max(1, chunk_elements // n)
    for start in range(0, n_draws, rows):
        stop = min(n_draws, start + rows)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = np.percentile(
            x[idx], qs_arr, axis=1, method=PERCENTILE_METHOD
        ).T
    return out


def bootstrap_mean_draws(
    x: np.ndarray,
    n_draws: int,
    rng: np.random.Generator,
    chunk_elements: int = 4_000_000,
    *,
    mean: float | None = None,
    sd: float | None = None,
) -> np.ndarray:
    """B bootstrap replicates of the mean.

    Resamples for real when n * B is at most 20 million index draws; beyond that the
    bootstrap distribution of a mean is normal to within the resampling noise (CLT, n is
    then over 10,000), so the draws come from N(mean, sd/sqrt(n)) with the sample sd.
    `mean` and `sd` (``np.mean(x)``, ``np.std(x)``), when the caller has them, save two
    passes over a large sample.
    """
    n = x.size
    if n == 0:
        return np.full(n_draws, np.nan)
    if n * n_draws <= 20_000_000:
        out = np.empty(n_draws)
        rows = max(1, chunk_elements // n)
        for start in range(0, n_draws, rows):
            stop = min(n_draws, start + rows)
            idx = rng.integers(0, n, size=(stop - start, n))
            out[start:stop] = x[idx].mean(axis=1)
        return out
    sd = float(np.std(x)) if sd is None else sd
    mean = float(np.mean(x)) if mean is None else mean
    return mean + sd / math.sqrt(n) * rng.standard_normal(n_draws)


def poisson_bootstrap_sum_draws(
    x: np.ndarray, n_draws: int, rng: np.random.Generator, chunk_elements: int = 4_000_000
) -> np.ndarray:
    """B Poisson-bootstrap replicates of sum(x): each item gets an independent Poisson(1)
    weight, so the number of items varies too (for a count over a time window, how many
    requests fell in it is itself random). Beyond 20 million weights the draws come from
    the normal limit N(sum, sqrt(sum x^2))."""
    n = x.size
    if n == 0:
        return np.zeros(n_draws)
    if n * n_draws <= 20_000_000:
        out = np.empty(n_draws)
        rows = max(1, chunk_elements // n)
        for start in range(0, n_draws, rows):
            stop = min(n_draws, start + rows)
            w = rng.poisson(1.0, size=(stop - start, n))
            out[start:stop] = w @ x
        return out
    return float(x.sum()) + math.sqrt(float(np.dot(x, x))) * rng.standard_normal(n_draws)


def bootstrap_fraction_draws(
    successes: int, trials: int, n_draws: int, rng: np.random.Generator
) -> np.ndarray:
    """B bootstrap replicates of a proportion (resampling n Bernoulli outcomes = Binomial)."""
    if trials == 0:
        return np.full(n_draws, np.nan)
    return rng.binomial(trials, successes / trials, size=n_draws) / trials


def ci_from_draws(draws: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile-bootstrap interval: the central `confidence` mass of the draws."""
    finite = draws[np.isfinite(draws)]
    if finite.size == 0:
        return (math.nan, math.nan)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(finite, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def percentile_ci(
    x: np.ndarray,
    q: float,
    n_draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    rng: np.random.Generator | None = None,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Bootstrap confidence interval of the q-th percentile of sample `x`."""
    rng = rng if rng is not None else np.random.default_rng(0)
    draws = bootstrap_percentile_draws(np.sort(x), q, n_draws, rng)
    return ci_from_draws(draws, confidence)


def min_samples_for_percentile(q: float, tail_samples: int = MIN_TAIL_SAMPLES) -> int:
    """Samples needed so that `tail_samples` values lie above the q-th percentile.

    >>> min_samples_for_percentile(99), min_samples_for_percentile(99.9)
    (1000, 10000)
    """
    tail = round(1.0 - q / 100.0, 12)  # 1 - 0.999 is 0.000999..., not 0.001
    if tail <= 0:
        return math.inf  # type: ignore[return-value]
    return math.ceil(tail_samples / tail - 1e-9)


def samples_for_rank_precision(q: float, half_width_pct: float, z: float = 1.96) -> int:
    """Samples so the empirical q-th percentile lies within ±half_width percentile points.

    Distribution-free: the fraction of the population below the sample percentile is
    approximately normal with sd sqrt(p(1-p)/n), p = q/100. For P99 to be between the true
    P98.5 and P99.5 (±0.5 points) with 95% confidence, n = 1.96² · 0.99 · 0.01 / 0.005²
    ≈ 1,522: "thousands of samples", as the serving-math chapter says.

    >>> samples_for_rank_precision(99, 0.5)
    1522
    """
    p = q / 100.0
    d = half_width_pct / 100.0
    return math.ceil(z * z * p * (1.0 - p) / (d * d))


def rank_interval_pct(q: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Which true percentiles a sample q-th percentile from n samples can be (95% band).

    >>> lo, hi = rank_interval_pct(99, 200)
    >>> round(lo, 1), round(hi, 1)
    (97.6, 100.0)
    """
    p = q / 100.0
    sd = math.sqrt(p * (1.0 - p) / n)
    return (max(0.0, (p - z * sd) * 100.0), min(100.0, (p + z * sd) * 100.0))


# ---- dependent samples: whole requests, circular blocks over request order --------------------
#
# Requests behind one queue are correlated in time (a burst slows all its neighbours), and
# the pooled ITL gaps of one request share its batch. The i.i.d. bootstrap above treats every
# value as independent, which makes intervals too narrow. The bootstrap here resamples whole
# requests (a cluster: all ITL gaps of one request go together) in circular blocks of b
# consecutive requests in send order (Politis & Romano 1992), ceil(n / b) blocks per draw.
# Block length by the automatic rule of Politis & White (2004, corrected by Patton, Politis
# & White 2009): b = (2 G^2 / D)^(1/3) n^(1/3), from flat-top-kernel estimates of the
# autocovariances of the per-request contributions: n^(1/3) scaled by how far correlation
# reaches (about 1 for independent requests, hundreds near saturation).
#
# Mean: the resampled pooled mean, sum of values / number of values over the drawn blocks.
# Percentile P_q: the resampled fraction of values <= the sample P_q, F*, is drawn the same
# way; the draw is the sample's percentile at level q - (F* - F) (Bahadur: a quantile moves
# with the empirical CDF at it), so no density estimate is needed and the skew of the tail
# is kept. When blocks x draws exceed 20 million, the draws of the ratio come from its normal
# limit with the block-bootstrap variance (exact, from the n circular block sums).


def block_length(e: np.ndarray) -> float:
    """Politis-White automatic block length of the circular block bootstrap for series `e`.

    >>> rng = np.random.default_rng(0)
    >>> block_length(rng.standard_normal(10_000)) < 3        # independent: short blocks
    True
    >>> x = np.convolve(rng.standard_normal(10_100), np.ones(100) / 100, "valid")
    >>> block_length(x) > 50                                  # correlated over 100 lags
    True
    """
    n = int(e.size)
    if n < 8:
        return 1.0
    x = e - e.mean()
    var0 = float(np.dot(x, x)) / n
    # A constant series (an emulator's identical TTFTs) leaves only rounding in x: its
    # "correlations" are noise over noise and would ask for the longest blocks.
    if not var0 > (64 * np.finfo(np.float64).eps * float(np.abs(e).max())) ** 2:
        return 1.0
    k_n = max(5, math.ceil(math.sqrt(math.log10(n))))
    m_max = min(n - 1, math.ceil(BLOCK_LAG_FACTOR * math.sqrt(n)) + k_n)
    b_max = max(1.0, n / BLOCK_MIN_BLOCKS)
    # Autocovariances up to m_max by FFT, zero-padded past n + m_max: no wrap-around at
    # the lags used (half the transform of a full 2n padding).
    size = 1 << (n + m_max).bit_length()
    f = np.fft.rfft(x, size)
    acov = np.fft.irfft(f * np.conj(f), size)[: m_max + 1] / n
    rho = acov[1:] / var0
    small = np.abs(rho) < 2.0 * math.sqrt(math.log10(n) / n)
    # Smallest m with the next k_n correlations all negligible.
    run = np.convolve(small.astype(np.int64), np.ones(k_n, dtype=np.int64), "valid")
    hits = np.flatnonzero(run == k_n)
    m_hat = int(hits[0]) if hits.size else m_max
    big_m = max(1, min(2 * m_hat, m_max))
    k = np.arange(1, big_m + 1)
    t = k / big_m
    lam = np.where(t <= 0.5, 1.0, 2.0 * (1.0 - t))  # flat-top (trapezoid) kernel
    g_hat = 2.0 * float(np.sum(lam * k * acov[1:big_m + 1]))
    s_hat = var0 + 2.0 * float(np.sum(lam * acov[1:big_m + 1]))  # long-run variance
    d_cb = 4.0 / 3.0 * s_hat * s_hat
    if not d_cb > 0:
        return 1.0
    b = (2.0 * g_hat * g_hat / d_cb) ** (1.0 / 3.0) * n ** (1.0 / 3.0)
    return float(min(max(b, 1.0), b_max))


def _circular_block_sums(x: np.ndarray, b: int) -> np.ndarray:
    """Sums of x[s : s + b] (wrapping around) for every start s."""
    n = x.size
    cs = np.concatenate(([0.0], np.cumsum(np.concatenate((x, x[: b - 1])))))
    return cs[b:b + n] - cs[:n]


def block_bootstrap_variance(e: np.ndarray, block: float) -> float:
    """Circular-block-bootstrap variance of sum(e) / sqrt(n) (the long-run variance of e):
    b times the variance of the n circular block means of length b. Exact (no draws)."""
    n = int(e.size)
    if n == 0:
        return math.nan
    b = max(1, min(n, round(block)))
    if b == 1:
        return float(np.var(e))
    return float(np.var(_circular_block_sums(e, b))) / b


def block_ratio_draws(
    num: np.ndarray, den: np.ndarray, block: float, n_draws: int, rng: np.random.Generator,
    max_elements: int = 20_000_000, *, num_sum: float | None = None,
    den_sum: float | None = None, unit: bool | None = None,
) -> np.ndarray:
    """Circular-block-bootstrap draws of sum(num) / sum(den) over units in time order (a unit
    is a request; num/den its sum and count of values), ceil(n / b) blocks per draw.
    `num_sum`, `den_sum` (``float(num.sum())``, ``float(den.sum())``) and `unit`
    (``bool(np.all(den == 1.0))``), when the caller has them, save passes over the units."""
    n = int(num.size)
    num_sum = float(num.sum()) if num_sum is None else num_sum
    den_sum = float(den.sum()) if den_sum is None else den_sum
    ratio = num_sum / den_sum  # (the IEEE division of the two float64 sums, as numpy's)
    if n < 2:
        return np.full(n_draws, ratio)
    b = max(1, min(n, round(block)))
    k = math.ceil(n / b)
    # One value per unit (den all ones): every block counts b exactly, so the resampled
    # count is k * b exactly (sums of small integers are exact); no gather needed.
    unit = bool(np.all(den == 1.0)) if unit is None else unit
    if k * n_draws > max_elements:
        # ratio * 1.0 is ratio exactly: with unit counts the same e, one pass fewer.
        e = num - ratio if unit else num - ratio * den
        sd = math.sqrt(n * block_bootstrap_variance(e, b)) / den_sum
        return ratio + sd * rng.standard_normal(n_draws)
    bn = num if b == 1 else _circular_block_sums(num, b)
    bd = den if b == 1 or unit else _circular_block_sums(den, b)
    out = np.empty(n_draws)
    rows = max(1, 4_000_000 // k)
    for start in range(0, n_draws, rows):
        stop = min(n_draws, start + rows)
        idx = rng.integers(0, n, size=(stop - start, k))
        out[start:stop] = bn[idx].sum(axis=1) / (float(k * b) if unit else
                                                 bd[idx].sum(axis=1))
    return out


@dataclass
class RequestSample:
    """A metric's values grouped by request, for the block bootstrap.

    `values`: finite values, concatenated request by request in trace order; `counts`:
    values per request (those with none left out); `order`: the requests in send order
    (a permutation of range(len(counts))). One value per request: `counts` all ones.

    What does not depend on the random draws is kept in `cache`: the block length, and for
    a pooled sample the per-request sums (of the values, of the values at or below each
    threshold), so two metrics that share one sample (pooled ITL per event and per token
    when every event holds one token) pass over its values once, and compare/gate reuse
    them. Treat `values`, `counts` and `order` as read-only.
    """

    values: np.ndarray
    counts: np.ndarray
    order: np.ndarray
    cache: dict[object, Any] = field(default_factory=dict, repr=False, compare=False)
    # `regroup(thresholds)`: the per-request counts of values <= each threshold (request
    # order, as `_counts_at_most`) worked out from the values' source, not from `values`.
    # With it (and `value_sums()` cached first), `values` may be reordered in place: a
    # pooled sample sorted where it lies, without a second copy (metrics/analysis.py).
    regroup: Callable[[list[float]], list[np.ndarray]] | None = field(
        default=None, repr=False, compare=False)

    @classmethod
    def per_request(cls, x: np.ndarray, send_s: np.ndarray | None = None,
                    send_order: np.ndarray | None = None) -> RequestSample:
        """One value per request (NaN: none), optionally with send times to order them.
        `send_order`: ``np.argsort(send_s, kind="stable")`` when the caller has it (shared
        by the samples with no missing value). Every value finite: `values` is `x` itself,
        not a copy, and `counts` a read-only view of a single 1 (no memory)."""
        x = np.asarray(x, dtype=np.float64)
        keep = np.isfinite(x)
        k = int(np.count_nonzero(keep))
        ones = np.broadcast_to(np.int64(1), (k,))
        if k == x.size:
            order = (np.arange(k) if send_s is None else send_order
                     if send_order is not None else np.argsort(send_s, kind="stable"))
            return cls(x, ones, order)
        order = (np.argsort(send_s[keep], kind="stable") if send_s is not None
                 else np.arange(k))
        return cls(x[keep], ones, order)

    def sums(self, x: np.ndarray) -> np.ndarray:
        """Per-request sums of x (aligned with `values`; float or bool), in send order."""
        if self.counts.size == x.size:  # (the gather is a new array: no second copy)
            if self._in_order():  # a copy is half the cost of a gather
                return x.astype(np.float64)
            return x[self.order].astype(np.float64, copy=False)
        dtype = np.int64 if x.dtype == np.bool_ else np.float64
        per_req = np.add.reduceat(x, self._bounds()[:-1], dtype=dtype)  # a new array
        return (per_req if self._in_order() else per_req[self.order]).astype(
            np.float64, copy=False)

    def _in_order(self) -> bool:
        """`order` is the identity (trace order is send order, as in most traces); kept."""
        if "in_order" not in self.cache:
            o = self.order
            self.cache["in_order"] = bool(np.array_equal(o, np.arange(o.size)))
        return bool(self.cache["in_order"])

    def _bounds(self) -> np.ndarray:
        """Offsets of each request's first value, and the total at the end (n_req + 1)."""
        if "bounds" not in self.cache:
            b = np.zeros(self.counts.size + 1, dtype=np.int64)
            np.cumsum(self.counts, out=b[1:])
            self.cache["bounds"] = b
        return self.cache["bounds"]

    @property
    def pooled(self) -> bool:
        """Several values per request (the per-request sums are worth keeping: they are
        n_requests long, the values far longer)."""
        return self.counts.size < self.values.size

    def value_sums(self) -> np.ndarray:
        """``sums(values)``, kept in `cache` for a pooled sample."""
        if "value_sums" in self.cache:
            return self.cache["value_sums"]
        sums = self.sums(self.values)
        if self.pooled:
            self.cache["value_sums"] = sums
        return sums

    def counts_at_most(self, thresholds: list[float]) -> list[np.ndarray]:
        """``sums(values <= t)`` for each threshold t (float64 counts, send order), equal to
        them exactly; for pooled values in one pass over them for all thresholds
        (`_counts_at_most`) instead of one `reduceat` each, kept per threshold in `cache`.
        One value per request: a comparison each, not kept (as long as the sample)."""
        if not self.pooled:
            if self.counts.size == self.values.size and self._in_order():
                # the comparison straight into float64 0/1: no gather, no bool temporary
                return [np.less_equal(self.values, t, out=np.empty(self.values.size))
                        for t in thresholds]
            return [self.sums(self.values <= t) for t in thresholds]
        todo = sorted({float(t) for t in thresholds if ("le", float(t)) not in self.cache})
        if todo:
            per_req = (self.regroup(todo) if self.regroup is not None else
                       _counts_at_most(self.values, self._bounds(), todo))
            for t, c in zip(todo, per_req, strict=True):
                self.cache[("le", t)] = (c if self._in_order() else
                                         c[self.order]).astype(np.float64)
        return [self.cache[("le", float(t))] for t in thresholds]


# Values per step of `_counts_at_most`: 512 KiB of float64 (stays in cache while it is
# compared with every threshold).
COUNT_CHUNK = 1 << 16
_BYTE_SUM = np.uint64(0x0101010101010101)  # times a word of 0/1 bytes: their sum in the top byte


def _counts_at_most(values: np.ndarray, bounds: np.ndarray, thresholds: list[float]
                    ) -> list[np.ndarray]:
    """For each threshold t, the number of `values` <= t between consecutive `bounds`
    (sorted int64 offsets, first 0, last len(values)): ``np.add.reduceat(values <= t,
    bounds[:-1])`` for non-empty segments, in exact integer arithmetic.

    Why not that reduceat: it casts the booleans to int64 one by one (about 80 ms per
    threshold on 25 M values), and each threshold is another pass over memory. Here each
    cache-sized chunk of values is compared with every threshold while it is in cache; the
    0/1 bytes of a mask are counted eight at a time (a word times 0x0101...01 holds their
    sum in its top byte) and summed up within the chunk, and only the running counts at the
    bounds are kept: ``prefix(b) = (count over the words before word b // 8) + (its 0..7
    values from 8 (b // 8) up to b, compared directly)``."""
    x = np.ascontiguousarray(values, dtype=np.float64)
    n = x.size
    n_words = n // 8
    chunk_words = COUNT_CHUNK // 8
    bw = bounds // 8  # the word holding each bound
    rest = bounds - 8 * bw  # values of that word before the bound (0..7)
    # The counts before word w are the running sum through word w - 1: bounds with w - 1
    # in the chunk's words [w0, w1) take it from there (bounds with w = 0 have none).
    last = bw - 1
    edges = np.searchsorted(last, np.arange(0, n_words + chunk_words, chunk_words))
    before = np.zeros((len(thresholds), bounds.size), dtype=np.int64)
    carry = np.zeros(len(thresholds), dtype=np.int64)
    words = np.empty(chunk_words, dtype=np.uint64)
    mask = words.view(np.bool_)
    shift = np.uint64(56)
    for c, w0 in enumerate(range(0, n_words, chunk_words)):
        w1 = min(n_words, w0 + chunk_words)
        chunk = x[8 * w0:8 * w1]
        m, wd = mask[:chunk.size], words[:w1 - w0]
        lo, hi = int(edges[c]), int(edges[c + 1])
        at = last[lo:hi] - w0
        for k, t in enumerate(thresholds):
            np.less_equal(chunk, t, out=m)
            np.multiply(wd, _BYTE_SUM, out=wd)
            np.right_shift(wd, shift, out=wd)
            np.cumsum(wd, out=wd)
            before[k, lo:hi] = wd[at].astype(np.int64) + carry[k]
            carry[k] += int(wd[-1])
    # The 0..7 values of each bound's word before it, lane by lane: bound-sized arrays only.
    for j in range(8):
        in_tail = rest > j
        if not in_tail.any():
            break
        v = x[np.minimum(8 * bw + j, n - 1)]
        for k, t in enumerate(thresholds):
            before[k] += (v <= t) & in_tail
    return [np.diff(before[k]) for k in range(len(thresholds))]


def request_bootstrap_draws(
    sample: RequestSample, sorted_x: np.ndarray, stats: tuple[str, ...], n_draws: int,
    rng: np.random.Generator, ensure_ranks: Callable[[int, int], None] | None = None,
) -> tuple[float, dict[str, np.ndarray]]:
    """Block length and draws of each statistic ('mean', 'p90', ...) by the circular block
    bootstrap over requests in send order; `sorted_x` is ``np.sort(sample.values)``, or only
    ordered at some ranks when `ensure_ranks(lo, hi)` makes ranks lo..hi exact on demand.

    The draws use `rng` statistic by statistic in the order of `stats`; the per-request
    sums behind them are computed once per sample (see `RequestSample.cache`)."""
    out: dict[str, np.ndarray] = {}
    n_val = sorted_x.size
    if n_val == 0:
        return 1.0, {s: np.full(n_draws, np.nan) for s in stats}
    # One value per request: every count is 1, so `den` is all ones and sums to the number
    # of requests exactly (no gather of the counts; checked once, not per statistic).
    unit = sample.counts.size == sample.values.size and bool(np.all(sample.counts == 1))
    den = (np.ones(sample.counts.size) if unit else
           sample.counts[sample.order].astype(np.float64))
    num = sample.value_sums()
    num_sum, den_sum = float(num.sum()), float(den.sum())
    mean = num_sum / den_sum
    if "block" not in sample.cache:
        # (mean * 1.0 is mean exactly: with unit counts the same series, a pass fewer)
        sample.cache["block"] = block_length(num - mean if unit else num - mean * den)
    block = float(sample.cache["block"])
    # The sample percentiles first (ranks next to each percentile's own: exact in a
    # selected sample), then the per-request counts at or below all of them in one pass.
    xis: dict[str, float] = {}
    for s in stats:
        if s != "mean":
            h = (n_val - 1) * (float(s[1:]) / 100.0)  # as below: the same rounding
            lo = math.floor(h)
            xis[s] = float(sorted_x[lo] + (h - lo) * (sorted_x[min(lo + 1, n_val - 1)]
                                                      - sorted_x[lo]))
    below_all = dict(zip(xis, sample.counts_at_most(list(xis.values())), strict=True))
    for s in stats:
        if s == "mean":
            out[s] = block_ratio_draws(num, den, block, n_draws, rng, num_sum=num_sum,
                                       den_sum=den_sum, unit=unit)
            continue
        p = float(s[1:]) / 100.0
        below = below_all[s]
        below_sum = float(below.sum())
        f_hat = below_sum / n_val
        f_star = block_ratio_draws(below, den, block, n_draws, rng, num_sum=below_sum,
                                   den_sum=den_sum, unit=unit)
        level = np.clip(p - (f_star - f_hat), 0.0, 1.0)
        hh = (n_val - 1) * level
        i0 = np.floor(hh).astype(np.int64)
        i1 = np.minimum(i0 + 1, n_val - 1)
        if ensure_ranks is not None:
            ensure_ranks(int(i0.min()), int(i1.max()))
        out[s] = sorted_x[i0] + (hh - i0) * (sorted_x[i1] - sorted_x[i0])
    return block, out
