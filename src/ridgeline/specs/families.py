"""Model families: one small parser per Hugging Face config family, in one table.

`parse_family(cfg, name)` finds the family of a config.json (its `model_type`, else its
`architectures`: a `kimi_k2` model_type with `DeepseekV3ForCausalLM` is a DeepSeek-V3) and
calls that family's parser, which reads the family's own field names into a ModelSpec.
The shapes follow each family's Hugging Face modeling code; what a parser cannot cost (the
Mamba-2 mixer of Falcon-H1) it says in `ModelSpec.notes`.

>>> from ridgeline.specs.families import family_of
>>> family_of({"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"]})
'deepseek_v3'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ridgeline.errors import RidgelineError
from ridgeline.specs.model_spec import (
    _TIED_BY_DEFAULT,
    SUPPORTED_TYPES,
    TYPE_ALIASES,
    WRAPPER_TYPES,
    ModelSpec,
    _int,
    _window,
)
from ridgeline.specs.quant import parse_quantization

Parser = Callable[[dict[str, Any], str, dict[str, Any]], ModelSpec]

# `architectures[0]` -> family, for configs whose model_type is not a family name.
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
    "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3_text",
    "Phi3ForCausalLM": "phi3", "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe", "Qwen3MoeForCausalLM": "qwen3_moe",
    "Llama4ForCausalLM": "llama4_text", "GptOssForCausalLM": "gpt_oss",
    "Qwen3NextForCausalLM": "qwen3_next", "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3", "Glm4MoeForCausalLM": "glm4_moe",
    "MiniMaxM2ForCausalLM": "minimax_m2", "Ernie4_5_MoeForCausalLM": "ernie4_5_moe",
    "GraniteForCausalLM": "granite", "Olmo2ForCausalLM": "olmo2",
    "Cohere2ForCausalLM": "cohere2", "FalconH1ForCausalLM": "falcon_h1",
}


def family_of(cfg: dict[str, Any]) -> str:
    """The parser family of a (language-model) config: model_type, its alias, else the
    architecture; a one-line error naming what is supported otherwise."""
    mt = cfg.get("model_type")
    if mt is not None and not isinstance(mt, str):  # a broken file, whatever else it says
        shown = repr(mt) if len(repr(mt)) <= 40 else repr(mt)[:37] + "..."
        raise RidgelineError(f"config.json: field 'model_type': got {shown}; allowed: a "
                             f"string; supported: {', '.join(SUPPORTED_TYPES)}")
    if isinstance(mt, str) and mt in SUPPORTED_TYPES:
        return mt
    archs = cfg.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    if arch in ARCHITECTURES:
        return ARCHITECTURES[arch]
    if isinstance(mt, str) and mt in TYPE_ALIASES:
        return TYPE_ALIASES[mt]
    if mt is None:
        raise RidgelineError(
            f"config.json: missing field 'model_type' (architectures={archs}); "
            f"supported model_type: {', '.join(SUPPORTED_TYPES)}")
    raise RidgelineError(f"config.json: model_type {mt!r} is not supported; "
                         f"supported: {', '.join(SUPPORTED_TYPES)}, "
                         f"{', '.join(TYPE_ALIASES)} (and the text_config of "
                         f"{', '.join(WRAPPER_TYPES)})")


def _linear_layers(cfg: dict[str, Any], fam: str, layers: int) -> set[int]:
    """Qwen3-Next / Qwen3.5: the Gated DeltaNet layers (layer_types, else every layer but
    each `full_attention_interval`-th)."""
    if fam != "qwen3_next":
        return set()
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        return {i for i, t in enumerate(types) if t == "linear_attention"}
    every = _int(cfg, "full_attention_interval", fam, default=4)
    return {i for i in range(layers) if (i + 1) % every}


def _common(cfg: dict[str, Any], fam: str, name: str | None) -> dict[str, Any]:
    """The fields every family shares (attention shape, vocabulary, window, quantization)."""
    d = _int(cfg, "hidden_size", fam)
    layers = _int(cfg, "num_hidden_layers", fam)
    heads = _int(cfg, "num_attention_heads", fam)
    linear = _linear_layers(cfg, fam, layers)
    win, n_win, kind = _window(cfg, fam, layers, linear)
    return dict(
        name=name or str(cfg.get("_name_or_path") or cfg.get("model_type") or fam),
        model_type=str(cfg.get("model_type") or fam), hidden_size=d, num_layers=layers,
        num_heads=heads, num_kv_heads=_int(cfg, "num_key_value_heads", fam, default=heads),
        head_dim=_int(cfg, "head_dim", fam, default=d // heads),
        vocab_size=_int(cfg, "vocab_size", fam),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", fam in _TIED_BY_DEFAULT)),
        max_position_embeddings=_int(cfg, "max_position_embeddings", fam, default=0),
        sliding_window=win, num_window_layers=n_win, window_kind=kind,
        quant=parse_quantization(cfg.get("quantization_config")),
        num_linear_layers=len(linear),
    )


def _moe_layer_count(cfg: dict[str, Any], fam: str, layers: int) -> int:
    """Qwen-style MoE placement: every `decoder_sparse_step`-th layer not in mlp_only_layers."""
    step = _int(cfg, "decoder_sparse_step", fam, default=1)
    dense_only = set(cfg.get("mlp_only_layers") or [])
    return sum(1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0)


# --- dense --------------------------------------------------------------------------------

def _dense(cfg: dict[str, Any], fam: str, c: dict[str, Any]) -> ModelSpec:
    """Llama, Mistral, Qwen2/3, Gemma-2/3, Phi-3, Granite (a Llama with scaling
    multipliers that cost nothing), OLMo-2 and Cohere2 (their norms below)."""
    if fam in ("gemma2", "gemma3_text"):
        c.update(norms_per_layer=4,
                 attn_logit_softcapping=float(cfg.get("attn_logit_softcapping") or 0.0),
                 final_logit_softcapping=float(cfg.get("final_logit_softcapping") or 0.0))
    if fam == "olmo2":  # norms after attention and MLP only; q/k norms over whole projections
        c.update(qk_norm_full=True)
    if fam == "cohere2":  # parallel attention + MLP behind one LayerNorm; tied by default
        c.update(norms_per_layer=1,
                 tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)))
    return ModelSpec(
        **c,
        intermediate_size=_int(cfg, "intermediate_size", fam),
        # Qwen2 always has q/k/v biases (not a config field); Llama/Qwen3 say so.
        qkv_bias=fam == "qwen2" or bool(cfg.get("attention_bias", False)),
        qk_norm=fam in ("qwen3", "gemma3_text", "olmo2"),
    )


def _falcon_h1(cfg: dict[str, Any], fam: str, c: dict[str, Any]) -> ModelSpec:
    """Falcon-H1: every layer runs attention and a Mamba-2 mixer side by side, then an MLP.
    The attention, MLP, norms and embeddings are costed as a dense model; the Mamba-2
    mixer's weights and its constant per-sequence state are not (said in `notes`)."""
    d = c["hidden_size"]
    ssm = _int(cfg, "mamba_d_ssm", fam, default=2 * d)
    heads = _int(cfg, "mamba_n_heads", fam, default=max(ssm // 64, 1))
    groups = _int(cfg, "mamba_n_groups", fam, default=1)
    state = _int(cfg, "mamba_d_state", fam, default=128)
    conv = _int(cfg, "mamba_d_conv", fam, default=4)
    proj = d * (2 * ssm + 2 * groups * state + heads) + ssm * d
    mixer = proj + (ssm + 2 * groups * state) * conv + 3 * heads + ssm
    note = (f"approximated: Falcon-H1's Mamba-2 mixer (parallel to attention in each of "
            f"{c['num_layers']} layers, {mixer * c['num_layers'] / 1e9:.2f}B parameters, a "
            f"constant {heads}x{ssm // heads}x{state} state per sequence) is not costed: "
            "weights, FLOPs and KV cover attention, MLP and embeddings only")
    return ModelSpec(**c, intermediate_size=_int(cfg, "intermediate_size", fam),
                     qkv_bias=bool(cfg.get("attention_bias", False)), notes=(note,))


# --- mixture of experts ----------------------------------------------------------------

def _mixtral(cfg: dict[str, Any], fam: str, c: dict[str, Any]) -> ModelSpec:
    width = _int(cfg, "intermediate_size", fam)
    return ModelSpec(**c, intermediate_size=width,
                     num_experts=_int(cfg, "num_local_experts", fam),
                     experts_per_token=_int(cfg, "num_experts_per_tok", fam),
                     moe_intermediate_size=width, num_moe_layers=c["num_layers"])


def _qwen_moe(cfg: dict[str, Any], fam: str, c: dict[str, Any]) -> ModelSpec:
    """Qwen2-MoE (q/k/v biases, a shared expert) and Qwen3-MoE (q/k norms, none)."""
    shared = _int(cfg, "shared_expert_intermediate_size", fam, default=0)
    return ModelSpec(
        **c, intermediate_size=_int(cfg, "intermediate_size", fam),
        qkv_bias=fam == "qwen2_moe", qk_norm=fam == "qwen3_moe",
        num_experts=_int(cfg, "num_experts", fam),
        experts_per_token=_int(cfg, "num_experts_per_tok", fam),
        moe_intermediate_size=_int(cfg, "moe_intermediate_size", fam),
        num_shared_experts=1 if shared else 0, shared_expert_intermediate_size=shared,
        num_moe_layers=_moe_layer_count(cfg, fam, c["num_layers"]))


def _llama4(cfg: dict[str, Any], fam: str, c: dict[str, Any]) -> ModelSpec:
    """Interleaved MoE (every `interleave_moe_layer_step`-th layer) with one shared expert
    of the routed width; dense layers use intermediate_size_mlp."""
    layers = c["num_layers"]
    step = _int(cfg, "interleave_moe_layer_step", fam, default=1)
    moe_idx = cfg.get("moe_layers") or list(range(step - 1, layers, step))
    width = _int(cfg, "intermediate_size", fam)
    return ModelSpec(
        **c, intermediate_size=_int(cfg, "intermediate_size_mlp", fam, default=width),
        num_experts=_int(cfg, "num_local_experts", fam),
        experts_per_token=_int(cfg, "num_experts_per_tok", fam),
        moe_intermediate_size=width, num_shared_experts=1,
        shared_expert_intermediate_size=width,
        num_moe_layers=sum(1 for i in moe_idx if isinstance(i, int) and 0 <= i < layers),
        qkv_bias=bool(cfg.get("attention_bias", False)))


def _gpt_oss(cfg: dict[str, Any], fam: str, c: dict[str, Any]) -> ModelSpec:
    """gpt-oss: biased attention with a learned sink per head; biased experts and router."""
    bias = bool(cfg.get("attention_bias", True))
    width = _int(cfg, "intermediate_size", fam)
    return ModelSpec(**c, intermediate_size=width,
                     num_experts=_int(cfg, "num_local_experts", fam),
                     experts_per_token=_int(cfg, "num_experts_per_tok", fam),
                     moe_intermediate_size=width, num_moe_layers=c["num_layers"],
                     qkv_bias=bias, o_bias=bias, attention_sinks=True, expert_bias=True)


def _qwen3_next(cfg: dict[str, Any], fam: str, c: dict[str, Any]) -> ModelSpec:
    """Qwen3-Next and Qwen3.5: Gated DeltaNet layers between gated-attention layers; MoE
    with one shared expert (a dense Qwen3.5 has no `num_experts`)."""
    moe = cfg.get("num_experts") is not None
    return ModelSpec(
        **c, intermediate_size=_int(cfg, "intermediate_size", fam,
                                    default=0 if moe else None),
        qk_norm=True, attn_output_gate=bool(cfg.get("attn_output_gate", True)),
        num_experts=_int(cfg, "num_experts", fam) if moe else 0,
        experts_per_token=_int(cfg, "num_experts_per_tok", fam) if moe else 0,
        moe_intermediate_size=_int(cfg, "moe_intermediate_size", fam) if moe else 0,
        num_shared_experts=1 if moe else 0,
        shared_expert_intermediate_size=_int(cfg, "shared_expert_intermediate_size", fam)
        if moe else 0,
        num_moe_layers=_moe_layer_count(cfg, fam, c["num_layers"]) if moe else 0,
        linear_num_key_heads=_int(cfg, "linear_num_key_heads", fam),
        linear_num_value_heads=_int(cfg, "linear_num_value_heads", fam),
        linear_key_head_dim=_int(cfg, "linear_key_head_dim", fam),
        linear_value_head_dim=_int(cfg, "linear_value_head_dim", fam),
        linear_conv_kernel=_int(cfg, "linear_conv_kernel_dim", fam, default=4))


def _deepseek(cfg: dict[str, Any], fam: str, c: dict[str, Any]) -> ModelSpec:
    """DeepSeek V2/V3 (and Kimi-K2): MLA attention, routed + shared experts, the first
    `first_k_dense_replace` layers dense."""
    layers = c["num_layers"]
    first_dense = _int(cfg, "first_k_dense_replace", fam, default=0)
    freq = _int(cfg, "moe_layer_freq", fam, default=1)
    width = _int(cfg, "moe_intermediate_size", fam)
    nope, rope = _int(cfg, "qk_nope_head_dim", fam), _int(cfg, "qk_rope_head_dim", fam)
    c["head_dim"] = nope + rope  # MLA has no per-head K/V width: the q/k head width
    return ModelSpec(
        **c, intermediate_size=_int(cfg, "intermediate_size", fam),
        num_experts=_int(cfg, "n_routed_experts", fam),
        experts_per_token=_int(cfg, "num_experts_per_tok", fam),
        moe_intermediate_size=width,
        num_shared_experts=_int(cfg, "n_shared_experts", fam, default=0),
        shared_expert_intermediate_size=width,
        num_moe_layers=sum(1 for i in range(layers) if i >= first_dense and i % freq == 0),
        q_lora_rank=_int(cfg, "q_lora_rank", fam, default=0),
        kv_lora_rank=_int(cfg, "kv_lora_rank", fam), qk_rope_head_dim=rope,
        qk_nope_head_dim=nope, v_head_dim=_int(cfg, "v_head_dim", fam))


def _glm4_moe(cfg: dict[str, Any], fam: str, c: dict[str, Any]) -> ModelSpec:
    """GLM-4.5/4.6: GQA attention with q/k/v biases (optional per-head q/k norms), the
    first `first_k_dense_replace` layers dense, then routed + shared experts (DeepSeek-V3
    routing, standard attention)."""
    layers = c["num_layers"]
    first_dense = _int(cfg, "first_k_dense_replace", fam, default=0)
    width = _int(cfg, "moe_intermediate_size", fam)
    return ModelSpec(
        **c, intermediate_size=_int(cfg, "intermediate_size", fam),
        qkv_bias=bool(cfg.get("attention_bias", True)),
        qk_norm=bool(cfg.get("use_qk_norm", False)),
        num_experts=_int(cfg, "n_routed_experts", fam),
        experts_per_token=_int(cfg, "num_experts_per_tok", fam),
        moe_intermediate_size=width,
        num_shared_experts=_int(cfg, "n_shared_experts", fam, default=0),
        shared_expert_intermediate_size=width,
        num_moe_layers=sum(1 for i in range(layers) if i >= first_dense))


def _minimax_m2(cfg: dict[str, Any], fam: str, c: dict[str, Any]) -> ModelSpec:
    """MiniMax-M2: full attention in every layer with q/k RMSNorms over the whole
    projections (`qk_norm_type` per_layer), MoE in every layer (`intermediate_size` is the
    expert width), no shared expert."""
    width = _int(cfg, "intermediate_size", fam)
    shared = _int(cfg, "shared_intermediate_size", fam, default=0)
    per_layer = str(cfg.get("qk_norm_type", "per_layer")) == "per_layer"
    return ModelSpec(
        **c, intermediate_size=width,
        qk_norm=bool(cfg.get("use_qk_norm", True)), qk_norm_full=per_layer,
        num_experts=_int(cfg, "num_local_experts", fam),
        experts_per_token=_int(cfg, "num_experts_per_tok", fam),
        moe_intermediate_size=width, num_shared_experts=1 if shared else 0,
        shared_expert_intermediate_size=shared, num_moe_layers=c["num_layers"])


def _ernie_moe(cfg: dict[str, Any], fam: str, c: dict[str, Any]) -> ModelSpec:
    """ERNIE-4.5 MoE: MoE on every `moe_layer_interval`-th layer from
    `moe_layer_start_index` to `moe_layer_end_index` (-1: the last), with
    `moe_num_shared_experts` shared experts of the routed width."""
    layers = c["num_layers"]
    start = _int(cfg, "moe_layer_start_index", fam, default=0)
    end = cfg.get("moe_layer_end_index", -1)
    end = layers - 1 if end in (-1, None) else _int(cfg, "moe_layer_end_index", fam)
    every = _int(cfg, "moe_layer_interval", fam, default=1)
    width = _int(cfg, "moe_intermediate_size", fam)
    bias = bool(cfg.get("use_bias", False))
    return ModelSpec(
        **c, intermediate_size=_int(cfg, "intermediate_size", fam), qkv_bias=bias,
        o_bias=bias, num_experts=_int(cfg, "moe_num_experts", fam),
        experts_per_token=_int(cfg, "moe_k", fam), moe_intermediate_size=width,
        num_shared_experts=_int(cfg, "moe_num_shared_experts", fam, default=0),
        shared_expert_intermediate_size=width,
        num_moe_layers=sum(1 for i in range(layers)
                           if start <= i <= end and (i + 1) % every == 0))


PARSERS: dict[str, Parser] = {
    **dict.fromkeys(("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3",
                     "granite", "olmo2", "cohere2"), _dense),
    "falcon_h1": _falcon_h1,
    "mixtral": _mixtral,
    "qwen2_moe": _qwen_moe, "qwen3_moe": _qwen_moe,
    "llama4_text": _llama4,
    "gpt_oss": _gpt_oss,
    "qwen3_next": _qwen3_next,
    "deepseek_v2": _deepseek, "deepseek_v3": _deepseek,
    "glm4_moe": _glm4_moe,
    "minimax_m2": _minimax_m2,
    "ernie4_5_moe": _ernie_moe,
}


def parse_family(cfg: dict[str, Any], name: str | None) -> ModelSpec:
    """The ModelSpec of a language-model config, by its family's parser."""
    fam = family_of(cfg)
    return PARSERS[fam](cfg, fam, _common(cfg, fam, name))
