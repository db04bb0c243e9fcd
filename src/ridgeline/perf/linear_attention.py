"""Linear attention (Qwen3-Next's Gated DeltaNet): operators costed from first principles.

A Gated DeltaNet layer keeps, per sequence and value head, a d_k x d_v state matrix S in
place of a growing KV cache. For each token (q, k, v, gate g, step beta):

    S <- g S                       decay:              d_k d_v multiplies
    u  = beta (v - S^T k)          the delta-rule error: 2 d_k d_v
    S <- S + k u^T                 rank-1 update:      2 d_k d_v
    o  = S^T q                     readout:            2 d_k d_v

so a decode token costs about 7 d_k d_v FLOPs per value head and reads and writes S once:
2 h_v d_k d_v b_state bytes per layer per sequence, whatever the context (the decode KV
read, with T replaced by a constant). The causal conv1d over q, k, v keeps its last
(kernel - 1) inputs per channel in the same per-sequence state.

Prefill runs the chunked (WY) form: within a chunk of C = 64 tokens the tokens interact as
in attention (Q K^T and the chunk's value mix: 2 C (d_k + d_v) FLOPs per token and head),
and each token also meets the carried state (readout and update: 4 d_k d_v). The state is
read and written once per sequence in the step (prefill chunk or decode), work variable s.

Projections follow the checkpoint: in_proj_qkvz (q, k: h_k d_k each; v, z: h_v d_v each),
in_proj_ba (beta, alpha: h_v each), out_proj (h_v d_v -> d), a gated RMSNorm; heads are
sharded by TP. The state is held in the 16-bit activation dtype (vLLM's
`--mamba-ssm-cache-dtype auto`).

>>> from ridgeline.specs.model import ModelSpec
>>> from ridgeline.specs.precision import resolve_precision
>>> m = ModelSpec("t", "qwen3_next", 64, 4, 4, 2, 16, 128, 100, num_linear_layers=3,
...     linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
...     linear_value_head_dim=8, linear_conv_kernel=4)
>>> [o.name for o in linear_attention_ops(m, resolve_precision(), 1)][:3]
['lin_norm', 'lin_in_proj', 'lin_conv']
"""

from __future__ import annotations

from ridgeline.perf.operator import ATTENTION, VECTOR, Op, gemm_kind
from ridgeline.specs.model import ModelSpec
from ridgeline.specs.precision import Precision

CHUNK_TOKENS = 64  # the chunked kernel's block (fla / vLLM chunk_gated_delta_rule)
DECODE_FLOPS_PER_STATE_ELEMENT = 7.0  # decay 1 + error 2 + update 2 + readout 2


def state_bytes_per_sequence_per_gpu(m: ModelSpec, pr: Precision, tp: int) -> float:
    """Recurrent state of all linear-attention layers for one sequence, on one GPU."""
    return m.num_linear_layers * m.linear_state_elements / tp * pr.activation_bytes


def linear_attention_ops(m: ModelSpec, pr: Precision, tp: int) -> list[Op]:
    """The operators of the linear-attention layers on one GPU (none for other models)."""
    L = m.num_linear_layers
    if not L:
        return []
    d, b_a, b_w = m.hidden_size, pr.activation_bytes, pr.attention_weight_bytes
    kd, vd, hv = m.linear_key_dim / tp, m.linear_value_dim / tp, m.linear_num_value_heads / tp
    dk, dv = m.linear_key_head_dim, m.linear_value_head_dim
    conv_ch = 2 * kd + vd
    proj_out = 2 * kd + 2 * vd + 2 * hv
    io = (2 * kd + 2 * vd + 2 * hv) * b_a  # q, k, v, g, beta in; o out (one token)
    state = m.linear_state_elements / tp * b_a
    g = gemm_kind(pr, "attention")
    return [
        Op("lin_norm", VECTOR, L, flops={"n": 5.0 * d}, bytes={"n": 4.0 * d * b_a}),
        Op("lin_in_proj", g, L, flops={"n": 2.0 * d * proj_out},
           bytes={"n": (d + proj_out) * b_a}, weight_bytes=d * proj_out * b_w,
           in_dim=d, out_dim=proj_out),
        Op("lin_conv", VECTOR, L, flops={"n": 2.0 * m.linear_conv_kernel * conv_ch},
           bytes={"n": 2.0 * conv_ch * b_a}, weight_bytes=conv_ch * m.linear_conv_kernel * b_a),
        Op("lin_attn_prefill", ATTENTION, L,
           flops={"pt": hv * (4.0 * dk * dv + 2.0 * CHUNK_TOKENS * (dk + dv))},
           bytes={"pt": io}, driver="pre"),
        Op("lin_attn_decode", ATTENTION, L,
           flops={"dq": hv * DECODE_FLOPS_PER_STATE_ELEMENT * dk * dv},
           bytes={"dq": io}, driver="dec"),
        # Each sequence of the step (a prefill chunk or a decode token) reads and writes its
        # state once: constant in the context, unlike KV.
        Op("lin_state", VECTOR, L, bytes={"s": 2.0 * state}),
        Op("lin_gated_norm", VECTOR, L, flops={"n": 6.0 * vd}, bytes={"n": 3.0 * vd * b_a}),
        Op("lin_out_proj", g, L, flops={"n": 2.0 * vd * d}, bytes={"n": (vd + d) * b_a},
           weight_bytes=vd * d * b_w, in_dim=vd, out_dim=d),
    ]
