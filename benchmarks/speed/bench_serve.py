"""Benchmark: the emulator's own timing error and the token rate it sustains, and the same
figures for GuideLLM's mock server (the peer) under the same client.

Every server runs in its own process; this script is the client (aiohttp, N concurrent
streaming requests re-issued as they finish, so N streams are open all the time).

Part A — ridgeline serve as shipped (llama-3.1-8b on h100-sxm, roofline step times):
- timing error: for every output chunk the server records (emitted wall time - intended
  wall time), intended = the step boundary on the emulated timeline; P50/P99 from
  GET /ridgeline/stats after a warm-up;
- highest sustained token rate: the same at --speed 1000, which the server cannot keep
  up with, so the engine steps back to back and tokens/s is the most this process can
  push to clients on this machine.

Part B — peer comparison at a fixed inter-token latency (GuideLLM's mock server only has
fixed latencies): ridgeline serves the real engine with a constant step time
(LinearStepTime(base_s=ITL)), GuideLLM's `mock-server --itl-ms ITL`; the client measures
each gap between consecutive token chunks of a stream minus the nominal ITL (P50/P99),
and the token rate; then both at ITL ~0 for the saturation rate.

GuideLLM is installed by this script into a throwaway virtualenv (default
/tmp/peer-guidellm), never into the project.

Usage: .venv/bin/python benchmarks/speed/bench_serve.py [--streams 256 1024] [--seconds 10]
       [--no-peer] [--pure] [--json out.json] [--serve-arg=--no-engine-costs]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from ridgeline.serve.launcher import EmulatorProcess

MODEL, HARDWARE = "llama-3.1-8b", "h100-sxm"
PEER_VENV = Path(os.environ.get("RIDGELINE_PEER_GUIDELLM_VENV", "/tmp/peer-guidellm"))
PEER_VERSION = "0.8.1"


def _token_chunk(raw: bytes) -> bool:
    """A completions chunk that carries output text (ridgeline's or GuideLLM's)."""
    if not raw.startswith(b"data: {"):
        return False
    i = raw.find(b'"text":')
    if i < 0:
        return False
    j = i + 7 + (raw[i + 7:i + 8] == b" ")  # GuideLLM writes '"text": "..."'
    return raw[j:j + 2] != b'""'


async def _one_stream(session: aiohttp.ClientSession, url: str, model: str,
                      stats: dict[str, Any]) -> None:
    # Text, not token ids: GuideLLM's mock server accepts only text (128 cl100k tokens).
    body = {"model": model, "prompt": " ".join(["hello"] * 128), "max_tokens": 2000,
            "ignore_eos": True, "stream": True}
    gaps = stats["gaps"]
    while not stats["stop"]:
        try:
            async with session.post(url + "/v1/completions", json=body) as resp:
                if resp.status != 200:
                    stats["errors"] += 1
                    await resp.read()
                    await asyncio.sleep(0.05)
                    continue
                last = None
                async for raw in resp.content:
                    if _token_chunk(raw):
                        now = time.perf_counter()
                        stats["chunks"] += 1
                        if last is None:
                            stats["first_tokens"] += 1
                        if last is not None and stats["recording"]:
                            gaps.append(now - last)
                        last = now
                    if stats["stop"]:
                        break
        except (aiohttp.ClientError, asyncio.TimeoutError):
            stats["errors"] += 1


async def _drive(url: str, model: str, streams: int, seconds: float, warmup_s: float,
                 ridgeline: bool) -> dict[str, Any]:
    stats: dict[str, Any] = {"chunks": 0, "errors": 0, "gaps": [], "recording": False,
                             "first_tokens": 0, "stop": False}
    connector = aiohttp.TCPConnector(limit=streams + 8)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [asyncio.create_task(_one_stream(session, url, model, stats))
                 for _ in range(streams)]
        # Warm-up: until every stream has its first token (all N open and decoding; a
        # server's per-request start-up cost is paid here), then warmup_s more.
        t_start = time.perf_counter()
        while stats["first_tokens"] < streams and time.perf_counter() - t_start < 120:
            await asyncio.sleep(0.1)
        warm_s = time.perf_counter() - t_start
        await asyncio.sleep(warmup_s)
        before: dict[str, Any] = {}
        if ridgeline:
            async with session.get(url + "/ridgeline/stats", params={"reset": "1"}) as r:
                before = await r.json()
        stats["recording"] = True
        c0, t0 = stats["chunks"], time.perf_counter()
        await asyncio.sleep(seconds)
        c1, t1 = stats["chunks"], time.perf_counter()
        stats["recording"] = False
        stats["stop"] = True
        after: dict[str, Any] = {}
        if ridgeline:
            async with session.get(url + "/ridgeline/stats") as r:
                after = await r.json()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    wall = t1 - t0
    out: dict[str, Any] = {"streams": streams, "wall_s": wall, "warmup_to_all_open_s": warm_s,
                           "streams_opened": stats["first_tokens"],
                           "client_chunks_per_s": (c1 - c0) / wall,
                           "client_errors": stats["errors"],
                           "gaps_s": np.asarray(stats["gaps"])}
    if ridgeline:
        out.update({
            "server_tokens_per_s": (after["tokens_delivered"] - before["tokens_delivered"])
            / wall,
            "server_steps_per_s": (after["steps"] - before["steps"]) / wall,
            "lag_p50_ms": (after["lag_p50_s"] or 0.0) * 1e3,
            "lag_p99_ms": (after["lag_p99_s"] or 0.0) * 1e3,
            "lag_max_ms": (after["lag_max_s"] or 0.0) * 1e3,
            "lag_samples": after["lag_samples"],
        })
    return out


# ---- servers ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve_constant(itl_s: float, streams: int, speed: float) -> None:
    """(Subprocess) the real engine with a constant step time, behind the emulator app."""
    from ridgeline.perf.step_time import LinearStepTime
    from ridgeline.serve.app import EmulatorConfig, create_app
    from ridgeline.serve.launcher import serve_app
    from ridgeline.sim.engine import Engine, EngineConfig, EngineRequest

    engine = Engine(EngineConfig(max_num_seqs=streams,
                                 max_num_batched_tokens=max(8192, streams),
                                 num_kv_blocks=1 << 20), LinearStepTime(base_s=itl_s))
    app = create_app(engine, EngineRequest, EmulatorConfig(
        served_model_name=MODEL, speed=speed, max_waiting=4 * streams))
    serve_app(app, "127.0.0.1", 0)


SERVE_ARGS: list[str] = []  # --serve-arg: more `ridgeline serve` flags for part A


def ridgeline_roofline(streams: int, speed: float, pure: bool) -> EmulatorProcess:
    args = ["--max-num-seqs", str(streams), "--max-num-batched-tokens",
            str(max(8192, streams)), "--max-waiting", str(4 * streams), *SERVE_ARGS]
    env = {"RIDGELINE_SERVE_LOOP": "asyncio", "RIDGELINE_SERVE_HTTP": "h11"} if pure else {}
    return EmulatorProcess(model=MODEL, hardware=HARDWARE, speed=speed, extra_args=args,
                           env=env)


def ridgeline_constant(itl_s: float, streams: int, speed: float) -> EmulatorProcess:
    cmd = [sys.executable, __file__, "--serve-constant", repr(itl_s), "--streams",
           str(streams), "--speed", repr(speed)]
    return EmulatorProcess(command=cmd)


def ensure_guidellm() -> Path:
    exe = PEER_VENV / "bin" / "guidellm"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run([str(PEER_VENV / "bin" / "pip"), "install", "-q",
                        f"guidellm=={PEER_VERSION}"], check=True)
    return exe


class GuideLLMMock:
    """`guidellm mock-server` in a subprocess, ready when /v1/models answers."""

    def __init__(self, itl_ms: float, ttft_ms: float) -> None:
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.args = [str(ensure_guidellm()), "mock-server", "--host", "127.0.0.1", "--port",
                     str(self.port), "--model", MODEL, "--ttft-ms", str(ttft_ms),
                     "--itl-ms", str(itl_ms), "--output-tokens", "4000"]
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> GuideLLMMock:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.base_url + "/v1/models", timeout=1):
                    return self
            except OSError:
                time.sleep(0.1)
        self.__exit__()
        raise RuntimeError("guidellm mock-server did not start")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# ---- the runs --------------------------------------------------------------------------


def _case(label: str, server: Any, streams: int, seconds: float, warmup_s: float,
          ridgeline: bool, nominal_itl_s: float | None) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    with server as srv:
        out = asyncio.run(_drive(srv.base_url, MODEL, streams, seconds, warmup_s, ridgeline))
    gaps = out.pop("gaps_s")
    out.update(case=label, loadavg_1min_before=load_before,
               loadavg_1min_after=os.getloadavg()[0])
    if nominal_itl_s is not None and gaps.size:
        err = (gaps - nominal_itl_s) * 1e3
        out.update(gap_error_p50_ms=float(np.percentile(err, 50)),
                   gap_error_p99_ms=float(np.percentile(err, 99)),
                   gap_abs_error_p99_ms=float(np.percentile(np.abs(err), 99)))
    line = (f"[{label}, load {load_before:.1f}] streams={streams:5d} (all open after "
            f"{out['warmup_to_all_open_s']:.1f} s)  client {out['client_chunks_per_s']:8.0f} tok/s")
    if ridgeline:
        line += (f"  server {out['server_tokens_per_s']:8.0f} tok/s "
                 f"{out['server_steps_per_s']:.1f} steps/s  lag P50 "
                 f"{out['lag_p50_ms']:.3f} ms P99 {out['lag_p99_ms']:.3f} ms max "
                 f"{out['lag_max_ms']:.1f} ms")
    if "gap_error_p50_ms" in out:
        line += (f"  gap-ITL P50 {out['gap_error_p50_ms']:+.3f} ms P99 "
                 f"{out['gap_error_p99_ms']:+.3f} ms |P99| {out['gap_abs_error_p99_ms']:.3f}")
    line += f"  errors {out['client_errors']}"
    print(line, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0,
                        help="seconds after every stream has its first token")
    parser.add_argument("--itl-ms", type=float, default=20.0,
                        help="nominal inter-token latency of part B")
    parser.add_argument("--no-peer", action="store_true", help="skip part B")
    parser.add_argument("--pure", action="store_true",
                        help="also run part A on asyncio + h11 (no uvloop/httptools)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--serve-constant", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--speed", type=float, default=1.0, help=argparse.SUPPRESS)
    parser.add_argument("--serve-arg", action="append", default=[],
                        help="one more `ridgeline serve` flag for part A (repeatable), e.g. "
                        "--serve-arg=--no-engine-costs")
    ns = parser.parse_args()
    SERVE_ARGS.extend(ns.serve_arg)
    if ns.serve_constant is not None:
        _serve_constant(ns.serve_constant, ns.streams[0], ns.speed)
        return
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
          f"{sys.version.split()[0]}", flush=True)
    results = []
    sec, wu = ns.seconds, ns.warmup
    for n in ns.streams:  # part A
        results.append(_case("A ridgeline roofline x1", ridgeline_roofline(n, 1.0, False),
                             n, sec, wu, True, None))
        results.append(_case("A ridgeline roofline x1000", ridgeline_roofline(n, 1000.0,
                                                                               False),
                             n, sec, wu, True, None))
        if ns.pure:
            results.append(_case("A ridgeline roofline x1 asyncio+h11",
                                 ridgeline_roofline(n, 1.0, True), n, sec, wu, True, None))
            results.append(_case("A ridgeline roofline x1000 asyncio+h11",
                                 ridgeline_roofline(n, 1000.0, True), n, sec, wu, True,
                                 None))
    if not ns.no_peer:  # part B
        itl = ns.itl_ms / 1e3
        for n in ns.streams:
            results.append(_case(f"B ridgeline constant {ns.itl_ms:g} ms",
                                 ridgeline_constant(itl, n, 1.0), n, sec, wu, True, itl))
            results.append(_case(f"B guidellm mock {ns.itl_ms:g} ms",
                                 GuideLLMMock(ns.itl_ms, ns.itl_ms), n, sec, wu, False, itl))
            results.append(_case("B ridgeline constant, saturated",
                                 ridgeline_constant(itl, n, 1000.0), n, sec, wu, True, None))
            results.append(_case("B guidellm mock, itl 0", GuideLLMMock(0.0, 0.0), n, sec,
                                 wu, False, None))
    if ns.json:
        with open(ns.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
