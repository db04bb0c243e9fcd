"""The roofline: GEMM arithmetic intensity, attainable FLOP/s, ridge point.

An [m, k] x [k, n] product does 2mnk FLOPs and moves at least (mk + kn + mn) elements of b
bytes, so its intensity is I = 2mnk / (b (mk + kn + mn)) FLOP/byte. Attainable FLOP/s is
min(peak, I * bandwidth); below the ridge point peak/bandwidth the product is memory-bound.

>>> round(float(gemm_intensity(1, 4096, 4096)), 1)
1.0
>>> round(m_at_ridge(4096, 4096, 989e12 / 3.35e12))
345
"""

from __future__ import annotations

import numpy as np

from ridgeline.perf.step_time import ArrayLike


def gemm_flops(m: ArrayLike, k: ArrayLike, n: ArrayLike) -> ArrayLike:
    return 2.0 * np.asarray(m, dtype=np.float64) * k * n


def gemm_bytes(m: ArrayLike, k: ArrayLike, n: ArrayLike, bytes_per_element: float = 2.0
               ) -> ArrayLike:
    m = np.asarray(m, dtype=np.float64)
    return bytes_per_element * (m * k + np.multiply(k, n) + m * n)


def gemm_intensity(m: ArrayLike, k: ArrayLike, n: ArrayLike,
                   bytes_per_element: float = 2.0) -> ArrayLike:
    """2mnk / (b (mk + kn + mn)) FLOP/byte."""
    return gemm_flops(m, k, n) / gemm_bytes(m, k, n, bytes_per_element)


def attainable_flops(intensity: ArrayLike, peak_flops: float, bandwidth_bytes_s: float
                     ) -> ArrayLike:
    """min(peak, intensity * bandwidth): the roofline."""
    return np.minimum(peak_flops, np.asarray(intensity, dtype=np.float64) * bandwidth_bytes_s)


def ridge_point(peak_flops: float, bandwidth_bytes_s: float) -> float:
    """Intensity at which the memory slope meets the compute roof, FLOP/byte."""
    return peak_flops / bandwidth_bytes_s


def m_at_ridge(k: float, n: float, ridge: float, bytes_per_element: float = 2.0) -> float:
    """The m at which an [m,k]x[k,n] GEMM reaches the ridge intensity (inf if never).

    Solves 2mkn = ridge * b * (mk + kn + mn) for m.
    """
    denom = 2.0 * k * n - ridge * bytes_per_element * (k + n)
    if denom <= 0:
        return float("inf")
    return ridge * bytes_per_element * k * n / denom


def linear_batch_turning_point(peak_flops: float, bandwidth_bytes_s: float,
                               weight_bytes: float = 2.0) -> float:
    """The batch turning point: weights read once per step give I = 2B/b_w, so the bend is at
    B = (C/beta) * b_w / 2 (= C/beta for bf16 weights)."""
    return peak_flops / bandwidth_bytes_s * weight_bytes / 2.0
