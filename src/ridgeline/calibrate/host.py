"""Host microbenchmarks: memory bandwidth and GEMM throughput, as a `HostProfile`.

Measured as a careful microbenchmark is (see `microbench.time_op`): warm-up, synchronisation before
each clock read, the median of repeats, buffers several times the last-level cache, inputs
filled with non-zero random values and rotated between copies so no repeat hits in cache.

- read / write / copy bandwidth: a buffer of >= 4x the LLC (256 MiB at least), split across
  `threads` threads (numpy releases the GIL): read sums it, write fills it, copy copies it.
  Bytes counted as STREAM does (copy = read + write).
- GEMM [m, k] x [k, n] over a sweep of m: the classic 4096 x 4096 roofline table and, given a
  `ModelSpec`, the model's own projections (qkv, o, gate+up, down, lm_head). The weight is
  rotated through enough copies (at least 2) to exceed 4x the LLC, as a decode step that streams all
  layers' weights would find it. Per dtype: numpy (BLAS) fp32 and fp64; torch CPU fp32/bf16
  and torch CUDA bf16/fp16/fp32 when torch is importable. numpy fp16 matmul is not
  BLAS-backed, so it is not offered.

From the sweep, a two-ceiling roofline t(m) = max(F/C, D/B) is fitted per shape: C is the
best achieved FLOP/s, B the best achieved bytes/s (where bytes are the GEMM's minimum
traffic); residuals are recorded. The profile doubles as a ridgeline hardware file:
`ridgeline estimate --hardware host.json` reads its top-level `peak_flops` and
`memory_bandwidth_bytes_s` (measured, so both efficiencies are 1.0).

>>> # profile = measure_host(quick=True); profile.write("host.json")
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import math
import os
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
from pydantic import BaseModel, Field

from ridgeline.calibrate.microbench import Samples, time_op
from ridgeline.errors import RidgelineError
from ridgeline.inputs import write_text_atomic
from ridgeline.sizes import check_fits
from ridgeline.specs.hardware import HardwareSpec, from_dict
from ridgeline.specs.model import ModelSpec

SCHEMA = "ridgeline.host_profile/1"
MIB = 2**20
DTYPE_BYTES = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2}
SEED_003_M = (1, 8, 64, 256, 4096)  # the m values of the classic roofline table


# --- profile (JSON) --------------------------------------------------------------------------

class BandwidthPoint(BaseModel):
    kind: str  # read | write | copy
    backend: str
    device: str
    buffer_bytes: int
    bytes_per_op: int
    threads: int
    median_bytes_s: float
    min_bytes_s: float
    max_bytes_s: float
    spread_rel: float
    repeats: int
    inner: int


class GemmPoint(BaseModel):
    label: str  # "4096x4096" or the model projection's name
    backend: str
    device: str
    dtype: str
    m: int
    k: int
    n: int
    flops: float
    bytes: float  # minimum traffic: (mk + kn + mn) elements
    weight_copies: int
    median_s: float
    flops_per_s: float  # at the median time
    best_flops_per_s: float  # at the fastest repeat (less sensitive to a shared machine)
    spread_rel: float
    repeats: int
    inner: int


class RooflineFit(BaseModel):
    """t(m) = max(flops/C, bytes/B) fitted to one shape's sweep."""

    label: str
    backend: str
    device: str
    dtype: str
    k: int
    n: int
    compute_flops_s: float  # C: best achieved FLOP/s
    bandwidth_bytes_s: float  # B: best achieved bytes/s
    ridge_m: float  # m where the two ceilings meet (by the fitted C/B)
    max_abs_residual_rel: float
    residuals_rel: list[float]


class MachineInfo(BaseModel):
    cpu_model: str
    logical_cpus: int
    threads: int
    memory_bytes: int
    llc_bytes: int
    platform: str
    python: str
    numpy: str
    blas: list[dict[str, Any]] = Field(default_factory=list)
    torch: str | None = None
    devices: list[str] = Field(default_factory=list)


class HostProfile(BaseModel):
    """Measured host figures with provenance; also a valid ridgeline hardware file."""

    schema_: str = Field(SCHEMA, alias="schema")
    created_utc: str
    ridgeline_version: str
    method: dict[str, Any]
    machine: MachineInfo
    bandwidth: list[BandwidthPoint] = Field(default_factory=list)
    gemm: list[GemmPoint] = Field(default_factory=list)
    fits: list[RooflineFit] = Field(default_factory=list)
    # Hardware-file fields (ridgeline.specs.hardware), derived from the measurements above.
    name: str = "host"
    display_name: str = ""
    peak_flops: dict[str, float] = Field(default_factory=dict)
    memory_bandwidth_bytes_s: float = 0.0
    memory_bytes: float = 0.0
    interconnect_bandwidth_bytes_s: float = 0.0
    interconnect_latency_s: float = 0.0
    compute_efficiency: float = 1.0
    bandwidth_efficiency: float = 1.0
    kernel_overhead_us: float = 0.0
    source_: str = Field("", alias="_source")

    model_config = {"populate_by_name": True}

    def bandwidth_bytes_s(self, kind: str = "read", device: str = "cpu",
                          best: bool = False) -> float:
        """Median bytes/s of a bandwidth kernel (`best`: of its fastest repeat)."""
        pts = [p for p in self.bandwidth if p.kind == kind and p.device == device]
        if not pts:
            raise RidgelineError(f"bandwidth: no {kind} measurement on {device}")
        return max(p.max_bytes_s if best else p.median_bytes_s for p in pts)

    def peak_flops_s(self, dtype: str = "fp32", device: str = "cpu", best: bool = False
                     ) -> float:
        """Largest median FLOP/s over every GEMM of this dtype and device (`best`: over the
        fastest repeats)."""
        pts = [p.best_flops_per_s if best else p.flops_per_s
               for p in self.gemm if p.dtype == dtype and p.device == device]
        if not pts:
            raise RidgelineError(f"dtype: no {dtype} GEMM measured on {device}")
        return max(pts)

    def to_hardware_dict(self, device: str = "cpu", bandwidth_kind: str = "read"
                         ) -> dict[str, Any]:
        """A ridgeline hardware JSON dict for `device` (efficiencies 1.0: figures measured)."""
        peaks = {p.dtype: self.peak_flops_s(p.dtype, device)
                 for p in self.gemm if p.device == device}
        if not peaks:
            raise RidgelineError(f"device: no GEMM measured on {device!r}")
        bw = self.bandwidth_bytes_s(bandwidth_kind, device)
        copy = self.bandwidth_bytes_s("copy", device) if any(
            p.kind == "copy" and p.device == device for p in self.bandwidth) else bw
        return {
            "name": f"host-{device}", "display_name": f"{self.machine.cpu_model} ({device})",
            "peak_flops": peaks, "memory_bandwidth_bytes_s": bw,
            "memory_bytes": float(self.machine.memory_bytes),
            # One host has no interconnect; a copy is the nearest thing to moving data.
            "interconnect_bandwidth_bytes_s": copy, "interconnect_latency_s": 0.0,
            "compute_efficiency": 1.0, "bandwidth_efficiency": 1.0, "kernel_overhead_us": 0.0,
            "_source": (f"ridgeline host microbenchmarks {self.created_utc}: peak = best median "
                        f"GEMM FLOP/s per dtype, bandwidth = median {bandwidth_kind} bytes/s"),
        }

    def to_hardware(self, device: str = "cpu", bandwidth_kind: str = "read") -> HardwareSpec:
        return from_dict(self.to_hardware_dict(device, bandwidth_kind), f"host-{device}")

    def write(self, path: str | Path) -> Path:
        out = Path(path)
        write_text_atomic(out, self.model_dump_json(indent=2, by_alias=True) + "\n")
        return out

    @classmethod
    def read(cls, path: str | Path) -> HostProfile:
        p = Path(path)
        if not p.is_file():
            raise RidgelineError(f"host profile: file {str(p)!r} not found")
        try:
            return cls.model_validate_json(p.read_text())
        except ValueError as exc:
            first = str(exc).splitlines()[0]
            raise RidgelineError(f"host profile: {str(p)!r} is not a host profile ({first})"
                                 ) from None


# --- backends --------------------------------------------------------------------------------

Op = Callable[[int], object]


class Backend(Protocol):
    name: str
    device: str

    def dtypes(self) -> list[str]: ...

    def sync(self) -> None: ...

    def bandwidth_op(self, kind: str, nbytes: int, threads: int) -> tuple[Op, int]: ...

    def gemm_op(self, m: int, k: int, n: int, dtype: str, copies: int) -> Op: ...


def _chunks(n: int, parts: int) -> list[slice]:
    edges = np.linspace(0, n, parts + 1).astype(int)
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(edges)
            if b > a]


class NumpyBackend:
    """numpy on the CPU: BLAS GEMMs; bandwidth kernels split over a thread pool."""

    name = "numpy"
    device = "cpu"
    _NP: ClassVar[dict[str, Any]] = {"fp32": np.float32, "fp64": np.float64}

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.pool: ThreadPoolExecutor | None = None

    def dtypes(self) -> list[str]:
        return ["fp32", "fp64"]

    def sync(self) -> None:
        pass

    def _filled(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        # Non-zero values: untouched or zero pages can read faster than real data.
        return (self.rng.random(shape, dtype=np.float32) + 0.5).astype(self._NP[dtype])

    def bandwidth_op(self, kind: str, nbytes: int, threads: int) -> tuple[Op, int]:
        n = nbytes // 4
        bufs = [self._filled((n,), "fp32") for _ in range(2)]  # rotated sources
        dst = self._filled((n,), "fp32")
        parts = _chunks(n, threads)
        if self.pool is None or self.pool._max_workers != threads:
            self.pool = ThreadPoolExecutor(max_workers=threads)
        pool = self.pool

        def each(fn: Callable[[slice], object]) -> None:
            list(pool.map(fn, parts))

        if kind == "read":
            def op(i: int) -> object:
                src = bufs[i % 2]
                each(lambda s: np.add.reduce(src[s]))
                return None
            return op, n * 4
        if kind == "write":
            def op(i: int) -> object:
                value = np.float32(1.0 + (i % 7))  # non-zero, changes each call
                each(lambda s: dst[s].fill(value))
                return None
            return op, n * 4
        if kind == "copy":
            def op(i: int) -> object:
                src = bufs[i % 2]
                each(lambda s: np.copyto(dst[s], src[s]))
                return None
            return op, 2 * n * 4
        raise RidgelineError(f"bandwidth kind: got {kind!r}; allowed: read, write, copy")

    def gemm_op(self, m: int, k: int, n: int, dtype: str, copies: int) -> Op:
        a = self._filled((m, k), dtype)
        ws = [self._filled((k, n), dtype) for _ in range(copies)]
        out = np.empty((m, n), dtype=self._NP[dtype])

        def op(i: int) -> object:
            return np.matmul(a, ws[i % copies], out=out)
        return op

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None


class TorchBackend:
    """torch on the CPU or one CUDA device (synchronised before each clock read)."""

    name = "torch"

    def __init__(self, device: str = "cpu", seed: int = 0) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self._dt = {"fp32": torch.float32, "fp64": torch.float64, "bf16": torch.bfloat16,
                    "fp16": torch.float16}

    def dtypes(self) -> list[str]:
        return ["bf16", "fp16", "fp32"] if self.device.startswith("cuda") else ["fp32", "bf16"]

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize(self.device)

    def _filled(self, shape: tuple[int, ...], dtype: str) -> Any:
        t = self.torch.rand(shape, generator=self.gen, device=self.device,
                            dtype=self.torch.float32) + 0.5
        return t.to(self._dt[dtype])

    def bandwidth_op(self, kind: str, nbytes: int, threads: int) -> tuple[Op, int]:
        n = nbytes // 4
        bufs = [self._filled((n,), "fp32") for _ in range(2)]
        dst = self._filled((n,), "fp32")
        if kind == "read":
            return (lambda i: bufs[i % 2].sum()), n * 4
        if kind == "write":
            return (lambda i: dst.fill_(1.0 + (i % 7))), n * 4
        if kind == "copy":
            return (lambda i: dst.copy_(bufs[i % 2])), 2 * n * 4
        raise RidgelineError(f"bandwidth kind: got {kind!r}; allowed: read, write, copy")

    def gemm_op(self, m: int, k: int, n: int, dtype: str, copies: int) -> Op:
        a = self._filled((m, k), dtype)
        ws = [self._filled((k, n), dtype) for _ in range(copies)]
        return lambda i: self.torch.matmul(a, ws[i % copies])

    def close(self) -> None:
        pass


# --- machine facts ---------------------------------------------------------------------------

def cache_size_bytes(text: str) -> int:
    """A sysfs cache size ("32K", "1024K", "32M", or plain bytes) in bytes; ValueError when
    it is none of these."""
    text = text.strip().upper()
    mult = {"K": 1024, "M": MIB, "G": 2**30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * mult


def llc_bytes() -> int:
    """Largest CPU cache (sysfs); 32 MiB when unknown."""
    best = 0
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in base.glob("index*"):
        with contextlib.suppress(OSError, ValueError):
            best = max(best, cache_size_bytes((idx / "size").read_text()))
    return best or 32 * MIB


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def blas_info() -> list[dict[str, Any]]:
    """threadpoolctl's view of the loaded BLAS (library, version, threads), if installed."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        cfg = np.show_config(mode="dicts") if np.lib.NumpyVersion(np.__version__) >= "1.25.0" \
            else {}
        blas = (cfg or {}).get("Build Dependencies", {}).get("blas", {})
        return [{"source": "numpy.show_config", **{k: str(v) for k, v in blas.items()}}]
    return [{k: v for k, v in d.items() if k != "filepath"} for d in threadpool_info()]


@contextlib.contextmanager
def _blas_threads(threads: int) -> Iterator[None]:
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=threads):
        yield


def _torch_backends(devices: Sequence[str]) -> list[Any]:
    try:
        import torch
    except ImportError:
        return []
    out: list[Any] = []
    for dev in devices:
        if dev == "cpu" or (dev.startswith("cuda") and torch.cuda.is_available()):
            out.append(TorchBackend(dev))
    return out


# --- sweeps ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class GemmShape:
    label: str
    k: int
    n: int


def model_gemm_shapes(model: ModelSpec) -> list[GemmShape]:
    """The model's own projections as [k, n] weights (m = tokens in the step)."""
    d = model.hidden_size
    shapes = [GemmShape("qkv_proj", d, model.q_dim + 2 * model.kv_dim),
              GemmShape("o_proj", model.attn_out_dim, d)]
    if model.intermediate_size:
        shapes += [GemmShape("gate_up_proj", d, 2 * model.intermediate_size),
                   GemmShape("down_proj", model.intermediate_size, d)]
    shapes.append(GemmShape("lm_head", d, model.vocab_size))
    return shapes


def m_sweep(quick: bool, largest: int = 4096) -> list[int]:
    top = 1024 if quick else largest
    ms = [1, 4, 16, 64, 256, 1024] if quick else [2**i for i in range(13)]
    return [m for m in ms if m <= top]


def gemm_m_values(shape_label: str, dtype: str, quick: bool) -> list[int]:
    """The m (tokens) measured for one GEMM shape: model projections up to m=1024 (decode
    batches, short prefills); the table's square weight to m=4096 (its prefill row), with the
    table's own m values in a full run. fp64 is always the short sweep."""
    seed_table = shape_label == "4096x4096"
    ms = m_sweep(quick or dtype == "fp64", 4096 if seed_table else 1024)
    if seed_table and not quick:
        ms = sorted(set(ms) | set(SEED_003_M))
    return ms


def fit_roofline(points: Sequence[GemmPoint]) -> RooflineFit:
    """Fit t = max(F/C, D/B): C and B are the best achieved rates (exact when the data obey
    the model); residuals are (measured - fitted) / fitted per point."""
    if not points:
        raise RidgelineError("fit: no GEMM points")
    c = max(p.flops / p.median_s for p in points)
    b = max(p.bytes / p.median_s for p in points)
    resid = [(p.median_s - max(p.flops / c, p.bytes / b)) / max(p.flops / c, p.bytes / b)
             for p in points]
    p0 = points[0]
    # Ridge in m for a [m,k]x[k,n] GEMM with e-byte elements: 2mkn/C = e(mk+kn+mn)/B.
    e = DTYPE_BYTES[p0.dtype]
    denom = 2 * p0.k * p0.n / c - e * (p0.k + p0.n) / b
    ridge = e * p0.k * p0.n / b / denom if denom > 0 else math.inf
    return RooflineFit(label=p0.label, backend=p0.backend, device=p0.device, dtype=p0.dtype,
                       k=p0.k, n=p0.n, compute_flops_s=c, bandwidth_bytes_s=b, ridge_m=ridge,
                       max_abs_residual_rel=max(abs(r) for r in resid),
                       residuals_rel=[round(r, 4) for r in resid])


def gemm_point(backend: Backend, shape: GemmShape, m: int, dtype: str, llc: int,
               timing: dict[str, Any]) -> GemmPoint:
    e = DTYPE_BYTES[dtype]
    weight_bytes = shape.k * shape.n * e
    # Enough copies to stream >= 4x the LLC, at most ~1 GiB of them.
    copies = max(2, min(64, math.ceil(4 * llc / weight_bytes), 2**30 // weight_bytes))
    op = backend.gemm_op(m, shape.k, shape.n, dtype, copies)
    s = time_op(op, sync=backend.sync, **timing)
    flops = 2.0 * m * shape.k * shape.n
    return GemmPoint(label=shape.label, backend=backend.name, device=backend.device,
                     dtype=dtype, m=m, k=shape.k, n=shape.n, flops=flops,
                     bytes=float(e * (m * shape.k + shape.k * shape.n + m * shape.n)),
                     weight_copies=copies, median_s=s.median_s,
                     flops_per_s=flops / s.median_s,
                     best_flops_per_s=flops / min(s.seconds), spread_rel=s.spread_rel,
                     repeats=s.repeats, inner=s.inner)


def bandwidth_point(backend: Backend, kind: str, nbytes: int, threads: int,
                    timing: dict[str, Any]) -> BandwidthPoint:
    op, moved = backend.bandwidth_op(kind, nbytes, threads)
    s: Samples = time_op(op, sync=backend.sync, **timing)
    rates = [moved / t for t in s.seconds]
    return BandwidthPoint(kind=kind, backend=backend.name, device=backend.device,
                          buffer_bytes=nbytes, bytes_per_op=moved, threads=threads,
                          median_bytes_s=moved / s.median_s, min_bytes_s=min(rates),
                          max_bytes_s=max(rates), spread_rel=s.spread_rel, repeats=s.repeats,
                          inner=s.inner)


def measure_host(model_spec: ModelSpec | None = None, dtypes: Sequence[str] | None = None,
                 quick: bool = False, *, threads: int | None = None,
                 include_seed_003: bool = True, torch_devices: Sequence[str] = ("cpu", "cuda"),
                 backends: Sequence[Backend] | None = None,
                 progress: Callable[[str], None] | None = None,
                 timer: Callable[[], float] = time.perf_counter) -> HostProfile:
    """Measure this machine: bandwidth (read/write/copy) and GEMM sweeps; return the profile.

    `dtypes` limits the GEMM dtypes (default: every dtype a backend offers); `quick` uses
    fewer repeats, a shorter m sweep and a smaller buffer (about a minute on 2 cores).
    `backends` replaces the detected ones and `timer` the clock (tests pass fakes).
    """
    threads = threads or os.cpu_count() or 1
    llc = llc_bytes()
    buffer = max(4 * llc, (128 if quick else 256) * MIB)

    # copy reads one buffer and writes another: both must fit (a 480 MiB L3 means 3.8 GiB)
    check_fits(2 * buffer, "calibrate host", f"the bandwidth probe (2 buffers of 4x the "
               f"{llc // MIB} MiB last-level cache)", per_unit_bytes=2 * buffer,
               unit="probes", advice="run it where more memory is free")
    timing = {"repeats": 5 if quick else 7, "warmup": 1,
              "min_sample_s": 0.02 if quick else 0.05, "timer": timer}
    say = progress or (lambda _msg: None)
    owned = backends is None
    backs: list[Any] = list(backends) if backends is not None else (
        [NumpyBackend(), *_torch_backends(torch_devices)])
    shapes = ([GemmShape("4096x4096", 4096, 4096)] if include_seed_003 else [])
    if model_spec is not None:
        shapes += model_gemm_shapes(model_spec)
    bw: list[BandwidthPoint] = []
    gemm: list[GemmPoint] = []
    try:
        with _blas_threads(threads):
            for be in backs:
                for kind in ("read", "write", "copy"):
                    say(f"{be.name}/{be.device} {kind} bandwidth, {buffer // MIB} MiB")
                    bw.append(bandwidth_point(be, kind, buffer, threads, timing))
                for dtype in be.dtypes():
                    if dtypes is not None and dtype not in dtypes:
                        continue
                    for shape in shapes:
                        ms = gemm_m_values(shape.label, dtype, quick)
                        say(f"{be.name}/{be.device} {dtype} GEMM {shape.label} m={ms}")
                        for m in ms:
                            gemm.append(gemm_point(be, shape, m, dtype, llc, timing))
    finally:
        if owned:
            for be in backs:
                be.close()
    fits = []
    groups: dict[tuple[str, str, str, str], list[GemmPoint]] = {}
    for p in gemm:
        groups.setdefault((p.label, p.backend, p.device, p.dtype), []).append(p)
    for pts in groups.values():
        fits.append(fit_roofline(pts))
    profile = HostProfile(
        created_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        ridgeline_version=_version(), machine=_machine(threads, llc, backs),
        method={"warmup": timing["warmup"], "repeats": timing["repeats"],
                "min_sample_s": timing["min_sample_s"], "statistic": "median",
                "spread": "(max-min)/median over repeats", "buffer_bytes": buffer,
                "weights_rotated_over": ">= 4x LLC of copies (>= 2)",
                "inputs": "uniform [0.5, 1.5)",
                "quick": quick},
        bandwidth=bw, gemm=gemm, fits=fits)
    if gemm and bw:
        hw = profile.to_hardware_dict("cpu") if any(p.device == "cpu" for p in gemm) else (
            profile.to_hardware_dict(gemm[0].device))
        profile = profile.model_copy(update={
            "name": hw["name"], "display_name": hw["display_name"],
            "peak_flops": hw["peak_flops"],
            "memory_bandwidth_bytes_s": hw["memory_bandwidth_bytes_s"],
            "memory_bytes": hw["memory_bytes"],
            "interconnect_bandwidth_bytes_s": hw["interconnect_bandwidth_bytes_s"],
            "source_": hw["_source"]})
    return profile


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ridgeline")
    except PackageNotFoundError:
        return "unknown"


def _machine(threads: int, llc: int, backs: Sequence[Any]) -> MachineInfo:
    torch_version = None
    devices = sorted({f"{b.name}/{b.device}" for b in backs})
    with contextlib.suppress(ImportError):
        import torch

        torch_version = str(torch.__version__)
        if torch.cuda.is_available():
            devices.append(f"cuda: {torch.cuda.get_device_name(0)}")
    return MachineInfo(cpu_model=cpu_model(), logical_cpus=os.cpu_count() or 0,
                       threads=threads, memory_bytes=memory_bytes(), llc_bytes=llc,
                       platform=platform.platform(), python=platform.python_version(),
                       numpy=np.__version__, blas=blas_info(), torch=torch_version,
                       devices=devices)


__all__ = ["BandwidthPoint", "GemmPoint", "GemmShape", "HostProfile", "MachineInfo",
           "NumpyBackend", "RooflineFit", "TorchBackend", "fit_roofline", "measure_host",
           "model_gemm_shapes"]
