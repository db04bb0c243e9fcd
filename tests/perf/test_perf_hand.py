"""Attention FLOPs of the perf model and estimate's E2E throughput, against the model shapes
by hand (config.json values written out below; the decode KV read for the formulas)."""

from __future__ import annotations

import pytest

from ridgeline.perf.estimate import decode_work, estimate, prefill_work
from ridgeline.perf.roofline_step import RooflineStepTime


def _op_flops(m: RooflineStepTime, work, name: str) -> float:
    bd = m.breakdown(work)
    return float(bd.flops[bd.names.index(name)])


def test_gqa_attention_flops():
    # Llama 3.1 8B: 32 layers, 32 query heads of 128. Decode: QK^T and PV over the T old
    # keys and the new one, 2 FLOPs per multiply-add each: 4 L h_q d_h (T + 1) per sequence.
    m = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
    L, hq, hd = 32, 32, 128
    b, t = 8, 100_000
    assert _op_flops(m, decode_work(b, t), "attn_decode") == pytest.approx(
        4 * L * hq * hd * b * (t + 1), rel=1e-12)
    # Prefill of 2 prompts of 1,000 tokens: causal pairs 1000 x 1001 / 2 each.
    assert _op_flops(m, prefill_work(2, 1000), "attn_prefill") == pytest.approx(
        4 * L * hq * hd * 2 * 1000 * 1001 / 2, rel=1e-12)


def test_mla_attention_flops():
    # DeepSeek-V3 (MLA): 61 layers, 128 heads; q/k head = 128 nope + 64 rope, v head 128;
    # latent 512 + 64 rope. Prefill expands K, V: 2 h_q (d_qk + d_v) per causal pair.
    # Decode absorbs W_UK/W_UV: scores over the 576-wide latent, values over 512.
    m = RooflineStepTime.from_names(model="deepseek-v3", hardware="h200", tp=8,
                                    weights="fp8")
    L, hq = 61, 128 // 8
    pairs = 1000 * 1001 / 2
    assert _op_flops(m, prefill_work(1, 1000), "attn_prefill") == pytest.approx(
        L * 2 * hq * (192 + 128) * pairs, rel=1e-12)
    assert _op_flops(m, decode_work(4, 5000), "attn_decode") == pytest.approx(
        L * 2 * hq * (576 + 512) * 4 * (5000 + 1), rel=1e-12)


def test_e2e_output_throughput():
    # The serving definitions: E2E = TTFT + TPOT (N - 1); the batch's output rate is B N / E2E.
    m = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
    r = estimate(m, batch=32, prompt_tokens=1024, output_tokens=256)
    e2e = float(r["ttft_s"]) + float(r["tpot_s"]) * 255
    assert float(r["e2e_s"]) == pytest.approx(e2e, rel=1e-12)
    assert float(r["e2e_output_tok_s"]) == pytest.approx(32 * 256 / e2e, rel=1e-12)
    assert float(r["prefill_tok_s"]) == pytest.approx(32 * 1024 / float(r["ttft_s"]))
