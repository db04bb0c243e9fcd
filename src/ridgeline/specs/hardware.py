"""Hardware spec: dense peak FLOP/s per dtype, memory, interconnect, efficiency factors.

Catalog files (`specs/data/hardware/*.json`) carry each value's datasheet source in
`_source`. Peaks are dense: the structured-sparsity figure is never used. A user file has the
same fields:

    {"name": "my-gpu", "peak_flops": {"bf16": 1.0e15, "fp8": 2.0e15, "fp32": 6e13},
     "memory_bandwidth_bytes_s": 3.0e12, "memory_bytes": 8.0e10,
     "interconnect_bandwidth_bytes_s": 4.5e11, "interconnect_latency_s": 5e-6,
     "compute_efficiency": 0.7, "bandwidth_efficiency": 0.85, "kernel_overhead_us": 2.0}

>>> h = load_hardware("h100-sxm")
>>> round(h.ridge_point("bf16"))
295
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from ridgeline.errors import RidgelineError
from ridgeline.inputs import load_json, validate_document

REQUIRED = ("peak_flops", "memory_bandwidth_bytes_s", "memory_bytes",
            "interconnect_bandwidth_bytes_s")


_Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class HardwareFile(BaseModel):
    """The schema of a hardware JSON file: the catalog's fields, each bounded where no
    accelerator comes near (1e20 FLOP/s, 1e16 B/s, 1e15 bytes)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    name: str | None = Field(None, max_length=200)
    display_name: str | None = Field(None, max_length=200)
    vendor: str | None = Field(None, max_length=200)
    interconnect: str | None = Field(None, max_length=200)
    kernel_profile: str | None = Field(None, max_length=200)
    peak_flops: dict[str, Annotated[_Positive, Field(le=1e20)]] = Field(min_length=1)
    memory_bandwidth_bytes_s: Annotated[_Positive, Field(le=1e16)]
    memory_bytes: Annotated[_Positive, Field(le=1e15)]
    interconnect_bandwidth_bytes_s: Annotated[_Positive, Field(le=1e16)]
    interconnect_latency_s: float | None = Field(None, ge=0, le=1.0)
    compute_efficiency: float | None = Field(None, gt=0, le=1.0)
    bandwidth_efficiency: float | None = Field(None, gt=0, le=1.0)
    kernel_overhead_us: float | None = Field(None, ge=0, le=1e6)
    price_usd_per_gpu_hour: float | None = Field(None, ge=0, le=1e6)
    nvlink_domain_gpus: int | None = Field(None, ge=1, le=576)
    network_bandwidth_bytes_s: float | None = Field(None, ge=0, le=1e16)
    network_latency_s: float | None = Field(None, ge=0, le=1.0)


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator. Peaks are dense; efficiencies scale them to what kernels achieve."""

    name: str
    peak_flops: dict[str, float]
    memory_bandwidth_bytes_s: float
    memory_bytes: float
    interconnect_bandwidth_bytes_s: float  # per direction, per GPU
    interconnect_latency_s: float = 5e-6
    compute_efficiency: float = 0.7
    bandwidth_efficiency: float = 0.85
    kernel_overhead_us: float = 2.0
    display_name: str = ""
    interconnect: str = ""
    source: str = ""
    # The entry of specs/data/kernels.json whose fitted kernel model times this GPU's
    # operators ("" = the plain roofline with the efficiency factors above). Catalog GPUs
    # name themselves; a user file may name one ("kernel_profile": "h100-sxm").
    kernel_profile: str = ""
    # GPUs one NVLink / xGMI domain joins at full link bandwidth: 8 on HGX and MI300-class
    # boards, 72 on NVL72 racks, 1 on PCIe-only cards (collectives beyond it cross PCIe or
    # the network).
    nvlink_domain_gpus: int = 8
    # Scale-out network bandwidth per GPU, per direction (its NIC's share: 0 = not known),
    # and the start-up latency of a collective crossing it (0 = the interconnect's). A TP or
    # EP group larger than the NVLink domain crosses it; without a bandwidth it is refused.
    network_bandwidth_bytes_s: float = 0.0
    network_latency_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for a compute dtype (fp16 falls back to bf16 and vice versa)."""
        for key in (dtype, {"fp16": "bf16", "bf16": "fp16"}.get(dtype, dtype)):
            if key in self.peak_flops:
                return float(self.peak_flops[key])
        raise RidgelineError(
            f"activations: {self.name} has no {dtype} tensor-core peak; allowed here: "
            f"{', '.join(sorted(self.peak_flops))} (weight-only {dtype} runs with "
            f"--activations bf16)")

    def ridge_point(self, dtype: str = "bf16") -> float:
        """Peak FLOP/s over peak bandwidth: the arithmetic intensity where the roofline bends."""
        return self.peak(dtype) / self.memory_bandwidth_bytes_s

    def with_efficiency(self, compute_efficiency: float | None = None,
                        bandwidth_efficiency: float | None = None,
                        kernel_overhead_us: float | None = None) -> HardwareSpec:
        """A copy with the given efficiency factors overridden (None keeps the file's).

        A compute or bandwidth efficiency given here replaces the fitted kernel model: the
        copy is timed by the plain roofline with these factors (`kernel_profile` cleared).
        """
        out = self
        for name, value in (("compute_efficiency", compute_efficiency),
                            ("bandwidth_efficiency", bandwidth_efficiency)):
            if value is not None:
                if not 0 < value <= 1:
                    raise RidgelineError(f"{name.replace('_', '-')}: got {value}; allowed: "
                                         "0 < value <= 1")
                out = replace(out, **{name: float(value)}, kernel_profile="")
        if kernel_overhead_us is not None:
            if kernel_overhead_us < 0:
                raise RidgelineError(f"kernel-overhead-us: got {kernel_overhead_us}; allowed: "
                                     ">= 0")
            out = replace(out, kernel_overhead_us=float(kernel_overhead_us))
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name, "display_name": self.display_name,
            "peak_flops_per_s": dict(self.peak_flops),
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_s,
            "memory_bytes": self.memory_bytes,
            "interconnect": self.interconnect,
            "interconnect_bandwidth_bytes_per_s": self.interconnect_bandwidth_bytes_s,
            "interconnect_latency_s": self.interconnect_latency_s,
            "compute_efficiency": self.compute_efficiency,
            "bandwidth_efficiency": self.bandwidth_efficiency,
            "kernel_overhead_us": self.kernel_overhead_us,
            "kernel_profile": self.kernel_profile,
            "nvlink_domain_gpus": self.nvlink_domain_gpus,
            "network_bandwidth_bytes_per_s": self.network_bandwidth_bytes_s,
            "network_latency_s": self.network_latency_s,
        }


def from_dict(data: dict[str, Any], name: str) -> HardwareSpec:
    """Build a HardwareSpec from a catalog or user JSON dict."""
    for key in REQUIRED:
        if data.get(key) is None:
            raise RidgelineError(f"hardware {name}: missing field '{key}'")
    peaks = data["peak_flops"]
    if not isinstance(peaks, dict) or not peaks:
        raise RidgelineError(f"hardware {name}: field 'peak_flops' must map dtype -> FLOP/s")
    try:
        spec = HardwareSpec(
            name=str(data.get("name") or name),
            peak_flops={str(k).lower(): float(v) for k, v in peaks.items()},
            memory_bandwidth_bytes_s=float(data["memory_bandwidth_bytes_s"]),
            memory_bytes=float(data["memory_bytes"]),
            interconnect_bandwidth_bytes_s=float(data["interconnect_bandwidth_bytes_s"]),
            interconnect_latency_s=float(data.get("interconnect_latency_s", 5e-6)),
            compute_efficiency=float(data.get("compute_efficiency", 0.7)),
            bandwidth_efficiency=float(data.get("bandwidth_efficiency", 0.85)),
            kernel_overhead_us=float(data.get("kernel_overhead_us", 2.0)),
            display_name=str(data.get("display_name", "")),
            interconnect=str(data.get("interconnect", "")),
            source=str(data.get("_source", "")),
            kernel_profile=str(data.get("kernel_profile", "")),
            nvlink_domain_gpus=_domain_gpus(data.get("nvlink_domain_gpus", 8), name),
            network_bandwidth_bytes_s=float(data.get("network_bandwidth_bytes_s") or 0.0),
            network_latency_s=float(data.get("network_latency_s") or 0.0),
        )
    except (TypeError, ValueError) as exc:
        raise RidgelineError(f"hardware {name}: a numeric field is not a number ({exc})") from None
    # Finite and within a bound no accelerator comes near: 1e20 FLOP/s, 1e16
    # B/s, 1e15 bytes; NaN or 1e308 would make every estimate garbage without a word.
    bounds = {"memory_bandwidth_bytes_s": 1e16, "memory_bytes": 1e15,
              "interconnect_bandwidth_bytes_s": 1e16, "interconnect_latency_s": 1.0,
              "kernel_overhead_us": 1e6, "network_bandwidth_bytes_s": 1e16,
              "network_latency_s": 1.0}
    for key, hi in bounds.items():
        v = getattr(spec, key)
        zero_ok = key in ("interconnect_latency_s", "kernel_overhead_us",
                          "network_bandwidth_bytes_s", "network_latency_s")
        if not ((v >= 0 if zero_ok else v > 0) and v <= hi):
            raise RidgelineError(f"hardware {name}: field '{key}': got {v!r}; allowed: a "
                                 f"finite number {'>= 0' if zero_ok else '> 0'} and at most "
                                 f"{hi:g}")
    for dtype, v in spec.peak_flops.items():
        if not 0 < v <= 1e20:
            raise RidgelineError(f"hardware {name}: field 'peak_flops.{dtype}': got {v!r}; "
                                 "allowed: a finite number > 0 and at most 1e+20")
    for key in ("compute_efficiency", "bandwidth_efficiency"):
        if not 0 < getattr(spec, key) <= 1:
            raise RidgelineError(f"hardware {name}: field '{key}': got {getattr(spec, key)!r};"
                                 " allowed: a number in (0, 1]")
    checked = spec.with_efficiency(spec.compute_efficiency, spec.bandwidth_efficiency,
                                   spec.kernel_overhead_us)
    return replace(checked, kernel_profile=spec.kernel_profile)  # validation only


def _domain_gpus(value: Any, name: str) -> int:
    """`nvlink_domain_gpus`: a whole number from 1 to 576 (the largest NVLink domain sold)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or \
            value != int(value) or not 1 <= value <= 576:
        raise RidgelineError(f"hardware {name}: field 'nvlink_domain_gpus': got {value!r}; "
                             "allowed: a whole number from 1 to 576")
    return int(value)


HOST_PROFILE_SCHEMA_PREFIX = "ridgeline.host_profile/"


def check_hardware_file(data: dict[str, Any], source: str) -> None:
    """A user's hardware file read by its schema (`HardwareFile`): a field it does not know
    (`memory_bandwith_bytes_s`) is refused, naming it, rather than the default used;
    keys starting with `_` are notes (the catalog's `_source`)."""
    doc = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("_"))}
    schema = doc.get("schema")
    if isinstance(schema, str) and schema.startswith(HOST_PROFILE_SCHEMA_PREFIX):
        # `calibrate host` writes a host profile that is also a hardware file: its
        # measurements and provenance are its own writer's schema; the hardware fields are
        # still checked here.
        doc = {k: v for k, v in doc.items() if k in HardwareFile.model_fields}
    validate_document(HardwareFile, doc, source)


def _catalog_dir() -> Any:
    return resources.files("ridgeline.specs").joinpath("data", "hardware")


def hardware_catalog() -> dict[str, dict[str, Any]]:
    """Catalog name -> raw JSON dict."""
    out: dict[str, dict[str, Any]] = {}
    for entry in sorted(_catalog_dir().iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".json"):
            out[entry.name[:-5]] = json.loads(entry.read_text())
    return out


def load_hardware(name_or_path: str) -> HardwareSpec:
    """A catalog GPU name (see `ridgeline hardware`) or a path to a hardware JSON file."""
    path = Path(name_or_path)
    if path.suffix == ".json" or path.is_file():
        if not path.is_file():
            raise RidgelineError(f"hardware: file {str(path)!r} not found")
        data = load_json(path, "hardware", max_bytes=16 << 20)
        if not isinstance(data, dict):
            raise RidgelineError(f"hardware: {str(path)!r} is not a hardware JSON object")
        check_hardware_file(data, f"hardware: {str(path)!r}")
        return from_dict(data, path.stem)
    key = catalog_name(name_or_path)
    entry = _catalog_dir().joinpath(f"{key}.json")
    spec = from_dict(json.loads(entry.read_text()), key)
    # Catalog GPUs are timed by the fitted kernel model (measured or derived by rule).
    return replace(spec, kernel_profile=spec.kernel_profile or key)


def _normalize(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100-80gb-hbm3' (the alias table's spelling)."""
    import re

    key = re.sub(r"[\s_]+", "-", name.strip().lower())
    for prefix in ("amd-instinct-", "nvidia-", "amd-"):
        key = key.removeprefix(prefix)
    return key


def catalog_name(name: str) -> str:
    """The catalog entry a typed GPU name means: the file name itself, or one entry of the
    alias table (specs/data/hardware_aliases.json); an ambiguous or unknown name is a
    one-line error listing the choices.

    >>> catalog_name("H100 SXM"), catalog_name("NVIDIA A100-SXM4-80GB")
    ('h100-sxm', 'a100-80gb')
    """
    catalog = hardware_catalog()
    for key in (name.lower(), _normalize(name)):
        if key in catalog:
            return key
    table = _alias_table()
    key = _normalize(name)
    if key in table["aliases"]:
        return str(table["aliases"][key])
    if key in table["ambiguous"]:
        raise RidgelineError(f"hardware: got {name!r}, which could be "
                             f"{' or '.join(table['ambiguous'][key])}; allowed: one of "
                             f"{', '.join(table['ambiguous'][key])}")
    raise RidgelineError(f"hardware: got {name!r}; allowed: a JSON path or one of "
                         f"{', '.join(sorted(catalog))} (or an alias that `ridgeline "
                         "hardware --json` lists)")


def _alias_table() -> dict[str, Any]:
    return dict(json.loads(resources.files("ridgeline.specs").joinpath(
        "data", "hardware_aliases.json").read_text()))


def aliases_of(name: str) -> list[str]:
    """The alias-table names that resolve to one catalog entry (for `ridgeline hardware`)."""
    return sorted(a for a, target in _alias_table()["aliases"].items() if target == name)
