"""A bench-shaped synthetic trace: the one `benchmarks/speed/bench_analyze.py` times at 1 M
requests, written here so tests can build the same shape small without importing a benchmark.

Poisson arrivals at 200 req/s, prompt lengths lognormal (median 512 tokens), output lengths
lognormal (median 128, 1..2048), TTFT lognormal (median 150 ms), per-request TPOT lognormal
(median 30 ms); output streamed in chunks of 8 tokens; 1% of requests fail with an HTTP error.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

CHUNK_TOKENS = 8


def write_trace(path: Path, n: int, seed: int = 0) -> None:
    from ridgeline.trace.schema import TraceHeader
    from ridgeline.trace.writer import TraceWriter

    rng = np.random.default_rng(seed)
    sent = np.cumsum(rng.exponential(1 / 200.0, n))
    prompt = np.clip(rng.lognormal(np.log(512), 0.6, n), 1, 32768).astype(int)
    out = np.clip(rng.lognormal(np.log(128), 0.8, n), 1, 2048).astype(int)
    ttft = rng.lognormal(np.log(0.150), 0.5, n)
    tpot = rng.lognormal(np.log(0.030), 0.3, n)
    failed = rng.random(n) < 0.01
    header = TraceHeader(source="bench", model="synthetic", hardware="synthetic",
                         load={"arrival": "poisson", "rate_req_s": 200.0},
                         dataset={"prompt": "lognormal median 512",
                                  "output": "lognormal median 128"}, seed=seed)
    batch: list[dict] = []
    with TraceWriter(path, header) as w:
        for i in range(n):
            if failed[i]:
                batch.append({"id": str(i), "scheduled_s": round(float(sent[i]), 6),
                              "sent_s": round(float(sent[i]), 6),
                              "end_s": round(float(sent[i] + 0.01), 6), "status": "error",
                              "error_kind": "http_500", "prompt_tokens": int(prompt[i])})
            else:
                n_out = int(out[i])
                # Token k (0-based) is visible at first + k * tpot; a chunk is visible with
                # its last token. The first event carries the first token alone (prefill).
                ends = np.concatenate(([0], np.arange(CHUNK_TOKENS, n_out, CHUNK_TOKENS),
                                       [n_out - 1]))
                ends = np.unique(ends)
                tokens = np.diff(np.concatenate(([-1], ends)))
                first = sent[i] + ttft[i]
                times = np.round(first + ends * tpot[i], 6)
                batch.append({"id": str(i), "scheduled_s": round(float(sent[i]), 6),
                              "sent_s": round(float(sent[i]), 6),
                              "event_times_s": times.tolist(),
                              "event_tokens": tokens.tolist(),
                              "end_s": float(times[-1]), "prompt_tokens": int(prompt[i]),
                              "output_tokens": n_out, "token_count_source": "usage"})
            if len(batch) >= 10_000:
                w.write_requests(batch)
                batch.clear()
        w.write_requests(batch)
