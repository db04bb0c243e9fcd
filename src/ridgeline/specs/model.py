"""Model spec: the shapes that determine FLOPs and bytes, parsed from a HF config.json.

Supported families (by `model_type`): llama (Llama 2, 3.x), mistral, qwen2 (Qwen2/2.5),
qwen3 (dense), mixtral, qwen2_moe, qwen3_moe, deepseek_v2 and deepseek_v3 (MLA, shared
experts, `first_k_dense_replace`). Shapes follow the Hugging Face modeling code: a gated MLP
(gate, up, down: 3 matrices of `intermediate_size`), untied or tied embeddings, GQA
`num_key_value_heads`, an explicit `head_dim` where given, MoE experts and shared experts,
MLA low-rank projections and the latent KV cache.

>>> m = load_model("llama-3.1-8b")
>>> round(m.total_params / 1e9, 2), m.kv_elements_per_token_per_layer
(8.03, 2048)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ridgeline.errors import RidgelineError

DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3")
MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe")
MLA_TYPES = ("deepseek_v2", "deepseek_v3")
SUPPORTED_TYPES = DENSE_TYPES + MOE_TYPES + MLA_TYPES


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
        qkv_out = self.q_dim + 2 * self.kv_dim
        p = d * qkv_out + self.attn_out_dim * d
        if self.qkv_bias:
            p += qkv_out
        if self.qk_norm:
            p += 2 * self.head_dim
        return p

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert (gated MLP of moe_intermediate_size)."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def shared_expert_params(self) -> int:
        """All shared experts of one MoE layer together."""
        return 3 * self.hidden_size * self.shared_expert_intermediate_size * self.num_shared_experts

    @property
    def router_params(self) -> int:
        return self.hidden_size * self.num_experts

    @property
    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """Separate LM head parameters (0 when tied to the input embedding)."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def layer_params_dense(self) -> int:
        return self.attention_params + self.dense_mlp_params + self.norm_params_per_layer

    @property
    def layer_params_moe(self) -> int:
        return (self.attention_params + self.num_experts * self.expert_params
                + self.shared_expert_params + self.router_params + self.norm_params_per_layer)

    @property
    def total_params(self) -> int:
        """All parameters (embeddings and LM head included, MTP heads excluded)."""
        return (self.num_dense_layers * self.layer_params_dense
                + self.num_moe_layers * self.layer_params_moe
                + self.embedding_params + self.lm_head_params + self.hidden_size)

    @property
    def active_params(self) -> int:
        """Parameters one token uses: k routed experts instead of all E."""
        moe_active = (self.attention_params + self.experts_per_token * self.expert_params
                      + self.shared_expert_params + self.router_params
                      + self.norm_params_per_layer)
        return (self.num_dense_layers * self.layer_params_dense
                + self.num_moe_layers * moe_active
                + self.embedding_params + self.lm_head_params + self.hidden_size)

    def describe(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if v not in (0, False)}
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


def from_hf_config(cfg: dict[str, Any], name: str | None = None) -> ModelSpec:
    """Build a ModelSpec from a parsed Hugging Face config.json dict (validated: every
    problem is a one-line RidgelineError naming the field and what is allowed)."""
    if not isinstance(cfg, dict):
        raise RidgelineError(f"config.json: got a JSON {type(cfg).__name__}; allowed: a JSON "
                             "object of Hugging Face config fields ({\"model_type\": ...})")
    return _check_spec(_from_hf_config(cfg, name))


def _from_hf_config(cfg: dict[str, Any], name: str | None) -> ModelSpec:
    model_type = cfg.get("model_type")
    if model_type is None:
        archs = cfg.get("architectures") or []
        raise RidgelineError(
            f"config.json: missing field 'model_type' (architectures={archs}); "
            f"supported model_type: {', '.join(SUPPORTED_TYPES)}")
    if not isinstance(model_type, str) or model_type not in SUPPORTED_TYPES:
        raise RidgelineError(f"config.json: model_type {model_type!r} is not supported; "
                             f"supported: {', '.join(SUPPORTED_TYPES)}")
    fam = model_type
    d = _int(cfg, "hidden_size", fam)
    layers = _int(cfg, "num_hidden_layers", fam)
    heads = _int(cfg, "num_attention_heads", fam)
    kv_heads = _int(cfg, "num_key_value_heads", fam, default=heads)
    head_dim = _int(cfg, "head_dim", fam, default=d // heads)
    vocab = _int(cfg, "vocab_size", fam)
    common: dict[str, Any] = dict(
        name=name or str(cfg.get("_name_or_path") or model_type), model_type=model_type,
        hidden_size=d, num_layers=layers, num_heads=heads, num_kv_heads=kv_heads,
        head_dim=head_dim, vocab_size=vocab,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_position_embeddings=_int(cfg, "max_position_embeddings", fam, default=0),
    )
    if model_type in DENSE_TYPES:
        return ModelSpec(
            **common,
            intermediate_size=_int(cfg, "intermediate_size", fam),
            # Qwen2 always has q/k/v biases (not a config field); Llama/Qwen3 say so.
            qkv_bias=model_type == "qwen2" or bool(cfg.get("attention_bias", False)),
            qk_norm=model_type == "qwen3",
        )
    if model_type == "mixtral":
        return ModelSpec(
            **common,
            intermediate_size=_int(cfg, "intermediate_size", fam),
            num_experts=_int(cfg, "num_local_experts", fam),
            experts_per_token=_int(cfg, "num_experts_per_tok", fam),
            moe_intermediate_size=_int(cfg, "intermediate_size", fam),
            num_moe_layers=layers,
        )
    if model_type in ("qwen2_moe", "qwen3_moe"):
        step = _int(cfg, "decoder_sparse_step", fam, default=1)
        dense_only = set(cfg.get("mlp_only_layers") or [])
        moe_layers = sum(1 for i in range(layers)
                         if i not in dense_only and (i + 1) % step == 0)
        shared = _int(cfg, "shared_expert_intermediate_size", fam, default=0)
        return ModelSpec(
            **common,
            intermediate_size=_int(cfg, "intermediate_size", fam),
            qkv_bias=model_type == "qwen2_moe",
            qk_norm=model_type == "qwen3_moe",
            num_experts=_int(cfg, "num_experts", fam),
            experts_per_token=_int(cfg, "num_experts_per_tok", fam),
            moe_intermediate_size=_int(cfg, "moe_intermediate_size", fam),
            num_shared_experts=1 if shared else 0,
            shared_expert_intermediate_size=shared,
            num_moe_layers=moe_layers,
        )
    # DeepSeek V2/V3: MLA attention, routed + shared experts, first k layers dense.
    n_routed = _int(cfg, "n_routed_experts", fam)
    first_dense = _int(cfg, "first_k_dense_replace", fam, default=0)
    freq = _int(cfg, "moe_layer_freq", fam, default=1)
    moe_layers = sum(1 for i in range(layers) if i >= first_dense and i % freq == 0)
    moe_width = _int(cfg, "moe_intermediate_size", fam)
    # MLA has no per-head K/V width; record the query/key head width (nope + rope).
    common["head_dim"] = _int(cfg, "qk_nope_head_dim", fam) + _int(
        cfg, "qk_rope_head_dim", fam)
    return ModelSpec(
        **common,
        intermediate_size=_int(cfg, "intermediate_size", fam),
        num_experts=n_routed,
        experts_per_token=_int(cfg, "num_experts_per_tok", fam),
        moe_intermediate_size=moe_width,
        num_shared_experts=_int(cfg, "n_shared_experts", fam, default=0),
        shared_expert_intermediate_size=moe_width,
        num_moe_layers=moe_layers,
        q_lora_rank=_int(cfg, "q_lora_rank", fam, default=0),
        kv_lora_rank=_int(cfg, "kv_lora_rank", fam),
        qk_rope_head_dim=_int(cfg, "qk_rope_head_dim", fam),
        qk_nope_head_dim=_int(cfg, "qk_nope_head_dim", fam),
        v_head_dim=_int(cfg, "v_head_dim", fam),
    )


def _catalog_dir() -> Any:
    return resources.files("ridgeline.specs").joinpath("data", "models")


def model_catalog() -> dict[str, dict[str, Any]]:
    """Catalog name -> raw config dict (HF config.json values plus `_source`)."""
    out: dict[str, dict[str, Any]] = {}
    for entry in sorted(_catalog_dir().iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".json"):
            out[entry.name[:-5]] = json.loads(entry.read_text())
    return out


def load_model(name_or_path: str) -> ModelSpec:
    """A catalog model name (see `ridgeline models`) or a path to a HF config.json."""
    path = Path(name_or_path)
    if path.suffix == ".json" or path.is_file() or path.is_dir():
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise RidgelineError(f"model: file {str(path)!r} not found")
        from ridgeline.inputs import load_json

        cfg = load_json(path, "model", max_bytes=16 << 20)
        return from_hf_config(cfg, name=path.parent.name or path.stem)
    key = name_or_path.lower()
    entry = _catalog_dir().joinpath(f"{key}.json")
    if not entry.is_file():
        names = ", ".join(sorted(model_catalog()))
        raise RidgelineError(f"model: got {name_or_path!r}; allowed: a config.json path or "
                             f"one of {names}")
    return from_hf_config(json.loads(entry.read_text()), name=key)
