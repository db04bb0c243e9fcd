"""Precision: the dtypes of weights, KV cache and activations, chosen independently.

Bytes per element include the quantization-scale overhead of the 4-bit formats:

- int4: GPTQ/AWQ-style groups of 128 weights share one fp16 scale -> 0.5 + 2/128 bytes.
- fp4:  NVFP4 blocks of 16 values share one fp8 scale -> 0.5 + 1/16 bytes.
- fp8 / int8: one scale per tensor or per channel, negligible against the matrix.

The activation dtype selects the tensor-core peak the GEMMs run at. Weight-only
quantization (int4/fp8 weights with bf16 activations) dequantizes in the kernel, so it runs
at the bf16 peak and only saves bytes. The residual stream, attention inputs and outputs are
held in 16-bit (32-bit for fp32 activations) whatever the GEMM input dtype, as vLLM does.

>>> p = resolve_precision("int4", None, "bf16")
>>> (p.weights, p.kv, p.activations, round(p.weight_bytes, 4), p.kv_bytes)
('int4', 'bf16', 'bf16', 0.5156, 2.0)
"""

from __future__ import annotations

from dataclasses import dataclass

from ridgeline.errors import field_error

# Storage bytes per element, scale overhead included.
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5 + 2.0 / 128.0,
    "fp4": 0.5 + 1.0 / 16.0,
}

WEIGHT_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4", "fp4")
KV_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8")
ACTIVATION_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "fp4")


@dataclass(frozen=True)
class Precision:
    """Dtypes and element sizes of weights, KV cache and activations."""

    weights: str
    kv: str
    activations: str

    @property
    def weight_bytes(self) -> float:
        """Bytes per weight of the quantized linear layers (scales included)."""
        return DTYPE_BYTES[self.weights]

    @property
    def embedding_bytes(self) -> float:
        """Bytes per element of the input embedding and LM head.

        Quantized checkpoints (GPTQ, AWQ, FP8) keep them in 16-bit; fp32 models keep fp32.
        """
        return max(DTYPE_BYTES[self.weights], 2.0)

    @property
    def kv_bytes(self) -> float:
        """Bytes per cached K or V element."""
        return DTYPE_BYTES[self.kv]

    @property
    def activation_bytes(self) -> float:
        """Bytes per element of the residual stream and attention IO (16-bit unless fp32)."""
        return 4.0 if self.activations == "fp32" else 2.0

    @property
    def gemm_compute_dtype(self) -> str:
        """The dtype whose tensor-core peak the linear layers run at."""
        return "bf16" if self.activations == "fp16" else self.activations

    @property
    def attention_compute_dtype(self) -> str:
        """Attention runs in the 16-bit (or fp32) activation dtype, as FlashAttention does."""
        return "fp32" if self.activations == "fp32" else "bf16"

    def describe(self) -> dict[str, str]:
        return {"weights": self.weights, "kv": self.kv, "activations": self.activations}


def resolve_precision(weights: str = "bf16", kv: str | None = None,
                      activations: str = "bf16") -> Precision:
    """Validate the dtypes; KV defaults to the weight dtype (bf16 for 4-bit weights)."""
    weights = weights.lower()
    activations = activations.lower()
    if weights not in WEIGHT_DTYPES:
        raise field_error("weights", weights, ", ".join(WEIGHT_DTYPES))
    if activations not in ACTIVATION_DTYPES:
        raise field_error("activations", activations, ", ".join(ACTIVATION_DTYPES))
    if kv is None:
        kv = "bf16" if weights in ("int4", "fp4") else weights
    kv = kv.lower()
    if kv not in KV_DTYPES:
        raise field_error("kv", kv, ", ".join(KV_DTYPES))
    return Precision(weights=weights, kv=kv, activations=activations)
