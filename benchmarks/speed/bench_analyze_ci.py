"""Benchmark: the cost of the block-bootstrap CIs inside `analyze` on 1,000,000 requests.

Builds the trace in memory (no JSONL: the reader is not what is measured), with the same
shape as bench_analyze.py: Poisson arrivals at 200 req/s, lognormal TTFT/TPOT, output
lengths lognormal (median 128), streamed in chunks of 8 tokens (about 20 events a request).
Times `analyze` (two SLOs) once with the block bootstrap over requests (the shipped path)
and once with `request_samples` disabled (the i.i.d. bootstrap of before).

    .venv/bin/python benchmarks/speed/bench_analyze_ci.py [--requests N]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def build(n: int, seed: int = 0):
    from ridgeline.trace.schema import TraceHeader
    from ridgeline.trace.table import Trace

    rng = np.random.default_rng(seed)
    sent = np.cumsum(rng.exponential(1 / 200.0, n))
    out = np.clip(rng.lognormal(np.log(128), 0.8, n), 1, 2048).astype(np.int64)
    ttft = rng.lognormal(np.log(0.150), 0.5, n)
    tpot = rng.lognormal(np.log(0.030), 0.3, n)
    n_ev = (out + 7) // 8
    offsets = np.concatenate(([0], np.cumsum(n_ev)))
    req = np.repeat(np.arange(n), n_ev)
    k = np.arange(offsets[-1]) - offsets[req]
    tok = np.minimum(8, out[req] - 8 * k)
    last_tok = 8 * k + tok - 1  # 0-based index of the chunk's last token
    times = sent[req] + ttft[req] + tpot[req] * last_tok
    end = times[offsets[1:] - 1]
    nan = np.full(n, np.nan)
    return Trace(header=TraceHeader(source="bench", has_event_tokens=True), footer=None,
                 warnings=[], ids=[str(i) for i in range(n)], scheduled_s=sent.copy(),
                 sent_s=sent, end_s=end, ttft_s=nan, tpot_s=nan.copy(), e2e_s=nan.copy(),
                 prompt_tokens=np.full(n, 512), output_tokens=out,
                 status=np.zeros(n, dtype=np.int8), token_source=np.zeros(n, dtype=np.int8),
                 error_kind=[None] * n, error=[None] * n, event_offsets=offsets,
                 event_times_s=times, event_tokens=tok.astype(np.int64))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    args = ap.parse_args()
    import ridgeline.metrics.analysis as analysis
    from ridgeline.theory.stats import RequestSample

    t = build(args.requests)
    print(f"{args.requests:,} requests, {t.event_times_s.size:,} events, "
          f"load {os.getloadavg()[0]:.1f}")
    t0 = time.perf_counter()
    r = analysis.analyze(t, slos=["ttft_ms<=500", "tpot_ms<=50"])
    t_block = time.perf_counter() - t0
    orig = RequestSample.per_request
    analysis._grouped_sample = lambda *a: None  # type: ignore[assignment]
    RequestSample.per_request = classmethod(lambda cls, *a: None)  # type: ignore[method-assign]
    t0 = time.perf_counter()
    analysis.analyze(t, slos=["ttft_ms<=500", "tpot_ms<=50"])
    t_iid = time.perf_counter() - t0
    RequestSample.per_request = orig  # type: ignore[method-assign]
    blocks = {k: d.block_requests for k, d in r.latency.items() if d.block_requests}
    print(f"analyze with block bootstrap: {t_block:.2f} s; i.i.d. bootstrap: {t_iid:.2f} s")
    print("block lengths (requests):", {k: round(v, 1) for k, v in blocks.items()})


if __name__ == "__main__":
    main()
