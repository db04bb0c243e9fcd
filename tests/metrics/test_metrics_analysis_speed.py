"""The faster block bootstrap of `analyze` gives the numbers of the straightforward
code it replaced, bit for bit: per-request counts at or below several thresholds in one pass,
per-sample caching of the sums that do not depend on the draws, the chunked standard
deviation, and a pooled sample sorted outright instead of selected."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ridgeline.metrics.analysis import analyze
from ridgeline.metrics.distribution import STD_LEAF, std_into, summarize_sorted
from ridgeline.metrics.select import select_finite
from ridgeline.theory.stats import (
    COUNT_CHUNK,
    RequestSample,
    _circular_block_sums,
    _counts_at_most,
    block_bootstrap_variance,
    block_length,
    block_ratio_draws,
    ci_from_draws,
    request_bootstrap_draws,
)
from ridgeline.trace.table import Trace

STATS = ("mean", "p50", "p90", "p95", "p99", "p99.9")


def reference_sums(sample: RequestSample, x: np.ndarray) -> np.ndarray:
    """`RequestSample.sums` as it was: one reduceat per call."""
    if sample.counts.size == x.size:
        return x[sample.order].astype(np.float64)
    starts = np.concatenate(([0], np.cumsum(sample.counts)[:-1]))
    dtype = np.int64 if x.dtype == np.bool_ else np.float64
    return np.add.reduceat(x, starts, dtype=dtype)[sample.order].astype(np.float64)


def reference_block_ratio_draws(
    num: np.ndarray, den: np.ndarray, block: float, n_draws: int, rng: np.random.Generator,
) -> np.ndarray:
    """`block_ratio_draws` as it was (the resampled denominator always gathered)."""
    n = int(num.size)
    ratio = float(num.sum() / den.sum())
    if n < 2:
        return np.full(n_draws, ratio)
    b = max(1, min(n, round(block)))
    k = math.ceil(n / b)
    if k * n_draws > 20_000_000:
        e = num - ratio * den
        sd = math.sqrt(n * block_bootstrap_variance(e, b)) / float(den.sum())
        return ratio + sd * rng.standard_normal(n_draws)
    bn = num if b == 1 else _circular_block_sums(num, b)
    bd = den if b == 1 else _circular_block_sums(den, b)
    out = np.empty(n_draws)
    rows = max(1, 4_000_000 // k)
    for start in range(0, n_draws, rows):
        stop = min(n_draws, start + rows)
        idx = rng.integers(0, n, size=(stop - start, k))
        out[start:stop] = bn[idx].sum(axis=1) / bd[idx].sum(axis=1)
    return out


def reference_request_bootstrap_draws(
    sample: RequestSample, sorted_x: np.ndarray, stats: tuple[str, ...], n_draws: int,
    rng: np.random.Generator,
) -> tuple[float, dict[str, np.ndarray]]:
    """The straightforward implementation (before the faster one), kept as the reference."""
    out: dict[str, np.ndarray] = {}
    n_val = sorted_x.size
    if n_val == 0:
        return 1.0, {s: np.full(n_draws, np.nan) for s in stats}
    den = sample.counts[sample.order].astype(np.float64)
    num = reference_sums(sample, sample.values)
    mean = float(num.sum() / den.sum())
    block = block_length(num - mean * den)
    for s in stats:
        if s == "mean":
            out[s] = reference_block_ratio_draws(num, den, block, n_draws, rng)
            continue
        p = float(s[1:]) / 100.0
        h = (n_val - 1) * p
        lo = math.floor(h)
        xi = float(sorted_x[lo] + (h - lo) * (sorted_x[min(lo + 1, n_val - 1)] - sorted_x[lo]))
        below = reference_sums(sample, sample.values <= xi)
        f_hat = float(below.sum() / n_val)
        f_star = reference_block_ratio_draws(below, den, block, n_draws, rng)
        level = np.clip(p - (f_star - f_hat), 0.0, 1.0)
        hh = (n_val - 1) * level
        i0 = np.floor(hh).astype(np.int64)
        i1 = np.minimum(i0 + 1, n_val - 1)
        out[s] = sorted_x[i0] + (hh - i0) * (sorted_x[i1] - sorted_x[i0])
    return block, out


def pooled_sample(seed: int, n_req: int, max_per_req: int, discrete: bool = False,
                  correlated: bool = False) -> RequestSample:
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, max_per_req + 1, n_req)
    level = rng.lognormal(0.0, 0.5, n_req)
    if correlated:  # neighbours in send order alike: long blocks
        level = np.convolve(level, np.ones(50) / 50, "same")
    values = np.repeat(level, counts) * rng.lognormal(0.0, 0.3, int(counts.sum()))
    if discrete:  # many ties, also at the percentiles
        values = np.round(values * 4) / 4
    order = np.argsort(rng.permutation(n_req), kind="stable")
    return RequestSample(values, counts.astype(np.int64), order)


@pytest.mark.parametrize(("seed", "n_req", "max_per_req", "discrete", "correlated"), [
    (0, 1, 1, False, False),          # one value
    (1, 1, 7, False, False),          # one request
    (2, 3, 3, True, False),           # tiny, ties
    (3, 50, 9, False, True),
    (4, 400, 40, True, False),
    (5, 2000, 30, False, True),       # block resampling (few blocks)
    (6, 30_000, 3, False, False),     # normal limit of the block draws
])
def test_request_bootstrap_draws_equal_the_reference(
    seed: int, n_req: int, max_per_req: int, discrete: bool, correlated: bool,
) -> None:
    smp = pooled_sample(seed, n_req, max_per_req, discrete, correlated)
    xs = np.sort(smp.values)
    b_ref, ref = reference_request_bootstrap_draws(smp, xs, STATS, 500,
                                                   np.random.default_rng(seed))
    b_new, new = request_bootstrap_draws(smp, xs, STATS, 500, np.random.default_rng(seed))
    assert b_new == b_ref
    for s in STATS:
        assert new[s].tobytes() == ref[s].tobytes(), s
    # Again on the same (now cached) sample, with another stream: the cache changes nothing.
    _, ref2 = reference_request_bootstrap_draws(smp, xs, STATS, 300, np.random.default_rng(9))
    _, new2 = request_bootstrap_draws(smp, xs, STATS[::-1], 300, np.random.default_rng(9))
    _, new3 = request_bootstrap_draws(smp, xs, STATS, 300, np.random.default_rng(9))
    for s in STATS:
        assert new3[s].tobytes() == ref2[s].tobytes(), s
    assert set(new2) == set(STATS)


def test_per_request_sample_equals_the_reference() -> None:
    rng = np.random.default_rng(11)
    x = rng.lognormal(size=5000)
    x[rng.random(5000) < 0.05] = np.nan
    smp = RequestSample.per_request(x, rng.uniform(0, 100, 5000))
    xs = np.sort(smp.values)
    _, ref = reference_request_bootstrap_draws(smp, xs, STATS, 400, np.random.default_rng(1))
    _, new = request_bootstrap_draws(smp, xs, STATS, 400, np.random.default_rng(1))
    for s in STATS:
        assert new[s].tobytes() == ref[s].tobytes(), s


@pytest.mark.parametrize(("n", "block"), [(1, 1.0), (2, 1.0), (500, 1.0), (500, 7.4),
                                          (5000, 40.0), (5000, 1.0), (4999, 499.6)])
def test_block_ratio_draws_of_one_value_per_unit_equal_the_reference(n: int, block: float
                                                                     ) -> None:
    rng = np.random.default_rng(n)
    num = rng.lognormal(size=n)
    for den in (np.ones(n), rng.integers(1, 5, n).astype(np.float64)):
        want = reference_block_ratio_draws(num, den, block, 700, np.random.default_rng(3))
        got = block_ratio_draws(num, den, block, 700, np.random.default_rng(3))
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("n", [0, 1, 5, 8, 9, 64, 1000, COUNT_CHUNK - 3, COUNT_CHUNK,
                               COUNT_CHUNK + 1, 3 * COUNT_CHUNK + 13])
def test_counts_at_most_equal_reduceat(n: int) -> None:
    rng = np.random.default_rng(n)
    values = np.round(rng.lognormal(size=n), 2)
    # Segments of 1..40 values (some long ones across chunk edges), covering all values.
    counts = []
    left = n
    while left > 0:
        c = int(min(left, rng.choice([1, 2, 7, 8, 9, 40, 5000])))
        counts.append(c)
        left -= c
    bounds = np.concatenate(([0], np.cumsum(counts, dtype=np.int64))).astype(np.int64)
    qs = [0, 50, 90, 99.9, 100] if n else []
    thresholds = sorted({-math.inf, math.inf, 1.0, *(float(np.percentile(values, q))
                                                     for q in qs)})
    got = _counts_at_most(values, bounds, thresholds)
    for t, g in zip(thresholds, got, strict=True):
        want = (np.add.reduceat(values <= t, bounds[:-1], dtype=np.int64) if counts
                else np.zeros(0, dtype=np.int64))
        np.testing.assert_array_equal(g, want)
        assert g.dtype == np.int64


@pytest.mark.parametrize("n", [1, 7, STD_LEAF - 1, STD_LEAF, STD_LEAF + 1, 2 * STD_LEAF + 9,
                               1_000_003, 3_000_000])
def test_chunked_std_is_numpys_std(n: int) -> None:
    x = np.random.default_rng(n).lognormal(2, 1.5, n) * 1e3
    assert std_into(x) == float(x.std())
    assert std_into(x, np.empty(STD_LEAF)) == float(x.std())
    xs = np.sort(x) + 1e9
    assert std_into(xs) == float(xs.std())


def test_shared_sample_gives_the_same_cis_as_separate_samples() -> None:
    # Two metrics on one RequestSample object (pooled ITL per event and per token): the
    # second reuses the cached sums and must give what a fresh sample gives.
    smp = pooled_sample(21, 3000, 20, correlated=True)
    xs = np.sort(smp.values)
    a1 = summarize_sorted("a", "a", xs, unit="ms", stream=2, requests=smp)
    b1 = summarize_sorted("b", "b", xs, unit="ms", stream=3, requests=smp)
    fresh = RequestSample(smp.values, smp.counts, smp.order)
    b2 = summarize_sorted("b", "b", xs, unit="ms", stream=3, requests=fresh)
    assert b1.to_dict() == b2.to_dict()
    assert a1.block_requests == b1.block_requests


def sim_like_trace(seed: int, n: int, tokens_per_event: int = 1) -> Trace:
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(n):
        t0 = i * 0.05
        k = int(rng.integers(1, 60))
        times = (t0 + 0.1 + np.cumsum(rng.exponential(0.02, k))).tolist()
        recs.append({"id": str(i), "sent_s": t0, "scheduled_s": t0, "event_times_s": times,
                     "event_tokens": [tokens_per_event] * k, "end_s": times[-1],
                     "output_tokens": k * tokens_per_event, "prompt_tokens": 100})
    return Trace.from_records({"source": "test"}, recs)


@pytest.mark.parametrize("tokens_per_event", [1, 3])
def test_analyze_pooled_itl_cis_equal_the_reference(tokens_per_event: int) -> None:
    t = sim_like_trace(5, 1500, tokens_per_event)
    r = analyze(t, seed=3)
    # Streams as in `analyze`: the metric's index in its list of latency metrics.
    for stream, key in enumerate(["ttft_ms", "tpot_ms", "itl_ms", "itl_per_token_ms"]):
        d = r.latency[key]
        smp = r.request_samples[key]
        xs = np.sort(smp.values)
        rng = np.random.default_rng([3, stream])  # nothing is drawn before the block draws
        fresh = RequestSample(smp.values, smp.counts, smp.order)
        block, draws = reference_request_bootstrap_draws(fresh, xs, STATS, 2000, rng)
        assert d.block_requests == block, key
        assert d.mean_ci == ci_from_draws(draws["mean"]), key
        for s in STATS[1:]:
            p = d.percentiles[s]
            assert (p.ci_low, p.ci_high) == ci_from_draws(draws[s]), (key, s)
        assert d.mean == float(xs.mean()), key   # a pooled sample is sorted outright
        assert d.std == float(xs.std()), key


def test_selected_and_sorted_pooled_samples_agree() -> None:
    # The selection path (per-request metrics of large runs) and a full sort give the same
    # summary for a pooled sample too.
    smp = pooled_sample(8, 5000, 30, correlated=True)
    a = summarize_sorted("v", "v", select_finite(smp.values), unit="ms", requests=smp)
    b = summarize_sorted("v", "v", np.sort(smp.values), unit="ms",
                         requests=RequestSample(smp.values, smp.counts, smp.order))
    for k, p in b.percentiles.items():
        q = a.percentiles[k]
        assert (q.value, q.ci_low, q.ci_high) == (p.value, p.ci_low, p.ci_high), k


@pytest.mark.parametrize("n", [2, 3, 1000, (1 << 16) + 1, 300_001])
def test_backward_events_equal_the_diff_formula(n: int) -> None:
    from ridgeline.metrics.per_request import _backward_events

    rng = np.random.default_rng(n)
    times = np.cumsum(rng.normal(0.0, 1.0, n))
    times[rng.random(n) < 0.01] = np.nan
    want = np.flatnonzero(np.diff(times) < -0.5) + 1
    np.testing.assert_array_equal(_backward_events(times, 0.5), want)


def test_check_times_still_finds_backward_events() -> None:
    from ridgeline.errors import RidgelineError

    recs = [{"id": str(i), "sent_s": 0.0, "event_times_s": [1.0, 2.0, 3.0], "end_s": 3.0,
             "output_tokens": 3} for i in range(5)]
    analyze(Trace.from_records({"source": "t"}, recs))    # backwards only across requests
    recs[3]["event_times_s"] = [1.0, 2.5, 2.0]
    with pytest.raises(RidgelineError, match=r"'3'.*go backwards"):
        analyze(Trace.from_records({"source": "t"}, recs))


def test_finite_copy_drops_every_non_finite_value() -> None:
    from ridgeline.metrics.distribution import finite_copy

    rng = np.random.default_rng(4)
    for bad in (np.nan, np.inf, -np.inf, None):
        x = rng.lognormal(size=1001)
        if bad is not None:
            x[[3, 500]] = bad
        want = x[np.isfinite(x)]
        np.testing.assert_array_equal(finite_copy(x), want)
        np.testing.assert_array_equal(finite_copy(x, out=np.empty(2000)), want)
    big = np.array([1e308, 1e308, -1.0])     # the sum overflows: still all kept
    np.testing.assert_array_equal(finite_copy(big), big)
    assert finite_copy(np.zeros(0)).size == 0


@pytest.mark.parametrize("chunk", [2, 50, 1 << 22])
def test_tokens_per_request_in_a_window_equal_the_mask_version(
    monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    import ridgeline.metrics.analysis as analysis

    monkeypatch.setattr(analysis, "EVENT_CHUNK", chunk)
    t = sim_like_trace(7, 300, tokens_per_event=2)
    for start, end in ((0.0, 100.0), (3.0, 9.5), (20.0, 20.0)):
        w = analysis.Window(start, end, "given")
        want = analysis._tokens_per_request(t, analysis._in_window_closed(t.event_times_s, w))
        got = analysis._tokens_per_request(t, window=w)
        assert got.dtype == want.dtype and got.tolist() == want.tolist()
    # one token per event (a simulated trace): the count of events inside, by hand
    t = sim_like_trace(8, 300, tokens_per_event=1)
    for start, end in ((0.0, 100.0), (3.0, 9.5), (20.0, 20.0)):
        w = analysis.Window(start, end, "given")
        by_hand = [sum(1 for x in t.event_times_s[lo:hi].tolist() if start <= x <= end)
                   for lo, hi in zip(t.event_offsets[:-1].tolist(), t.event_offsets[1:].tolist(),
                                     strict=True)]
        got = analysis._tokens_per_request(t, window=w, one_token=True)
        assert got.tolist() == by_hand and (sum(by_hand) > 0 or start == end)
        assert analysis._tokens_per_request(t, window=w).tolist() == by_hand
