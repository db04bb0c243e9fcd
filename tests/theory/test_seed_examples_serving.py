"""The seeds' worked examples for serving math and metrics (chapter 10 and the metrics and
serving-math chapters). The expected numbers are the ones printed in the seeds."""

from __future__ import annotations

import pytest

from ridgeline.theory.queueing import (
    amdahl_limit,
    amdahl_speedup,
    e2e_latency_s,
    fanout_call_quantile_for_page,
    fanout_page_quantile,
    fanout_tail_probability,
    little_in_system,
    little_kv_bytes,
    mm1,
)
from ridgeline.theory.stats import min_samples_for_percentile


def test_amdahl() -> None:
    assert round(amdahl_speedup(0.3, 2), 2) == 1.18
    assert round(amdahl_speedup(0.3, 100), 2) == 1.42
    assert round(amdahl_speedup(0.8, 2), 2) == 1.67
    assert amdahl_limit(0.3) == pytest.approx(1 / 0.7)


def test_little() -> None:
    assert little_in_system(20, 8) == 160
    assert little_in_system(50, 6) == 300


def test_little_kv_memory() -> None:
    # Seeds: 4000 tokens × 56 KB ≈ 229 MB per request (so KB = 1000 B, with Qwen2.5-7B's
    # 57,344 B/token: 4000 × 57,344 = 229.4 MB) and 300 requests ≈ 69 GB.
    assert little_kv_bytes(1, 1, 4000, 57_344) / 1e6 == pytest.approx(229.4, abs=0.1)
    assert little_kv_bytes(50, 6, 4000, 57_344) / 1e9 == pytest.approx(68.8, abs=0.05)
    assert round(little_kv_bytes(50, 6, 4000, 57_344) / 1e9) == 69


def test_mm1_stay_times() -> None:
    mu = 10.0
    assert mm1(0.8 * mu, mu).stay_over_service(mu) == pytest.approx(5.0)
    assert mm1(0.95 * mu, mu).stay_over_service(mu) == pytest.approx(20.0)
    # "about 4×" from 80% to 95%.
    assert mm1(9.5, mu).mean_time_in_system_s / mm1(8, mu).mean_time_in_system_s == 4.0
    # The seeds' formula column: 2 → 0.125 s, 5 → 0.2, 8 → 0.5, 9 → 1.0, 9.5 → 2.0.
    for lam, w in [(2, 0.125), (5, 0.2), (8, 0.5), (9, 1.0), (9.5, 2.0)]:
        assert mm1(lam, mu).mean_time_in_system_s == pytest.approx(w)


def test_fanout() -> None:
    assert fanout_tail_probability(0.99, 10) == pytest.approx(0.0956, abs=5e-5)
    assert round(fanout_tail_probability(0.99, 10) * 100, 1) == 9.6
    assert round(fanout_page_quantile(0.99, 10), 2) == 0.90  # a call's P99 is the page's P90
    assert round(fanout_call_quantile_for_page(0.99, 10) * 100, 1) == 99.9


def test_e2e_from_ttft_and_tpot() -> None:
    assert e2e_latency_s(0.5, 0.04, 20) * 1000 == pytest.approx(1260)
    assert e2e_latency_s(0.5, 0.04, 800) * 1000 == pytest.approx(32460)
    # TTFT share: about 40% and about 1.5%.
    assert 0.5 / e2e_latency_s(0.5, 0.04, 20) == pytest.approx(0.40, abs=0.01)
    assert 0.5 / e2e_latency_s(0.5, 0.04, 800) == pytest.approx(0.015, abs=0.001)


def test_p99_needs_thousands_of_samples() -> None:
    # "P99 from 200 samples is set by the largest ~2 samples"; we ask for 10 beyond it.
    assert min_samples_for_percentile(99) == 1000
