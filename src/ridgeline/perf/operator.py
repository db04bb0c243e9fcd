"""One operator of an engine step (`Op`) and the compute classes that pick its peak.

Its own module so that the operator builders (`perf/ops.py`, `perf/linear_attention.py`, ...)
share it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ridgeline.specs.precision import Precision

# Compute classes: which peak an operator runs at.
GEMM, ATTENTION, VECTOR = "gemm", "attention", "vector"
# A GEMM of a module a quantized checkpoint leaves 16-bit (its `ignore` list): it runs at
# the 16-bit peak while the quantized GEMMs run at the activation dtype's.
GEMM16 = "gemm16"


def gemm_kind(pr: Precision, module: str) -> str:
    """GEMM16 for a module class the checkpoint keeps 16-bit under low-precision GEMMs."""
    if dict(pr.module_weights).get(module) in ("bf16", "fp16", "fp32") and \
            pr.gemm_compute_dtype not in ("bf16", "fp32"):
        return GEMM16
    return GEMM


@dataclass
class Op:
    """One operator (kernel group) of the step, per GPU, summed over its `layers`."""

    name: str
    kind: str  # GEMM | ATTENTION | VECTOR
    layers: int
    flops: dict[str, float] = field(default_factory=dict)  # per layer, per unit of a variable
    bytes: dict[str, float] = field(default_factory=dict)
    weight_bytes: float = 0.0  # per layer: read once when the step does any work
    kernels: float = 1.0  # launches per layer
    driver: str = "any"  # the indicator variable that says the op runs
    in_dim: float = 0.0  # GEMMs: the reduction dimension k (sets the fitted fill intercept)
    out_dim: float = 0.0  # GEMMs: output columns n per GPU
