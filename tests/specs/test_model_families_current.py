"""Current model families: one minimal config per new family with its parameters summed by
hand, the catalog's current models against their model cards, configs found by their
`architectures`, and the catalog listed by the installed command."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.errors import RidgelineError
from ridgeline.specs import load_model
from ridgeline.specs.families import PARSERS, family_of
from ridgeline.specs.model import SUPPORTED_TYPES, from_hf_config

# A small shape shared by the minimal configs: d=64, 4 query heads / 2 KV heads of 16.
D, H, KV, HD, V = 64, 4, 2, 16, 100
BASE = {"hidden_size": D, "num_attention_heads": H, "num_key_value_heads": KV,
        "head_dim": HD, "vocab_size": V, "max_position_embeddings": 4096}
Q, KVD = H * HD, KV * HD                # 64, 32
ATTN = D * (Q + 2 * KVD) + Q * D        # q, k, v and o projections: 12,288


@pytest.mark.parametrize(("name", "total_b", "active_b", "tol", "active_minus_embedding"), [
    # DeepSeek-R1 = the DeepSeek-V3 architecture: 671B total, 37B activated (MTP excluded)
    ("deepseek-r1", 671.0, 37.0, 0.015, False),
    # Qwen3 cards: 235B total / 22B activated; 32.8B
    ("qwen3-235b-a22b", 235.0, 22.0, 0.015, False),
    ("qwen3-32b", 32.8, 32.8, 0.01, False),
    # gpt-oss card (arXiv 2508.10925): 116.83B / 5.13B, 20.91B / 3.61B, active without
    # the embedding table
    ("gpt-oss-120b", 116.83, 5.13, 0.005, True),
    ("gpt-oss-20b", 20.91, 3.61, 0.005, True),
    # Llama-4 cards: 17B active; 109B and 400B total (the totals include the vision
    # encoder, which is not costed)
    ("llama-4-scout-17b-16e", 109.0, 17.0, 0.02, False),
    ("llama-4-maverick-17b-128e", 400.0, 17.0, 0.02, False),
    # Gemma 3 27B (~0.4B of it the vision encoder)
    ("gemma-3-27b", 27.4, 27.4, 0.02, False),
    # Kimi-K2 card: 1T total, 32B activated
    ("kimi-k2", 1026.0, 32.9, 0.01, False),
    # GLM-4.5/4.6 cards: 355B total, 32B active (active without the embedding and the LM
    # head; the MTP layer the card's total counts is not costed)
    ("glm-4.5", 355.0, 32.0, 0.015, "both"),
    ("glm-4.6", 355.0, 32.0, 0.015, "both"),
    # MiniMax-M2 card: 230B total, 10B active (without the embedding and the LM head)
    ("minimax-m2", 230.0, 10.0, 0.025, "both"),
])
def test_catalog_models_against_their_cards(name: str, total_b: float, active_b: float,
                                            tol: float, active_minus_embedding: object) -> None:
    m = load_model(name)
    active = m.active_params - (m.embedding_params if active_minus_embedding else 0) \
        - (m.lm_head_params if active_minus_embedding == "both" else 0)
    assert m.total_params / 1e9 == pytest.approx(total_b, rel=tol)
    assert active / 1e9 == pytest.approx(active_b, rel=tol + 0.01)


def test_deepseek_v3_one_moe_layer_by_hand() -> None:
    """DeepSeek-V3/R1 MLA layer: q_a 7168x1536 (+ its 1536 norm), q_b 1536x128x192, kv_a
    7168x576 (+ its 512 norm), kv_b 512x128x256, o 128x128x7168; 256 + 1 experts of 3 x
    7168 x 2048 and a 7168 x 256 router; two 7168 norms."""
    m = load_model("deepseek-r1")
    attn = (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512
            + 512 * 128 * 256 + 128 * 128 * 7168)
    moe = 257 * 3 * 7168 * 2048 + 7168 * 256
    assert m.attention_params == attn
    assert m.attention_params + m.num_experts * m.expert_params + m.shared_expert_params \
        + m.router_params + m.norm_params_per_layer == attn + moe + 2 * 7168


def test_qwen3_235b_one_layer_by_hand() -> None:
    m = load_model("qwen3-235b-a22b")
    # q 64x128, k and v 4x128 from 4096; o back; per-head q/k norms (2 x 128);
    # 128 experts of 3 x 4096 x 1536; router 4096 x 128
    attn = 4096 * (8192 + 2 * 512) + 8192 * 4096 + 2 * 128
    assert m.attention_params == attn
    assert m.num_experts * m.expert_params + m.router_params == \
        128 * 3 * 4096 * 1536 + 4096 * 128
    assert m.num_moe_layers == 94 and m.experts_per_token == 8


def test_kimi_k2_is_a_deepseek_v3_by_its_architecture() -> None:
    m = load_model("kimi-k2")
    assert m.model_type == "kimi_k2" and m.is_mla and m.kv_lora_rank == 512
    assert (m.num_experts, m.num_shared_experts, m.num_moe_layers) == (384, 1, 60)
    assert family_of({"model_type": "kimi_k2",
                      "architectures": ["DeepseekV3ForCausalLM"]}) == "deepseek_v3"
    # no model_type at all: the architecture decides
    assert family_of({"architectures": ["MiniMaxM2ForCausalLM"]}) == "minimax_m2"


def test_glm4_moe_by_hand() -> None:
    cfg = {**BASE, "model_type": "glm4_moe", "num_hidden_layers": 3, "intermediate_size": 128,
           "moe_intermediate_size": 32, "n_routed_experts": 8, "n_shared_experts": 1,
           "num_experts_per_tok": 2, "first_k_dense_replace": 1, "attention_bias": True,
           "use_qk_norm": True, "tie_word_embeddings": False}
    m = from_hf_config(cfg)
    attn = ATTN + (Q + 2 * KVD) + 2 * HD          # q/k/v biases, per-head q/k norms
    dense = 3 * D * 128
    moe = 8 * 3 * D * 32 + 3 * D * 32 + D * 8       # routed, shared, router
    assert m.num_moe_layers == 2
    assert m.total_params == 3 * (attn + 2 * D) + dense + 2 * moe + 2 * V * D + D
    assert m.active_params == 3 * (attn + 2 * D) + dense + 2 * (
        2 * 3 * D * 32 + 3 * D * 32 + D * 8) + 2 * V * D + D


def test_minimax_m2_by_hand() -> None:
    cfg = {**BASE, "model_type": "minimax_m2", "architectures": ["MiniMaxM2ForCausalLM"],
           "num_hidden_layers": 2, "intermediate_size": 32, "num_local_experts": 8,
           "num_experts_per_tok": 2, "use_qk_norm": True, "qk_norm_type": "per_layer",
           "shared_intermediate_size": 0}
    m = from_hf_config(cfg)
    attn = ATTN + Q + KVD                          # q/k norms over the whole projections
    layer = attn + 8 * 3 * D * 32 + D * 8 + 2 * D
    assert m.attention_params == attn
    assert m.total_params == 2 * layer + 2 * V * D + D


def test_ernie45_moe_by_hand() -> None:
    cfg = {**BASE, "model_type": "ernie4_5_moe", "architectures": ["Ernie4_5_MoeForCausalLM"],
           "num_hidden_layers": 4, "intermediate_size": 128, "moe_intermediate_size": 32,
           "moe_num_experts": 8, "moe_k": 2, "moe_num_shared_experts": 2,
           "moe_layer_start_index": 1, "moe_layer_end_index": -1, "moe_layer_interval": 1,
           "tie_word_embeddings": True, "use_bias": False}
    m = from_hf_config(cfg)
    moe = 8 * 3 * D * 32 + 2 * 3 * D * 32 + D * 8  # routed, 2 shared of the routed width
    assert m.num_moe_layers == 3
    assert m.total_params == 4 * (ATTN + 2 * D) + 3 * D * 128 + 3 * moe + V * D + D
    # MoE layers: from the start index to the end index, on every interval-th layer
    for end, every, layers in ((2, 1, (1, 2)), (3, 2, (1, 3)), (-1, 4, (3,))):
        m = from_hf_config({**cfg, "moe_layer_end_index": end, "moe_layer_interval": every})
        assert m.num_moe_layers == len(layers), (end, every)


def test_granite_olmo2_cohere2_by_hand() -> None:
    dense = {**BASE, "num_hidden_layers": 8, "intermediate_size": 128}
    granite = from_hf_config({**dense, "model_type": "granite", "embedding_multiplier": 12.0,
                              "residual_multiplier": 0.22, "tie_word_embeddings": True})
    layer = ATTN + 3 * D * 128 + 2 * D
    assert granite.total_params == 8 * layer + V * D + D
    olmo = from_hf_config({**dense, "model_type": "olmo2", "tie_word_embeddings": False})
    assert olmo.attention_params == ATTN + Q + KVD  # q_norm over 64, k_norm over 32
    cohere = from_hf_config({**dense, "model_type": "cohere2", "sliding_window": 512,
                             "sliding_window_pattern": 4})
    # one norm per layer (parallel block), tied embeddings; layers 4 and 8 are global
    assert cohere.total_params == 8 * (ATTN + 3 * D * 128 + D) + V * D + D
    assert (cohere.sliding_window, cohere.num_window_layers) == (512, 6)


def test_falcon_h1_prices_attention_and_mlp_and_says_what_it_leaves_out() -> None:
    cfg = {**BASE, "model_type": "falcon_h1", "num_hidden_layers": 2,
           "intermediate_size": 128, "mamba_d_ssm": 128, "mamba_n_heads": 8,
           "mamba_n_groups": 1, "mamba_d_state": 16, "mamba_d_conv": 4}
    m = from_hf_config(cfg)
    assert m.total_params == 2 * (ATTN + 3 * D * 128 + 2 * D) + 2 * V * D + D
    # the Mamba-2 mixer by hand: in_proj D x (2 x 128 + 2 x 16 + 8), out_proj 128 x D,
    # conv (128 + 32) x 4, A/D/dt_bias 3 x 8, gated norm 128
    mixer = D * (256 + 32 + 8) + 128 * D + 160 * 4 + 24 + 128
    assert len(m.notes) == 1 and "Mamba-2" in m.notes[0]
    assert f"{2 * mixer / 1e9:.2f}B parameters" in m.notes[0]


def test_qwen35_moe_wrapper_is_a_qwen3_next() -> None:
    text = {**BASE, "model_type": "qwen3_5_moe_text", "num_hidden_layers": 4,
            "layer_types": ["linear_attention"] * 3 + ["full_attention"],
            "linear_num_key_heads": 2, "linear_num_value_heads": 4,
            "linear_key_head_dim": 16, "linear_value_head_dim": 16,
            "linear_conv_kernel_dim": 4, "num_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32}
    m = from_hf_config({"model_type": "qwen3_5_moe", "tie_word_embeddings": False,
                        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
                        "text_config": text})
    assert (m.num_linear_layers, m.num_softmax_layers, m.num_moe_layers) == (3, 1, 4)
    assert not m.tie_word_embeddings  # the wrapper's flag reaches the language model
    # gated attention: q_proj emits the output gate too (2 x 64), per-head q/k norms
    assert m.attention_params == D * (2 * Q + 2 * KVD) + Q * D + 2 * HD


def test_unknown_families_are_refused_with_the_supported_list() -> None:
    with pytest.raises(RidgelineError) as exc:
        from_hf_config({**BASE, "model_type": "jamba", "architectures": ["JambaForCausalLM"],
                        "num_hidden_layers": 2})
    msg = str(exc.value)
    assert "'jamba' is not supported" in msg and "glm4_moe" in msg and "\n" not in msg


def test_every_family_has_a_parser_under_60_lines() -> None:
    import inspect

    assert set(PARSERS) == set(SUPPORTED_TYPES)
    for fn in set(PARSERS.values()):
        assert len(inspect.getsource(fn).splitlines()) <= 60, fn.__name__


def _cli() -> list[str]:
    exe = shutil.which("ridgeline", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-c", "from ridgeline.cli import main; main()"]


def test_installed_cli_lists_and_estimates_the_new_models() -> None:
    out = subprocess.run([*_cli(), "models", "--json"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    names = {r["name"] for r in json.loads(out.stdout)}
    assert {"gpt-oss-20b", "gpt-oss-120b", "qwen3-32b", "qwen3-235b-a22b",
            "llama-4-scout-17b-16e", "llama-4-maverick-17b-128e", "gemma-3-27b",
            "deepseek-r1", "kimi-k2", "glm-4.5", "glm-4.6", "minimax-m2"} <= names
    est = subprocess.run([*_cli(), "estimate", "-m", "deepseek-r1", "-g", "H200", "--tp", "8",
                          "--batch", "8", "--json"], capture_output=True, text=True,
                         timeout=300)
    assert est.returncode == 0, est.stderr
    pr = json.loads(est.stdout)["config"]["precision"]
    assert (pr["scheme"], pr["gemm_kernel_dtype"]) == ("W8A8 (fp8 block 128x128)", "fp8_block")


DATA = Path(__file__).parents[1] / "data" / "hf_configs"


def test_published_qwen35_configs_parse_as_qwen3_next() -> None:
    """Qwen3.5 (tests/data/hf_configs): the 397B-A17B card says 397B total / 17B active,
    the 27B card 27B (both with the vision encoder, ~0.4B, which is not costed)."""
    moe = load_model(str(DATA / "Qwen--Qwen3.5-397B-A17B.json"))
    assert (moe.num_linear_layers, moe.num_softmax_layers, moe.num_moe_layers) == (45, 15, 60)
    assert moe.total_params / 1e9 == pytest.approx(397, rel=0.01)
    assert moe.active_params / 1e9 == pytest.approx(17, rel=0.03)
    dense = load_model(str(DATA / "Qwen--Qwen3.5-27B.json"))
    assert dense.num_moe_layers == 0 and dense.num_linear_layers == 48
    assert dense.total_params / 1e9 == pytest.approx(27, rel=0.015)
    # one gated-attention layer by hand: q (+gate) 2 x 24 x 256, k and v 4 x 256 each from
    # 5120; o 24 x 256 back; per-head q/k norms
    assert dense.attention_params == 5120 * (2 * 6144 + 2 * 1024) + 6144 * 5120 + 2 * 256
