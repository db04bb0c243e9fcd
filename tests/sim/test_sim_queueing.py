"""Queueing theory on the simulator: with one sequence at a time it is an M/M/1 server.

Setup: `max_num_seqs=1`, a 1-token prompt, every step (prefill or decode) takes exactly
`STEP_S`, output lengths exponential with mean `MEAN_TOKENS` (rounded to integers >= 1).
A request's service time is then its token count times STEP_S: exponential with mean
E[S] = STEP_S * E[N], with E[N] of the rounded lengths computed exactly below (rounding
changes E[N^2] / (2 E[N]^2), which is 1 for an exponential, by about 1/(24 E[N]^2) = 0.01%).
Poisson arrivals at rate lambda = rho / E[S] make it M/M/1, whose mean time in system is
W = 1 / (mu - lambda) (the seeds' chapter 3: W = service time / (1 - rho)).

Statistical precision: successive sojourn times are strongly correlated near saturation. A
Lindley-recursion study (not in this test) gave the relative standard error of the sample
mean: 1.3% at rho = 0.5 with 50,000 requests and 3.1% at rho = 0.8 with 100,000, so this test
runs 40,000 and 400,000 requests (about 1.5% and 1.6%) against a 5% bound.
"""

from __future__ import annotations

import numpy as np
import pytest

from ridgeline.perf.step_time import LinearStepTime
from ridgeline.sim.engine import EngineConfig
from ridgeline.sim.event_loop import Workload, simulate

STEP_S = 0.05
MEAN_TOKENS = 20.0


def _mm1(rho: float, n: int, seed: int):
    rng = np.random.default_rng(seed)
    tokens = np.clip(np.rint(rng.exponential(MEAN_TOKENS, n)), 1, None).astype(np.int64)
    # E[N] of the rounded, clipped exponential: sum_k k * P(N = k), in closed form enough
    k = np.arange(1, 40 * int(MEAN_TOKENS))
    cdf = 1 - np.exp(-(k + 0.5) / MEAN_TOKENS)
    pmf = np.diff(np.concatenate([[0.0], cdf]))
    mean_s = STEP_S * float((k * pmf).sum())
    lam = rho / mean_s
    arrivals = np.concatenate([[0.0], np.cumsum(rng.exponential(1 / lam, n - 1))])
    wl = Workload(prompt_tokens=np.ones(n, dtype=np.int64), output_tokens=tokens,
                  arrival_s=arrivals)
    res = simulate(wl, EngineConfig(max_num_seqs=1, max_num_batched_tokens=16,
                                    num_kv_blocks=1 << 16),
                   LinearStepTime(base_s=STEP_S))
    return res, lam, mean_s


def _check(rho: float, n: int, seed: int) -> None:
    res, lam, mean_s = _mm1(rho, n, seed)
    w_theory = 1.0 / (1.0 / mean_s - lam)
    w_sim = float(np.mean(res.end_s - res.sent_s))
    assert w_sim == pytest.approx(w_theory, rel=0.05)
    # Little's law on the trace, measured by the one metrics implementation.
    from ridgeline.metrics.analysis import analyze
    from ridgeline.trace.schema import TraceHeader

    result = analyze(res.to_trace(TraceHeader(source="simulate")), window="all")
    lt = result.little
    # Checked over the ARRIVAL window (first to last send), not first send to last end
    # where L = λW holds by arithmetic; the overload tests below show it can fail.
    assert lt.window_end_s == pytest.approx(float(res.sent_s.max()))
    assert lt.status == "consistent"
    assert lt.ratio == pytest.approx(1.0, abs=0.02)
    # and L itself: rho / (1 - rho) in the system on average, λ the arrival rate
    assert lt.l_in_flight == pytest.approx(rho / (1 - rho), rel=0.08)
    assert lt.lambda_req_s == pytest.approx(lam, rel=0.03)


def test_mm1_rho_half():
    _check(0.5, 40_000, seed=11)


@pytest.mark.slow
def test_mm1_rho_0_8():
    _check(0.8, 400_000, seed=12)


def test_mm1_overload_rho_3_is_reported_overloaded():
    # ρ = 3: arrivals at 3μ. Fluid limit over an arrival window of length T starting empty:
    # N(t) = (λ − μ) t, so L = (λ − μ) T / 2; an arrival at t waits N(t)/μ, so
    # W = (λ − μ) T / (2μ) and L/(λW) = μ/λ = 1/ρ. Departures run at μ the whole time.
    res, lam, mean_s = _mm1(3.0, 3000, seed=13)
    from ridgeline.metrics.analysis import analyze
    from ridgeline.trace.schema import TraceHeader

    for window in ("all", None):  # asked whole run, and the auto window (falls back)
        lt = analyze(res.to_trace(TraceHeader(source="simulate")), window=window).little
        assert lt.status == "overloaded" and lt.ok is False
        assert lt.lambda_req_s == pytest.approx(lam, rel=0.06)
        assert lt.completed_req_s == pytest.approx(1 / mean_s, rel=0.1)
        assert lt.ratio == pytest.approx(1 / 3, rel=0.15)
        assert "overloaded" in lt.note


def test_service_is_tokens_times_step():
    # Alone in the system, a request takes exactly N steps: the M/M/1 mapping above.
    res, _, _ = _mm1(0.01, 50, seed=1)
    e2e = res.end_s - res.sent_s
    one_at_a_time = np.diff(res.sent_s) > e2e[:-1] + STEP_S
    n = res.output_tokens[:-1][one_at_a_time]
    assert np.allclose(e2e[:-1][one_at_a_time], n * STEP_S, rtol=1e-9, atol=STEP_S)
