"""The expert-parallel MoE runtime: the experts each GPU holds, the attention-DP share of the
fitted per-sequence and per-head attention constants, and the all-to-all as DeepEP sends it.

Expected numbers are computed by hand from the model's configuration (Qwen3-30B-A3B's and
DeepSeek-V3's config.json), the hardware file's datasheet values, and the fitted constants
read straight from the catalog JSON (the fit's data, not ridgeline's output).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from ridgeline.perf.measured_kernels import measured_expert_rows
from ridgeline.perf.ops import VAR, WORK_VARS, build_table
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.step_time import BatchWork
from ridgeline.specs import load_hardware, load_model
from ridgeline.specs.parallel import Parallelism
from ridgeline.specs.precision import resolve_precision

RIDGELINE = Path(sys.executable).with_name("ridgeline")
# Qwen3-30B-A3B: hidden 2048, 32 query heads, 4 KV heads of 128, 48 layers (all MoE), 128
# experts of intermediate 768, top-8.
D, HQ, HKV, HD, L, E, K, FF = 2048, 32, 4, 128, 48, 128, 8, 768


def _catalog(name: str) -> dict:
    return json.loads(resources.files("ridgeline.specs").joinpath("data", name).read_text())


# --- the experts each GPU holds --------------------------------------------------------------
@pytest.mark.parametrize(("model", "ep", "attn_dp", "held", "miss"), [
    ("qwen3-30b-a3b", 8, 8, 128 / 8, 1 - 8 / 128),
    ("qwen3-30b-a3b", 1, 1, 128.0, 1 - 8 / 128),
    ("deepseek-v3", 8, 8, 256 / 8, 1 - 8 / 256),
    ("llama-3.1-8b", 1, 1, 0.0, 1.0),
])
def test_the_op_table_knows_the_experts_each_gpu_holds(model: str, ep: int, attn_dp: int,
                                                       held: float, miss: float) -> None:
    spec = load_model(model)
    t = build_table(spec, resolve_precision("bf16"), Parallelism(tp=1, ep=ep, attn_dp=attn_dp),
                    1.0, 0.0)
    assert t.experts_per_gpu == pytest.approx(held)
    assert t.expert_miss == pytest.approx(miss)


def test_touched_experts_are_the_held_ones_a_steps_tokens_reach() -> None:
    # DeepSeek-V3 on 8 GPUs, EP 8: 32 experts held; 64 tokens of the whole step, each
    # missing a given expert with probability 1 - 8/256.
    sm = RooflineStepTime.from_names("deepseek-v3", "h200", weights="fp8_block", tp=1, ep=8,
                                     attn_dp=8)
    v, _ = sm.work_vars(BatchWork(decode_seqs=64, decode_context_tokens=64 * 1000))
    assert v[VAR["u"], 0] == pytest.approx(32 * (1 - (1 - 8 / 256) ** 64))
    # Not a 1/ep share of a count that saturates at E: at one token, k/ep = 1 expert.
    v1, _ = sm.work_vars(BatchWork(decode_seqs=8, decode_context_tokens=8 * 1000))
    assert v1[VAR["u"], 0] == pytest.approx(32 * (1 - (1 - 8 / 256) ** 8))


def test_a_fitted_cost_per_held_expert_is_priced_on_e_over_ep() -> None:
    hw = load_hardware("h200")
    fit = _catalog("kernels_measured_gemm_moe.json")["moe"]["h200_sxm"]["vllm"]["bf16"]
    var = dict(VAR)
    nv = len(WORK_VARS)
    f, d = np.zeros(nv), np.zeros(nv)
    f[var["n"]] = 2.0 * K * D * 2 * FF
    d[var["n"]] = K * (D + 2 * FF) * 2.0
    d[var["u"]] = D * 2 * FF * 2.0
    base = measured_expert_rows((fit, "", "bf16"), f, d, D, 2 * FF, L, hw, var, 16.0)
    with_held = measured_expert_rows(({**fit, "local_expert_us": 0.3}, "", "bf16"), f, d, D,
                                     2 * FF, L, hw, var, 16.0)
    # 0.3 us per held expert per layer, 16 held, 48 layers; half on each of the two grouped
    # GEMMs, on both rows (it adds outside the max).
    want = 0.5 * 0.3e-6 * 16 * L
    for a, b in zip(base, with_held, strict=True):
        assert b[var["any"]] - a[var["any"]] == pytest.approx(want)
        assert np.delete(b - a, var["any"]) == pytest.approx(np.zeros(nv - 1))


# --- the attention-DP share of the fitted attention constants -------------------------------
def _attention(attn_dp: int) -> RooflineStepTime:
    return RooflineStepTime.from_names("qwen3-30b-a3b", "h200", weights="bf16", tp=1,
                                       ep=attn_dp, attn_dp=attn_dp)


def test_decode_per_sequence_and_head_costs_are_one_ranks_share() -> None:
    a = 4
    sm = _attention(a)
    j = sm.table.names.index("attn_decode")
    c = _catalog("kernels_measured_attention_comm.json")
    fit = c["gpus"]["h200_sxm"]["engines"]["vllm"]["decode"]["bfloat16"]
    hw = load_hardware("h200")
    prof = sm.kernel_profile
    assert prof is not None
    e_b = fit["bandwidth_efficiency"] * prof.measured_decode_scale  # grouped: 8 q per kv head
    kv_tok = 2 * HKV * HD * 2.0 * L / a  # one rank's share of a sequence's KV bytes per token
    # Per sequence: the fitted per-sequence and per-(sequence x KV head) microseconds on a
    # rank's 1/a of the sequences, plus one more KV token's read (the new token's write).
    per_seq_s = (fit["per_seq_us"] + fit["per_seq_kv_head_us"] * HKV) * 1e-6 * L / a
    want = per_seq_s + kv_tok / (hw.memory_bandwidth_bytes_s * e_b)
    mem = sm._stack[sm._n_ops:]
    assert mem[j, VAR["dq"]] == pytest.approx(want, rel=1e-9)


def test_prefill_per_pair_and_token_head_costs_are_one_ranks_share() -> None:
    a = 4
    sm = _attention(a)
    j = sm.table.names.index("attn_prefill")
    fit = _catalog("kernels_measured_attention_comm.json")["gpus"]["h200_sxm"]["engines"][
        "vllm"]["prefill"]["bfloat16"]
    c16 = load_hardware("h200").peak("bf16")
    per_pair_flops = 4 * HQ * HD * L / a
    want_pairs = per_pair_flops / (c16 * fit["compute_efficiency"]) \
        + fit["ps_per_pair_head"] * 1e-12 * HQ * L / a
    want_pt = fit["key_waste_per_new_token"] * per_pair_flops / (c16 * fit["compute_efficiency"]) \
        + fit["ps_per_token_head"] * 1e-12 * HQ * L / a
    comp = sm._stack[:sm._n_ops]
    assert comp[j, VAR["pairs"]] == pytest.approx(want_pairs, rel=1e-9)
    assert comp[j, VAR["pt"]] == pytest.approx(want_pt, rel=1e-9)


def test_a_ranks_attention_costs_what_it_costs_alone() -> None:
    # 4 ranks of 16 sequences each take as long in attention as one GPU with 16 sequences.
    one, four = _attention(1), _attention(4)
    for name, work in (("attn_decode", lambda b: BatchWork(decode_seqs=b,
                                                           decode_context_tokens=b * 3000)),
                       ("attn_prefill", lambda b: BatchWork(
                           prefill_tokens=b * 512, prefill_attn_pairs=b * 512 * 513 / 2,
                           prefill_seqs=b))):
        j = one.table.names.index(name)
        t1 = float(one.breakdown(work(16)).time_s[j])
        t4 = float(four.breakdown(work(64)).time_s[j])
        assert t4 == pytest.approx(t1, rel=1e-9)


def _ops(tmp_path: Path, name: str, *args: str) -> dict[str, dict[str, float]]:
    out = tmp_path / f"{name}.json"
    with out.open("w") as f:
        proc = subprocess.run([str(RIDGELINE), "estimate", "qwen3-30b-a3b", "-g", "h200",
                               "--weights", "bf16", "-p", "2048", "-o", "512", "--ops",
                               "--json", *args], stdout=f, stderr=subprocess.PIPE, text=True,
                              timeout=300)
    assert proc.returncode == 0, proc.stderr
    ops = json.loads(out.read_text())["ops"]
    return {phase: {o["op"]: o["time_s"] for o in ops[phase]} for phase in ("prefill",
                                                                            "decode")}


def test_estimate_prices_each_attention_rank_as_one_gpu_alone(tmp_path: Path) -> None:
    # 64 sequences over 4 attention ranks: each rank's attention kernels run 16 sequences,
    # as one GPU serving 16 does (the same context, the same heads per GPU).
    alone = _ops(tmp_path, "alone", "-b", "16")
    ranks = _ops(tmp_path, "ranks", "-b", "64", "--attention-dp", "4", "--ep", "4")
    for phase, op in (("decode", "attn_decode"), ("prefill", "attn_prefill")):
        assert ranks[phase][op] == pytest.approx(alone[phase][op], rel=1e-6)


def test_estimate_states_deepseek_v3s_ep8_layout_and_dispatch(tmp_path: Path) -> None:
    out = tmp_path / "estimate.txt"
    with out.open("w") as f:
        proc = subprocess.run([str(RIDGELINE), "estimate", "deepseek-v3", "-g", "h200", "--tp",
                               "1", "--attention-dp", "8", "--ep", "8", "--assumptions",
                               "--all2all-backend", "deepep_high_throughput"],
                              stdout=f, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    # 256 experts over 8 GPUs; a token's 8 experts miss one rank's 32 with probability
    # C(224, 8) / C(256, 8), so it reaches 7 (1 - that) = 4.63 of the other 7 ranks.
    remote = 7 * (1 - math.comb(224, 8) / math.comb(256, 8))
    assert f"{remote:.3g}" == "4.63"
    assert "32 of 256 experts per GPU" in text
    assert f"the r = {remote:.3g} remote ranks holding one of its k=8 experts" in text
    assert "dispatch + combine x58 (MoE layers, deepep_high_throughput)" in text  # 58 layers
