"""Percentiles and bootstrap CIs: the exact order-statistic bootstrap equals resampling,
and the 95% CI of P90 covers the true P90 as often as it should."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ridgeline.theory.stats import (
    bootstrap_mean_draws,
    bootstrap_percentile_draws,
    bootstrap_resample_percentiles,
    ci_from_draws,
    min_samples_for_percentile,
    percentile,
    percentile_ci,
    poisson_bootstrap_sum_draws,
    rank_interval_pct,
    samples_for_rank_precision,
)


def test_percentile_is_numpy_linear() -> None:
    x = np.array([100.0, 200.0, 200.0, 600.0])
    # h = (n - 1) q = 3 * 0.9 = 2.7 → x[2] + 0.7 (x[3] - x[2]) = 480.
    assert percentile(x, 90) == pytest.approx(480.0)
    assert math.isnan(percentile(np.zeros(0), 50))


@pytest.mark.parametrize("q", [50.0, 90.0, 99.0])
def test_exact_bootstrap_matches_resampling(q: float) -> None:
    rng = np.random.default_rng(5)
    x = np.sort(rng.lognormal(0.0, 1.0, 60))
    exact = bootstrap_percentile_draws(x, q, 40_000, np.random.default_rng(1))
    brute = bootstrap_resample_percentiles(x, [q], 40_000, np.random.default_rng(2))[:, 0]
    # Same distribution: mean, sd and the CI ends agree to within Monte Carlo noise.
    assert exact.mean() == pytest.approx(brute.mean(), rel=0.01)
    assert exact.std() == pytest.approx(brute.std(), rel=0.03)
    for a, b in zip(ci_from_draws(exact), ci_from_draws(brute), strict=True):
        assert a == pytest.approx(b, rel=0.03)


def test_exact_bootstrap_takes_only_sample_values_at_integer_ranks() -> None:
    x = np.arange(11, dtype=float)  # (n - 1) * 0.5 = 5: no interpolation
    draws = bootstrap_percentile_draws(x, 50, 1000, np.random.default_rng(0))
    assert set(np.unique(draws)) <= set(x)


def test_p90_ci_coverage_is_near_95_percent() -> None:
    # Exponential(1): the true P90 is ln(10). Repeat: draw n = 300, build the 95% CI.
    true_p90 = math.log(10.0)
    rng = np.random.default_rng(123)
    reps, hits = 400, 0
    for _ in range(reps):
        x = rng.exponential(1.0, 300)
        lo, hi = percentile_ci(x, 90, n_draws=1000, rng=rng)
        hits += lo <= true_p90 <= hi
    coverage = hits / reps
    assert 0.90 <= coverage <= 0.99, coverage


def test_ci_narrows_with_more_samples() -> None:
    # Averaged over repetitions: one 200-sample CI can be narrow by luck (its top values
    # happen to be close), which is exactly why such a P99 is not to be trusted.
    rng = np.random.default_rng(0)

    def mean_width(n: int) -> float:
        widths = [np.diff(percentile_ci(rng.lognormal(0, 0.5, n), 99, rng=rng))[0]
                  for _ in range(20)]
        return float(np.mean(widths))

    assert mean_width(5000) < 0.5 * mean_width(200)


def test_mean_draws_resampled_and_normal_agree() -> None:
    rng = np.random.default_rng(0)
    x = rng.exponential(2.0, 5000)
    resampled = bootstrap_mean_draws(x, 2000, np.random.default_rng(1))  # 1e7: resamples
    big = np.tile(x, 4)  # 2e4 samples × 2000 draws > 2e7: normal limit
    normal = bootstrap_mean_draws(big, 2000, np.random.default_rng(1))
    assert resampled.std() == pytest.approx(x.std() / math.sqrt(x.size), rel=0.1)
    assert normal.std() == pytest.approx(big.std() / math.sqrt(big.size), rel=0.1)


def test_poisson_bootstrap_of_a_count_has_poisson_spread() -> None:
    ones = np.ones(400)
    draws = poisson_bootstrap_sum_draws(ones, 4000, np.random.default_rng(0))
    assert draws.mean() == pytest.approx(400, rel=0.01)
    assert draws.std() == pytest.approx(20.0, rel=0.08)  # sqrt(400)


def test_samples_needed() -> None:
    assert min_samples_for_percentile(99) == 1000
    assert min_samples_for_percentile(99.9) == 10_000
    assert min_samples_for_percentile(90) == 100
    # 1.96² · 0.99 · 0.01 / 0.005² = 1521.3 → 1522
    assert samples_for_rank_precision(99, 0.5) == 1522
    lo, hi = rank_interval_pct(99, 200)
    assert lo == pytest.approx(100 * (0.99 - 1.96 * math.sqrt(0.99 * 0.01 / 200)))
    assert hi == 100.0
