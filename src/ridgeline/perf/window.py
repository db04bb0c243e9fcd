"""Sliding-window (and chunked local) attention: the work of the windowed layers.

A windowed layer attends only to the last w tokens, so per sequence it holds and reads
min(T, w) tokens of KV instead of T (the decode KV read with T -> min(T, w)), and a prefill chunk
of c tokens after p cached ones computes banded pairs

    sum_{k = p+1}^{p+c} min(k, w)        (causal pairs sum_{k = p+1}^{p+c} k when w >= p + c)

reading min(p, w) cached tokens. These are not linear in the step's sums (BatchWork holds
sum_i c_i, sum_i p_i, sum_j T_j), so the windowed layers get three work variables of their
own, appended after `ops.WORK_VARS` (`EXT_VARS`), computed from the sums through the mean
chunk and the mean context:

    dc_w    = min(dc, w dq)           = sum_j min(T_j, w) when the contexts are equal
    pc_w    = min(pc, w ps)
    pairs_w = min(pairs, ps band(pt/ps, pc/ps, w))

Exact for a batch of equal sequences (every `estimate` step); for a mixed batch (the
simulator) min is concave, so dc_w and pc_w are upper bounds of the exact sums (reads are
never undercounted). Llama-4's chunked attention (a token sees its own chunk of C tokens,
T mod C + 1 of them) is costed as a window of C: an upper bound, reached at each chunk's end.

The simulator's C core evaluates only `WORK_VARS`, so windowed models run on the Python
engine (`CompiledStep` is marked not applicable; `RooflineStepTime` evaluates them
elementwise so a step's value does not depend on the steps timed with it).

>>> round(float(banded_pairs(10.0, 0.0, 4.0)), 1)   # 1+2+3+4+4*6
34.0
"""

from __future__ import annotations

import numpy as np

from ridgeline.perf.ops import (
    ATTENTION,
    INDICATOR_VARS,
    WORK_VARS,
    Collectives,
    Op,
    OpTable,
    build_table,
)
from ridgeline.perf.ops import kv_heads_per_gpu as _kv_heads
from ridgeline.specs.model import ModelSpec
from ridgeline.specs.parallel import Parallelism
from ridgeline.specs.precision import Precision

WINDOW_VARS = ("pairs_w", "pc_w", "dc_w")
EXT_VARS = WORK_VARS + WINDOW_VARS
EXT_VAR = {name: i for i, name in enumerate(EXT_VARS)}


def banded_pairs(chunk: np.ndarray | float, past: np.ndarray | float,
                 window: float) -> np.ndarray:
    """sum_{k=past+1}^{past+chunk} min(k, window): the query-key pairs of one chunk."""
    c = np.asarray(chunk, dtype=np.float64)
    a = np.asarray(past, dtype=np.float64) + 1.0
    b = a + c - 1.0
    w = float(window)
    below = (a + b) * c / 2.0                       # every query inside the window
    above = w * c                                   # every query sees a full window
    mixed = (a + w) * (w - a + 1.0) / 2.0 + (b - w) * w
    return np.where(b <= w, below, np.where(a >= w, above, mixed))


def window_work(window: float, pt: np.ndarray, pairs: np.ndarray, pc: np.ndarray,
                ps: np.ndarray, dq: np.ndarray, dc: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pairs_w, pc_w, dc_w) of steps given their BatchWork sums (see the module doc)."""
    w = float(window)
    with np.errstate(divide="ignore", invalid="ignore"):
        chunk = np.where(ps > 0, pt / np.where(ps > 0, ps, 1.0), 0.0)
        past = np.where(ps > 0, pc / np.where(ps > 0, ps, 1.0), 0.0)
    band = np.where(ps > 0, ps * banded_pairs(chunk, past, w), 0.0)
    return np.minimum(pairs, band), np.minimum(pc, w * ps), np.minimum(dc, w * dq)


def window_ops(m: ModelSpec, pr: Precision, tp: int) -> list[Op]:
    """Attention kernels of the windowed layers (the same per-token costs as
    `ops._attention_ops`, on the windowed work variables)."""
    L = m.num_window_layers
    if not m.is_windowed or m.is_mla:
        return []
    b_a, b_kv, hd = pr.activation_bytes, pr.kv_bytes, m.head_dim
    hq, hkv = m.num_heads // tp, _kv_heads(m, tp)
    kv_tok = 2 * hkv * hd * b_kv
    return [
        Op("attn_prefill_window", ATTENTION, L,
           flops={"pairs_w": 4.0 * hq * hd},
           bytes={"pt": 2 * hq * hd * b_a + 2 * hkv * hd * b_a + kv_tok, "pc_w": kv_tok},
           driver="pre"),
        Op("attn_decode_window", ATTENTION, L,
           flops={"dc_w": 4.0 * hq * hd, "dq": 4.0 * hq * hd},
           bytes={"dc_w": kv_tok, "dq": kv_tok + 2 * hq * hd * b_a},
           driver="dec"),
    ]


def build_ext_table(model: ModelSpec, precision: Precision, parallel: Parallelism,
                    link_bytes_s: float, latency_s: float,
                    collectives: Collectives | None = None) -> OpTable:
    """`ops.build_table` with the windowed layers' attention appended, over EXT_VARS."""
    base = build_table(model, precision, parallel, link_bytes_s, latency_s, collectives)
    extra = window_ops(model, precision, parallel.tp)
    nv, k = len(EXT_VARS), len(extra)

    def pad(a: np.ndarray) -> np.ndarray:
        return np.hstack([a, np.zeros((a.shape[0], len(WINDOW_VARS)))])

    flops, byts, kern = (np.vstack([pad(a), np.zeros((k, nv))])
                         for a in (base.flops, base.bytes, base.kernels))
    share = 1.0 / parallel.attn_dp  # windowed attention runs on one attention rank's share
    for i, op in enumerate(extra):
        r = len(base.names) + i
        for v, c in op.flops.items():
            flops[r, EXT_VAR[v]] += c * op.layers * (1.0 if v in INDICATOR_VARS else share)
        for v, c in op.bytes.items():
            byts[r, EXT_VAR[v]] += c * op.layers * (1.0 if v in INDICATOR_VARS else share)
        byts[r, EXT_VAR[op.driver]] += op.weight_bytes * op.layers
        kern[r, EXT_VAR[op.driver]] += op.kernels * op.layers
    comm = np.concatenate([base.comm_s, np.zeros(len(WINDOW_VARS))])
    return OpTable(names=base.names + [o.name for o in extra],
                   kinds=base.kinds + [o.kind for o in extra],
                   layers=np.concatenate([base.layers, [o.layers for o in extra]]),
                   flops=flops, bytes=byts, kernels=kern, comm_s=comm,
                   comm_terms=base.comm_terms,
                   drivers=base.drivers + [o.driver for o in extra],
                   in_dims=np.concatenate([base.in_dims, [o.in_dim for o in extra]]),
                   out_dims=np.concatenate([base.out_dims, [o.out_dim for o in extra]]),
                   query_heads_per_kv_head=base.query_heads_per_kv_head,
                   kv_heads_per_gpu=base.kv_heads_per_gpu, rank_share=base.rank_share,
                   experts_per_gpu=base.experts_per_gpu, expert_miss=base.expert_miss,
                   query_heads_per_gpu=base.query_heads_per_gpu)
