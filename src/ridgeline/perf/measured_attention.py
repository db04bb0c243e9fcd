"""Attention, MLA and collective costs fitted on NVIDIA's measured kernel tables.

`specs/data/kernels_measured_attention_comm.json` (fitted by
benchmarks/accuracy/fit_aic_attention_comm.py on AIConfigurator's measured kernels: each
serving engine's own FlashAttention/FlashInfer/TensorRT kernels and NCCL, per GPU) holds, per
GPU, engine and KV dtype, a few constants of each operator class. A GPU that has them times
its attention operators and collectives with them instead of the A100 attention fit carried by
ratio (perf/kernels.py). Each operator stays max(compute row . w, memory row . w) with rows
affine in the work variables (the form perf/fast_step.py and the C core evaluate):

- decode attention: compute floor_c + F/(C e_c); memory floor + (per_seq + per_seq_kv_head
  h_kv + per_seq_query_head h_q) dq + per_token_kv_head h_kv dc + KV bytes / (beta e_b),
  the KV bytes those of the table (fp8 KV halves them; a window caps the context: dc_w).
- prefill attention: compute floor_c + (pairs + k_w pt) F_pair/(C e_c) + h_q (ps_pair pairs
  + ps_token pt); memory floor + serial (pt + pc) + bytes/(beta e_b).
- MLA decode (absorbed): the same form on the latent cache (kv_lora_rank + rope dims per
  token, replicated by TP) and the absorbed FLOPs, with per_seq_head h per sequence (h the
  query heads per GPU); MLA prefill as prefill.
- "additive" classes (where the fit found the sum closer than the maximum): the memory row
  also carries the compute term.
- collectives: alpha + f(p) bytes / bus bandwidth per GPU count: the engine's custom
  all-reduce (NCCL's where it has none), NCCL all-gather and all-to-all; DeepEP dispatch +
  combine for expert parallelism (`ep_all_to_all_s`). That one line per GPU count is what the
  step model charges (linear in a step's tokens): priced at each step's message size, the
  size-banded form below made the replayed vLLM runs worse (TTFT P90 held out 21.6% against
  13.4%; docs/BENCHMARKS.md), so `collective_s` evaluates the banded form (two or three
  message-size bands, each latency + x/bw + gamma sqrt(x)) beside it for the expert-parallel
  all-to-all and for comparison.

C is the GPU's 16-bit datasheet peak and beta its HBM bandwidth, as in the fit.

>>> mk = measured_for("h100-sxm", "vllm")
>>> mk.gpu, sorted(mk.decode)
('h100_sxm', ['bfloat16', 'fp8'])
>>> measured_for("mi300x", "vllm") is None
True
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.perf.comm import banded_collective_s, ranks_touched

ENGINES = ("vllm", "sglang", "trtllm")
CATALOG_FILE = "kernels_measured_attention_comm.json"
# Collective kinds the tables measure with NCCL (ops.Collectives names -> the fit's names).
_NCCL_KIND = {"all_reduce": "all_reduce", "all_gather": "all_gather",
              "all_to_all": "all_to_all", "reduce_scatter": "reduce_scatter"}


@lru_cache(maxsize=1)
def measured_catalog() -> dict[str, Any]:
    """specs/data/kernels_measured_attention_comm.json, parsed once."""
    path = resources.files("ridgeline.specs").joinpath("data", CATALOG_FILE)
    return json.loads(path.read_text())


@dataclass(frozen=True)
class MeasuredKernels:
    """One GPU's fitted attention/MLA/collective constants for one engine."""

    gpu: str  # the measured system (AIConfigurator's folder name)
    engine: str
    decode: dict[str, Any] = field(default_factory=dict)  # by KV dtype
    prefill: dict[str, Any] = field(default_factory=dict)
    mla_decode: dict[str, Any] = field(default_factory=dict)
    mla_prefill: dict[str, Any] = field(default_factory=dict)
    custom_all_reduce: dict[str, Any] | None = None
    nccl: dict[str, Any] = field(default_factory=dict)
    deepep: dict[str, Any] = field(default_factory=dict)  # low_latency / normal

    def attention(self, cls: str, kv_bytes: float) -> dict[str, Any] | None:
        """The constants of `cls` (decode, prefill, mla_decode, mla_prefill) for a KV cache of
        `kv_bytes` per element: the fp8 fit for 1-byte caches, else the 16-bit one (the other
        where only one was measured)."""
        fits = getattr(self, cls)
        want = ("fp8", "bfloat16") if kv_bytes <= 1.0 else ("bfloat16", "fp8")
        for k in want:
            if k in fits:
                return fits[k]
        return None


def measured_for(hardware: str, engine: str = "vllm") -> MeasuredKernels | None:
    """The measured constants of catalog GPU `hardware` under `engine` (None: no tables)."""
    if engine not in ENGINES:
        raise RidgelineError(f"engine: got {engine!r}; allowed: {', '.join(ENGINES)}")
    cat = measured_catalog()
    gpu = cat["hardware"].get(hardware)
    if gpu is None or gpu not in cat["gpus"]:
        return None
    g = cat["gpus"][gpu]
    e = g["engines"].get(engine)
    if e is None:
        return None
    deepep = {k.removeprefix("deepep_"): v for k, v in e.items() if k.startswith("deepep_")}
    if not deepep:  # DeepEP was measured under SGLang; other engines may run it too
        deepep = {k.removeprefix("deepep_"): v for k, v in
                  g["engines"].get("sglang", {}).items() if k.startswith("deepep_")}
    return MeasuredKernels(gpu=gpu, engine=engine, decode=e.get("decode", {}),
                           prefill=e.get("prefill", {}), mla_decode=e.get("mla_decode", {}),
                           mla_prefill=e.get("mla_prefill", {}),
                           custom_all_reduce=e.get("custom_all_reduce"),
                           nccl=g.get("nccl", {}), deepep=deepep)


def _eff(x: float) -> float:
    """A fitted efficiency; 0 (the term was unused by the fit) bounds the row at the peak."""
    return float(x) if x > 0 else 1.0


def attention_rows(mk: MeasuredKernels, name: str, is_mla: bool, f: np.ndarray,
                   d: np.ndarray, layers: float, driver: int, var: dict[str, int],
                   hw: Any, kv_bytes: float, floor_scale: float = 1.0,
                   decode_bandwidth_scale: float = 1.0, kv_heads: float = 0.0,
                   query_heads: float = 0.0, rank_share: float = 1.0
                   ) -> tuple[np.ndarray, np.ndarray] | None:
    """(compute row, memory row) of attention operator `name` whose FLOPs and bytes rows are
    f, d (whole-model, per GPU), or None where this GPU has no fit for it. `floor_scale`:
    the share of the measured floors left in the engine's CUDA-graph steps;
    `decode_bandwidth_scale`: the engine's serving decode bandwidth as a share of the
    microbenchmark's (both fitted on real engine runs, kernels.json "vllm"); `kv_heads`,
    `query_heads`: per GPU (KV heads 0 for MLA), for the fitted per-head costs; `rank_share`:
    one attention rank's share of the step's sequences and tokens (1/attn_dp; f and d already
    carry it), which the fitted per-sequence, per-head and per-token constants take too."""
    decode = "decode" in name
    window = name.endswith("_window")
    cls = ("mla_" if is_mla else "") + ("decode" if decode else "prefill")
    c = mk.attention(cls, kv_bytes)
    if c is None:
        return None
    # More KV heads per GPU than the table measured (H100's decode tables stop at 8: an MHA
    # model's 32 is an extrapolation the real vLLM runs do not bear out): not priced here.
    if kv_heads > c.get("max_kv_heads", float("inf")):
        return None
    c16 = hw.peak("bf16")
    bw = hw.memory_bandwidth_bytes_s
    e_c = _eff(c["compute_efficiency"])
    e_b = _eff(c["bandwidth_efficiency"])
    if decode:
        e_b *= decode_bandwidth_scale
    fs = floor_scale * 1e-6 * layers  # fitted floors are microseconds per layer
    comp = np.zeros_like(f)
    mem = np.zeros_like(d)
    if decode:
        dc = var["dc_w" if window else "dc"]
        comp[:] = f / (c16 * e_c)
        # The context's KV (or latent) read, and the new token's write (one token more).
        mem[dc] = d[dc] / (bw * e_b)
        # Per sequence, and per sequence and KV head (one work unit each: launch, split,
        # merge), as the per-sequence cost is charged; per sequence and query head (its Q
        # in, O out, split partials merged; MLA's per_seq_head_ns).
        per_seq = c["per_seq_us"] + c.get("per_seq_kv_head_us", 0.0) * kv_heads \
            + 1e-3 * (c.get("per_seq_query_head_ns", 0.0)
                      + c.get("per_seq_head_ns", 0.0)) * query_heads
        # Per cached token and KV head (page lookup, softmax step: not by the head dim).
        per_tok = c.get("per_token_kv_head_ps", 0.0) * 1e-12 * kv_heads * layers * rank_share
        mem[dc] += per_tok
        mem[var["dq"]] = per_seq * 1e-6 * layers * rank_share + d[dc] / (bw * e_b) + per_tok
    else:
        w = "_w" if window else ""
        pairs, pc = var["pairs" + w], var["pc" + w]
        per_pair = f[pairs]
        comp[pairs] = per_pair / (c16 * e_c)
        comp[var["pt"]] = c["key_waste_per_new_token"] * per_pair / (c16 * e_c)
        # Costs per (pair, query head) and (new token, query head) that do not scale with the
        # head dim (softmax exponentials and rescaling, the causal mask).
        heads = query_heads * layers * 1e-12 * rank_share
        comp[pairs] += c.get("ps_per_pair_head", 0.0) * heads
        comp[var["pt"]] += c.get("ps_per_token_head", 0.0) * heads
        ser = c.get("serial_ns_per_token", 0.0) * 1e-9 * layers * rank_share
        # New tokens' Q, K, V, O (and the cache write); the cached context's K, V read.
        mem[var["pt"]] = ser + d[var["pt"]] / (bw * e_b)
        mem[pc] = ser + d[pc] / (bw * e_b)
    mem[driver] += c["floor_us"] * fs
    # A fixed cost the streaming overlaps (the max form: max(floor, stream)).
    comp[driver] += c.get("compute_floor_us", 0.0) * fs
    if c.get("additive"):
        mem = mem + comp
    return comp, mem


def _fit_note(c: dict[str, Any]) -> str:
    f = c["_fit"]
    sub = f", {c['_substitute_engine']}'s table" if "_substitute_engine" in c else ""
    return (f"{f['kernel_source']}{sub}, {f['rows']} rows, residual median "
            f"{100 * f['residual']['median_ape']:.1f}%, {f['cv']['kind']} CV median "
            f"{100 * f['cv']['median_ape']:.1f}%")


def assumptions(mk: MeasuredKernels, kv_bytes: float, is_mla: bool, tp: int) -> list[str]:
    """What the measured attention and collective constants are, with their provenance."""
    cat = measured_catalog()
    out = [f"attention{' and collectives' if tp > 1 else ''}: NVIDIA's measured {mk.engine} "
           f"kernels on {mk.gpu} (specs/data/{CATALOG_FILE}, {cat['date']})"]
    pre = "mla_" if is_mla else ""
    d = mk.attention(pre + "decode", kv_bytes)
    if d is not None:
        heads = "".join(f" + {d[k]:g} {unit}" for k, unit in (
            ("per_seq_query_head_ns", "ns per sequence and query head"),
            ("per_seq_head_ns", "ns per sequence and head"),
            ("per_token_kv_head_ps", "ps per cached token and KV head")) if d.get(k))
        out.append(f"decode attention: {d['floor_us']:g} us + {d['per_seq_us']:g} us per "
                   f"sequence{heads} + the KV read at {_eff(d['bandwidth_efficiency']):.3g} of "
                   f"peak bandwidth{' (added to the compute)' if d.get('additive') else ''} "
                   f"({_fit_note(d)})")
    p = mk.attention(pre + "prefill", kv_bytes)
    if p is not None:
        out.append(f"prefill attention: {_eff(p['compute_efficiency']):.3g} of the 16-bit peak "
                   f"on the causal pairs, at least {p['floor_us']:g} us + "
                   f"{p.get('serial_ns_per_token', 0.0):g} ns/token ({_fit_note(p)})")
    if tp > 1:
        lb = collective(mk, "all_reduce", tp)
        if lb is not None:
            src = f"{mk.engine} custom" if mk.custom_all_reduce else "NCCL"
            out.append(f"all-reduce ({src}, measured): {lb[0] * 1e6:.3g} us + 2(p-1)/p bytes / "
                       f"{lb[1] / 1e9:.4g} GB/s")
    return out


def _row(rows: dict[str, Any], p: int) -> dict[str, Any]:
    measured = sorted(int(k) for k in rows)
    # Beyond the measured counts: the nearest measured one below (or the smallest).
    pick = max((q for q in measured if q <= p), default=measured[0])
    return rows[str(pick)]


def collective(mk: MeasuredKernels, kind: str, p: int) -> tuple[float, float] | None:
    """(latency s, bus bandwidth bytes/s) of `kind` over p GPUs of one NVLink domain, or None
    where the tables have no such collective (send/receive)."""
    r = _fit_row(mk, kind, p)
    if r is None:
        return None
    return r["latency_us"] * 1e-6, float(r["bus_bandwidth_bytes_s"])


def _fit_row(mk: MeasuredKernels, kind: str, p: int) -> dict[str, Any] | None:
    if kind == "all_reduce" and mk.custom_all_reduce:
        return _row(mk.custom_all_reduce["by_gpus"], p)
    if kind in _NCCL_KIND and _NCCL_KIND[kind] in mk.nccl:
        return _row(mk.nccl[_NCCL_KIND[kind]]["by_gpus"], p)
    return None


def _bus_factor(kind: str, p: int) -> float:
    if p <= 1:
        return 0.0
    return (2.0 if kind == "all_reduce" else 1.0) * (p - 1) / p


def collective_s(mk: MeasuredKernels, kind: str, p: int, message_bytes: Any
                 ) -> np.ndarray | None:
    """Seconds of `kind` over p GPUs (one NVLink domain) for each message of `message_bytes`
    bytes (per GPU, as the tables time them), in the size-banded form; the one line where
    the catalog has no bands; None where the tables have no such collective."""
    r = _fit_row(mk, kind, p)
    if r is None:
        return None
    f = _bus_factor(kind, p)
    b = collective_bands(mk, kind, p)
    if b is None:
        x = f * np.asarray(message_bytes, dtype=np.float64)
        return r["latency_us"] * 1e-6 + x / float(r["bus_bandwidth_bytes_s"])
    edges, bands = b
    if len(bands) == 3:
        return banded_collective_s(message_bytes, f, edges[0], bands[0], bands[1], edges[1],
                                   bands[2])
    return banded_collective_s(message_bytes, f, edges[0], bands[0], bands[1])


def collective_bands(mk: MeasuredKernels, kind: str, p: int
                     ) -> tuple[tuple[float, ...], tuple[tuple[float, float, float], ...]] | None:
    """The size-banded form of `kind` over p GPUs (one NVLink domain) that `collective_s`
    evaluates: (edge message bytes, increasing; bands, one more), each band (latency s, bus
    bytes/s, s per sqrt bus byte); None where the catalog has no bands for it."""
    r = _fit_row(mk, kind, p)
    b = None if r is None else r.get("banded")
    if b is None:
        return None

    def band(c: dict[str, Any]) -> tuple[float, float, float]:
        return (c["latency_us"] * 1e-6, float(c["bus_bandwidth_bytes_s"]),
                c["sqrt_us_per_sqrt_byte"] * 1e-6)

    edges = [float(b["edge_message_bytes"])]
    bands = [band(b["below"]), band(b["above"])]
    if "high" in b:  # a third regime (a custom all-reduce's switch to NCCL)
        edges.append(float(b["edge_high_message_bytes"]))
        bands.append(band(b["high"]))
    return tuple(edges), tuple(bands)


PCIE_SERVER_GPUS = 8


def domain_gpus(hw: Any) -> int:
    """GPUs one collective reaches without the network (the NVLink domain, or a PCIe server)."""
    domain = int(getattr(hw, "nvlink_domain_gpus", 8) or 8)
    # A PCIe-only part (a domain of 1) still joins up to a server's 8 GPUs over PCIe, the
    # links its own collective tables were measured on; past the server is the network.
    return domain if domain > 1 else PCIE_SERVER_GPUS


def domain_collective(mk: MeasuredKernels, kind: str, p: int, hw: Any
                      ) -> tuple[float, float] | None:
    """`collective` over p GPUs of `hw`: within its NVLink domain (`nvlink_domain_gpus`, 8
    on HGX boards) as measured; a larger group also crosses the network between nodes, whose
    per-GPU bandwidth (`network_bandwidth_bytes_s` of the hardware file) then bounds the bus
    bandwidth, at one more network latency. Error where the file gives none."""
    domain = domain_gpus(hw)
    inner = collective(mk, kind, min(p, domain))
    if inner is None or p <= domain:
        return inner
    net = float(getattr(hw, "network_bandwidth_bytes_s", 0.0) or 0.0)
    flag = "--ep" if kind == "all_to_all" else "--tp"
    if net <= 0.0:
        raise RidgelineError(
            f"{flag}: got {p}; allowed: at most {domain} on {hw.name} (its NVLink domain; "
            "the hardware file gives no network bandwidth to cost the links between nodes)")
    lat, bw = inner
    net_lat = float(getattr(hw, "network_latency_s", 0.0) or hw.interconnect_latency_s)
    return lat + net_lat, min(bw, net)


def deepep_phase(mk: MeasuredKernels, kind: str
                 ) -> tuple[float, float, float, float, float] | None:
    """DeepEP phase `kind` ("deepep_<normal|low_latency>_<dispatch|combine>") as fitted:
    (latency s, bandwidth bytes/s, seconds per token, seconds per expert of the model, 1.0
    where a token is sent once per GPU touched else 0.0: once per expert picked); time =
    latency + experts x per expert + tokens x (copies x hidden x element bytes / bandwidth +
    per token). None where it was not measured."""
    mode, _, phase = kind.removeprefix("deepep_").rpartition("_")
    fit = mk.deepep.get(mode)
    if not fit or phase not in fit:
        return None
    ph = fit[phase]
    return (ph["latency_us"] * 1e-6, float(ph["bandwidth_bytes_s"]),
            ph.get("per_token_ns", 0.0) * 1e-9, ph.get("per_expert_us", 0.0) * 1e-6,
            1.0 if ph.get("copies") == "gpus_touched" else 0.0)


def ep_all_to_all_s(mk: MeasuredKernels, tokens: float, hidden: int, topk: int, ep: int,
                    mode: str = "normal", experts: int = 0) -> float:
    """Seconds of one MoE layer's expert-parallel dispatch + combine of `tokens` tokens (this
    GPU's) of width `hidden` to `topk` of `experts` experts over `ep` GPUs: DeepEP's fit where
    measured (`mode`: "low_latency" or "normal": a latency, a cost per token and per expert,
    and the bytes; normal sends one copy per GPU touched; `experts` 0, unknown: `topk` copies
    and no per-expert cost), else NCCL's all-to-all twice (16-bit activations)."""
    if ep <= 1 or tokens <= 0:
        return 0.0
    fit = mk.deepep.get(mode)
    if fit:
        total = 0.0
        for ph in (fit["dispatch"], fit["combine"]):
            copies = (ranks_touched(topk, experts, ep)
                      if ph.get("copies") == "gpus_touched" and experts else float(topk))
            total += ph["latency_us"] * 1e-6 + tokens * copies * hidden \
                * ph["bytes_per_element"] / ph["bandwidth_bytes_s"] \
                + tokens * ph.get("per_token_ns", 0.0) * 1e-9 \
                + experts * ph.get("per_expert_us", 0.0) * 1e-6
        return total
    msg = tokens * topk * hidden * 2.0
    t = collective_s(mk, "all_to_all", ep, msg)
    if t is None:
        raise RidgelineError(f"ep: got {ep}; allowed: 1 on {mk.gpu} (no all-to-all measured)")
    return 2.0 * float(t)


__all__ = ["ENGINES", "MeasuredKernels", "assumptions", "attention_rows", "collective",
           "collective_bands", "collective_s", "deepep_phase", "domain_collective", "domain_gpus",
           "ep_all_to_all_s", "measured_catalog", "measured_for", "ranks_touched"]
