"""Metrics on simulated queues with known answers: Little's law, window choice, goodput."""

from __future__ import annotations

import numpy as np
import pytest

from ridgeline.metrics.analysis import analyze
from ridgeline.trace.table import Trace


def mm1_trace(lam: float, mu: float, n: int, seed: int, end_scale: float = 1.0) -> Trace:
    """FCFS single server (Lindley recursion); each request streams one event at its end."""
    rng = np.random.default_rng(seed)
    arrive = np.cumsum(rng.exponential(1 / lam, n))
    service = rng.exponential(1 / mu, n)
    finish = np.empty(n)
    free = 0.0
    for i in range(n):
        free = max(arrive[i], free) + service[i]
        finish[i] = free
    recs = [{"id": str(i), "sent_s": float(arrive[i]), "event_times_s": [float(finish[i])],
             "end_s": float(arrive[i] + (finish[i] - arrive[i]) * end_scale),
             "output_tokens": 1} for i in range(n)]
    return Trace.from_records({"source": "mm1"}, recs)


def test_little_law_holds_on_a_stationary_queue() -> None:
    r = analyze(mm1_trace(8.0, 10.0, 20_000, seed=1))
    assert r.little.ok is True and r.little.status == "consistent"
    assert r.little.ratio == pytest.approx(1.0, abs=0.03)
    # M/M/1 mean time in system 1/(μ-λ) = 0.5 s; L = λW = 4.
    assert r.latency["e2e_ms"].mean == pytest.approx(500.0, rel=0.1)
    assert r.concurrency.mean_in_flight == pytest.approx(4.0, rel=0.1)
    assert r.throughput.requests_s == pytest.approx(8.0, rel=0.05)
    assert r.window is not None and r.window.how.startswith("auto")


def test_little_law_flags_a_non_stationary_run() -> None:
    # Overload (ρ = 1.2): the queue grows all run long, arrivals late in the window stay far
    # past it, so the time-averaged L inside the window is well below λ·W.
    r = analyze(mm1_trace(12.0, 10.0, 5_000, seed=2))
    assert r.little.ok is False and r.little.status == "overloaded"
    assert r.little.ratio < 0.9
    assert any("Little" in w for w in r.warnings)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_little_consistent_below_capacity_also_over_the_whole_run(rho: float) -> None:
    r = analyze(mm1_trace(10.0 * rho, 10.0, 20_000, seed=4), window="all")
    assert r.little.status == "consistent"
    assert r.little.completed_req_s == pytest.approx(10.0 * rho, rel=0.05)


def test_little_overloaded_at_rho_3_whatever_the_window() -> None:
    # ρ = 3: the old check fell back to first send..last end, where L/(λW) = 1 by arithmetic.
    t = mm1_trace(30.0, 10.0, 3_000, seed=6)
    for window in (None, "all"):
        lt = analyze(t, window=window).little
        assert lt.status == "overloaded"
        assert lt.completed_req_s == pytest.approx(10.0, rel=0.1)  # μ: the server is busy
        assert lt.lambda_req_s == pytest.approx(30.0, rel=0.06)
        assert lt.ratio == pytest.approx(1 / 3, rel=0.15)  # fluid limit: μ/λ


def test_goodput_attainment_matches_exponential_tail() -> None:
    # E2E of M/M/1 is exponential with rate μ - λ = 2/s: P(E2E <= 1 s) = 1 - e^-2 = 0.8647.
    r = analyze(mm1_trace(8.0, 10.0, 40_000, seed=3), slos=["e2e_s<=1"])
    g = r.goodput
    assert g is not None
    assert g.attainment == pytest.approx(1 - np.exp(-2.0), abs=0.02)
    assert g.attainment_ci[0] < g.attainment < g.attainment_ci[1]


def test_analyze_ci_is_wide_enough_for_a_correlated_queue() -> None:
    # M/M/1 at ρ = 0.9 (λ = 9, μ = 10): successive E2E are correlated over hundreds of
    # requests. The block bootstrap's CI of the mean E2E (true 1/(μ-λ) = 1 s) is many
    # times the i.i.d. one, and covers the truth; two runs of the same queue are then
    # "within noise" in compare, where the i.i.d. interval calls them different.
    from ridgeline.metrics.compare import compare
    from ridgeline.theory.stats import bootstrap_mean_draws, ci_from_draws

    a = analyze(mm1_trace(9.0, 10.0, 20_000, seed=21), window="all")
    b = analyze(mm1_trace(9.0, 10.0, 20_000, seed=22), window="all")
    d = a.latency["e2e_ms"]
    assert d.block_requests is not None and d.block_requests > 50
    x = np.sort(a.samples["e2e_ms"])
    iid = ci_from_draws(bootstrap_mean_draws(x, 2000, np.random.default_rng(0)))
    assert (d.mean_ci[1] - d.mean_ci[0]) > 5 * (iid[1] - iid[0])
    assert d.mean_ci[0] <= 1000.0 <= d.mean_ci[1]
    row = compare(a, b, ["e2e_mean"]).row("e2e_mean")
    assert row.verdict == "within noise"
    xb = np.sort(b.samples["e2e_ms"])
    iid_b = bootstrap_mean_draws(xb, 2000, np.random.default_rng(1))
    lo, hi = ci_from_draws(iid_b - bootstrap_mean_draws(x, 2000, np.random.default_rng(2)))
    assert lo > 0 or hi < 0  # the i.i.d. bootstrap would have called it significant
