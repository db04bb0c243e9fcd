"""Client overhead of `ridgeline bench`: timestamp error and the chunk rate it sustains.

Against the scripted test server (tests/bench/test_bench_server.py, in its own process), which
stamps every output chunk with time.perf_counter just before writing it. The client's
timestamp error for a chunk is (client event time) - (server stamp), both on the host's
CLOCK_MONOTONIC: the loopback hop plus the time the client's event loop was busy elsewhere.

  1. error P50/P99 at 1, 64, 256 and 1,024 concurrent streams (one process)
  2. the highest chunk rate one process and `--workers 2` sustain: the server sends
     chunks back to back (no sleeps) to C streams; chunk rate = chunks received / time.

Run: .venv/bin/python benchmarks/speed/bench_client_overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from test_bench_server import fetch_log, start_subprocess_server  # noqa: E402

from ridgeline.bench.client import EndpointConfig  # noqa: E402
from ridgeline.bench.load import LoadSpec  # noqa: E402
from ridgeline.bench.single_run import BenchConfig, run_bench  # noqa: E402
from ridgeline.workload.lengths import parse_lengths  # noqa: E402


def run_point(url: str, out: Path, streams: int, tokens: int, itl_s: float,
              workers: int = 1) -> tuple[list[dict], dict]:
    cfg = BenchConfig(
        endpoint=EndpointConfig(url, "steady", extra_body={"ttft_s": 0.01, "itl_s": itl_s}),
        load=LoadSpec(streams, None, requests=streams), trace_path=out,
        prompt=parse_lengths("fixed:8"), output=parse_lengths(f"fixed:{tokens}"),
        workers=workers)
    run_bench(cfg, warn=lambda m: None)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    return [x for x in lines if x["type"] == "request"], lines[0]


def timestamp_error(url: str, tmp: Path, streams: int, tokens: int, itl_s: float) -> dict:
    recs, header = run_point(url, tmp / f"err-{streams}.jsonl", streams, tokens, itl_s)
    log = fetch_log(url)["events"]
    t0 = header["t0_perf_counter_s"]
    errs = []
    for r in recs:
        server = log[r["id"]]
        errs.extend(t0 + c - s for c, s in zip(r["event_times_s"], server, strict=True))
    e = np.asarray(errs) * 1e3
    ok = sum(r["status"] == "ok" for r in recs)
    return {"streams": streams, "chunks": int(e.size), "ok": ok,
            "p50_ms": float(np.percentile(e, 50)), "p99_ms": float(np.percentile(e, 99)),
            "max_ms": float(e.max()),
            "chunk_rate_s": round(streams * tokens / (tokens * itl_s + 0.01))}


def chunk_rate(url: str, tmp: Path, streams: int, tokens: int, workers: int) -> dict:
    t = time.perf_counter()
    recs, _ = run_point(url, tmp / f"rate-{workers}.jsonl", streams, tokens, 0.0, workers)
    wall = time.perf_counter() - t
    first = min(r["sent_s"] for r in recs)
    last = max(r["end_s"] for r in recs)
    chunks = sum(len(r["event_times_s"]) for r in recs)
    return {"workers": workers, "streams": streams, "chunks": chunks,
            "chunk_rate_s": chunks / (last - first), "wall_s": wall,
            "ok": sum(r["status"] == "ok" for r in recs)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    tmp = Path("/tmp/ridgeline-bench-overhead")
    tmp.mkdir(exist_ok=True)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}")
    proc, url = start_subprocess_server()
    try:
        print("\n1. timestamp error (client event time - server write stamp), 40 tokens per "
              "stream, 50 ms apart")
        print(f"{'streams':>8} {'chunks':>8} {'chunks/s':>9} {'P50 ms':>8} {'P99 ms':>8} "
              f"{'max ms':>8}")
        for streams in ((1, 64) if args.quick else (1, 64, 256, 1024)):
            r = timestamp_error(url, tmp, streams, 40, 0.05)
            print(f"{r['streams']:>8} {r['chunks']:>8} {r['chunk_rate_s']:>9} "
                  f"{r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} {r['max_ms']:>8.3f}")
        print("\n2. highest chunk rate (server sends back to back)")
        for workers in (1, 2):
            r = chunk_rate(url, tmp, 64, 200 if args.quick else 1000, workers)
            print(f"workers={workers}: {r['chunk_rate_s']:,.0f} chunks/s "
                  f"({r['chunks']:,} chunks over {r['streams']} streams, {r['ok']} ok, "
                  f"wall {r['wall_s']:.1f} s)")
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
