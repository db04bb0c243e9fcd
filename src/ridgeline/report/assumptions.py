"""The assumptions a prediction prints: by default the few that change the answer, with
`--assumptions` every one of them with its provenance.

The few: how TTFT is defined in this output, the precision the GEMMs actually run at
(W8A16 and W8A8 differ by 2x in compute), the engine preset, and the kernel model with its
cross-validated error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ridgeline.perf.comm import ep_bytes_per_token
from ridgeline.perf.measured_attention import collective
from ridgeline.perf.measured_kernels import gemm_kernel_dtype, measured_choice
from ridgeline.perf.model_error import ModelError, model_error, pm
from ridgeline.perf.ops import fp8_expert_inputs

_BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4, "fp4": 4,
         "mxfp4": 4, "nvfp4": 4}


def precision_label(precision: Any) -> str:
    """'W8A8 (fp8 per-tensor) (weights fp8, GEMMs in fp8; KV bf16); from flags'."""
    gemm = getattr(precision, "gemm_compute_dtype", precision.activations)
    scheme = getattr(precision, "scheme", "")
    if not scheme:
        w = _BITS.get(str(precision.weights), 0)
        a = _BITS.get(str(gemm), 0)
        scheme = f"W{w}A{a}" if w and a else ""
    tag = f"{scheme} " if scheme else ""
    fallback = getattr(precision, "fallback", "")
    return (f"{tag}(weights {precision.weights}, GEMMs in {gemm}; KV {precision.kv}); "
            f"from {precision.source}" + (f"; {fallback}" if fallback else ""))


def kernel_model_line(step_model: Any, err: ModelError) -> str:
    prof = getattr(step_model, "kernel_profile", None)
    hw = getattr(step_model, "hardware", None)
    if prof is None:
        if hw is None:
            return "step times: a calibrated profile's measured steps (not cross-validated)"
        return (f"kernel model: plain roofline at {hw.compute_efficiency:g} of peak compute "
                f"and {hw.bandwidth_efficiency:g} of peak bandwidth (not cross-validated)")
    return (f"kernel model: {operator_sources(step_model, prof)}; cross-validated error "
            f"of one step: prefill {pm(err.prefill_ape)}, decode {pm(err.decode_step_ape)} "
            "(median)")


def operator_sources(step_model: Any, prof: Any) -> str:
    """Which measured kernels time each operator class, as the step model prices them
    (perf/kernels.py time_rows): NVIDIA's measured tables of this GPU where the catalog has
    them (GEMMs, MoE layers, attention, collectives), else the Vidur profile the catalog
    names for it, fitted on this GPU or derived from another."""
    vidur = (f"Vidur's measured '{prof.kernels}' kernels"
             + (" (derived: that GPU's fit on this one's datasheet peaks)" if prof.derived
                else " (this GPU's own fit)"))
    precision = getattr(step_model, "precision", None)
    table = getattr(step_model, "table", None)
    model = getattr(step_model, "model", None)
    by_source: dict[str, list[str]] = {}

    def put(op: str, source: str) -> None:
        by_source.setdefault(source, []).append(op)

    gemm_fits: dict[str, Any] = {}
    moe_fit = None
    if precision is not None:
        gemm_fits, moe_fit = measured_choice(prof, precision)
    mk = getattr(prof, "measured", None)
    gemm = gemm_fits.get("gemm")
    tables = (f"measured '{mk.system}' {mk.engine} kernel tables (AIConfigurator)"
              if mk is not None else "")
    put("GEMMs", f"{tables}{' (' + gemm[1] + ')' if gemm[1] else ''}" if gemm else vidur)
    quantized = precision is not None and gemm_kernel_dtype(precision) != "bf16"
    if quantized and gemm_fits.get("gemm16") is not None:
        put("16-bit-kept GEMMs", tables)
    elif quantized:
        put("16-bit-kept GEMMs", vidur)
    if getattr(model, "is_moe", False):
        # The runner backend whose rows the expert fit is on, where the tables name one.
        runner = moe_fit[0]["_fit"].get("backend", "") if moe_fit is not None else ""
        notes = "; ".join(filter(None, (f"{runner} MoE runner" if runner else "",
                                        moe_fit[1] if moe_fit is not None else "")))
        put("MoE experts", (f"{tables}{' (' + notes + ')' if notes else ''}"
                            if moe_fit is not None else vidur))
    att = getattr(prof, "measured_attention", None)
    is_mla = table is not None and "kv_b_proj" in table.names
    kv_bytes = precision.kv_bytes if precision is not None else 2.0
    heads = float(getattr(table, "kv_heads_per_gpu", 0.0) or 0.0)
    for phase in ("prefill", "decode"):
        fit = None if att is None else att.attention(("mla_" if is_mla else "") + phase,
                                                     kv_bytes)
        measured = fit is not None and heads <= fit.get("max_kv_heads", float("inf"))
        put(f"{phase} attention",
            f"measured '{att.gpu}' {att.engine} kernel tables (AIConfigurator)"
            if measured and att is not None
            else f"Vidur's A100 attention profile, carried through the '{prof.kernels}' "
            "GEMM fit")
    put("norms, activations, rope", vidur)
    par = getattr(step_model, "parallel", None)
    if par is not None and par.tp > 1:
        lb = None if att is None else collective(att, "all_reduce", par.tp)
        put("collectives", f"measured '{att.gpu}' {att.engine} kernel tables (AIConfigurator)"
            if lb is not None and att is not None
            else f"Vidur's '{prof.topology}' collectives")
    out = []
    for source, ops in by_source.items():
        if "prefill attention" in ops and "decode attention" in ops:
            ops = [("attention" if o == "prefill attention" else o) for o in ops
                   if o != "decode attention"]
        out.append(f"{', '.join(ops)} from {source}")
    return "; ".join(out)


def engine_line(step_model: Any, err: ModelError) -> str | None:
    costs = getattr(step_model, "engine_costs", None)
    if costs is None:
        return "engine: GPU work only (no engine CPU costs: --no-engine-costs)"
    tokens = getattr(step_model, "max_num_batched_tokens", None)
    chunk = f", chunked prefill of {tokens:,} tokens a step" if tokens else ""
    fixed = getattr(costs, "request_overhead_s", 0.0) * 1e3
    serving = (f"; serving error TTFT {pm(err.ttft_ape)}, ITL {pm(err.itl_ape)}, E2E "
               f"{pm(err.e2e_ape)} ({err.serving_basis})" if err.ttft_ape is not None else "")
    if not serving:   # a fitted costs file says why it has no held-out error
        why = (getattr(costs, "provenance", None) or {}).get("cv_error")
        serving = f"; cross-validated: {why}" if why else "; serving error not cross-validated"
    return (f"engine: {costs.engine} preset{chunk}, {fixed:.1f} ms per request outside the "
            f"GPU{serving}")


def model_structure_line(m: Any) -> str | None:
    """Attention windows, linear attention and expert routing, in one line (None for a
    dense model with full attention)."""
    if m is None:
        return None
    parts = []
    if getattr(m, "is_windowed", False):
        kind = "chunked local" if m.window_kind == "chunked" else "sliding-window"
        parts.append(f"{kind} attention: {m.num_window_layers} of {m.num_softmax_layers} "
                     f"attention layers see the last {m.sliding_window:,} tokens")
    if getattr(m, "num_linear_layers", 0):
        parts.append(f"linear attention in {m.num_linear_layers} of {m.num_layers} layers "
                     "(a constant state per sequence, no KV)")
    if getattr(m, "is_moe", False):
        parts.append(f"experts: each token picks {m.experts_per_token} of {m.num_experts}, "
                     "independently and uniformly")
    return "model: " + "; ".join(parts) if parts else None


def key_assumptions(step_model: Any, ttft_definition: str | None = None) -> list[str]:
    """The 3-6 assumptions that change the answer (see the module docstring)."""
    err = model_error(step_model)
    out = []
    if ttft_definition:
        out.append(ttft_definition)
    pr = getattr(step_model, "precision", None)
    if pr is not None:
        out.append("precision: " + precision_label(pr))
    eng = engine_line(step_model, err)
    if eng:
        out.append(eng)
    out.append(kernel_model_line(step_model, err))
    # The model's structure and the parallelism share a line (6 lines at most).
    parts = [x for x in (model_structure_line(getattr(step_model, "model", None)),) if x]
    par = getattr(step_model, "parallel", None)
    if par is not None and (par.tp > 1 or par.pp > 1 or par.ep > 1 or par.attn_dp > 1):
        adp = (f" attention-dp={par.attn_dp} ({par.gpus_per_replica} GPUs per instance, "
               "ranks in lockstep, each caching its own sequences)" if par.attn_dp > 1 else "")
        parts.append(f"parallelism: tp={par.tp} pp={par.pp} ep={par.ep}{adp}; communication "
                     "is exposed (not overlapped with compute)")
        m = getattr(step_model, "model", None)
        if par.ep > 1 and getattr(par, "ep_comm", "") and m is not None and pr is not None:
            moved = ep_bytes_per_token(par.ep_comm, m.num_experts, m.experts_per_token,
                                       par.ep, m.hidden_size, pr.activation_bytes,
                                       fp8_expert_inputs(pr), par.attn_dp)
            parts.append(f"EP dispatch/combine: {par.ep_comm} ({moved:,.0f} B per token per "
                         "GPU per MoE layer, out and back; --all2all-backend)")
    if parts:
        out.append("; ".join(parts))
    return out


# The assumption lines printed so far, while several commands run in one process and each
# line should appear once (the demo runs estimate, simulate and more in a row); None: every
# command prints its own list whole.
_printed: set[str] | None = None


@contextmanager
def each_printed_once() -> Iterator[None]:
    """Within this block an assumption line already printed is not printed again (a list
    says how many it left out)."""
    global _printed
    saved, _printed = _printed, set()
    try:
        yield
    finally:
        _printed = saved


def not_yet_printed(items: list[str]) -> tuple[list[str], int]:
    """(the items to print, how many were left out as printed before), recording them."""
    if _printed is None:
        return items, 0
    fresh = [a for a in items if a not in _printed]
    _printed.update(fresh)
    return fresh, len(items) - len(fresh)


def as_above_line(n: int) -> str:
    return f"  - (and {n} as printed above)"


def print_assumptions(out: Any, step_model: Any, full: bool,
                      ttft_definition: str | None = None, extra: list[str] | None = None
                      ) -> None:
    """The key assumptions (or with `full`, all of them) as a short list on `out`."""
    if full:
        items = [*(([ttft_definition]) if ttft_definition else []),
                 *step_model.assumptions(), *(extra or [])]
        out.print("Assumptions (all)", style="bold")
    else:
        items = key_assumptions(step_model, ttft_definition)
        out.print("Assumptions (the ones that change the answer; --assumptions for all)",
                  style="bold")
    items, seen = not_yet_printed(items)
    for a in items:
        out.print(f"  - {a}", markup=False)
    if seen:
        out.print(as_above_line(seen), markup=False)


__all__ = ["as_above_line", "each_printed_once", "key_assumptions", "not_yet_printed",
           "precision_label", "print_assumptions"]
