"""The link a prompt's KV crosses from a prefill worker to a decode worker, and its cost.

A transfer moves the prompt's KV for the whole model (every layer, the KV cache's dtype):

    bytes = prompt_tokens x kv_bytes_per_token
    time  = latency + bytes / bandwidth

The bandwidth is one worker-to-worker transfer's: every GPU of the smaller side sends (or
receives) its share in parallel over its own link, so

    bandwidth = per-GPU link bandwidth x min(GPUs per prefill worker, GPUs per decode worker)

- `nvlink`: the GPU's NVLink bandwidth per direction (the pools share one NVLink domain);
- `network`: the scale-out NIC per GPU, the hardware file's `network_bandwidth_bytes_s`,
  else 50 GB/s (one 400 Gb/s NIC per GPU, as HGX systems ship);
- a number: that many GB/s for the whole transfer (1 GB = 1e9 bytes).

`auto` (the default) is NVLink when every GPU of both pools fits one NVLink domain (8 GPUs
of an HGX board, 72 of a GB200 NVL72 rack), else the network.

>>> from ridgeline.specs import load_hardware
>>> from ridgeline.sim.pools import PoolDefaults, resolve_pools
>>> p, d = resolve_pools(PoolDefaults(tp=4), (2, 2), None, None)
>>> link = resolve_kv_link(None, load_hardware("h100-sxm"), p, d)
>>> link.kind, link.bandwidth_bytes_s / 1e9
('network', 200.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ridgeline.errors import RidgelineError
from ridgeline.sim.pools import Pool
from ridgeline.specs.hardware import HardwareSpec

LINK_KINDS = ("auto", "nvlink", "network")
# One 400 Gb/s (50 GB/s) scale-out NIC per GPU: the HGX H100/H200/B200 reference design.
DEFAULT_NETWORK_BYTES_S_PER_GPU = 50e9
MAX_LINK_GB_S = 1e6


@dataclass(frozen=True)
class KvLink:
    """One prefill-to-decode transfer's link."""

    kind: str                 # "nvlink", "network" or "given"
    bandwidth_bytes_s: float  # one transfer's (per-GPU x GPUs in parallel)
    latency_s: float
    per_gpu_bytes_s: float
    parallel_gpus: int
    source: str               # where the per-GPU number came from

    def transfer_s(self, prompt_tokens: float, kv_bytes_per_token: float) -> float:
        return self.latency_s + prompt_tokens * kv_bytes_per_token / self.bandwidth_bytes_s

    def describe(self) -> dict[str, object]:
        return {"link": self.kind, "bandwidth_bytes_s": self.bandwidth_bytes_s,
                "latency_s": self.latency_s, "per_gpu_bandwidth_bytes_s": self.per_gpu_bytes_s,
                "parallel_gpus": self.parallel_gpus, "source": self.source}

    def assumption(self) -> str:
        if self.kind == "given":
            return (f"KV transfer link: {self.bandwidth_bytes_s / 1e9:g} GB/s per transfer "
                    f"(--kv-link), {self.latency_s * 1e6:g} us latency")
        n = self.parallel_gpus
        return (f"KV transfer link: {self.kind}, {self.per_gpu_bytes_s / 1e9:g} GB/s per GPU "
                f"({self.source}) x {n} GPU{'s' if n != 1 else ''} sending in parallel (the "
                f"smaller worker's) = {self.bandwidth_bytes_s / 1e9:g} GB/s per transfer, "
                f"{self.latency_s * 1e6:g} us latency; each prefill worker sends and each "
                "decode worker receives one KV at a time (later ones queue)")


def one_domain(hw: HardwareSpec, prefill: Pool, decode: Pool) -> bool:
    """Whether every GPU of both pools fits one NVLink domain."""
    return hw.nvlink_domain_gpus > 1 and prefill.gpus + decode.gpus <= hw.nvlink_domain_gpus


def resolve_kv_link(text: str | None, hw: HardwareSpec, prefill: Pool, decode: Pool,
                    extra_latency_s: float = 0.0) -> KvLink:
    """The link `--kv-link` names (None: auto) between these pools on this hardware;
    `extra_latency_s` (--kv-transfer-latency-us) adds to the link's own latency."""
    kind = (text or "auto").strip().lower()
    n = min(prefill.gpus_per_worker, decode.gpus_per_worker)
    if kind not in LINK_KINDS:
        try:
            gb_s = float(kind)
        except ValueError:
            gb_s = math.nan
        if not (math.isfinite(gb_s) and 0 < gb_s <= MAX_LINK_GB_S):
            raise RidgelineError(f"--kv-link: got {text!r}; allowed: auto, nvlink, network or "
                                 f"a bandwidth in GB/s (0 to {MAX_LINK_GB_S:g})")
        return KvLink("given", gb_s * 1e9, extra_latency_s, gb_s * 1e9 / n, n, "--kv-link")
    if kind == "auto":
        kind = "nvlink" if one_domain(hw, prefill, decode) else "network"
    if kind == "nvlink":
        if not one_domain(hw, prefill, decode):
            raise RidgelineError(
                f"--kv-link: nvlink, but the pools' {prefill.gpus + decode.gpus} GPUs exceed "
                f"one NVLink domain of {hw.nvlink_domain_gpus} on {hw.name}; allowed: network "
                "or a bandwidth in GB/s")
        per = hw.interconnect_bandwidth_bytes_s
        return KvLink("nvlink", per * n, hw.interconnect_latency_s + extra_latency_s, per, n,
                      f"{hw.name} NVLink per direction")
    given = float(getattr(hw, "network_bandwidth_bytes_s", 0.0) or 0.0)
    per = given or DEFAULT_NETWORK_BYTES_S_PER_GPU
    source = (f"{hw.name} network_bandwidth_bytes_s" if given else
              "default: one 400 Gb/s NIC per GPU")
    latency = float(getattr(hw, "network_latency_s", 0.0) or hw.interconnect_latency_s)
    return KvLink("network", per * n, latency + extra_latency_s, per, n, source)


__all__ = ["DEFAULT_NETWORK_BYTES_S_PER_GPU", "LINK_KINDS", "KvLink", "one_domain",
           "resolve_kv_link"]
