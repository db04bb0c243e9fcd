"""Phase-level prediction: prefill/TTFT, decode step/TPOT, E2E, throughput, memory.

Everything is computed from `RooflineStepTime.step_time_s` (the same step function the
simulator and emulator use) and broadcasts over batch, prompt, output and context arrays,
so a sweep of a million points is one call. Definitions follow the usual serving metrics:

- prefill: one step of B prompts of S tokens (of which `prefix` are already cached);
  TTFT = that step's time (no queueing, no network).
- decode: one step of B sequences at context T (default: the mean context of the request's
  decode steps, S + (N-2)/2); TPOT = that step's time.
- E2E = TTFT + TPOT (N - 1); aggregate decode tokens/s = B / t; per-sequence = 1 / t.

>>> from ridgeline.perf.roofline_step import RooflineStepTime
>>> m = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
>>> r = estimate(m, batch=32, prompt_tokens=1024, output_tokens=256)
>>> bool(r["decode_aggregate_tok_s"] == 32 / r["tpot_s"])
True
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.perf.engine_memory import engine_memory_at
from ridgeline.perf.linear_attention import state_bytes_per_sequence_per_gpu
from ridgeline.perf.memory import (
    RUNTIME_RESERVE_BYTES,
    kv_bytes_per_sequence_per_gpu,
)
from ridgeline.perf.ops import VAR, WORK_VARS, kv_elements_per_token_per_layer_per_gpu
from ridgeline.perf.roofline_step import RooflineStepTime, StepBreakdown
from ridgeline.perf.step_time import ArrayLike, BatchWork


def prefill_work(batch: ArrayLike, prompt_tokens: ArrayLike, prefix_tokens: ArrayLike = 0
                 ) -> BatchWork:
    """One step computing B prompts of S tokens whose first `prefix` tokens are cached."""
    b = np.asarray(batch, dtype=np.float64)
    s = np.asarray(prompt_tokens, dtype=np.float64)
    p = np.asarray(prefix_tokens, dtype=np.float64)
    new = s - p
    return BatchWork(prefill_tokens=b * new, prefill_attn_pairs=b * (new * p + new * (new + 1) / 2),
                     prefill_context_tokens=b * p, prefill_seqs=b)


def decode_work(batch: ArrayLike, context_tokens: ArrayLike) -> BatchWork:
    """One decode step of B sequences, each reading T cached tokens."""
    b = np.asarray(batch, dtype=np.float64)
    return BatchWork(decode_seqs=b, decode_context_tokens=b * np.asarray(context_tokens,
                                                                         dtype=np.float64))


def mean_decode_context(prompt_tokens: ArrayLike, output_tokens: ArrayLike) -> ArrayLike:
    """Mean KV context over the N-1 decode steps: step j (1..N-1) reads S + j - 1 tokens."""
    s = np.asarray(prompt_tokens, dtype=np.float64)
    n = np.asarray(output_tokens, dtype=np.float64)
    return s + np.maximum(n - 2.0, 0.0) / 2.0


def weight_bytes_read(model: RooflineStepTime, tokens: ArrayLike) -> ArrayLike:
    """Bytes of weights one decode step of `tokens` sequences reads (E[U] experts for MoE)."""
    t = model.table
    n = np.asarray(tokens, dtype=np.float64)
    per_any = t.bytes[:, VAR["any"]].sum() + t.bytes[:, VAR["dec"]].sum()
    if model.model.is_moe:
        u = t.experts_per_gpu * (1.0 - t.expert_miss ** n)
        return per_any + t.bytes[:, VAR["u"]].sum() * u
    return per_any + 0.0 * n


def _phase_bound(bd: StepBreakdown, ridge_flop_per_byte: float) -> np.ndarray:
    """Which resource takes most of the step: compute, memory, communication or overhead.
    Each operator's kernel time counts as compute or memory by the roofline (its intensity
    against the ridge point), not by which fitted row won (a floor is not compute)."""
    compute_bound = bd.flops >= ridge_flop_per_byte * bd.bytes
    kernel_s = np.maximum(bd.compute_s, bd.memory_s)
    compute_t = np.where(compute_bound, kernel_s, 0.0).sum(axis=0)
    memory_t = np.where(compute_bound, 0.0, kernel_s).sum(axis=0)
    parts = np.stack([compute_t, memory_t, bd.comm_s, bd.overhead_s.sum(axis=0)])
    labels = np.array(["compute", "memory", "communication", "kernel-overhead"])
    return labels[np.argmax(parts, axis=0)]


def _rates(b: np.ndarray, s: np.ndarray, n: np.ndarray, p: np.ndarray, ctx: np.ndarray,
           prefill_s: np.ndarray, tpot_s: np.ndarray, e2e_s: np.ndarray, dp: int,
           axes: tuple[np.ndarray, ...]) -> dict[str, Any]:
    """The timing and throughput keys; `axes`: b, s, n, p as given or broadcast (the same
    values: `estimate`), for the arithmetic."""
    b0, s0, n0, p0 = axes
    return {
        "batch_seqs": b, "prompt_tokens": s, "output_tokens": n, "prefix_tokens": p,
        "decode_context_tokens": ctx,
        "prefill_s": prefill_s, "ttft_s": prefill_s,
        "decode_step_s": tpot_s, "tpot_s": tpot_s, "e2e_s": e2e_s,
        "prefill_tok_s": b0 * (s0 - p0) / prefill_s,
        "decode_aggregate_tok_s": b0 / tpot_s,
        "per_sequence_tok_s": 1.0 / tpot_s,
        "e2e_output_tok_s": b0 * n0 / e2e_s,
        "cluster_decode_tok_s": dp * b0 / tpot_s,
    }


# Grids larger than this are computed on their axes as given (`estimate`).
GRID_AS_AXES_MIN = 1 << 12


def _on_grid(work: BatchWork, shape: tuple[int, ...]) -> BatchWork:
    """`work` with its numpy fields broadcast to `shape` (views; Python numbers, the fields
    left at their defaults, as they are)."""
    return BatchWork(**{f.name: np.broadcast_to(v, shape)
                        if isinstance(v, np.ndarray | np.generic) else v
                        for f in fields(BatchWork) for v in (getattr(work, f.name),)})


def serving_ttft_s(model: Any, b: np.ndarray, s: np.ndarray, p: np.ndarray,
                   ctx: np.ndarray, tpot_s: np.ndarray,
                   grid_shape: tuple[int, ...] | None = None) -> np.ndarray:
    """TTFT of one request that joins B - 1 running decodes under continuous batching, no
    queue: its prompt is prefilled in chunks of what the step's token budget leaves
    (max_num_batched_tokens - (B - 1) decode tokens), each chunk in a step with the decodes,
    then the engine's per-request costs (fixed time + steps of decode). The k chunk steps
    are timed as k equal steps (the same tokens and attention pairs in total).
    `grid_shape`: the inputs are not broadcast to it (a grid's axes as given): the step's
    work is, so the step time sees the grid it would see from broadcast inputs."""
    budget = float(getattr(model, "max_num_batched_tokens", 8192))
    new = s - p
    chunk = np.maximum(budget - (b - 1), 1.0)
    k = np.ceil(new / chunk)
    pairs = new * p + new * (new + 1) / 2  # causal pairs of the new tokens (all chunks)
    step = BatchWork(prefill_tokens=new / k, prefill_attn_pairs=pairs / k,
                     prefill_context_tokens=p + new / 2, prefill_seqs=np.ones_like(b),
                     decode_seqs=b - 1, decode_context_tokens=(b - 1) * ctx)
    if grid_shape is not None:
        step = _on_grid(step, grid_shape)
    t = k * np.asarray(model.step_time_s(step))
    costs = getattr(model, "engine_costs", None)
    if costs is not None:
        t = t + costs.request_overhead_s + costs.request_overhead_steps * tpot_s
    return t


def estimate(model: RooflineStepTime | Any, batch: ArrayLike, prompt_tokens: ArrayLike,
             output_tokens: ArrayLike, prefix_tokens: ArrayLike = 0,
             context_tokens: ArrayLike | None = None, gpu_memory_utilization: float = 0.9,
             details: bool = True, kv_rule: str = "vllm") -> dict[str, Any]:
    """Predict one configuration or a broadcast grid; every key carries its unit.

    With `details=False` only the timing and throughput keys are computed (sweep speed).
    `kv_rule`: how the engine sizes its KV pool (vllm, sglang, trtllm: the rules of
    ridgeline.perf.engine_memory), read with `gpu_memory_utilization` as `simulate` reads it.
    """
    axes = [np.asarray(x, dtype=np.float64) for x in
            (batch, prompt_tokens, output_tokens, prefix_tokens)]
    b, s, n, p = np.broadcast_arrays(*axes)
    # A large grid: the arithmetic on its inputs as given (a (B, 1) batch axis and a (1, S)
    # prompt axis), broadcast where the grid's values differ; each value is the same
    # operation on the same numbers. The work of a step is broadcast to the grid, so the
    # step time takes the path (and gives the bits) it takes on broadcast inputs.
    grid = b.size > GRID_AS_AXES_MIN
    b0, s0, n0, p0 = axes if grid else (b, s, n, p)
    if b.size and (np.any(b0 < 1) or np.any(s0 < 1) or np.any(n0 < 1)):
        raise RidgelineError("batch, prompt and output: got a value < 1; allowed: >= 1")
    if b.size and (np.any(p0 < 0) or np.any(p0 >= s0)):
        raise RidgelineError("prefix: got a value outside [0, prompt); allowed: 0 <= prefix < "
                             "prompt (at least one prompt token is computed)")
    ctx0: ArrayLike
    ctx: ArrayLike
    if context_tokens is not None:
        ctx0 = ctx = np.broadcast_to(np.asarray(context_tokens, dtype=np.float64), b.shape)
    else:
        ctx0 = mean_decode_context(s0, n0)
        ctx = np.broadcast_to(ctx0, b.shape).copy() if grid else ctx0
    pre_w, dec_w = prefill_work(b0, s0, p0), decode_work(b0, ctx0)
    if grid:
        pre_w, dec_w = _on_grid(pre_w, b.shape), _on_grid(dec_w, b.shape)
    prefill_s = np.asarray(model.step_time_s(pre_w))
    tpot_s = np.asarray(model.step_time_s(dec_w))
    e2e_s = prefill_s + tpot_s * (n0 - 1)
    parallel = getattr(model, "parallel", None)  # any StepTimeModel works for the timings
    dp = parallel.dp if parallel is not None else 1
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero-time phase gives inf tok/s
        out = _rates(b, s, n, p, ctx, prefill_s, tpot_s, e2e_s, dp, (b0, s0, n0, p0))
    # A what-if that changes what a decode step is (speculative decoding) has its own ceiling.
    ceiling = getattr(type(model), "decode_ceiling_tok_s", None)
    spec_ceiling = ceiling(model, dec_w.decode_seqs, dec_w.decode_context_tokens) \
        if ceiling is not None else None
    if spec_ceiling is not None:
        out["decode_ceiling_tok_s"] = spec_ceiling
        out["decode_ceiling_formula"] = "B·E / (max(F_v/C, D_v/β) + k·draft) (speculative)"
    if isinstance(model, RooflineStepTime) or hasattr(model, "max_num_batched_tokens"):
        out["serving_ttft_s"] = serving_ttft_s(model, b0, s0, p0, ctx0, tpot_s,
                                               b.shape if grid else None)
    if not details or not isinstance(model, RooflineStepTime):
        return out
    pre_bd, dec_bd = model.breakdown(pre_w), model.breakdown(dec_w)
    ridge = model.gemm_peak_flops / model.hardware.memory_bandwidth_bytes_s
    hw, pr, mdl = model.hardware, model.precision, model.model
    c_eff = model.gemm_peak_flops * hw.compute_efficiency
    beta_eff = model.bandwidth_eff_bytes_s
    f_dec, d_dec = dec_bd.flops.sum(axis=0), dec_bd.bytes.sum(axis=0)
    f_pre, d_pre = pre_bd.flops.sum(axis=0), pre_bd.bytes.sum(axis=0)
    d_w = weight_bytes_read(model, b)
    per_layer = kv_elements_per_token_per_layer_per_gpu(mdl, model.parallel.tp) * pr.kv_bytes
    kv_tok_rank = mdl.num_softmax_layers * per_layer
    # Decode reads T + 1 tokens of KV in full-attention layers, min(T, w) + 1 in windowed
    # ones, and reads and writes the constant state of linear-attention layers.
    win_ctx = np.minimum(ctx, mdl.sliding_window) if mdl.is_windowed else ctx
    # Attention data-parallel ranks each cache and read their own sequences: the busiest
    # GPU holds ceil(B / attn_dp) of them; the instance holds attn_dp GPUs' worth of KV.
    ranks = model.parallel.attn_dp
    b_rank = np.ceil(b / ranks)
    kv_dec = b_rank * (mdl.num_full_attention_layers * (ctx + 1)
                  + mdl.num_window_layers * (win_ctx + 1)) * per_layer
    if mdl.num_linear_layers:
        kv_dec = kv_dec + b_rank * 2.0 * state_bytes_per_sequence_per_gpu(mdl, pr,
                                                                     model.parallel.tp)
    # Memory (per GPU of the busiest stage), sized as the engine sizes it: its activation
    # workspace is that of its largest step (max_num_batched_tokens, chunked prefill), not
    # of a B-prompt prefill in one pass, so "fits" agrees with the vLLM start-up log.
    mem = model.memory(gpu_memory_utilization)
    ws = np.full(b.shape, mem.workspace_bytes)
    if kv_rule == "vllm":
        kv_budget = mem.budget_bytes - mem.weight_bytes - ws - RUNTIME_RESERVE_BYTES
    else:   # SGLang's and TensorRT-LLM's pools: their own arithmetic, one number per GPU
        kv_budget = np.full(b.shape, engine_memory_at(kv_rule, model,
                                                      gpu_memory_utilization).kv_budget_bytes)
    kv_cap = ranks * np.floor(np.maximum(kv_budget, 0.0) / mem.kv_bytes_per_token_per_gpu)
    # A sequence of S + N tokens: windowed layers hold min(S + N, w), linear ones a state.
    per_seq = np.asarray(kv_bytes_per_sequence_per_gpu(mdl, pr, model.parallel, s + n))
    need_kv = b_rank * per_seq
    shortfall = np.maximum(0.0, need_kv - kv_budget)
    out.update({
        "prefill_flops": f_pre, "prefill_bytes": d_pre,
        "prefill_intensity_flop_per_byte": f_pre / d_pre,
        "prefill_bound": _phase_bound(pre_bd, ridge),
        "decode_flops": f_dec, "decode_bytes": d_dec,
        "decode_weight_bytes": d_w, "decode_kv_bytes": kv_dec,
        "decode_other_bytes": d_dec - d_w - kv_dec,
        "decode_intensity_flop_per_byte": f_dec / d_dec,
        "decode_bound": _phase_bound(dec_bd, ridge),
        "decode_comm_s": dec_bd.comm_s, "prefill_comm_s": pre_bd.comm_s,
        # Decode ceiling: TPS_dec <= min(B C / F_dec, B beta / D_dec) (effective C and beta).
        "decode_ceiling_tok_s": np.minimum(b * c_eff / f_dec, b * beta_eff / d_dec),
        "decode_ceiling_formula": "min(B·C/F_dec, B·β/D_dec)",
        # The KV/weight crossover: the context where old-KV reads equal the weight reads.
        "kv_crossover_context_tokens": d_w / (b_rank * kv_tok_rank),
        "weights_per_gpu_bytes": np.full(b.shape, mem.weight_bytes),
        "kv_bytes_per_token": np.full(b.shape, mem.kv_bytes_per_token),
        "kv_bytes_per_token_per_gpu": np.full(b.shape, mem.kv_bytes_per_token_per_gpu),
        "workspace_bytes": ws,
        "kv_capacity_tokens": kv_cap,
        "kv_per_seq_per_gpu_bytes": per_seq,
        "max_concurrent_seqs": ranks * np.floor(np.maximum(kv_budget, 0.0) / per_seq),
        "memory_fits": shortfall <= 0,
        "memory_shortfall_bytes": shortfall,
    })
    # The context window: a request of S + N tokens beyond max_position_embeddings is one
    # vLLM refuses (HTTP 400), whatever the memory; 0 = unknown (no limit checked).
    window = float(mdl.max_position_embeddings) if mdl.max_position_embeddings else np.inf
    out["context_window_tokens"] = np.full(b.shape, window if np.isfinite(window) else np.nan)
    out["within_context"] = (s + n <= window) & (ctx + 1 <= window)
    if mdl.is_moe:
        # Distinct experts: E[U] = E(1 - (1 - k/E)^tokens), the distinct experts one MoE layer
        # reads in a step, exactly as the step time uses it (work variable "u").
        u = VAR["u"]
        out["num_experts"] = np.full(b.shape, float(mdl.num_experts))
        out["prefill_expected_experts"] = model.work_vars(pre_w)[0][u].reshape(b.shape)
        out["decode_expected_experts"] = model.work_vars(dec_w)[0][u].reshape(b.shape)
    return out


def model_constants(model: RooflineStepTime) -> dict[str, float]:
    """Per-configuration numbers of the seeds that do not depend on the workload."""
    hw, pr, m = model.hardware, model.precision, model.model
    peak = model.gemm_peak_flops
    out = {
        "ridge_point_flop_per_byte": peak / hw.memory_bandwidth_bytes_s,
        "effective_ridge_point_flop_per_byte": peak * hw.compute_efficiency
        / model.bandwidth_eff_bytes_s,
        # Turning point: I ~ 2B/b_w for weight-dominated linear layers -> B* = (C/beta) b_w/2.
        "batch_turning_point_seqs": peak / hw.memory_bandwidth_bytes_s * pr.weight_bytes / 2.0,
        "total_params": float(m.total_params),
        "active_params": float(m.active_params),
    }
    if not m.is_mla:
        # The attention intensity: I_attn = 4 L B d_q T / (2 L B T d_kv b_kv) = 2 h_q / (h_kv b_kv).
        out["decode_attention_intensity_flop_per_byte"] = 2.0 * m.num_heads / (
            m.num_kv_heads * pr.kv_bytes)
    else:
        lat = m.kv_lora_rank + m.qk_rope_head_dim
        out["decode_attention_intensity_flop_per_byte"] = 2.0 * m.num_heads * (
            lat + m.kv_lora_rank) / (lat * pr.kv_bytes)
    return out


def op_rows(bd: StepBreakdown, hardware_ridge: float) -> list[dict[str, Any]]:
    """Per-operator rows of a scalar breakdown (whole model and per layer)."""
    total = float(bd.total_s)
    rows = []
    for i, name in enumerate(bd.names):
        t = float(bd.time_s[i])
        if t == 0.0:
            continue
        f, d = float(bd.flops[i]), float(bd.bytes[i])
        c, m = float(bd.compute_s[i]), float(bd.memory_s[i])
        rows.append({
            "op": name, "kind": bd.kinds[i], "num_layers": int(bd.layers[i]),
            "flops": f, "bytes": d, "per_layer_flops": f / bd.layers[i],
            "per_layer_bytes": d / bd.layers[i],
            "intensity_flop_per_byte": f / d if d else float("inf"),
            "ridge_point_flop_per_byte": hardware_ridge,
            "compute_s": c, "memory_s": m, "overhead_s": float(bd.overhead_s[i]),
            "time_s": t, "time_fraction": t / total if total else 0.0,
            # The roofline's label (intensity against the ridge point), not whichever
            # fitted row won: a kernel's floor or padding does not make it compute-bound.
            "bound": "compute" if d and f / d >= hardware_ridge else "memory",
        })
    if float(bd.comm_s) > 0:
        rows.append({"op": "communication", "kind": "comm", "num_layers": 0, "flops": 0.0,
                     "bytes": 0.0, "time_s": float(bd.comm_s),
                     "time_fraction": float(bd.comm_s) / total, "bound": "communication"})
    # The engine's per-step CPU terms (engine costs) are in the total, on no operator.
    engine_s = total - float(np.sum(bd.time_s)) - float(bd.comm_s)
    if engine_s > 1e-12 * max(total, 1.0):
        rows.append({"op": "engine CPU per step", "kind": "engine", "num_layers": 0,
                     "flops": 0.0, "bytes": 0.0, "time_s": engine_s,
                     "time_fraction": engine_s / total, "bound": "cpu"})
    return rows


__all__ = ["WORK_VARS", "decode_work", "estimate", "mean_decode_context", "model_constants",
           "op_rows", "prefill_work", "weight_bytes_read"]
