"""The memory-lean computations inside `analyze` equal the straightforward formulas they
replaced, bit for bit (chunked ITL samples, per-request token sums, one-copy sorting)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ridgeline.metrics.analysis as analysis
import ridgeline.metrics.per_request as per_request
from ridgeline.metrics.distribution import sorted_finite, std_into, summarize
from ridgeline.metrics.per_request import event_gaps, request_metrics
from ridgeline.theory.stats import (
    bootstrap_mean_draws,
    bootstrap_percentile_draws,
    ci_from_draws,
)
from ridgeline.trace.table import Trace


def random_trace(seed: int, n: int = 400) -> Trace:
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(n):
        k = int(rng.choice([0, 1, 2, 5, 30]))
        t0 = float(rng.uniform(0, 100))
        times = np.sort(t0 + rng.exponential(0.05, k)).tolist()
        rec = {"id": str(i), "sent_s": t0, "event_times_s": times,
               "status": "ok" if rng.random() > 0.1 else "error"}
        if rng.random() > 0.3:
            rec["event_tokens"] = rng.integers(0, 9, k).tolist()  # zeros: inf per token
        if rng.random() > 0.5:
            rec["output_tokens"] = int(rng.integers(0, 300))
        recs.append(rec)
    return Trace.from_records({"source": "test"}, recs)


@pytest.mark.parametrize("chunk", [3, 64, 1 << 22])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_itl_samples_equal_the_gap_formula(
    monkeypatch: pytest.MonkeyPatch, seed: int, chunk: int
) -> None:
    monkeypatch.setattr(analysis, "EVENT_CHUNK", chunk)
    t = random_trace(seed)
    pop = np.random.default_rng(seed + 10).random(len(t)) > 0.3
    # The formula analyze used before (event_gaps, then the selection by request).
    gaps, gap_counts = event_gaps(t)
    itl_s = gaps[np.repeat(pop, gap_counts)]
    later = np.ones(t.event_times_s.size, dtype=bool)
    later[t.event_offsets[:-1][t.event_counts > 0]] = False
    later &= np.repeat(pop, t.event_counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        tok = itl_s / t.event_tokens[later]
    tok = tok[np.isfinite(tok)]
    itl_ms, tok_ms = analysis._itl_samples(t, pop, per_token=True)
    assert itl_ms.tobytes() == (itl_s * 1e3).tobytes()
    assert tok_ms.tobytes() == (tok * 1e3).tobytes()
    assert analysis._itl_samples(t, pop, per_token=False)[1].size == 0


@pytest.mark.parametrize("chunk", [2, 50, 1 << 22])
def test_tokens_per_request_equal_the_cumsum_formula(
    monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(analysis, "EVENT_CHUNK", chunk)
    t = random_trace(3)
    ev_in = np.random.default_rng(4).random(t.event_times_s.size) > 0.4
    cum = np.zeros(t.event_tokens.size + 1, dtype=np.int64)
    np.cumsum(np.where(ev_in, t.event_tokens, 0), out=cum[1:])
    want = cum[t.event_offsets[1:]] - cum[t.event_offsets[:-1]]
    got = analysis._tokens_per_request(t, ev_in)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


def test_chunks_end_inside_the_last_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(analysis, "EVENT_CHUNK", 2)
    monkeypatch.setattr(per_request, "EVENT_CHUNK", 2)
    t = Trace.from_records({"source": "t"}, [
        {"id": "a", "sent_s": 0.0, "event_times_s": [0.1, 0.3, 0.35, 0.9, 1.0, 1.2]}])
    assert analysis._tokens_per_request(t, np.ones(6, dtype=bool)).tolist() == [6]
    assert request_metrics(t).itl_max_s.tolist() == [0.9 - 0.35]


@pytest.mark.parametrize("chunk", [2, 7, 1 << 22])
@pytest.mark.parametrize("seed", [6, 7])
def test_itl_max_equals_the_reduceat_formula(
    monkeypatch: pytest.MonkeyPatch, seed: int, chunk: int
) -> None:
    monkeypatch.setattr(per_request, "EVENT_CHUNK", chunk)
    t = random_trace(seed)
    t.event_times_s[::17] = np.nan  # NaN propagates the same way
    diffs = np.diff(t.event_times_s)
    boundary = t.event_offsets[1:-1] - 1
    diffs[boundary[(boundary >= 0) & (boundary < diffs.size)]] = -np.inf
    want = np.full(len(t), np.nan)
    multi = t.event_counts >= 2
    want[multi] = np.maximum.reduceat(diffs, t.event_offsets[:-1][multi])
    assert request_metrics(t).itl_max_s.tobytes() == want.tobytes()


@pytest.mark.parametrize("n", [1, 2, 3, 17, 1000, 100_003, 1_000_000])
def test_std_into_is_numpys_std(n: int) -> None:
    x = np.sort(np.random.default_rng(n).lognormal(2, 1.5, n)) * 1e3
    assert std_into(x, np.empty(n + 5)) == float(x.std())
    assert std_into(x + 1e9, np.empty(n)) == float((x + 1e9).std())


def test_sorted_finite_into_a_buffer() -> None:
    x = np.array([3.0, np.nan, -1.0, np.inf, 2.0, -np.inf, 0.5])
    buf = np.full(10, 7.0)
    xs = sorted_finite(x, out=buf)
    assert xs.tolist() == [-1.0, 0.5, 2.0, 3.0] and np.shares_memory(xs, buf)
    assert sorted_finite(x).tolist() == [-1.0, 0.5, 2.0, 3.0]
    assert np.isnan(x[1])  # the input is left as it was


def test_output_tokens_from_events_equal_the_cumsum_formula() -> None:
    t = random_trace(5)
    cum = np.zeros(t.event_tokens.size + 1, dtype=np.int64)
    np.cumsum(t.event_tokens, out=cum[1:])
    tok_sum = (cum[t.event_offsets[1:]] - cum[t.event_offsets[:-1]]).astype(np.float64)
    rm = request_metrics(t)
    from_events = (t.output_tokens < 0) & (t.event_counts > 0)
    assert from_events.any()
    assert rm.output_tokens[from_events].tolist() == tok_sum[from_events].tolist()


def old_summarize(values: np.ndarray, seed: int, stream: int) -> dict:
    """`summarize` as it was: filter, np.sort, statistics on the sorted copy."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    rng = np.random.default_rng([seed, stream])
    xs = np.sort(x)
    out = {"mean": float(xs.mean()), "std": float(xs.std()), "min": float(xs[0]),
           "max": float(xs[-1]), "mean_ci": ci_from_draws(bootstrap_mean_draws(xs, 2000, rng))}
    for q in (50.0, 90.0, 95.0, 99.0, 99.9):
        h = (xs.size - 1) * q / 100.0
        lo = math.floor(h)
        hi = min(lo + 1, xs.size - 1)
        out[q] = (float(xs[lo] + (h - lo) * (xs[hi] - xs[lo])),
                  ci_from_draws(bootstrap_percentile_draws(xs, q, 2000, rng)))
    return out


@pytest.mark.parametrize("n", [7, 5_000, 60_000])
def test_summarize_equals_the_sort_copy_version(n: int) -> None:
    rng = np.random.default_rng(n)
    x = rng.lognormal(3, 1, n)
    x[::11] = np.nan
    x[::13] = np.inf
    want = old_summarize(x, seed=2, stream=3)
    d = summarize("x", "X", x, unit="ms", seed=2, stream=3)
    assert (d.mean, d.std, d.min, d.max, d.mean_ci) == (
        want["mean"], want["std"], want["min"], want["max"], want["mean_ci"])
    for q in (50.0, 90.0, 95.0, 99.0, 99.9):
        p = next(p for p in d.percentiles.values() if p.q == q)
        assert (p.value, (p.ci_low, p.ci_high)) == want[q]
    assert not np.isfinite(x).all()  # the input is left as it was


@pytest.mark.parametrize("cpus", [1, 2, 3, 4, 8])
def test_sort_in_place_is_numpy_sort_bit_for_bit(monkeypatch, cpus: int) -> None:
    """The parallel sort (a partition at the parts' edges, the parts sorted in threads)
    leaves exactly what ``ndarray.sort`` leaves: ties, NaNs (sorted last) and sizes that do
    not divide by the part count included."""
    from ridgeline.metrics import distribution

    monkeypatch.setattr(distribution, "PARALLEL_SORT_MIN", 1000)
    monkeypatch.setattr(distribution, "_usable_cpus", lambda: cpus)
    rng = np.random.default_rng(cpus)
    for n in (999, 1000, 4001, 50_003):
        x = np.round(rng.lognormal(2.0, 1.0, n), 1)   # many ties
        x[rng.integers(0, n, n // 50)] = np.nan
        want = np.sort(x)
        got = x.copy()
        distribution.sort_in_place(got)
        assert np.array_equal(got.view(np.int64), want.view(np.int64)), (cpus, n)


def test_sort_repeats_is_numpy_sort_bit_for_bit(monkeypatch) -> None:
    """Counting the distinct values (the compiled `sort_repeats`) leaves exactly what
    ``ndarray.sort`` leaves, and `sort_in_place` takes that path on a sample of few
    distinct values: negatives, +0.0, infinities, subnormals and huge values included."""
    from ridgeline.metrics import _kernels, distribution

    rng = np.random.default_rng(7)
    steps = np.concatenate([rng.lognormal(2.0, 1.0, 3000), -rng.lognormal(0, 1, 50),
                            [0.0, np.inf, -np.inf, 5e-324, 1e308, -1e308]])
    for n in (1, 2, 10_000, 300_001):
        x = steps[rng.integers(0, steps.size, n)]
        want = np.sort(x)
        got = x.copy()
        assert _kernels.sort_repeats(got, n)
        assert np.array_equal(got.view(np.int64), want.view(np.int64)), n
    monkeypatch.setattr(distribution, "REPEATS_SORT_MIN", 1000)
    calls: list[bool] = []
    real = distribution._sort_repeats
    monkeypatch.setattr(distribution, "_sort_repeats", lambda xs: calls.append(real(xs))
                        or calls[-1])
    x = steps[rng.integers(0, steps.size, 200_000)]
    got = x.copy()
    distribution.sort_in_place(got)
    assert calls == [True]
    assert np.array_equal(got.view(np.int64), np.sort(x).view(np.int64))


@pytest.mark.parametrize("case", ["nan", "negative zero", "distinct", "over the cap"])
def test_sort_repeats_declines_and_leaves_the_values(case: str) -> None:
    """Where counting could differ from ``ndarray.sort`` (NaN; -0.0 beside +0.0 compare
    equal) or would not pay (mostly distinct values; more than max_distinct), the kernel
    returns False with the array as it was, and `sort_in_place` still sorts it."""
    from ridgeline.metrics import _kernels, distribution

    rng = np.random.default_rng(3)
    n = 100_000
    x = np.round(rng.lognormal(2.0, 1.0, n), 1)
    cap = n
    if case == "nan":
        x[n // 2] = np.nan
    elif case == "negative zero":
        x[n // 3] = -0.0
        x[n // 2] = 0.0
    elif case == "distinct":
        x = rng.lognormal(2.0, 1.0, n)
    else:
        cap = int(np.unique(x).size) - 1
    before = x.copy()
    assert not _kernels.sort_repeats(x, cap)
    assert np.array_equal(x.view(np.int64), before.view(np.int64))
    distribution.sort_in_place(x)
    assert np.array_equal(x.view(np.int64), np.sort(before).view(np.int64))
