"""One estimate with everything a picture needs: phases, per-operator rows, roofline data.

The same library calls as `ridgeline estimate --json --ops` (`perf.estimate.estimate`,
`model_constants`, `op_rows`), gathered into one JSON-safe dict so the report, the plot
command and the UI's `/api/estimate` share it.

>>> v = estimate_view("llama-3.1-8b", "h100-sxm", batch=32, prompt=1024, output=256)
>>> sorted(v)
['assumptions', 'config', 'constants', 'ops', 'result', 'roofline']
"""

from __future__ import annotations

from typing import Any

from ridgeline.errors import RidgelineError
from ridgeline.jsonsafe import json_safe
from ridgeline.perf.estimate import (
    decode_work,
    estimate,
    model_constants,
    op_rows,
    prefill_work,
)
from ridgeline.perf.ops import ATTENTION, GEMM, GEMM16
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.sim.engine_costs import load_engine_costs
from ridgeline.specs import Parallelism, load_hardware, load_model
from ridgeline.specs.hardware import HardwareSpec
from ridgeline.specs.model import ModelSpec
from ridgeline.specs.precision import resolve_model_precision

# Roofs drawn per dtype. fp16 duplicates bf16 and tf32/int8 add clutter without a question
# they answer for LLM serving, so they are left out.
ROOF_DTYPES = ("fp32", "bf16", "fp8", "fp4")


def roofline_data(step_model: Any, ops: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Roofs per dtype, the bandwidth slope, the ridge point and one point per operator.

    Each operator sits at its intensity F/D and its attainable rate min(peak, I x beta)
    under the dense peak of the dtype it computes in (GEMMs: the activation dtype;
    attention: 16-bit; vector ops: fp32), as the roofline is usually drawn.
    """
    hw = step_model.hardware
    bw = hw.memory_bandwidth_bytes_s
    roofs = [{"dtype": d, "peak_flops_per_s": float(hw.peak_flops[d]),
              "ridge_point_flop_per_byte": float(hw.peak_flops[d]) / bw}
             for d in ROOF_DTYPES if d in hw.peak_flops]
    gemm_dtype = step_model.precision.gemm_compute_dtype
    peaks = {GEMM: step_model.gemm_peak_flops, ATTENTION: step_model.attention_peak_flops,
             GEMM16: getattr(step_model, "gemm16_peak_flops", step_model.attention_peak_flops)}
    points = []
    for phase, rows in ops.items():
        for row in rows:
            f, d = row.get("flops", 0.0), row.get("bytes", 0.0)
            if not (f > 0 and d > 0):
                continue  # communication rows and byte-only ops have no place on a roofline
            peak = peaks.get(row["kind"], step_model.vector_peak_flops)
            inten = f / d
            points.append({"phase": phase, "op": row["op"], "kind": row["kind"],
                           "intensity_flop_per_byte": inten,
                           "attainable_flops_per_s": min(peak, inten * bw),
                           "peak_flops_per_s": peak, "time_s": row["time_s"],
                           "bound": row["bound"]})
    # Every operator in step order: plots color an operator the same in every figure.
    order = list(dict.fromkeys(r["op"] for phase in ("prefill", "decode")
                               for r in ops.get(phase, [])))
    return {"hardware": hw.name, "bandwidth_bytes_per_s": bw, "roofs": roofs,
            "op_order": order,
            "compute_dtype": gemm_dtype,
            "ridge_point_flop_per_byte": step_model.gemm_peak_flops / bw,
            "points": points}


def estimate_view(model: str | ModelSpec, hardware: str | HardwareSpec, *,
                  weights: str | None = None, kv: str | None = None,
                  activations: str | None = None, tp: int = 1, pp: int = 1,
                  ep: int = 1, batch: float = 32, prompt: float = 1024, output: float = 256,
                  prefix: float = 0, context: float | None = None,
                  gpu_memory_utilization: float = 0.9, engine: str = "vllm",
                  engine_costs: bool = True) -> dict[str, Any]:
    """`estimate --json --ops` for one configuration, plus `roofline` (see roofline_data);
    with the engine's per-step costs as `estimate` applies them (`engine_costs=False`: the
    GPU work only)."""
    if not 0 < gpu_memory_utilization <= 1:
        raise RidgelineError(f"gpu-memory-utilization: got {gpu_memory_utilization}; "
                             "allowed: 0 < value <= 1")
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    precision = resolve_model_precision(spec, weights, kv, activations)
    parallel = Parallelism(tp=tp, pp=pp, ep=ep).validate(spec)
    hw = hardware if isinstance(hardware, HardwareSpec) else load_hardware(hardware)

    costs = load_engine_costs(engine) if engine_costs else None
    m = RooflineStepTime(spec, hw, precision, parallel, engine_costs=costs)
    r = estimate(m, batch, prompt, output, prefix, context, gpu_memory_utilization)
    scalar = {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
    const = model_constants(m)
    ridge = const["ridge_point_flop_per_byte"]
    ops = {
        "prefill": op_rows(m.breakdown(prefill_work(batch, prompt, prefix)), ridge),
        "decode": op_rows(m.breakdown(decode_work(batch, scalar["decode_context_tokens"])),
                          ridge),
    }
    return json_safe({"config": m.describe(), "constants": const, "result": scalar, "ops": ops,
                   "assumptions": m.assumptions(), "roofline": roofline_data(m, ops)})
