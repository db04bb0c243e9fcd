"""Operators of one engine step: FLOPs and HBM bytes per GPU, as linear forms of the work.

Every operator's FLOPs and bytes are a linear combination of a few *work variables* of the
step (tokens through the linear layers, attention pairs, KV tokens read, expected unique
experts, ...). An `OpTable` holds, per operator, the coefficient rows for FLOPs, bytes and
kernel launches, for one GPU of the replica (sharded by TP) and already multiplied by the
number of layers the operator appears in. Evaluating a step is then one small matrix
product (`ridgeline.perf.roofline_step`), for one step or a million at once.

Work variables (columns; see `WORK_VARS`) for one step of the whole replica:

    any      1 if the step has any token to compute, else 0 (weights are read only then)
    n        tokens through the linear layers: prefill_tokens + decode_seqs
    s        rows of logits: prefill_seqs + decode_seqs
    pt       new prompt tokens (prefill_tokens)
    pairs    causal query-key pairs of the prefill chunks
    pc       cached context tokens the prefill chunks attend to
    dq       decode sequences (one query token each)
    dc       KV tokens the decode sequences read (sum of their contexts T_j)
    u        expected distinct experts touched per MoE layer on one GPU, (E/ep)(1-(1-k/E)^n)
    pre      1 if the step has prefill tokens (drives prefill-attention kernels)
    dec      1 if the step has decode sequences (drives decode-attention kernels)

Attention follows the decode KV read: decode reads each sequence's unique KV once (GQA heads share
it) and writes the new token's KV, so its bytes are 2 L (T+1) d_kv b_kv per sequence;
prefill is FlashAttention-style (no S x S matrix in HBM), causal pairs only.

With attention data-parallelism (attn_dp ranks) the work variables stay those of the whole
engine instance: every operator but the routed experts runs on one rank's share, so its
per-token coefficients are divided by attn_dp (the weights it reads are not); the routed
experts see every token of the step, k/ep of the routed pairs landing on each GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ridgeline.perf.comm import (
    EP_BACKENDS,
    ep_element_bytes,
    ep_rows_per_token,
    ranks_touched,
    remote_ranks_per_token,
    ring_allreduce_bytes_factor,
)
from ridgeline.perf.linear_attention import linear_attention_ops

# The operator type and compute classes (perf/operator.py), used here and re-exported.
from ridgeline.perf.operator import ATTENTION, GEMM, GEMM16, VECTOR, Op, gemm_kind  # noqa: F401
from ridgeline.specs.model import ModelSpec
from ridgeline.specs.parallel import Parallelism
from ridgeline.specs.precision import Precision

WORK_VARS = ("any", "n", "s", "pt", "pairs", "pc", "dq", "dc", "u", "pre", "dec")
VAR = {name: i for i, name in enumerate(WORK_VARS)}

@dataclass
class OpTable:
    """Coefficient matrices (ops x WORK_VARS) for FLOPs, bytes and kernel launches, plus
    exposed-communication seconds per variable."""

    names: list[str]
    kinds: list[str]
    layers: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    kernels: np.ndarray
    comm_s: np.ndarray  # seconds per unit of each variable (exposed collectives)
    comm_terms: list[str]  # human-readable description of the collectives
    drivers: list[str] = field(default_factory=list)  # each op's indicator variable
    in_dims: np.ndarray = field(default_factory=lambda: np.zeros(0))  # GEMM k (0: not a GEMM)
    out_dims: np.ndarray = field(default_factory=lambda: np.zeros(0))  # GEMM n per GPU
    # Query heads per KV head on one GPU (1: MHA, or MLA's own kernels): grouped (GQA) decode
    # attention is priced with its own fitted bandwidth scale (perf/kernels.py).
    query_heads_per_kv_head: float = 1.0
    # KV heads each GPU holds (0: MLA's latent): measured attention tables price only the
    # head counts they measured (perf/measured_attention.py).
    kv_heads_per_gpu: float = 0.0
    # One attention rank's share of the step's tokens and sequences (1/attn_dp): fitted
    # per-sequence, per-head and per-token kernel constants are priced on this share.
    rank_share: float = 1.0
    # Routed experts each GPU holds (E/ep; 0: dense) and the chance a token's k picks all miss
    # one given expert (1 - k/E): u = experts_per_gpu (1 - miss^n), and a fitted cost per
    # held expert, touched or not, is priced on it.
    experts_per_gpu: float = 0.0
    expert_miss: float = 1.0
    # Query heads each GPU holds (MLA's too): the measured per-head decode costs.
    query_heads_per_gpu: float = 0.0


def _linear(name: str, in_dim: float, out_dim: float, layers: int, b_w: float, b_a: float,
            tokens: dict[str, float] | None = None, kind: str = GEMM,
            bias: float = 0.0) -> Op:
    """A per-GPU [tokens, in] x [in, out] product: weights read once, activations in/out."""
    tokens = tokens or {"n": 1.0}
    return Op(
        name=name, kind=kind, layers=layers,
        flops={v: 2.0 * in_dim * out_dim * c for v, c in tokens.items()},
        bytes={v: (in_dim + out_dim) * b_a * c for v, c in tokens.items()},
        weight_bytes=in_dim * out_dim * b_w + bias * b_a,
        in_dim=in_dim, out_dim=out_dim,
    )


def _elementwise(name: str, bytes_per_token: float, layers: int, flops_per_token: float = 0.0,
                 var: str = "n", kernels: float = 1.0) -> Op:
    return Op(name=name, kind=VECTOR, layers=layers,
              flops={var: flops_per_token}, bytes={var: bytes_per_token}, kernels=kernels)


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """GQA KV heads each GPU holds: h_kv/tp, or 1 replicated head when tp > h_kv."""
    return max(1, -(-model.num_kv_heads // tp))


def kv_elements_per_token_per_layer_per_gpu(model: ModelSpec, tp: int) -> int:
    """Cached elements per token per layer on one GPU (MLA's latent is replicated by TP)."""
    if model.is_mla:
        return model.kv_lora_rank + model.qk_rope_head_dim
    return 2 * kv_heads_per_gpu(model, tp) * model.head_dim


def _attention_ops(m: ModelSpec, pr: Precision, tp: int) -> list[Op]:
    # Softmax-attention layers only (linear-attention layers: perf/linear_attention.py);
    # the attention kernels of windowed layers are in perf/window.py (their own work).
    d, b_a, b_w, b_kv, L = m.hidden_size, pr.activation_bytes, pr.attention_weight_bytes, \
        pr.kv_bytes, m.num_softmax_layers
    L_full = m.num_full_attention_layers
    g = gemm_kind(pr, "attention")
    hq = m.num_heads // tp
    ops: list[Op] = [_elementwise("attn_norm", 4 * d * b_a, L, flops_per_token=5 * d)]
    if m.is_mla:
        lat = m.kv_lora_rank + m.qk_rope_head_dim
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        v = m.v_head_dim
        if m.q_lora_rank:
            # vLLM fuses q_a and kv_a into one replicated projection, then q_b is sharded.
            ops.append(_linear("qkv_a_proj", d, m.q_lora_rank + lat, L, b_w, b_a, kind=g))
            ops.append(_elementwise("qkv_a_norm", 2 * (m.q_lora_rank + m.kv_lora_rank) * b_a,
                                    L, flops_per_token=5 * (m.q_lora_rank + m.kv_lora_rank)))
            ops.append(_linear("q_b_proj", m.q_lora_rank, hq * qk, L, b_w, b_a, kind=g))
        else:
            ops.append(_linear("q_proj", d, hq * qk, L, b_w, b_a, kind=g))
            ops.append(_linear("kv_a_proj", d, lat, L, b_w, b_a, kind=g))
            ops.append(_elementwise("kv_a_norm", 2 * m.kv_lora_rank * b_a, L))
        ops.append(_elementwise("rope", 2 * (hq + 1) * m.qk_rope_head_dim * b_a, L))
        # Prefill expands the cached and new latents to K_nope, V; decode absorbs W_UK, W_UV
        # into the query and output: the same FLOPs per query token with the same weights.
        ops.append(_linear("kv_b_proj", m.kv_lora_rank, hq * (m.qk_nope_head_dim + v), L, b_w,
                           b_a, tokens={"pt": 1.0, "pc": 1.0, "dq": 1.0}, kind=g))
        ops.append(Op(
            "attn_prefill", ATTENTION, L,
            flops={"pairs": 2.0 * hq * (qk + v)},
            bytes={"pt": hq * (qk + v) * b_a * 2 + lat * b_kv,  # Q, O; K,V of new; latent write
                   "pc": hq * (qk + v) * b_a + lat * b_kv},  # expanded K,V + latent read
            driver="pre"))
        ops.append(Op(
            "attn_decode", ATTENTION, L,
            # absorbed MLA: scores over the 576-wide latent+rope, values over the 512 latent
            flops={"dc": 2.0 * hq * (lat + m.kv_lora_rank),
                   "dq": 2.0 * hq * (lat + m.kv_lora_rank)},
            bytes={"dc": lat * b_kv,
                   "dq": lat * b_kv + hq * (lat + m.kv_lora_rank) * b_a},
            driver="dec"))
        ops.append(_linear("o_proj", hq * v, d, L, b_w, b_a, kind=g))
        return ops

    hd = m.head_dim
    hkv = kv_heads_per_gpu(m, tp)
    kv_tok = 2 * hkv * hd * b_kv  # K and V of one token, one layer, this GPU
    q_out = hq * hd * (2 if m.attn_output_gate else 1)  # Qwen3-Next: + the output gate
    ops.append(_linear("qkv_proj", d, q_out + 2 * hkv * hd, L, b_w, b_a,
                       bias=q_out + 2 * hkv * hd if m.qkv_bias else 0.0, kind=g))
    if m.qk_norm:
        ops.append(_elementwise("qk_norm", 2 * (hq + hkv) * hd * b_a, L))
    ops.append(_elementwise("rope", 2 * (hq + hkv) * hd * b_a, L))
    ops.append(Op(
        "attn_prefill", ATTENTION, L_full,
        flops={"pairs": 4.0 * hq * hd},  # QK^T and PV, 2 FLOPs per multiply-add each
        bytes={"pt": 2 * hq * hd * b_a + 2 * hkv * hd * b_a + kv_tok,  # Q, O, new K/V, write
               "pc": kv_tok},  # cached context K/V read once
        driver="pre"))
    ops.append(Op(
        "attn_decode", ATTENTION, L_full,
        flops={"dc": 4.0 * hq * hd, "dq": 4.0 * hq * hd},  # T old keys + the new one
        bytes={"dc": kv_tok,  # unique KV read once (GQA reuse): 2 T d_kv b_kv per layer
               "dq": kv_tok + 2 * hq * hd * b_a},  # new KV write; Q in, O out
        driver="dec"))
    ops.append(_linear("o_proj", hq * hd, d, L, b_w, b_a, bias=d if m.o_bias else 0.0,
                       kind=g))
    return ops


# The routed-expert operators: they run on the tokens of every attention rank, spread over
# the expert-parallel GPUs; all others run per attention rank.
EXPERT_OPS = frozenset({"experts_gate_up", "experts_act", "experts_down"})
# Indicator work variables (0 or 1 per step): never divided among attention ranks.
INDICATOR_VARS = frozenset({"any", "pre", "dec"})


def _mlp_ops(m: ModelSpec, pr: Precision, tp: int, ep: int, moe_tp: int) -> list[Op]:
    d, b_a, b_w = m.hidden_size, pr.activation_bytes, pr.mlp_weight_bytes
    b_x, b_sh = pr.expert_weight_bytes, pr.shared_expert_weight_bytes
    ops: list[Op] = [_elementwise("mlp_norm", 4 * d * b_a, m.num_layers, flops_per_token=5 * d)]
    if m.num_dense_layers:
        ff, Ld = m.intermediate_size / tp, m.num_dense_layers
        ops += [
            _linear("gate_up_proj", d, 2 * ff, Ld, b_w, b_a, kind=gemm_kind(pr, "mlp")),
            _elementwise("act_mul", 3 * ff * b_a, Ld, flops_per_token=5 * ff),
            _linear("down_proj", ff, d, Ld, b_w, b_a, kind=gemm_kind(pr, "mlp")),
        ]
    if m.is_moe:
        Lm, k = m.num_moe_layers, m.experts_per_token
        ffe = m.moe_intermediate_size / moe_tp
        ops.append(_linear("router", d, m.num_experts, Lm, b_a, b_a))
        ops.append(_elementwise("moe_dispatch", (m.num_experts + 2 * d + 2 * k * d) * b_a, Lm,
                                kernels=2))
        # Each GPU holds E/ep experts, each split moe_tp ways: k/ep of a token's routed pairs
        # land on it (uniform routing), and the u experts it touches are read once each. The
        # grouped kernel still walks the input row of every routed pair of the step (the
        # gathered tokens, other GPUs' experts masked), as the measured EP kernels do.
        kg = k / ep
        gx = gemm_kind(pr, "experts")
        ops.append(Op("experts_gate_up", gx, Lm,
                      flops={"n": 2.0 * kg * d * 2 * ffe},
                      bytes={"n": (kg * (d + 2 * ffe) + (k - kg) * d) * b_a,
                             "u": d * 2 * ffe * b_x},
                      in_dim=d, out_dim=2 * ffe))
        ops.append(_elementwise("experts_act", 3 * kg * ffe * b_a, Lm,
                                flops_per_token=5 * kg * ffe))
        ops.append(Op("experts_down", gx, Lm,
                      flops={"n": 2.0 * kg * ffe * d},
                      bytes={"n": (kg * (ffe + d) + (k - kg) * d) * b_a, "u": ffe * d * b_x},
                      in_dim=ffe, out_dim=d))
        if m.num_shared_experts:
            sh = m.num_shared_experts * m.shared_expert_intermediate_size / tp
            ops += [
                _linear("shared_gate_up", d, 2 * sh, Lm, b_sh, b_a,
                        kind=gemm_kind(pr, "shared_experts")),
                _elementwise("shared_act", 3 * sh * b_a, Lm, flops_per_token=5 * sh),
                _linear("shared_down", sh, d, Lm, b_sh, b_a,
                        kind=gemm_kind(pr, "shared_experts")),
            ]
    return ops


def _model_ops(m: ModelSpec, pr: Precision, tp: int) -> list[Op]:
    d, b_a, b_e, V = m.hidden_size, pr.activation_bytes, pr.embedding_bytes, m.vocab_size
    return [
        # The embedding gathers only the rows of this step's tokens: never the whole table.
        _elementwise("embedding", d * (b_e / tp + b_a), 1),
        _elementwise("final_norm", 2 * d * b_a, 1, flops_per_token=5 * d),
        # The LM head is read in full every step; logits only for the sampled rows.
        _linear("lm_head", d, V / tp, 1, pr.lm_head_bytes, b_a, tokens={"s": 1.0},
                kind=gemm_kind(pr, "lm_head")),
    ]


def build_ops(model: ModelSpec, precision: Precision, parallel: Parallelism) -> list[Op]:
    """All operators of one step on one GPU of the replica (layers of every stage summed)."""
    tp = parallel.tp
    return (_model_ops(model, precision, tp)[:1] + _attention_ops(model, precision, tp)
            + linear_attention_ops(model, precision, tp)
            + _mlp_ops(model, precision, tp, parallel.ep, parallel.moe_tp)
            + _model_ops(model, precision, tp)[1:])


# (latency s, bandwidth bytes/s) of a collective over p GPUs: "all_reduce" (bus bandwidth of
# a ring: time = latency + 2(p-1)/p bytes / bandwidth), "send_recv" (time = latency + bytes /
# bandwidth), "all_to_all", "all_gather", "reduce_scatter" ((p-1)/p bytes / bandwidth) and
# DeepEP's fitted phases "deepep_<normal|low_latency>_<dispatch|combine>" (five numbers:
# perf/measured_attention.py `deepep_phase`). None (or no table): the datasheet link and the
# one latency; for a DeepEP phase, the all-to-all's.
Collectives = Callable[[str, int], tuple[float, ...] | None]
# The DeepEP fit each DeepEP backend is timed with.
_DEEPEP_MODE = {"deepep_high_throughput": "normal", "deepep_low_latency": "low_latency"}


def fp8_expert_inputs(precision: Precision) -> bool:
    """Whether the expert GEMMs take 8-bit-float or narrower inputs (an fp8 dispatch)."""
    return precision.gemm_compute_dtype in ("fp8", "fp4")


def _ep_comm(model: ModelSpec, precision: Precision, parallel: Parallelism,
             link: Callable[[str, int], tuple[float, float]],
             collectives: Collectives | None) -> tuple[float, float, str]:
    """(seconds per token of the step, seconds per step, description) of the MoE layers'
    dispatch + combine over the EP group, as `parallel.ep_comm` runs them."""
    ep, layers, k, d = parallel.ep, model.num_moe_layers, model.experts_per_token, \
        model.hidden_size
    backend = parallel.ep_comm or EP_BACKENDS[0]
    rows = ep_rows_per_token(backend, model.num_experts, k, ep, parallel.attn_dp)
    b_out, b_back = ep_element_bytes(backend, precision.activation_bytes,
                                     fp8_expert_inputs(precision))
    per_token = f"{rows * d * (b_out + b_back):,.0f} B per token per GPU per MoE layer"
    if backend == "allgather_reducescatter":
        a = parallel.attn_dp
        if a == 1:
            return (0.0, 0.0, f"EP x{layers} (MoE layers, {backend}): no gather, every TP "
                    "rank holds the step's tokens; the outputs' sum is the TP all-reduce")
        (lat_g, bw_g), (lat_s, bw_s) = link("all_gather", a), link("reduce_scatter", a)
        return (layers * rows * d * (b_out / bw_g + b_back / bw_s), layers * (lat_g + lat_s),
                f"EP all-gather + reduce-scatter x{layers} (MoE layers, {backend}): every "
                f"token's row to all p={a} attention ranks, (p-1)/p*n*d rows of {b_out:g} B "
                f"out and {b_back:g} B back = {per_token}; {bw_g / 1e9:.4g} / "
                f"{bw_s / 1e9:.4g} GB/s + {lat_g * 1e6:.3g} + {lat_s * 1e6:.3g} us")
    mode = _DEEPEP_MODE[backend]
    fits = [collectives(f"deepep_{mode}_{ph}", ep) if collectives else None
            for ph in ("dispatch", "combine")]
    what = (f"EP dispatch + combine x{layers} (MoE layers, {backend}): each of a GPU's n/p "
            f"tokens once to the r = {remote_ranks_per_token(model.num_experts, k, ep):.3g} "
            f"remote ranks holding one of its k={k} experts, unpadded, {b_out:g} B out and "
            f"{b_back:g} B back = {per_token}, p={ep}")
    fit_d, fit_c = fits
    if fit_d is not None and fit_c is not None:
        # The measured kernels' time in the fit's form: a latency, a cost per expert of the
        # model, and per token its copies (one per GPU touched where the fit says so, else
        # one per expert picked) of d x B bytes plus a cost per token.
        per_token_s = per_step_s = 0.0
        parts = []
        for (lat, bw, token_s, expert_s, touched), b in ((fit_d, b_out), (fit_c, b_back)):
            copies = ranks_touched(k, model.num_experts, ep) if touched else float(k)
            per_token_s += copies * d * b / bw + token_s
            per_step_s += lat + model.num_experts * expert_s
            parts.append(f"{copies:.3g} copies x d*{b:g} B / {bw / 1e9:.4g} GB/s + "
                         f"{token_s * 1e9:.3g} ns a token + {lat * 1e6:.3g} us + "
                         f"{model.num_experts} x {expert_s * 1e6:.3g} us")
        return (layers * per_token_s / ep, layers * per_step_s,
                f"{what}; timed by DeepEP's measured {mode} fit: dispatch {parts[0]}; "
                f"combine {parts[1]}")
    lat, bw = link("all_to_all", ep)
    return (layers * rows * d * (b_out + b_back) / bw, 2 * layers * lat,
            f"{what}; over the all-to-all link {bw / 1e9:.4g} GB/s + {lat * 1e6:.3g} us each "
            "way (no DeepEP kernels measured)")


def _comm(model: ModelSpec, precision: Precision, parallel: Parallelism, link_bytes_s: float,
          latency_s: float, collectives: Collectives | None = None
          ) -> tuple[np.ndarray, list[str]]:
    """Exposed collective seconds per unit of each work variable."""
    def link(kind: str, p: int) -> tuple[float, float]:
        got = collectives(kind, p) if collectives else None
        return (got[0], got[1]) if got is not None else (latency_s, link_bytes_s)

    coef = np.zeros(len(WORK_VARS))
    terms: list[str] = []
    d, b_a, L = model.hidden_size, precision.activation_bytes, model.num_layers
    tp, pp, ep, a = parallel.tp, parallel.pp, parallel.ep, parallel.attn_dp
    if tp > 1:
        # After o_proj and after the MLP in each layer, plus the vocab-parallel embedding,
        # on one attention rank's tokens.
        count = 2 * L + 1
        lat, bw = link("all_reduce", tp)
        coef[VAR["n"]] += count * ring_allreduce_bytes_factor(tp) * d * b_a / bw / a
        coef[VAR["any"]] += count * lat
        terms.append(f"TP ring all-reduce x{count}: 2(p-1)/p * n*d*b_a / {bw / 1e9:.4g} GB/s + "
                     f"{lat * 1e6:.3g} us, p={tp}")
    if pp > 1:
        lat, bw = link("send_recv", 2)
        coef[VAR["n"]] += (pp - 1) * d * b_a / bw / a
        coef[VAR["any"]] += (pp - 1) * lat
        terms.append(f"PP activations x{pp - 1}: n*d*b_a / {bw / 1e9:.4g} GB/s + "
                     f"{lat * 1e6:.3g} us")
    if ep > 1:
        per_token_s, per_step_s, what = _ep_comm(model, precision, parallel, link, collectives)
        coef[VAR["n"]] += per_token_s
        coef[VAR["any"]] += per_step_s
        terms.append(what)
    return coef, terms


def build_table(model: ModelSpec, precision: Precision, parallel: Parallelism,
                link_bytes_s: float, latency_s: float,
                collectives: Collectives | None = None) -> OpTable:
    """Compile the operator list to coefficient matrices (whole-model sums over layers)."""
    ops = build_ops(model, precision, parallel)
    nv = len(WORK_VARS)
    # One attention rank's share of the step's tokens and sequences (the step's padding to
    # the slowest rank is applied to the work: perf/roofline_step.py).
    share = 1.0 / parallel.attn_dp
    flops = np.zeros((len(ops), nv))
    byts = np.zeros((len(ops), nv))
    kern = np.zeros((len(ops), nv))
    for i, op in enumerate(ops):
        per_rank = op.name not in EXPERT_OPS
        for v, c in op.flops.items():
            flops[i, VAR[v]] += c * op.layers * (share if per_rank and v not in
                                                 INDICATOR_VARS else 1.0)
        for v, c in op.bytes.items():
            byts[i, VAR[v]] += c * op.layers * (share if per_rank and v not in
                                                INDICATOR_VARS else 1.0)
        # Weights are read once per step on the op's driver (a decode-only step does not
        # run the prefill kernels and vice versa).
        byts[i, VAR[op.driver]] += op.weight_bytes * op.layers
        kern[i, VAR[op.driver]] += op.kernels * op.layers
    comm, terms = _comm(model, precision, parallel, link_bytes_s, latency_s, collectives)
    return OpTable(names=[o.name for o in ops], kinds=[o.kind for o in ops],
                   layers=np.array([o.layers for o in ops], dtype=np.float64),
                   flops=flops, bytes=byts, kernels=kern, comm_s=comm, comm_terms=terms,
                   drivers=[o.driver for o in ops],
                   in_dims=np.array([o.in_dim for o in ops], dtype=np.float64),
                   out_dims=np.array([o.out_dim for o in ops], dtype=np.float64),
                   kv_heads_per_gpu=0.0 if model.is_mla else
                   float(kv_heads_per_gpu(model, parallel.tp)),
                   query_heads_per_gpu=float(model.num_heads // parallel.tp),
                   query_heads_per_kv_head=1.0 if model.is_mla else
                   (model.num_heads // parallel.tp) / kv_heads_per_gpu(model, parallel.tp),
                   rank_share=share,
                   experts_per_gpu=model.num_experts / parallel.ep if model.is_moe else 0.0,
                   expert_miss=1.0 - model.experts_per_token / model.num_experts
                   if model.is_moe else 1.0)
