"""Precision: the dtypes of weights, KV cache and activations, and the GEMM scheme they make.

Bytes per element include the quantization-scale overhead of the 4-bit formats:

- int4: GPTQ/AWQ-style groups of 128 weights share one fp16 scale -> 0.5 + 2/128 bytes.
- fp4:  NVFP4 blocks of 16 values share one fp8 scale -> 0.5 + 1/16 bytes.
- mxfp4: OCP MX blocks of 32 values share one E8M0 scale -> 0.5 + 1/32 bytes (gpt-oss).
- fp8 / int8: one scale per tensor, channel or 128x128 block, negligible against the matrix.

A quantized checkpoint can store module classes differently (gpt-oss: MXFP4 experts, bf16
attention; llm-compressor FP8: attention left bf16 by `ignore`): `module_weights` holds
those per-class dtypes, and the per-class byte properties read them (`weights` for the rest).

KV defaults to the model's own 16-bit dtype, as vLLM's `--kv-cache-dtype auto` does (the
checkpoint's torch_dtype, not the quantized weight dtype): fp32 for fp32 weights, else bf16.

The activation dtype selects the tensor-core peak the GEMMs run at. When `--activations` is
not given, the activations follow the weights as vLLM runs them:

- fp8 weights: W8A8, fp8 GEMMs with dynamically quantized activations (vLLM's
  `--quantization fp8`, and fp8 checkpoints with an `activation_scheme`).
- fp4 (NVFP4) weights: W4A4, fp4 GEMMs.
- int4, int8 and mxfp4 weights: weight-only (W4A16, W8A16): the kernel dequantizes the
  weights and multiplies in 16-bit, so it runs at the bf16 peak and only saves bytes.
  mxfp4 (gpt-oss experts) is W4A16 on Hopper and Blackwell, vLLM's default MXFP4 MoE
  backend on both; `--activations fp8` gives TensorRT-LLM's and SGLang's W4A8
  (mxfp4 x mxfp8) kernel instead.

A defaulted 8- or 4-bit activation dtype falls back to 16-bit on a GPU without tensor cores
for it (`on_hardware`): fp8 on an A100 runs as W8A16 (vLLM's Marlin kernel), NVFP4 on a
Hopper GPU as W4A16. An explicit `--activations fp8` on such a GPU is refused instead.
The residual stream, attention inputs and outputs are held in 16-bit (32-bit for fp32
activations) whatever the GEMM input dtype, as vLLM does.

>>> p = resolve_precision("int4", None, "bf16")
>>> (p.weights, p.kv, p.activations, round(p.weight_bytes, 4), p.kv_bytes)
('int4', 'bf16', 'bf16', 0.5156, 2.0)
>>> resolve_precision("fp8").scheme, resolve_precision("fp8").gemm_kernel_dtype
('W8A8 (fp8 per-tensor)', 'fp8')
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ridgeline.errors import field_error

if TYPE_CHECKING:
    from ridgeline.specs.hardware import HardwareSpec
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
# The GEMM kernel families measured kernel tables are keyed by (`gemm_kernel_dtype`).
GEMM_KERNEL_DTYPES = ("bf16", "fp8", "fp8_block", "fp4", "w8a16", "w4a16")
_BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4, "fp4": 4,
         "mxfp4": 4}
_SIXTEEN = ("bf16", "fp16", "fp32")
# Activations when `--activations` is not given: the GEMMs vLLM runs for these weights.
_DEFAULT_ACTIVATIONS = {"fp8": "fp8", "fp4": "fp4"}

# vLLM `--quantization` names -> (weight dtype, activation dtype or None for the default,
# fp8 block shape). The checkpoint's own quantization_config, where it has one, is more
# precise (bits, groups, ignored modules) and wins when it names the same method.
VLLM_QUANTIZATION: dict[str, tuple[str, str | None, tuple[int, ...]]] = {
    "fp8": ("fp8", None, ()),
    "fp8_block": ("fp8", None, (128, 128)),
    "fbgemm_fp8": ("fp8", None, ()),
    "ptpc_fp8": ("fp8", None, ()),
    "modelopt": ("fp8", None, ()),
    "modelopt_fp4": ("fp4", None, ()),
    "nvfp4": ("fp4", None, ()),
    "mxfp4": ("mxfp4", None, ()),
    "awq": ("int4", "bf16", ()),
    "awq_marlin": ("int4", "bf16", ()),
    "gptq": ("int4", "bf16", ()),
    "gptq_marlin": ("int4", "bf16", ()),
    "marlin": ("int4", "bf16", ()),
    "bitsandbytes": ("int4", "bf16", ()),
    "experts_int8": ("int8", "bf16", ()),
}


def precision_from_vllm_quantization(name: str) -> tuple[str, str | None, tuple[int, ...]]:
    """A vLLM `--quantization` name (or a ridgeline weight dtype) -> (weight dtype,
    activation dtype or None for the engine's default on the GPU, fp8 block shape).

    >>> precision_from_vllm_quantization("modelopt_fp4")
    ('fp4', None, ())
    """
    key = str(name).strip().lower().replace("-", "_")
    if key in WEIGHT_DTYPES:
        return key, None, ()
    if key not in VLLM_QUANTIZATION:
        raise field_error("quantization", name, ", ".join((*WEIGHT_DTYPES, *VLLM_QUANTIZATION)))
    return VLLM_QUANTIZATION[key]


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
    # True when no --activations chose the activation dtype: `on_hardware` may then fall
    # back to 16-bit on a GPU without tensor cores for it.
    activations_default: bool = False
    # fp8 weight scales: "tensor", "channel" or "block" (with `weight_block`, e.g. 128x128).
    weight_scale: str = ""
    weight_block: tuple[int, ...] = ()
    fallback: str = ""  # why on_hardware changed the activations ("" = it did not)

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
    def gemm_kernel_dtype(self) -> str:
        """The GEMM kernel family of the quantized linear layers, one of GEMM_KERNEL_DTYPES:
        bf16 (16-bit in and out; fp32 too), fp8 (8-bit GEMMs with per-tensor or per-channel
        scales, int8 W8A8 and the W4A8 kernels included: they run at the 8-bit tensor-core
        rate), fp8_block (DeepSeek-style 128x128 block scales), fp4 (W4A4), w8a16 and w4a16
        (weight-only: dequantized in the kernel, 16-bit multiplies)."""
        compute = self.gemm_compute_dtype
        if compute in _SIXTEEN:
            bits = _BITS[self.weights]
            return "bf16" if bits >= 16 else "w8a16" if bits == 8 else "w4a16"
        if compute == "fp4":
            return "fp4"
        return "fp8_block" if self.weight_scale == "block" and self.weights == "fp8" \
            else "fp8"

    @property
    def scheme(self) -> str:
        """A short label of the GEMM scheme, e.g. "W8A8 (fp8 per-tensor)", "W4A16 (int4)"."""
        w, a = self.weights, self.activations
        wb, ab = _BITS[w], _BITS.get(a, 16)
        a16 = a in _SIXTEEN
        names = {"fp4": "nvfp4"}
        if wb >= 16 and a16:
            what = w if w == a or w == "fp32" or a == "fp32" else f"{w} x {a}"
        elif w == "fp8" and a == "fp8":
            what = ("fp8 block " + "x".join(map(str, self.weight_block or (128, 128)))
                    if self.weight_scale == "block"
                    else f"fp8 per-{self.weight_scale or 'tensor'}")
        elif a16 or w == a or (w, a) == ("fp4", "fp4"):
            what = names.get(w, w)
        elif w == "mxfp4" and a == "fp8":
            what = "mxfp4 x mxfp8"
        else:
            what = f"{names.get(w, w)} x {names.get(a, a)}"
        return f"W{wb}A{ab} ({what})"

    @property
    def attention_compute_dtype(self) -> str:
        """Attention runs in the 16-bit (or fp32) activation dtype, as FlashAttention does."""
        return "fp32" if self.activations == "fp32" else "bf16"

    def on_hardware(self, hw: HardwareSpec) -> Precision:
        """The precision a GPU runs: a defaulted 8/4-bit activation dtype the GPU has no
        tensor cores for falls back to 16-bit activations (W8A16 / W4A16), as vLLM's
        Marlin kernels run fp8 on Ampere and NVFP4 on Hopper."""
        compute = self.gemm_compute_dtype
        if not self.activations_default or compute in _SIXTEEN or compute in hw.peak_flops:
            return self
        why = (f"{hw.name} has no {compute} tensor cores: {self.scheme} runs as weight-only "
               f"W{_BITS[self.weights]}A16 (vLLM's Marlin kernel)")
        return replace(self, activations="bf16", fallback=why)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"weights": self.weights, "kv": self.kv,
                               "activations": self.activations, "scheme": self.scheme,
                               "gemm_kernel_dtype": self.gemm_kernel_dtype}
        if self.source != "flags":  # what chose the dtypes, when not only the flags
            out["source"] = self.source
        if self.module_weights:
            out["module_weights"] = dict(self.module_weights)
        if self.fallback:
            out["fallback"] = self.fallback
        return out


def _check(field: str, value: str, allowed: tuple[str, ...]) -> str:
    v = value.lower()
    if v not in allowed:
        raise field_error(field, value, ", ".join(allowed))
    return v


def resolve_precision(weights: str = "bf16", kv: str | None = None,
                      activations: str | None = None) -> Precision:
    """Validate the dtypes; KV defaults to the model's 16-bit dtype (vLLM's `auto`).

    `weights` is a dtype or a vLLM `--quantization` name; `activations` None follows the
    weights as vLLM runs them (fp8 -> W8A8, fp4 -> W4A4, the rest 16-bit; module doc)."""
    key = str(weights).strip().lower()
    if key not in WEIGHT_DTYPES and key.replace("-", "_") in VLLM_QUANTIZATION:
        wt, act, block = precision_from_vllm_quantization(key)
    else:
        wt, act, block = _check("weights", key, WEIGHT_DTYPES), None, ()
    chosen = activations is not None
    if activations is None:
        activations = act or _DEFAULT_ACTIVATIONS.get(wt, "bf16")
    activations = _check("activations", activations, ACTIVATION_DTYPES)
    # vLLM's --kv-cache-dtype spellings: auto (the model dtype), fp8_e4m3 / fp8_e5m2 (1 byte)
    if kv is not None and kv.strip().lower() == "auto":
        kv = None
    if kv is not None and kv.strip().lower() in ("fp8_e4m3", "fp8_e5m2"):
        kv = "fp8"
    if kv is None:
        kv = "fp32" if wt == "fp32" else "fp16" if wt == "fp16" else "bf16"
    kv = _check("kv", kv, KV_DTYPES)
    scale = ("block" if block else "tensor") if wt == "fp8" else ""
    return Precision(weights=wt, kv=kv, activations=activations,
                     activations_default=not chosen and act is None, weight_scale=scale,
                     weight_block=block)


def resolve_model_precision(model: ModelSpec, weights: str | None = None, kv: str | None = None,
                            activations: str | None = None) -> Precision:
    """Dtypes for a model: flags where given, else the checkpoint's `quantization_config`
    (weights, GEMM dtype, module classes it leaves 16-bit), else bf16. `source` says which
    applied. KV is vLLM's `auto` (the model dtype) unless `kv` is given. A vLLM
    `--quantization` name naming the checkpoint's own method reads the checkpoint."""
    q = model.quant
    if weights is not None and q is not None and _same_method(weights, q.method):
        weights = None  # `--quantization awq` on an AWQ checkpoint: the checkpoint says more
    if weights is not None or q is None:
        p = resolve_precision(weights or "bf16", kv, activations)
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
                   source=src, activations_default=activations is None,
                   weight_scale=q.scale if q.weights == "fp8" else "",
                   weight_block=q.block)


def _same_method(name: str, method: str) -> bool:
    """Whether a vLLM `--quantization` name is the checkpoint's own method."""
    key = name.strip().lower().replace("-", "_")
    if key in WEIGHT_DTYPES and key != "fp8" and key != "mxfp4":
        return False
    fam = {"awq_marlin": "awq", "gptq_marlin": "gptq", "marlin": "gptq",
           "modelopt_fp4": "modelopt", "compressed_tensors": "compressed-tensors"}
    norm = method.replace("_marlin", "")
    return fam.get(key, key) in (norm, method) or key == "compressed_tensors"

