"""Fit ridgeline's kernel-level constants on Vidur's measured CUDA kernel times.

Reads vidur-profiling in the shared data folder (`_paths.shared_data_dir()`; see its
SOURCE.md): per-operator kernel times of fp16 layer shapes on H100, A100 and A40 (mlp.csv),
A100 FlashAttention prefill/decode kernels
(attention.csv), and NCCL all-reduce / send-recv times by message size per topology. Writes
`src/ridgeline/specs/data/kernels.json` (every constant with its files, row count, date,
training residual and cross-validated error) and prints the kernel-level accuracy table for
docs/BENCHMARKS.md.

    .venv/bin/python benchmarks/accuracy/fit_kernel_constants.py [--data DIR] [--out FILE] [--table]

Every model here has the form ridgeline's step time evaluates (perf/fast_step.py):
max(compute row . x, memory row . x) with intercepts gated by the operator's indicator, so the
fitted numbers drop into the operator table unchanged:

- GEMM [m,k]x[k,n]: max(2(k + k0)mn/(C e_c) + 2kZ/(C e_c), (mk+kn+mn) b/(beta e_b) + t0).
  The compute intercept is the saturating efficiency e_c m/(m + Z/n) (Z output elements fill
  the GPU: tile and wave quantisation averaged); k0 prices each output element's epilogue
  as k0 more reduction steps (short-k GEMMs run further below peak); t0 is the floor of a
  small kernel.
- elementwise op: t0 + bytes/(beta e).
- prefill attention: max((pairs + q_w pc + k_w pt) 4 h_q d_h/(C e), t0).
- decode attention: t0 + (dc + q_t dq) kv_bytes/(beta e).
- collective over p GPUs: alpha + f(p) bytes/beta_bus, f = 2(p-1)/p for all-reduce, 1 for send.

Fits minimise the mean |log(predicted/measured)| (relative error, robust to the profiler's
outliers) by Nelder-Mead over log-parameters. Cross-validation leaves one model out (kernels)
or one message-size decade out (collectives) and scores the held-out rows.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from _paths import shared_data_dir

ROOT = Path(__file__).resolve().parents[2]
DATA = shared_data_dir() / "vidur-profiling"
OUT = ROOT / "src" / "ridgeline" / "specs" / "data" / "kernels.json"

# Datasheet dense fp16 tensor peak and HBM/GDDR bandwidth of the profiled parts (the GPUs the
# efficiencies are fractions of). H100 SXM and A100 80GB as in specs/data/hardware; the A40
# is not a catalog GPU: NVIDIA A40 datasheet, 149.7 TFLOPS fp16 tensor dense, 696 GB/s GDDR6.
PROFILED = {
    "h100": {"hardware": "h100-sxm", "peak_flops": 989.4e12, "bandwidth_bytes_s": 3.35e12},
    "a100": {"hardware": "a100-80gb", "peak_flops": 312e12, "bandwidth_bytes_s": 2.039e12},
    "a40": {"hardware": "(NVIDIA A40 datasheet)", "peak_flops": 149.7e12,
            "bandwidth_bytes_s": 696e9},
}
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
# Vidur operator -> ridgeline kernel class (the class's constants apply to ridgeline's ops).
VECTOR_OPS = {"input_layernorm": "norm", "post_attention_layernorm": "norm",
              "attn_rope": "rope", "mlp_act": "act", "add": "add", "emb": "embedding"}
B = 2.0  # fp16 bytes


# --- reading -----------------------------------------------------------------------------
def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def mlp_rows(data: Path, gpu: str) -> list[dict[str, object]]:
    """One record per (file row, operator): shape, measured median seconds."""
    out: list[dict[str, object]] = []
    for path in sorted((data / "compute" / gpu).glob("*/*/mlp.csv")):
        model = path.parent.name
        for i, r in enumerate(_rows(path)):
            h, kv, d = int(r["n_head"]), int(r["n_kv_head"]), int(r["n_embd"])
            ff, tp, m = int(r["n_expanded_embd"]), int(r["num_tensor_parallel_workers"]), \
                int(r["num_tokens"])
            hd = d // h
            hq, hkv = h // tp, max(1, -(-kv // tp))
            gated = r["use_gated_mlp"] == "True"
            shapes = {"attn_pre_proj": (d, (hq + 2 * hkv) * hd),
                      "attn_post_proj": (hq * hd, d),
                      "mlp_up_proj": (d, (2 if gated else 1) * ff // tp),
                      "mlp_down_proj": (ff // tp, d)}
            vbytes = {"input_layernorm": 2 * d * B, "post_attention_layernorm": 2 * d * B,
                      "attn_rope": 2 * (hq + hkv) * hd * B,
                      "mlp_act": (3 if gated else 2) * ff // tp * B,
                      "add": 3 * d * B, "emb": d * (B / tp + B)}
            base = {"model": model, "file": str(path.relative_to(data)), "row": i + 2,
                    "m": m, "tp": tp}
            for op, (k, n) in shapes.items():
                out.append({**base, "op": op, "cls": "gemm", "k": k, "n": n,
                            "t": float(r[f"time_stats.{op}.median"]) * 1e-3})
            for op, per_tok in vbytes.items():
                if not r.get(f"time_stats.{op}.median"):
                    continue  # the model has no such op (phi-2: parallel attention/MLP)
                out.append({**base, "op": op, "cls": VECTOR_OPS[op], "bytes": per_tok * m,
                            "t": float(r[f"time_stats.{op}.median"]) * 1e-3})
    return out


# --- fitting -------------------------------------------------------------------------------
def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, iters: int = 1500,
                step: float = 0.5) -> np.ndarray:
    """Minimise f from x0 (a plain Nelder-Mead; numpy only, deterministic)."""
    n = len(x0)
    pts = [x0] + [x0 + step * np.eye(n)[i] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) < 1e-10:
            break
        c = np.mean(pts[:-1], axis=0)
        xr = c + (c - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = c + 2 * (c - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = c + 0.5 * (pts[-1] - c)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [pts[0] + 0.5 * (p - pts[0]) for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    return pts[int(np.argmin(vals))]


def fit_log(predict: Callable[[np.ndarray, dict[str, np.ndarray]], np.ndarray],
            cols: dict[str, np.ndarray], t: np.ndarray, x0: list[float]) -> np.ndarray:
    """Parameters p (positive: fitted as log p) minimising the mean |log(pred/t)|, each row
    weighted by cols["_w"] when given."""
    w = cols.get("_w", np.ones_like(t))
    w = w / w.sum()

    def loss(lp: np.ndarray) -> float:
        pred = predict(np.exp(lp), cols)
        return float(np.sum(w * np.abs(np.log(pred / t))))
    lp = np.log(np.array(x0, dtype=np.float64))
    for _ in range(3):  # restarts shake Nelder-Mead out of a collapsed simplex
        lp = nelder_mead(loss, lp)
    return np.exp(lp)


def ape(pred: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.abs(pred - t) / t


def stats(e: np.ndarray) -> dict[str, float]:
    return {"median_ape": round(float(np.median(e)), 4), "mean_ape": round(float(np.mean(e)), 4)}


def decade_stats(e: np.ndarray, size: np.ndarray) -> dict[str, float]:
    """Median APE of messages up to 1 MiB and above (the two regimes decode and prefill see)."""
    small = size <= 1 << 20
    return {"small_msg_median_ape": round(float(np.median(e[small])), 4),
            "large_msg_median_ape": round(float(np.median(e[~small])), 4)}


def cross_validate(predict: Callable[[np.ndarray, dict[str, np.ndarray]], np.ndarray],
                   cols: dict[str, np.ndarray], t: np.ndarray, groups: np.ndarray,
                   x0: list[float]) -> np.ndarray:
    """Held-out APE of every row, fitting on the other groups."""
    out = np.zeros_like(t)
    for g in np.unique(groups):
        test = groups == g
        train = {k: v[~test] for k, v in cols.items()}
        p = fit_log(predict, train, t[~test], x0)
        out[test] = ape(predict(p, {k: v[test] for k, v in cols.items()}), t[test])
    return out


def provenance(files: list[str], rows: int, train: np.ndarray, cv: np.ndarray | None,
               cv_kind: str) -> dict[str, object]:
    out: dict[str, object] = {"files": sorted(set(files)), "rows": int(rows),
                              "date": dt.date.today().isoformat(),
                              "residual": stats(train)}
    if cv is not None:
        out["cv"] = {"kind": cv_kind, **stats(cv)}
    return out


# --- models ---------------------------------------------------------------------------------
def gemm_predict(peak: float, bw: float) -> Callable[[np.ndarray, dict[str, np.ndarray]],
                                                      np.ndarray]:
    def f(p: np.ndarray, c: dict[str, np.ndarray]) -> np.ndarray:
        e_c, z, e_b, t0, k0 = p
        m, k, n = c["m"], c["k"], c["n"]
        # k0: each output element's epilogue costs as much as k0 more steps of the reduction
        # (short-k GEMMs run further below peak).
        comp = 2 * ((k + k0) * m * n + k * z) / (peak * e_c)
        mem = (m * k + k * n + m * n) * B / (bw * e_b) + t0
        return np.maximum(comp, mem)
    return f


def vector_predict(bw: float) -> Callable[[np.ndarray, dict[str, np.ndarray]], np.ndarray]:
    def f(p: np.ndarray, c: dict[str, np.ndarray]) -> np.ndarray:
        e, t0 = p
        return t0 + c["bytes"] / (bw * e)
    return f


def fit_gpu(data: Path, gpu: str) -> tuple[dict[str, object], list[tuple[str, str, dict]]]:
    """GEMM and elementwise constants of one profiled GPU; rows of the accuracy table."""
    peak, bw = PROFILED[gpu]["peak_flops"], PROFILED[gpu]["bandwidth_bytes_s"]
    recs = mlp_rows(data, gpu)
    table: list[tuple[str, str, dict]] = []
    out: dict[str, object] = {"profiled_on": PROFILED[gpu]}
    g = [r for r in recs if r["cls"] == "gemm"]
    cols = {k: np.array([r[k] for r in g], dtype=np.float64) for k in ("m", "k", "n")}
    t = np.array([r["t"] for r in g])
    models = np.array([r["model"] for r in g])
    x0 = [0.8, 2e5, 0.85, 4e-6, 500.0]
    pred = gemm_predict(peak, bw)
    p = fit_log(pred, cols, t, x0)
    train = ape(pred(p, cols), t)
    cv = cross_validate(pred, cols, t, models, x0)
    out["gemm"] = {"compute_efficiency": round(float(p[0]), 4),
                   "fill_elements": round(float(p[1]), 1),
                   "bandwidth_efficiency": round(float(p[2]), 4),
                   "floor_us": round(float(p[3]) * 1e6, 3),
                   "epilogue_k": round(float(p[4]), 1),
                   "_fit": provenance([r["file"] for r in g], len(g), train, cv,
                                      "leave-one-model-out")}
    m, k, n = cols["m"], cols["k"], cols["n"]
    plain = ape(np.maximum(2 * m * k * n / (peak * PLAIN_C),
                           (m * k + k * n + m * n) * B / (bw * PLAIN_B)) + PLAIN_K, t)
    table.append((gpu, "gemm", {"rows": len(g), **_pair(train, cv, plain)}))
    small = m <= 128  # decode-sized GEMMs, where floors and fill matter
    table.append((gpu, "gemm, m <= 128", {"rows": int(small.sum()),
                                          **_pair(train[small], cv[small], plain[small])}))
    out["vector"] = {}
    for cls in ("norm", "rope", "act", "add", "embedding"):
        v = [r for r in recs if r["cls"] == cls]
        c = {"bytes": np.array([r["bytes"] for r in v], dtype=np.float64)}
        tv = np.array([r["t"] for r in v])
        mv = np.array([r["model"] for r in v])
        vp = vector_predict(bw)
        q = fit_log(vp, c, tv, [0.8, 3e-6])
        tr = ape(vp(q, c), tv)
        cvv = cross_validate(vp, c, tv, mv, [0.8, 3e-6])
        out["vector"][cls] = {"bandwidth_efficiency": round(float(q[0]), 4),
                              "floor_us": round(float(q[1]) * 1e6, 3),
                              "_fit": provenance([r["file"] for r in v], len(v), tr, cvv,
                                                 "leave-one-model-out")}
        plain = ape(c["bytes"] / (bw * PLAIN_B) + PLAIN_K, tv)
        table.append((gpu, cls, {"rows": len(v), **_pair(tr, cvv, plain)}))
    return out, table


# The plain roofline ridgeline used before these fits: 0.7 of the compute peak, 0.85 of the
# bandwidth, 2 us per kernel launch, 5 us and 0.85 x the datasheet link per collective.
PLAIN_C, PLAIN_B, PLAIN_K, PLAIN_LAT = 0.7, 0.85, 2e-6, 5e-6
LINK = {"h100": 450e9, "a100": 300e9, "a40": 32e9}


def _pair(train: np.ndarray, cv: np.ndarray | None, plain: np.ndarray | None = None
          ) -> dict[str, float]:
    out = {f"train_{k}": v for k, v in stats(train).items()}
    if plain is not None:
        out["plain_median_ape"] = stats(plain)["median_ape"]
    if cv is not None:
        out.update({f"cv_{k}": v for k, v in stats(cv).items()})
    return out


def fit_attention(data: Path) -> tuple[dict[str, object], list[tuple[str, str, dict]]]:
    """A100 FlashAttention prefill and decode kernels (the only attention.csv in the data)."""
    path = data / "compute/a100/codellama/CodeLlama-34b-Instruct-hf/attention.csv"
    rel = str(path.relative_to(data))
    rows = _rows(path)
    peak, bw = PROFILED["a100"]["peak_flops"], PROFILED["a100"]["bandwidth_bytes_s"]
    r0 = rows[0]
    tp = int(r0["num_tensor_parallel_workers"])
    hq = int(r0["n_q_head"]) // tp
    hkv = max(1, int(r0["n_kv_head"]) // tp)
    hd = int(r0["n_embd"]) // int(r0["n_q_head"])
    table: list[tuple[str, str, dict]] = []
    out: dict[str, object] = {}
    # Prefill: batch 1, chunk c over p cached tokens.
    pre = [r for r in rows if r["is_prefill"] == "True"]
    c = np.array([float(r["prefill_chunk_size"]) for r in pre])
    p = np.array([float(r["kv_cache_size"]) for r in pre])
    t = np.array([float(r["time_stats.attn_prefill.median"]) * 1e-3 for r in pre])
    cols = {"pairs": c * p + c * (c + 1) / 2, "pt": c, "pc": p}
    flop_pair = 4.0 * hq * hd

    def fpre(q: np.ndarray, x: dict[str, np.ndarray]) -> np.ndarray:
        # Throughput row vs latency row: a floor plus one CTA's serial walk over the keys.
        e, qw, kw, t0, ser = q
        return np.maximum((x["pairs"] + qw * x["pc"] + kw * x["pt"]) * flop_pair / (peak * e),
                          t0 + ser * (x["pc"] + x["pt"]))
    x0 = [0.5, 30.0, 100.0, 1e-5, 1e-8]
    q = fit_log(fpre, cols, t, x0)
    tr = ape(fpre(q, cols), t)
    # No second model: hold out each chunk-size band (short, mid, long chunks) in turn.
    band = np.digitize(c, [192, 768])
    cv = cross_validate(fpre, cols, t, band, x0)
    out["attention_prefill"] = {
        "compute_efficiency": round(float(q[0]), 4), "query_waste_per_cached_token":
        round(float(q[1]), 3), "key_waste_per_new_token": round(float(q[2]), 3),
        "floor_us": round(float(q[3]) * 1e6, 3),
        "serial_ns_per_token": round(float(q[4]) * 1e9, 4),
        "_fit": {**provenance([rel], len(pre), tr, cv, "leave-one-chunk-band-out "
                              "(c<192, 192-767, >=768; one model in the data)"),
                 "shape": f"h_q={hq} h_kv={hkv} d_h={hd} per GPU (Llama-2-70B TP2), "
                          "FlashAttention, block 16, batch 1"}}
    plain = ape(cols["pairs"] * flop_pair / (peak * PLAIN_C) + PLAIN_K, t)
    table.append(("a100", "attn_prefill", {"rows": len(pre), **_pair(tr, cv, plain)}))
    # Decode: b sequences of context T each.
    dec = [r for r in rows if r["is_prefill"] == "False"]
    b = np.array([float(r["batch_size"]) for r in dec])
    T = np.array([float(r["kv_cache_size"]) for r in dec])
    t = np.array([float(r["time_stats.attn_decode.median"]) * 1e-3 for r in dec])
    kv_tok = 2 * hkv * hd * B
    cols = {"dc": b * T, "dq": b}

    def fdec(q: np.ndarray, x: dict[str, np.ndarray]) -> np.ndarray:
        e, qt, t0 = q
        return t0 + (x["dc"] + qt * x["dq"]) * kv_tok / (bw * e)
    x0 = [0.6, 100.0, 1e-5]
    q = fit_log(fdec, cols, t, x0)
    tr = ape(fdec(q, cols), t)
    band = np.digitize(b, [9, 65])
    cv = cross_validate(fdec, cols, t, band, x0)
    out["attention_decode"] = {
        "bandwidth_efficiency": round(float(q[0]), 4),
        "kv_tokens_per_sequence": round(float(q[1]), 2), "floor_us": round(float(q[2]) * 1e6, 3),
        "_fit": {**provenance([rel], len(dec), tr, cv, "leave-one-batch-band-out "
                              "(b<=8, 9-64, >64; one model in the data)"),
                 "shape": f"h_q={hq} h_kv={hkv} d_h={hd} per GPU, paged KV block 16"}}
    plain = ape((cols["dc"] + cols["dq"]) * kv_tok / (bw * PLAIN_B) + PLAIN_K, t)
    table.append(("a100", "attn_decode", {"rows": len(dec), **_pair(tr, cv, plain)}))
    return out, table


def fit_collectives(data: Path) -> tuple[dict[str, object], list[tuple[str, str, dict]]]:
    """alpha-beta per topology, collective and GPU count (single-node rows only)."""
    out: dict[str, object] = {}
    table: list[tuple[str, str, dict]] = []
    for topo_dir in sorted((data / "network").iterdir()):
        topo = topo_dir.name
        out[topo] = {}
        for coll in ("all_reduce", "send_recv"):
            path = topo_dir / f"{coll}.csv"
            if not path.is_file():
                continue
            rows = _rows(path)
            out[topo][coll] = {}
            groups = sorted({(int(r["num_workers"]), int(r["devices_per_node"])) for r in rows})
            for p_gpus, per_node in groups:
                # send_recv devices_per_node=1 crosses nodes (or PCIe); keep it, labelled.
                sub = [r for r in rows if int(r["num_workers"]) == p_gpus
                       and int(r["devices_per_node"]) == per_node]
                if coll == "all_reduce" and per_node != p_gpus:
                    continue  # multi-node all-reduce: not a TP group
                size = np.array([float(r["size"]) for r in sub])
                t = np.array([float(r[f"time_stats.{coll}.median"]) * 1e-3 for r in sub])
                fac = 2.0 * (p_gpus - 1) / p_gpus if coll == "all_reduce" else 1.0

                def fcol(q: np.ndarray, x: dict[str, np.ndarray], fac: float = fac
                         ) -> np.ndarray:
                    return q[0] + fac * x["size"] / q[1]
                decade = np.floor(np.log10(size))
                # Sizes are spaced linearly (2 KiB..64 MiB): weight each decade equally, so
                # the few small messages decode sends set the latency.
                _, inv, cnt = np.unique(decade, return_inverse=True, return_counts=True)
                cols = {"size": size, "_w": 1.0 / cnt[inv]}
                x0 = [2e-5, 1e11]
                q = fit_log(fcol, cols, t, x0)
                tr = ape(fcol(q, cols), t)
                cv = cross_validate(fcol, cols, t, decade, x0)
                key = str(p_gpus) if per_node == p_gpus else f"{p_gpus}_across"
                out[topo][coll][key] = {
                    "latency_us": round(float(q[0]) * 1e6, 3),
                    "bus_bandwidth_bytes_s": float(f"{q[1]:.4g}"),
                    "_fit": {**provenance([str(path.relative_to(data))], len(sub), tr, cv,
                                          "leave-one-size-decade-out"),
                             "residual_by_size": decade_stats(tr, size),
                             "cv_by_size": decade_stats(cv, size)}}
                small = size <= 1 << 20
                link = LINK[topo.split("_")[0]]
                plain = ape(PLAIN_LAT + fac * size / (link * PLAIN_B), t)
                table.append((topo, f"{coll} p={key}",
                              {"rows": len(sub), **_pair(tr, cv, plain),
                               "small_msg_median_us": round(float(np.median(t[small])) * 1e6,
                                                            1),
                               "latency_us": round(float(q[0]) * 1e6, 1),
                               **decade_stats(tr, size)}))
    return out, table


# Catalog GPUs: which profiled part's kernel constants and which measured topology they take.
# profiled_link: the datasheet link (catalog interconnect_bandwidth_bytes_s) of the GPU the
# topology was measured on, so bus efficiency = fitted bandwidth / that link carries over to a
# GPU with another link. PCIe parts always use the 4-GPU pairwise rows (those cross PCIe).
NVL4, NVL3, GEN5, GEN4 = 450e9, 300e9, 64e9, 32e9
DERIVED = {
    "h100-sxm": ("h100", "h100_dgx", 0, NVL4, "fitted (DGX H100 SXM profiles)"),
    "a100-80gb": ("a100", "a100_dgx", 0, NVL3, "fitted (A100 80GB DGX profiles)"),
    "a100-40gb": ("a100", "a100_dgx", 0, NVL3, "derived: same Ampere SXM part with 40 GB; "
                  "A100 80GB's efficiencies and floors on its own datasheet peaks"),
    "h100-pcie": ("h100", "h100_pairwise_nvlink", 4, GEN5, "derived: Hopper; H100 SXM's "
                  "efficiencies and floors on its own datasheet peaks; collectives from the "
                  "4-GPU h100_pairwise_nvlink rows (they cross PCIe Gen5)"),
    "h200": ("h100", "h100_dgx", 0, NVL4, "derived: Hopper SXM (H100 die, HBM3e); H100's "
             "efficiencies and floors on its own datasheet peaks; DGX H100 collectives"),
    "h20": ("h100", "h100_dgx", 0, NVL4, "derived: Hopper; H100's efficiencies and floors on "
            "its own datasheet peaks; DGX H100 collectives"),
    "b200": ("h100", "h100_dgx", 0, NVL4, "derived: no Blackwell data; H100's efficiencies "
             "and floors on its own datasheet peaks; DGX H100 collective latency, bus "
             "efficiency on its own NVLink"),
    "l40s": ("a40", "a100_pairwise_nvlink", 4, GEN4, "derived: PCIe GDDR6 part like the A40; "
             "A40's efficiencies and floors on its own datasheet peaks; collectives from the "
             "4-GPU a100_pairwise_nvlink rows (they cross PCIe Gen4)"),
    "mi300x": ("h100", "h100_dgx", 0, NVL4, "derived: no AMD data; H100's efficiencies and "
               "floors on its own datasheet peaks; DGX H100 collectives (a guess)"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    profiles: dict[str, object] = {}
    table: list[tuple[str, str, dict]] = []
    for gpu in ("h100", "a100", "a40"):
        prof, rows = fit_gpu(args.data, gpu)
        profiles[gpu] = prof
        table += rows
    attn, rows = fit_attention(args.data)
    table += rows
    coll, rows = fit_collectives(args.data)
    table += rows
    doc = {
        "_about": "Kernel-level constants fitted on measured CUDA kernel times "
                  "(benchmarks/accuracy/fit_kernel_constants.py; "
                  "docs/model.md 'Fitted kernel model'). "
                  "Data: microsoft/vidur data/profiling (MIT), as copied under "
                  "shared/data/vidur-profiling (SOURCE.md): fp16 kernels, median of repeats.",
        "date": dt.date.today().isoformat(),
        "objective": "mean |log(pred/measured)| per class; residual and cv are APE "
                     "|pred-measured|/measured over the rows named",
        "profiles": profiles,
        "attention": {**attn, "profiled_on": "a100",
                      "profiled_peak_flops": PROFILED["a100"]["peak_flops"],
                      "_note": "Fitted on A100 only (the one attention.csv); other "
                      "GPUs take the same waste counts and floors (microseconds), and the "
                      "efficiencies in the same ratio to their own GEMM fit as on A100 "
                      "(prefill: GEMM compute efficiency; decode: GEMV bandwidth efficiency)."},
        "collectives": coll,
        "hardware": {k: {"kernels": v[0], "topology": v[1], "topology_gpus": v[2],
                         "profiled_link_bytes_s": v[3], "rule": v[4]}
                     for k, v in DERIVED.items()},
        "default_hardware": {"kernels": "h100", "topology": "h100_dgx", "topology_gpus": 0,
                             "profiled_link_bytes_s": NVL4,
                             "rule": "derived (default): a catalog GPU not listed takes H100's "
                                     "efficiencies and floors on its own datasheet peaks"},
        "dtype_rule": "Amdahl: a GEMM at a dtype whose peak is r x the 16-bit peak keeps the "
                      "16-bit fit's non-math time; e_x = (1/r) / (1/e_16 - 1 + 1/r). "
                      "Not fitted (the data is fp16 only).",
        "_sizes_note": "h100_pairwise_nvlink/send_recv.csv is byte-identical to "
                       "a100_pairwise_nvlink/send_recv.csv in the data (the same fit results).",
    }
    # keep the vLLM-side scales (benchmarks/accuracy/fit_vllm_kernel_scales.py)
    if args.out.is_file():
        old = json.loads(args.out.read_text())
        if "vllm" in old:
            doc["vllm"] = old["vllm"]
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    print("| GPU / topology | class | rows | plain roofline median APE | train median APE | "
          "train mean APE | CV median APE | CV mean APE |")
    print("|---|---|---|---|---|---|---|---|")
    for gpu, cls, s in table:
        extra = ""
        if "latency_us" in s:
            extra = f" (alpha {s['latency_us']} us; measured median <=1 MiB " \
                    f"{s['small_msg_median_us']} us; train median APE <=1 MiB " \
                    f"{100 * s['small_msg_median_ape']:.0f}%, above " \
                    f"{100 * s['large_msg_median_ape']:.0f}%)"
        print(f"| {gpu} | {cls}{extra} | {s['rows']} | {_pct(s, 'plain_median_ape')} | "
              f"{_pct(s, 'train_median_ape')} | "
              f"{_pct(s, 'train_mean_ape')} | {_pct(s, 'cv_median_ape')} | "
              f"{_pct(s, 'cv_mean_ape')} |")


def _pct(s: dict, key: str) -> str:
    return f"{100 * s[key]:.1f}%" if key in s and not math.isnan(s[key]) else "-"


if __name__ == "__main__":
    main()
