"""The check that ties the project together: measured == simulated.

One Poisson workload (fixed seed) is
1. simulated by `ridgeline.sim.event_loop.simulate` on a virtual clock, and
2. sent over HTTP, at its arrival times, to `ridgeline serve` (a subprocess running the
   same engine with the same roofline step times on the wall clock) by a minimal
   streaming client written here; the client records a trace with
   `ridgeline.trace.writer.TraceWriter`.
Both traces go through the one metrics implementation (`ridgeline.metrics.analysis.analyze`)
and their TTFT and TPOT P50 and P90 must agree within their 95 % bootstrap CIs: each run's
estimate lies inside the other run's CI.

Why they can differ at all: the client measures TTFT from its send time, so it includes
the HTTP round trip (about 1-3 ms on this box), and a token written late by the server
(the emulator's timing error, usually < 1 ms) moves one ITL and can shift which requests
share a step. The workload is sized so that these are small against the CIs: prompts of
500-3,000 tokens in 2,048-token chunks at 12 req/s give TTFT P50 near 80 ms with a CI
of about +-12 ms, and TPOT P50 near 14 ms with a CI of about +-1.2 ms (from the
simulator's own bootstrap).
Prompts are sent as token ids, so both runs see exactly the same lengths.

Runs at --speed 1 (about 8 s): faster would multiply the client's own overhead on the
emulated timeline.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import numpy as np

from ridgeline.metrics.analysis import analyze
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.serve.launcher import EmulatorProcess
from ridgeline.sim.engine import EngineConfig
from ridgeline.sim.engine_costs import load_engine_costs
from ridgeline.sim.event_loop import simulate
from ridgeline.sim.workload import build_workload
from ridgeline.trace.reader import read_trace
from ridgeline.trace.schema import TraceHeader
from ridgeline.trace.writer import TraceWriter

MODEL, HARDWARE = "llama-3.1-8b", "h100-sxm"
N_REQUESTS, RATE_REQ_S, SEED, SPEED = 100, 12.0, 7, 1.0
PROMPT, OUTPUT = "uniform:min=500,max=3000", "uniform:min=10,max=60"
MAX_NUM_SEQS, MAX_BATCHED = 64, 2048  # a small token budget so long prompts are chunked


async def _send_all(base_url: str, prompts: np.ndarray, outputs: np.ndarray,
                    arrivals_s: np.ndarray) -> list[dict]:
    """Send request i at arrivals_s[i] / SPEED after t0; return trace records (emulated s)."""
    records: list[dict] = [{} for _ in range(prompts.size)]
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(base_url + "/health") as r:  # warm the pool
            assert r.status == 200
        t0 = time.perf_counter()

        async def one(i: int) -> None:
            delay = t0 + arrivals_s[i] / SPEED - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            # distinct token ids per request: the emulator's prefix cache (on by default,
            # as vLLM's) must find nothing to share, as the simulated workload has none
            body = {"model": MODEL, "prompt": list(range(i << 20, (i << 20) + int(prompts[i]))),
                    "max_tokens": int(outputs[i]), "ignore_eos": True, "stream": True}
            sent = time.perf_counter()
            events: list[float] = []
            async with session.post(base_url + "/v1/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
                async for raw in resp.content:
                    if raw.startswith(b'data: {"id"'):
                        events.append(time.perf_counter())
            end = time.perf_counter()
            records[i] = {
                "id": str(i), "scheduled_s": float(arrivals_s[i]),
                "sent_s": (sent - t0) * SPEED,
                "event_times_s": [(t - t0) * SPEED for t in events],
                "end_s": (end - t0) * SPEED, "prompt_tokens": int(prompts[i]),
                "output_tokens": len(events), "token_count_source": "chunks",
            }

        await asyncio.gather(*(one(i) for i in range(prompts.size)))
    return records


def test_emulator_agrees_with_simulator(tmp_path: Path) -> None:
    wl, load, dataset = build_workload(N_REQUESTS, PROMPT, OUTPUT, rate_req_s=RATE_REQ_S,
                                       arrival="poisson", seed=SEED)
    # Both with the engine's fitted costs, on by default in `serve` and `simulate`.
    costs = load_engine_costs("vllm")
    step_model = RooflineStepTime.from_names(model=MODEL, hardware=HARDWARE,
                                             max_num_batched_tokens=MAX_BATCHED,
                                             max_num_seqs=MAX_NUM_SEQS, engine_costs=costs)
    config = EngineConfig(max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=MAX_BATCHED,
                          num_kv_blocks=step_model.kv_capacity_tokens(0.9) // 16,
                          request_overhead_s=costs.request_overhead_s,
                          request_overhead_steps=costs.request_overhead_steps)
    header = dict(source="simulate", model=MODEL, hardware=HARDWARE, load=load,
                  dataset=dataset, seed=SEED)
    sim = analyze(simulate(wl, config, step_model).to_trace(TraceHeader(**header)),
                  window="all")

    args = ["--max-num-seqs", str(MAX_NUM_SEQS), "--max-num-batched-tokens", str(MAX_BATCHED)]
    with EmulatorProcess(model=MODEL, hardware=HARDWARE, speed=SPEED, extra_args=args) as emu:
        records = asyncio.run(_send_all(emu.base_url, wl.prompt_tokens, wl.output_tokens,
                                        wl.arrival_s))
    path = tmp_path / "emulated.jsonl"
    with TraceWriter(path, TraceHeader(**{**header, "source": "bench"})) as writer:
        for rec in records:
            writer.write_request(rec)
    emu_result = analyze(read_trace(path), window="all")

    assert emu_result.counts["successful"] == sim.counts["successful"] == N_REQUESTS
    for metric in ("ttft_ms", "tpot_ms"):
        a, b = sim.latency[metric], emu_result.latency[metric]
        assert a.count == b.count == (N_REQUESTS if metric == "ttft_ms" else b.count)
        for q in ("p50", "p90"):
            pa, pb = a.percentiles[q], b.percentiles[q]
            assert pa.ci_low <= pb.value <= pa.ci_high, (metric, q, pa, pb)
            assert pb.ci_low <= pa.value <= pb.ci_high, (metric, q, pa, pb)
