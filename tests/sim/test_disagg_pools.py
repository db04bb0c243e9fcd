"""Disaggregated prefill and decode pools with their own layout, and the KV link between them.

Expected numbers come from the model's shape (Llama-3.1-70B: 80 layers, 8 KV heads of 128,
bf16), the link's datasheet or stated bandwidth, and the step-time function evaluated on
the work a lone request does; never from a simulated run of the same code path.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ridgeline.perf.estimate import decode_work, prefill_work
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.plan.families import VERDICTS
from ridgeline.plan.launch import launch_commands
from ridgeline.sim.cluster import ClusterConfig
from ridgeline.sim.engine import EngineConfig
from ridgeline.sim.event_loop import Workload, simulate
from ridgeline.sim.scenario import Built, Scenario
from ridgeline.sim.scenario_run import run_scenario

RIDGELINE = str(Path(sys.executable).with_name("ridgeline"))
MODEL = "llama-3.1-70b"
# Llama-3.1-70B's config.json: 80 layers, 8 KV heads, head_dim 8192 / 64 = 128; K and V in bf16
KV_BYTES_PER_TOKEN = 80 * 8 * 128 * 2 * 2          # 327,680 B
LLAMA_70B_PARAMS = 70_553_706_496                    # the checkpoint's parameter count
H100_NVLINK_BYTES_S = 450e9                          # NVLink 4, per direction per GPU
H100_LINK_LATENCY_S = 5e-6
NIC_BYTES_S = 50e9                                   # one 400 Gb/s NIC per GPU
H100_NETWORK_LATENCY_S = 10e-6                       # the h100-sxm file's network start-up


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})


def _sim_json(*args: str) -> dict:
    run = _cli("simulate", "--model", MODEL, "--hardware", "h100-sxm", "--json", *args)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.parametrize("link, extra, bandwidth_bytes_s, latency_s", [
    # 2 prefill x tp=4 + 1 decode x tp=8 = 16 GPUs: past one HGX board, so the network;
    # the 4 GPUs of the smaller worker send in parallel
    (None, [], 4 * NIC_BYTES_S, H100_NETWORK_LATENCY_S),
    ("network", [], 4 * NIC_BYTES_S, H100_NETWORK_LATENCY_S),
    # a stated 100 GB/s per transfer, and a stated 30 us on top of nothing else
    ("100", ["--kv-transfer-latency-us", "30"], 100e9, 30e-6),
])
def test_transfer_time_is_the_prompt_kv_over_the_link(
        link: str | None, extra: list[str], bandwidth_bytes_s: float, latency_s: float) -> None:
    prompt = 2000
    args = ["--rate", "0.5", "--requests", "12", "--prompt", f"fixed:{prompt}",
            "--output", "fixed:8", "--prefill-pool", "workers=2,tp=4",
            "--decode-pool", "workers=1,tp=8", *extra]
    if link is not None:
        args += ["--kv-link", link]
    doc = _sim_json(*args)
    kv = doc["pools"]["kv_transfer"]
    expected_ms = (latency_s + prompt * KV_BYTES_PER_TOKEN / bandwidth_bytes_s) * 1e3
    assert kv["kv_bytes_per_token"] == KV_BYTES_PER_TOKEN
    assert kv["transfers"] == 12
    assert kv["transfer_ms"]["mean"] == pytest.approx(expected_ms, rel=1e-9)
    assert kv["transfer_ms"]["max"] == pytest.approx(expected_ms, rel=1e-9)
    # 2 s between arrivals, a ~3 ms transfer: nothing waits for the link
    assert kv["link_wait_ms"]["max"] == 0.0


def test_nvlink_inside_one_board_and_fp8_kv_halves_the_bytes() -> None:
    prompt = 3000
    doc = _sim_json("--rate", "0.5", "--requests", "6", "--prompt", f"fixed:{prompt}",
                    "--output", "fixed:4", "--tp", "4", "--pd", "1:1", "--kv", "fp8")
    kv = doc["pools"]["kv_transfer"]
    assert kv["link"] == "nvlink"          # 8 GPUs: one HGX H100 board
    expected_s = H100_LINK_LATENCY_S + prompt * (KV_BYTES_PER_TOKEN / 2) / (
        4 * H100_NVLINK_BYTES_S)
    assert kv["transfer_ms"]["mean"] == pytest.approx(expected_s * 1e3, rel=1e-9)


def test_pools_in_json_and_text() -> None:
    doc = _sim_json("--rate", "2", "--requests", "40", "--prompt", "fixed:500",
                    "--output", "fixed:30", "--prefill-pool", "workers=2,tp=4,max-batch=32",
                    "--decode-pool", "workers=1,tp=8,max-batch=128")
    pools = doc["pools"]
    assert doc["gpus"] == 2 * 4 + 1 * 8 == pools["gpus"]
    assert pools["prefill"]["workers"] == 2 and pools["prefill"]["layout"] == "tp=4"
    assert pools["prefill"]["max_num_seqs"] == 32 and pools["prefill"]["gpus"] == 8
    assert pools["decode"]["workers"] == 1 and pools["decode"]["gpus_per_worker"] == 8
    assert pools["decode"]["max_num_seqs"] == 128
    for role in ("prefill", "decode"):
        assert 0 < pools[role]["utilisation"] <= 1
        assert pools[role]["mean_batch_size"] >= 1
    # a prefill worker only ever holds prompts: one sequence a step at 2 req/s of 500 tokens
    assert pools["prefill"]["mean_batch_size"] < 2
    assert doc["simulation"]["instances"] == ["prefill", "prefill", "decode"]
    text = _cli("simulate", "--model", MODEL, "--rate", "2", "--requests", "20",
                "--prompt", "fixed:500", "--output", "fixed:30", "--prefill-pool",
                "workers=2,tp=4", "--decode-pool", "workers=1,tp=8")
    assert text.returncode == 0, text.stderr
    assert "prefill pool: 2 workers x tp=4 (8 GPUs, 4 each)" in text.stdout
    assert "decode pool: 1 worker x tp=8 (8 GPUs, 8 each)" in text.stdout
    assert "GPUs: 16 in all" in text.stdout


def test_each_pool_holds_the_kv_its_memory_leaves() -> None:
    """KV tokens = (0.9 x memory - weights / TP - workspace - reserve) / (KV bytes / TP)
    per GPU, with the weights from the parameter count: the tp=8 decode pool holds about
    2.9x the tokens of the tp=4 prefill pool, not the same pool twice."""
    sc = Scenario(model=MODEL, hardware="h100-sxm", tp=8, pd=(1, 1), prefill_pool="tp=4",
                  requests=2, rate_req_s=1.0).validate()
    built = Built.of(sc)
    assert built.pool_engines is not None
    caps = {}
    for role, tp in (("prefill", 4), ("decode", 8)):
        cfg, sm = built.pool_engines[role]
        assert sm.parallel.tp == tp
        mem = sm.memory()
        hand = (0.9 * sm.hardware.memory_bytes - LLAMA_70B_PARAMS * 2 / tp
                - mem.workspace_bytes - mem.reserve_bytes) / (KV_BYTES_PER_TOKEN / tp)
        tokens = cfg.num_kv_blocks * cfg.block_size_tokens
        assert tokens == pytest.approx(hand, rel=1e-3), role
        caps[role] = tokens
    assert caps["decode"] / caps["prefill"] == pytest.approx(2.9, abs=0.05)


def test_one_request_at_a_time_is_prefill_plus_transfer_plus_decode_steps() -> None:
    """A closed loop of one user: nothing queues, so E2E = the prefill pool's step on the
    whole prompt + the transfer + (N - 1) decode-pool steps of batch 1, step j reading
    S + j - 1 cached tokens; the first token at the prefill step's end."""
    s_tok, n_tok = 1000, 20
    sc = Scenario(model=MODEL, hardware="h100-sxm", tp=8, requests=3, concurrency=1,
                  prompt=f"fixed:{s_tok}", output=f"fixed:{n_tok}", pd=(1, 1),
                  prefill_pool="tp=4", engine_costs=False).validate()
    res = run_scenario(sc).result
    pre = RooflineStepTime.from_names(model=MODEL, hardware="h100-sxm", tp=4)
    dec = RooflineStepTime.from_names(model=MODEL, hardware="h100-sxm", tp=8)
    prefill_s = float(pre.step_time_s(prefill_work(1, s_tok)))
    transfer_s = H100_NETWORK_LATENCY_S + s_tok * KV_BYTES_PER_TOKEN / (4 * NIC_BYTES_S)
    decode_s = sum(float(dec.step_time_s(decode_work(1, s_tok + j - 1)))
                   for j in range(1, n_tok))
    e2e = res.end_s - res.sent_s
    assert e2e == pytest.approx(np.full(3, prefill_s + transfer_s + decode_s), rel=1e-9)
    ttft = np.array([res.events_s(i)[0] - res.sent_s[i] for i in range(3)])
    assert ttft == pytest.approx(np.full(3, prefill_s), rel=1e-9)
    # the tp=4 prefill is slower than a tp=8 one would be: the pool's own layout was used
    assert prefill_s > float(dec.step_time_s(prefill_work(1, s_tok))) * 1.3


def test_transfers_queue_on_the_prefill_workers_link() -> None:
    """Two prompts prefilled in one step leave together; the link sends one at a time, so
    the second waits exactly the first's bytes / bandwidth."""
    bpt, bw, lat = 1000.0, 1e9, 1e-4
    wl = Workload(prompt_tokens=np.array([1000, 1000]), output_tokens=np.array([5, 5]),
                  arrival_s=np.array([0.0, 0.0]))
    model = RooflineStepTime.from_names(model="qwen2.5-0.5b", hardware="h100-sxm")
    cfg = EngineConfig(num_kv_blocks=10_000)
    for queue in (True, False):
        cl = ClusterConfig(pd=(1, 1), kv_bytes_per_token=bpt, link_bandwidth_bytes_s=bw,
                           kv_transfer_latency_s=lat, link_queue=queue)
        res = simulate(wl, cfg, model, cl)
        assert res.kv_transfer_wait_s is not None and res.kv_transfer_s is not None
        busy = 1000 * bpt / bw
        assert sorted(res.kv_transfer_wait_s) == pytest.approx([0.0, busy if queue else 0.0])
        assert res.kv_transfer_s == pytest.approx([lat + busy] * 2)
        first = [res.events_s(i)[0] for i in range(2)]
        second = [res.events_s(i)[1] for i in range(2)]
        assert first[0] == first[1]
        if queue:   # the later KV lands lat + 2 x busy after the prefill step's end
            assert max(second) > first[0] + lat + 2 * busy
            assert min(second) > first[0] + lat + busy and max(second) > min(second)
        else:       # both land together and decode in one batch
            assert second[0] == second[1] > first[0] + lat + busy


def test_link_queue_is_the_same_in_the_c_core_and_the_python_engine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    n = 1500
    wl = Workload(prompt_tokens=rng.integers(100, 4000, n),
                  output_tokens=rng.integers(1, 60, n),
                  arrival_s=np.cumsum(rng.exponential(1 / 150, n)))
    model = RooflineStepTime.from_names(model="qwen2.5-0.5b", hardware="h100-sxm")
    cfg = EngineConfig(num_kv_blocks=100_000)
    cl = ClusterConfig(router="least-outstanding", pd=(2, 3), kv_bytes_per_token=131072.0,
                       link_bandwidth_bytes_s=5e10, kv_transfer_latency_s=1e-4,
                       link_queue=True)
    got = simulate(wl, cfg, model, cl)
    monkeypatch.setenv("RIDGELINE_SIM_CORE", "python")
    ref = simulate(wl, cfg, model, cl)
    if got.core != "c":
        pytest.skip("the C engine core is not built here")
    assert ref.core == "python"
    assert np.array_equal(got.event_times_s, ref.event_times_s)
    assert np.array_equal(got.kv_transfer_wait_s, ref.kv_transfer_wait_s, equal_nan=True)
    assert float(np.nanmax(got.kv_transfer_wait_s)) > 0     # the queue was exercised


@pytest.mark.parametrize("spec, needle", [
    ("tp=3", "--prefill-pool: tp: got 3; allowed: a divisor of the 64 attention heads"),
    ("colour=red", "--prefill-pool: colour: unknown field; allowed: workers, tp, pp, ep, "
                   "attention-dp, max-batch, max-batched-tokens"),
    ("workers=0", "--prefill-pool: workers: got 0; allowed: greater than or equal to 1"),
    ("tp=four", "--prefill-pool: tp: got 'four'"),
    ("max-batch=2.5", "--prefill-pool: max-batch: got '2.5'"),
    ("tp=4,tp=8", "--prefill-pool: 'tp' given twice"),
    ("tp", "--prefill-pool: 'tp' is not key=value"),
])
def test_bad_pool_spec_is_one_error_line(spec: str, needle: str) -> None:
    run = _cli("simulate", "--model", MODEL, "--tp", "8", "--rate", "1", "--requests", "5",
               "--prefill-pool", spec)
    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), run.stderr
    assert needle in lines[0]


@pytest.mark.parametrize("args, needle", [
    (["--kv-link", "fast", "--pd", "1:1"], "--kv-link: got 'fast'; allowed: auto, nvlink, "
                                           "network or a bandwidth in GB/s"),
    (["--kv-link", "nvlink", "--pd", "2:1"], "--kv-link: nvlink, but the pools' 24 GPUs "
                                             "exceed one NVLink domain of 8"),
    (["--pd", "1:1", "--decode-pool", "workers=3"], "--decode-pool: workers=3 but --pd "
                                                    "gives 1"),
    (["--decode-pool", "tp=1"], "--decode-pool: "),     # 70B bf16 does not fit one H100
])
def test_bad_link_or_pool_count_is_one_error_line(args: list[str], needle: str) -> None:
    run = _cli("simulate", "--model", MODEL, "--tp", "8", "--rate", "1", "--requests", "5",
               *args)
    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), run.stderr
    assert needle in lines[0]


def test_launch_prints_each_pools_command() -> None:
    sc = Scenario(model=MODEL, tp=8, pd=(2, 1), prefill_pool="tp=4,max-batch=16",
                  prompt="fixed:1000", output="fixed:100").validate()
    vllm = launch_commands(sc)
    assert [(c.role, c.count, c.gpus) for c in vllm.commands] == [("prefill", 2, 4),
                                                                    ("decode", 1, 8)]
    pre, dec = (" ".join(c.argv) for c in vllm.commands)
    assert "--tensor-parallel-size 4 " in pre and "--max-num-seqs 16 " in pre
    assert "--tensor-parallel-size 8 " in dec and "--max-num-seqs 256 " in dec
    for text in (pre, dec):
        assert '--kv-transfer-config {"kv_connector":"NixlConnector","kv_role":"kv_both"}' \
            in text
    assert "# 2 prefill instances of 4 GPUs" in vllm.text()
    sgl = launch_commands(sc.replace(engine="sglang"))
    pre, dec = (" ".join(c.argv) for c in sgl.commands)
    assert "--tp-size 4 " in pre and "--disaggregation-mode prefill" in pre
    assert "--tp-size 8 " in dec and "--disaggregation-mode decode" in dec


def test_launch_of_an_attention_dp_decode_pool() -> None:
    """8 attention-DP ranks of tp=1 (8 GPUs): SGLang's --dp-size 8 --enable-dp-attention
    inside --tp-size 8 with the request limit of all ranks; vLLM's 8 data-parallel ranks of
    1 GPU, each scheduling its own 64."""
    sc = Scenario(model="deepseek-v3", hardware="h200", tp=8, weights="fp8", pd=(1, 2),
                  decode_pool="tp=1,ep=8,attention-dp=8,max-batch=64",
                  prompt="fixed:1000", output="fixed:100").validate()
    dec = " ".join(launch_commands(sc.replace(engine="sglang")).commands[1].argv)
    assert "--tp-size 8 " in dec and "--ep-size 8 " in dec
    assert "--dp-size 8 --enable-dp-attention" in dec and "--max-running-requests 512" in dec
    vllm = launch_commands(sc).commands[1]
    dec = " ".join(vllm.argv)
    assert vllm.gpus == 8 and vllm.count == 2
    assert "--tensor-parallel-size 1 " in dec and "--data-parallel-size 8 " in dec
    assert "--max-num-seqs 64 " in dec and "--enable-expert-parallel" in dec


def test_plan_tries_a_prefill_pool_at_another_tp() -> None:
    run = _cli("plan", "--model", MODEL, "--hardware", "h100-sxm", "--tp", "4,8",
               "--rate", "4", "--slo", "ttft_ms<=2000", "--slo", "tpot_ms<=60",
               "--max-num-seqs", "128", "--max-num-batched-tokens", "8192",
               "--requests", "150", "--prompt", "fixed:2000", "--output", "fixed:200",
               "--max-gpus", "32", "--json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    rows = {r["family"]: r for r in doc["families"]}
    mixed = rows["llama-3.1-70b on h100-sxm, bf16, P/D prefill tp=4 + decode tp=8"]
    assert mixed["verdict"] in ("chosen", "tie", "cost", "slo")
    assert mixed["shape"].startswith("pd=") and "(prefill tp=4, decode tp=8)" in mixed["shape"]
    # within the GPUs of the colocated replicas it was sized against (n x 8)
    assert mixed["gpus"] % 4 == 0 and mixed["gpus"] <= 32
    other = rows["llama-3.1-70b on h100-sxm, bf16, P/D prefill tp=8 + decode tp=4"]
    assert other["verdict"] in VERDICTS and other["reason"]
    assert math.isfinite(mixed["usd_per_hour"])
