"""Checkpoint quantization: what a `quantization_config` says about weight bytes and GEMMs.

A Hugging Face checkpoint's `quantization_config` (or a ModelOpt `hf_quant_config.json`
folded into it) says how its linear layers are stored. `parse_quantization` turns it into a
`QuantSpec`: the weight dtype of the quantized linear layers (in the names of
`ridgeline.specs.precision`), the GEMM input dtype (weight-only methods keep 16-bit
activations), and which module classes stay 16-bit.

Methods and what they store (bytes per weight include the scales; see precision.py):

- fp8 (DeepSeek/Qwen block FP8, `activation_scheme`): fp8 weights; fp8 GEMMs when the
  activations are quantized too (`activation_scheme` dynamic or static).
- compressed-tensors (llm-compressor): weights `num_bits` 8 float -> fp8, 8 int -> int8,
  4 int -> int4 (group scales), 4 float -> fp4 (NVFP4); fp8/int8/fp4 activations when
  `input_activations` is given; the `ignore` list stays 16-bit.
- awq, gptq (and their marlin / gptq_marlin / awq_marlin spellings): 4-bit weights with
  fp16 group scales (AWQ also stores 4-bit zero points), 16-bit activations; 8-bit GPTQ ->
  int8 weight-only.
- mxfp4 (gpt-oss): 4-bit E2M1 with one E8M0 scale per 32 -> 0.5 + 1/32 bytes; the experts
  only (`modules_to_not_convert` lists attention, router, embeddings, LM head).
- modelopt (NVIDIA ModelOpt: `quant_algo` FP8 or NVFP4, `exclude_modules`).
- bitsandbytes: 4-bit nf4 or 8-bit weight-only.

The embeddings stay 16-bit in every method; the LM head stays 16-bit unless the method
quantizes it (`lm_head: true` for GPTQ, compressed-tensors without lm_head in `ignore`).

>>> q = parse_quantization({"quant_method": "awq", "bits": 4, "group_size": 128,
...                         "zero_point": True})
>>> (q.weights, q.activations, round(q.weight_bytes, 4))
('int4', 'bf16', 0.5195)
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from ridgeline.errors import RidgelineError
from ridgeline.specs.precision import DTYPE_BYTES

# Module classes a quantization method can leave 16-bit (what `ignore` patterns map to).
MODULE_CLASSES = ("attention", "mlp", "experts", "shared_experts", "router", "lm_head")


@dataclass(frozen=True)
class QuantSpec:
    """Weight storage of a quantized checkpoint."""

    method: str  # quant_method as written (lower case)
    weights: str  # dtype of the quantized linear layers (precision.py names)
    activations: str  # GEMM input dtype of those layers (bf16 = weight-only)
    group_size: int = 0  # weights per scale (0: per tensor/channel/block: negligible)
    zero_point: bool = False  # 4-bit zero points stored next to the scales (AWQ)
    unquantized: tuple[str, ...] = ()  # MODULE_CLASSES left 16-bit
    # 8-bit weight scales: "tensor", "channel", or "block" with `block` (rows, columns).
    scale: str = ""
    block: tuple[int, ...] = ()
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def weight_bytes(self) -> float:
        """Bytes per quantized weight, scales (and zero points) included."""
        if self.weights == "int4" and self.group_size:
            scale = 2.0 + (0.5 if self.zero_point else 0.0)  # fp16 scale (+ int4 zero)
            return 0.5 + scale / self.group_size
        return DTYPE_BYTES[self.weights]

    def quantizes(self, module: str) -> bool:
        return module not in self.unquantized

    def describe(self) -> str:
        parts = [f"{self.method}: weights {self.weights}"]
        if self.block:
            parts.append("block " + "x".join(map(str, self.block)))
        elif self.scale:
            parts.append(f"per-{self.scale}")
        if self.group_size:
            parts.append(f"group {self.group_size}" + (" + zero points" if self.zero_point
                                                       else ""))
        parts.append(f"GEMMs {self.activations}")
        if self.unquantized:
            parts.append(f"16-bit: {', '.join(self.unquantized)}")
        return ", ".join(parts)


def _classify(pattern: str) -> list[str]:
    """MODULE_CLASSES a module name or pattern of `ignore`/`modules_to_not_convert` names."""
    p = pattern.lower().removeprefix("re:")
    if "vision" in p or "multi_modal" in p or "audio" in p:
        return []  # encoders outside the language model: not costed
    out = []
    if "lm_head" in p or "output_layer" in p:
        out.append("lm_head")
    if any(k in p for k in ("self_attn", "attention", "attn", "q_proj", "k_proj", "v_proj",
                            "o_proj", "qkv", "linear_attn", "in_proj", "out_proj")):
        out.append("attention")
    if "router" in p or p.endswith(".gate") or p[-8:] == "mlp.gate":
        out.append("router")
    if "shared_expert" in p:
        out.append("shared_experts")
    elif "experts" in p:
        out.append("experts")
    elif ("mlp" in p or "feed_forward" in p) and "router" not in out:
        out.append("mlp")
    return out


def _unquantized(patterns: Any, num_layers_hint: int = 0) -> tuple[str, ...]:
    """Module classes every layer leaves unquantized, from a list of names/patterns.

    A class counts as unquantized when a pattern covers it (a glob like model.layers.*.
    self_attn) or when names cover it in many layers (a list spelled out per layer, as
    llm-compressor writes `ignore`)."""
    if not patterns:
        return ()
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise RidgelineError("config.json: field 'quantization_config' ignore/"
                             "modules_to_not_convert: allowed: a list of module names")
    counts: dict[str, int] = {}
    for p in patterns:
        wildcard = "*" in p or p.startswith("re:") or not any(ch.isdigit() for ch in p)
        for cls in _classify(p):
            counts[cls] = counts.get(cls, 0) + (10**6 if wildcard else 1)
    # Spelled-out names: the class is 16-bit when it is named in more than one layer.
    return tuple(c for c in MODULE_CLASSES if counts.get(c, 0) > 1 or
                 (c == "lm_head" and counts.get(c, 0) >= 1))


def _ct_dtype(args: dict[str, Any] | None, where: str) -> str | None:
    """A compressed-tensors weights/input_activations block -> a dtype name."""
    if not args:
        return None
    bits = args.get("num_bits")
    kind = str(args.get("type", "int")).lower()
    table = {(8, "float"): "fp8", (8, "int"): "int8", (4, "int"): "int4", (4, "float"): "fp4"}
    if (bits, kind) not in table:
        raise RidgelineError(f"config.json: field 'quantization_config' {where}: num_bits "
                             f"{bits!r} type {kind!r}; allowed: 8 float, 8 int, 4 int, 4 float")
    return table[(bits, kind)]


def _block(value: Any) -> tuple[int, ...]:
    """A `weight_block_size` / `block_structure` ([128, 128]) -> (128, 128); () for none."""
    if value is None:
        return ()
    if isinstance(value, str):  # compressed-tensors may write "128x128"
        value = value.lower().split("x")
    try:
        out = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        out = ()
    if len(out) != 2 or min(out) < 1:
        raise RidgelineError(f"config.json: field 'quantization_config' weight_block_size: "
                             f"got {value!r}; allowed: two positive integers, e.g. [128, 128]")
    return out


def parse_quantization(qc: Any) -> QuantSpec | None:
    """The QuantSpec of a `quantization_config` dict (None for none); one-line errors."""
    if qc is None:
        return None
    if not isinstance(qc, dict):
        raise RidgelineError("config.json: field 'quantization_config': allowed: an object")
    method = str(qc.get("quant_method") or qc.get("quant_algo") or "").lower()
    if not method and "quantization" in qc:  # ModelOpt hf_quant_config.json
        return parse_quantization({"quant_method": "modelopt", **qc["quantization"]})
    skip = _unquantized(qc.get("modules_to_not_convert") or qc.get("ignore")
                        or qc.get("exclude_modules"))
    if method == "fp8":
        act = "fp8" if qc.get("activation_scheme", "dynamic") in ("dynamic", "static") \
            else "bf16"
        block = _block(qc.get("weight_block_size"))
        return QuantSpec(method, "fp8", act, unquantized=(*skip, "lm_head")
                         if "lm_head" not in skip else skip,
                         scale="block" if block else "tensor", block=block)
    if method in ("awq", "awq_marlin", "gptq", "gptq_marlin", "marlin"):
        bits = int(qc.get("bits", qc.get("w_bit", 4)))
        group = int(qc.get("group_size", qc.get("q_group_size", 128)) or 0)
        if group < 0:  # GPTQ writes -1 for per-channel
            group = 0
        zp = method.startswith("awq") and bool(qc.get("zero_point", True))
        head = ("lm_head",) if not qc.get("lm_head", False) else ()
        if bits == 4:
            return QuantSpec(method, "int4", "bf16", group, zp,
                             tuple(dict.fromkeys(skip + head)))
        if bits == 8:
            return QuantSpec(method, "int8", "bf16", unquantized=tuple(dict.fromkeys(
                skip + head)))
        raise RidgelineError(f"config.json: field 'quantization_config' bits: got {bits!r}; "
                             "allowed: 4 or 8")
    if method == "mxfp4":
        return QuantSpec(method, "mxfp4", "bf16", 32, unquantized=skip or (
            "attention", "router", "lm_head"))
    if method == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        if not isinstance(groups, dict) or not groups:
            raise RidgelineError("config.json: field 'quantization_config' config_groups: "
                                 "allowed: a non-empty object (compressed-tensors)")
        first = next(iter(groups.values()))
        w = _ct_dtype(first.get("weights"), "weights")
        a = _ct_dtype(first.get("input_activations"), "input_activations") or "bf16"
        if a == "int4":
            a = "bf16"
        wargs = first.get("weights") or {}
        group = int(wargs.get("group_size") or 0)
        if w is None:
            return None
        strategy = str(wargs.get("strategy") or "tensor").lower()
        block = _block(wargs.get("block_structure")) if strategy == "block" else ()
        scale = ("block" if block else strategy if strategy in ("tensor", "channel")
                 else "") if w in ("fp8", "int8") else ""
        return QuantSpec(method, w, a if w != "int4" else "bf16", group, False, skip,
                         scale=scale, block=block)
    if method == "modelopt":
        algo = str(qc.get("quant_algo", "")).upper()
        mods = qc.get("exclude_modules")
        skip = _unquantized(mods)
        if algo == "FP8":
            return QuantSpec(method, "fp8", "fp8", unquantized=skip, scale="tensor")
        if algo == "NVFP4":
            return QuantSpec(method, "fp4", "fp4", 16, unquantized=skip)
        raise RidgelineError(f"config.json: field 'quantization_config' quant_algo: got "
                             f"{algo!r}; allowed: FP8, NVFP4")
    if method == "bitsandbytes":
        four = bool(qc.get("load_in_4bit") or qc.get("_load_in_4bit"))
        return QuantSpec(method, "int4" if four else "int8", "bf16", 64 if four else 0,
                         unquantized=(*skip, "lm_head"))
    raise RidgelineError(f"config.json: field 'quantization_config' quant_method: got "
                         f"{method!r}; allowed: fp8, compressed-tensors, awq, gptq, mxfp4, "
                         "modelopt, bitsandbytes")


def matches(name: str, patterns: list[str]) -> bool:
    """Whether a module name matches any glob of a not-converted list (for tools)."""
    return any(fnmatch.fnmatch(name, p) for p in patterns)
