"""Fit attention, MLA and collective costs on NVIDIA AIConfigurator's measured kernel tables.

Per (GPU, engine, KV dtype) this fits a few constants of each operator class in the form
ridgeline's step model evaluates (`ridgeline.perf.measured_attention`): every operator is
max(compute row . w, memory row . w) with rows affine in the work.

- decode attention (one layer, a batch of B sequences of context S, window w caps S):
  compute  compute_floor + B S_w 4 h_q d / (C e_c)
  memory   floor + B per_seq + B h_kv per_seq_kv_head + B h_q per_seq_query_head
           + B S_w h_kv per_token_kv_head + B S_w 2 h_kv d b_kv / (beta e_b)
  (per_seq_kv_head: one work unit per sequence and KV head, its launch, split and merge;
  per_seq_query_head: each query head's Q in, O out and split partials merged;
  per_token_kv_head: each cached token's page lookup and softmax step per KV head, which
  does not scale with the head dim)
- prefill attention (B sequences of S new tokens, causal pairs P, banded by the window):
  compute  compute_floor + (P + k_w B S) 4 h_q d / (C e_c) + h_q (p_pair P + p_tok B S)
  memory   floor + B S serial + B S (2 h_q + 2 h_kv) d b_a / (beta e_b)
  (serial: one CTA's walk over the keys, what a low-occupancy causal prefill waits on;
  p_pair, p_tok: per query head costs that do not scale with the head dim, the softmax's
  exponentials and rescaling and the causal mask). Window-0 rows that run faster than the
  128-window rows of the same shape (a backend that reads window 0 as no look-back, not as
  no window) are left out: they do not time causal attention. A kernel that quantizes the
  query to fp8 with an fp8 cache (SGLang's TRT-LLM MHA) is fitted on its fp8-query rows.
- MLA decode (absorbed: each token reads its compressed latent, kv_lora_rank + rope dims):
  compute  compute_floor + B S 2 h (576 + 512) / (C e_c)
  memory   floor + B per_seq + B h per_seq_head + B S 576 b_kv / (beta e_b)
  (per_seq_head: each head's query in, output out and split partials merged)
- MLA prefill: as prefill (with the serial term) with 2 h (192 + 128) FLOPs per pair and
  h (192 + 128) 2 b_a bytes per token.
- collectives: alpha + f(p) bytes / bus_bandwidth per GPU count p (all-reduce f = 2(p-1)/p,
  all-gather and all-to-all f = (p-1)/p; DeepEP dispatch + combine: alpha + a cost per
  token and per expert + bytes / bw, see `deepep_fits`): the
  one line per GPU count. Beside it, the size-banded form the collective's own time follows,
  which the step model charges at each step's message size: message-size bands split at
  edges found in the data, each alpha + x / bus_bandwidth + gamma sqrt(x) in the bus bytes
  x = f(p) bytes (the sqrt term: a pipelined ring's chunking, whose optimal chunk grows as
  sqrt(x), so the effective bandwidth ramps with size). NCCL: three bands of at least 5
  message sizes each (its LL, LL128 and Simple protocols); an engine's custom all-reduce:
  three of at least 3 (one-shot, two-shot, then its hand-over to NCCL). The bus bandwidth
  is capped at the datasheet link, for an all-reduce on parts that reduce in the NVSwitch
  (Hopper, Blackwell) at the link x 2(p-1)/p (each byte goes to the switch and back once).

C and beta are the GPU's datasheet 16-bit peak and HBM bandwidth (ridgeline's hardware
catalog), so the efficiencies are fractions of the datasheet (bounded by 1). Each class is
fitted by relative least squares with non-negative coefficients; the max form by
alternating which side each row is on, from two starts (the compute side's own floor lets a
kernel that waits on a fixed cost while it streams be max(floor, stream)). The "additive"
variant (the compute term also in the memory row, so the two add) is kept where its
training error is lower. Each attention/MLA class is then refitted, in its form, toward the
least absolute relative error (iteratively reweighted) where that lowers its training median.
The decode classes are fitted with and without their per-head columns (per_seq_query_head,
per_token_kv_head; MLA's per_seq_head) and keep them where they lower the CV median by 0.1
point or more (`_fit.per_head_terms`).

Rows: contexts of at least MIN_CONTEXT tokens (serving contexts). Cross-validation:
leave-one-model-shape-out (each distinct (h_q, h_kv, d), or MLA's heads per GPU, held out in
turn and predicted by the fit on the others); collectives: leave one message-size decade
out (the band edge refitted in each fold), and leave one GPU count out (its rows predicted
from the nearest measured count). `--only-collectives` refits the collectives alone into the
existing catalog (seconds instead of minutes); `--only-attention` refits attention and MLA
alone, keeping the catalog's collectives and DeepEP entries as they are (`--only-decode`:
decode attention and MLA decode alone, every other entry kept); `--jobs N` fits N
GPUs at once. Writes
src/ridgeline/specs/data/kernels_measured_attention_comm.json and
benchmarks/results/aic_kernel_fits_attention_comm.json.

    .venv/bin/python benchmarks/accuracy/fit_aic_attention_comm.py   # ~10 CPU-minutes
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

try:
    import pyarrow.parquet as pq
except ImportError:  # pragma: no cover - the test extra installs it
    print("error: pyarrow: not installed; allowed: pip install -e '.[test]'", file=sys.stderr)
    sys.exit(2)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))

from ridgeline.perf.measured_attention import ranks_touched  # noqa: E402
from ridgeline.specs.hardware import load_hardware  # noqa: E402

# AIConfigurator's system folder -> ridgeline's catalog GPU (datasheet peaks).
GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200", "gb200": "gb200",
        "a100_sxm": "a100-80gb", "l40s": "l40s"}
ENGINES = ("vllm", "sglang", "trtllm")
KV_DTYPES = ("bfloat16", "fp8")
# DeepSeek-V3/R1's MLA dimensions (the tables' shape): latent, rope, nope and value dims.
KV_LORA, ROPE, NOPE, V_DIM = 512, 64, 128, 128
ACT_BYTES = 2.0
DTYPE_BYTES = {"half": 2.0, "bfloat16": 2.0, "float16": 2.0, "int8": 1.0, "fp8": 1.0}
MIN_ROWS = 30
# Scale of the per-head columns (seconds per unit: picoseconds) so the least squares sees
# columns of like magnitude.
PER_HEAD_UNIT_S = 1e-12
# The per (sequence, head) columns': nanoseconds.
PER_SEQ_HEAD_UNIT_S = 1e-9
# Serving contexts: a prompt and its output are rarely under this many tokens, and the tables'
# tiny contexts (2-64 tokens at batch 2048) measure launch grids, not attention.
MIN_CONTEXT = 128


def shared_data() -> Path:
    env = os.environ.get("RIDGELINE_SHARED_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


def read(path: Path) -> dict[str, np.ndarray]:
    t = pq.read_table(path)
    d = {c: np.asarray(t.column(c).to_pylist()) for c in t.schema.names}
    n = t.num_rows
    for col in ("window_size", "step"):  # older tables: no window, no decode step column
        if col not in d and "latency" in d:
            d[col] = np.zeros(n, dtype=np.int64)
    return d


def one_version(root: Path, gpu: str, family: str, engine: str) -> Path | None:
    """The version folder of `family`/`engine` (the data keeps one per family and engine)."""
    base = root / gpu / family / engine
    if not base.is_dir():
        return None
    dirs = sorted(p for p in base.iterdir() if p.is_dir())
    return dirs[-1] if dirs else None


# --- fitting --------------------------------------------------------------------------------
def nnls_rel(x: np.ndarray, t: np.ndarray, lower: np.ndarray | None = None) -> np.ndarray:
    """min sum ((x w - t) / t)^2 with w >= lower (0 by default; active set: drop the most
    negative column). A column normalized by a datasheet peak gets lower bound 1: no kernel
    beats the datasheet."""
    lb = np.zeros(x.shape[1]) if lower is None else np.asarray(lower, dtype=float)
    return lb + _nnls_rel(x, t - x @ lb, t)


def _nnls_rel(x: np.ndarray, y: np.ndarray, t: np.ndarray) -> np.ndarray:
    a = x / t[:, None]
    b = y / t
    active = [j for j in range(x.shape[1]) if np.any(x[:, j] != 0)]
    w = np.zeros(x.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(a[:, active], b, rcond=None)
        if np.all(sol >= 0):
            w[:] = 0.0
            w[active] = sol
            return w
        active.pop(int(np.argmin(sol)))
    return w


def nnls_rel_fast(x: np.ndarray, t: np.ndarray, lower: np.ndarray | None = None,
                  weight: np.ndarray | None = None) -> np.ndarray:
    """nnls_rel (rows' relative errors weighted by `weight`, squared) by the normal equations
    of the column-equilibrated problem: the attention tables' tens of thousands of rows and
    few columns, solved many times over in the alternation and the CV folds."""
    lb = np.zeros(x.shape[1]) if lower is None else np.asarray(lower, dtype=float)
    wt = np.ones_like(t) if weight is None else weight
    a = x * (wt / t)[:, None]
    b = (t - x @ lb) / t * wt
    norm = np.sqrt((a * a).sum(axis=0))
    active = [j for j in range(x.shape[1]) if norm[j] > 0]
    a = a / np.where(norm > 0, norm, 1.0)
    gram, rhs = a.T @ a, a.T @ b
    w = np.zeros(x.shape[1])
    while active:
        idx = np.array(active)
        try:
            sol = np.linalg.solve(gram[np.ix_(idx, idx)], rhs[idx])
        except np.linalg.LinAlgError:
            sol, *_ = np.linalg.lstsq(a[:, idx], b, rcond=None)
        if np.all(sol >= 0):
            w[idx] = sol / norm[idx]
            return lb + w
        active.pop(int(np.argmin(sol)))
    return lb + w


def nnls_rel_weighted(x: np.ndarray, t: np.ndarray, lower: np.ndarray, weight: np.ndarray
                      ) -> np.ndarray:
    """nnls_rel with each row's relative error weighted by `weight` (squared)."""
    return nnls_rel_fast(x, t, lower, weight)


# Rounds of reweighting toward the median relative error, and the error below which a row
# counts as fitted (its weight stops growing).
L1_ROUNDS, L1_FLOOR = 6, 0.02


def refine_l1(xc: np.ndarray, xm: np.ndarray, t: np.ndarray, lc: np.ndarray, lm: np.ndarray,
              model: dict[str, Any]) -> dict[str, Any]:
    """`model` refitted, in its form (additive or max, each row on the side it falls), by
    iteratively reweighted least squares toward the least absolute relative error (weights
    1/|error|): the median APE is the bar, and a few rows far off (launch grids, cache
    thrash) would otherwise pull every row's fit."""
    mdl = {"wc": model["wc"].copy(), "wm": model["wm"].copy(), "additive": model["additive"]}
    nc = xc.shape[1]
    for _ in range(L1_ROUNDS):
        wt = 1.0 / np.sqrt(np.maximum(np.abs(predict(mdl, xc, xm) / t - 1.0), L1_FLOOR))
        if mdl["additive"]:
            both = nnls_rel_weighted(np.hstack([xc, xm]), t, np.concatenate([lc, lm]), wt)
            mdl["wc"], mdl["wm"] = both[:nc], both[nc:]
            continue
        side = xc @ mdl["wc"] > xm @ mdl["wm"]
        if side.sum() >= MIN_ROWS:
            mdl["wc"] = nnls_rel_weighted(xc[side], t[side], lc, wt[side])
        if (~side).sum() >= MIN_ROWS:
            mdl["wm"] = nnls_rel_weighted(xm[~side], t[~side], lm, wt[~side])
    return mdl


def predict(model: dict[str, Any], xc: np.ndarray, xm: np.ndarray) -> np.ndarray:
    c = xc @ model["wc"]
    m = xm @ model["wm"]
    if model["additive"]:
        m = m + c
    return np.maximum(c, m)


def fit_max_affine(xc: np.ndarray, xm: np.ndarray, t: np.ndarray,
                   lc: np.ndarray, lm: np.ndarray, init: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
    """The better (training median APE) of max(xc wc, xm wm) and xc wc + xm wm, with lower
    bounds lc, lm on the coefficients. `init` (a fit on more rows, for the CV folds): its
    form only, from its own coefficients."""
    nc = xc.shape[1]
    if init is not None and init["additive"]:
        both = nnls_rel_fast(np.hstack([xc, xm]), t, np.concatenate([lc, lm]))
        return {"wc": both[:nc], "wm": both[nc:], "additive": True}
    if init is not None:
        starts = [{"wc": init["wc"].copy(), "wm": init["wm"].copy()}]
        best: dict[str, Any] | None = None
        best_err = np.inf
    else:
        both = nnls_rel_fast(np.hstack([xc, xm]), t, np.concatenate([lc, lm]))
        best = {"wc": both[:nc], "wm": both[nc:], "additive": True}
        best_err = float(np.median(np.abs(predict(best, xc, xm) / t - 1.0)))
        # The max form by alternating sides, from two starts: the additive split, and each
        # side fitted alone on all rows (the larger prediction takes the row).
        starts = [{"wc": both[:nc].copy(), "wm": both[nc:].copy()},
                  {"wc": nnls_rel_fast(xc, t, lc), "wm": nnls_rel_fast(xm, t, lm)}]
    for start in starts:
        mx = {**start, "additive": False}
        side = xc @ mx["wc"] > xm @ mx["wm"]
        for _ in range(25):
            if side.sum() >= MIN_ROWS:
                mx["wc"] = nnls_rel_fast(xc[side], t[side], lc)
            if (~side).sum() >= MIN_ROWS:
                mx["wm"] = nnls_rel_fast(xm[~side], t[~side], lm)
            new = xc @ mx["wc"] > xm @ mx["wm"]
            if np.array_equal(new, side):
                break
            side = new
        err = float(np.median(np.abs(predict(mx, xc, xm) / t - 1.0)))
        if err < best_err:
            best, best_err = mx, err
    assert best is not None
    return best


def cv_groups(fit: Callable[[np.ndarray], Any], pred: Callable[..., np.ndarray],
              groups: np.ndarray, t: np.ndarray, min_train: int = MIN_ROWS) -> np.ndarray:
    """APE of every row predicted by the fit on the other groups."""
    out = np.full(t.shape, np.nan)
    for g in np.unique(groups):
        held = groups == g
        if held.all() or (~held).sum() < min_train:
            continue
        model = fit(~held)
        out[held] = np.abs(pred(model, held) / t[held] - 1.0)
    return out[~np.isnan(out)]


def summary(ape: np.ndarray) -> dict[str, float]:
    if not ape.size:
        return {"median_ape": float("nan"), "mean_ape": float("nan"), "rows": 0}
    return {"median_ape": round(float(np.median(ape)), 4),
            "mean_ape": round(float(np.mean(ape)), 4),
            "p90_ape": round(float(np.quantile(ape, 0.9)), 4), "rows": int(ape.size)}


def fit_class(xc: np.ndarray, xm: np.ndarray, t: np.ndarray, groups: np.ndarray,
              cv_kind: str, lc: list[float], lm: list[float]
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    lcv, lmv = np.asarray(lc, dtype=float), np.asarray(lm, dtype=float)
    ls = fit_max_affine(xc, xm, t, lcv, lmv)
    l1 = refine_l1(xc, xm, t, lcv, lmv, ls)
    # The reweighted fit where its training median is the lower (a class whose rows follow
    # two regimes can lose the smaller one to it).
    use_l1 = bool(np.median(np.abs(predict(l1, xc, xm) / t - 1.0))
                  < np.median(np.abs(predict(ls, xc, xm) / t - 1.0)))
    model = l1 if use_l1 else ls
    resid = np.abs(predict(model, xc, xm) / t - 1.0)

    def fold(keep: np.ndarray) -> dict[str, Any]:
        # Each fold refits the form the full fit chose, from its coefficients (the held-out
        # shape's rows never enter the fold's fit).
        m = fit_max_affine(xc[keep], xm[keep], t[keep], lcv, lmv, model)
        return refine_l1(xc[keep], xm[keep], t[keep], lcv, lmv, m) if use_l1 else m

    cv = cv_groups(fold, lambda mdl, held: predict(mdl, xc[held], xm[held]), groups, t)
    return model, {"residual": summary(resid), "cv": {"kind": cv_kind, **summary(cv)},
                   "objective": "least absolute relative error" if use_l1 else
                   "relative least squares"}


# The least CV median gain (0.1 point) for which a decode class keeps its per-head columns.
PER_HEAD_CV_GAIN = 0.001


def fit_per_head_terms(xc: np.ndarray, xm: np.ndarray, t: np.ndarray, groups: np.ndarray,
                       cv_kind: str, lc: list[float], lm: list[float], extra: list[int]
                       ) -> tuple[dict[str, Any], dict[str, Any]]:
    """fit_class with the memory row's per-head columns `extra` and without them, the
    columns kept where they lower the CV median by PER_HEAD_CV_GAIN or more (a dropped
    column's coefficient 0). A per-head cost fitted on the other shapes can miss a held-out
    head count by more than it gains on the training rows, so the CV, not the training
    error, decides; as that choice is made on the folds it is scored on, a smaller gain is
    not taken for one."""
    with_terms = fit_class(xc, xm, t, groups, cv_kind, lc, lm)
    keep = [j for j in range(xm.shape[1]) if j not in extra]
    model, stats = fit_class(xc, xm[:, keep], t, groups, cv_kind, lc, [lm[j] for j in keep])
    if with_terms[1]["cv"]["median_ape"] <= stats["cv"]["median_ape"] - PER_HEAD_CV_GAIN:
        return with_terms[0], {**with_terms[1], "per_head_terms": True}
    wm = np.zeros(xm.shape[1])
    wm[keep] = model["wm"]
    return {**model, "wm": wm}, {**stats, "per_head_terms": False}


# --- attention ---------------------------------------------------------------------------------
def banded_pairs(s: np.ndarray, w: np.ndarray) -> np.ndarray:
    """sum_{k=1}^{S} min(k, w) (w = 0: no window)."""
    full = s * (s + 1) / 2.0
    ww = np.where(w > 0, w, s)
    banded = np.where(s <= ww, full, ww * (ww + 1) / 2.0 + (s - ww) * ww)
    return np.where(w > 0, banded, full)


def pick_source(d: dict[str, np.ndarray], mask: np.ndarray) -> str | None:
    """The kernel the engine runs for these rows: the source with the most measured rows."""
    src, cnt = np.unique(d["kernel_source"][mask], return_counts=True)
    return str(src[np.argmax(cnt)]) if src.size else None


# Prefill kernels that quantize the query to fp8 when the KV cache is fp8 (SGLang's TRT-LLM
# MHA backend; its XQA decode keeps the 16-bit query): their fp8-cache prefill rows timed
# with a 16-bit query are not what the engine runs.
FP8_QUERY_WITH_FP8_CACHE = frozenset({"trtllm_mha"})
# A full causal prefill of S >> w tokens does about S / (2 w) times the work of one banded by
# a window of w: where the window-0 rows take under this many times the 128-window rows' time
# at the longest context, they did not run full causal attention.
CAUSAL_OVER_WINDOW_MIN = 2.0


def window_zero_is_causal(d: dict[str, np.ndarray], mask: np.ndarray) -> bool:
    """Whether the rows of `mask` with window 0 time full causal attention: their median time
    over the 128-window rows of the same shape and batch at the longest context both were
    measured at is at least CAUSAL_OVER_WINDOW_MIN. SGLang's TRT-LLM MHA (B200) and
    FlashAttention (L40S) backends take window 0 as a zero-token look-back: those rows grow
    linearly in the context and run faster than the 128-window ones."""
    w0, w128 = mask & (d["window_size"] == 0), mask & (d["window_size"] == 128)
    if not w0.any() or not w128.any():
        return True
    s_max = min(d["isl"][w0].max(), d["isl"][w128].max())
    cols = ("batch_size", "num_heads", "num_key_value_heads", "head_dim", "attn_dtype")

    def by_shape(m: np.ndarray) -> dict[tuple[Any, ...], float]:
        m = m & (d["isl"] == s_max)
        return {tuple(r[:-1]): float(r[-1]) for r in zip(*(d[c][m].tolist() for c in cols),
                                                         d["latency"][m].tolist(), strict=True)}

    a, b = by_shape(w0), by_shape(w128)
    ratios = [a[k] / b[k] for k in a if k in b and b[k] > 0]
    return not ratios or float(np.median(ratios)) >= CAUSAL_OVER_WINDOW_MIN


def attention_fits(path: Path, hw: Any, decode: bool, files: list[str]) -> dict[str, Any]:
    d = read(path)
    out: dict[str, Any] = {}
    c16, bw = hw.peak("bf16"), hw.memory_bandwidth_bytes_s
    for kv in KV_DTYPES:
        m0 = d["kv_cache_dtype"] == kv
        src = pick_source(d, m0)
        if src is None:
            continue
        m = m0 & (d["kernel_source"] == src) & (d["num_heads"] % d["num_key_value_heads"] == 0)
        m &= (d["latency"] > 0) & (d["isl"] + d["step"] >= MIN_CONTEXT)
        if not decode and kv == "fp8" and src in FP8_QUERY_WITH_FP8_CACHE:
            m &= d["attn_dtype"] == "fp8"
        dropped_window_zero = not decode and not window_zero_is_causal(d, m)
        if dropped_window_zero:
            m &= d["window_size"] > 0
        if m.sum() < MIN_ROWS:
            continue
        b = d["batch_size"][m].astype(float)
        hq = d["num_heads"][m].astype(float)
        hkv = d["num_key_value_heads"][m].astype(float)
        hd = d["head_dim"][m].astype(float)
        w = d["window_size"][m].astype(float)
        t = d["latency"][m].astype(float) * 1e-3
        b_kv = DTYPE_BYTES[kv]
        shape = (hq * 1e6 + hkv * 1e3 + hd).astype(np.int64)
        if decode:
            s = d["isl"][m].astype(float) + d["step"][m].astype(float)
            s_w = np.where(w > 0, np.minimum(s, w), s)
            xc = np.column_stack([b * s_w * 4.0 * hq * hd / c16, np.ones_like(t)])
            # b hkv: one work unit (a CTA's launch, split and merge) per sequence and KV head;
            # b hq: each query head's Q in, O out and split partials merged; b s_w hkv: each
            # cached token's page lookup and softmax step per KV head (not by the head dim).
            xm = np.column_stack([np.ones_like(t), b, b * hkv, b * hq * PER_SEQ_HEAD_UNIT_S,
                                  b * s_w * hkv * PER_HEAD_UNIT_S,
                                  b * s_w * 2.0 * hkv * hd * b_kv / bw])
        else:
            s = d["isl"][m].astype(float)
            pairs = b * banded_pairs(s, w)
            fpp = 4.0 * hq * hd
            # Per (pair, query head) and (new token, query head) costs that do not scale with
            # the head dim: the softmax's exponentials and rescaling, the causal mask.
            xc = np.column_stack([pairs * fpp / c16, b * s * fpp / c16, np.ones_like(t),
                                  pairs * hq * PER_HEAD_UNIT_S, b * s * hq * PER_HEAD_UNIT_S])
            xm = np.column_stack([np.ones_like(t), b * s,
                                  b * s * (2 * hq + 2 * hkv) * hd * ACT_BYTES / bw])
        # Efficiency columns (normalized by the peaks) >= 1: at most the datasheet.
        lc, lm = [1.0] + [0.0] * (xc.shape[1] - 1), [0.0] * (xm.shape[1] - 1) + [1.0]
        if decode:
            model, stats = fit_per_head_terms(xc, xm, t, shape, "leave-one-model-shape-out",
                                              lc, lm, [3, 4])
        else:
            model, stats = fit_class(xc, xm, t, shape, "leave-one-model-shape-out", lc, lm)
        const = _attention_constants(model, decode)
        # The most KV heads per GPU measured: more is an extrapolation ridgeline refuses.
        const["max_kv_heads"] = int(hkv.max())
        const["_fit"] = {"files": files, "kernel_source": src, "rows": int(m.sum()),
                         "shapes": int(np.unique(shape).size), **stats}
        if dropped_window_zero:
            const["_fit"]["window_zero_rows"] = ("dropped: not full causal (faster than the "
                                                 "128-token window at the longest context)")
        out[kv] = const
    return out


def _attention_constants(model: dict[str, Any], decode: bool) -> dict[str, Any]:
    """The catalog constants of a fitted attention or MLA model: decode (compute, floor, per
    sequence, bandwidth) or prefill (compute, key waste, floor, serial, bandwidth)."""
    wc, wm = model["wc"], model["wm"]
    if decode:
        const = {"compute_efficiency": _inv(wc[0]), "compute_floor_us": _us(wc[1]),
                 "floor_us": _us(wm[0]), "per_seq_us": _us(wm[1]),
                 "bandwidth_efficiency": _inv(wm[-1])}
        if wm.size > 4:  # attention (MLA has no KV heads)
            const["per_seq_kv_head_us"] = _us(wm[2])
            const["per_seq_query_head_ns"] = _ns(wm[3])
            const["per_token_kv_head_ps"] = float(f"{wm[4] * PER_HEAD_UNIT_S * 1e12:.4g}")
        else:
            const["per_seq_head_ns"] = _ns(wm[2])
    else:
        const = {"compute_efficiency": _inv(wc[0]), "compute_floor_us": _us(wc[2]),
                 "key_waste_per_new_token": round(float(wc[1] / wc[0]), 3) if wc[0] else 0.0,
                 "floor_us": _us(wm[0]), "serial_ns_per_token": round(float(wm[1]) * 1e9, 4),
                 "bandwidth_efficiency": _inv(wm[2])}
        if wc.size > 3:  # attention: per-head costs (MLA's head count is its shape)
            const["ps_per_pair_head"] = float(f"{wc[3] * PER_HEAD_UNIT_S * 1e12:.4g}")
            const["ps_per_token_head"] = float(f"{wc[4] * PER_HEAD_UNIT_S * 1e12:.4g}")
    const["additive"] = bool(model["additive"])
    return const


def _inv(x: float) -> float:
    """An efficiency from a seconds-per-unit coefficient (0 coefficient: the term is unused)."""
    return round(float(1.0 / x), 4) if x > 0 else 0.0


def _us(x: float) -> float:
    return round(float(x) * 1e6, 4)


def _ns(x: float) -> float:
    """A per (sequence, head) coefficient (in PER_SEQ_HEAD_UNIT_S) in nanoseconds."""
    return float(f"{x * PER_SEQ_HEAD_UNIT_S * 1e9:.4g}")


def mla_fits(path: Path, hw: Any, decode: bool, files: list[str]) -> dict[str, Any]:
    d = read(path)
    out: dict[str, Any] = {}
    c16, bw = hw.peak("bf16"), hw.memory_bandwidth_bytes_s
    lat = KV_LORA + ROPE
    for kv in KV_DTYPES:
        m0 = d["kv_cache_dtype"] == kv
        src = pick_source(d, m0)
        if src is None:
            continue
        m = m0 & (d["kernel_source"] == src) & (d["latency"] > 0)
        m &= d["isl"] + d["step"] >= MIN_CONTEXT
        if m.sum() < MIN_ROWS:
            continue
        b = d["batch_size"][m].astype(float)
        # num_heads is per GPU already (x tp_size = the model's 128 or 64 heads).
        h = d["num_heads"][m].astype(float)
        t = d["latency"][m].astype(float) * 1e-3
        b_kv = DTYPE_BYTES[kv]
        if decode:
            s = d["isl"][m].astype(float) + d["step"][m].astype(float)
            xc = np.column_stack([b * s * 2.0 * h * (lat + KV_LORA) / c16, np.ones_like(t)])
            # b h: each head's query in, output out and split partials merged.
            xm = np.column_stack([np.ones_like(t), b, b * h * PER_SEQ_HEAD_UNIT_S,
                                  b * s * lat * b_kv / bw])
        else:
            s = d["isl"][m].astype(float)
            fpp = 2.0 * h * (NOPE + ROPE + V_DIM)
            xc = np.column_stack([b * s * (s + 1) / 2.0 * fpp / c16, b * s * fpp / c16,
                                  np.ones_like(t)])
            xm = np.column_stack([np.ones_like(t), b * s,
                                  b * s * h * (NOPE + ROPE + V_DIM) * 2 * ACT_BYTES / bw])
        lc, lm = [1.0] + [0.0] * (xc.shape[1] - 1), [0.0] * (xm.shape[1] - 1) + [1.0]
        if decode:
            model, stats = fit_per_head_terms(xc, xm, t, h.astype(np.int64),
                                              "leave-one-heads-per-gpu-out", lc, lm, [2])
        else:
            model, stats = fit_class(xc, xm, t, h.astype(np.int64),
                                     "leave-one-heads-per-gpu-out", lc, lm)
        const = _attention_constants(model, decode)
        const["_fit"] = {"files": files, "kernel_source": src, "rows": int(m.sum()),
                         "shapes": int(np.unique(h).size), **stats}
        out[kv] = const
    return out


# --- collectives -------------------------------------------------------------------------------
def bus_factor(op: str, p: np.ndarray) -> np.ndarray:
    return np.where(p > 1, (2.0 if op == "all_reduce" else 1.0) * (p - 1) / p, 0.0)


def alpha_beta(size_bytes: np.ndarray, factor: np.ndarray, t: np.ndarray
               ) -> tuple[dict[str, float], dict[str, Any]]:
    x = np.column_stack([np.ones_like(t), factor * size_bytes])
    w = nnls_rel(x, t)
    resid = np.abs(x @ w / t - 1.0)
    dec = np.floor(np.log10(size_bytes)).astype(np.int64)
    cv = cv_groups(lambda keep: nnls_rel(x[keep], t[keep]),
                   lambda wv, held: x[held] @ wv, dec, t, min_train=4)
    small = size_bytes < 1 << 20
    return ({"latency_us": _us(w[0]),
             "bus_bandwidth_bytes_s": float(f"{1.0 / w[1]:.4g}") if w[1] > 0 else 0.0},
            {"rows": int(t.size), "residual": summary(resid),
             "cv": {"kind": "leave-one-size-decade-out", **summary(cv)},
             "residual_small_msg": summary(resid[small]),
             "residual_large_msg": summary(resid[~small])})


def _nnls_lb(x: np.ndarray, t: np.ndarray, lower: np.ndarray) -> np.ndarray:
    return nnls_rel(x, t, lower)


def banded_features(bus_bytes: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones_like(bus_bytes), bus_bytes, np.sqrt(bus_bytes)])


# Parts whose NVSwitch reduces in the switch (NVLink SHARP, Hopper on): an all-reduce there
# moves each byte to the switch and back once, so its bus bandwidth may reach the link x
# 2(p-1)/p; elsewhere the ring's bus bytes are the least any all-reduce moves.
IN_SWITCH_REDUCTION = frozenset({"h100_sxm", "h200_sxm", "b200_sxm", "gb200"})


def banded_fit(size_bytes: np.ndarray, bus_bytes: np.ndarray, t: np.ndarray, cap_bytes_s: float,
               bands: int = 2, min_sizes: int = 3) -> dict[str, Any]:
    """`bands` (2 or 3) bands of alpha + x / bw + gamma sqrt(x) split at the message sizes
    (measured sizes) whose fit has the lowest median APE; each band needs 3 sizes. bw is at
    most `cap_bytes_s` (the least bytes the collective can move over the datasheet link), so
    no fitted time falls below the link's. Fewer bands where the sizes do not allow more."""
    sizes = np.unique(size_bytes)
    x = banded_features(bus_bytes)
    lb = np.array([0.0, 1.0 / cap_bytes_s, 0.0])
    fits: dict[tuple[float, float], tuple[np.ndarray, np.ndarray]] = {}

    def band(lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        if (lo, hi) not in fits:
            m = (size_bytes >= lo) & (size_bytes < hi)
            fits[(lo, hi)] = (m, _nnls_lb(x[m], t[m], lb))
        return fits[(lo, hi)]

    cands = sizes[3:-2].tolist()
    splits: list[tuple[float, ...]] = [()] + [(e,) for e in cands]
    if bands == 3:
        splits += [(e1, e2) for i, e1 in enumerate(cands) for e2 in cands[i + 1:]]
    best: dict[str, Any] = {}
    best_err = np.inf
    for sp in splits:
        bounds = [0.0, *sp, np.inf]
        parts = [band(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]
        if len(sp) and any(len(np.unique(size_bytes[m])) < min_sizes for m, _ in parts):
            continue
        pred = np.zeros_like(t)
        for m, w in parts:
            pred[m] = x[m] @ w
        err = float(np.median(np.abs(pred / t - 1.0)))
        if err < best_err:
            best, best_err = {"edges": [float(e) for e in sp], "w": [w for _, w in parts]}, err
    if not best["edges"]:  # one band: stored as two equal bands at the smallest size
        best = {"edges": [float(sizes[0])], "w": best["w"] * 2}
    return best


def banded_predict(model: dict[str, Any], size_bytes: np.ndarray, bus_bytes: np.ndarray
                   ) -> np.ndarray:
    x = banded_features(bus_bytes)
    out = x @ model["w"][0]
    for edge, w in zip(model["edges"], model["w"][1:], strict=True):
        out = np.where(size_bytes >= edge, x @ w, out)
    return out


def _band(w: np.ndarray) -> dict[str, float]:
    return {"latency_us": _us(w[0]),
            "bus_bandwidth_bytes_s": float(f"{1.0 / w[1]:.4g}") if w[1] > 0 else 0.0,
            "sqrt_us_per_sqrt_byte": float(f"{w[2] * 1e6:.4g}")}


def banded(size_bytes: np.ndarray, factor: np.ndarray, t: np.ndarray, cap_bytes_s: float,
           bands: int = 2, min_sizes: int = 3) -> dict[str, Any]:
    """The size-banded collective fit with its training and leave-one-size-decade-out error
    (the edges refitted in each fold)."""
    bus = factor * size_bytes
    model = banded_fit(size_bytes, bus, t, cap_bytes_s, bands, min_sizes)
    dec = np.floor(np.log10(size_bytes)).astype(np.int64)
    cv = cv_groups(lambda keep: banded_fit(size_bytes[keep], bus[keep], t[keep], cap_bytes_s,
                                           bands, min_sizes),
                   lambda mdl, held: banded_predict(mdl, size_bytes[held], bus[held]),
                   dec, t, min_train=8)
    # Stored rounded: the evaluation (and its error below) uses the stored constants.
    stored_bands = [_band(w) for w in model["w"]]
    stored = {"edges": model["edges"], "w": [np.array(
        [b["latency_us"] * 1e-6, 1.0 / b["bus_bandwidth_bytes_s"] if b["bus_bandwidth_bytes_s"]
         else 0.0, b["sqrt_us_per_sqrt_byte"] * 1e-6]) for b in stored_bands]}
    resid = np.abs(banded_predict(stored, size_bytes, bus) / t - 1.0)
    out: dict[str, Any] = {"edge_message_bytes": int(model["edges"][0]),
                           "below": stored_bands[0], "above": stored_bands[1]}
    if len(stored_bands) == 3:
        out["edge_high_message_bytes"] = int(model["edges"][1])
        out["high"] = stored_bands[2]
    out["_fit"] = {"rows": int(t.size), "bands": len(stored_bands), "min_sizes": min_sizes,
                   "bus_bandwidth_cap_bytes_s": float(f"{cap_bytes_s:.4g}"),
                   "residual": summary(resid),
                   "cv": {"kind": "leave-one-size-decade-out", **summary(cv)}}
    return out


def _sizes(table: dict[str, np.ndarray], mp: np.ndarray, dtype_col: str
           ) -> tuple[np.ndarray, np.ndarray]:
    size = table["message_size"][mp].astype(float) * np.array(
        [DTYPE_BYTES[str(x)] for x in table[dtype_col][mp]])
    return size, table["latency"][mp].astype(float) * 1e-3


def collective_fits(table: dict[str, np.ndarray], ops: list[str], op_col: str,
                    dtype_col: str, files: list[str], link_bytes_s: float,
                    source: str | None = None, bands: int = 2, min_sizes: int = 3,
                    in_switch_reduction: bool = False) -> dict[str, Any]:
    """Per collective and GPU count: the one line and the size-banded form (`bands` bands of
    at least `min_sizes` message sizes each). `in_switch_reduction`: an all-reduce's bus
    bandwidth may reach the link x 2(p-1)/p."""
    out: dict[str, Any] = {}
    for op in ops:
        m = table[op_col] == op
        if source is not None:
            m &= table["kernel_source"] == source
        if not m.any():
            continue
        key = {"alltoall": "all_to_all"}.get(op, op)
        # NCCL's half and int8 rows time the same collective: fit the 16-bit ones (activations).
        dt = table[dtype_col][m]
        m &= np.isin(table[dtype_col], ["half", "bfloat16", "float16"]) if \
            np.isin(dt, ["half", "bfloat16", "float16"]).any() else m
        rows: dict[str, Any] = {}
        for p in sorted(set(table["num_gpus"][m].tolist())):
            mp = m & (table["num_gpus"] == p)
            size, t = _sizes(table, mp, dtype_col)
            factor = bus_factor(op, np.full_like(t, p))
            const, stats = alpha_beta(size, factor, t)
            cap = link_bytes_s * (float(factor[0]) if in_switch_reduction
                                  and key == "all_reduce" else 1.0)
            rows[str(int(p))] = {**const, "banded": banded(size, factor, t, cap, bands,
                                                               min_sizes),
                                 "_fit": {"files": files, "source": source or "NCCL", **stats}}
        # Leave one GPU count out: its rows predicted from the nearest other count's fit.
        lo: list[float] = []
        counts = sorted(rows, key=int)
        for p in counts:
            others = [q for q in counts if q != p]
            if not others:
                break
            q = min(others, key=lambda x: abs(int(x) - int(p)))
            size, t = _sizes(table, m & (table["num_gpus"] == int(p)), dtype_col)
            r = rows[q]
            pred = r["latency_us"] * 1e-6 + bus_factor(op, np.full_like(t, int(p))) * size \
                / r["bus_bandwidth_bytes_s"]
            lo += list(np.abs(pred / t - 1.0))
        out[key] = {"by_gpus": rows,
                    "cv_leave_one_gpu_count_out": summary(np.asarray(lo))}
    return out


# GPUs per node of the DeepEP tables (HGX boards): the EP group of a one-node row.
DEEPEP_GPUS_PER_NODE = 8


def deepep_fits(path: Path, files: list[str], low_latency: bool) -> dict[str, Any]:
    """Dispatch + combine time of one MoE layer: alpha + per_token tokens + per_expert experts
    + tokens copies hidden b / bw, per phase (low-latency: fp8 dispatch, bf16 combine; normal:
    bf16 both, the fastest SM setting). copies: low-latency sends each token to each of its
    top-k experts; normal sends one copy to each GPU holding any of them (and combines one
    per GPU), the expected number of GPUs touched under uniform routing (`ranks_touched`).
    per_token: a token's routing metadata and layout bookkeeping, whatever its width;
    per_expert: the counters, flags and receive slots kept for every expert."""
    d = read(path)
    tok, h = d["num_token"].astype(float), d["hidden_size"].astype(float)
    k = d["num_topk"].astype(float)
    if not low_latency:
        gpus = DEEPEP_GPUS_PER_NODE * d["node_num"].astype(int)
        k = np.array([ranks_touched(int(a), int(e), int(g)) for a, e, g in
                      zip(d["num_topk"], d["num_experts"], gpus, strict=True)])
    out: dict[str, Any] = {}
    for phase, col_ll, col_n, b in (("dispatch", "dispatch_avg_t_us", "dispatch_transmit_us",
                                     1.0 if low_latency else 2.0),
                                    ("combine", "combine_avg_t_us", "combine_transmit_us", 2.0)):
        t = d[col_ll if low_latency else col_n].astype(float) * 1e-6
        keep = t > 0
        if not low_latency:  # the best SM count for each shape (what a tuned engine picks)
            key = np.column_stack([tok, k, h, d["num_experts"].astype(float)])
            _, inv = np.unique(key, axis=0, return_inverse=True)
            inv = inv.ravel()
            best = np.full(inv.max() + 1, np.inf)
            np.minimum.at(best, inv, t)
            keep &= t == best[inv]
        byts = tok[keep] * k[keep] * h[keep] * b
        x = np.column_stack([np.ones(keep.sum()), byts, tok[keep],
                             d["num_experts"][keep].astype(float)])
        tt = t[keep]
        w = nnls_rel(x, tt)
        dec = np.floor(np.log10(np.maximum(byts, 1.0))).astype(np.int64)
        cv = cv_groups(lambda kp, x=x, tt=tt: nnls_rel(x[kp], tt[kp]),
                       lambda wv, held, x=x: x[held] @ wv, dec, tt, min_train=4)
        out[phase] = {"latency_us": _us(w[0]), "bytes_per_element": b,
                      "copies": "top_k" if low_latency else "gpus_touched",
                      "bandwidth_bytes_s": float(f"{1.0 / w[1]:.4g}") if w[1] > 0 else 0.0,
                      "per_token_ns": float(f"{w[2] * 1e9:.4g}"),
                      "per_expert_us": float(f"{w[3] * 1e6:.4g}"),
                      "_fit": {"files": files, "rows": int(tt.size),
                               "residual": summary(np.abs(x @ w / tt - 1.0)),
                               "cv": {"kind": "leave-one-size-decade-out", **summary(cv)}}}
    return out


# --- driver ------------------------------------------------------------------------------------
def rel(path: Path, root: Path) -> str:
    return "aic-kernels/" + str(path.relative_to(root))


ATTENTION_CLASSES = ("decode", "prefill", "mla_decode", "mla_prefill")
DECODE_CLASSES = ("decode", "mla_decode")


def fit_gpu(root: Path, gpu: str) -> dict[str, Any]:
    res = fit_gpu_attention(root, gpu)
    for eng in ENGINES:
        e: dict[str, Any] = {}
        v = one_version(root, gpu, "comm", eng)
        if v is not None and eng == "sglang":
            for fname, key, ll in (("wideep_deepep_ll_perf.parquet", "deepep_low_latency", True),
                                   ("wideep_deepep_normal_perf.parquet", "deepep_normal",
                                    False)):
                if (v / fname).exists():
                    e[key] = deepep_fits(v / fname, [rel(v / fname, root)], ll)
        if e:
            res["engines"].setdefault(eng, {}).update(e)
    fit_gpu_collectives(root, gpu, res)
    substitute_mla(res)
    return res


def merge_attention(old: dict[str, Any], new: dict[str, Any],
                    classes: tuple[str, ...] = ATTENTION_CLASSES) -> None:
    """`new`'s attention and MLA classes (those of `classes`) into GPU entry `old`, the rest
    of `old` (collectives, DeepEP, the other classes) kept as it is."""
    for e in old["engines"].values():
        for cls in classes:
            e.pop(cls, None)
    for eng, e in new["engines"].items():
        old["engines"].setdefault(eng, {}).update(e)


def keep_order(gpus: dict[str, Any], order: dict[str, dict[str, list[str]]]) -> None:
    """Each engine entry of `gpus` with its keys in `order` (the catalog's before a partial
    refit; new keys after them), so that a refit rewrites its classes in place."""
    for g, engines in order.items():
        for eng, keys in engines.items():
            e = gpus.get(g, {}).get("engines", {}).get(eng)
            if e is not None:
                rank = {k: i for i, k in enumerate(keys)}
                ordered = sorted(e, key=lambda k: rank.get(k, len(rank)))
                gpus[g]["engines"][eng] = {k: e[k] for k in ordered}


def fit_gpu_attention(root: Path, gpu: str, classes: tuple[str, ...] = ATTENTION_CLASSES
                      ) -> dict[str, Any]:
    """The attention and MLA classes (those of `classes`) of `gpu`, by engine."""
    hw = load_hardware(GPUS[gpu])
    res: dict[str, Any] = {"hardware": GPUS[gpu], "engines": {}}
    for eng in ENGINES:
        e: dict[str, Any] = {}
        v = one_version(root, gpu, "attention", eng)
        if v is not None:
            for fname, key, dec in (("generation_attention_perf.parquet", "decode", True),
                                    ("context_attention_perf.parquet", "prefill", False)):
                p = v / fname
                if p.exists() and key in classes:
                    e[key] = attention_fits(p, hw, dec, [rel(p, root)])
        v = one_version(root, gpu, "mla", eng)
        if v is not None:
            for fname, key, dec in (("generation_mla_perf.parquet", "mla_decode", True),
                                    ("context_mla_perf.parquet", "mla_prefill", False)):
                p = v / fname
                if p.exists() and key in classes:
                    e[key] = mla_fits(p, hw, dec, [rel(p, root)])
        if e:
            res["engines"][eng] = e
    return res


def substitute_mla(res: dict[str, Any]) -> None:
    """An engine without a kernel-only MLA table takes another engine's on the same GPU
    (vLLM there has whole-module tables only, GEMMs included)."""
    for e in res["engines"].values():
        for key in ("mla_decode", "mla_prefill"):
            if key not in e:
                for other in ("trtllm", "sglang", "vllm"):
                    o = res["engines"].get(other, {})
                    if o.get(key):
                        e[key] = {kv: {**c, "_substitute_engine": other}
                                  for kv, c in o[key].items()}
                        e[key]["_substitute_engine"] = other
                        break


def fit_gpu_collectives(root: Path, gpu: str, res: dict[str, Any]) -> None:
    """Each engine's custom all-reduce and NCCL's collectives of `gpu`, into `res`."""
    link = load_hardware(GPUS[gpu]).interconnect_bandwidth_bytes_s
    for eng in ENGINES:
        v = one_version(root, gpu, "comm", eng)
        if v is not None and (v / "custom_allreduce_perf.parquet").exists():
            p = v / "custom_allreduce_perf.parquet"
            tab = read(p)
            srcs = sorted(set(tab["kernel_source"].tolist()))
            # vLLM's CUDA-graph variant is what its decode steps run.
            src = next((s for s in srcs if "graph" in s), srcs[0])
            # Three regimes: one-shot, two-shot, and the hand-over to NCCL.
            res["engines"].setdefault(eng, {})["custom_all_reduce"] = collective_fits(
                tab, ["all_reduce"], "op_name", "allreduce_dtype", [rel(p, root)], link,
                source=src, bands=3, in_switch_reduction=gpu in IN_SWITCH_REDUCTION
            )["all_reduce"]
    v = one_version(root, gpu, "comm", "nccl")
    if v is not None:
        p = v / "nccl_perf.parquet"
        res["nccl"] = collective_fits(read(p), ["all_reduce", "all_gather", "alltoall",
                                                "reduce_scatter"], "op_name", "nccl_dtype",
                                      [rel(p, root)], link, bands=3, min_sizes=5,
                                      in_switch_reduction=gpu in IN_SWITCH_REDUCTION)


def cv_table(catalog: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for gpu, g in catalog["gpus"].items():
        for eng, e in g["engines"].items():
            for cls in ("decode", "prefill", "mla_decode", "mla_prefill"):
                for kv, c in e.get(cls, {}).items():
                    if kv.startswith("_"):
                        continue
                    if "_substitute_engine" in e[cls]:
                        continue
                    f = c["_fit"]
                    rows.append({"gpu": gpu, "engine": eng, "class": f"{cls}/{kv}",
                                 "rows": f["rows"], "train_median_ape": f["residual"]["median_ape"],
                                 "cv_median_ape": f["cv"]["median_ape"],
                                 "cv_kind": f["cv"]["kind"],
                                 "meets_bar": bool(f["cv"]["median_ape"] <= 0.10)})
            ar = e.get("custom_all_reduce")
            if ar:
                rows += _coll_rows(gpu, eng, "custom_all_reduce", ar)
            for key in ("deepep_low_latency", "deepep_normal"):
                for ph, c in e.get(key, {}).items():
                    f = c["_fit"]
                    rows.append({"gpu": gpu, "engine": eng, "class": f"{key}/{ph}",
                                 "rows": f["rows"], "train_median_ape": f["residual"]["median_ape"],
                                 "cv_median_ape": f["cv"]["median_ape"], "cv_kind": f["cv"]["kind"],
                                 "meets_bar": bool(f["cv"]["median_ape"] <= 0.10)})
        for op, c in g.get("nccl", {}).items():
            rows += _coll_rows(gpu, "nccl", op, c)
    return rows


def _coll_rows(gpu: str, eng: str, op: str, c: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per GPU count: the size-banded form's error (the collective's own time) and
    the one line's (what the step model charges)."""
    out = []
    for p, r in c["by_gpus"].items():
        f, b = r["_fit"], r["banded"]["_fit"]
        out.append({"gpu": gpu, "engine": eng, "class": f"{op}/p{p}", "rows": f["rows"],
                    "train_median_ape": b["residual"]["median_ape"],
                    "cv_median_ape": b["cv"]["median_ape"], "cv_kind": b["cv"]["kind"],
                    "line_train_median_ape": f["residual"]["median_ape"],
                    "line_cv_median_ape": f["cv"]["median_ape"],
                    "meets_bar": bool(b["cv"]["median_ape"] <= 0.10)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None, help="the aic-kernels folder")
    ap.add_argument("--gpus", default=",".join(GPUS), help="comma list of system folders")
    ap.add_argument("--catalog", type=Path,
                    default=REPO / "src/ridgeline/specs/data/kernels_measured_attention_comm.json")
    ap.add_argument("--results", type=Path,
                    default=REPO / "benchmarks/results/aic_kernel_fits_attention_comm.json")
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--only-collectives", action="store_true",
                      help="refit the collectives alone into the existing --catalog")
    only.add_argument("--only-attention", action="store_true",
                      help="refit attention and MLA alone into the existing --catalog "
                      "(collectives and DeepEP kept as they are)")
    only.add_argument("--only-decode", action="store_true",
                      help="refit decode attention and MLA decode alone into the existing "
                      "--catalog (every other entry kept as it is)")
    ap.add_argument("--jobs", type=int, default=1, help="GPUs fitted at once (processes)")
    a = ap.parse_args()
    if a.jobs < 1:
        print(f"error: --jobs: got {a.jobs}; allowed: an integer >= 1", file=sys.stderr)
        sys.exit(2)
    root = a.data or shared_data() / "aic-kernels"
    if not root.is_dir():
        print(f"error: --data: got {root}; allowed: the aic-kernels folder", file=sys.stderr)
        sys.exit(2)
    gpus = [g for g in a.gpus.split(",") if g]
    bad = [g for g in gpus if g not in GPUS]
    if bad:
        print(f"error: --gpus: got {','.join(bad)}; allowed: {','.join(GPUS)}", file=sys.stderr)
        sys.exit(2)
    date = _dt.date.today().isoformat()
    catalog: dict[str, Any] = {
        "_about": ("Attention (decode, prefill), MLA and collective constants fitted on NVIDIA "
                   "AIConfigurator's measured kernel tables (ai-dynamo/aiconfigurator, "
                   "Apache-2.0, commit 095f58a51, aic-core/src/aiconfigurator_core/systems/"
                   "data) by benchmarks/accuracy/fit_aic_attention_comm.py; the forms are in "
                   "its docstring and src/ridgeline/perf/measured_attention.py. Efficiencies "
                   "are fractions of ridgeline's datasheet peaks of the named hardware."),
        "date": date,
        "objective": ("relative least squares, non-negative (attention and MLA: then "
                      "reweighted toward the least absolute relative error where that lowers "
                      "the training median, each class's _fit.objective); residual and cv are "
                      "APE |pred-measured|/measured"),
        "mla_dims": {"kv_lora_rank": KV_LORA, "qk_rope_head_dim": ROPE,
                     "qk_nope_head_dim": NOPE, "v_head_dim": V_DIM},
        "hardware": {GPUS[g]: g for g in gpus},
        "gpus": {},
    }
    order: dict[str, dict[str, list[str]]] = {}
    if a.only_collectives or a.only_attention or a.only_decode:
        old = json.loads(a.catalog.read_text())
        catalog["gpus"], catalog["hardware"] = old["gpus"], old["hardware"]
        catalog["date"] = date
        order = {g: {e: list(v) for e, v in gv["engines"].items()}
                 for g, gv in old["gpus"].items()}
    classes = DECODE_CLASSES if a.only_decode else ATTENTION_CLASSES
    fit_one = (partial(fit_gpu_attention, classes=classes)
               if a.only_attention or a.only_decode else fit_gpu)
    if a.only_collectives:
        for g in gpus:
            print(f"fitting {g} ...", file=sys.stderr, flush=True)
            fit_gpu_collectives(root, g, catalog["gpus"][g])
    else:
        print(f"fitting {','.join(gpus)} ...", file=sys.stderr, flush=True)
        with ProcessPoolExecutor(max_workers=a.jobs) as pool:
            fitted = dict(zip(gpus, pool.map(fit_one, [root] * len(gpus), gpus), strict=True))
        for g in gpus:
            if (a.only_attention or a.only_decode) and g in catalog["gpus"]:
                merge_attention(catalog["gpus"][g], fitted[g], classes)
            else:
                catalog["gpus"][g] = fitted[g]
            substitute_mla(catalog["gpus"][g])
    keep_order(catalog["gpus"], order)
    table = cv_table(catalog)
    a.catalog.write_text(json.dumps(catalog, indent=1) + "\n")
    a.results.parent.mkdir(parents=True, exist_ok=True)
    a.results.write_text(json.dumps({"date": date, "bar": "leave-one-model-shape-out median "
                                     "APE <= 10% per operator class per GPU", "rows": table},
                                    indent=1) + "\n")
    for r in table:
        print(f"{r['gpu']:9s} {r['engine']:7s} {r['class']:32s} rows {r['rows']:6d} "
              f"train {100 * r['train_median_ape']:5.1f}%  cv {100 * r['cv_median_ape']:5.1f}%"
              f"{'' if r['meets_bar'] else '  > 10%'}")


if __name__ == "__main__":
    main()
