"""Attention data-parallelism with expert parallelism, and groups wider than the NVLink domain.

Every expected number here is computed by hand from the model's configuration (hidden size,
heads, experts, top-k), the datasheet values of the hardware file, or copied from NVIDIA's
measured MoE kernel tables (tests/data/aic_kernels/moe_ep_rows.csv, see its README); none is
ridgeline's own output.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ridgeline.errors import RidgelineError
from ridgeline.perf import kernels
from ridgeline.perf.memory import plan_memory, weight_bytes_per_gpu
from ridgeline.perf.ops import VAR, WORK_VARS, build_table
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.step_time import BatchWork
from ridgeline.plan.launch import launch_commands
from ridgeline.sim.scenario import Scenario
from ridgeline.specs import load_hardware, load_model
from ridgeline.specs.parallel import Layout, Parallelism, resolve_layout
from ridgeline.specs.precision import resolve_precision

RIDGELINE = Path(sys.executable).with_name("ridgeline")
EP_ROWS = Path(__file__).parents[1] / "data" / "aic_kernels" / "moe_ep_rows.csv"

# Qwen3-30B-A3B's configuration (its config.json): hidden 2048, 32 query heads, 4 KV heads of
# 128, 48 layers, all MoE, 128 experts of intermediate 768, top-8.
D, HQ, HKV, HD, L, E, K, FF = 2048, 32, 4, 128, 48, 128, 8, 768
BF16 = 2.0


def _qwen() -> tuple[object, object]:
    return load_model("qwen3-30b-a3b"), resolve_precision("bf16")


def _row(table: object, name: str) -> int:
    return table.names.index(name)  # type: ignore[attr-defined]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(RIDGELINE), *args], capture_output=True, text=True, timeout=300)


# --- the per-rank operators ------------------------------------------------------------------
def test_attention_runs_on_one_ranks_share_and_reads_its_weights_in_full() -> None:
    model, pr = _qwen()
    a = 4
    t = build_table(model, pr, Parallelism(tp=1, ep=4, attn_dp=a), 1.0, 0.0)
    j = _row(t, "qkv_proj")
    qkv_out = HQ * HD + 2 * HKV * HD
    # FLOPs per instance token: 2 d (q + k + v) per layer, on 1/attn_dp of the tokens.
    assert t.flops[j, VAR["n"]] == pytest.approx(L * 2 * D * qkv_out / a)
    # Activations in and out on the rank's tokens; the weights once per step, all of them.
    assert t.bytes[j, VAR["n"]] == pytest.approx(L * (D + qkv_out) * BF16 / a)
    assert t.bytes[j, VAR["any"]] == pytest.approx(L * D * qkv_out * BF16)
    jd = _row(t, "attn_decode")
    # Decode reads each of its sequences' K and V (4 heads of 128, bf16) once per layer.
    assert t.bytes[jd, VAR["dc"]] == pytest.approx(L * 2 * HKV * HD * BF16 / a)
    assert t.flops[jd, VAR["dc"]] == pytest.approx(L * 4 * HQ * HD / a)


def test_routed_experts_split_over_ep_gpus_with_their_full_width() -> None:
    model, pr = _qwen()
    ep = 4
    t = build_table(model, pr, Parallelism(tp=1, ep=ep, attn_dp=4), 1.0, 0.0)
    gu, dn = _row(t, "experts_gate_up"), _row(t, "experts_down")
    # k/ep routed pairs per token on each GPU, each over the expert's whole matrices.
    assert t.flops[gu, VAR["n"]] == pytest.approx(L * 2 * (K / ep) * D * 2 * FF)
    assert t.flops[dn, VAR["n"]] == pytest.approx(L * 2 * (K / ep) * FF * D)
    # Weight bytes per touched expert (on this GPU): the whole expert, not a TP slice.
    assert t.bytes[gu, VAR["u"]] + t.bytes[dn, VAR["u"]] == pytest.approx(L * 3 * D * FF * BF16)
    assert t.out_dims[gu] == 2 * FF
    # tp=2 x attn_dp=2 over ep=2: each expert is split 2 ways.
    t2 = build_table(model, pr, Parallelism(tp=2, ep=2, attn_dp=2), 1.0, 0.0)
    assert t2.out_dims[_row(t2, "experts_gate_up")] == FF


def test_touched_experts_are_counted_among_the_gpus_own() -> None:
    sm = RooflineStepTime.from_names("qwen3-30b-a3b", "h100-sxm", weights="bf16", tp=1, ep=8,
                                     attn_dp=8)
    n = 64
    v, _ = sm.work_vars(BatchWork(decode_seqs=n, decode_context_tokens=n * 1000))
    # E/ep experts on the GPU, each missed by one token with probability 1 - k/E.
    assert v[VAR["u"], 0] == pytest.approx((E / 8) * (1 - (1 - K / E) ** n))


def test_all_to_all_dispatch_and_combine_bytes_by_hand() -> None:
    model, pr = _qwen()
    ep, lat_s, bw = 4, 7e-6, 1.0e11
    t = build_table(model, pr, Parallelism(tp=1, ep=ep, attn_dp=ep,
                                           ep_comm="deepep_high_throughput"), 1.0, 0.0,
                    collectives=lambda kind, p: None if kind.startswith("deepep_")
                    else (lat_s, bw))
    # No DeepEP kernels measured: two all-to-alls per MoE layer over the link, as DeepEP
    # sends them: each of a GPU's n/p tokens goes
    # once, as a d-wide bf16 row, to each of the other 3 ranks holding one of its 8 experts
    # (a rank's 32 of 128 are all missed with probability C(96, 8) / C(128, 8)).
    remote_ranks = (ep - 1) * (1 - math.comb(96, 8) / math.comb(128, 8))
    assert remote_ranks == pytest.approx(2.7218, abs=1e-4)  # fewer than k (p-1)/p = 6 pairs
    per_token_s = 2 * L * remote_ranks * D * BF16 / ep / bw
    assert t.comm_s[VAR["n"]] == pytest.approx(per_token_s)
    assert t.comm_s[VAR["any"]] == pytest.approx(2 * L * lat_s)
    # tp = 1: no TP all-reduce on top.
    t1 = build_table(model, pr, Parallelism(tp=1, ep=1, attn_dp=1), 1.0, 0.0,
                     collectives=lambda kind, p: (lat_s, bw))
    assert t1.comm_s[VAR["n"]] == 0.0


def test_the_step_lasts_as_long_as_the_busiest_rank() -> None:
    sm = RooflineStepTime.from_names("qwen3-30b-a3b", "h100-sxm", weights="bf16", tp=1, ep=8,
                                     attn_dp=8)
    ctx = 2000.0
    # 60 sequences over 8 ranks: the busiest holds ceil(60/8) = 8, as at 64 sequences.
    t60 = sm.step_time_s(BatchWork(decode_seqs=60, decode_context_tokens=60 * ctx))
    t64 = sm.step_time_s(BatchWork(decode_seqs=64, decode_context_tokens=64 * ctx))
    t56 = sm.step_time_s(BatchWork(decode_seqs=56, decode_context_tokens=56 * ctx))
    assert t60 == pytest.approx(t64, rel=1e-12)
    assert t56 < t60


# --- memory ------------------------------------------------------------------------------------
def test_experts_divide_over_the_instance_and_attention_is_replicated_per_rank() -> None:
    model, pr = _qwen()
    one = weight_bytes_per_gpu(model, pr, Parallelism(tp=1))
    wide = weight_bytes_per_gpu(model, pr, Parallelism(tp=1, ep=8, attn_dp=8))
    # Only the routed experts shrink: 7/8 of 128 experts x 3 d I bf16 weights x 48 layers.
    assert one - wide == pytest.approx(7 / 8 * E * 3 * D * FF * BF16 * L)
    hw = load_hardware("h100-sxm")
    plan = plan_memory(model, hw, pr, Parallelism(tp=1, ep=8, attn_dp=8))
    per_rank = math.floor((0.9 * hw.memory_bytes - plan.weight_bytes - plan.workspace_bytes
                           - plan.reserve_bytes) / (L * 2 * HKV * HD * BF16))
    assert plan.kv_capacity_tokens == 8 * per_rank


# --- the layout flags ------------------------------------------------------------------------
def test_engine_flags_map_to_the_layout() -> None:
    ds, dense = load_model("deepseek-v3"), load_model("llama-3.1-8b")
    assert resolve_layout(ds, data_parallel_size=8, enable_expert_parallel=True) == \
        Layout(tp=1, ep=8, attn_dp=8, replicas=1)
    assert resolve_layout(ds, tp=2, data_parallel_size=4, enable_expert_parallel=True) == \
        Layout(tp=2, ep=8, attn_dp=4, replicas=1)
    assert resolve_layout(ds, tp=8, dp=8, ep=8, enable_dp_attention=True) == \
        Layout(tp=1, ep=8, attn_dp=8, replicas=1)
    assert resolve_layout(dense, data_parallel_size=4) == Layout(tp=1, ep=1, attn_dp=1,
                                                                 replicas=4)


def test_estimate_reads_vllms_flags_and_shows_the_layout() -> None:
    out = _cli("estimate", "--model", "deepseek-v3", "--hardware", "h200", "--weights",
               "fp8_block", "--batch", "64", "--prompt", "1024", "--output", "1024",
               "--data-parallel-size", "8", "--enable-expert-parallel", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["config"]["parallelism"] == {"tp": 1, "pp": 1, "ep": 8, "dp": 1, "attn_dp": 8,
                                            "gpus_per_instance": 8}
    # vLLM's start-up line is one rank's; the instance holds eight ranks' KV.
    per_rank = doc["vllm_kv_log"]["kv_cache_tokens"]
    assert abs(doc["result"]["kv_capacity_tokens"] - 8 * per_rank) <= 8 * 16
    text = _cli("estimate", "--model", "deepseek-v3", "--hardware", "h200", "--weights",
                "fp8_block", "--batch", "64", "--tp", "8", "--dp", "8",
                "--enable-dp-attention", "--ep-size", "8")
    assert text.returncode == 0, text.stderr
    assert "h200 x8" in text.stdout and "tp=1 pp=1 attention-dp=8 ep=8" in text.stdout


def test_dense_models_data_parallel_size_is_replicas() -> None:
    out = _cli("estimate", "--model", "llama-3.1-8b", "--data-parallel-size", "4", "--json")
    assert out.returncode == 0, out.stderr
    par = json.loads(out.stdout)["config"]["parallelism"]
    assert (par["dp"], par["attn_dp"], par["gpus_per_instance"]) == (4, 1, 1)


@pytest.mark.parametrize(("args", "start"), [
    (["--model", "qwen3-30b-a3b", "--attention-dp", "4", "--ep", "3"],
     "error: ep: got 3; allowed: a divisor of tp x attention-dp = 4"),
    (["--model", "llama-3.1-8b", "--attention-dp", "2"], "error: attention-dp: got 2; allowed: 1"),
    (["--model", "deepseek-v3", "--tp", "8", "--dp", "3", "--enable-dp-attention"],
     "error: --dp: got 3 with --enable-dp-attention"),
    (["--model", "qwen3-30b-a3b", "--attention-dp", "2", "--data-parallel-size", "2"],
     "error: --data-parallel-size: got it with --attention-dp"),
    (["--model", "llama-3.1-8b", "--enable-expert-parallel"],
     "error: --enable-expert-parallel: got it for"),
    (["--model", "qwen3-30b-a3b", "--hardware", "mi300x", "--weights", "fp8",
      "--attention-dp", "16", "--ep", "16"],
     "error: --ep: got 16; allowed: at most 8 on mi300x"),
])
def test_bad_layouts_are_one_error_line(args: list[str], start: str) -> None:
    out = _cli("estimate", *args)
    assert out.returncode == 2, out.stdout
    assert out.stderr.strip().startswith(start), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_simulate_batches_every_ranks_sequences_in_one_step() -> None:
    base = ["simulate", "--model", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--weights",
            "bf16", "--concurrency", "32", "--max-num-seqs", "4", "--requests", "64",
            "--prompt", "fixed:200", "--output", "fixed:20", "--json"]
    dp = _cli(*base, "--data-parallel-size", "8", "--enable-expert-parallel")
    assert dp.returncode == 0, dp.stderr
    doc = json.loads(dp.stdout)
    assert doc["parallelism"]["attn_dp"] == 8 and doc["parallelism"]["ep"] == 8
    # max_num_seqs is per rank: 8 ranks x 4 run the 32 users at once.
    assert doc["simulation"]["mean_batch_size"] > 4.0
    assert doc["simulation"]["mean_batch_size"] <= 32.0
    tp = json.loads(_cli(*base, "--tp", "8").stdout)
    assert tp["simulation"]["mean_batch_size"] <= 4.0


# --- beyond the NVLink domain ----------------------------------------------------------------
def test_wide_ep_crosses_nodes_at_the_network_bandwidth() -> None:
    hw = load_hardware("h200")
    # DGX H200: one ConnectX-7 400 Gb/s NIC per GPU.
    assert hw.network_bandwidth_bytes_s == 400e9 / 8
    sm = RooflineStepTime.from_names("deepseek-v3", "h200", weights="fp8_block", tp=1, ep=16,
                                     attn_dp=16, ep_comm="deepep_high_throughput")
    prof = kernels.load_profile("h200")
    lat_s, bw = prof.collective("all_to_all", 16, hw.interconnect_bandwidth_bytes_s, hw)
    assert bw <= 50e9
    ds = load_model("deepseek-v3")
    b_a = sm.precision.activation_bytes
    # Each token to the 15 other ranks holding one of its 8 experts (16 of 256 per rank), in
    # fp8 (the block-fp8 experts take fp8) and back in 16 bits; the DeepEP kernels were
    # measured inside one 8-GPU domain, so the network all-to-all times it.
    remote_ranks = 15 * (1 - math.comb(240, 8) / math.comb(256, 8))
    want = ds.num_moe_layers * remote_ranks * 7168 * (1 + 2) / 16 / bw
    assert sm.table.comm_s[VAR["n"]] == pytest.approx(want)
    # vLLM's default gathers every token to all 16 ranks and reduce-scatters the outputs back.
    ag = RooflineStepTime.from_names("deepseek-v3", "h200", weights="fp8_block", tp=1, ep=16,
                                     attn_dp=16)
    _, bw_g = prof.collective("all_gather", 16, hw.interconnect_bandwidth_bytes_s, hw)
    _, bw_s = prof.collective("reduce_scatter", 16, hw.interconnect_bandwidth_bytes_s, hw)
    assert max(bw_g, bw_s) <= 50e9
    want = ds.num_moe_layers * 15 / 16 * 7168 * (b_a / bw_g + 2 / bw_s)
    assert ag.table.comm_s[VAR["n"]] == pytest.approx(want)
    assert sm.table.comm_s[VAR["any"]] == pytest.approx(2 * ds.num_moe_layers * lat_s)
    assert any("inter-node" in a and "50 GB/s" in a for a in sm.assumptions())


def test_tp_beyond_a_node_is_costed_over_the_network_on_the_command_line() -> None:
    out = _cli("estimate", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--tp", "16",
               "--assumptions")
    assert out.returncode == 0, out.stderr
    assert "h100-sxm x16" in out.stdout
    assert "inter-node: tp=16 spans more than the 8-GPU NVLink domain" in out.stdout


def test_no_network_bandwidth_still_refuses() -> None:
    with pytest.raises(RidgelineError, match=r"--tp: got 16; allowed: at most 8 on mi300x"):
        RooflineStepTime.from_names("llama-3.1-70b", "mi300x", tp=16)


# --- the launch lines ------------------------------------------------------------------------
def test_launch_lines_carry_each_engines_attention_dp_flags() -> None:
    sc = Scenario(model="deepseek-v3", hardware="h200", weights="fp8", tp=1, ep=8, attn_dp=8,
                  prompt="fixed:1000", output="fixed:200", max_num_seqs=64)
    vllm = " ".join(launch_commands(sc).commands[0].argv)
    assert "--tensor-parallel-size 1" in vllm
    assert "--data-parallel-size 8" in vllm and "--enable-expert-parallel" in vllm
    assert "--max-num-seqs 64" in vllm  # per DP rank, as vLLM reads it
    sg = " ".join(launch_commands(sc.replace(engine="sglang")).commands[0].argv)
    assert "--tp-size 8" in sg and "--dp-size 8" in sg and "--enable-dp-attention" in sg
    assert "--ep-size 8" in sg
    trt = launch_commands(sc.replace(engine="trtllm")).commands[0]
    assert "--tp_size 8" in " ".join(trt.argv) and "--ep_size 8" in " ".join(trt.argv)
    assert "--enable_attention_dp" in trt.argv
    assert launch_commands(sc).gpus_per_instance == 8


def test_plan_searches_attention_dp_layouts_for_moe_models() -> None:
    out = _cli("plan", "--model", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--weights",
               "bf16", "--tp", "2", "--rate", "2", "--requests", "100", "--prompt",
               "fixed:500", "--output", "fixed:50", "--slo", "tpot_ms:200",
               "--max-num-seqs", "64", "--max-num-batched-tokens", "4096", "--no-pd")
    assert out.returncode == 0, out.stderr
    assert "qwen3-30b-a3b on h100-sxm, bf16, tp=1, attention-dp=2, ep=2" in out.stdout


# --- the measured expert-parallel MoE rows -----------------------------------------------------
MODELS = {(7168, 2048, 256, 8): "deepseek-v3", (2048, 768, 128, 8): "qwen3-30b-a3b"}
DTYPES = {"fp8_block": ("fp8", 1.0, 1978.9e12), "bfloat16": ("bf16", 2.0, 989.4e12)}
BANDWIDTH = {"h200": 4.8e12, "h100-sxm": 3.35e12}


def _ep_rows() -> list[dict[str, str]]:
    with EP_ROWS.open() as f:
        return list(csv.DictReader(f))


def _ep_layer_s(row: dict[str, str]) -> float:
    d, inter, e, k, ep, tokens = (int(row[c]) for c in (
        "hidden_size", "inter_size", "num_experts", "topk", "moe_ep_size", "num_tokens"))
    model = load_model(MODELS[(d, inter, e, k)])
    weights, b_w, peak = DTYPES[row["dtype"]]
    pr = resolve_precision(weights, None, weights)
    if row["dtype"] == "fp8_block":
        pr = resolve_precision("fp8_block", None, "fp8")
    hw = load_hardware(row["hardware"])
    t = build_table(model, pr, Parallelism(tp=1, ep=ep, attn_dp=ep), 1.0, 0.0)
    comp, mem = kernels.time_rows(t, hw, pr, kernels.load_profile(row["hardware"], row["engine"]))
    u = (e / ep) * (1 - (1 - k / e) ** tokens)
    x = np.zeros(len(WORK_VARS))
    x[VAR["n"]], x[VAR["any"]], x[VAR["u"]] = tokens, 1.0, u
    out = sum(max(float(comp[j] @ x), float(mem[j] @ x)) / t.layers[j]
              for j in (_row(t, n) for n in ("experts_gate_up", "experts_act", "experts_down")))
    # Never below the roofline of the GPU's own work, by hand: k/ep pairs per token at
    # 2 x 3 d I FLOPs, u whole experts read.
    roof = max(2 * tokens * k / ep * 3 * d * inter / peak,
               u * 3 * d * inter * b_w / BANDWIDTH[row["hardware"]])
    assert out >= roof
    return out


def test_ep_moe_layer_lands_near_the_measured_rows() -> None:
    rows = _ep_rows()
    assert len(rows) == 60
    ratios = [_ep_layer_s(r) / (float(r["latency_ms"]) * 1e-3) for r in rows]
    assert all(0.5 <= q <= 2.0 for q in ratios)
    # Median |error| over the 60 rows (measured: about 7%).
    assert float(np.median(np.abs(np.array(ratios) - 1.0))) <= 0.12


# --- serve ---------------------------------------------------------------------------------------
def test_serve_emulates_one_instance_of_every_ranks_kv() -> None:
    refused = _cli("serve", "--model", "llama-3.1-8b", "--data-parallel-size", "2",
                   "--port", "0")
    assert refused.returncode == 2
    assert refused.stderr.strip().startswith("error: --data-parallel-size: got 2; allowed: 1")
    est = _cli("estimate", "--model", "qwen3-30b-a3b", "--weights", "bf16", "--attention-dp",
               "2", "--ep", "2", "--json")
    per_rank = json.loads(est.stdout)["vllm_kv_log"]["kv_cache_tokens"]
    proc = subprocess.Popen([str(RIDGELINE), "serve", "--model", "qwen3-30b-a3b", "--weights",
                             "bf16", "--attention-dp", "2", "--ep", "2", "--port", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert line.startswith("ridgeline serve: qwen3-30b-a3b on h100-sxm x2 (tp=1 pp=1 "
                           "attention-dp=2 ep=2)"), line
    capacity = int(line.split("KV capacity ")[1].split(" tokens")[0])
    # Two ranks' KV (vLLM's start-up line is one rank's), in whole 16-token blocks.
    assert abs(capacity - 2 * per_rank) <= 2 * 16
