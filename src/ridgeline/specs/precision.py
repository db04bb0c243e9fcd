"""Precision: the dtypes of weights, KV cache and activations, chosen independently.

Bytes per element include the quantization-scale overhead of the 4-bit formats:

- int4: GPTQ/AWQ-style groups of 128 weights share one fp16 scale -> 0.5 + 2/128 bytes.
- fp4:  NVFP4 blocks of 16 values share one fp8 scale -> 0.5 + 1/16 bytes.
- mxfp4: OCP MX blocks of 32 values share one E8M0 scale -> 0.5 + 1/32 bytes (gpt-oss).
- fp8 / int8: one scale per tensor or per channel, negligible against the matrix.

A quantized checkpoint can store module classes differently (gpt-oss: MXFP4 experts, bf16
attention; llm-compressor FP8: attention left bf16 by `ignore`): `module_weights` holds
those per-class dtypes, and the per-class byte properties read them (`weights` for the rest).

KV defaults to the model's own 16-bit dtype, as vLLM's `--kv-cache-dtype auto` does (the
checkpoint's torch_dtype, not the quantized weight dtype): fp32 for fp32 weights, else bf16.

The activation dtype selects the tensor-core peak the GEMMs run at. Weight-only
quantization (int4/fp8 weights with bf16 activations) dequantizes in the kernel, so it runs
at the bf16 peak and only saves bytes. The residual stream, attention inputs and outputs are
held in 16-bit (32-bit for fp32 activations) whatever the GEMM input dtype, as vLLM does.

>>> p = resolve_precision("int4", None, "bf16")
>>> (p.weights, p.kv, p.activations, round(p.weight_bytes, 4), p.kv_bytes)
('int4', 'bf16', 'bf16', 0.5156, 2.0)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ridgeline.errors import field_error

if TYPE_CHECKING:
    from ridgeline.specs.model import ModelSpec

# Storage bytes per element, scale overhead included.
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5 + 2.0 / 128.0,
    "fp4": 0.5 + 1.0 / 16.0,
    "mxfp4": 0.5 + 1.0 / 32.0,
}

WEIGHT_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4", "fp4", "mxfp4")
KV_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8")
ACTIVATION_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "fp4", "mxfp4")


@dataclass(frozen=True)
class Precision:
    """Dtypes and element sizes of weights, KV cache and activations."""

    weights: str
    kv: str
    activations: str
    # Per module class (specs/quant.py MODULE_CLASSES) dtype where it differs from
    # `weights`; a pair tuple so the dataclass stays hashable.
    module_weights: tuple[tuple[str, str], ...] = ()
    weight_bytes_override: float = 0.0  # bytes/weight of `weights` when scales differ
    source: str = "flags"  # what chose these dtypes: "flags" or the checkpoint's method

    @property
    def weight_bytes(self) -> float:
        """Bytes per weight of the quantized linear layers (scales included)."""
        return self.weight_bytes_override or DTYPE_BYTES[self.weights]

    def module_dtype(self, module: str) -> str:
        return dict(self.module_weights).get(module, self.weights)

    def module_weight_bytes(self, module: str) -> float:
        """Bytes per weight of one module class (attention, mlp, experts, shared_experts)."""
        dt = dict(self.module_weights).get(module)
        return self.weight_bytes if dt is None else DTYPE_BYTES[dt]

    @property
    def attention_weight_bytes(self) -> float:
        return self.module_weight_bytes("attention")

    @property
    def mlp_weight_bytes(self) -> float:
        return self.module_weight_bytes("mlp")

    @property
    def expert_weight_bytes(self) -> float:
        return self.module_weight_bytes("experts")

    @property
    def shared_expert_weight_bytes(self) -> float:
        return self.module_weight_bytes("shared_experts")

    @property
    def lm_head_bytes(self) -> float:
        """Bytes per LM-head weight: 16-bit unless the checkpoint quantized it."""
        dt = dict(self.module_weights).get("lm_head")
        return self.embedding_bytes if dt is None else DTYPE_BYTES[dt]

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
        return {"fp16": "bf16", "mxfp4": "fp4"}.get(self.activations, self.activations)

    @property
    def attention_compute_dtype(self) -> str:
        """Attention runs in the 16-bit (or fp32) activation dtype, as FlashAttention does."""
        return "fp32" if self.activations == "fp32" else "bf16"

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"weights": self.weights, "kv": self.kv,
                               "activations": self.activations}
        if self.source != "flags":  # what chose the dtypes, when not only the flags
            out["source"] = self.source
        if self.module_weights:
            out["module_weights"] = dict(self.module_weights)
        return out


def resolve_precision(weights: str = "bf16", kv: str | None = None,
                      activations: str = "bf16") -> Precision:
    """Validate the dtypes; KV defaults to the model's 16-bit dtype (vLLM's `auto`)."""
    weights = weights.lower()
    activations = activations.lower()
    if weights not in WEIGHT_DTYPES:
        raise field_error("weights", weights, ", ".join(WEIGHT_DTYPES))
    if activations not in ACTIVATION_DTYPES:
        raise field_error("activations", activations, ", ".join(ACTIVATION_DTYPES))
    if kv is None:
        kv = "fp32" if weights == "fp32" else "fp16" if weights == "fp16" else "bf16"
    kv = kv.lower()
    if kv not in KV_DTYPES:
        raise field_error("kv", kv, ", ".join(KV_DTYPES))
    return Precision(weights=weights, kv=kv, activations=activations)


def resolve_model_precision(model: ModelSpec, weights: str | None = None, kv: str | None = None,
                            activations: str | None = None) -> Precision:
    """Dtypes for a model: flags where given, else the checkpoint's `quantization_config`
    (weights, GEMM dtype, module classes it leaves 16-bit), else bf16. `source` says which
    applied. KV is vLLM's `auto` (the model dtype) unless `kv` is given."""
    q = model.quant
    if weights is not None or q is None:
        p = resolve_precision(weights or "bf16", kv, activations or "bf16")
        if q is not None:
            return replace(p, source=f"flags (--weights {p.weights}) over the checkpoint's "
                           f"{q.method}")
        if weights is None:  # nothing chose them: say so rather than crediting the flags
            return replace(p, source="defaults (16-bit; the checkpoint has no "
                           "quantization_config)")
        return p
    p = resolve_precision(q.weights, kv or "bf16", activations or q.activations)
    modules = tuple((m, "bf16") for m in q.unquantized if m != "router")
    if "lm_head" not in q.unquantized:  # the method quantized the LM head too
        modules += (("lm_head", q.weights),)
    src = f"checkpoint quantization_config ({q.describe()})"
    if activations is not None:
        src += f"; --activations {activations}"
    return replace(p, module_weights=modules, weight_bytes_override=q.weight_bytes,
                   source=src)


# vLLM's `--quantization` method -> the weight dtype it stores (a minimal table; the
# checkpoint's own quantization_config, when read, says more).
_VLLM_QUANTIZATION = {"fp8": "fp8", "awq": "int4", "awq_marlin": "int4", "gptq": "int4",
                      "gptq_marlin": "int4", "modelopt_fp4": "fp4", "mxfp4": "mxfp4"}


def precision_from_vllm_quantization(name: str) -> str:
    """The weight dtype of vLLM's `--quantization NAME`.

    >>> precision_from_vllm_quantization("awq")
    'int4'
    """
    try:
        return _VLLM_QUANTIZATION[name.strip().lower()]
    except KeyError:
        raise field_error("--quantization", name, ", ".join(_VLLM_QUANTIZATION)) from None
