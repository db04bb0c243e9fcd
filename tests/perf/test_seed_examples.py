"""The seeds' worked examples this capability covers, to the digits they print.

The system-model chapter (throughput/latency), the performance-math chapter (GEMM
roofline table, m at the ridge, KV-per-token capacity example) and the metrics chapter (metrics and
bottlenecks: decode intensity ~1 FLOP/byte, ridge ~295, E2E = TTFT + TPOT (N-1)).
The serving-math examples (Little, M/M/1, Amdahl, fan-out) live in
tests/theory/test_seed_examples_serving.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from ridgeline.perf.estimate import estimate, model_constants
from ridgeline.perf.moe import expected_unique_experts
from ridgeline.perf.roofline import (
    attainable_flops,
    gemm_intensity,
    linear_batch_turning_point,
    m_at_ridge,
    ridge_point,
)
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.step_time import BatchWork, LinearStepTime
from ridgeline.specs import load_hardware, load_model, resolve_precision

SEED_PEAK, SEED_BW = 989e12, 3.35e12  # the performance-math chapter's H100 numbers


def test_aggregate_vs_per_sequence_tokens_per_s() -> None:
    """Definitions: B=32, t=20 ms -> 1600 tokens/s aggregate, 50 per sequence (32x apart)."""
    step = LinearStepTime(per_decode_seq_s=0.020 / 32)
    r = estimate(step, batch=32, prompt_tokens=100, output_tokens=10, details=False)
    assert r["tpot_s"] == pytest.approx(0.020)
    assert r["decode_aggregate_tok_s"] == pytest.approx(1600.0)
    assert r["per_sequence_tok_s"] == pytest.approx(50.0)


def test_e2e_is_ttft_plus_tpot_times_n_minus_1() -> None:
    """The metrics chapter: TTFT 500 ms, TPOT 40 ms -> 1260 ms for 20 tokens, 32460 ms for 800."""
    step = LinearStepTime(per_prefill_token_s=0.5 / 1000, per_decode_seq_s=0.040)
    short = estimate(step, batch=1, prompt_tokens=1000, output_tokens=20, details=False)
    long = estimate(step, batch=1, prompt_tokens=1000, output_tokens=800, details=False)
    assert short["ttft_s"] == pytest.approx(0.5)
    assert short["e2e_s"] * 1e3 == pytest.approx(1260.0)
    assert long["e2e_s"] * 1e3 == pytest.approx(32460.0)
    assert short["ttft_s"] / short["e2e_s"] == pytest.approx(0.397, abs=1e-3)  # "about 40%"
    assert long["ttft_s"] / long["e2e_s"] == pytest.approx(0.0154, abs=1e-4)  # "about 1.5%"


def test_h100_ridge_point_295() -> None:
    """The ridge: 989e12 / 3.35e12 ~ 295 FLOP/byte; the catalog H100 gives the same."""
    assert round(ridge_point(SEED_PEAK, SEED_BW)) == 295
    assert round(load_hardware("h100-sxm").ridge_point("bf16")) == 295


def test_gemm_roofline_table_of_seed_003() -> None:
    """m = 1, 8, 64, 256, 4096 with k = n = 4096 in BF16 on the seed's H100."""
    m = np.array([1, 8, 64, 256, 4096])
    inten = gemm_intensity(m, 4096, 4096, 2.0)
    att = attainable_flops(inten, SEED_PEAK, SEED_BW)
    assert [f"{x:.1f}" for x in inten] == ["1.0", "8.0", "62.1", "227.6", "1365.3"]
    assert [f"{x / 1e12:.0f}" for x in att] == ["3", "27", "208", "762", "989"]
    bounds = ["compute" if a == SEED_PEAK else "memory" for a in att]
    assert bounds == ["memory", "memory", "memory", "memory", "compute"]
    # "batch 1 decode uses only 0.3% of H100 compute"
    assert f"{att[0] / SEED_PEAK:.1%}" == "0.3%"


def test_m_at_ridge_345() -> None:
    """Roofline exercise 1: 4096 m / (2m + 4096) = 295 -> m ~ 345."""
    assert round(m_at_ridge(4096, 4096, SEED_PEAK / SEED_BW)) == 345
    assert round(m_at_ridge(4096, 4096, 295.0)) == 345


def test_expected_unique_experts_7_20() -> None:
    """The expected distinct experts: E=8, k=2, B=8 -> E[U] = 8(1 - (3/4)^8) ~ 7.20."""
    assert f"{expected_unique_experts(8, 2, 8):.2f}" == "7.20"
    assert expected_unique_experts(8, 2, 1) == pytest.approx(2.0)  # one token: exactly k
    assert expected_unique_experts(8, 2, 0) == 0.0


def test_qwen25_7b_kv_56_kib_per_token_and_little_example() -> None:
    """Roofline exercise 2: Qwen2.5-7B KV 28 x 4 x 128 x 2 (K,V) x 2 B = 57,344 B = 56 KiB;
    300 requests x 4000 tokens x 56 KB ~ 229 MB each, ~69 GB in all."""
    m = RooflineStepTime.from_names(model="qwen2.5-7b", hardware="h100-sxm")
    assert m.kv_bytes_per_token == 28 * 4 * 128 * 2 * 2 == 57_344
    assert m.kv_bytes_per_token / 1024 == 56.0
    per_request = 4000 * m.kv_bytes_per_token
    assert round(per_request / 1e6) == 229
    assert round(300 * per_request / 1e9) == 69


def test_decode_intensity_about_1_at_batch_1_and_about_b_with_batch() -> None:
    """The metrics chapter: bf16 decode moves ~W bytes for ~W FLOPs -> ~1 FLOP/byte; B sequences
    share the weight read -> ~B (the batch turning point: I ~ 2B/b_w)."""
    m = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
    r1 = estimate(m, batch=1, prompt_tokens=16, output_tokens=2)
    assert r1["decode_intensity_flop_per_byte"] == pytest.approx(1.0, rel=0.02)
    for b in (1, 8, 32):
        bd = m.breakdown(BatchWork(decode_seqs=b, decode_context_tokens=b * 16))
        i = bd.names.index("gate_up_proj")
        assert bd.flops[i] / bd.bytes[i] == pytest.approx(b, rel=0.02)


def test_decode_hbm_traffic_formula() -> None:
    """The decode read: D_dec = D_w + 2LB(T+1) d_kv b_kv + D_a, here with fp8 KV (b_kv = 1)."""
    m = RooflineStepTime.from_names(model="llama-3.1-70b", hardware="h100-sxm", weights="fp8",
                                    kv="fp8", tp=4)
    b, t = 16.0, 3000.0
    r = estimate(m, batch=b, prompt_tokens=t, output_tokens=2)
    d_kv_per_gpu = 8 // 4 * 128  # 8 KV heads over 4 GPUs
    assert r["decode_kv_bytes"] == 2 * 80 * b * (t + 1) * d_kv_per_gpu * 1
    assert r["decode_bytes"] == pytest.approx(
        r["decode_weight_bytes"] + r["decode_kv_bytes"] + r["decode_other_bytes"])
    assert 0 < r["decode_other_bytes"] < 0.03 * r["decode_bytes"]  # norms, GEMM in/out


def test_decode_throughput_ceiling() -> None:
    """The decode ceiling: TPS_dec <= min(B C / F_dec, B beta / D_dec); the per-operator sum with
    overheads is at or below that ceiling."""
    m = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
    b = np.array([1.0, 16.0, 256.0])
    r = estimate(m, batch=b, prompt_tokens=1024, output_tokens=128)
    c = m.gemm_peak_flops * m.hardware.compute_efficiency
    beta = m.bandwidth_eff_bytes_s
    expect = np.minimum(b * c / r["decode_flops"], b * beta / r["decode_bytes"])
    np.testing.assert_allclose(r["decode_ceiling_tok_s"], expect)
    assert np.all(r["decode_aggregate_tok_s"] <= r["decode_ceiling_tok_s"])


def test_kv_crossover_context() -> None:
    """KV/weight crossover: T ~ P b_w / (2 L B d_kv b_kv): the old-KV read equals the weights."""
    m = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
    d_w = 15_009_316_864  # hand-computed in test_roofline_step (bf16, LM head, no emb)
    for b in (1.0, 8.0):
        r = estimate(m, batch=b, prompt_tokens=1024, output_tokens=2)
        t_star = d_w / (2 * 32 * b * 1024 * 2)
        assert r["kv_crossover_context_tokens"] == pytest.approx(t_star)
        old_kv = 2 * 32 * b * t_star * 1024 * 2
        assert old_kv == pytest.approx(r["decode_weight_bytes"])
    assert round(d_w / (2 * 32 * 1 * 1024 * 2)) == 114_512  # B=1: ~115k tokens


def test_decode_attention_intensity() -> None:
    """Attention intensity: I_attn = 2 h_q / (h_kv b_kv): 4 for Llama-3.1-8B (GQA 32/8, bf16),
    1 for MHA Llama-2-7B, 8 with fp8 KV; the attention operator itself agrees."""
    cases = [("llama-3.1-8b", "bf16", 4.0), ("llama-2-7b", "bf16", 1.0),
             ("llama-3.1-8b", "fp8", 8.0)]
    for name, kv, expect in cases:
        m = RooflineStepTime.from_names(model=name, hardware="h100-sxm", kv=kv)
        assert model_constants(m)["decode_attention_intensity_flop_per_byte"] == expect
        bd = m.breakdown(BatchWork(decode_seqs=8, decode_context_tokens=8 * 100_000))
        i = bd.names.index("attn_decode")
        assert bd.flops[i] / bd.bytes[i] == pytest.approx(expect, rel=0.01)


def test_batch_turning_point() -> None:
    """Turning point: with C/beta = 150 the weight-dominated model bends at B ~ 150 (bf16);
    int4 weights (b_w ~ 0.5) bend four times earlier."""
    assert linear_batch_turning_point(150 * 3.35e12, 3.35e12, 2.0) == pytest.approx(150)
    assert linear_batch_turning_point(150.0, 1.0, resolve_precision("int4").weight_bytes) \
        == pytest.approx(150 * 0.515625 / 2)


def test_published_parameter_totals() -> None:
    """Catalog shapes reproduce the published parameter counts."""
    expect = {"llama-3.1-8b": 8.03e9, "llama-3.1-70b": 70.6e9, "llama-3.1-405b": 405.9e9,
              "qwen2.5-7b": 7.62e9, "mixtral-8x7b": 46.7e9, "qwen3-30b-a3b": 30.5e9,
              "deepseek-v3": 671e9, "llama-2-7b": 6.74e9, "qwen2.5-72b": 72.7e9}
    for name, total in expect.items():
        assert load_model(name).total_params == pytest.approx(total, rel=0.002), name
    assert load_model("qwen3-30b-a3b").active_params == pytest.approx(3.3e9, rel=0.02)
    assert load_model("deepseek-v3").active_params == pytest.approx(37e9, rel=0.02)
    assert load_model("mixtral-8x7b").active_params == pytest.approx(12.9e9, rel=0.01)
