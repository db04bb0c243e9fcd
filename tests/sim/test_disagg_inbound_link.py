"""The decode worker's inbound KV link under prefill/decode disaggregation.

Rule: when a prefill ends the decode router picks the receiver; the transfer starts once the
sender's outbound link and the receiver's inbound link are both free, and holds both for
bytes / bandwidth. Expected waits are that one link time (prompt tokens x KV bytes per
token / bandwidth), worked out by hand; the C core and the Python engine must agree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.sim.cluster import ClusterConfig
from ridgeline.sim.engine import EngineConfig
from ridgeline.sim.event_loop import Workload, simulate

RIDGELINE = str(Path(sys.executable).with_name("ridgeline"))
BPT, BW, LAT = 1000.0, 1e9, 1e-4
BUSY_S = 1000 * BPT / BW           # a 1000-token prompt's KV over 1 GB/s: 1 ms
# Qwen2.5-0.5B's config.json: 24 layers, 2 KV heads of 64, K and V in bf16
QWEN05_KV_BYTES_PER_TOKEN = 24 * 2 * 64 * 2 * 2     # 12,288 B


def _model() -> RooflineStepTime:
    return RooflineStepTime.from_names(model="qwen2.5-0.5b", hardware="h100-sxm")


def _run(pd: tuple[int, int], arrival_s: list[float], core: str,
         monkeypatch: pytest.MonkeyPatch, router: str = "round-robin") -> object:
    n = len(arrival_s)
    wl = Workload(prompt_tokens=np.full(n, 1000), output_tokens=np.full(n, 5),
                  arrival_s=np.array(arrival_s))
    cl = ClusterConfig(router=router, pd=pd, kv_bytes_per_token=BPT,
                       link_bandwidth_bytes_s=BW, kv_transfer_latency_s=LAT, link_queue=True)
    if core == "python":
        monkeypatch.setenv("RIDGELINE_SIM_CORE", "python")
    else:
        monkeypatch.delenv("RIDGELINE_SIM_CORE", raising=False)
    res = simulate(wl, EngineConfig(num_kv_blocks=10_000), _model(), cl)
    if core == "c" and res.core != "c":
        pytest.skip("the C engine core is not built here")
    assert res.core == core
    return res


@pytest.mark.parametrize("core", ["python", "c"])
def test_two_senders_one_receiver_the_second_waits_one_transfer(
        core: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two prompts arrive together on two prefill workers (round-robin), are prefilled in
    parallel and finish at the same instant; their senders are free, but the one decode
    worker's inbound link takes one KV at a time: the second waits exactly 1 ms."""
    res = _run((2, 1), [0.0, 0.0], core, monkeypatch)
    assert res.replica.tolist() == [2, 2]        # both decoded on the one decode worker
    assert sorted(res.kv_transfer_wait_s) == pytest.approx([0.0, BUSY_S], abs=1e-12)
    assert res.kv_transfer_s == pytest.approx([LAT + BUSY_S] * 2)
    first = [res.events_s(i)[0] for i in range(2)]
    assert first[0] == first[1]                  # the prefills ended together
    # the later KV lands at prefill end + 1 ms of wait + 0.1 ms latency + 1 ms of bytes
    later = int(np.argmax(res.kv_transfer_wait_s))
    assert res.events_s(later)[1] > first[0] + 2 * BUSY_S + LAT


@pytest.mark.parametrize("core", ["python", "c"])
def test_two_receivers_or_spaced_arrivals_do_not_wait(
        core: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # 2 decode workers: round-robin sends the two KVs to different inbound links
    res = _run((2, 2), [0.0, 0.0], core, monkeypatch)
    assert sorted(res.replica.tolist()) == [2, 3]
    assert res.kv_transfer_wait_s.tolist() == [0.0, 0.0]
    # 1 decode worker, arrivals 1 s apart: the first transfer is long over
    res = _run((2, 1), [0.0, 1.0], core, monkeypatch)
    assert res.kv_transfer_wait_s.tolist() == [0.0, 0.0]
    assert res.kv_transfer_s == pytest.approx([LAT + BUSY_S] * 2)


@pytest.mark.parametrize(("router", "pd"), [
    ("round-robin", (3, 1)), ("least-outstanding", (3, 2)), ("least-kv", (2, 3)),
    ("prefix-affinity", (4, 2)),
    # a decode pool large enough for the router's heap (ROUTER_HEAP_MIN), transfers in flight
    ("least-outstanding", (6, 17)),
])
def test_inbound_link_is_the_same_in_the_c_core_and_the_python_engine(
        router: str, pd: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    n = 800
    group = rng.integers(-1, 6, n) if router == "prefix-affinity" else None
    wl = Workload(prompt_tokens=rng.integers(100, 4000, n),
                  output_tokens=rng.integers(1, 40, n),
                  arrival_s=np.cumsum(rng.exponential(1 / 200, n)),
                  prefix_group=group,
                  prefix_tokens=np.where(group >= 0, 64, 0) if group is not None else None)
    cl = ClusterConfig(router=router, pd=pd, kv_bytes_per_token=131072.0,
                       link_bandwidth_bytes_s=2e10, kv_transfer_latency_s=1e-4,
                       link_queue=True)
    cfg = EngineConfig(num_kv_blocks=100_000)
    monkeypatch.delenv("RIDGELINE_SIM_CORE", raising=False)
    got = simulate(wl, cfg, _model(), cl)
    monkeypatch.setenv("RIDGELINE_SIM_CORE", "python")
    ref = simulate(wl, cfg, _model(), cl)
    if got.core != "c":
        pytest.skip(f"the C engine core did not run this: {got.core}")
    assert ref.core == "python"
    assert np.array_equal(got.replica, ref.replica)
    assert np.array_equal(got.event_times_s, ref.event_times_s)
    assert np.array_equal(got.kv_transfer_wait_s, ref.kv_transfer_wait_s, equal_nan=True)
    assert float(np.nanmax(got.kv_transfer_wait_s)) > 0     # the links were contended


def test_simulate_reports_the_decode_side_wait() -> None:
    """Through the installed command: two users start together on two prefill workers and
    hand off to one decode worker over a stated 1 GB/s link; the second KV waits one link
    time, 1000 x 12,288 B / 1e9 B/s = 12.288 ms."""
    run = subprocess.run(
        [RIDGELINE, "simulate", "--model", "qwen2.5-0.5b", "--hardware", "h100-sxm",
         "--pd", "2:1", "--requests", "2", "--concurrency", "2", "--prompt", "fixed:1000",
         "--output", "fixed:5", "--kv-link", "1", "--no-engine-costs", "--json"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    kv = out["pools"]["kv_transfer"]
    busy_ms = 1000 * QWEN05_KV_BYTES_PER_TOKEN / 1e9 * 1e3
    assert kv["transfers"] == 2
    assert kv["link_wait_ms"]["max"] == pytest.approx(busy_ms, rel=1e-9)
    assert kv["link_wait_ms"]["mean"] == pytest.approx(busy_ms / 2, rel=1e-9)


@pytest.mark.parametrize("core", ["python", "c"])
@pytest.mark.parametrize("router", ["least-outstanding", "least-kv"])
def test_a_transfer_in_flight_counts_as_its_receivers_load(
        core: str, router: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two prompts arrive together on two prefill workers (the entry router spreads them)
    and finish together. The first KV goes to decode worker 2 (both idle: lowest index).
    When the second is queued the first is still on the link, so worker 2 already holds one
    request (and, for least-kv, its prompt's ceil(1000 / 16) = 63 blocks) and worker 3 none:
    the second goes to worker 3 and waits for no link. Counting only what has arrived would
    send it to 2 as well, to wait one link time, 1 ms."""
    res = _run((2, 2), [0.0, 0.0], core, monkeypatch, router=router)
    assert sorted(res.replica.tolist()) == [2, 3]
    assert res.kv_transfer_wait_s.tolist() == [0.0, 0.0]
