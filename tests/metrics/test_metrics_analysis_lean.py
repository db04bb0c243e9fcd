"""`analyze(keep_samples=False)` (what `ridgeline analyze` runs: the pooled ITL samples
sorted where they lie, their per-request counts worked out again from the event times)
gives every number of `analyze(keep_samples=True)` bit for bit, on real traces; and the
compiled count kernel equals the numpy counts it replaces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ridgeline.metrics.analysis as analysis
from ridgeline.metrics.analysis import (
    _grouped_sample,
    _itl_into,
    _itl_samples,
    _Regroup,
    analyze,
)
from ridgeline.theory.stats import _counts_at_most
from ridgeline.trace.reader import read_trace
from ridgeline.trace.table import Trace
from tests.bench_shaped_trace import write_trace

EXE = Path(sys.executable).parent / "ridgeline"


@pytest.fixture(scope="module")
def sim_trace(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    """A real `simulate` trace: one token per event."""
    p = tmp_path_factory.mktemp("sim") / "sim.jsonl"
    proc = subprocess.run([str(EXE), "simulate", "--requests", "4000", "--rate", "25",
                           "--prompt", "lognormal:mean=800,sigma=0.8",
                           "--output", "lognormal:mean=80,sigma=0.8", "--trace", str(p)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return read_trace(p)


@pytest.fixture(scope="module")
def bench_trace(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    """benchmarks/speed/bench_analyze.py's shape (8-token chunks, 1% errors), plus requests with
    a zero-token event (a non-finite per-token gap, dropped) and a single event."""
    p = tmp_path_factory.mktemp("bench") / "bench.jsonl"
    write_trace(p, 6000, seed=5)
    lines = p.read_text().splitlines()
    extra = [
        {"type": "request", "id": "z0", "sent_s": 10.0, "event_times_s": [10.2, 10.3, 10.3],
         "event_tokens": [1, 0, 0], "end_s": 10.3, "output_tokens": 1},
        {"type": "request", "id": "z1", "sent_s": 11.0, "event_times_s": [11.2, 11.4],
         "event_tokens": [1, 4], "end_s": 11.4},
        {"type": "request", "id": "one", "sent_s": 12.0, "event_times_s": [12.5],
         "end_s": 12.5, "output_tokens": 1},
    ]
    p.write_text("\n".join(lines[:-1] + [json.dumps(e) for e in extra] + lines[-1:]) + "\n")
    return read_trace(p)


@pytest.mark.parametrize("which", ["sim_trace", "bench_trace"])
@pytest.mark.parametrize("window", [None, "all"])
def test_lean_analysis_equals_kept_samples(request: pytest.FixtureRequest, which: str,
                                           window: str | None) -> None:
    trace = request.getfixturevalue(which)
    slos = ["ttft_ms:500", "tpot_ms:50"]
    kept = analyze(trace, slos=slos, window=window, seed=3)
    lean = analyze(trace, slos=slos, window=window, seed=3, keep_samples=False)
    assert json.dumps(kept.to_dict()) == json.dumps(lean.to_dict())
    assert kept.latency["itl_ms"].count > 1000 and "itl_ms" not in lean.samples
    assert lean.latency["itl_ms"].block_requests is not None


@pytest.mark.parametrize("which", ["sim_trace", "bench_trace"])
@pytest.mark.parametrize("per_token", [False, True])
def test_count_kernel_equals_numpy(request: pytest.FixtureRequest, monkeypatch:
                                   pytest.MonkeyPatch, which: str, per_token: bool) -> None:
    trace = request.getfixturevalue(which)
    pop = trace.status == 0
    gaps = np.maximum(trace.event_counts[pop] - 1, 0)
    vals = _itl_into(trace, pop, per_token, np.empty(int(gaps.sum())))
    rs, idx = _grouped_sample(vals, gaps, None)
    bounds = np.zeros(rs.counts.size + 1, dtype=np.int64)
    np.cumsum(rs.counts, out=bounds[1:])
    xs = np.sort(rs.values)
    # Thresholds on sample values (ties: <= counts them) and between them.
    # More than the kernel's 8 counters per pass: two passes.
    thresholds = [float(xs[0]), float(xs[xs.size // 2]), float(np.nextafter(xs[-7], 0)),
                  float(xs[-1]), -1.0] + [float(xs[xs.size * k // 7]) for k in range(1, 7)]
    want = _counts_at_most(rs.values, bounds, thresholds)
    regroup = _Regroup(trace, np.flatnonzero(pop)[idx], per_token)
    if analysis._kernels is not None:
        got = regroup(thresholds)
        assert [g.tolist() for g in got] == [w.tolist() for w in want]
    monkeypatch.setattr(analysis, "_kernels", None)
    got_np = regroup(thresholds)
    assert [g.tolist() for g in got_np] == [w.tolist() for w in want]
    assert want[1].sum() >= xs.size // 2 and want[3].sum() == xs.size and want[4].sum() == 0


@pytest.mark.parametrize("which", ["sim_trace", "bench_trace"])
def test_itl_values_kernel_equals_numpy(request: pytest.FixtureRequest,
                                        monkeypatch: pytest.MonkeyPatch, which: str) -> None:
    """`_itl_into` (compiled, then numpy) gives `_itl_samples`' values bit for bit."""
    trace = request.getfixturevalue(which)
    pop = (trace.status == 0) & (np.arange(len(trace)) % 7 != 3)
    itl, itl_tok = _itl_samples(trace, pop, per_token=True, keep_nan=True)
    for kernels in (analysis._kernels, None):
        monkeypatch.setattr(analysis, "_kernels", kernels)
        for per_token, want in ((False, itl), (True, itl_tok)):
            got = _itl_into(trace, pop, per_token, np.empty(itl.size + 5))
            assert got.tobytes() == want.tobytes()
