"""Exposed communication time: ring all-reduce, point-to-point, all-to-all.

Each collective is modelled as its bytes over the per-direction link bandwidth plus one
latency (message bytes / effective link bandwidth + start-up latency). Nothing
is assumed to overlap with compute.

>>> round(ring_allreduce_s(1e9, 2, 100e9, 0.0), 4)   # 2(p-1)/p = 1 -> 1 GB over 100 GB/s
0.01
"""

from __future__ import annotations

import math

import numpy as np

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


def remote_ranks_per_token(experts: int, topk: int, ep: int) -> float:
    """Expected remote EP ranks a token's row goes to when each rank receives it once however
    many of its experts the token picked (DeepEP's dispatch; its combine returns one summed
    row per rank): (ep - 1) (1 - C(E - E/ep, k) / C(E, k)) for k distinct experts picked
    uniformly among E, the rank's own experts being local. Nothing is padded to a capacity.

    >>> round(remote_ranks_per_token(256, 8, 8), 3)   # DeepSeek-V3 at EP 8 (k/ep x 7 = 7 pairs)
    4.633
    """
    if ep <= 1:
        return 0.0
    held = experts / ep
    miss = 1.0
    for i in range(topk):
        miss *= max(experts - held - i, 0.0) / (experts - i)
    return (ep - 1) * (1.0 - miss)


def all_to_all_bytes_factor(p: int) -> float:
    """Fraction of its tokens' data a GPU exchanges in an all-to-all over p GPUs."""
    return (p - 1) / p if p > 1 else 0.0


Band = tuple[float, float, float]


def banded_collective_s(message_bytes: ArrayLike, bus_factor: float, edge_message_bytes: float,
                        below: Band, above: Band, edge_high_message_bytes: float = math.inf,
                        high: Band | None = None) -> np.ndarray:
    """A collective's seconds in the size-banded form fitted on measured NCCL and custom
    all-reduce kernels: below the edge message size one band, at or above it the other (and
    at or above `edge_high_message_bytes` a third, `high`, where the fit found three regimes),
    each (latency_s, bus_bytes_s, sqrt_s_per_sqrt_byte) giving
    latency + x / bus_bandwidth + gamma sqrt(x) in the bus bytes x = bus_factor * bytes.
    The sqrt term is a pipelined ring's chunking (the effective bandwidth grows with size);
    the edge is where the collective changes protocol (NCCL's low-latency one to the
    bandwidth one, a custom all-reduce's one-shot to two-shot, then NCCL). Vectorised.

    >>> round(float(banded_collective_s(4e6, 1.0, 1e6, (10e-6, 1e11, 0.0),
    ...                                  (20e-6, 2e11, 1e-8))), 9)   # 20 + 20 + 20 us
    6e-05
    """
    b = np.asarray(message_bytes, dtype=np.float64)
    x = bus_factor * b

    def band(c: Band) -> np.ndarray:
        lat, bw, g = c
        return lat + (x / bw if bw > 0 else 0.0 * x) + g * np.sqrt(x)

    out = np.where(b >= edge_message_bytes, band(above), band(below))
    if high is not None:
        out = np.where(b >= edge_high_message_bytes, band(high), out)
    return out
