"""Exposed communication time: ring all-reduce, point-to-point, all-to-all.

Each collective is modelled as its bytes over the per-direction link bandwidth plus one
latency (message bytes / effective link bandwidth + start-up latency). Nothing
is assumed to overlap with compute.

>>> round(ring_allreduce_s(1e9, 2, 100e9, 0.0), 4)   # 2(p-1)/p = 1 -> 1 GB over 100 GB/s
0.01
"""

from __future__ import annotations

from ridgeline.perf.step_time import ArrayLike


def ring_allreduce_bytes_factor(p: int) -> float:
    """Fraction of the message each GPU sends in a ring all-reduce: 2(p-1)/p."""
    return 2.0 * (p - 1) / p if p > 1 else 0.0


def ring_allreduce_s(message_bytes: ArrayLike, p: int, link_bytes_s: float,
                     latency_s: float) -> ArrayLike:
    """Ring all-reduce of `message_bytes` over p GPUs: 2(p-1)/p * bytes / bw + latency."""
    if p <= 1:
        return 0.0 * message_bytes
    return ring_allreduce_bytes_factor(p) * message_bytes / link_bytes_s + latency_s


def p2p_s(message_bytes: ArrayLike, link_bytes_s: float, latency_s: float) -> ArrayLike:
    """One point-to-point send (pipeline stage boundary)."""
    return message_bytes / link_bytes_s + latency_s


def all_to_all_bytes_factor(p: int) -> float:
    """Fraction of its tokens' data a GPU exchanges in an all-to-all over p GPUs."""
    return (p - 1) / p if p > 1 else 0.0
