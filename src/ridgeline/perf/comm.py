"""Exposed communication time: ring all-reduce, point-to-point, all-to-all.

Each collective is modelled as its bytes over the per-direction link bandwidth plus one
latency (message bytes / effective link bandwidth + start-up latency). Nothing
is assumed to overlap with compute.

>>> round(ring_allreduce_s(1e9, 2, 100e9, 0.0), 4)   # 2(p-1)/p = 1 -> 1 GB over 100 GB/s
0.01
"""

from __future__ import annotations

import json
import math
from importlib import resources

import numpy as np

from ridgeline.errors import RidgelineError
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


def ranks_touched(topk: int, experts: int, ranks: int) -> float:
    """Expected number of GPUs holding at least one of a token's `topk` experts, the
    `experts` spread evenly over `ranks` GPUs and routing uniform: ranks (1 - C(E - E/r, k) /
    C(E, k)). DeepEP's normal dispatch sends one copy per GPU touched, not per expert
    (top-8 of 256 experts over 8 GPUs: 5.29 copies). `topk` where that is undefined."""
    per = experts // ranks if ranks > 0 else 0
    if per < 1 or topk < 1 or topk > experts:
        return float(topk)
    return ranks * (1.0 - math.comb(experts - per, topk) / math.comb(experts, topk))

# The expert-parallel dispatch/combine each engine can run, under vLLM's --all2all-backend
# names: "allgather_reducescatter" gathers every token's row to all EP ranks and
# reduce-scatters the outputs back; the DeepEP ones send each token once to each remote rank
# holding one of its experts (high-throughput: the "normal" kernels; low-latency: fp8 rows).
EP_BACKENDS = ("allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency")
# Bytes of one combined (expert output) element: the engines return 16-bit rows.
COMBINE_ELEMENT_BYTES = 2.0
# DeepEP's fp8 dispatch (always on its low-latency kernels in vLLM and SGLang).
FP8_DISPATCH_ELEMENT_BYTES = 1.0


def check_ep_backend(backend: str) -> str:
    """`backend` if it is one of EP_BACKENDS, else the `error:` naming the flag."""
    if backend not in EP_BACKENDS:
        raise RidgelineError(f"all2all-backend: got {backend!r}; allowed: "
                             f"{', '.join(EP_BACKENDS)}")
    return backend


def default_ep_backend(engine: str) -> str:
    """The EP backend engine preset `engine` runs unless told otherwise (its `ep_comm`
    section); vLLM's for an engine without a preset."""
    path = resources.files("ridgeline.specs").joinpath("data", "engines", f"{engine}.json")
    if not path.is_file():
        engine = "vllm"
        path = resources.files("ridgeline.specs").joinpath("data", "engines", "vllm.json")
    section = json.loads(path.read_text()).get("ep_comm") or {}
    return check_ep_backend(str(section.get("all2all_backend", EP_BACKENDS[0])))


def ep_rows_per_token(backend: str, experts: int, topk: int, ep: int,
                      attn_dp: int | None = None) -> float:
    """Rows of width d one GPU moves each way per MoE layer, per token of the instance.
    The all-gather runs over the attention-DP ranks (a TP group's GPUs already hold its
    tokens, and the MoE output's sum over them is the TP all-reduce): it brings the other
    ranks' (a - 1)/a of the tokens and the reduce-scatter returns as many, a = attn_dp
    (default ep, one GPU per rank). DeepEP sends a GPU's 1/ep of the tokens to r remote ranks
    each (`remote_ranks_per_token`), so r/ep.

    >>> round(ep_rows_per_token("allgather_reducescatter", 256, 8, 8), 4)
    0.875
    >>> ep_rows_per_token("allgather_reducescatter", 256, 8, 8, attn_dp=1)   # TP 8 x EP 8
    0.0
    >>> round(ep_rows_per_token("deepep_high_throughput", 256, 8, 8), 4)   # 4.633 / 8
    0.5791
    """
    check_ep_backend(backend)
    if ep <= 1:
        return 0.0
    if backend == "allgather_reducescatter":
        a = ep if attn_dp is None else attn_dp
        return (a - 1) / a
    return remote_ranks_per_token(experts, topk, ep) / ep


def ep_bytes_per_token(backend: str, experts: int, topk: int, ep: int, hidden: int,
                       activation_bytes: float, fp8_experts: bool = False,
                       attn_dp: int | None = None) -> float:
    """Bytes one GPU moves (out and back) per MoE layer per token of the instance.

    >>> ep_bytes_per_token("allgather_reducescatter", 256, 8, 8, 7168, 2.0)   # 7/8 x 7168 x 4
    25088.0
    """
    out, back = ep_element_bytes(backend, activation_bytes, fp8_experts)
    return ep_rows_per_token(backend, experts, topk, ep, attn_dp) * hidden * (out + back)


def ep_element_bytes(backend: str, activation_bytes: float, fp8_experts: bool = False
                     ) -> tuple[float, float]:
    """(dispatch, combine) bytes per element. The all-gather moves the 16-bit hidden states
    (the experts quantize after it); DeepEP's high-throughput dispatch sends fp8 rows where
    the expert GEMMs take fp8 (or narrower) inputs, its low-latency one always; the outputs
    come back in 16 bits."""
    if backend == "deepep_low_latency" or (backend == "deepep_high_throughput"
                                           and fp8_experts):
        return FP8_DISPATCH_ELEMENT_BYTES, COMBINE_ELEMENT_BYTES
    return activation_bytes, COMBINE_ELEMENT_BYTES


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
