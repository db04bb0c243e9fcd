"""benchmarks/accuracy/gpu_kernel_probe.py's summary, on CSVs whose rows were made by hand.

The probe itself needs a CUDA GPU; what it concludes from its rows (the measured floor scale,
GEMM and decode-attention efficiencies against the datasheet) is plain arithmetic, checked
here against figures computed by hand for an H200 (989.4 TFLOP/s bf16, 1,978.9 fp8, 4.8 TB/s).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# The probe is a script (it runs on a GPU box with torch): run as users run it, never imported.
PROBE = Path(__file__).parents[2] / "benchmarks" / "accuracy" / "gpu_kernel_probe.py"
GEMM_FIELDS = ["shape", "dtype", "m", "n", "k", "time_us", "tflops", "mode", "copies"]
ATTN_FIELDS = ["phase", "batch", "context", "q_heads", "kv_heads", "head_dim", "time_us",
               "kv_bytes", "flops", "mode"]
FLOOR_FIELDS = ["kernel", "isolated_us", "eager_chain_us", "graph_us"]


def probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True,
                          timeout=120)


def summarize(out: Path, hardware: str) -> dict[str, Any]:
    proc = probe("--summarize", str(out), "--hardware", hardware)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def write(path: Path, fields: list[str], rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


@pytest.fixture()
def probe_dir(tmp_path: Path) -> Path:
    write(tmp_path / "floors.csv", FLOOR_FIELDS, [
        {"kernel": "gemm", "isolated_us": 8.0, "eager_chain_us": 5.5, "graph_us": 4.0},
        {"kernel": "add", "isolated_us": 6.0, "eager_chain_us": 5.0, "graph_us": 3.6},
        {"kernel": "softmax", "isolated_us": 5.0, "eager_chain_us": 5.0, "graph_us": 2.0},
    ])
    gemm = {"shape": "llama-2-7b-tp1/o", "n": 4096, "k": 4096, "mode": "graph", "copies": 4}
    write(tmp_path / "gemm.csv", GEMM_FIELDS, [
        # m=1 bf16 at 0.8 of HBM: (4096*4096*2 + (4096+4096)*2) B / (0.8 * 4.8e12 B/s)
        {**gemm, "dtype": "bf16", "m": 1, "time_us": 8.7424, "tflops": 3.84},
        # m=4096 bf16 at 0.7 of 989.4 TFLOP/s
        {**gemm, "dtype": "bf16", "m": 4096, "time_us": 198.4, "tflops": 692.58},
        # m=1 fp8 (1-byte weights) at 0.6 of HBM: (4096*4096 + 8192*2) B / (0.6 * 4.8e12)
        {**gemm, "dtype": "fp8", "m": 1, "time_us": 5.8311, "tflops": 5.75},
        # m=4096 fp8 at 0.5 of 1978.9 TFLOP/s
        {**gemm, "dtype": "fp8", "m": 4096, "time_us": 138.9, "tflops": 989.45},
    ])
    write(tmp_path / "attention.csv", ATTN_FIELDS, [
        # MHA, 32 sequences x 2048 tokens x 32 KV heads x 128 x 2 (K, V) x 2 B = 1 GiB at 0.8
        {"phase": "decode", "batch": 32, "context": 2048, "q_heads": 32, "kv_heads": 32,
         "head_dim": 128, "time_us": 279.6202, "kv_bytes": 1073741824, "flops": 0,
         "mode": "graph"},
        # 8 query heads per KV head, 128 x 2048 x 4 x 128 x 2 x 2 B = 512 MiB at 0.5
        {"phase": "decode", "batch": 128, "context": 2048, "q_heads": 32, "kv_heads": 4,
         "head_dim": 128, "time_us": 223.6962, "kv_bytes": 536870912, "flops": 0,
         "mode": "graph"},
        # 8 MiB of KV: on the kernel's floor, so it must not count (it would read at 5x peak)
        {"phase": "decode", "batch": 1, "context": 512, "q_heads": 32, "kv_heads": 32,
         "head_dim": 128, "time_us": 0.3495, "kv_bytes": 8388608, "flops": 0, "mode": "graph"},
        # causal prefill, 2048 tokens: 4 x (2048 x 2049 / 2) pairs x 32 heads x 128 FLOPs
        {"phase": "prefill", "batch": 1, "context": 2048, "q_heads": 32, "kv_heads": 32,
         "head_dim": 128, "time_us": 100.0, "kv_bytes": 33554432, "flops": 34376515584,
         "mode": "graph"},
    ])
    return tmp_path


def test_summary_gives_the_floor_scale_and_efficiencies_computed_by_hand(probe_dir: Path) -> None:
    s = summarize(probe_dir, "h200")
    assert s["floors"]["graph_over_isolated"] == pytest.approx(
        {"gemm": 0.5, "add": 0.6, "softmax": 0.4})
    assert s["floors"]["measured_floor_scale"] == pytest.approx(0.5)
    bf16, fp8 = s["gemm"]["bf16"], s["gemm"]["fp8"]
    assert bf16["large_m_compute_efficiency"] == pytest.approx(0.7, abs=1e-4)
    assert bf16["small_m_bandwidth_efficiency"] == pytest.approx(0.8, abs=1e-4)
    assert fp8["large_m_compute_efficiency"] == pytest.approx(0.5, abs=1e-4)
    assert fp8["small_m_bandwidth_efficiency"] == pytest.approx(0.6, abs=1e-4)
    assert s["gemm"]["fp8_over_bf16_large_m_efficiency"] == pytest.approx(0.5 / 0.7, abs=1e-3)
    att = s["attention"]
    assert att["decode_bandwidth_efficiency"] == pytest.approx(
        {"q_per_kv_1": 0.8, "q_per_kv_8": 0.5}, abs=1e-4)
    assert att["grouped_over_mha"] == pytest.approx({"q_per_kv_8": 0.625}, abs=1e-3)
    assert att["prefill_tflops"] == pytest.approx({"32/32@2048": 343.8}, abs=0.05)
    # the shipped constants it is set beside: the replay fit's floor scale, the Vidur GEMM floor
    assert s["fitted"]["floor_scale"] == 0.5
    assert s["fitted"]["gemm_floor_us"] > 0


def test_summary_uses_the_named_gpus_datasheet(probe_dir: Path) -> None:
    # H100 SXM: 3.35 TB/s, so the same 1 GiB decode read is 0.8 x 4.8 / 3.35 of its bandwidth
    s = summarize(probe_dir, "h100-sxm")
    assert s["attention"]["decode_bandwidth_efficiency"]["q_per_kv_1"] == pytest.approx(
        0.8 * 4.8 / 3.35, abs=1e-3)


def test_summarize_command_prints_json_and_bad_parts_name_the_choices(probe_dir: Path) -> None:
    assert summarize(probe_dir, "h200")["floors"]["measured_floor_scale"] == 0.5
    bad = probe("--parts", "floors,tensor")
    assert bad.returncode == 1 and "--parts: unknown ['tensor']; allowed" in bad.stderr
    bad = probe("--summarize", str(probe_dir))
    assert bad.returncode == 1 and "--summarize needs --hardware" in bad.stderr


def test_the_probed_gemm_shapes_are_the_replayed_models_layers_at_their_tp() -> None:
    listed = probe("--list-shapes")
    shapes = {name: (n, k) for name, n, k in json.loads(listed.stdout)}
    # Llama-2-70B at TP4: 64 query + 2 x 8 KV heads of 128 over 4 GPUs; 28,672 FFN over 4
    assert shapes["llama-2-70b-tp4/qkv"] == (2560, 8192)
    assert shapes["llama-2-70b-tp4/down"] == (8192, 7168)
    # Mixtral at TP2: each expert's 14,336 FFN split over 2 GPUs, gate and up fused
    assert shapes["mixtral-8x7b-tp2/expert_gate_up"] == (14336, 4096)
    assert shapes["codellama-34b-tp2/gate_up"] == (22016, 8192)
