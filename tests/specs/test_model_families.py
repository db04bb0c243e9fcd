"""Current model families from their published config.json files (tests/data/hf_configs).

Each family is checked against numbers derived independently of the code: the model card's
parameter counts, KV bytes per token and one decode step's bytes worked out by hand from
the config's shapes (at a context beyond the sliding window where there is one).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ridgeline.errors import RidgelineError
from ridgeline.perf.estimate import decode_work, estimate
from ridgeline.perf.memory import kv_bytes_per_token
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.step_time import BatchWork
from ridgeline.perf.window import banded_pairs
from ridgeline.specs import Parallelism, load_hardware, load_model
from ridgeline.specs.model import from_hf_config
from ridgeline.specs.precision import resolve_model_precision

DATA = Path(__file__).parents[1] / "data" / "hf_configs"
BF16 = 2.0


def cfg(name: str) -> str:
    return str(DATA / f"{name}.json")


def step(name: str, hardware: str = "h100-sxm", **kw: object) -> RooflineStepTime:
    return RooflineStepTime.from_names(model=cfg(name), hardware=hardware, **kw)  # type: ignore[arg-type]


def _decode_op_bytes(m: RooflineStepTime, b: float, t: float, names: tuple[str, ...]) -> float:
    bd = m.breakdown(decode_work(b, t))
    return float(sum(bd.bytes[bd.names.index(n)] for n in names))


# --- parameter counts against the model cards ------------------------------------------------

@pytest.mark.parametrize(("name", "total_b", "active_b", "active_excludes_embedding"), [
    # OpenAI gpt-oss model card (arXiv 2508.10925, Table 1): 20.91B total, 3.61B active;
    # 116.83B total, 5.13B active. Its active counts exclude the embedding table (the
    # unembedding is included).
    ("openai--gpt-oss-20b", 20.91, 3.61, True),
    ("openai--gpt-oss-120b", 116.83, 5.13, True),
    # DeepSeek-V3 card: 671B total, 37B activated (the 14B MTP module not counted).
    ("deepseek-ai--DeepSeek-V3", 671.0, 37.0, False),
    # Llama-4 Scout card: 17B active, 109B total (the card's total includes the vision
    # encoder, which ridgeline does not cost: within 2% holds anyway).
    ("RedHatAI--Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", 109.0, 17.0, False),
    # Gemma-2-9b card: "9B"; the checkpoint holds 9,241,705,984 parameters (HF: 9.24B).
    ("google--gemma-2-9b-it", 9.24, 9.24, False),
    # Phi-4 card: 14B parameters (HF: 14.7B).
    ("microsoft--phi-4", 14.7, 14.7, False),
    # Mistral-7B-v0.1: 7.24B (HF model page: 7.24B params).
    ("mistralai--Mistral-7B-v0.1", 7.24, 7.24, False),
    # Phi-3-mini-4k-instruct card: "3.8B parameters" (HF model page: 3.82B params).
    ("microsoft--Phi-3-mini-4k-instruct", 3.82, 3.82, False),
])
def test_parameter_counts_match_the_model_cards(name: str, total_b: float, active_b: float,
                                                 active_excludes_embedding: bool) -> None:
    m = load_model(cfg(name))
    active = m.active_params - (m.embedding_params if active_excludes_embedding else 0)
    assert m.total_params / 1e9 == pytest.approx(total_b, rel=0.02)
    assert active / 1e9 == pytest.approx(active_b, rel=0.02)


def test_mixtral_parameters_by_hand() -> None:
    # Mixtral-8x7B: per layer attention 2 x 4096^2 + 2 x 4096 x 1024, 8 experts of
    # 3 x 4096 x 14336, a 4096 x 8 router, 2 norms of 4096; 32 layers, the 32000 x 4096
    # embedding and LM head, the final norm: 46,702,792,704 (the checkpoint's count); 2 of
    # the 8 experts are active: 12,879,925,248.
    m = load_model("mixtral-8x7b")
    attn = 2 * 4096 * 4096 + 2 * 4096 * 1024
    expert = 3 * 4096 * 14336
    layer, active_layer = (attn + n * expert + 4096 * 8 + 2 * 4096 for n in (8, 2))
    outside = 2 * 32000 * 4096 + 4096
    assert m.total_params == 32 * layer + outside == 46_702_792_704
    assert m.active_params == 32 * active_layer + outside == 12_879_925_248


def test_kv_flag_over_a_quantized_checkpoint(tmp_path: Path) -> None:
    from ridgeline.specs.precision import resolve_model_precision

    m = load_model(str(_awq_llama(tmp_path)))
    # the checkpoint sets the weights (int4) and their GEMM dtype; --kv sets the cache alone
    p = resolve_model_precision(m, kv="fp8")
    assert (p.weights, p.kv, p.activations) == ("int4", "fp8", "bf16")
    assert resolve_model_precision(m).kv == "bf16"     # vLLM's auto: the model dtype
    assert resolve_model_precision(m, activations="fp8").activations == "fp8"


def test_compressed_tensors_without_groups_is_refused() -> None:
    from ridgeline.specs.quant import parse_quantization

    for groups in ({}, None):
        with pytest.raises(RidgelineError, match="config_groups: allowed: a non-empty object"):
            parse_quantization({"quant_method": "compressed-tensors", "config_groups": groups})


def test_gemma2_shapes_by_hand() -> None:
    m = load_model(cfg("google--gemma-2-9b-it"))
    # head_dim 256 is separate from hidden/heads (3584/16 = 224); tied embeddings; 4 norms;
    # soft-capping parsed (50, 30); even layers slide over 4096 tokens (HF Gemma2).
    assert (m.head_dim, m.q_dim, m.tie_word_embeddings, m.norms_per_layer) == (256, 4096, True, 4)
    assert (m.attn_logit_softcapping, m.final_logit_softcapping) == (50.0, 30.0)
    assert (m.sliding_window, m.num_window_layers, m.num_full_attention_layers) == (4096, 21, 21)
    attn = 3584 * (4096 + 2 * 2048) + 4096 * 3584
    mlp = 3 * 3584 * 14336
    assert m.total_params == 42 * (attn + mlp + 4 * 3584) + 256000 * 3584 + 3584


def test_llama4_interleaved_moe_shared_expert_and_chunked_attention() -> None:
    m = load_model(cfg("RedHatAI--Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"))
    # Nested text_config; every layer MoE (interleave step 1) with one shared expert;
    # no_rope_layers [] means the default: every 4th layer is global, the rest chunked.
    assert (m.model_type, m.num_moe_layers, m.num_shared_experts, m.num_experts) == (
        "llama4_text", 48, 1, 16)
    assert (m.window_kind, m.sliding_window, m.num_window_layers) == ("chunked", 8192, 36)
    # compressed-tensors FP8 with attention, routers and the LM head in `ignore`.
    assert m.quant is not None and m.quant.weights == "fp8" and m.quant.activations == "fp8"
    assert set(m.quant.unquantized) == {"attention", "router", "lm_head"}


def test_gpt_oss_alternating_windows_sinks_and_mxfp4_experts() -> None:
    m = load_model(cfg("openai--gpt-oss-20b"))
    assert (m.sliding_window, m.num_window_layers, m.num_full_attention_layers) == (128, 12, 12)
    assert m.attention_sinks and m.qkv_bias and m.o_bias and m.expert_bias
    assert m.quant is not None and m.quant.weights == "mxfp4"
    pr = resolve_model_precision(m)
    # MXFP4: 4 bits + one E8M0 scale per 32 -> 0.5 + 1/32 B; attention stays bf16.
    assert pr.expert_weight_bytes == 0.5 + 1 / 32 and pr.attention_weight_bytes == 2.0
    assert "quantization_config" in pr.source


# --- KV bytes per token, by hand ---------------------------------------------------------------

@pytest.mark.parametrize(("name", "hand_bytes"), [
    ("openai--gpt-oss-20b", 24 * 2 * 8 * 64 * BF16),
    ("google--gemma-2-9b-it", 42 * 2 * 8 * 256 * BF16),
    ("RedHatAI--Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", 48 * 2 * 8 * 128 * BF16),
    ("deepseek-ai--DeepSeek-V3", 61 * (512 + 64) * BF16),
    ("microsoft--phi-4", 40 * 2 * 10 * 128 * BF16),
    ("mistralai--Mistral-7B-v0.1", 32 * 2 * 8 * 128 * BF16),
    ("microsoft--Phi-3-mini-4k-instruct", 32 * 2 * 32 * 96 * BF16),  # MHA, head_dim 96
    # Only the 12 gated full-attention layers hold KV (the 36 DeltaNet layers hold a state).
    ("Qwen--Qwen3-Next-80B-A3B-Thinking", 12 * 2 * 2 * 256 * BF16),
])
def test_kv_bytes_per_token_by_hand(name: str, hand_bytes: float) -> None:
    m = load_model(cfg(name))
    # KV auto = the model's bf16, also for the FP8 / MXFP4 checkpoints.
    assert kv_bytes_per_token(m, resolve_model_precision(m)) == hand_bytes


# --- one decode step beyond the window, by hand ---------------------------------------------

def test_mistral_at_30k_reads_min_context_window() -> None:
    """The bar: Mistral-7B-v0.1 (window 4096) at 30k context reads 4096 tokens of KV."""
    m = step("mistralai--Mistral-7B-v0.1")
    b, t = 4.0, 30_000.0
    kv_tok_layer = 2 * 8 * 128 * BF16
    r = estimate(m, batch=b, prompt_tokens=t, output_tokens=2, context_tokens=t)
    # min(T, w) old tokens + the new one, every layer windowed.
    assert r["decode_kv_bytes"] == b * 32 * (4096 + 1) * kv_tok_layer
    attn = _decode_op_bytes(m, b, t, ("attn_decode_window",))
    assert attn == b * 32 * ((4096 + 1) * kv_tok_layer + 2 * 32 * 128 * BF16)  # + Q in, O out
    # Beyond the window the decode step no longer grows with the context.
    assert m.step_time_s(decode_work(b, 30_000)) == m.step_time_s(decode_work(b, 8_000))
    assert m.step_time_s(decode_work(b, 3_000)) < m.step_time_s(decode_work(b, 8_000))
    # KV capacity in sequences of 30k: each holds 4096 tokens per layer.
    mem = m.memory()
    per_seq = 32 * 4096 * kv_tok_layer  # S+N = 30002 > 4096
    budget = mem.budget_bytes - mem.weight_bytes - r["workspace_bytes"] - mem.reserve_bytes
    assert r["max_concurrent_seqs"] == np.floor(budget / per_seq)


def test_gemma2_decode_step_bytes_by_hand_beyond_the_window() -> None:
    m = step("google--gemma-2-9b-it", "h200")
    b, t = 2.0, 6_000.0
    kv = 2 * 8 * 256 * BF16
    r = estimate(m, batch=b, prompt_tokens=t, output_tokens=2, context_tokens=t)
    assert r["decode_kv_bytes"] == b * (21 * (t + 1) + 21 * (4096 + 1)) * kv
    # Weights read once: every linear layer in bf16 and the tied LM head in full.
    attn = 3584 * (4096 + 2 * 2048) + 4096 * 3584
    mlp = 3 * 3584 * 14336
    assert r["decode_weight_bytes"] == pytest.approx(
        (42 * (attn + mlp) + 256000 * 3584) * BF16, rel=1e-12)


def test_gpt_oss_decode_step_bytes_by_hand_beyond_the_window() -> None:
    m = step("openai--gpt-oss-20b")
    b, t = 1.0, 10_000.0
    kv, qo = 2 * 8 * 64 * BF16, 2 * 64 * 64 * BF16
    full = _decode_op_bytes(m, b, t, ("attn_decode",))
    win = _decode_op_bytes(m, b, t, ("attn_decode_window",))
    assert full == 12 * ((t + 1) * kv + qo)
    assert win == 12 * ((128 + 1) * kv + qo)
    # Expert weights of one token: k=4 experts of MXFP4 gate_up + down per layer.
    bd = m.breakdown(decode_work(1.0, t))
    experts = sum(bd.bytes[bd.names.index(n)] for n in ("experts_gate_up", "experts_down"))
    act = 4 * (2880 + 2 * 2880) * BF16 + 4 * (2880 + 2880) * BF16   # token in/out per expert
    assert experts == pytest.approx(24 * (4 * 3 * 2880 * 2880 * (0.5 + 1 / 32) + act),
                                    rel=1e-12)


def test_prefill_pairs_are_banded_in_windowed_layers() -> None:
    m = step("mistralai--Mistral-7B-v0.1", kernel_overhead_us=0)
    s, w = 10_000.0, 4096.0
    bd = m.breakdown(BatchWork.for_chunks([s], [0], []))
    i = bd.names.index("attn_prefill_window")
    hand_pairs = w * (w + 1) / 2 + (s - w) * w  # rows 1..w grow, the rest see w keys
    assert bd.flops[i] == pytest.approx(32 * 4 * 32 * 128 * hand_pairs, rel=1e-12)
    assert float(banded_pairs(s, 0, w)) == hand_pairs
    assert float(banded_pairs(100, 5000, w)) == 100 * w  # a later chunk: full band
    assert float(banded_pairs(100, 0, w)) == 100 * 101 / 2  # inside the window: causal


def test_windowed_models_take_the_python_path() -> None:
    m = step("mistralai--Mistral-7B-v0.1")
    assert not m._fast.applicable  # min(T, w) is not linear in the step's sums
    from ridgeline.sim.core import engine_blocker

    class _Cfg:
        max_num_seqs = 8

    assert engine_blocker(m, _Cfg()) is not None
    # Elementwise: a step's time does not depend on the steps timed with it.
    dq = np.array([1.0, 7.0, 32.0, 3.0])
    dc = dq * np.array([100.0, 5000.0, 30000.0, 4096.0])
    batch = m.step_time_s(BatchWork(decode_seqs=dq, decode_context_tokens=dc))
    alone = [m.step_time_s(BatchWork(decode_seqs=a, decode_context_tokens=c))
             for a, c in zip(dq, dc, strict=True)]
    assert batch.tolist() == alone


# --- quantized checkpoints ----------------------------------------------------------------

def test_deepseek_v3_fp8_fits_8xh200_with_no_flag() -> None:
    m = step("deepseek-ai--DeepSeek-V3", "h200", tp=8)
    assert m.precision.weights == "fp8" and m.precision.activations == "fp8"
    assert m.precision.kv == "bf16"  # vLLM auto: the model dtype, not the weight quant
    assert m.memory().fits
    with pytest.raises(RidgelineError, match="does not fit"):
        step("deepseek-ai--DeepSeek-V3", "h200", tp=8, weights="bf16")  # the flag wins


def _awq_llama(tmp_path: Path) -> Path:
    """The published Llama-3.1-8B config with the quantization_config block of the AWQ
    INT4 checkpoint (hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4: AutoAWQ GEMM, 4
    bits, group 128, zero points). A composed file, not a published one."""
    c = json.loads((DATA / "meta-llama--Meta-Llama-3.1-8B.json").read_text())
    c["quantization_config"] = {"bits": 4, "group_size": 128, "modules_to_not_convert": None,
                                "quant_method": "awq", "version": "gemm", "zero_point": True}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(c))
    return p


def test_awq_llama_31_8b_reads_about_4p6_gb_per_step(tmp_path: Path) -> None:
    m = RooflineStepTime.from_names(model=str(_awq_llama(tmp_path)), hardware="l40s")
    r = estimate(m, batch=1, prompt_tokens=512, output_tokens=2)
    # By hand: 32 layers of int4 linears (0.5 B + fp16 scale and int4 zero per 128) and
    # the bf16 LM head (AWQ leaves it unquantized).
    linear = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)
    hand = linear * (0.5 + 2.5 / 128) + 128256 * 4096 * BF16
    assert r["decode_weight_bytes"] == pytest.approx(hand, rel=1e-12)
    assert r["decode_weight_bytes"] / 1e9 == pytest.approx(4.6, abs=0.1)
    assert m.precision.activations == "bf16"  # weight-only: GEMMs at the bf16 peak
    flag = RooflineStepTime.from_names(model=str(_awq_llama(tmp_path)), hardware="l40s",
                                       weights="bf16")
    assert estimate(flag, 1, 512, 2)["decode_weight_bytes"] > 3 * hand
    assert flag.precision.source.startswith("flags")


def test_quantization_methods() -> None:
    from ridgeline.specs.quant import parse_quantization

    gptq = parse_quantization({"quant_method": "gptq", "bits": 4, "group_size": 128,
                               "lm_head": False})
    assert gptq is not None and gptq.weight_bytes == 0.5 + 2 / 128 and "lm_head" in \
        gptq.unquantized
    w4a16 = parse_quantization({"quant_method": "compressed-tensors", "config_groups": {
        "g": {"weights": {"num_bits": 4, "type": "int", "group_size": 128},
              "input_activations": None}}, "ignore": ["lm_head"]})
    assert w4a16 is not None and (w4a16.weights, w4a16.activations) == ("int4", "bf16")
    nvfp4 = parse_quantization({"quantization": {"quant_algo": "NVFP4",
                                                 "exclude_modules": ["lm_head"]}})
    assert nvfp4 is not None and (nvfp4.weights, nvfp4.activations) == ("fp4", "fp4")
    with pytest.raises(RidgelineError, match="quant_method"):
        parse_quantization({"quant_method": "hqq"})


# --- hardware: FP4 ------------------------------------------------------------------------

def test_fp4_peaks_on_blackwell() -> None:
    # NVIDIA datasheets (dense = half the sparsity figures): HGX B200 18/2 PFLOPS FP4 per
    # GPU; GB200 NVL72 1,440/72/2 = 10 PFLOPS FP4, 5 FP8, 2.5 BF16.
    assert load_hardware("b200").peak("fp4") == 9e15
    gb = load_hardware("gb200")
    assert (gb.peak("fp4"), gb.peak("fp8"), gb.peak("bf16")) == (10e15, 5e15, 2.5e15)
    nv = RooflineStepTime.from_names(model=cfg("mistralai--Mistral-7B-v0.1"), hardware="b200",
                                     weights="fp4", activations="fp4")
    assert nv.gemm_peak_flops == 9e15


# --- linear attention (Qwen3-Next) ----------------------------------------------------------

# The published Qwen/Qwen3-Next-80B-A3B-Thinking config.json (tests/data/hf_configs/README.md).
QWEN3_NEXT = "Qwen--Qwen3-Next-80B-A3B-Thinking"


def test_qwen3_next_linear_attention_state_is_constant() -> None:
    m = load_model(cfg(QWEN3_NEXT))
    assert (m.num_linear_layers, m.num_full_attention_layers) == (36, 12)
    hw = load_hardware("h200")
    pr = resolve_model_precision(m)
    sm = RooflineStepTime(m, hw, pr, Parallelism())
    # State per layer: 32 heads x 128 x 128 delta-rule matrix + conv tail 3 x 8192.
    state = 32 * 128 * 128 + 3 * (2 * 2048 + 4096)
    assert m.linear_state_elements == state
    bd = sm.breakdown(decode_work(4.0, 50_000.0))
    i = bd.names.index("lin_state")
    assert bd.bytes[i] == 36 * 4 * 2 * state * BF16  # read + write per sequence
    short = sm.breakdown(decode_work(4.0, 1_000.0))
    assert short.bytes[i] == bd.bytes[i]  # no growth with context
    j = bd.names.index("lin_attn_decode")
    assert bd.flops[j] == 36 * 4 * 32 * 7 * 128 * 128
    # KV bytes per token: only the 12 full-attention layers hold KV.
    assert kv_bytes_per_token(m, pr) == 12 * 2 * 2 * 256 * BF16


def test_qwen3_next_parameters_by_hand_and_the_card() -> None:
    """Card (Qwen3-Next-80B-A3B): "80B in total and 3B activated". By hand from the file:
    48 layers, every 4th gated full attention (q and its gate 2 x 16 x 256, 2 KV heads),
    the rest Gated DeltaNet (qkvz 2 x 16 x 128 + 2 x 32 x 128, b/a 2 x 32, conv 4 taps over
    8192 channels, out 4096), each followed by 512 experts (10 routed) + 1 shared of 512."""
    m = load_model(cfg(QWEN3_NEXT))
    emb = 151936 * 2048                                     # untied: embedding and LM head
    attn = 2048 * 8192 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 256        # + q/k norms
    lin = 2048 * 12288 + 2048 * 64 + 4096 * 2048 + 8192 * 4 + 128 + 2 * 32  # + norm, A, dt
    expert = 3 * 2048 * 512
    moe_fixed = expert + 2048 * 512                         # shared expert + router
    norms = 48 * 2 * 2048 + 2048
    assert m.total_params == 2 * emb + 12 * attn + 36 * lin + 48 * (512 * expert + moe_fixed) \
        + norms
    assert m.active_params == 2 * emb + 12 * attn + 36 * lin + 48 * (10 * expert + moe_fixed) \
        + norms
    assert m.total_params / 1e9 == pytest.approx(80.0, rel=0.02)          # 79.67B
    # The card's "3B" has one significant figure: 3.25B without the embedding and head
    # (3.87B with them) rounds to it; a 1-2% comparison against "3" is not meaningful.
    non_emb = (m.active_params - 2 * emb) / 1e9
    assert round(non_emb) == 3 and non_emb == pytest.approx(3.25, abs=0.01)


def test_qwen3_next_decode_step_bytes_by_hand() -> None:
    """One decode step of one sequence at 50k context on one B200: the weights of 10 routed
    + the shared expert per layer (E[U] = 10 of 512 at one token), KV of the 12 full layers
    over T + 1 tokens, and the DeltaNet state read and written in the 36 others."""
    m = step(QWEN3_NEXT, "b200", check_fit=False)  # 148 GiB of bf16 weights: bytes only
    r = estimate(m, batch=1, prompt_tokens=50_000, output_tokens=8)
    t = r["decode_context_tokens"]
    assert t == 50_000 + 8 / 2 - 1
    attn = 2048 * 8192 + 2 * 2048 * 512 + 4096 * 2048
    lin = 2048 * 12288 + 2048 * 64 + 4096 * 2048 + 8192 * 4
    moe = 10 * 3 * 2048 * 512 + 3 * 2048 * 512 + 2048 * 512
    weights = (12 * attn + 36 * lin + 48 * moe + 151936 * 2048) * BF16
    assert r["decode_weight_bytes"] == pytest.approx(weights, rel=1e-12)
    state = 32 * 128 * 128 + 3 * (2 * 2048 + 4096)        # per layer, elements
    kv = 12 * (t + 1) * 2 * 2 * 256 * BF16
    assert r["decode_kv_bytes"] == pytest.approx(kv + 36 * 2 * state * BF16, rel=1e-12)


def test_phi3_mini_decode_step_beyond_the_window_by_hand() -> None:
    """Phi-3-mini-4k: fused qkv (3 x 3072) and gate_up (2 x 8192), every layer windowed
    at 2047 of its 4096 positions. At a 3000-token context a decode step reads 2047 + 1
    tokens of KV per layer; a sequence holds 2047."""
    m = load_model(cfg("microsoft--Phi-3-mini-4k-instruct"))
    assert (m.sliding_window, m.num_window_layers, m.head_dim) == (2047, 32, 96)
    sm = step("microsoft--Phi-3-mini-4k-instruct", "h200")
    b = 2.0
    r = estimate(sm, batch=b, prompt_tokens=3000, output_tokens=8)
    kv_tok_layer = 2 * 32 * 96 * BF16
    assert r["decode_kv_bytes"] == b * 32 * (2047 + 1) * kv_tok_layer
    linear = 32 * (3072 * 3 * 3072 + 3072 * 3072 + 3072 * 2 * 8192 + 8192 * 3072)
    assert r["decode_weight_bytes"] == pytest.approx((linear + 32064 * 3072) * BF16,
                                                     rel=1e-12)
    assert r["kv_per_seq_per_gpu_bytes"] == 32 * 2047 * kv_tok_layer


@pytest.mark.parametrize(("name", "kv_bytes_per_token"), [
    ("microsoft--Phi-3-mini-4k-instruct", 32 * 2 * 32 * 96 * BF16),
    ("Qwen--Qwen3-Next-80B-A3B-Thinking", 12 * 2 * 2 * 256 * BF16),
])
def test_installed_cli_parses_the_new_published_configs(name: str,
                                                        kv_bytes_per_token: float) -> None:
    exe = shutil.which("ridgeline", path=str(Path(__file__).parents[2] / ".venv" / "bin"))
    if exe is None:
        pytest.skip("no installed ridgeline console script")
    out = subprocess.run([exe, "estimate", "--model", cfg(name), "--hardware", "h200",
                          "--tp", "2", "--json"], capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    assert d["result"]["kv_bytes_per_token"] == kv_bytes_per_token
    assert d["config"]["precision"]["weights"] == "bf16" and d["result"]["memory_fits"]


# --- text_config, hub ids, CLI ---------------------------------------------------------------

def test_hub_id_resolves_through_the_local_cache(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("huggingface_hub")
    repo = tmp_path / "models--mistralai--Mistral-7B-v0.1"
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    shutil.copy(DATA / "mistralai--Mistral-7B-v0.1.json", snap / "config.json")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path))
    m = load_model("mistralai/Mistral-7B-v0.1")
    assert m.name == "mistralai/Mistral-7B-v0.1" and m.sliding_window == 4096
    with pytest.raises(RidgelineError, match="Hugging Face"):
        load_model("nobody/not-cached")


def test_installed_cli_estimate_on_published_configs() -> None:
    exe = shutil.which("ridgeline", path=str(Path(__file__).parents[2] / ".venv" / "bin"))
    if exe is None:
        pytest.skip("no installed ridgeline console script")
    out = subprocess.run([exe, "estimate", "--model", cfg("deepseek-ai--DeepSeek-V3"),
                          "--hardware", "h200", "--tp", "8", "--json"],
                         capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    assert d["result"]["memory_fits"] and d["config"]["precision"]["weights"] == "fp8"
    assert "quantization_config" in d["config"]["precision"]["source"]
    text = subprocess.run([exe, "estimate", "--model", cfg("openai--gpt-oss-20b"),
                           "--hardware", "h100-sxm"], capture_output=True, text=True,
                          check=True).stdout
    assert "from checkpoint quantization_config (mxfp4" in text
    assert "sliding-window attention: 12 of 24" in text and "W4A16" in text
    bad = subprocess.run([exe, "estimate", "--model", cfg("openai--gpt-oss-20b"),
                          "--weights", "int3"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error:")
    hub = subprocess.run([exe, "estimate", "--model", "nobody/not-cached"],
                         capture_output=True, text=True,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert hub.returncode == 2 and hub.stderr.startswith("error: model:")
    assert len(hub.stderr.strip().splitlines()) == 1


def test_simulator_runs_windowed_models_on_the_python_engine_identically() -> None:
    """Windowed models take the Python engine; its event-driven mode equals the
    step-by-step reference bit for bit (elementwise step times), with chunked prefill
    crossing the window."""
    from ridgeline.sim import core
    from ridgeline.sim.cluster import ClusterConfig
    from ridgeline.sim.engine import EngineConfig
    from ridgeline.sim.event_loop import Workload, simulate

    m = step("mistralai--Mistral-7B-v0.1", max_num_seqs=16, max_num_batched_tokens=2048)
    rng = np.random.default_rng(7)
    n = 60
    wl = Workload(prompt_tokens=rng.integers(200, 9000, n), output_tokens=rng.integers(5, 80, n),
                  arrival_s=np.sort(rng.uniform(0, 20, n)))
    cfg_ = EngineConfig(max_num_seqs=16, max_num_batched_tokens=2048, num_kv_blocks=4000)
    why = core.blocker(wl, cfg_, m, ClusterConfig(), "fast")
    assert why is not None and "sliding-window" in why
    fast = simulate(wl, cfg_, m, mode="fast")
    ref = simulate(wl, cfg_, m, mode="step")
    assert np.array_equal(fast.end_s, ref.end_s) and np.array_equal(fast.sent_s, ref.sent_s)
    assert np.array_equal(fast.event_times_s, ref.event_times_s)


def test_gemma3_pattern_and_nested_text_config() -> None:
    """Gemma-3's rule (every 6th layer global) and a wrapper whose text_config omits its
    model_type. No published Gemma-3 file was found: the shapes are gemma-3-1b's values
    written here, not a shipped file."""
    text = {"hidden_size": 1152, "num_hidden_layers": 26, "num_attention_heads": 4,
            "num_key_value_heads": 1, "head_dim": 256, "intermediate_size": 6912,
            "vocab_size": 262144, "sliding_window": 512, "sliding_window_pattern": 6,
            "max_position_embeddings": 32768}
    m = from_hf_config({"model_type": "gemma3", "text_config": text,
                        "quantization_config": {"quant_method": "fp8"}})
    # Layers 5, 11, 17, 23 are global (i + 1 divisible by 6): 22 of 26 slide.
    assert (m.model_type, m.num_window_layers, m.sliding_window) == ("gemma3_text", 22, 512)
    assert m.qk_norm and m.tie_word_embeddings and m.quant is not None  # wrapper's quant
    # Qwen2.5 configs carry "sliding_window": 32768 with "use_sliding_window": false (the
    # published Qwen2.5-0.5B values): no window, unless the flag is on.
    qwen = {"model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24,
            "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864,
            "vocab_size": 151936, "max_position_embeddings": 131072, "sliding_window": 32768,
            "max_window_layers": 21, "use_sliding_window": False}
    assert from_hf_config(qwen).num_window_layers == 0
    assert from_hf_config({**qwen, "use_sliding_window": True}).num_window_layers == 3


def test_linear_attention_runs_on_the_c_core_bit_for_bit() -> None:
    """Linear attention is linear in the work variables (state per sequence: s), so the C
    core evaluates Qwen3-Next's steps, equal to the compiled Python path."""
    from ridgeline.sim import core
    from ridgeline.sim.engine import EngineConfig

    if not core.available():
        pytest.skip("C core not built")
    m = load_model(cfg(QWEN3_NEXT))
    sm = RooflineStepTime(m, load_hardware("h200"), resolve_model_precision(m),
                          Parallelism(tp=2))
    assert sm._fast.applicable
    c = core.Core(EngineConfig(max_num_seqs=64), sm, 1, "round-robin", False)
    rng = np.random.default_rng(3)
    for _ in range(200):
        pt = int(rng.choice([0, rng.integers(1, 8192)]))
        pairs = pt * int(rng.integers(1, 4000)) if pt else 0
        pc = int(rng.integers(0, 50_000)) if pt else 0
        ps = int(rng.integers(1, 8)) if pt else 0
        nd = int(rng.integers(0 if pt else 1, 65))
        dc = nd * int(rng.integers(1, 20_000))
        want = sm._fast.scalar(float(pt), float(pairs), float(pc), float(ps), float(nd),
                               float(dc))
        assert c.step_seconds(pt, pairs, pc, ps, nd, dc) == want
        assert want == pytest.approx(sm.breakdown(BatchWork(pt, pairs, pc, ps, nd, dc))
                                     .total_s, rel=1e-12)


def test_fp4_roofs_on_the_roofline_plot() -> None:
    from ridgeline.report.estimate_view import estimate_view
    from ridgeline.report.roofline import plot_roofline

    v = estimate_view(cfg("mistralai--Mistral-7B-v0.1"), "gb200", weights="fp4",
                      activations="fp4", batch=64, prompt=2048, output=64)
    roofs = {r["dtype"]: r["peak_flops_per_s"] for r in v["roofline"]["roofs"]}
    assert roofs["fp4"] == 10e15 and roofs["fp8"] == 5e15
    ax = plot_roofline(v["roofline"]).axes[0]
    lines = {ln.get_gid(): ln for ln in ax.get_lines() if ln.get_gid()}
    assert lines["roof:fp4"].get_ydata()[0] == pytest.approx(10e15)
    # MXFP4 x MXFP4 GEMMs run at the FP4 peak too.
    mx = RooflineStepTime.from_names(model=cfg("openai--gpt-oss-20b"), hardware="b200",
                                     activations="mxfp4")
    assert mx.gemm_peak_flops == 9e15 and mx.precision.weights == "mxfp4"


def test_llama4_maverick_interleaved_dense_and_moe_layers() -> None:
    """Maverick's text_config values (as ai-dynamo/aiconfigurator's trimmed copy of the
    published config keeps them): every 2nd layer MoE (128 experts + a shared one), the
    others dense with intermediate_size_mlp. Card: 400B total, 17B active."""
    text = {"attention_bias": False, "attention_chunk_size": 8192, "head_dim": 128,
            "hidden_size": 5120, "interleave_moe_layer_step": 2, "intermediate_size": 8192,
            "intermediate_size_mlp": 16384, "max_position_embeddings": 1048576,
            "model_type": "llama4_text", "num_attention_heads": 40,
            "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8,
            "num_local_experts": 128, "use_qk_norm": False, "vocab_size": 202048}
    m = from_hf_config({"model_type": "llama4", "text_config": text})
    assert (m.num_moe_layers, m.num_dense_layers, m.intermediate_size) == (24, 24, 16384)
    assert m.total_params / 1e9 == pytest.approx(400, rel=0.02)
    assert m.active_params / 1e9 == pytest.approx(17, rel=0.02)


def test_modules_left_16bit_run_at_the_16bit_peak() -> None:
    """llm-compressor's FP8 Scout leaves attention and the LM head bf16 (`ignore`): their
    GEMMs run at the bf16 peak, the FP8 experts at the fp8 peak."""
    # The plain roofline (the system-model chapter's F / C_eff): the peak each GEMM is priced at.
    m = step("RedHatAI--Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", tp=4,
             kernel_overhead_us=0, kernel_model=False)
    bd = m.breakdown(BatchWork.for_chunks([8192], [0], []))
    eff = m.hardware.compute_efficiency
    for name, peak in (("qkv_proj", 989.4e12), ("lm_head", 989.4e12),
                       ("experts_gate_up", 1978.9e12)):
        i = bd.names.index(name)
        assert bd.compute_s[i] == pytest.approx(bd.flops[i] / (peak * eff), rel=1e-12)
    # The fitted kernel model keeps the 16-bit modules at the 16-bit rate: per FLOP, qkv
    # (bf16) costs more than an FP8 GEMM of the same step would, never the FP8 rate.
    k = step("RedHatAI--Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", tp=4,
             kernel_overhead_us=0)
    kb = k.breakdown(BatchWork.for_chunks([8192], [0], []))
    per_flop = {n: kb.compute_s[kb.names.index(n)] / kb.flops[kb.names.index(n)]
                for n in ("qkv_proj", "o_proj", "shared_gate_up")}
    # Same reduction dim (hidden 5120) and rows: the bf16 GEMMs cost more per FLOP than the
    # FP8 shared expert, and never less than the bf16 peak allows. The measured H100 tables
    # put the gap at this shape near 1.1x, not the 2x of the peaks (vLLM 0.24, m=8192,
    # k=5120, n=4096: bf16 0.4196 ms, fp8 0.3850 ms, the activation quantization included).
    for n in ("qkv_proj", "o_proj"):
        assert per_flop[n] > 1.05 * per_flop["shared_gate_up"], n
        assert per_flop[n] >= 1.0 / 989.4e12, n


def test_lm_head_follows_the_method() -> None:
    """compressed-tensors quantizes every Linear its `ignore` list does not name: without
    lm_head there, the head is fp8 too; with it (RedHatAI's Scout), the head stays bf16."""
    base = json.loads((DATA / "meta-llama--Meta-Llama-3.1-8B.json").read_text())
    ct = {"quant_method": "compressed-tensors", "config_groups": {"g": {
        "weights": {"num_bits": 8, "type": "float"},
        "input_activations": {"num_bits": 8, "type": "float"}, "targets": ["Linear"]}}}
    for ignore, head_bytes in (([], 1.0), (["lm_head"], 2.0)):
        m = from_hf_config({**base, "quantization_config": {**ct, "ignore": ignore}})
        assert resolve_model_precision(m).lm_head_bytes == head_bytes


def test_modelopt_nvfp4_checkpoint_with_hf_quant_config() -> None:
    """nvidia/DeepSeek-V3.1-NVFP4: config.json has no quantization_config; ModelOpt's
    hf_quant_config.json next to it says NVFP4 (group 16) with the MLA projections and the
    LM head excluded. On 4x B200 its GEMMs run at the FP4 peak and it fits."""
    m = RooflineStepTime.from_names(model=str(DATA / "nvidia--DeepSeek-V3.1-NVFP4"),
                                    hardware="b200", tp=4)
    pr = m.precision
    assert (pr.weights, pr.activations, pr.attention_weight_bytes) == ("fp4", "fp4", 2.0)
    assert m.gemm_peak_flops == 9e15 and m.memory().fits
    # Weights per GPU by hand: NVFP4 (0.5 + 1/16 B) experts and dense MLPs, bf16 MLA
    # projections (q_a and kv_a replicated on every TP rank), embeddings, head, routers.
    fp4, tp = 0.5 + 1 / 16, 4
    experts = 58 * (256 + 1) * 3 * 7168 * 2048 + 3 * 3 * 7168 * 18432
    repl = 61 * (7168 * 1536 + 7168 * 576)
    sharded = 61 * (1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168)
    hand = (experts * fp4 + sharded * BF16 + 2 * 129280 * 7168 * BF16) / tp \
        + repl * BF16 + 58 * 7168 * 256 * BF16 + 61 * 2 * 7168 * BF16
    assert m.memory().weight_bytes == pytest.approx(hand, rel=2e-3)
