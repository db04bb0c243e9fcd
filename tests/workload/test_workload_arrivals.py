"""Arrival processes: the generated gaps have the asked distribution."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ridgeline.errors import RidgelineError
from ridgeline.workload.arrivals import arrival_times_s, expected_duration_s, parse_arrival


def ks_statistic_exponential(gaps: np.ndarray, rate: float) -> float:
    """Kolmogorov–Smirnov distance between the gaps' empirical CDF and Exp(rate)."""
    x = np.sort(gaps)
    n = x.size
    cdf = 1.0 - np.exp(-rate * x)
    upper = np.arange(1, n + 1) / n - cdf
    lower = cdf - np.arange(0, n) / n
    return float(max(upper.max(), lower.max()))


def test_poisson_gaps_pass_ks_at_the_asked_rate() -> None:
    n = 20_000
    t = arrival_times_s(parse_arrival("poisson", rate_req_s=8.0), n, np.random.default_rng(7))
    gaps = np.diff(t)
    # KS critical value at alpha = 0.01 is 1.628 / sqrt(n).
    assert ks_statistic_exponential(gaps, 8.0) < 1.628 / math.sqrt(n - 1)
    # ...and a wrong rate is rejected by the same test (the check can fail).
    assert ks_statistic_exponential(gaps, 6.0) > 1.628 / math.sqrt(n - 1)


def test_gamma_burstiness_matches_cv() -> None:
    t = arrival_times_s(parse_arrival("gamma:cv=3", rate_req_s=5.0), 200_000,
                        np.random.default_rng(3))
    gaps = np.diff(t)
    assert 1.0 / gaps.mean() == pytest.approx(5.0, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.05)


@pytest.mark.parametrize("spec", ["poisson", "gamma:cv=2", "constant", "ramp:start=1,end=9",
                                  "diurnal:peak=10,trough=2,period=100"])
def test_every_process_gives_exactly_n_times(spec: str) -> None:
    # "the first n arrival times": one per request, never one more
    for n in (1, 2, 1_000):
        t = arrival_times_s(parse_arrival(spec, rate_req_s=5.0), n, np.random.default_rng(n))
        assert t.shape == (n,)
        assert np.all(np.diff(t) >= 0)


def test_rate_bounds_are_inclusive() -> None:
    # RATE_TEXT says "from 1e-06 to 1e+07 req/s": both ends are allowed, just outside is not
    for rate in (1e-6, 1e7):
        assert parse_arrival("poisson", rate_req_s=rate).rate_req_s == rate
    for rate in (0.9e-6, 1.1e7):
        with pytest.raises(RidgelineError, match="allowed: a rate from 1e-06 to 1e"):
            parse_arrival("poisson", rate_req_s=rate)


def test_diurnal_rate_curve_by_hand() -> None:
    # rate(t) = trough + (peak - trough)(1 - cos(2 pi (t - phase) / period)) / 2
    proc = parse_arrival("diurnal:peak=10,trough=2,period=100")
    assert proc.rate_at(np.array([0.0, 25.0, 50.0, 75.0, 100.0])) == pytest.approx(
        [2.0, 6.0, 10.0, 6.0, 2.0])
    shifted = parse_arrival("diurnal:peak=10,trough=2,period=100,phase=25")
    assert shifted.rate_at(np.array([25.0, 75.0])) == pytest.approx([2.0, 10.0])
    # Thinned arrivals over ~33 periods: the share in the high half of each period
    # (t mod 100 in [25, 75)) is (2*50 + 8*(25 + 100/(2 pi))) / (6*100) = 0.7122.
    t = arrival_times_s(proc, 20_000, np.random.default_rng(5))
    high = float(np.mean((t % 100 >= 25) & (t % 100 < 75)))
    assert high == pytest.approx((100 + 8 * (25 + 100 / (2 * math.pi))) / 600, abs=0.015)


def test_diurnal_thinning_gives_up_with_an_error() -> None:
    # peak 1e7 from a trough of 0 over a day: 1,000 rounds of 2,400 candidates span 0.24 s
    # of the trough, where the rate is ~0, so the run cannot reach 1,000 arrivals
    with pytest.raises(RidgelineError, match="thinning kept 0 of 1,000 arrivals"):
        arrival_times_s(parse_arrival("diurnal:peak=1e7,trough=0"), 1_000,
                        np.random.default_rng(0))


def test_constant_spacing_and_first_arrival_at_zero() -> None:
    t = arrival_times_s(parse_arrival("constant:rate=10"), 5, np.random.default_rng(0))
    assert t.tolist() == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])


def test_ramp_rate_rises_linearly() -> None:
    proc = parse_arrival("ramp:start=2,end=18")
    n = 100_000
    t = arrival_times_s(proc, n, np.random.default_rng(11))
    duration = expected_duration_s(proc, n)
    assert duration == pytest.approx(2 * n / 20)
    # Count in the first and last tenth of the run: rates ~ 2.8 and ~ 17.2 req/s.
    first = np.sum(t < duration / 10) / (duration / 10)
    last = np.sum(t > 0.9 * duration) / (duration / 10)
    assert first == pytest.approx(2 + 16 * 0.05, rel=0.05)
    assert last == pytest.approx(2 + 16 * 0.95, rel=0.05)


def test_replay_from_csv_and_trace(tmp_path) -> None:
    csv = tmp_path / "times.csv"
    csv.write_text("time_s,other\n5.0,a\n5.5,b\n7.0,c\n")
    proc = parse_arrival(f"replay:path={csv}")
    assert arrival_times_s(proc, 3, np.random.default_rng(0)).tolist() == [0.0, 0.5, 2.0]
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"type":"header","source":"x"}\n{"type":"request","id":"a","scheduled_s":1,'
                     '"sent_s":1.1}\n{"type":"request","id":"b","scheduled_s":3,"sent_s":3.2}\n{"ty')
    proc = parse_arrival(f"replay:{trace}")
    assert arrival_times_s(proc, 2, np.random.default_rng(0)).tolist() == [0.0, 2.0]
    with pytest.raises(RidgelineError, match="holds 2 timestamps"):
        arrival_times_s(proc, 3, np.random.default_rng(0))


@pytest.mark.parametrize(
    ("spec", "rate", "message"),
    [
        ("poisson", None, "needs a rate"),
        ("gamma", 3.0, "missing 'cv='"),
        ("weibull", 3.0, "unknown arrival process"),
        ("ramp:start=1", None, "missing 'end='"),
        ("poisson:cv=2", 1.0, "does not take cv"),
    ],
)
def test_bad_arrival_specs(spec: str, rate: float | None, message: str) -> None:
    with pytest.raises(RidgelineError, match=message):
        parse_arrival(spec, rate_req_s=rate)
