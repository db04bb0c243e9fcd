"""The fitted kernel model: what each operator's kernels really take on a catalog GPU.

The plain roofline times an operator as max(F / (C e), D / (beta e)) with one efficiency for
every kernel. Measured kernels (Vidur's profiles: specs/data/kernels.json, fitted by
benchmarks/accuracy/fit_kernel_constants.py) are slower where they are small and differ by
kind, so a
catalog GPU's operators are timed with fitted curves instead. Each is still the maximum of two
rows that are affine in the work variables, with intercepts on the operator's indicator, the
form `ridgeline.perf.fast_step` and the C core evaluate:

- GEMM [m,k]x[k,n]: max(2((k + k0)mn + kZ)/(C e_c), D/(beta e_b) + t0). The compute intercept
  2kZ/(C e_c) is the saturating efficiency e_c m/(m + Z/n) (Z output elements fill the GPU);
  k0 prices each output element's epilogue (short-k GEMMs run further below peak); t0 is
  the floor of a small kernel. MoE experts pay the fill, plus half a BLOCK_SIZE_M tile of padded
  rows (vLLM's fused_moe pads each expert's tokens to a tile), once per touched expert (E[U]).
- elementwise: t0 + D/(beta e) per class (norm, rope, act, add, embedding).
- prefill attention: max((pairs + q_w pc + k_w pt) flops_per_pair/(C e), t0 + s (pc + pt)).
- decode attention: t0 + (dc + q_t dq) kv_bytes_per_token/(beta e).
- collectives: alpha + f(p) bytes/beta_bus per topology (`collective`).

GPUs with NVIDIA's measured kernel tables (AIConfigurator's) time attention, MLA and
collectives from those instead, per serving engine (`load_profile(name, engine)`,
perf/measured_attention.py, specs/data/kernels_measured_attention_comm.json).

Efficiencies are fractions of the GPU's own datasheet peaks, so a GPU without profiles takes
a profiled GPU's constants on its own peaks (the rule named in kernels.json "hardware"). GEMMs
at a dtype whose peak is r times the 16-bit one keep the 16-bit fit's non-math time
(`dtype_compute_efficiency`).

>>> p = load_profile("h100-sxm")
>>> 0.5 < p.gemm["compute_efficiency"] < 1.0, p.kernels   # a fitted value: kernels.json
(True, 'h100')
>>> round(dtype_compute_efficiency(0.7, 2.0), 3)
0.538
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.perf import measured_attention as attention_tables
from ridgeline.perf.measured_kernels import (
    DEFAULT_ENGINE,
    MeasuredKernels,
    kernel_engine_for,
    load_measured,
    measured_assumptions,
    measured_choice,
    measured_expert_rows,
    measured_gemm_rows,
)
from ridgeline.perf.ops import ATTENTION, GEMM, GEMM16, VAR, OpTable
from ridgeline.perf.window import EXT_VAR
from ridgeline.specs.hardware import HardwareSpec, hardware_catalog
from ridgeline.specs.precision import Precision

# vLLM fused_moe pads every expert's rows to BLOCK_SIZE_M (64 in its default large-batch
# configs): on average half a tile of wasted rows per touched expert.
MOE_PAD_ROWS = 32.0
# The catalog's default compute efficiency: a derived GPU whose datasheet file says otherwise
# (MI300X: 0.6, "measured BF16 GEMM utilization is lower than on H100") keeps that ratio.
CATALOG_DEFAULT_COMPUTE_EFFICIENCY = 0.7
# Vector-op classes by operator name (the rest of the elementwise ops are "add"-like).
_VECTOR_CLASS = {"attn_norm": "norm", "mlp_norm": "norm", "final_norm": "norm",
                 "qk_norm": "norm", "qkv_a_norm": "norm", "kv_a_norm": "norm",
                 "rope": "rope", "act_mul": "act", "experts_act": "act", "shared_act": "act",
                 "embedding": "embedding"}
_EXPERTS = ("experts_gate_up", "experts_down")


@lru_cache(maxsize=1)
def kernel_catalog() -> dict[str, Any]:
    """specs/data/kernels.json, parsed once."""
    path = resources.files("ridgeline.specs").joinpath("data", "kernels.json")
    return json.loads(path.read_text())


def dtype_compute_efficiency(e16: float, peak_ratio: float) -> float:
    """GEMM efficiency at a dtype whose peak is `peak_ratio` x the 16-bit peak (Amdahl): the
    16-bit time's non-math share (1/e16 - 1 of the math time) stays when the math speeds up,
    e_x = (1/r) / (1/e16 - 1 + 1/r). Not fitted: the profiles are fp16 only."""
    inv = 1.0 / peak_ratio
    return inv / (1.0 / e16 - 1.0 + inv)


@dataclass(frozen=True)
class KernelProfile:
    """The fitted constants that time one GPU's kernels (see the module docstring)."""

    hardware: str
    kernels: str  # the profiled part whose constants apply
    topology: str  # the measured interconnect topology of its collectives
    rule: str  # "fitted (...)" or "derived: ..." (how the constants reach this GPU)
    gemm: dict[str, Any]
    vector: dict[str, dict[str, Any]]
    attention_prefill: dict[str, Any]
    attention_decode: dict[str, Any]
    collectives: dict[str, Any]  # this topology's fits
    topology_gpus: int  # 0: the row of the group's GPU count; else always this row
    profiled_link_bytes_s: float  # the datasheet link the topology's bandwidth was measured on
    profiled_peak_flops: float  # 16-bit peak of the part the attention was fitted on
    # Fitted on the real vLLM runs (kernels.json "vllm"): the share of the profiled kernel
    # floors that remains in vLLM's CUDA-graph steps, and the NVLink all-reduce latency as a
    # share of NCCL's (vLLM's custom all-reduce).
    floor_scale: float = 1.0
    allreduce_latency_scale: float = 1.0
    # vLLM's decode attention as a share of the bandwidth efficiency carried over from Vidur's
    # A100 kernel; explored on the same runs (fit_vllm_kernel_scales.py --attention-grid), it
    # ships only when fitted: the catalog has none (the fit kept 1, docs/BENCHMARKS.md).
    attention_decode_scale: float = 1.0
    # vLLM's grouped-query decode attention (more query heads than KV heads per GPU) as a
    # share of the efficiency carried from A100, on the kernel profiles it was fitted on
    # (kernels.json "vllm" names them: H100's, which Hopper and the parts without data take);
    # the others (A100's own FlashAttention-2 measurement, A40/L40S) keep 1.
    attention_decode_grouped_scale: float = 1.0
    # GEMM fit of the part attention was profiled on (A100): attention efficiencies carry to
    # another GPU relative to that GPU's own GEMM efficiencies.
    attention_gemm_ref: dict[str, Any] | None = None
    # Fits on NVIDIA's measured kernel tables for this GPU and engine (perf/measured_kernels.py):
    # GEMMs and MoE layers use them where they exist; None: no tables for this GPU.
    measured: MeasuredKernels | None = None
    # The serving engine whose measured kernels time attention and collectives, and those
    # constants (perf/measured_attention.py; None: the GPU has no measured tables).
    engine: str = "vllm"
    measured_attention: Any = None
    # vLLM's grouped-query decode attention bandwidth in its serving steps as a share of the
    # measured kernel's (kernels.json "vllm" measured_decode_grouped_scale, fitted on the real
    # vLLM runs with leave-one-model-out CV; 1 where not fitted, for MHA and for other
    # engines). The kernel table prices these shapes within a few percent; the scale stands
    # for a serving cost that grows with context (long-output runs need it, short ones not).
    measured_decode_scale: float = 1.0
    # vLLM's per-step cost per decode context token, whatever the model (kernels.json "vllm"
    # decode_context_token_ns; 0 where not fitted and for other engines): host-side work
    # that grows with the tokens the step's sequences hold, outside the attention kernel.
    decode_context_token_s: float = 0.0

    @property
    def derived(self) -> bool:
        return not self.rule.startswith("fitted")

    def collective(self, kind: str, p: int, link_bytes_s: float,
                   hw: HardwareSpec | None = None) -> tuple[float, float]:
        """(latency s, bus bandwidth bytes/s) of `kind` over p GPUs on a GPU whose datasheet
        link is `link_bytes_s` (the topology's bus efficiency x that link). With `hw` and
        measured tables: the engine's measured collective, across nodes beyond the NVLink
        domain (`perf/measured_attention.py` domain_collective)."""
        if self.measured_attention is not None and hw is not None:
            got = attention_tables.domain_collective(self.measured_attention, kind, p, hw)
            if got is not None:
                return got
        key = "send_recv" if kind == "send_recv" and "send_recv" in self.collectives \
            and not self.topology_gpus else "all_reduce"
        rows = self.collectives[key]
        if key == "send_recv":
            row = rows["2"]
        else:
            measured = sorted(int(k) for k in rows if k.isdigit())
            want = self.topology_gpus or p
            # Beyond the measured group sizes: the nearest measured one below (or above).
            pick = max((q for q in measured if q <= want), default=measured[0])
            row = rows[str(pick)]
        eta = row["bus_bandwidth_bytes_s"] / self.profiled_link_bytes_s
        lat = row["latency_us"] * 1e-6
        if key == "all_reduce" and not self.topology_gpus:  # NVLink mesh: custom all-reduce
            lat *= self.allreduce_latency_scale
        return lat, eta * link_bytes_s


def load_profile(name: str, engine: str = DEFAULT_ENGINE) -> KernelProfile:
    """The kernel profile a `kernel_profile` name selects (catalog GPU names; error if none);
    `engine` picks which engine's measured GEMM/MoE kernel tables apply."""
    cat = kernel_catalog()
    hw = cat["hardware"].get(name)
    if hw is None:
        if name not in hardware_catalog():
            raise RidgelineError(f"kernel_profile: got {name!r}; allowed: one of "
                                 f"{', '.join(sorted(cat['hardware']))} or a catalog GPU name")
        hw = cat["default_hardware"]
    prof = cat["profiles"][hw["kernels"]]
    attn = cat["attention"]
    vllm = cat.get("vllm", {})
    ref = cat["profiles"][attn.get("profiled_on", "a100")]["gemm"]
    grouped = vllm.get("attention_decode_grouped_scale", {})
    return KernelProfile(
        hardware=name, kernels=hw["kernels"], topology=hw["topology"], rule=hw["rule"],
        gemm=prof["gemm"], vector=prof["vector"],
        attention_prefill=attn["attention_prefill"], attention_decode=attn["attention_decode"],
        collectives=cat["collectives"][hw["topology"]],
        topology_gpus=int(hw.get("topology_gpus", 0)),
        profiled_link_bytes_s=float(hw["profiled_link_bytes_s"]),
        profiled_peak_flops=float(attn["profiled_peak_flops"]),
        attention_gemm_ref=ref,
        floor_scale=float(vllm.get("floor_scale", {}).get("value", 1.0)),
        allreduce_latency_scale=float(
            vllm.get("allreduce_latency_scale", {}).get("value", 1.0)),
        attention_decode_scale=float(
            vllm.get("attention_decode_scale", {}).get("value", 1.0)),
        attention_decode_grouped_scale=float(grouped.get("value", 1.0))
        if hw["kernels"] in grouped.get("kernel_profiles", ()) else 1.0,
        measured=load_measured(name, engine),
        engine=engine, measured_attention=attention_tables.measured_for(name, engine),
        measured_decode_scale=float(
            vllm.get("measured_decode_grouped_scale", {}).get("value", 1.0))
        if engine == "vllm" else 1.0,
        decode_context_token_s=1e-9 * float(
            vllm.get("decode_context_token_ns", {}).get("value", 0.0))
        if engine == "vllm" else 0.0)


def profile_for(hardware: HardwareSpec, engine: str = DEFAULT_ENGINE) -> KernelProfile | None:
    """The fitted kernel model of `hardware`, or None (plain roofline). `engine` names the
    serving engine whose measured kernel tables time the steps (vllm, sglang, trtllm; any
    other engine, e.g. an engine-costs file, runs on vLLM's)."""
    if not hardware.kernel_profile:
        return None
    return load_profile(hardware.kernel_profile, kernel_engine_for(engine))


def gemm_efficiency_16(prof: KernelProfile, hw: HardwareSpec) -> float:
    """The 16-bit GEMM efficiency on `hw`: the fit, times the GPU file's compute efficiency
    over the catalog default when the constants are derived from another part."""
    e = float(prof.gemm["compute_efficiency"])
    if prof.derived:
        e *= hw.compute_efficiency / CATALOG_DEFAULT_COMPUTE_EFFICIENCY
    return min(e, 1.0)


def attention_efficiencies(prof: KernelProfile, hw: HardwareSpec) -> tuple[float, float]:
    """(prefill compute, decode bandwidth) efficiency of attention on `hw`. Attention was
    profiled on A100 only; what carries to another GPU is its ratio to the same GPU's GEMM fit
    (prefill: to the 16-bit GEMM compute efficiency; decode, a stream over the KV: to the GEMV
    bandwidth efficiency)."""
    pre, dec = prof.attention_prefill, prof.attention_decode
    ref = prof.attention_gemm_ref or prof.gemm
    e_pre = pre["compute_efficiency"] * gemm_efficiency_16(prof, hw) / ref["compute_efficiency"]
    e_dec = dec["bandwidth_efficiency"] * prof.gemm["bandwidth_efficiency"] \
        / ref["bandwidth_efficiency"] * prof.attention_decode_scale
    return min(e_pre, 1.0), min(e_dec, 1.0)


def time_rows(table: OpTable, hw: HardwareSpec, precision: Precision, prof: KernelProfile
              ) -> tuple[np.ndarray, np.ndarray]:
    """Seconds per unit of each work variable (ops x WORK_VARS): the compute-side and the
    memory/latency-side rows whose maximum is each operator's time."""
    # Windowed models append work variables (perf/window.py: pairs_w, pc_w, dc_w); their
    # attention kernels cost as the full layers' do, on those variables.
    nv = table.flops.shape[1]
    var = dict(VAR)
    if nv > len(VAR):
        var = dict(EXT_VAR)
    comp = np.zeros((len(table.names), nv))
    mem = np.zeros((len(table.names), nv))
    bw = hw.memory_bandwidth_bytes_s
    c16 = hw.peak("bf16")
    c_q = hw.peak(precision.gemm_compute_dtype)
    e_16 = gemm_efficiency_16(prof, hw)
    c_attn = hw.peak(precision.attention_compute_dtype)
    c_vec = hw.peak_flops.get("fp32", c_attn) * hw.compute_efficiency
    g, pre, dec = prof.gemm, prof.attention_prefill, prof.attention_decode
    fs = prof.floor_scale * 1e-6  # fitted floors are in microseconds
    e_pre, e_dec = attention_efficiencies(prof, hw)
    gemm_fits, moe_fit = measured_choice(prof, precision)
    is_mla = "kv_b_proj" in table.names  # MLA's own attention kernels (perf/ops.py)
    for j, (name, kind) in enumerate(zip(table.names, table.kinds, strict=True)):
        f, d, lay = table.flops[j], table.bytes[j], table.layers[j]
        drv = var[table.drivers[j]]
        if kind == ATTENTION and prof.measured_attention is not None:
            rows = attention_tables.attention_rows(
                prof.measured_attention, name, is_mla, f, d, lay, drv, var, hw,
                precision.kv_bytes, prof.floor_scale,
                prof.measured_decode_scale if table.query_heads_per_kv_head > 1.0 else 1.0,
                getattr(table, "kv_heads_per_gpu", 0.0),
                getattr(table, "query_heads_per_gpu", 0.0), table.rank_share)
            if rows is not None:
                comp[j], mem[j] = rows
                continue
        if name in _EXPERTS and kind in (GEMM, GEMM16) and moe_fit is not None:
            k, n = table.in_dims[j], table.out_dims[j]
            comp[j], mem[j] = measured_expert_rows(moe_fit, f, d, k, n, lay, hw, var,
                                                   table.experts_per_gpu)
        elif name == "experts_act" and moe_fit is not None:
            pass  # inside the measured layer's fit (its floor and activation traffic)
        elif kind in (GEMM, GEMM16) and gemm_fits.get(kind) is not None \
                and name not in _EXPERTS:
            comp[j], mem[j] = measured_gemm_rows(
                gemm_fits[kind], f, d, table.in_dims[j],  # type: ignore[arg-type]
                table.out_dims[j], lay, drv, hw)
        elif kind in (GEMM, GEMM16):
            # GEMM16: a module the checkpoint keeps 16-bit runs at the 16-bit peak.
            c_gemm = c_q if kind == GEMM else c16
            e_gemm = dtype_compute_efficiency(e_16, c_gemm / c16)
            k, n = table.in_dims[j], table.out_dims[j]
            # The epilogue of each output element costs epilogue_k more reduction steps.
            comp[j] = f * (1.0 + g["epilogue_k"] / k) / (c_gemm * e_gemm)
            fill = 2.0 * k * g["fill_elements"] * lay / (c_gemm * e_gemm)
            if name in _EXPERTS:  # grouped GEMM: fill and tile padding per touched expert
                comp[j, var["u"]] += fill + 2.0 * k * MOE_PAD_ROWS * n * lay / (c_gemm * e_gemm)
            else:
                comp[j, drv] += fill
            mem[j] = d / (bw * g["bandwidth_efficiency"])
            mem[j, drv] += g["floor_us"] * fs * lay
        elif kind == ATTENTION and name in ("attn_prefill", "attn_prefill_window"):
            w = "_w" if name.endswith("_window") else ""
            per_pair = f[var["pairs" + w]]  # FLOPs per causal pair, all layers
            e = e_pre
            comp[j, var["pairs" + w]] = per_pair / (c_attn * e)
            comp[j, var["pc" + w]] = pre["query_waste_per_cached_token"] * per_pair \
                / (c_attn * e)
            comp[j, var["pt"]] = pre["key_waste_per_new_token"] * per_pair / (c_attn * e)
            # One CTA's serial walk: fitted in seconds on A100, scaled by the 16-bit peaks.
            ser = (pre["serial_ns_per_token"] * 1e-3 * fs * lay * prof.profiled_peak_flops
                   / c16) * table.rank_share  # per attention rank's tokens
            mem[j, var["pc" + w]] = ser
            mem[j, var["pt"]] = ser
            mem[j, drv] += pre["floor_us"] * fs * lay
        elif kind == ATTENTION:  # decode
            comp[j] = f / (c_attn * e_pre)
            e = e_dec
            if table.query_heads_per_kv_head > 1.0:
                e = min(e * prof.attention_decode_grouped_scale, 1.0)
            mem[j] = d / (bw * e)
            # Per-sequence work (new KV write, Q in, O out, scheduling of the sequence's
            # blocks) as the fitted number of KV-token reads (dc's bytes per token).
            dc = var["dc_w"] if name.endswith("_window") else var["dc"]
            mem[j, var["dq"]] = dec["kv_tokens_per_sequence"] * d[dc] / (bw * e)
            mem[j, drv] += dec["floor_us"] * fs * lay
        else:
            v = prof.vector[_VECTOR_CLASS.get(name, "add")]
            comp[j] = f / c_vec
            mem[j] = d / (bw * v["bandwidth_efficiency"])
            mem[j, drv] += v["floor_us"] * fs * lay
    if prof.decode_context_token_s:
        # A cost per step per context token adds to the step, not inside the max: on both
        # rows of the (one) decode attention operator that reads dc, so the compiled step
        # and the C core, which take that operator's dc coefficients, carry it unchanged.
        for j, (name, kind) in enumerate(zip(table.names, table.kinds, strict=True)):
            if kind == ATTENTION and name == "attn_decode":
                comp[j, var["dc"]] += prof.decode_context_token_s
                mem[j, var["dc"]] += prof.decode_context_token_s
    return comp, mem


def fit_source(files: list[str]) -> str:
    """The data a fit came from, in words (the catalog keeps the file names)."""
    kinds = {f.split("/")[0] for f in files}
    if kinds == {"compute"}:
        return f"Vidur's profiled kernels of {len(files)} model(s)"
    if kinds == {"network"}:
        return "Vidur's profiled NCCL collectives"
    # A dataset named by its folder: its name without where it is stored.
    return "; ".join(f.removeprefix("shared/data/") for f in files)


def _fit_line(fit: dict[str, Any]) -> str:
    r, cv = fit["residual"], fit.get("cv")
    out = (f"{fit['rows']} rows of {fit_source(fit['files'])}, {fit['date']}; "
           f"residual median {100 * r['median_ape']:.1f}% APE")
    if cv:
        out += f", {cv['kind'].split(' ')[0]} CV median {100 * cv['median_ape']:.1f}%"
    return out


def assumptions(prof: KernelProfile, hw: HardwareSpec, precision: Precision,
                tp: int, is_mla: bool = False) -> list[str]:
    """What the fitted kernel model assumed, with each constant's provenance."""
    g, v, pre, dec = prof.gemm, prof.vector, prof.attention_prefill, prof.attention_decode
    e_pre, e_dec = attention_efficiencies(prof, hw)
    c16 = hw.peak("bf16")
    r = hw.peak(precision.gemm_compute_dtype) / c16
    e16 = gemm_efficiency_16(prof, hw)
    e_x = dtype_compute_efficiency(e16, r)
    out = [
        f"kernel model: {prof.rule}; constants from the kernel catalog (Vidur's measured "
        f"fp16 kernels, profile '{prof.kernels}')",
        f"GEMM: efficiency {e16:.4g} x m/(m + {g['fill_elements']:.4g}/n) "
        f"x k/(k + {g['epilogue_k']:g}) of the 16-bit peak, bandwidth "
        f"{g['bandwidth_efficiency']:g}, floor {g['floor_us']:g} us ({_fit_line(g['_fit'])})",
        "vector kernels (bandwidth efficiency, floor): " + "; ".join(
            f"{k} {x['bandwidth_efficiency']:g}, {x['floor_us']:g} us" for k, x in v.items())
        + f" ({_fit_line(v['norm']['_fit'])} per class)",
        f"prefill attention: {e_pre:.4g} of peak on pairs + "
        f"{pre['query_waste_per_cached_token']:g} per cached token + "
        f"{pre['key_waste_per_new_token']:g} per new token, at least {pre['floor_us']:g} us + "
        f"{pre['serial_ns_per_token']:g} ns/token per layer on A100 ({_fit_line(pre['_fit'])}; "
        "A100 only: other GPUs take its floors and its efficiencies relative to their own "
        "GEMM fit)",
        f"decode attention: {e_dec:.4g} of peak bandwidth on the KV read "
        f"+ {dec['kv_tokens_per_sequence']:g} token-reads per sequence + {dec['floor_us']:g} "
        f"us per layer ({_fit_line(dec['_fit'])})",
    ]
    vllm = kernel_catalog().get("vllm", {})
    if "floor_scale" in vllm:
        fit = vllm["floor_scale"]["_fit"]
        att = (f"decode attention at {prof.attention_decode_scale:g} x the carried bandwidth "
               "efficiency; " if "attention_decode_scale" in vllm else "")
        if "attention_decode_grouped_scale" in vllm:
            kp = ", ".join(vllm["attention_decode_grouped_scale"].get("kernel_profiles", []))
            att += (f"grouped-query decode attention at {prof.attention_decode_grouped_scale:g} "
                    f"x the carried bandwidth efficiency (fitted for the {kp} kernel profile; "
                    "1 on the others); ")
        if prof.measured_attention is not None:  # the measured custom all-reduce needs no scale
            ar = "all-reduce as measured; "
            if "measured_decode_grouped_scale" in vllm and prof.engine == "vllm":
                gfit = vllm["measured_decode_grouped_scale"]["_fit"]
                att = (f"grouped-query decode attention at {prof.measured_decode_scale:g} x "
                       "the measured kernel's bandwidth (a serving cost growing with context "
                       f"that the uniform-batch kernel table does not see; {_fit_line(gfit)} "
                       "ITL APE); ")
        else:
            ar = (f"NVLink all-reduce latency {prof.allreduce_latency_scale:g} x NCCL's "
                  "(custom all-reduce); ")
        if prof.decode_context_token_s:
            att += (f"{1e9 * prof.decode_context_token_s:g} ns per step per decode context "
                    "token; ")
        out.append(f"vLLM steps (CUDA graphs): {prof.floor_scale:g} x the fitted floors; "
                   f"{ar}{att}fitted on {fit_source(fit['files'])}, "
                   f"{fit['date']}: ITL "
                   f"residual median {100 * fit['residual']['median_ape']:.1f}%, "
                   f"leave-one-model-out CV median {100 * fit['cv']['median_ape']:.1f}%")
    if prof.derived and e16 != g["compute_efficiency"]:
        out.append(f"GEMM efficiency {g['compute_efficiency']:g} (fitted on {prof.kernels}) x "
                   f"{hw.compute_efficiency:g}/{CATALOG_DEFAULT_COMPUTE_EFFICIENCY:g} (this "
                   "GPU's catalog compute efficiency over the default), by rule")
    if precision.gemm_compute_dtype != "bf16" and \
            measured_choice(prof, precision)[0].get("gemm") is None:
        out.append(f"{precision.gemm_compute_dtype} GEMMs: efficiency {e_x:.3g} of their "
                   f"{r:.3g}x peak by rule (the 16-bit fit's non-math time stays; not fitted, "
                   "the profiles are fp16)")
    out += measured_assumptions(prof, precision)
    if prof.measured_attention is not None:
        # The measured tables replace the carried attention fit and the NCCL topology rows;
        # the GEMM/vector lines above still hold.
        out = [a for a in out if not a.startswith(("prefill attention:", "decode attention:"))]
        out += attention_tables.assumptions(prof.measured_attention, precision.kv_bytes,
                                            is_mla, tp)
    if tp > 1 and prof.measured_attention is None:
        lat, bw = prof.collective("all_reduce", tp, hw.interconnect_bandwidth_bytes_s)
        key = str(prof.topology_gpus or tp)
        rows = prof.collectives["all_reduce"]
        fit = rows.get(key, next(iter(rows.values())))["_fit"]
        out.append(f"all-reduce: alpha-beta on topology {prof.topology} "
                   f"({lat * 1e6:.3g} us + 2(p-1)/p bytes / {bw / 1e9:.4g} GB/s; "
                   f"{_fit_line(fit)})")
    return out


__all__ = ["CATALOG_DEFAULT_COMPUTE_EFFICIENCY", "MOE_PAD_ROWS", "KernelProfile", "assumptions",
           "attention_efficiencies", "dtype_compute_efficiency", "gemm_efficiency_16",
           "kernel_catalog", "load_profile", "profile_for", "time_rows"]
