"""GEMM and MoE-layer costs fitted on NVIDIA's measured kernel tables, per GPU, engine, dtype.

specs/data/kernels_measured_gemm_moe.json holds constants fitted by
benchmarks/accuracy/fit_aic_kernels.py on NVIDIA AIConfigurator's measured kernel latencies
(vLLM, SGLang and TensorRT-LLM kernels on H100, H200, B200, GB200, A100 and L40S). Both forms
keep ridgeline's operator rule, time = max(compute row . x, memory row . x), rows affine in
the work variables:

- GEMM [m,k]x[k,n], m the token rows: compute 2(k + k0)mn/(C e_c) + 2kZ/(C e_c) + s W,
  memory activation bytes/(beta e_b) + W + r 2kmn/(C e_c) + t0, with W = k(n + n_p) b_w/
  (beta e_b) the weight stream (a narrow GEMM at small m has too few column tiles to keep
  every SM streaming: it reads as if n_p columns wider), r the fraction of the math the
  weight stream leaves exposed, s the fraction of the weight stream the math leaves exposed
  (both in [0, 1]); both rows plus the activation-quantization kernel of fp8/fp4 GEMMs
  (m(k q_e + q_r) + q_0: it runs before the matmul, so it adds to whichever row wins).
  C is the datasheet peak of the dtype's math (fp8 for fp8 and block-fp8, fp4 for NVFP4,
  bf16 for weight-only int4/int8). Two terms a fit may carry are what its table measured
  and serving does not pay, and are not read here: host dispatch (`dispatch_us`,
  `dispatch_wide_us`, `dispatch_pad_us`: vLLM's block-fp8 tables were timed without CUDA
  graphs) and L2 reuse between the timed repeats (`l2_share`, `l2_resident_mb`: L40S; a
  model's layers evict each other's weights between steps).
- MoE experts (each of gate_up and down, per layer): compute 2 in' out' (1 + k0/in)
  (k n + P u)/(C e_c), in'/out' the dims rounded up to the kernel's tile, k0 the epilogue in
  reduction steps (as a GEMM's) and P padded rows per touched expert;
  memory (u in out b_w + a k n (in + out) b_a)/(beta e_b) + (t0 + t_u u)/2, u the expected
  touched experts, a the routed activations' traffic (gather, intermediate, scatter) per
  pair of 16-bit rows, t0 the layer's floor (routing bookkeeping, the activation kernel) and
  t_u a per-expert cost. The layer's activation op is inside the fit (priced zero here).
  Where an engine serves different models on different MoE kernel families (SGLang on
  Blackwell: FlashInfer's TensorRT-LLM MoE or its Triton fused MoE, by model type), each
  family has its own fit (`<dtype>@<backend>` next to the default `<dtype>`); the model's
  type picks one as the engine does (`default_moe_backend`), `--moe-backend` overrides it.

Efficiencies are fitted in (0, 1] and the other constants >= 0, so a time never falls
below the roofline max(F/C, D/beta) of the same work.

>>> mk = load_measured("h200")
>>> mk.system, mk.engine
('h200_sxm', 'vllm')
>>> p, note = mk.moe_fit("fp8_block")
>>> 0.0 < p["bandwidth_efficiency"] <= 1.0
True
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError

ENGINES = ("vllm", "sglang", "trtllm")
DEFAULT_ENGINE = "vllm"
# When a (GPU, engine) table lacks a dtype: the same GPU's other engines, then the nearest
# dtype whose kernels behave alike (per-tensor and block-scaled fp8 share their math).
_DTYPE_NEAR = {"fp8": ("fp8_block",), "fp8_block": ("fp8",), "w4a16": ("w4a16_mxfp4",),
               "w4a16_mxfp4": ("w4a16",), "w4a8_mxfp4": ("fp4",), "fp4": ("w4a8_mxfp4",)}
# GEMM kernel dtypes a Precision can name, from its gemm compute dtype when it names none.
_FROM_COMPUTE = {"bf16": "bf16", "fp16": "bf16", "fp32": "bf16", "fp8": "fp8", "int8": "fp8",
                 "fp4": "fp4", "mxfp4": "fp4"}
# MoE runner backends a measured table can name (its fits are keyed `<dtype>@<backend>` where
# the engine's default backend for other models, keyed `<dtype>`, is a different one).
MOE_BACKENDS = ("auto", "triton", "flashinfer_trtllm", "marlin")
# SGLang's `--moe-runner-backend auto` on Blackwell (SM100: B200, GB200) selects FlashInfer's
# TensorRT-LLM MoE (with no all-to-all backend) for these model types at these expert dtypes,
# and for every NVFP4/MXFP4 checkpoint; other models run its Triton fused MoE.
_SGLANG_SM100_TRTLLM = {"deepseek_v3": ("bf16", "fp8", "fp8_block"),
                        "kimi_k2": ("bf16", "fp8", "fp8_block"),
                        "qwen3_moe": ("bf16", "fp8", "fp8_block"),
                        "qwen3_vl_moe": ("bf16", "fp8", "fp8_block"),
                        "qwen3_5_moe": ("bf16", "fp8", "fp8_block"),
                        "glm_moe_dsa": ("bf16", "fp8", "fp8_block"),
                        "nemotron_h": ("bf16",),
                        "llama4": ("fp8", "fp8_block"), "llama4_text": ("fp8", "fp8_block")}
_SM100_SYSTEMS = ("b200_sxm", "gb200")
_FP4_EXPERTS = ("fp4", "w4a8_mxfp4", "w4a16_mxfp4")


def check_moe_backend(moe_backend: str | None) -> str:
    """`moe_backend` checked ("auto" for None), or an error naming the allowed values."""
    backend = moe_backend or "auto"
    if backend not in MOE_BACKENDS:
        raise RidgelineError(f"moe-backend: got {backend!r}; allowed: {', '.join(MOE_BACKENDS)}")
    return backend


def default_moe_backend(engine: str, system: str, model_type: str, dtype: str) -> str:
    """The MoE runner backend `engine` picks by default for a `model_type` checkpoint whose
    experts run `dtype` kernels on table system `system` ("": the engine's tables hold one
    kernel family per dtype there, or the fastest of its backends per shape)."""
    if engine != "sglang" or system not in _SM100_SYSTEMS:
        return ""
    if dtype in _FP4_EXPERTS or dtype in _SGLANG_SM100_TRTLLM.get(model_type, ()):
        return "flashinfer_trtllm"
    return "triton"


@lru_cache(maxsize=1)
def measured_catalog() -> dict[str, Any]:
    """specs/data/kernels_measured_gemm_moe.json, parsed once."""
    path = resources.files("ridgeline.specs").joinpath("data", "kernels_measured_gemm_moe.json")
    return json.loads(path.read_text())


def gemm_kernel_dtype(precision: Any) -> str:
    """The measured-table dtype of the checkpoint's quantized GEMMs: the Precision's own
    `gemm_kernel_dtype` where it has one, else its GEMM compute dtype (bf16, fp8, fp4; a
    weight-only checkpoint on 16-bit activations runs the bf16 fit on its own weight bytes)."""
    named = getattr(precision, "gemm_kernel_dtype", None)
    if named:
        return str(named)
    return _FROM_COMPUTE.get(precision.gemm_compute_dtype, "bf16")


def expert_kernel_dtype(precision: Any) -> str:
    """The MoE table dtype of the expert layers (MXFP4 experts: gpt-oss's own kernels)."""
    if precision.module_dtype("experts") == "mxfp4":
        return "w4a16_mxfp4" if precision.gemm_compute_dtype in ("bf16", "fp16", "fp32") \
            else "w4a8_mxfp4"
    return gemm_kernel_dtype(precision)


@dataclass(frozen=True)
class MeasuredKernels:
    """The measured-table fits of one GPU, read for one engine (others fill its gaps)."""

    hardware: str
    system: str  # the table's system folder
    engine: str
    # The MoE runner backend ("auto": the engine's default for `model_type`, the model's
    # Hugging Face model_type; else one of MOE_BACKENDS).
    moe_backend: str = "auto"
    model_type: str = ""

    def _find(self, section: str, dtype: str, backend: str = ""
              ) -> tuple[dict[str, Any], str] | None:
        cat = measured_catalog()[section].get(self.system, {})
        order = [self.engine] + [e for e in ENGINES if e != self.engine]
        # Last stand-in: the 16-bit fit on the dtype's own weight bytes.
        for dt in dict.fromkeys((dtype, *_DTYPE_NEAR.get(dtype, ()), "bf16")):
            for eng in order:
                by = cat.get(eng, {})
                fit = by.get(f"{dt}@{backend}") if backend and eng == self.engine else None
                fit = fit if fit is not None else by.get(dt)
                if fit is not None:
                    note = "" if (eng, dt) == (self.engine, dtype) else \
                        f"{self.engine} {dtype} not in the tables: {eng} {dt}'s fit"
                    ran = fit["_fit"].get("backend", "")
                    if backend and eng == self.engine and ran and ran != backend:
                        note = "; ".join(filter(None, (note, f"no {backend} rows of {dt}: "
                                                       f"the {ran} fit")))
                    return fit, note
        return None

    def gemm_fit(self, dtype: str) -> tuple[dict[str, Any], str] | None:
        """(constants, note on any stand-in) of `dtype` GEMMs, or None."""
        return self._find("gemm", dtype)

    def moe_fit(self, dtype: str) -> tuple[dict[str, Any], str] | None:
        """(constants, note on any stand-in) of `dtype` MoE layers on this engine's MoE
        runner backend (the one named, else its default for the model type), or None."""
        return self._find("moe", dtype, self.moe_backend_for(dtype))

    def moe_backend_for(self, dtype: str) -> str:
        """The MoE runner backend whose fit times `dtype` experts ("": the table's only one)."""
        if self.moe_backend != "auto":
            return self.moe_backend
        return default_moe_backend(self.engine, self.system, self.model_type, dtype)

    def for_model(self, model_type: str, moe_backend: str | None = None) -> MeasuredKernels:
        """These fits read for one model (its MoE runner backend by `model_type`) and an
        optional backend override (None or "auto": the engine's default)."""
        return replace(self, moe_backend=check_moe_backend(moe_backend),
                       model_type=model_type)


def kernel_engine_for(engine: str) -> str:
    """Whose kernel tables an engine preset runs on: its own (vllm, sglang, trtllm), else
    (an engine costs file) vLLM's."""
    return engine if engine in ENGINES else DEFAULT_ENGINE


def load_measured(hardware: str, engine: str = DEFAULT_ENGINE) -> MeasuredKernels | None:
    """The measured-kernel fits of catalog GPU `hardware` (None: no tables for it)."""
    if engine not in ENGINES:
        raise RidgelineError(f"engine: got {engine!r}; allowed: {', '.join(ENGINES)}")
    system = measured_catalog()["hardware"].get(hardware)
    return None if system is None else MeasuredKernels(hardware, system, engine)


Fit = tuple[dict[str, Any], str, str]  # (constants, note on any stand-in, dtype asked for)


def measured_choice(prof: Any, precision: Any) -> tuple[dict[str, Fit | None], Fit | None]:
    """Which measured fits time this precision's GEMMs ({"gemm": ..., "gemm16": ...}: the
    quantized and the 16-bit-kept modules) and its expert layers, on `prof`'s GPU.

    16-bit dense GEMMs on a GPU with its own fitted Vidur profile (H100 SXM, A100 80GB) keep
    that fit (the one validated on real vLLM runs); every other GEMM and every MoE layer
    uses the measured tables where the GPU has them."""
    mk: MeasuredKernels | None = getattr(prof, "measured", None)
    if mk is None:
        return {}, None
    out: dict[str, Fit | None] = {}
    for kind, dtype in (("gemm", gemm_kernel_dtype(precision)), ("gemm16", "bf16")):
        found = None if dtype == "bf16" and not prof.derived else mk.gemm_fit(dtype)
        out[kind] = None if found is None else (found[0], found[1], dtype)
    xdt = expert_kernel_dtype(precision)
    if dict(precision.module_weights).get("experts") in ("bf16", "fp16", "fp32"):
        xdt = "bf16"
    found = mk.moe_fit(xdt)
    return out, None if found is None else (found[0], found[1], xdt)


def measured_gemm_rows(fit: Fit, f: np.ndarray, d: np.ndarray, k: float, n: float,
                       layers: float, drv: int, hw: Any) -> tuple[np.ndarray, np.ndarray]:
    """Compute and memory rows (seconds per unit of each work variable) of a dense GEMM
    [m,k]x[k,n] (f: its FLOPs, 2kn per row m, on each token variable)."""
    p = fit[0]
    ce = hw.peak(p["_fit"]["peak"]) * p["compute_efficiency"]
    be = hw.memory_bandwidth_bytes_s * p["bandwidth_efficiency"]
    # The weights (on the driver) stream as if n had weight_pad_n more columns.
    weights_s = d[drv] * (1.0 + p.get("weight_pad_n", 0.0) / n) / be
    comp = f * (1.0 + p["epilogue_k"] / k) / ce
    comp[drv] += 2.0 * k * p["fill_elements"] * layers / ce \
        + p.get("exposed_weights", 0.0) * weights_s
    mem = d / be
    mem[drv] = weights_s + p["floor_us"] * 1e-6 * layers
    mem += p.get("exposed_compute", 0.0) * f / ce
    # fp8/fp4 activations: the quantization kernel before the GEMM adds to either row.
    quant = f / (2.0 * k * n) * (k * p.get("quant_ps_per_element", 0.0) * 1e-12
                                 + p.get("quant_ns_per_row", 0.0) * 1e-9)
    quant[drv] += p.get("quant_floor_us", 0.0) * 1e-6 * layers
    return comp + quant, mem + quant


def measured_expert_rows(fit: Fit, f: np.ndarray, d: np.ndarray, in_dim: float,
                         out_dim: float, layers: float, hw: Any, var: dict[str, int],
                         held_experts: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Compute and memory rows of one of a MoE layer's two grouped GEMMs (f: FLOPs per
    token, d: activation bytes per token on n and weight bytes per touched expert on u;
    `held_experts`: the routed experts this GPU holds, E/ep, touched or not)."""
    p = fit[0]
    ce = hw.peak(p["_fit"]["peak"]) * p["compute_efficiency"]
    tile = p["tile"]
    padded = math.ceil(in_dim / tile) * tile * math.ceil(out_dim / tile) * tile
    # Each output element's epilogue costs epilogue_k more reduction steps: narrow-k
    # experts (the down GEMM of a TP-split layer) run further from the peak.
    epi = 1.0 + p.get("epilogue_k", 0.0) / in_dim
    comp = f * (padded * epi / (in_dim * out_dim)) / ce
    comp[var["u"]] += 2.0 * padded * epi * p["pad_rows"] * layers / ce
    mem = d / (hw.memory_bandwidth_bytes_s * p["bandwidth_efficiency"])
    mem[var["n"]] *= p["activation_scale"]
    mem[var["any"]] += 0.5e-6 * p["floor_us"] * layers
    mem[var["u"]] += 0.5e-6 * p["expert_us"] * layers
    # A fit with a cost per held expert (routing tables, per-expert scales): it adds to the
    # layer outside the max, so to both rows; half on each of the layer's two GEMMs.
    held_s = 0.5e-6 * p.get("local_expert_us", 0.0) * held_experts * layers
    comp[var["any"]] += held_s
    mem[var["any"]] += held_s
    return comp, mem


def fit_line(fit: dict[str, Any]) -> str:
    """One line of a fit's provenance: table, rows, residual and cross-validated error."""
    f = fit["_fit"]
    out = (f"{f['rows']} rows of {f['files'][0]}, {f['date']}; residual median "
           f"{100 * f['residual']['median_ape']:.1f}% APE")
    if f.get("cv"):
        out += f", {f['cv']['kind']} CV median {100 * f['cv']['median_ape']:.1f}%"
    return out


def _left_out(p: dict[str, Any]) -> str:
    """What the fit's table measured that serving does not pay, fitted apart and not charged."""
    out = ""
    if p.get("dispatch_us"):
        out += (f"; left out: the table's host dispatch ({p['dispatch_us']:.3g} us a call or "
                "more, timed without CUDA graphs)")
    if p.get("l2_share"):
        out += (f"{'; left out' if not out else ' and'}: L2 reuse between the table's repeats "
                f"(up to {p['l2_resident_mb']:.3g} MB)")
    return out


def measured_assumptions(prof: Any, precision: Any) -> list[str]:
    """What the measured-table fits contribute to an estimate, with their provenance."""
    mk: MeasuredKernels | None = getattr(prof, "measured", None)
    if mk is None:
        return [f"no measured kernel tables for {prof.hardware}: GEMMs and MoE experts by the "
                "fitted Vidur curve above (" + prof.rule + ")"]
    gemms, moe = measured_choice(prof, precision)
    out = []
    src = (f"NVIDIA AIConfigurator's measured {mk.engine} kernels on {mk.system} "
           "(specs/data/kernels_measured_gemm_moe.json)")
    for kind, fit in gemms.items():
        if fit is None:
            if kind == "gemm" or gemm_kernel_dtype(precision) != "bf16":
                out.append(f"{'16-bit' if kind == 'gemm16' else 'dense'} GEMMs: the fitted "
                           "Vidur curve above (kept for 16-bit GEMMs on a GPU with its own "
                           "profile: validated on real vLLM runs)")
            continue
        p, note, dt = fit
        label = "16-bit-kept GEMMs" if kind == "gemm16" else f"{dt} GEMMs"
        out.append(
            f"{label}: {src}: efficiency {p['compute_efficiency']:.3g} of the "
            f"{p['_fit']['peak']} peak x m/(m + {p['fill_elements']:.3g}/n) x k/(k + "
            f"{p['epilogue_k']:.3g}), bandwidth {p['bandwidth_efficiency']:.3g} (weights "
            f"as if n + {p.get('weight_pad_n', 0.0):.3g}), exposed math "
            f"{p.get('exposed_compute', 0.0):.3g} / weight stream "
            f"{p.get('exposed_weights', 0.0):.3g}, floor "
            f"{p['floor_us']:.3g} us" + (f", activation quantization {p['quant_floor_us']:.3g}"
                                         f" us + {p['quant_ps_per_element']:.3g} ps/element"
                                         if p.get("quant_floor_us") else "")
            + _left_out(p) + f" ({fit_line(p)}{'; ' + note if note else ''})")
        if kind == "gemm" and gemm_kernel_dtype(precision) == "bf16":
            break  # the 16-bit-kept modules run the same kernels
    if moe is not None:
        p, note, dt = moe
        # The runner whose rows the fit is on; why that one (asked, the engine's default),
        # or, where the tables lack the one asked for, the note says so.
        ran, asked = p["_fit"].get("backend", ""), mk.moe_backend_for(dt)
        why = "--moe-backend" if mk.moe_backend != "auto" else \
            f"{mk.engine}'s default for {mk.model_type or 'the model'} on {mk.system}"
        out.append(
            f"MoE experts ({dt}, whole layer): {src}"
            + (f", {ran} runner" if ran else "") + (f" ({why})" if ran and ran == asked else "")
            + ": per layer max(compute at "
            f"{p['compute_efficiency']:.3g} of the {p['_fit']['peak']} peak on tiles of "
            f"{p['tile']:g} x k/(k + {p.get('epilogue_k', 0.0):.3g}) + {p['pad_rows']:.3g} "
            "padded rows per touched expert, expert "
            f"weights of E[U] touched experts at {p['bandwidth_efficiency']:.3g} of the "
            f"bandwidth + {p['activation_scale']:.3g}x the routed activations) + floor "
            f"{p['floor_us']:.3g} us + {p['expert_us']:.3g} us per touched expert "
            + (f"+ {p['local_expert_us']:.3g} us per held expert "
               if p.get("local_expert_us") else "") +
            f"({fit_line(p)}{'; ' + note if note else ''})")
    return out


__all__ = ["DEFAULT_ENGINE", "ENGINES", "MOE_BACKENDS", "MeasuredKernels", "check_moe_backend",
           "default_moe_backend",
           "expert_kernel_dtype", "fit_line",
           "gemm_kernel_dtype", "kernel_engine_for", "load_measured", "measured_assumptions",
           "measured_catalog", "measured_choice",
           "measured_expert_rows", "measured_gemm_rows"]
