"""The newer GPUs of the catalog, the NVLink domain of every entry, and the names people
type for them (one alias table; an ambiguous name is refused with its choices).

Peaks are compared with the datasheet figures written out here by hand (dense = half the
with-sparsity figure where the datasheet gives only that)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.errors import RidgelineError
from ridgeline.specs import hardware_catalog, load_hardware
from ridgeline.specs.hardware import catalog_name, from_dict


@pytest.mark.parametrize(("name", "peaks", "bandwidth", "memory_gb", "domain"), [
    # HGX B300: FP8 72 PF sparse / 8 / 2; FP4 105 PF dense / 8; 8 TB/s; 288 GB
    ("b300", {"bf16": 2.25e15, "fp8": 4.5e15, "fp4": 13.125e15}, 8e12, 288, 8),
    # GB300 NVL72: FP8 720 PF sparse / 72 / 2; FP4 1,080 PF dense / 72; 576 TB/s / 72
    ("gb300", {"bf16": 2.5e15, "fp8": 5e15, "fp4": 15e15}, 8e12, 288, 72),
    # MI325X: the MI300X die (1,307.4 / 2,614.9 TFLOPS dense) with 256 GB at 6 TB/s
    ("mi325x", {"bf16": 1307.4e12, "fp8": 2614.9e12}, 6e12, 256 * 2**30 / 1e9, 8),
    # MI355X: 256 CUs x 2.4 GHz x 4,096 FLOPs/clock (bf16), x2 fp8, x4 fp4
    ("mi355x", {"bf16": 256 * 2.4e9 * 4096, "fp8": 256 * 2.4e9 * 8192,
                "fp4": 256 * 2.4e9 * 16384}, 8e12, 288 * 2**30 / 1e9, 8),
    # RTX PRO 6000 Blackwell Server: 4,000 FP4 TOPS sparse; 512-bit x 28 Gbps; PCIe only
    ("rtx-pro-6000", {"bf16": 500e12, "fp8": 1000e12, "fp4": 2000e12}, 512 / 8 * 28e9,
     97887 * 2**20 / 1e9, 1),
    # L4: BF16 242 / 2, FP8 485 / 2 TFLOPS; 300 GB/s; PCIe only
    ("l4", {"bf16": 121e12, "fp8": 242.5e12}, 300e9, 23034 * 2**20 / 1e9, 1),
])
def test_new_gpus_against_their_datasheets(name: str, peaks: dict[str, float],
                                           bandwidth: float, memory_gb: float,
                                           domain: int) -> None:
    h = load_hardware(name)
    for dtype, value in peaks.items():
        assert h.peak(dtype) == pytest.approx(value, rel=1e-4), dtype
    assert h.memory_bandwidth_bytes_s == pytest.approx(bandwidth, rel=1e-9)
    assert h.memory_bytes / 1e9 == pytest.approx(memory_gb, rel=1e-6)
    assert h.nvlink_domain_gpus == domain
    raw = hardware_catalog()[name]
    assert "datasheet" in raw["_source"].lower() or "data sheet" in raw["_source"].lower()
    assert raw["price_usd_per_gpu_hour"] > 0


def test_every_catalog_gpu_states_its_nvlink_domain() -> None:
    expected = {"a100-40gb": 8, "a100-80gb": 8, "b200": 8, "b300": 8, "gb200": 72,
                "gb300": 72, "h100-pcie": 1, "h100-sxm": 8, "h20": 8, "h200": 8, "l4": 1,
                "l40s": 1, "mi300x": 8, "mi325x": 8, "mi355x": 8, "rtx-pro-6000": 1}
    cat = hardware_catalog()
    assert {n: d["nvlink_domain_gpus"] for n, d in cat.items()} == expected
    # a user file without the field keeps the 8-GPU node of before
    base = {"peak_flops": {"bf16": 1e15}, "memory_bandwidth_bytes_s": 3e12,
            "memory_bytes": 8e10, "interconnect_bandwidth_bytes_s": 4.5e11}
    assert from_dict(base, "mine").nvlink_domain_gpus == 8
    for bad in (0, 2.5, "8", True, 10_000):
        with pytest.raises(RidgelineError, match="nvlink_domain_gpus"):
            from_dict({**base, "nvlink_domain_gpus": bad}, "mine")


@pytest.mark.parametrize(("typed", "entry"), [
    ("H100", "h100-sxm"), ("h100", "h100-sxm"), ("H100-SXM5-80GB", "h100-sxm"),
    ("H100 SXM", "h100-sxm"), ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("H100 PCIe", "h100-pcie"), ("A100-80GB", "a100-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("mi300x", "mi300x"),
    ("AMD Instinct MI300X", "mi300x"), ("GB200", "gb200"), ("GB200 NVL72", "gb200"),
    ("B200", "b200"), ("B300", "b300"), ("MI355X", "mi355x"), ("L4", "l4"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
])
def test_names_people_type(typed: str, entry: str) -> None:
    assert catalog_name(typed) == entry
    assert load_hardware(typed).name == entry


def test_ambiguous_and_unknown_names_are_refused() -> None:
    with pytest.raises(RidgelineError) as exc:
        load_hardware("A100")
    msg = str(exc.value)
    assert msg.startswith("hardware: got 'A100'") and "a100-40gb, a100-80gb" in msg
    with pytest.raises(RidgelineError, match=r"^hardware: got 'H900'; allowed: .*h100-sxm"):
        load_hardware("H900")


def test_every_alias_names_a_catalog_entry() -> None:
    from importlib import resources

    table = json.loads(resources.files("ridgeline.specs").joinpath(
        "data", "hardware_aliases.json").read_text())
    cat = hardware_catalog()
    assert set(table["aliases"].values()) <= set(cat)
    assert all(set(v) <= set(cat) for v in table["ambiguous"].values())
    assert not set(table["aliases"]) & set(table["ambiguous"])
    assert not set(table["aliases"]) & set(cat)  # a file name always means itself


def _cli() -> list[str]:
    exe = shutil.which("ridgeline", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-c", "from ridgeline.cli import main; main()"]


def test_installed_cli_resolves_and_refuses() -> None:
    ok = subprocess.run([*_cli(), "estimate", "-m", "llama-3.1-8b", "-g", "H100", "--json"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["config"]["hardware"] == "h100-sxm"
    bad = subprocess.run([*_cli(), "estimate", "-m", "llama-3.1-8b", "-g", "a100"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    line = bad.stderr.strip().splitlines()[-1]
    assert line.startswith("error: hardware: got 'a100'") and "a100-80gb" in line
