"""Serving math from the seeds: Amdahl, Little, M/M/1, M/M/c (Erlang C), fan-out, E2E.

Every function is closed form, accepts numpy arrays (broadcasting) where it makes sense,
and carries its units in the names. The docstring examples are the seeds' worked
examples.

>>> round(amdahl_speedup(0.3, 2), 2), round(amdahl_speedup(0.3, 100), 2)
(1.18, 1.42)
>>> little_in_system(20, 8)
160
>>> round(fanout_tail_probability(0.99, 10), 3)
0.096
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ridgeline.errors import RidgelineError

KB_BYTES = 1000  # the seeds' "56 KB per token × 4000 ≈ 229 MB" works with decimal KB


# ---- Amdahl -----------------------------------------------------------------------------------
def amdahl_speedup(fraction: float, speedup: float) -> float:
    """Overall speedup when a part taking `fraction` of the time gets `speedup`× faster:
    1 / ((1 − f) + f / s). Bounded by 1 / (1 − f) as s → ∞.

    >>> round(amdahl_speedup(0.8, 2), 2)
    1.67
    """
    if not 0.0 <= fraction <= 1.0:
        raise RidgelineError(f"fraction: got {fraction}; allowed: 0..1")
    if speedup <= 0:
        raise RidgelineError(f"speedup: got {speedup}; allowed: > 0")
    return 1.0 / ((1.0 - fraction) + fraction / speedup)


def amdahl_limit(fraction: float) -> float:
    """The ceiling 1 / (1 − f) (infinite when f = 1)."""
    return math.inf if fraction >= 1.0 else 1.0 / (1.0 - fraction)


# ---- Little -----------------------------------------------------------------------------------
def little_in_system(arrival_rate_req_s: float, time_in_system_s: float) -> float:
    """L = λ · W: mean number of requests in the system (any distribution, stable system).

    >>> little_in_system(50, 6)
    300
    """
    return arrival_rate_req_s * time_in_system_s


def little_kv_bytes(
    arrival_rate_req_s: float,
    time_in_system_s: float,
    mean_context_tokens: float,
    kv_bytes_per_token: float,
) -> float:
    """Mean KV-cache bytes in use: λ × W × mean context × KV bytes per token.

    The seeds' example: 50 req/s, 6 s, 4000 tokens, 56 KB/token (decimal, 56,000 B) ≈ 67 GB;
    with Qwen2.5-7B's exact 57,344 B/token (28 layers × 2 × 4 KV heads × 128 × 2 B) it
    is 68.8 GB, the seeds' "about 69 GB".

    >>> round(little_kv_bytes(50, 6, 4000, 57_344) / 1e9, 1)
    68.8
    """
    return arrival_rate_req_s * time_in_system_s * mean_context_tokens * kv_bytes_per_token


# ---- M/M/1 ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QueueResult:
    """Steady-state results of a queue. Times in seconds."""

    utilization: float
    mean_time_in_system_s: float
    mean_wait_s: float
    mean_in_system: float
    mean_in_queue: float
    prob_wait: float  # probability an arrival has to queue

    def stay_over_service(self, service_rate_req_s: float) -> float:
        """Mean time in system as a multiple of the mean service time 1/μ."""
        return self.mean_time_in_system_s * service_rate_req_s


def _check_rates(arrival_rate_req_s: float, service_rate_req_s: float, servers: int = 1) -> None:
    if arrival_rate_req_s < 0 or service_rate_req_s <= 0 or servers < 1:
        raise RidgelineError("--arrival-rate/--service-rate: arrival >= 0 and service > 0 "
                             "req/s, servers >= 1")
    if arrival_rate_req_s >= servers * service_rate_req_s:
        raise RidgelineError(
            "--arrival-rate: utilization λ/(cμ) = "
            f"{arrival_rate_req_s / (servers * service_rate_req_s):.3f}; allowed: < 1 (at or "
            "above 1 the queue grows without bound)"
        )


def mm1(arrival_rate_req_s: float, service_rate_req_s: float) -> QueueResult:
    """M/M/1: W = 1/(μ − λ), Wq = ρ/(μ − λ), L = ρ/(1 − ρ).

    >>> r = mm1(8, 10)
    >>> round(r.mean_time_in_system_s, 3), round(r.stay_over_service(10), 1)
    (0.5, 5.0)
    """
    _check_rates(arrival_rate_req_s, service_rate_req_s)
    lam, mu = arrival_rate_req_s, service_rate_req_s
    rho = lam / mu
    w = 1.0 / (mu - lam)
    wq = rho / (mu - lam)
    return QueueResult(rho, w, wq, lam * w, lam * wq, rho)


def mm1_time_in_system_percentile_s(
    arrival_rate_req_s: float, service_rate_req_s: float, q: float
) -> float:
    """q-th percentile (0..100) of M/M/1 FCFS time in system: exponential with rate μ − λ.

    >>> round(mm1_time_in_system_percentile_s(9.5, 10, 99), 2)
    9.21
    """
    _check_rates(arrival_rate_req_s, service_rate_req_s)
    p = q / 100.0
    return -math.log(1.0 - p) / (service_rate_req_s - arrival_rate_req_s)


def mm1_wait_percentile_s(arrival_rate_req_s: float, service_rate_req_s: float, q: float) -> float:
    """q-th percentile of M/M/1 FCFS waiting time in the queue.

    P(Wq > t) = ρ · exp(−(μ − λ) t): zero below the (1 − ρ) quantile (no wait at all).
    """
    _check_rates(arrival_rate_req_s, service_rate_req_s)
    rho = arrival_rate_req_s / service_rate_req_s
    tail = 1.0 - q / 100.0
    if tail >= rho:
        return 0.0
    return math.log(rho / tail) / (service_rate_req_s - arrival_rate_req_s)


# ---- M/M/c ------------------------------------------------------------------------------------
MAX_OFFERED_LOAD_ERLANGS = 1e10


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability that an arrival waits in M/M/c, with offered load a = λ/μ (Erlangs).

    C = 1 / (ρ + (1 − ρ)·R) with R = 1/B the inverse Erlang B, ρ = a/c, and
    R = Σ_{j=0..c} c!/(j!·a^(c−j)), summed in log space. Only terms with |j − a| <= 40√a + 40
    matter (the others are below e^-800 of the largest), so the cost is O(√a), not O(c):
    `theory mmc -c 1000000000` is instant.

    >>> round(erlang_c(1, 0.8), 3)   # M/M/1: P(wait) = ρ
    0.8
    """
    if servers < 1 or not offered_load >= 0 or math.isinf(offered_load):
        raise RidgelineError("erlang_c: servers >= 1 and a finite offered load >= 0")
    c, a = int(servers), float(offered_load)
    rho = a / c
    if rho >= 1:
        return 1.0
    if a == 0:
        return 0.0
    if a > MAX_OFFERED_LOAD_ERLANGS:
        raise RidgelineError(f"offered load λ/μ: got {a:.3g} Erlangs; allowed: at most "
                             f"{MAX_OFFERED_LOAD_ERLANGS:.0e}")
    spread = 40.0 * math.sqrt(a) + 40.0
    lo = max(0, math.floor(a - spread))
    hi = min(c, math.ceil(a + spread))
    # log of the j = hi term: Σ_{i=hi+1..c} log(i/a); terms j in [lo, hi] add Σ_{i=j+1..hi}.
    log_top = (math.lgamma(c + 1) - math.lgamma(hi + 1) - (c - hi) * math.log(a)
               if hi < c else 0.0)
    steps = np.log(np.arange(lo + 1, hi + 1, dtype=np.float64) / a)
    log_terms = np.append(np.cumsum(steps[::-1])[::-1], 0.0)
    peak = float(log_terms.max())
    log_r = log_top + peak + math.log(float(np.exp(log_terms - peak).sum()))
    if log_r > 700:  # R overflows: nobody waits, to double precision
        return 0.0
    return 1.0 / (rho + (1.0 - rho) * math.exp(log_r))


def mmc(arrival_rate_req_s: float, service_rate_req_s: float, servers: int) -> QueueResult:
    """M/M/c (c identical replicas, one shared FCFS queue): Wq = C(c, a) / (cμ − λ).

    >>> r = mmc(8, 10, 1)
    >>> round(r.mean_time_in_system_s, 3)
    0.5
    """
    _check_rates(arrival_rate_req_s, service_rate_req_s, servers)
    lam, mu, c = arrival_rate_req_s, service_rate_req_s, servers
    a = lam / mu
    pw = erlang_c(c, a)
    wq = pw / (c * mu - lam)
    w = wq + 1.0 / mu
    return QueueResult(a / c, w, wq, lam * w, lam * wq, pw)


def mmc_wait_percentile_s(
    arrival_rate_req_s: float, service_rate_req_s: float, servers: int, q: float
) -> float:
    """q-th percentile of M/M/c waiting time: P(Wq > t) = C · exp(−(cμ − λ) t)."""
    _check_rates(arrival_rate_req_s, service_rate_req_s, servers)
    pw = erlang_c(servers, arrival_rate_req_s / service_rate_req_s)
    tail = 1.0 - q / 100.0
    if tail >= pw:
        return 0.0
    return math.log(pw / tail) / (servers * service_rate_req_s - arrival_rate_req_s)


def replicas_for_wait(
    arrival_rate_req_s: float, service_rate_req_s: float, max_mean_wait_s: float,
    max_servers: int = 10_000,
) -> int:
    """Fewest replicas whose M/M/c mean queueing wait is at most `max_mean_wait_s`."""
    c = max(1, math.floor(arrival_rate_req_s / service_rate_req_s) + 1)
    while c <= max_servers:
        if mmc(arrival_rate_req_s, service_rate_req_s, c).mean_wait_s <= max_mean_wait_s:
            return c
        c += 1
    raise RidgelineError(f"no replica count up to {max_servers} meets the wait bound")


# ---- fan-out tail amplification ----------------------------------------------------------------
def fanout_tail_probability(per_call_quantile: float, calls: int) -> float:
    """Probability that at least one of `calls` parallel calls exceeds the per-call
    quantile (given as a fraction, e.g. 0.99): 1 − q^k.
    """
    return 1.0 - per_call_quantile**calls


def fanout_page_quantile(per_call_quantile: float, calls: int) -> float:
    """The page-level quantile that a per-call quantile becomes: q^k.

    >>> round(fanout_page_quantile(0.99, 10), 3)   # a call's P99 is the page's ~P90
    0.904
    """
    return per_call_quantile**calls


def fanout_call_quantile_for_page(page_quantile: float, calls: int) -> float:
    """Which per-call quantile the page quantile needs: q^(1/k).

    >>> round(fanout_call_quantile_for_page(0.99, 10) * 100, 2)   # page P99 ≈ call P99.9
    99.9
    """
    return page_quantile ** (1.0 / calls)


def fanout_page_percentile_from_samples(
    call_latencies: np.ndarray, calls: int, q: float
) -> float:
    """Page-level q-th percentile when a page waits for the slowest of `calls` independent
    calls drawn from `call_latencies`' distribution: the call distribution's
    q'-th percentile with q' = (q/100)^(1/k)."""
    qq = fanout_call_quantile_for_page(q / 100.0, calls) * 100.0
    return float(np.percentile(np.asarray(call_latencies), qq, method="linear"))


# ---- request latency --------------------------------------------------------------------------
def e2e_latency_s(ttft_s: float, tpot_s: float, output_tokens: int) -> float:
    """E2E = TTFT + TPOT × (N − 1).

    >>> round(e2e_latency_s(0.5, 0.04, 20) * 1000), round(e2e_latency_s(0.5, 0.04, 800) * 1000)
    (1260, 32460)
    """
    return ttft_s + tpot_s * max(output_tokens - 1, 0)
