"""GPU memory: weights per GPU, KV bytes per token, activation workspace, KV capacity.

The budget follows vLLM's `gpu_memory_utilization`: of util * memory, the weights, the peak
activation workspace of one forward pass and a fixed runtime reserve come first; what is left
holds the KV cache. Per GPU, the largest pipeline stage decides (the embedding sits on the
first stage, the LM head on the last). With attention data-parallelism each of the attn_dp
ranks holds the attention (and dense-MLP, shared-expert) weights split tp ways and caches its
own sequences, while the routed experts are divided over all tp x attn_dp GPUs: the engine
instance's KV capacity is attn_dp times one GPU's.

>>> from ridgeline.specs import load_model, resolve_precision, Parallelism
>>> kv_bytes_per_token(load_model("qwen2.5-7b"), resolve_precision("bf16"))
57344.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ridgeline.perf.linear_attention import linear_attention_ops, state_bytes_per_sequence_per_gpu
from ridgeline.perf.ops import kv_elements_per_token_per_layer_per_gpu, kv_heads_per_gpu
from ridgeline.perf.step_time import ArrayLike
from ridgeline.specs.hardware import HardwareSpec
from ridgeline.specs.model import ModelSpec
from ridgeline.specs.parallel import Parallelism
from ridgeline.specs.precision import Precision

# CUDA context, cuBLAS/NCCL workspaces and CUDA graphs: a fixed reserve per GPU.
RUNTIME_RESERVE_BYTES = 1.0 * 1024**3


def kv_bytes_per_token(model: ModelSpec, precision: Precision) -> float:
    """Unique KV bytes one token adds, all softmax-attention layers: L * 2 * h_kv * head_dim
    * b_kv (MLA: L * (kv_lora_rank + qk_rope_head_dim) * b_kv). This is what P/D transfer
    moves. Windowed layers count in full here (an upper bound; the block accounting of the
    simulator does not free tokens that left the window) and linear-attention layers hold
    no KV (their state: `state_bytes_per_sequence_per_gpu`)."""
    return float(model.num_softmax_layers * model.kv_elements_per_token_per_layer
                 * precision.kv_bytes)


def kv_bytes_per_sequence_per_gpu(model: ModelSpec, precision: Precision,
                                  parallel: Parallelism, context_tokens: ArrayLike
                                  ) -> ArrayLike:
    """KV (and linear-attention state) one sequence of `context_tokens` holds on the busiest
    GPU: full-attention layers T tokens, windowed layers min(T, w), linear-attention layers a
    constant state, as vLLM's hybrid KV-cache manager allocates them."""
    t = np.asarray(context_tokens, dtype=np.float64)
    per_layer = kv_elements_per_token_per_layer_per_gpu(model, parallel.tp) * precision.kv_bytes
    frac = layers_per_stage(model, parallel.pp) / model.num_layers  # busiest stage's share
    full = model.num_full_attention_layers * t
    win = model.num_window_layers * np.minimum(t, model.sliding_window) \
        if model.is_windowed else 0.0 * t
    state = state_bytes_per_sequence_per_gpu(model, precision, parallel.tp)
    return frac * ((full + win) * per_layer + state)


def layers_per_stage(model: ModelSpec, pp: int) -> int:
    return -(-model.num_layers // pp)


def kv_bytes_per_token_per_gpu(model: ModelSpec, precision: Precision,
                               parallel: Parallelism) -> float:
    """KV bytes per token on the busiest GPU (KV heads replicated when tp > h_kv; the MLA
    latent is replicated on every TP rank)."""
    return float(layers_per_stage(model, parallel.pp) * model.num_softmax_layers
                 / model.num_layers
                 * kv_elements_per_token_per_layer_per_gpu(model, parallel.tp)
                 * precision.kv_bytes)


def weight_bytes_per_gpu(model: ModelSpec, precision: Precision, parallel: Parallelism
                         ) -> float:
    """Weight bytes held by the GPU of the largest pipeline stage."""
    m, tp = model, parallel.tp
    b_w, b_a, b_e = precision.attention_weight_bytes, precision.activation_bytes, \
        precision.embedding_bytes
    d = m.hidden_size
    hq = m.num_heads // tp
    if m.is_mla:
        lat = m.kv_lora_rank + m.qk_rope_head_dim
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        # q_a is replicated on every TP rank, q_b is sharded
        q = (d * m.q_lora_rank + m.q_lora_rank * hq * qk) if m.q_lora_rank else d * hq * qk
        attn = (q + d * lat + m.kv_lora_rank * hq * (m.qk_nope_head_dim + m.v_head_dim)
                + hq * m.v_head_dim * d) * b_w
    else:
        hkv = kv_heads_per_gpu(m, tp)
        q_out = hq * m.head_dim * (2 if m.attn_output_gate else 1)
        qkv_out = q_out + 2 * hkv * m.head_dim
        attn = (d * qkv_out + hq * m.head_dim * d) * b_w + (qkv_out * b_a if m.qkv_bias else 0)
        attn += (d if m.o_bias else 0) * b_a + (hq if m.attention_sinks else 0) * b_a
    norms = m.norms_per_layer * d * b_a
    dense_mlp = 3 * d * m.intermediate_size / tp * precision.mlp_weight_bytes
    # E/ep experts per GPU, each split moe_tp ways (ep x moe_tp = tp x attn_dp).
    expert_split = parallel.ep * parallel.moe_tp
    moe_mlp = (m.num_experts * m.expert_params / expert_split * precision.expert_weight_bytes
               + m.shared_expert_params / tp * precision.shared_expert_weight_bytes
               + m.router_params * b_a) if m.is_moe else 0.0
    lin = sum(o.weight_bytes for o in linear_attention_ops(m, precision, tp))
    layers_total = (m.num_softmax_layers * attn + m.num_linear_layers * lin
                    + m.num_layers * norms + m.num_dense_layers * dense_mlp
                    + m.num_moe_layers * moe_mlp)
    emb = m.embedding_params / tp * b_e
    # A tied head still needs the matrix on the last stage; a quantized head its own bytes.
    head = m.vocab_size * d / tp * precision.lm_head_bytes
    final_norm = d * b_a     # the RMSNorm before the head, replicated, on the last stage
    if parallel.pp == 1:
        return layers_total + emb + final_norm + (0.0 if m.tie_word_embeddings else head)
    per_layer = layers_total / m.num_layers
    return per_layer * layers_per_stage(m, parallel.pp) + max(emb, head + final_norm)


def workspace_bytes(model: ModelSpec, precision: Precision, parallel: Parallelism,
                    max_tokens: float, max_seqs: float) -> float:
    """Peak transient activations of one forward pass of `max_tokens` tokens (residual,
    normed input, QKV, attention output, the widest MLP intermediate) plus fp32 logits of
    `max_seqs` rows."""
    m, tp, b_a = model, parallel.tp, precision.activation_bytes
    qkv = m.q_dim / tp + 2 * kv_heads_per_gpu(m, tp) * max(m.head_dim, 1)
    mlp = 3 * m.intermediate_size / tp if m.num_dense_layers else 0.0
    if m.is_moe:
        k = m.experts_per_token
        mlp = max(mlp, k * (m.hidden_size + 3 * m.moe_intermediate_size / parallel.moe_tp))
    per_token = (2 * m.hidden_size + qkv + m.attn_out_dim / tp + mlp) * b_a
    return max_tokens * per_token + max_seqs * m.vocab_size / tp * 4.0


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory budget of a replica."""

    capacity_bytes: float
    budget_bytes: float  # gpu_memory_utilization * capacity
    weight_bytes: float
    workspace_bytes: float
    reserve_bytes: float
    kv_bytes_per_token_per_gpu: float
    kv_bytes_per_token: float  # unique, whole model
    # Linear-attention state of max_num_seqs sequences (constant per sequence; 0 for
    # models without linear attention), set aside before the KV cache.
    state_bytes: float = 0.0
    # Attention data-parallel ranks of the instance: each caches its own sequences.
    attn_dp: int = 1

    @property
    def kv_budget_bytes(self) -> float:
        return (self.budget_bytes - self.weight_bytes - self.workspace_bytes
                - self.reserve_bytes - self.state_bytes)

    @property
    def fits(self) -> bool:
        return self.kv_budget_bytes >= self.kv_bytes_per_token_per_gpu

    @property
    def shortfall_bytes(self) -> float:
        """How much memory is missing for weights + workspace + one token of KV (0 if fits)."""
        return max(0.0, self.kv_bytes_per_token_per_gpu - self.kv_budget_bytes)

    @property
    def kv_capacity_tokens_per_rank(self) -> int:
        """Tokens of KV cache one attention rank (one GPU's budget) holds."""
        if self.kv_bytes_per_token_per_gpu <= 0:
            return 0
        return max(0, math.floor(self.kv_budget_bytes / self.kv_bytes_per_token_per_gpu))

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens of KV cache the engine instance holds: attn_dp ranks' worth."""
        return self.attn_dp * self.kv_capacity_tokens_per_rank

    def max_sequences(self, tokens_per_sequence: float) -> int:
        """Sequences of this length whose KV fits at once."""
        if tokens_per_sequence <= 0:
            return 0
        return int(self.kv_capacity_tokens // tokens_per_sequence)


def plan_memory(model: ModelSpec, hardware: HardwareSpec, precision: Precision,
                parallel: Parallelism, gpu_memory_utilization: float = 0.9,
                max_tokens: float = 8192, max_seqs: float = 256) -> MemoryPlan:
    return MemoryPlan(
        capacity_bytes=hardware.memory_bytes,
        budget_bytes=gpu_memory_utilization * hardware.memory_bytes,
        weight_bytes=weight_bytes_per_gpu(model, precision, parallel),
        workspace_bytes=workspace_bytes(model, precision, parallel, max_tokens, max_seqs),
        reserve_bytes=RUNTIME_RESERVE_BYTES,
        kv_bytes_per_token_per_gpu=kv_bytes_per_token_per_gpu(model, precision, parallel),
        kv_bytes_per_token=kv_bytes_per_token(model, precision),
        state_bytes=max_seqs * _state_per_seq(model, precision, parallel),
        attn_dp=parallel.attn_dp,
    )


def _state_per_seq(model: ModelSpec, precision: Precision, parallel: Parallelism) -> float:
    return state_bytes_per_sequence_per_gpu(model, precision, parallel.tp) * \
        layers_per_stage(model, parallel.pp) / model.num_layers
