"""`ridgeline estimate` names where each operator class's kernel times come from.

The expected sources are read from the catalog files themselves (which GPU has NVIDIA's
measured tables, which Vidur profile a GPU takes), not from ridgeline's output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RIDGELINE = str(Path(sys.executable).with_name("ridgeline"))
DATA = Path(__file__).parents[2] / "src" / "ridgeline" / "specs" / "data"


def _catalog(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def _kernel_line(*args: str) -> str:
    run = subprocess.run([RIDGELINE, "estimate", *args], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "COLUMNS": "400", "NO_COLOR": "1"})
    assert run.returncode == 0, run.stderr
    lines = [ln for ln in run.stdout.splitlines() if "kernel model:" in ln]
    assert len(lines) == 1, run.stdout
    return lines[0]


@pytest.mark.parametrize("hardware", ["h200", "b200", "l40s"])
def test_a_gpu_with_measured_tables_names_them_for_gemm_and_attention(hardware: str) -> None:
    """A GPU the measured catalogs list: its GEMMs and attention come from its own tables;
    only the vector kernels come from the Vidur profile kernels.json gives it (h200 and
    b200: H100's; l40s: A40's), derived, as its rule says."""
    system = _catalog("kernels_measured_gemm_moe.json")["hardware"][hardware]
    assert _catalog("kernels_measured_attention_comm.json")["hardware"][hardware] == system
    entry = _catalog("kernels.json")["hardware"][hardware]
    assert entry["rule"].startswith("derived")
    line = _kernel_line("--hardware", hardware)
    assert f"GEMMs, attention from measured '{system}' vllm kernel tables" in line
    assert f"norms, activations, rope from Vidur's measured '{entry['kernels']}' kernels " \
           "(derived" in line
    # the old line credited every kernel to the Vidur profile
    assert f"derived from measured '{entry['kernels']}' kernels;" not in line


def test_h100_keeps_its_own_gemm_fit_and_measured_attention() -> None:
    """H100 SXM: its 16-bit GEMMs keep the Vidur fit made on it (measured_choice's rule for
    a GPU with its own profile); its attention comes from its measured tables."""
    entry = _catalog("kernels.json")["hardware"]["h100-sxm"]
    assert entry["rule"].startswith("fitted")
    system = _catalog("kernels_measured_attention_comm.json")["hardware"]["h100-sxm"]
    line = _kernel_line("--hardware", "h100-sxm")
    assert (f"GEMMs, norms, activations, rope from Vidur's measured '{entry['kernels']}' "
            "kernels (this GPU's own fit)") in line
    assert f"attention from measured '{system}' vllm kernel tables" in line


def test_a_gpu_without_tables_is_all_vidur() -> None:
    """MI300X: in no measured table, so every class comes from the default Vidur profile
    (H100's), attention through Vidur's A100 attention profile."""
    assert "mi300x" not in _catalog("kernels_measured_gemm_moe.json")["hardware"]
    assert "mi300x" not in _catalog("kernels_measured_attention_comm.json")["hardware"]
    kernels = _catalog("kernels.json")["hardware"]["mi300x"]["kernels"]
    line = _kernel_line("--hardware", "mi300x")
    assert "kernel tables" not in line
    assert f"GEMMs, norms, activations, rope from Vidur's measured '{kernels}' kernels" in line
    assert "attention from Vidur's A100 attention profile" in line


def test_moe_and_tensor_parallel_name_the_experts_and_the_collectives() -> None:
    """A MoE model at tp=2 on H200: its expert layers and its collectives come from H200's
    tables too."""
    system = _catalog("kernels_measured_gemm_moe.json")["hardware"]["h200"]
    line = _kernel_line("--hardware", "h200", "--model", "qwen3-30b-a3b", "--tp", "2")
    assert (f"GEMMs, MoE experts, attention, collectives from measured '{system}' vllm "
            "kernel tables") in line
