"""The model spec (`ModelSpec`: the shapes that determine FLOPs and bytes) and the config
field readers the family parsers share (specs/families.py builds the spec, specs/model.py
loads a config and picks the parser): one module both import, so neither imports the other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ridgeline.errors import RidgelineError
from ridgeline.specs.quant import QuantSpec

DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3",
               "granite", "olmo2", "cohere2")
MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "llama4_text", "gpt_oss", "qwen3_next",
             "glm4_moe", "minimax_m2", "ernie4_5_moe")
MLA_TYPES = ("deepseek_v2", "deepseek_v3")
HYBRID_TYPES = ("falcon_h1",)  # attention + Mamba-2 in every layer (the Mamba part approximated)
SUPPORTED_TYPES = DENSE_TYPES + MOE_TYPES + MLA_TYPES + HYBRID_TYPES
# model_types parsed as another family (Kimi-K2 is a DeepSeek-V3; Qwen3.5's text model is
# a Qwen3-Next). Parsers live in specs/families.py.
TYPE_ALIASES = {"kimi_k2": "deepseek_v3", "qwen3_5_moe_text": "qwen3_next",
                "qwen3_5_text": "qwen3_next"}
# Multimodal wrappers: the language model is the nested `text_config` (its model_type, or
# this one when the nested config omits it).
WRAPPER_TYPES = {"gemma3": "gemma3_text", "llama4": "llama4_text", "qwen2_5_vl": "qwen2",
                 "qwen2_vl": "qwen2", "mistral3": "mistral", "llava": "llama",
                 "qwen3_5_moe": "qwen3_next", "qwen3_5": "qwen3_next"}
# Families whose HF config class ties the LM head to the embedding by default.
_TIED_BY_DEFAULT = ("gemma2", "gemma3_text")


@dataclass(frozen=True)
class ModelSpec:
    """Shapes of a decoder-only transformer (all counts are whole-model, unsharded)."""

    name: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense-layer gated MLP width
    vocab_size: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    # q/k RMSNorms over the whole projections (OLMo-2, MiniMax-M2) instead of per head
    qk_norm_full: bool = False
    # MoE (num_experts == 0 for dense models)
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0  # width of each shared expert
    num_moe_layers: int = 0  # layers whose MLP is MoE; the rest are dense
    # MLA (kv_lora_rank == 0 for standard attention)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # Context window (max_position_embeddings): prompt + output must fit; 0 = unknown.
    max_position_embeddings: int = 0
    # Local attention: `num_window_layers` of the softmax-attention layers see only the last
    # `sliding_window` tokens (window_kind "sliding"), or their own chunk of that many
    # tokens (Llama-4 "chunked": costed as a window of the chunk size, an upper bound).
    sliding_window: int = 0
    num_window_layers: int = 0
    window_kind: str = ""
    # Linear attention (Qwen3-Next Gated DeltaNet): layers with a constant-size state per
    # sequence instead of a growing KV cache.
    num_linear_layers: int = 0
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0
    # Attention details that change weights (not the per-token attention cost).
    attn_output_gate: bool = False  # Qwen3-Next: q_proj also emits a sigmoid output gate
    o_bias: bool = False  # gpt-oss: attention_bias covers o_proj too
    attention_sinks: bool = False  # gpt-oss: one learned sink logit per head
    expert_bias: bool = False  # gpt-oss: experts and router carry biases
    norms_per_layer: int = 2  # Gemma-2/3: pre and post norms around attention and MLP
    # Soft-capping (Gemma-2): tanh caps on attention and final logits; no cost change.
    attn_logit_softcapping: float = 0.0
    final_logit_softcapping: float = 0.0
    # The checkpoint's quantization_config (None: unquantized).
    quant: QuantSpec | None = None
    # What the family's parser could not cost, in words (printed among the assumptions).
    notes: tuple[str, ...] = ()

    # --- derived shapes -------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and self.num_moe_layers > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def num_softmax_layers(self) -> int:
        """Layers with softmax attention (all but the linear-attention ones)."""
        return self.num_layers - self.num_linear_layers

    @property
    def num_full_attention_layers(self) -> int:
        """Softmax-attention layers that see the whole context (KV grows with it)."""
        return self.num_softmax_layers - self.num_window_layers

    @property
    def is_windowed(self) -> bool:
        return self.sliding_window > 0 and self.num_window_layers > 0

    def kv_tokens_per_layer(self, context_tokens: float) -> tuple[float, float]:
        """(tokens a full-attention layer holds, tokens a windowed layer holds) at a context."""
        w = float(self.sliding_window) if self.is_windowed else float("inf")
        return float(context_tokens), min(float(context_tokens), w)

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def linear_state_elements(self) -> int:
        """Recurrent state of one linear-attention layer for one sequence: the delta-rule
        matrix (h_v x d_k x d_v) plus the causal-conv tail ((kernel-1) x conv channels)."""
        conv = (2 * self.linear_key_dim + self.linear_value_dim) * max(
            self.linear_conv_kernel - 1, 0)
        return (self.linear_num_value_heads * self.linear_key_head_dim
                * self.linear_value_head_dim + conv)

    @property
    def linear_attention_params(self) -> int:
        """One Gated DeltaNet layer: in_proj_qkvz (q, k, v, z), in_proj_ba (beta, alpha per
        value head), depthwise conv over q/k/v, dt_bias and A_log, gated norm, out_proj."""
        if not self.num_linear_layers:
            return 0
        d, kd, vd, hv = (self.hidden_size, self.linear_key_dim, self.linear_value_dim,
                         self.linear_num_value_heads)
        return (d * (2 * kd + 2 * vd) + d * 2 * hv + (2 * kd + vd) * self.linear_conv_kernel
                + 2 * hv + self.linear_value_head_dim + vd * d)

    @property
    def q_dim(self) -> int:
        """Width of the query projection output (all heads)."""
        if self.is_mla:
            return self.num_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.num_heads * self.head_dim

    @property
    def attn_out_dim(self) -> int:
        """Width of the attention output that o_proj reads."""
        if self.is_mla:
            return self.num_heads * self.v_head_dim
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """d_kv of the seeds: K (or V) width per token per layer, h_kv * head_dim."""
        return self.num_kv_heads * self.head_dim

    @property
    def kv_elements_per_token_per_layer(self) -> int:
        """Cached elements per token per layer: 2*h_kv*head_dim (K and V), or MLA's latent
        kv_lora_rank + qk_rope_head_dim (one shared latent, no separate K and V)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    # --- parameter counts (per layer kind) ------------------------------------------
    @property
    def attention_params(self) -> int:
        d = self.hidden_size
        if self.is_mla:
            h = self.num_heads
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = d * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * h * qk
            else:
                q = d * h * qk
            kv_a = d * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            kv_b = self.kv_lora_rank * h * (self.qk_nope_head_dim + self.v_head_dim)
            o = h * self.v_head_dim * d
            return q + kv_a + kv_b + o
        qkv_out = self.q_dim * (2 if self.attn_output_gate else 1) + 2 * self.kv_dim
        p = d * qkv_out + self.attn_out_dim * d
        if self.qkv_bias:
            p += qkv_out
        if self.o_bias:
            p += d
        if self.attention_sinks:
            p += self.num_heads
        if self.qk_norm:
            p += self.q_dim + self.kv_dim if self.qk_norm_full else 2 * self.head_dim
        return p

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert (gated MLP of moe_intermediate_size)."""
        bias = 2 * self.moe_intermediate_size + self.hidden_size if self.expert_bias else 0
        return 3 * self.hidden_size * self.moe_intermediate_size + bias

    @property
    def shared_expert_params(self) -> int:
        """All shared experts of one MoE layer together."""
        return 3 * self.hidden_size * self.shared_expert_intermediate_size * self.num_shared_experts

    @property
    def router_params(self) -> int:
        return self.hidden_size * self.num_experts + (self.num_experts if self.expert_bias
                                                      else 0)

    @property
    def norm_params_per_layer(self) -> int:
        return self.norms_per_layer * self.hidden_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """Separate LM head parameters (0 when tied to the input embedding)."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def _mixer_params(self) -> int:
        """Token mixers of all layers: softmax attention and linear attention."""
        return (self.num_softmax_layers * self.attention_params
                + self.num_linear_layers * self.linear_attention_params)

    @property
    def total_params(self) -> int:
        """All parameters (embeddings and LM head included, MTP heads excluded)."""
        return (self._mixer_params + self.num_layers * self.norm_params_per_layer
                + self.num_dense_layers * self.dense_mlp_params
                + self.num_moe_layers * (self.num_experts * self.expert_params
                                         + self.shared_expert_params + self.router_params)
                + self.embedding_params + self.lm_head_params + self.hidden_size)

    @property
    def active_params(self) -> int:
        """Parameters one token uses: k routed experts instead of all E."""
        return (self._mixer_params + self.num_layers * self.norm_params_per_layer
                + self.num_dense_layers * self.dense_mlp_params
                + self.num_moe_layers * (self.experts_per_token * self.expert_params
                                         + self.shared_expert_params + self.router_params)
                + self.embedding_params + self.lm_head_params + self.hidden_size)

    def describe(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if v not in (0, False, "", None, ())}
        if self.quant is not None:
            out["quant"] = self.quant.describe()
        out["total_params"] = self.total_params
        out["active_params"] = self.active_params
        return out


# --- parsing -----------------------------------------------------------------------------

def _need(cfg: dict[str, Any], key: str, family: str) -> Any:
    value = cfg.get(key)
    if value is None:
        raise RidgelineError(f"config.json: missing field '{key}' (required for {family})")
    return value


# Sane bounds of the shape fields (far beyond any released model; a 1e30 hidden size or a
# zero head count is a broken file, and would give inf/NaN or nonsense downstream).
_BOUNDS: dict[str, tuple[int, int]] = {
    "hidden_size": (1, 1 << 20),
    "num_hidden_layers": (1, 10_000),
    "num_attention_heads": (1, 1 << 14),
    "num_key_value_heads": (1, 1 << 14),
    "head_dim": (1, 1 << 14),
    "vocab_size": (1, 1 << 24),
    "intermediate_size": (1, 1 << 22),
    "moe_intermediate_size": (1, 1 << 22),
    "shared_expert_intermediate_size": (0, 1 << 22),
    "num_local_experts": (1, 1 << 16),
    "num_experts": (1, 1 << 16),
    "n_routed_experts": (1, 1 << 16),
    "num_experts_per_tok": (1, 1 << 16),
    "n_shared_experts": (0, 1 << 10),
    "decoder_sparse_step": (1, 10_000),
    "moe_layer_freq": (1, 10_000),
    "first_k_dense_replace": (0, 10_000),
    "q_lora_rank": (0, 1 << 16),
    "kv_lora_rank": (1, 1 << 16),
    "qk_rope_head_dim": (1, 1 << 14),
    "qk_nope_head_dim": (1, 1 << 14),
    "v_head_dim": (1, 1 << 14),
    "max_position_embeddings": (1, 1 << 27),
    "sliding_window": (1, 1 << 27),
    "attention_chunk_size": (1, 1 << 27),
    "sliding_window_pattern": (1, 10_000),
    "full_attention_interval": (1, 10_000),
    "max_window_layers": (0, 10_000),
    "interleave_moe_layer_step": (1, 10_000),
    "intermediate_size_mlp": (1, 1 << 22),
    "linear_num_key_heads": (1, 1 << 14),
    "linear_num_value_heads": (1, 1 << 14),
    "linear_key_head_dim": (1, 1 << 14),
    "linear_value_head_dim": (1, 1 << 14),
    "linear_conv_kernel_dim": (1, 1 << 10),
    "shared_intermediate_size": (0, 1 << 22),
    "moe_num_experts": (1, 1 << 16),
    "moe_k": (1, 1 << 16),
    "moe_num_shared_experts": (0, 1 << 10),
    "moe_layer_start_index": (0, 10_000),
    "moe_layer_end_index": (0, 10_000),
    "moe_layer_interval": (1, 10_000),
    "mamba_d_ssm": (1, 1 << 22),
    "mamba_n_heads": (1, 1 << 16),
    "mamba_n_groups": (1, 1 << 16),
    "mamba_d_state": (1, 1 << 16),
    "mamba_d_conv": (1, 1 << 10),
}


def _int(cfg: dict[str, Any], key: str, family: str, default: int | None = None) -> int:
    """A whole-number shape field within `_BOUNDS`; `default` when absent or null (None:
    required). Anything else (a string, NaN, 1e30, 0 heads, 2.5) is a one-line error."""
    value = cfg.get(key)
    if value is None:
        if default is not None:
            return default
        raise RidgelineError(f"config.json: missing field '{key}' (required for {family})")
    lo, hi = _BOUNDS[key]
    allowed = f"a whole number from {lo:,} to {hi:,}"
    ok_type = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok_type or value != value or value in (float("inf"), float("-inf")) or \
            value != int(value) or not lo <= value <= hi:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise RidgelineError(f"config.json: field '{key}': got {shown}; allowed: {allowed}")
    return int(value)


def _check_spec(m: ModelSpec) -> ModelSpec:
    """Cross-field rules: GQA groups, head width, experts."""
    if m.num_kv_heads > m.num_heads or m.num_heads % m.num_kv_heads:
        raise RidgelineError(
            f"config.json: field 'num_key_value_heads': got {m.num_kv_heads}; allowed: a "
            f"divisor of num_attention_heads ({m.num_heads}), at most {m.num_heads}")
    if m.head_dim < 1:
        raise RidgelineError(
            f"config.json: field 'hidden_size': got {m.hidden_size}; allowed: at least "
            f"num_attention_heads ({m.num_heads}) when head_dim is not given")
    if m.num_experts and m.experts_per_token > m.num_experts:
        raise RidgelineError(
            f"config.json: field 'num_experts_per_tok': got {m.experts_per_token}; allowed: "
            f"1 to the number of experts ({m.num_experts})")
    return m


def _window(cfg: dict[str, Any], fam: str, layers: int, linear: set[int]
            ) -> tuple[int, int, str]:
    """(window tokens, windowed softmax layers, kind) from the family's config fields."""
    types = cfg.get("layer_types")
    if types is not None and not (isinstance(types, list)
                                  and all(isinstance(t, str) for t in types)):
        raise RidgelineError("config.json: field 'layer_types': allowed: a list of one "
                             "attention type per layer (e.g. \"sliding_attention\")")
    max_pos = cfg.get("max_position_embeddings") or 0
    if fam == "llama4_text":
        chunk = _int(cfg, "attention_chunk_size", fam, default=0)
        rope = cfg.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(layers)]
        if not isinstance(rope, list) or len(rope) != layers:
            raise RidgelineError(f"config.json: field 'no_rope_layers': allowed: a list of "
                                 f"{layers} 0/1 flags")
        n = sum(1 for r in rope if r) if chunk else 0
        return (chunk, n, "chunked") if n else (0, 0, "")
    win = cfg.get("sliding_window")
    if win is None or (fam in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe")
                       and not cfg.get("use_sliding_window", False)):
        return 0, 0, ""
    w = _int(cfg, "sliding_window", fam)
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        n = sum(1 for t in types if t in ("sliding_attention", "chunked_attention"))
    elif fam == "gemma2":
        n = sum(1 for i in range(layers) if i % 2 == 0)  # even layers slide (HF Gemma2)
    elif fam in ("gemma3_text", "cohere2"):  # every pattern-th layer is global
        pat = _int(cfg, "sliding_window_pattern", fam, default=6 if fam == "gemma3_text" else 4)
        n = sum(1 for i in range(layers) if (i + 1) % pat)
    elif fam in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        first = _int(cfg, "max_window_layers", fam, default=0)
        n = sum(1 for i in range(layers) if i >= first)
    else:
        n = layers  # Mistral, Phi-3, Mixtral: every layer slides
    n -= sum(1 for i in linear if i < layers) if fam == "qwen3_next" else 0
    if w >= max_pos > 0 or n <= 0:
        return 0, 0, ""  # a window as wide as the context never binds
    return w, n, "sliding"
