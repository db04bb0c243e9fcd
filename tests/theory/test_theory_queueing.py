"""Queueing formulas against independent derivations and simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ridgeline.errors import RidgelineError
from ridgeline.theory.queueing import (
    erlang_c,
    fanout_page_percentile_from_samples,
    mm1,
    mm1_time_in_system_percentile_s,
    mm1_wait_percentile_s,
    mmc,
    mmc_wait_percentile_s,
    replicas_for_wait,
)


def simulate_mmc(lam: float, mu: float, c: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """FCFS M/M/c by event order: each arrival takes the earliest-free server."""
    rng = np.random.default_rng(seed)
    arrive = np.cumsum(rng.exponential(1 / lam, n))
    service = rng.exponential(1 / mu, n)
    free = np.zeros(c)
    wait = np.empty(n)
    for i in range(n):
        k = int(np.argmin(free))
        start = max(arrive[i], free[k])
        wait[i] = start - arrive[i]
        free[k] = start + service[i]
    return wait, wait + service


def test_mm1_matches_simulation() -> None:
    wait, stay = simulate_mmc(8.0, 10.0, 1, 200_000, seed=0)
    r = mm1(8.0, 10.0)
    assert r.mean_time_in_system_s == pytest.approx(0.5)
    assert stay.mean() == pytest.approx(0.5, rel=0.05)
    assert wait.mean() == pytest.approx(r.mean_wait_s, rel=0.06)
    # Time in system is exponential with rate μ - λ = 2: P99 = ln(100)/2.
    assert mm1_time_in_system_percentile_s(8, 10, 99) == pytest.approx(math.log(100) / 2)
    assert np.percentile(stay, 99) == pytest.approx(math.log(100) / 2, rel=0.08)
    # Wait: P(Wq > t) = ρ e^{-(μ-λ)t}; its median: ln(0.8/0.5)/2.
    assert mm1_wait_percentile_s(8, 10, 50) == pytest.approx(math.log(1.6) / 2)
    assert np.percentile(wait, 50) == pytest.approx(math.log(1.6) / 2, rel=0.08)
    assert mm1_wait_percentile_s(8, 10, 10) == 0.0  # 20% of arrivals never wait


def test_erlang_c_closed_forms() -> None:
    assert erlang_c(1, 0.8) == pytest.approx(0.8)
    rho = 0.9  # c = 2: C = 2ρ² / (1 + ρ)
    assert erlang_c(2, 1.8) == pytest.approx(2 * rho**2 / (1 + rho))
    assert mmc(8, 10, 1).mean_time_in_system_s == pytest.approx(mm1(8, 10).mean_time_in_system_s)


def test_mmc_matches_simulation() -> None:
    wait, stay = simulate_mmc(25.0, 10.0, 3, 100_000, seed=1)
    r = mmc(25.0, 10.0, 3)
    assert (wait > 0).mean() == pytest.approx(r.prob_wait, abs=0.02)
    assert wait.mean() == pytest.approx(r.mean_wait_s, rel=0.08)
    assert stay.mean() == pytest.approx(r.mean_time_in_system_s, rel=0.05)
    assert np.percentile(wait, 95) == pytest.approx(mmc_wait_percentile_s(25, 10, 3, 95),
                                                    rel=0.08)


def test_replicas_for_wait_is_the_smallest() -> None:
    c = replicas_for_wait(25.0, 10.0, 0.01)
    assert mmc(25.0, 10.0, c).mean_wait_s <= 0.01
    assert c == 3 or mmc(25.0, 10.0, c - 1).mean_wait_s > 0.01


def test_unstable_queue_is_refused() -> None:
    with pytest.raises(RidgelineError, match="utilization"):
        mm1(10.0, 10.0)


def test_fanout_page_percentile_matches_monte_carlo() -> None:
    rng = np.random.default_rng(0)
    calls = rng.lognormal(math.log(100), 0.5, 400_000)
    pages = rng.lognormal(math.log(100), 0.5, (100_000, 10)).max(axis=1)
    predicted = fanout_page_percentile_from_samples(calls, 10, 99)
    assert np.percentile(pages, 99) == pytest.approx(predicted, rel=0.05)
    # ...which is the single call's P99.9, not its P99.
    assert predicted == pytest.approx(np.percentile(calls, 99.9), rel=0.01)
