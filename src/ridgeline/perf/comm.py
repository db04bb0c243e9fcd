"""Exposed communication time: ring all-reduce, point-to-point, all-to-all.

Each collective is modelled as its bytes over the per-direction link bandwidth plus one
latency (message bytes / effective link bandwidth + start-up latency). Nothing
is assumed to overlap with compute.

>>> round(ring_allreduce_s(1e9, 2, 100e9, 0.0), 4)   # 2(p-1)/p = 1 -> 1 GB over 100 GB/s
0.01
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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


@dataclass(frozen=True)
class BandedTerm:
    """Collectives of one step priced in the size-banded form at the step's message size,
    as a function of the step's tokens n (message bytes = n x bytes per token): `bands[i]`
    for edges[i-1] <= n < edges[i] (two or three bands), a band being (s, s per token, s per
    sqrt token): a + b n + c sqrt(n), all of a step's collectives of this kind summed.
    Zero for a step with no token (no collective runs)."""

    edges: tuple[float, ...]  # in tokens, increasing; one fewer than the bands
    bands: tuple[Band, ...]

    @classmethod
    def from_bands(cls, count: float, bytes_per_token: float, bus_factor: float,
                   edges_message_bytes: tuple[float, ...], bands: tuple[Band, ...]
                   ) -> BandedTerm:
        """`count` collectives of n x `bytes_per_token` bytes each, in `banded_collective_s`'s
        bands (latency_s, bus_bytes_s, sqrt_s_per_sqrt_byte) over bus bytes bus_factor x
        bytes, rewritten per token: latency + (f b / bw) n + gamma sqrt(f b) sqrt(n)."""
        x1 = bus_factor * bytes_per_token  # bus bytes per token

        def per_token(c: Band) -> Band:
            lat, bw, g = c
            return (count * lat, count * (x1 / bw if bw > 0 else 0.0),
                    count * g * math.sqrt(x1))

        return cls(edges=tuple(e / bytes_per_token for e in edges_message_bytes),
                   bands=tuple(per_token(c) for c in bands))

    def seconds(self, n: ArrayLike) -> np.ndarray:
        """Seconds of these collectives in steps of n tokens (vectorised; the same
        arithmetic, term for term, as the compiled step and the C core)."""
        x = np.asarray(n, dtype=np.float64)
        r = np.sqrt(x)
        a0, a1, a2 = self.bands[-1]
        t = (a0 + a1 * x) + a2 * r
        for edge, (a0, a1, a2) in zip(self.edges[::-1], self.bands[-2::-1], strict=True):
            t = np.where(x < edge, (a0 + a1 * x) + a2 * r, t)
        return np.where(x > 0, t, 0.0)

    def source(self, var: str) -> str:
        """A Python expression of the same seconds in the variable named `var` (math.sqrt
        in scope as `_sqrt`), for the compiled step."""
        def one(c: Band) -> str:
            a0, a1, a2 = (float(v) for v in c)
            return f"(({a0!r} + {a1!r} * {var}) + {a2!r} * _sqrt({var}))"

        expr = one(self.bands[-1])
        for edge, c in zip(self.edges[::-1], self.bands[-2::-1], strict=True):
            expr = f"({one(c)} if {var} < {float(edge)!r} else {expr})"
        return f"(0.0 if {var} <= 0 else {expr})"

    def row(self) -> list[float]:
        """The 11 numbers the C core reads per term: two edges (the second infinite with two
        bands) and three bands (the third a copy of the second with two)."""
        edges = [*self.edges, math.inf]
        bands = [*self.bands, self.bands[-1]]
        return [float(e) for e in edges[:2]] + [float(v) for c in bands[:3] for v in c]
