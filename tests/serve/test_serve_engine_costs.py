"""`ridgeline serve` applies the engine's per-request cost as `simulate` does (one step time).

The fitted costs are read from the shipped catalog file (ridgeline/specs/data/engines/
vllm.json), not repeated here: per request `request_overhead_s` + `request_overhead_steps` x
the mean decode step, on every token (TTFT and E2E, not the gaps).

1. Low load, through the installed console script (`ridgeline serve`, started by the
   project's launcher on port 0): the same sequential requests against a server with the
   default costs and one with `--no-engine-costs`. The expected shift is computed from the
   data file and the step-time model's own decode steps (not from the server):
   - the server's /metrics (vLLM's TTFT and E2E histograms, emulated time, no HTTP noise)
     must move by the shift within a tenth of its smaller term;
   - what the client measures (the least-disturbed of a few requests) within half of it,
     so dropping either term fails; the inter-token gap must not move.
2. `ridgeline bench --target emulator` and `ridgeline simulate` on one workload agree on
   TTFT P50 with the costs on, within half the shift (so an emulator without it fails).

Run at --speed 0.5 where the client times: wall-clock noise halves in emulated time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.step_time import BatchWork
from ridgeline.serve.launcher import EmulatorProcess
from ridgeline.sim.engine_costs import load_engine_costs

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
MODEL, HARDWARE = "llama-3.1-8b", "h100-sxm"
PROMPT, OUTPUT, REPEATS, SPEED = 1000, 16, 4, 0.5

_COSTS = json.loads(resources.files("ridgeline.specs").joinpath(
    "data", "engines", "vllm.json").read_text())["costs"]
OVERHEAD_S = float(_COSTS["request_overhead_s"]["value"])
OVERHEAD_STEPS = float(_COSTS["request_overhead_steps"]["value"])
# `--no-engine-costs` drops the per-step CPU cost too: each step of a request moves by it.
STEP_S = float(_COSTS["step_overhead_s"]["value"])


def _decode_steps_s() -> np.ndarray:
    """The step-time model's decode steps of one request (batch 1, growing context), with
    the engine's per-step terms, as the server prices them."""
    step = RooflineStepTime.from_names(model=MODEL, hardware=HARDWARE,
                                       engine_costs=load_engine_costs("vllm"))
    contexts = PROMPT + np.arange(1, OUTPUT)
    return np.asarray(step.step_time_s(BatchWork(
        decode_seqs=np.ones(contexts.size), decode_context_tokens=contexts.astype(float))))


def _terms_s() -> list[float]:
    """The shift's two terms with the shipped data (only nonzero terms can be checked)."""
    terms = [OVERHEAD_S, OVERHEAD_STEPS * float(_decode_steps_s().mean())]
    terms = [t for t in terms if t > 0]
    if not terms:
        pytest.skip("the shipped vllm.json has no per-request cost to check")
    return terms


def _server(*extra: str) -> EmulatorProcess:
    return EmulatorProcess(command=[
        RIDGELINE, "serve", "--model", MODEL, "--hardware", HARDWARE, "--speed", str(SPEED),
        "--host", "127.0.0.1", "--port", "0", "--no-enable-prefix-caching", *extra])


def _one_request(client: httpx.Client, url: str, i: int) -> np.ndarray:
    """Emulated seconds from send to each token chunk of one streamed request."""
    body = {"model": MODEL, "prompt": list(range(i * PROMPT, (i + 1) * PROMPT)),
            "max_tokens": OUTPUT, "ignore_eos": True, "stream": True}
    times: list[float] = []
    t0 = time.perf_counter()
    with client.stream("POST", url + "/v1/completions", json=body) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith('data: {"id"'):
                times.append(time.perf_counter() - t0)
    assert len(times) == OUTPUT
    return np.asarray(times) * SPEED


def _histogram_mean_s(metrics: str, name: str, count: int) -> float:
    values = {}
    for line in metrics.splitlines():
        for part in ("_sum", "_count"):
            if line.startswith(f"{name}{part}{{"):
                values[part] = float(line.rsplit(" ", 1)[1])
    assert values.get("_count") == count, (name, values)
    return values["_sum"] / values["_count"]


def _measure(*extra: str) -> tuple[np.ndarray, dict[str, Any], str]:
    """Sequential requests (the lowest load): the least-disturbed client timeline, the
    server's histogram means and its stderr."""
    with _server(*extra) as emu, httpx.Client(timeout=60) as client:
        client.get(emu.base_url + "/health")  # open the connection before timing
        runs = [_one_request(client, emu.base_url, i) for i in range(REPEATS)]
        metrics = client.get(emu.base_url + "/metrics").text
        stats = client.get(emu.base_url + "/ridgeline/stats").json()
        stderr = emu.stderr_text()
    server = {h: _histogram_mean_s(metrics, f"vllm:{h}", n) for h, n in (
        ("time_to_first_token_seconds", REPEATS), ("e2e_request_latency_seconds", REPEATS),
        ("inter_token_latency_seconds", REPEATS * (OUTPUT - 1)))}
    server["stats"] = stats.get("request_overhead")
    return np.min(np.vstack(runs), axis=0), server, stderr


def test_serve_shifts_tokens_by_the_engine_cost_of_the_data_file() -> None:
    terms = _terms_s()
    expected_s = OVERHEAD_S + OVERHEAD_STEPS * float(_decode_steps_s().mean())
    with_costs, server_on, stderr = _measure()
    bare, server_off, _ = _measure("--no-engine-costs")
    # The engine line simulate prints among its key assumptions, word for word.
    sim = subprocess.run([RIDGELINE, "simulate", "--model", MODEL, "--hardware", HARDWARE,
                          "--rate", "1", "--requests", "3", "--json"], capture_output=True,
                         text=True, timeout=120)
    assert sim.returncode == 0, sim.stderr
    engine_lines = [a for a in json.loads(sim.stdout)["assumptions"]
                    if a.startswith("engine vllm:")]
    assert len(engine_lines) == 2 and f"per request {OVERHEAD_S * 1e3:.2f} ms" in engine_lines[0]
    key = [a for a in json.loads(sim.stdout)["key_assumptions"] if a.startswith("engine:")]
    assert len(key) == 1 and f"{OVERHEAD_S * 1e3:.1f} ms per request" in key[0]
    assert key[0] in stderr, key[0]
    assert "not in serve" not in stderr
    # The live mean decode step: the pooled token gaps of the requests so far.
    live = server_on["stats"]
    assert server_off["stats"] is None and live["token_gaps"] == REPEATS * (OUTPUT - 1)
    assert abs(live["mean_decode_step_s"] - _decode_steps_s().mean()) <= (
        0.01 * _decode_steps_s().mean()), live

    # The server's own figures are emulated time: the shift, with no HTTP in it.
    tight_s = 0.1 * min(terms)
    for h, steps in (("time_to_first_token_seconds", 1), ("e2e_request_latency_seconds", OUTPUT)):
        moved = server_on[h] - server_off[h]
        want_s = expected_s + STEP_S * steps
        assert abs(moved - want_s) <= tight_s, (h, moved, want_s)
    itl_on, itl_off = (s["inter_token_latency_seconds"] for s in (server_on, server_off))
    assert abs(itl_on - itl_off - STEP_S) <= 0.02 * itl_off, (itl_on, itl_off)

    # What a client sees: the least-disturbed of the repeats.
    loose_s = 0.5 * min(terms)
    moved = with_costs[0] - bare[0]
    assert abs(moved - expected_s - STEP_S) <= loose_s, (moved, expected_s, loose_s)
    gap_on, gap_off = np.diff(with_costs).mean(), np.diff(bare).mean()
    assert abs(gap_on - gap_off - STEP_S) <= 0.1 * gap_off, (gap_on, gap_off)


def _ttft_p50_ms(analysis: dict) -> float:
    return float(analysis["latency"]["ttft_ms"]["percentiles"]["p50"]["value"])


@pytest.mark.slow
def test_bench_of_the_emulator_agrees_with_simulate_on_ttft_with_costs(tmp_path: Path) -> None:
    """Under load (2 req/s of 1,000-token prompts), the engine costs move the emulator's TTFT
    P50 as they move simulate's. The emulator's own HTTP path (the request, tokenizing 1,000
    tokens, the stream) adds a few ms that simulate has not: measured here with the costs
    off and taken out, and bounded."""
    terms = _terms_s()
    workload = ["--model", MODEL, "--hardware", HARDWARE, "--rate", "2", "--requests", "30",
                "--prompt", "fixed:1000", "--output", "fixed:32", "--seed", "3"]

    def simulated_p50_ms(*extra: str) -> float:
        sim = subprocess.run([RIDGELINE, "simulate", *workload, *extra, "--json"],
                             capture_output=True, text=True, timeout=120)
        assert sim.returncode == 0, sim.stderr
        return _ttft_p50_ms(json.loads(sim.stdout)["analysis"])

    def emulated_p50_ms(name: str, *extra: str) -> float:
        trace = tmp_path / f"{name}.jsonl"
        bench = subprocess.run([RIDGELINE, "bench", "--target", "emulator", *workload,
                                *extra, "--trace", str(trace), "--no-progress"],
                               capture_output=True, text=True, timeout=300)
        assert bench.returncode == 0, bench.stderr
        ana = subprocess.run([RIDGELINE, "analyze", str(trace), "--json"],
                             capture_output=True, text=True, timeout=120)
        assert ana.returncode == 0, ana.stderr
        return _ttft_p50_ms(json.loads(ana.stdout))

    sim_on, sim_off = simulated_p50_ms(), simulated_p50_ms("--no-engine-costs")
    emu_on = emulated_p50_ms("on")
    emu_off = emulated_p50_ms("off", "--emulator-arg=--no-engine-costs")
    shift_ms = sum(terms) * 1e3
    http_ms = emu_off - sim_off
    assert 0.0 <= http_ms <= shift_ms, (emu_off, sim_off)       # the emulator's own path
    # without the costs in the emulator the gap to simulate would be the whole shift
    assert abs(emu_on - http_ms - sim_on) <= 0.35 * shift_ms, (emu_on, http_ms, sim_on,
                                                                 shift_ms)
