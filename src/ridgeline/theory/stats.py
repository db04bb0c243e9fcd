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

import numpy as np

PERCENTILE_METHOD = "linear"
DEFAULT_BOOTSTRAP_DRAWS = 2000
CONFIDENCE = 0.95
# A percentile is "supported" when at least this many samples lie beyond it. P99 from 200
# samples is set by the two largest values (the serving-math chapter): noise.
MIN_TAIL_SAMPLES = 10


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
