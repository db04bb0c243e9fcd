"""Benchmark: the emulator's own timing error and the token rate it sustains.

Runs `ridgeline serve` (llama-3.1-8b on h100-sxm, roofline step times) in a subprocess
and drives it from this process with N concurrent streaming requests that are re-issued
as they finish (closed loop, so N streams are open all the time), for a fixed wall time.

- Timing error: for every output chunk the server records (emitted wall time - intended
  wall time), where intended = the step boundary on the emulated timeline; P50/P99 from
  GET /ridgeline/stats after a warm-up (stats reset once all N streams are decoding).
- Highest sustained token rate: the same run at a speed the server cannot keep up with
  (--speed 1000): the engine then steps back to back, so tokens delivered per wall second
  is the most the server process can push to clients on this machine.

Usage: .venv/bin/python benchmarks/bench_serve.py [--streams 256 1024] [--seconds 10]
       [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from typing import Any

import aiohttp

from ridgeline.serve.launcher import EmulatorProcess

MODEL, HARDWARE = "llama-3.1-8b", "h100-sxm"


def _tokens_in_chunk(raw: bytes) -> int:
    """Tokens in a completions chunk: each filler token is one word with a leading space."""
    i = raw.find(b'"text":"')
    if i < 0:
        return 0
    j = raw.find(b'"', i + 8)
    return raw.count(b" ", i + 8, j)


async def _one_stream(session: aiohttp.ClientSession, url: str, stop_at: float,
                      counts: dict[str, int], prompt_tokens: int, max_tokens: int) -> None:
    body = {"model": MODEL, "prompt": list(range(prompt_tokens)), "max_tokens": max_tokens,
            "ignore_eos": True, "stream": True}
    while time.perf_counter() < stop_at:
        try:
            async with session.post(url + "/v1/completions", json=body) as resp:
                if resp.status != 200:
                    counts["errors"] += 1
                    await resp.read()
                    await asyncio.sleep(0.05)
                    continue
                async for raw in resp.content:
                    if raw.startswith(b'data: {"id"'):
                        counts["chunks"] += 1
                        counts["tokens"] += _tokens_in_chunk(raw)
                    if time.perf_counter() >= stop_at:
                        break
        except (aiohttp.ClientError, asyncio.TimeoutError):
            counts["errors"] += 1


async def _drive(url: str, streams: int, seconds: float, warmup_s: float) -> dict[str, float]:
    counts = {"chunks": 0, "tokens": 0, "errors": 0}
    connector = aiohttp.TCPConnector(limit=streams + 8)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        t_start = time.perf_counter()
        stop_at = t_start + warmup_s + seconds
        tasks = [asyncio.create_task(_one_stream(session, url, stop_at, counts, 128, 4000))
                 for _ in range(streams)]
        await asyncio.sleep(warmup_s)
        async with session.get(url + "/ridgeline/stats", params={"reset": "1"}) as r:
            before = await r.json()
        c0 = dict(counts)
        t0 = time.perf_counter()
        await asyncio.sleep(seconds)
        t1 = time.perf_counter()
        c1 = dict(counts)
        async with session.get(url + "/ridgeline/stats") as r:
            after = await r.json()
        async with session.get(url + "/metrics") as r:
            metrics_text = await r.text()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    wall = t1 - t0
    running = next((float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines()
                    if line.startswith("vllm:num_requests_running")), float("nan"))
    return {
        "streams": streams, "wall_s": wall,
        "client_tokens_per_s": (c1["tokens"] - c0["tokens"]) / wall,
        "client_chunks_per_s": (c1["chunks"] - c0["chunks"]) / wall,
        "server_tokens_per_s": (after["tokens_delivered"] - before["tokens_delivered"]) / wall,
        "server_steps_per_s": (after["steps"] - before["steps"]) / wall,
        "emulated_s_per_wall_s": (after["emulated_now_s"] - before["emulated_now_s"]) / wall,
        "lag_p50_ms": (after["lag_p50_s"] or 0.0) * 1e3,
        "lag_p99_ms": (after["lag_p99_s"] or 0.0) * 1e3,
        "lag_max_ms": (after["lag_max_s"] or 0.0) * 1e3,
        "lag_samples": after["lag_samples"],
        "running_at_end": running,
        "client_errors": c1["errors"],
    }


def run_case(streams: int, speed: float, seconds: float, warmup_s: float,
             pure: bool = False) -> dict[str, Any]:
    args = ["--max-num-seqs", str(streams), "--max-num-batched-tokens",
            str(max(8192, streams)), "--max-waiting", str(4 * streams)]
    env = {"RIDGELINE_SERVE_LOOP": "asyncio", "RIDGELINE_SERVE_HTTP": "h11"} if pure else {}
    load_before = os.getloadavg()[0]
    with EmulatorProcess(model=MODEL, hardware=HARDWARE, speed=speed, extra_args=args,
                         env=env) as emu:
        out: dict[str, Any] = asyncio.run(_drive(emu.base_url, streams, seconds, warmup_s))
    out.update(speed=speed, server="asyncio+h11" if pure else "uvloop+httptools",
               loadavg_1min_before=load_before, loadavg_1min_after=os.getloadavg()[0])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--saturate-speed", type=float, default=1000.0)
    parser.add_argument("--pure", action="store_true",
                        help="also run the server on asyncio + h11 (no uvloop/httptools)")
    parser.add_argument("--json", default=None)
    ns = parser.parse_args()
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
          f"{sys.version.split()[0]}; model {MODEL} on {HARDWARE}")
    results = []
    cases = [(streams, speed, False) for streams in ns.streams
             for speed in (1.0, ns.saturate_speed)]
    if ns.pure:
        cases += [(streams, speed, True) for streams in ns.streams
                  for speed in (1.0, ns.saturate_speed)]
    for streams, speed, pure in cases:
            r = run_case(streams, speed, ns.seconds, ns.warmup, pure)
            results.append(r)
            print(f"[{r['server']}, load {r['loadavg_1min_before']:.1f}] "
                  f"streams={streams:5d} speed={speed:7g}  lag P50 {r['lag_p50_ms']:.3f} ms  "
                  f"P99 {r['lag_p99_ms']:.3f} ms  max {r['lag_max_ms']:.1f} ms  | server "
                  f"{r['server_tokens_per_s']:9.0f} tok/s, client {r['client_tokens_per_s']:9.0f}"
                  f" tok/s, {r['server_steps_per_s']:.1f} steps/s, emulated/wall "
                  f"{r['emulated_s_per_wall_s']:.2f}, running {r['running_at_end']:.0f}, "
                  f"errors {r['client_errors']}", flush=True)
    if ns.json:
        with open(ns.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
