"""Fit GEMM and MoE-layer kernel costs on NVIDIA AIConfigurator's measured kernel tables.

Reads `<shared data>/aic-kernels/<gpu>/{gemm,moe}/<engine>/<version>/*_perf.parquet` (NVIDIA
AIConfigurator's database, Apache-2.0; see that folder's SOURCE.md) and fits, per (GPU,
engine, dtype), the two models ridgeline's operator rows evaluate (perf/measured_kernels.py):

- GEMM [m,k]x[k,n]: max(2(k + k0)mn/(C e_c) + 2kZ/(C e_c) + s W, (mk b_a + mn b_a)/(beta
  e_b) + W + r 2kmn/(C e_c) + t0) + q, W = k(n + n_p) b_w/(beta e_b) the weight stream (a
  narrow GEMM at small m reads as if n_p columns wider: too few column tiles to keep every SM
  streaming), r / s in [0, 1] the fractions of the math / of the weight stream left exposed
  by the other (the knee between the memory- and compute-bound regimes is above the max),
  C the datasheet peak of the dtype's math (bf16 for weight-only), b_w the
  weight's stored bytes, b_a = 2 (ridgeline keeps activations 16-bit in its byte counts);
  q = m(k q_e + q_r) + q_0 is the activation-quantization kernel of fp8/fp4 GEMMs (0 for
  bf16 and weight-only), added to both rows so the operator stays a max of affine rows.
  Two terms are what a table measured but serving does not pay; they are fitted where the
  rows show them, so the device constants are read from the rest, and the runtime leaves
  them out: host dispatch (vLLM's block-fp8 tables, timed without CUDA graphs: the call
  takes max(device, H(m)), H = h0 + [m > 17](h_w + [16 does not divide m] h_p), the device
  floors held at the 16-bit fit's), and L2 reuse (L40S: the timed repeats keep an operand
  footprint F = knb_w + (mk + mn)b_a up to about F_L2 in L2; the memory traffic is cut by
  the share l/(1 + (F/F_L2)^4), l in [0, 1]).
- MoE layer (gate_up, act and down of one layer on one GPU, as the tables time it): for each
  of the two grouped GEMMs (in, out) = (d, 2 I/tp) and (I/tp, d),
  max(2 (R + U P) in' out' (1 + k0/in)/(C e_c), (U in out b_w + R (in + out) b_a)/(beta e_b)
  + t0/2 + U t_u/2), summed: in'/out' the dims rounded up to the tile, R token-expert pairs
  and U distinct experts on this GPU (the table's balanced routing, computed exactly as the
  collector routes), P padded rows per touched expert, k0 the epilogue in reduction steps
  (narrow-k experts run further from the peak), t_u a per-touched-expert overhead, t0 the
  layer's floor (routing bookkeeping, activation kernel, launches). Relu2 experts
  (Nemotron-H) are non-gated, (d, I/tp) for the first GEMM, where the table ran them so:
  TensorRT-LLM's kernel source says it; for the other engines' tables (older collectors ran
  them gated) it is a discrete choice per table, fitted like the tile. TensorRT-LLM's
  min-latency NVFP4 rows are left out (a DeepSeek-V3 group-limited gate, not the balanced
  routing; no finalize kernel).

Efficiencies are kept in (0, 1] and every other constant >= 0 (logistic / exponential
parameters), so a fitted time is never below the roofline. Fits minimise the mean squared
log error (Levenberg-Marquardt), then the mean absolute log error (the same solver,
reweighted: the bar is a median APE, and squared errors let a few shapes on a kernel's slow
path pull the fit off the rest; RIDGELINE_GEMM_LOSS=l2 / RIDGELINE_MOE_LOSS=l2 keep squares). The
reported errors are APE |pred - measured|/measured. `--only-moe` refits the MoE layers
alone, keeping the GEMM fits of the catalog and results files; `--only-gemm` the GEMMs of
the named GPUs and engines alone, keeping the MoE fits and the other GEMM fits.
RIDGELINE_MOE_HELD_EXPERT_COST=1
adds a cost per expert the GPU holds (touched or not) to the layer's floor: a diagnosis
switch (TensorRT-LLM's block-fp8 MoE fits to about 0.27 us per held expert), not in the
shipped catalog, whose op table does not carry the held-expert count (with the epilogue
term it takes TensorRT-LLM's B200 NVFP4 MoE only from 12.9 to 12.5%). RIDGELINE_MOE_EPILOGUE=0
drops the MoE epilogue term; RIDGELINE_MOE_TILES=16,32,64,128,256 widens the tile choice
(diagnosis switches: 64/256 moved no fit across the bar).
Cross-validation holds shapes out and refits on the rest (warm-started from the full fit):
GEMM holds each (n, k) shape out in one of 20 groups (a twentieth of the shapes unseen at
once: stricter than one at a time, and 25x cheaper over ~480 shapes), MoE leaves each model
shape (hidden, inter, experts, topk) out alone (a table of one model shape: each TP split, its
expert matrices of I/tp columns).

Where a table has several kernels for one shape (vLLM's Triton and FlashInfer MoE backends,
CUTLASS / DeepGEMM block-fp8), the fastest is kept: the engine picks the fastest backend it
supports. SGLang's MoE tables instead time each model shape on the one runner backend the
model is served with (the kernel source names it: on Blackwell FlashInfer's TensorRT-LLM MoE
for Qwen3-MoE, DeepSeek-V3 and the like, the Triton fused MoE for the others); a dtype whose
rows ran several backends gets one fit per backend, the engine's fall-through backend (Triton)
under the plain dtype key and each other as `<dtype>@<backend>` (perf/measured_kernels.py picks
one by the model's type, or `--moe-backend`). MoE fits use the `balanced` routing rows;
power-law rows are scored against the
balanced fit and reported (`power_law_median_ape`) but not fitted. An engine without
balanced rows on a GPU (vLLM on A100) gets no MoE fit; ridgeline then uses another engine's.
Only expert-parallel size 1 rows with TP <= 8 (experts sharded by TP within a node, as
ridgeline shards them) are fitted:
the collector's EP path still walks every token's rows on each rank, a cost ridgeline's
operator table does not model (it prices EP by its all-to-all).

    .venv/bin/python benchmarks/accuracy/fit_aic_kernels.py [--gpus h100_sxm,...]
        [--engines vllm,...] [--out-catalog FILE] [--out-results FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT_CATALOG = ROOT / "src" / "ridgeline" / "specs" / "data" / "kernels_measured_gemm_moe.json"
OUT_RESULTS = ROOT / "benchmarks" / "results" / "aic_kernel_fits_gemm_moe.json"

# AIConfigurator system folder -> ridgeline catalog GPU whose datasheet peaks the
# efficiencies are fractions of (its SXM/80GB part: the systems' yaml names the same peaks).
GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200", "gb200": "gb200",
        "a100_sxm": "a100-80gb", "l40s": "l40s"}
ENGINES = ("vllm", "sglang", "trtllm")
# Table dtype -> (ridgeline dtype key, peak used, stored weight bytes per element).
GEMM_DTYPES = {
    "bfloat16": ("bf16", "bf16", 2.0),
    "fp8": ("fp8", "fp8", 1.0),
    "fp8_block": ("fp8_block", "fp8", 1.0 + 4.0 / (128 * 128)),
    "nvfp4": ("fp4", "fp4", 0.5 + 1.0 / 16.0),
    "int8_wo": ("w8a16", "bf16", 1.0),
    "int4_wo": ("w4a16", "bf16", 0.5 + 2.0 / 128.0),
}
MOE_DTYPES = {
    **GEMM_DTYPES,
    "w4a16_mxfp4": ("w4a16_mxfp4", "bf16", 0.5 + 1.0 / 32.0),
    "w4a8_mxfp4_mxfp8": ("w4a8_mxfp4", "fp8", 0.5 + 1.0 / 32.0),
}
B_ACT = 2.0
CV_GROUPS = 20
# GEMM tables where more than this share of rows run faster than their weights stream from
# HBM keep their operands in L2 between the timed repeats (L40S: 2-9% of rows; others <= 1%).
L2_ROWS_SHARE = 0.015
# GEMM tables whose fastest row is this many times the same engine's fastest 16-bit row were
# timed under host dispatch (vLLM's block-fp8 linear without CUDA graphs: 50-280 us a call,
# against 2-3 us for the 16-bit kernel).
DISPATCH_RATIO = 10.0
# A (GPU, engine, dtype) table with fewer rows is not fitted (another engine's fit stands in).
MIN_ROWS = 100
# MoE rows sharded wider than one 8-GPU node are left out: their expert slices (22-116
# columns for the tables' shapes at TP 16-32) are not tile-aligned and run a slow path that
# the shapes served at TP <= 8 do not.
MAX_MOE_TP = 8
# MoE kernel sources left out of the fits: TensorRT-LLM's min-latency NVFP4 rows route every
# shape through a DeepSeek-V3 group-limited gate (8 groups, 4 kept) instead of the table's
# balanced routing, and skip the finalize (un-permute and reduce) kernel.
EXCLUDED_MOE_SOURCES = ("moe_torch_flow_min_latency",)
# 1: the MoE compute row pays an epilogue of k0 reduction steps per output (narrow-k experts).
MOE_EPILOGUE = int(os.environ.get("RIDGELINE_MOE_EPILOGUE", "1") == "1")
# The grouped GEMMs' tile edges tried (a discrete choice per fit).
MOE_TILES = tuple(float(v) for v in os.environ.get("RIDGELINE_MOE_TILES", "32,128").split(","))
# Model shapes (hidden, inter, experts, topk) whose experts are a non-gated relu2 MLP (the
# collector's Nemotron-H cases, `is_gated: false`): the first grouped GEMM has I outputs,
# not the 2I of gate and up.
NON_GATED_MOE_SHAPES = ((1024, 2688, 512, 22), (2048, 5120, 512, 22), (2688, 1856, 128, 6),
                        (4096, 2688, 512, 22), (8192, 5120, 512, 22))
# GEMMs whose bf16 activations are quantized by a kernel of their own before the matmul.
QUANTIZED_ACTIVATIONS = ("fp8", "fp8_block", "fp4")
# The MoE fits' loss on log(pred/measured): "l1" (least absolute, what the median-APE bar
# scores) or "l2" (least squares).
MOE_LOSS = os.environ.get("RIDGELINE_MOE_LOSS", "l1")
GEMM_LOSS = os.environ.get("RIDGELINE_GEMM_LOSS", "l1")
# A cost per expert the GPU holds, touched or not (routing tables, per-expert scales).
MOE_HELD_EXPERT_COST = os.environ.get("RIDGELINE_MOE_HELD_EXPERT_COST", "0") == "1"
# The MoE runner backend a kernel source names, by the first of these its name holds (the
# collector labels each row with the runner it ran). SGLang runs a model's configured
# `--moe-runner-backend`, vLLM the one its checkpoint format selects (gpt-oss's MXFP4 on
# FlashInfer's TensorRT-LLM MoE, compressed-tensors MXFP4 on Marlin): one per model shape.
MOE_BACKEND_OF_SOURCE = (("marlin", "marlin"), ("moe_triton", "triton"),
                         ("flashinfer_trtllm", "flashinfer_trtllm"),
                         ("trtllmmxfp4", "flashinfer_trtllm"),
                         ("flashinfer_cutlass", "flashinfer_cutlass"))
# The backend an engine runs for a model no per-architecture rule names (SGLang's
# `--moe-runner-backend auto` falls through to its Triton fused MoE): its fit takes the
# plain dtype key in the catalog, every other backend's `<dtype>@<backend>`; where the
# table has no rows of it, the backend with the most rows takes the plain key.
DEFAULT_MOE_BACKEND = {"sglang": "triton"}
# The tables read by backend: every SGLang MoE dtype; vLLM's MXFP4 weight-only (gpt-oss's
# shapes on FlashInfer, Kimi-K3's compressed-tensors checkpoint on Marlin). vLLM's other
# tables keep the fastest kernel per shape (on GB200 one or two shapes of its bf16, fp8 and
# NVFP4 tables ran FlashInfer's CUTLASS MoE; not fitted apart).
MOE_BACKEND_TABLES: dict[str, tuple[str, ...] | None] = {"sglang": None,
                                                         "vllm": ("w4a16_mxfp4",)}


def moe_backend_of(source: str) -> str:
    """The runner backend kernel source `source` ran ("": none named)."""
    return next((be for part, be in MOE_BACKEND_OF_SOURCE if part in source), "")


def shared_data() -> Path:
    env = os.environ.get("RIDGELINE_SHARED_DATA")
    return Path(env) if env else ROOT.parent / "shared" / "data"


def _read(path: Path) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    t = pq.read_table(path).to_pydict()
    return {k: np.asarray(v) for k, v in t.items()}


def _table(gpu: str, op: str, engine: str) -> Path | None:
    base = shared_data() / "aic-kernels" / gpu / op / engine
    if not base.is_dir():
        return None
    for ver in sorted(base.iterdir()):
        f = ver / f"{op}_perf.parquet"
        if f.is_file():
            return f
    return None


# --- solver -------------------------------------------------------------------------------
def lm_fit(resid: Callable[[np.ndarray], np.ndarray], theta: np.ndarray, iters: int = 40
           ) -> np.ndarray:
    """Levenberg-Marquardt on sum(resid^2), numeric forward-difference Jacobian."""
    theta = np.array(theta, dtype=np.float64)
    r = resid(theta)
    cost = float(r @ r)
    lam = 1e-2
    for _ in range(iters):
        jac = np.empty((r.size, theta.size))
        for i in range(theta.size):
            t = theta.copy()
            t[i] += 1e-5
            jac[:, i] = (resid(t) - r) / 1e-5
        g = jac.T @ r
        h = jac.T @ jac
        improved = False
        for _ in range(8):
            step = np.linalg.solve(h + lam * np.diag(np.diag(h) + 1e-12), -g)
            t = theta + step
            rn = resid(t)
            cn = float(rn @ rn)
            if cn < cost:
                theta, r, lam = t, rn, lam / 3
                improved = cost - cn > 1e-10 * cost
                cost = cn
                break
            lam *= 4
        if not improved:
            break
    return theta


def lm_fit_l1(resid: Callable[[np.ndarray], np.ndarray], theta: np.ndarray, iters: int = 40,
              rounds: int = 4) -> np.ndarray:
    """Least absolute log error by iteratively reweighted Levenberg-Marquardt: each round
    weights a row's residual by 1/sqrt(max(|r|, 0.01)) from the last round, so the squared
    weighted residual is |r|. The bar is a median APE, which squared errors let a few
    outlying shapes (a kernel's slow path) pull away from."""
    theta = lm_fit(resid, theta, iters)
    for _ in range(rounds):
        w = 1.0 / np.sqrt(np.maximum(np.abs(resid(theta)), 0.01))
        theta = lm_fit(lambda th, w=w: resid(th) * w, theta, iters)
    return theta


def _sig(x: float | np.ndarray) -> float | np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def ape_stats(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    ape = np.abs(pred - meas) / meas
    return {"median_ape": round(float(np.median(ape)), 4),
            "mean_ape": round(float(np.mean(ape)), 4),
            "p90_ape": round(float(np.quantile(ape, 0.9)), 4)}


# --- GEMM -----------------------------------------------------------------------------------
def gemm_params(theta: np.ndarray, quantizes: bool = False, l2: bool = False,
                dispatch_floor_us: float | None = None) -> dict[str, float]:
    """Constants of theta: the device form's 8 (+3 quantization), then, where the table
    shows them, the L2 residency pair and the host dispatch triple (see fit_gemm).
    `dispatch_floor_us`: the device floors held there (the 16-bit kernel's floor)."""
    p = {"compute_efficiency": float(_sig(theta[0])),
         "fill_elements": float(np.exp(theta[1])),
         "epilogue_k": float(np.exp(theta[2])),
         "bandwidth_efficiency": float(_sig(theta[3])),
         "floor_us": float(np.exp(theta[4])),
         "weight_pad_n": float(np.exp(theta[5])),
         "exposed_compute": float(_sig(theta[6])),
         "exposed_weights": float(_sig(theta[7])),
         "quant_ps_per_element": 0.0, "quant_ns_per_row": 0.0, "quant_floor_us": 0.0}
    i = 8
    if quantizes:  # GEMMs that quantize their activations on the fly
        p["quant_ps_per_element"] = float(np.exp(theta[8]))
        p["quant_ns_per_row"] = float(np.exp(theta[9]))
        p["quant_floor_us"] = float(np.exp(theta[10]))
        i = 11
    if l2:  # measured only: operands kept in L2 across the table's timed repeats
        p["l2_share"] = float(_sig(theta[i]))
        p["l2_resident_mb"] = float(np.exp(theta[i + 1]))
        i += 2
    if dispatch_floor_us is not None:  # measured only: host dispatch without CUDA graphs
        p["floor_us"] = dispatch_floor_us
        p["quant_floor_us"] = dispatch_floor_us if quantizes else 0.0
        p["dispatch_us"] = float(np.exp(theta[i]))
        p["dispatch_wide_us"] = float(np.exp(theta[i + 1]))
        p["dispatch_pad_us"] = float(np.exp(theta[i + 2]))
    return p


def gemm_predict_s(p: dict[str, float], m: np.ndarray, n: np.ndarray, k: np.ndarray,
                   peak: float, bw: float, b_w: float) -> np.ndarray:
    """Seconds of [m,k]x[k,n] by the fitted model (the form perf/measured_kernels.py uses):
    the GEMM's max(compute, memory) plus, for fp8/fp4 activations, the quantization kernel
    before it (a cost per input element and per row, and its own floor). The memory row
    reads the weights as if n had `weight_pad_n` more columns (a narrow GEMM at small m has
    too few column tiles to keep every SM streaming) and adds the `exposed_compute`
    fraction of the math (the main loop's MMAs that the weight stream does not hide)."""
    ce, be = peak * p["compute_efficiency"], bw * p["bandwidth_efficiency"]
    weights = k * (n + p.get("weight_pad_n", 0.0)) * b_w / be
    act = (m * k * B_ACT + m * n * B_ACT) / be
    if p.get("l2_share"):
        # A table timed by repeating one GEMM keeps an operand footprint up to about
        # l2_resident_mb in L2 between repeats: that share of its traffic runs at L2, not
        # HBM, speed (measured only: a model's layers evict each other's weights).
        foot = k * n * b_w + (m * k + m * n) * B_ACT
        cut = 1.0 - p["l2_share"] / (1.0 + (foot / (p["l2_resident_mb"] * 1e6)) ** 4)
        weights, act = weights * cut, act * cut
    comp = (2.0 * (k + p["epilogue_k"]) * m * n + 2.0 * k * p["fill_elements"]) / ce \
        + p.get("exposed_weights", 0.0) * weights
    mem = act + weights + p["floor_us"] * 1e-6 \
        + p.get("exposed_compute", 0.0) * 2.0 * k * m * n / ce
    quant = m * (k * p["quant_ps_per_element"] * 1e-12 + p["quant_ns_per_row"] * 1e-9) \
        + p["quant_floor_us"] * 1e-6
    device = np.maximum(comp, mem) + quant
    if "dispatch_us" not in p:
        return device
    # Timed without CUDA graphs, a call takes the longer of the GPU's work and the host's
    # dispatch (queued launches overlap the kernels): a Python path with a longer branch
    # above 17 rows and another when m needs padding (the grid above 17 has only
    # multiples of 16 and one more, so the alignment itself is not pinned down).
    wide = m > 17.0
    host = p["dispatch_us"] + wide * (p["dispatch_wide_us"]
                                      + (np.mod(m, 16.0) != 0.0) * p["dispatch_pad_us"])
    return np.maximum(device, host * 1e-6)


def _gemm_rows(path: Path) -> dict[str, dict[str, np.ndarray]]:
    t = _read(path)
    out: dict[str, dict[str, np.ndarray]] = {}
    for dtype in sorted(set(t["gemm_dtype"].tolist())):
        if dtype not in GEMM_DTYPES:
            continue
        sel = t["gemm_dtype"] == dtype
        m, n, k, lat = (t[c][sel] for c in ("m", "n", "k", "latency"))
        keep = lat > 0
        m, n, k, lat = m[keep], n[keep], k[keep], lat[keep]
        # The fastest kernel of each shape (the engine picks its fastest supported backend).
        key = np.stack([m, n, k], axis=1)
        uniq, inv = np.unique(key, axis=0, return_inverse=True)
        best = np.full(len(uniq), np.inf)
        np.minimum.at(best, inv.ravel(), lat)
        out[dtype] = {"m": uniq[:, 0].astype(float), "n": uniq[:, 1].astype(float),
                      "k": uniq[:, 2].astype(float), "lat_s": best * 1e-3}
    return out


def fit_gemm(rows: dict[str, np.ndarray], peak: float, bw: float, b_w: float,
             cv: bool, quantizes: bool, l2: bool = False,
             dispatch_floor_us: float | None = None
             ) -> tuple[dict[str, float], dict[str, Any]]:
    """Fit one table. `l2`: the table shows L2-resident weights (fit the residency pair);
    `dispatch_floor_us`: the table was timed under host dispatch (fit the dispatch triple,
    the device floors held at this value). Both are what the table measured but serving
    does not pay: the runtime leaves them out."""
    m, n, k, y = rows["m"], rows["n"], rows["k"], rows["lat_s"]
    ly = np.log(y)

    def params(theta: np.ndarray) -> dict[str, float]:
        return gemm_params(theta, quantizes, l2, dispatch_floor_us)

    def make(mask: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        mm, nn, kk, lyy = m[mask], n[mask], k[mask], ly[mask]

        def resid(theta: np.ndarray) -> np.ndarray:
            return np.log(gemm_predict_s(params(theta), mm, nn, kk, peak, bw, b_w)) - lyy
        return resid

    extra = [math.log(2.0), math.log(2.0), math.log(3.0)] if quantizes else []
    if l2:
        extra += [_logit(0.4), math.log(16.0)]
    if dispatch_floor_us is not None:
        extra += [math.log(0.9e6 * float(y[m <= 17.0].min())), math.log(20.0), math.log(5.0)]
    allrows = np.ones(len(y), dtype=bool)
    # Three fits guard against a poor local minimum: two starts (floors, fills) with the
    # padding and exposed terms free, and the form without them (held at zero). The fit with
    # the least median absolute log error (the bar's statistic) wins: on a table with many
    # rows below the roofline (L2-resident weights on L40S) the least-mean basin is not the
    # least-median one.
    off = np.array([-30.0, -30.0, -30.0])  # weight_pad_n, exposed_compute, exposed_weights

    def full(th: np.ndarray, held: bool) -> np.ndarray:
        return np.concatenate([th[:5], off, th[5:]]) if held else th

    starts = ((False, [_logit(0.7), math.log(1e6), math.log(100.0), _logit(0.8),
                       math.log(5.0), math.log(100.0), _logit(0.1), _logit(0.1)]),
              (False, [_logit(0.5), math.log(1e5), math.log(30.0), _logit(0.6),
                       math.log(15.0), math.log(300.0), _logit(0.3), _logit(0.3)]),
              (True, [_logit(0.7), math.log(1e6), math.log(100.0), _logit(0.8),
                      math.log(5.0)]))
    best_cost = np.inf
    theta = np.array(starts[0][1] + extra)
    for held, start in starts:
        def res(th: np.ndarray, held: bool = held) -> np.ndarray:
            return make(allrows)(full(th, held))
        th = lm_fit(res, np.array(start + extra), 60)
        if GEMM_LOSS == "l1":
            th = lm_fit_l1(res, th, 60)
        r = res(th)
        cost = float(np.median(np.abs(r))) if GEMM_LOSS == "l1" else float(r @ r)
        if cost < best_cost:
            theta, best_cost = full(th, held), cost
    p = params(theta)
    pred = gemm_predict_s(p, m, n, k, peak, bw, b_w)
    info: dict[str, Any] = {"rows": len(y), "shapes": 0, "residual": ape_stats(pred, y)}
    shapes = np.unique(np.stack([n, k], axis=1), axis=0)
    info["shapes"] = len(shapes)
    if cv:
        held = np.empty(len(y))
        # Shapes are held out in 20 groups (each (n, k) shape in exactly one; stricter than
        # leaving one out: 5% of the shapes are unseen at once), refitting on every fourth m
        # of the other shapes (the m grid is dense; held-out shapes are scored at all their
        # m), warm-started from the full fit.
        m_vals = np.unique(m)
        thin = np.isin(m, m_vals[::4])
        shape_id = np.unique(np.stack([n, k], axis=1), axis=0, return_inverse=True)[1].ravel()
        group = np.random.default_rng(0).permutation(len(shapes))[shape_id] % CV_GROUPS
        for g in range(CV_GROUPS):
            out = group == g
            th = lm_fit_l1(make(~out & thin), theta, 8, 2) if GEMM_LOSS == "l1" else \
                lm_fit(make(~out & thin), theta, 8)
            held[out] = gemm_predict_s(params(th), m[out], n[out], k[out], peak, bw, b_w)
        info["cv"] = {"kind": f"{CV_GROUPS}-fold leave-(n,k)-shapes-out", **ape_stats(held, y)}
    return p, info


# --- MoE -------------------------------------------------------------------------------------
def balanced_local(tokens: int, experts: int, topk: int, ep: int) -> tuple[float, float]:
    """(token-expert pairs, distinct experts) on EP rank 0 under the collector's balanced
    routing: token t takes experts (t + i s) mod E (T >= s) or floor(t s/T + i s) mod E, with
    stride s = ceil(E/k); rank 0 holds the first E/ep experts."""
    s = math.ceil(experts / topk)
    t = np.arange(tokens, dtype=np.float64)[:, None]
    i = np.arange(topk, dtype=np.float64)[None, :]
    ex = (t + i * s) % experts if tokens >= s else np.floor(t * s / tokens + i * s) % experts
    ex = ex.astype(np.int64)
    local = ex < experts // ep
    # A token naming one expert twice is routed to it once (one-hot sum, then top-k).
    pairs = sum(len(set(row[loc].tolist())) for row, loc in zip(ex, local, strict=True))
    return float(pairs), float(len(set(ex[local].tolist())))


def moe_params(theta: np.ndarray, tile: float) -> dict[str, float]:
    p = {"tile": tile, "compute_efficiency": float(_sig(theta[0])),
         "bandwidth_efficiency": float(_sig(theta[1])),
         "floor_us": float(np.exp(theta[2])),
         "expert_us": float(np.exp(theta[3])),
         "pad_rows": float(np.exp(theta[4])),
         "activation_scale": float(np.exp(theta[5]))}
    p["epilogue_k"] = float(np.exp(theta[6])) if MOE_EPILOGUE else 0.0
    if len(theta) > 6 + MOE_EPILOGUE:  # RIDGELINE_MOE_HELD_EXPERT_COST=1 (not evaluated yet)
        p["local_expert_us"] = float(np.exp(theta[6 + MOE_EPILOGUE]))
    return p


def moe_predict_s(p: dict[str, float], pairs: np.ndarray, uniq: np.ndarray, d: np.ndarray,
                  inter_loc: np.ndarray, peak: float, bw: float, b_w: float,
                  local: np.ndarray | float = 0.0, up: np.ndarray | float = 2.0) -> np.ndarray:
    """Seconds of one MoE layer on one GPU (the form perf/measured_kernels.py uses); `local`:
    the experts this GPU holds, touched or not (a cost per held expert in the floor); `up`:
    the first GEMM's outputs per intermediate column (2: gate and up; 1: a non-gated MLP)."""
    ce, be = peak * p["compute_efficiency"], bw * p["bandwidth_efficiency"]
    total = np.zeros_like(pairs) + 1e-6 * p.get("local_expert_us", 0.0) * local
    tile = p["tile"]
    for i_dim, o_dim in ((d, up * inter_loc), (inter_loc, d)):
        # the grouped GEMM's tiles cover each expert's matrix in whole tiles
        padded = np.ceil(i_dim / tile) * tile * np.ceil(o_dim / tile) * tile
        # each output element's epilogue costs epilogue_k more reduction steps (as in GEMMs):
        # narrow-k experts (the down GEMM of a TP-split layer) run further from the peak
        comp = 2.0 * padded * (1.0 + p["epilogue_k"] / i_dim) * (pairs + uniq * p["pad_rows"]) \
            / ce
        mem = (uniq * i_dim * o_dim * b_w
               + pairs * (i_dim + o_dim) * B_ACT * p["activation_scale"]) / be \
            + 0.5e-6 * (p["floor_us"] + uniq * p["expert_us"])
        total += np.maximum(comp, mem)
    return total


def _moe_rows(path: Path, engine: str = "") -> dict[str, dict[str, Any]]:
    """Balanced and power-law rows per table dtype; where a dtype's model shapes each ran one
    of several runner backends (shapes disjoint between backends), one group per backend,
    keyed `<dtype>@<backend>` except the default backend's (the plain dtype). Where a shape
    ran several, they are one group (the fastest kernel of each key kept)."""
    t = _read(path)
    out: dict[str, dict[str, Any]] = {}
    backend = np.array([moe_backend_of(s) for s in t["kernel_source"].astype(str).tolist()])
    shape = [tuple(v) for v in np.stack([t[c] for c in ("hidden_size", "inter_size",
                                                        "num_experts", "topk")], axis=1)]
    for dtype in sorted(set(t["moe_dtype"].tolist())):
        if dtype not in MOE_DTYPES:
            continue
        sel = t["moe_dtype"] == dtype
        listed = MOE_BACKEND_TABLES.get(engine, ())
        named = engine in MOE_BACKEND_TABLES and (listed is None or dtype in listed)
        rows_of: dict[str, int] = {}
        shapes_of: dict[str, set[tuple[Any, ...]]] = {}
        for i in np.flatnonzero(sel):
            be = str(backend[i]) if named else ""
            rows_of[be] = rows_of.get(be, 0) + 1
            shapes_of.setdefault(be, set()).add(shape[i])
        split = len(rows_of) > 1 and sum(map(len, shapes_of.values())) \
            == len(set().union(*shapes_of.values()))
        if not split:
            res = _moe_group(t, sel)
            if res is not None:
                out[dtype] = {**res, "backend": next(iter(rows_of)) if len(rows_of) == 1
                              else ""}
            continue
        plain = DEFAULT_MOE_BACKEND.get(engine, "")
        plain = plain if plain in rows_of else max(rows_of, key=lambda b: rows_of[b])
        for be in sorted(rows_of):
            res = _moe_group(t, sel & (backend == be))
            if res is not None:
                out[dtype if be == plain else f"{dtype}@{be}"] = {**res, "backend": be}
    return out


def _moe_group(t: dict[str, np.ndarray], group: np.ndarray) -> dict[str, Any] | None:
    """The balanced and power-law rows of one (dtype, backend) group, fastest per key."""
    cols = ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
            "moe_ep_size")
    cache: dict[tuple[int, int, int, int], tuple[float, float]] = {}
    res: dict[str, Any] = {}
    for dist in ("balanced", "power_law"):
        sel = group & (t["latency"] > 0) & (t["moe_ep_size"] == 1) \
            & (t["moe_tp_size"] <= MAX_MOE_TP) \
            & ~np.isin(t["kernel_source"].astype(str), EXCLUDED_MOE_SOURCES)
        sel &= (t["distribution"] == "balanced") if dist == "balanced" else \
            np.char.startswith(t["distribution"].astype(str), "power_law")
        if not sel.any():
            continue
        key = np.stack([t[c][sel] for c in cols], axis=1)
        uniq, inv = np.unique(key, axis=0, return_inverse=True)
        best = np.full(len(uniq), np.inf)
        np.minimum.at(best, inv.ravel(), t["latency"][sel])
        tok, d, inter, topk, ne, tp, ep = (uniq[:, j] for j in range(7))
        pairs = np.empty(len(uniq))
        ucount = np.empty(len(uniq))
        for r in range(len(uniq)):
            ck = (int(tok[r]), int(ne[r]), int(topk[r]), int(ep[r]))
            if ck not in cache:
                cache[ck] = balanced_local(*ck)
            pairs[r], ucount[r] = cache[ck]
        res[dist] = {"tokens": tok.astype(float), "d": d.astype(float),
                     "inter_loc": inter.astype(float) / tp, "pairs": pairs, "uniq": ucount,
                     "shape": np.stack([d, inter, ne, topk], axis=1),
                     "local": ne.astype(float) / ep,
                     "gating_known": bool(np.char.endswith(
                         t["kernel_source"][sel].astype(str), "nongated").any()),
                     "up": np.where([(int(a), int(b), int(c), int(e)) in NON_GATED_MOE_SHAPES
                                     for a, b, c, e in zip(d, inter, ne, topk, strict=True)],
                                    1.0, 2.0),
                     "lat_s": best * 1e-3}
    return res if "balanced" in res else None


def fit_moe(rows: dict[str, dict[str, Any]], peak: float, bw: float, b_w: float
            ) -> tuple[dict[str, float], dict[str, Any]]:
    bal = rows["balanced"]
    y = bal["lat_s"]
    ly = np.log(y)

    def pred_of(p: dict[str, float], r: dict[str, Any], mask: np.ndarray | None = None
                ) -> np.ndarray:
        sl = slice(None) if mask is None else mask
        return moe_predict_s(p, r["pairs"][sl], r["uniq"][sl], r["d"][sl], r["inter_loc"][sl],
                             peak, bw, b_w, r["local"][sl], r["up"][sl])

    def make(mask: np.ndarray, tile: float) -> Callable[[np.ndarray], np.ndarray]:
        def resid(theta: np.ndarray) -> np.ndarray:
            return np.log(pred_of(moe_params(theta, tile), bal, mask)) - ly[mask]
        return resid

    allrows = np.ones(len(y), dtype=bool)
    best_theta, best_cost, tile = None, np.inf, 16.0
    extra = ([math.log(64.0)] if MOE_EPILOGUE else []) \
        + ([math.log(0.01)] if MOE_HELD_EXPERT_COST else [])
    # Whether the relu2 shapes ran non-gated: the kernel source says so in TensorRT-LLM's
    # tables; elsewhere older collectors ran them as gated layers, so that is a discrete
    # choice per table, fitted like the tile (the gated first GEMM does 2x the work).
    gatings = [bal["up"]] if bal["gating_known"] or (bal["up"] == 2.0).all() else \
        [bal["up"], np.full_like(bal["up"], 2.0)]
    best_up = bal["up"]
    for up in gatings:
        bal["up"] = up
        for tl in MOE_TILES:  # the tile: a discrete choice, each fitted
            for start in ([_logit(0.5), _logit(0.7), math.log(5.0), math.log(0.3),
                           math.log(16.0), 0.0, *extra],
                          [_logit(0.3), _logit(0.5), math.log(20.0), math.log(1.0),
                           math.log(64.0), 1.0, *extra]):
                th = lm_fit(make(allrows, tl), np.array(start), 60)
                cost = float(np.abs(make(allrows, tl)(th)).sum())
                if cost < best_cost:
                    best_theta, best_cost, tile, best_up = th, cost, tl, up
    bal["up"] = best_up
    if "power_law" in rows and not rows["power_law"]["gating_known"]:
        rows["power_law"]["up"] = np.where(best_up.min() < 2.0, rows["power_law"]["up"], 2.0)
    if MOE_LOSS == "l1":
        best_theta = lm_fit_l1(make(allrows, tile), best_theta, 60)
    assert best_theta is not None
    p = moe_params(best_theta, tile)
    info: dict[str, Any] = {"rows": len(y),
                            "residual": ape_stats(pred_of(p, bal), y)}
    if (bal["up"] < 2.0).any():
        info["non_gated_shapes"] = len(np.unique(bal["shape"][bal["up"] < 2.0], axis=0))
    shapes = np.unique(bal["shape"], axis=0)
    info["shapes"] = len(shapes)
    held = np.full(len(y), np.nan)
    # One model shape (the int4 weight-only tables: Kimi-K2's layer alone): its TP splits
    # are the expert matrices of different sizes (I/tp columns), so each split is held out
    # in turn instead.
    folds = [(bal["shape"] == sh).all(axis=1) for sh in shapes] if len(shapes) > 1 else \
        [bal["inter_loc"] == v for v in np.unique(bal["inter_loc"])]
    if len(folds) > 1:
        for out in folds:
            th = lm_fit_l1(make(~out, tile), best_theta, 15, 2) if MOE_LOSS == "l1" else \
                lm_fit(make(~out, tile), best_theta, 30)
            held[out] = pred_of(moe_params(th, tile), bal, out)
        info["cv"] = {"kind": "leave-one-model-shape-out" if len(shapes) > 1 else
                      "leave-one-TP-split-out (one model shape)", **ape_stats(held, y)}
    if "power_law" in rows:
        pl = rows["power_law"]
        info["power_law_median_ape"] = ape_stats(pred_of(p, pl), pl["lat_s"])["median_ape"]
        info["power_law_rows"] = len(pl["lat_s"])
    return p, info


# --- driver ---------------------------------------------------------------------------------
def _gemm_measurement_terms(rows: dict[str, np.ndarray], groups: dict[str, Any], bw: float,
                            b_w: float, engine_fits: dict[str, Any] | None
                            ) -> tuple[bool, float | None]:
    """Which measurement terms a GEMM table needs, read from its rows: the L2 residency pair
    where more than L2_ROWS_SHARE of its rows beat the time their weights take to stream
    from HBM at the datasheet bandwidth (only a cache makes that possible), and the host
    dispatch triple where its fastest row is over DISPATCH_RATIO times the same engine's
    fastest 16-bit row (no kernel of the shape is that slow: the host is), with the device
    floors held at that 16-bit fit's floor (under the host time they cannot be read)."""
    n, k, y = rows["n"], rows["k"], rows["lat_s"]
    l2 = float(np.mean(k * n * b_w / bw > y)) > L2_ROWS_SHARE
    bf16_rows = groups.get("bfloat16")
    bf16_fit = (engine_fits or {}).get("bf16")
    if bf16_rows is None or bf16_fit is None or rows is bf16_rows \
            or float(y.min()) <= DISPATCH_RATIO * float(bf16_rows["lat_s"].min()):
        return l2, None
    return l2, float(bf16_fit["floor_us"])


def _peaks(hw_name: str) -> tuple[dict[str, float], float]:
    from ridgeline.specs.hardware import hardware_catalog

    hw = hardware_catalog()[hw_name]
    return dict(hw["peak_flops"]), float(hw["memory_bandwidth_bytes_s"])


def _rounded(p: dict[str, float]) -> dict[str, float]:
    return {k: float(f"{v:.5g}") for k, v in p.items()}


def main(argv: list[str] | None = None) -> int:
    np.seterr(over="ignore", divide="ignore", invalid="ignore")  # LM probes extreme steps
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", default=",".join(GPUS))
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--no-cv", action="store_true", help="skip cross-validation")
    ap.add_argument("--only-moe", action="store_true",
                    help="refit the MoE layers alone; the GEMM fits of --out-catalog and "
                         "--out-results stay")
    ap.add_argument("--only-gemm", action="store_true",
                    help="refit the GEMMs of --gpus and --engines alone; the MoE fits and "
                         "the other GEMM fits of --out-catalog and --out-results stay")
    ap.add_argument("--out-catalog", type=Path, default=OUT_CATALOG)
    ap.add_argument("--out-results", type=Path, default=OUT_RESULTS)
    args = ap.parse_args(argv)
    today = dt.date.today().isoformat()
    src = shared_data() / "aic-kernels"
    gemm_cat: dict[str, Any] = {}
    moe_cat: dict[str, Any] = {}
    table: list[dict[str, Any]] = []
    if args.only_moe and args.only_gemm:
        print("error: --only-moe and --only-gemm: name at most one", file=sys.stderr)
        return 2
    if args.only_moe:
        gemm_cat = json.loads(args.out_catalog.read_text())["gemm"]
        table = [r for r in json.loads(args.out_results.read_text())["fits"]
                 if r["op"] == "gemm"]
    kept_gemm: list[dict[str, Any]] = []
    if args.only_gemm:
        # The named GPUs' and engines' GEMM fits are redone; every other fit stays, in place.
        refit = {(g, e) for g in args.gpus.split(",") for e in args.engines.split(",")}
        old = json.loads(args.out_catalog.read_text())
        moe_cat, gemm_cat = old["moe"], old["gemm"]
        for gpu, engines in gemm_cat.items():
            for engine in engines:
                if (gpu, engine) in refit:
                    engines[engine] = {}
        old_rows = json.loads(args.out_results.read_text())["fits"]
        kept_gemm = [r for r in old_rows
                     if r["op"] == "gemm" and (r["gpu"], r["engine"]) not in refit]
        table = [r for r in old_rows if r["op"] == "moe"]
    ops = ("moe",) if args.only_moe else ("gemm",) if args.only_gemm else ("gemm", "moe")
    for gpu in args.gpus.split(","):
        peaks, bw = _peaks(GPUS[gpu])
        for engine in args.engines.split(","):
            for op in ops:
                path = _table(gpu, op, engine)
                if path is None:
                    continue
                rel = str(path.relative_to(src))
                groups = _gemm_rows(path) if op == "gemm" else _moe_rows(path, engine)
                dtypes = GEMM_DTYPES if op == "gemm" else MOE_DTYPES
                for group, rows in groups.items():
                    dtype, _, suffix = group.partition("@")
                    key, peak_key, b_w = dtypes[dtype]
                    n_rows = len((rows["balanced"] if op == "moe" else rows)["lat_s"])
                    if peak_key not in peaks or n_rows < MIN_ROWS:
                        continue
                    peak = peaks[peak_key]
                    if op == "gemm":
                        l2, disp = _gemm_measurement_terms(rows, groups, bw, b_w,
                                                           gemm_cat.get(gpu, {}).get(engine))
                        p, info = fit_gemm(rows, peak, bw, b_w, cv=not args.no_cv,
                                           quantizes=key in QUANTIZED_ACTIVATIONS, l2=l2,
                                           dispatch_floor_us=disp)
                    else:
                        p, info = fit_moe(rows, peak, bw, b_w)
                    fit = {"files": [rel], "table_dtype": dtype, "peak": peak_key,
                           "weight_bytes": round(b_w, 6), "date": today, **info}
                    if op == "moe" and rows["backend"]:
                        fit["backend"] = rows["backend"]
                    key_cat = f"{key}@{suffix}" if suffix else key
                    cat = gemm_cat if op == "gemm" else moe_cat
                    entry = {**_rounded(p), "_fit": fit}
                    bf16 = cat.get(gpu, {}).get(engine, {}).get("bf16")
                    if op == "gemm" and bf16 and \
                            p["floor_us"] + p["quant_floor_us"] > 3.0 * bf16["floor_us"]:
                        # Floors several times the 16-bit kernel's are host work of a
                        # quantized linear timed without CUDA graphs (the tables slow enough
                        # to show it whole, vLLM's block fp8, fit it as a dispatch term):
                        # under graphs each of its two kernels keeps the 16-bit device floor.
                        entry["fitted_floor_us"] = entry["floor_us"]
                        entry["fitted_quant_floor_us"] = entry["quant_floor_us"]
                        entry["floor_us"] = bf16["floor_us"]
                        entry["quant_floor_us"] = bf16["floor_us"]
                    cat.setdefault(gpu, {}).setdefault(engine, {})[key_cat] = entry
                    row = {"gpu": gpu, "engine": engine, "op": op, "dtype": key_cat,
                           "rows": info["rows"], "shapes": info["shapes"],
                           "train_median_ape": info["residual"]["median_ape"],
                           "cv_median_ape": info.get("cv", {}).get("median_ape")}
                    table.append(row)
                    cv = row["cv_median_ape"]
                    print(f"{gpu:9s} {engine:7s} {op:4s} {key_cat:12s} rows {info['rows']:6d} "
                          f"shapes {info['shapes']:4d} train {100 * row['train_median_ape']:5.1f}%"
                          f" cv {'-' if cv is None else f'{100 * cv:5.1f}%'}  "
                          + " ".join(f"{k}={v:.4g}" for k, v in p.items()), flush=True)
    if args.only_gemm:
        gemm_cat = {g: {e: f for e, f in engines.items() if f} for g, engines in gemm_cat.items()}
        order = {**{g: i for i, g in enumerate(GPUS)}, **{e: i for i, e in enumerate(ENGINES)},
                 **{v[1][0]: i for i, v in enumerate(sorted(GEMM_DTYPES.items()))}}
        gemm_rows = sorted(kept_gemm + [r for r in table if r["op"] == "gemm"],
                           key=lambda r: (order[r["gpu"]], order[r["engine"]], order[r["dtype"]]))
        table = gemm_rows + [r for r in table if r["op"] == "moe"]
    catalog = {
        "_about": ("GEMM and MoE-layer kernel constants fitted on NVIDIA AIConfigurator's "
                   "measured kernel tables (Apache-2.0, commit 095f58a51, aic-core/src/"
                   "aiconfigurator_core/systems/data/<system>/{gemm,moe}/<engine>/<version>/)"
                   " by benchmarks/accuracy/fit_aic_kernels.py; forms in perf/"
                   "measured_kernels.py. Efficiencies are fractions of the catalog GPU's "
                   "datasheet peaks; floor_us/expert_us in microseconds; residual and cv are "
                   "APE |pred-measured|/measured over the rows named."),
        "date": today,
        "hardware": {hw: gpu for gpu, hw in GPUS.items()},
        "default_engine": "vllm",
        "gemm": gemm_cat,
        "moe": moe_cat,
    }
    args.out_catalog.write_text(json.dumps(catalog, indent=1) + "\n")
    args.out_results.parent.mkdir(parents=True, exist_ok=True)
    args.out_results.write_text(json.dumps(
        {"date": today, "script": "benchmarks/accuracy/fit_aic_kernels.py",
         "bar": "leave-one-shape-out median APE <= 10% per operator class per GPU",
         "fits": table}, indent=1) + "\n")
    print(f"wrote {args.out_catalog} and {args.out_results}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
