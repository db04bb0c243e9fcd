"""aiohttp vs httpx for the streaming client, by measured overhead (why bench uses aiohttp).

The same minimal loop in each library (stream a completion, timestamp every network read
with time.perf_counter) against the scripted test server, C concurrent streams of 40
chunks 50 ms apart; then back-to-back chunks for the highest rate. Reported: timestamp
error (client read time - server write stamp, same host clock) and client CPU seconds
per 1,000 chunks.

Run: .venv/bin/python benchmarks/speed/bench_client_http.py
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from test_bench_server import fetch_log, start_subprocess_server  # noqa: E402


def body(tokens: int, itl_s: float) -> dict:
    return {"model": "steady", "prompt": "a b c", "max_tokens": tokens, "stream": True,
            "ttft_s": 0.01, "itl_s": itl_s}


async def run_aiohttp(url: str, streams: int, tokens: int, itl_s: float, tag: str) -> dict:
    import aiohttp

    times: dict[str, list[float]] = {}

    async def one(session: aiohttp.ClientSession, rid: str) -> None:
        got = times[rid] = []
        async with session.post(url + "/v1/completions", json=body(tokens, itl_s),
                                headers={"X-Request-Id": rid}) as resp:
            async for raw in resp.content.iter_any():
                now = time.perf_counter()
                got.extend([now] * raw.count(b'"text": " '))

    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as session:
        await asyncio.gather(*(one(session, f"{tag}-{i}") for i in range(streams)))
    return times


async def run_httpx(url: str, streams: int, tokens: int, itl_s: float, tag: str) -> dict:
    import httpx

    times: dict[str, list[float]] = {}

    async def one(client: httpx.AsyncClient, rid: str) -> None:
        got = times[rid] = []
        async with client.stream("POST", url + "/v1/completions", json=body(tokens, itl_s),
                                 headers={"X-Request-Id": rid}) as resp:
            async for raw in resp.aiter_raw():
                now = time.perf_counter()
                got.extend([now] * raw.count(b'"text": " '))

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        await asyncio.gather(*(one(client, f"{tag}-{i}") for i in range(streams)))
    return times


def measure(lib: str, url: str, streams: int, tokens: int, itl_s: float) -> dict:
    fn = run_aiohttp if lib == "aiohttp" else run_httpx
    tag = f"{lib}-{streams}-{itl_s}"
    cpu0, wall0 = time.process_time(), time.perf_counter()
    times = asyncio.run(fn(url, streams, tokens, itl_s, tag))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    log = fetch_log(url)["events"]
    errs = []
    for rid, client in times.items():
        errs.extend(c - s for c, s in zip(client, log[rid], strict=False))
    e = np.asarray(errs) * 1e3
    n = sum(len(v) for v in times.values())
    return {"lib": lib, "streams": streams, "chunks": n, "p50_ms": np.percentile(e, 50),
            "p99_ms": np.percentile(e, 99), "cpu_ms_per_1k": cpu / n * 1e6,
            "chunk_rate_s": n / wall}


def main() -> None:
    proc, url = start_subprocess_server()
    try:
        print(f"{'library':>8} {'streams':>7} {'chunks':>7} {'P50 ms':>7} {'P99 ms':>7} "
              f"{'CPU ms/1k chunks':>16}")
        for streams in (64, 256):
            for lib in ("aiohttp", "httpx"):
                r = measure(lib, url, streams, 40, 0.05)
                print(f"{lib:>8} {streams:>7} {r['chunks']:>7} {r['p50_ms']:>7.3f} "
                      f"{r['p99_ms']:>7.3f} {r['cpu_ms_per_1k']:>16.1f}")
        print("\nback to back, 64 streams x 500 chunks:")
        for lib in ("aiohttp", "httpx"):
            r = measure(lib, url, 64, 500, 0.0)
            print(f"{lib:>8}: {r['chunk_rate_s']:,.0f} chunks/s, CPU "
                  f"{r['cpu_ms_per_1k']:.1f} ms per 1k chunks")
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
