"""vLLM's engine flags on `ridgeline serve` (--tensor-parallel-size, --kv-cache-dtype,
--quantization): accepted, and they change the emulator's step-time function and KV pool.

Reference numbers, independent of ridgeline: Llama 3.1 8B has 8.03e9 parameters; an H100
SXM reads HBM at <= 3.35e12 B/s. A batch-1 decode step reads every weight once, so it takes
at least weight bytes / bandwidth: 4.79 ms in bf16 on one GPU, half that with the weights
split over two (TP2) or stored in 8 bits (fp8).
"""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

from ridgeline.serve.factory import build_engine
from tests.serve_emulator_helpers import emulator

PARAMS = 8.03e9
HBM_B_S = 3.35e12
BF16_FLOOR_S = PARAMS * 2 / HBM_B_S   # 4.79 ms


def _decode_step_s(**kw: Any) -> tuple[float, int]:
    """(one decode sequence at 1000 tokens of context: the step time, KV capacity tokens),
    by the step-time function the emulator's engine uses."""
    built = build_engine("llama-3.1-8b", "h100-sxm", **kw)
    z = np.zeros(1)
    t = built.engine.time_steps(z, z, z, z, np.array([1.0]), np.array([1000.0]))[0]
    return float(t), built.kv_capacity_tokens


def test_tensor_parallel_and_quantization_change_the_step_time() -> None:
    tp1, _ = _decode_step_s()
    tp2, _ = _decode_step_s(tp=2)
    fp8, _ = _decode_step_s(weights="fp8")
    assert tp1 >= BF16_FLOOR_S
    assert BF16_FLOOR_S / 2 <= tp2 < 0.8 * tp1       # half the weights per GPU (+ all-reduce)
    assert BF16_FLOOR_S / 2 <= fp8 < 0.8 * tp1       # half the weight bytes


def test_fp8_kv_cache_doubles_the_kv_pool() -> None:
    t16, kv16 = _decode_step_s()
    t8, kv8 = _decode_step_s(kv="fp8")
    assert kv8 / kv16 == pytest.approx(2.0, rel=1e-3)   # same memory, half the bytes a token
    # One sequence of 1,000 tokens reads 131 MB of bf16 KV against 16 GB of weights: the
    # fp8 cache changes the step by well under 5% either way (the measured fp8-KV decode
    # kernel has its own floor, so at batch 1 it need not be faster).
    assert t8 == pytest.approx(t16, rel=0.05)


def test_serve_accepts_vllms_engine_flags() -> None:
    with emulator("--tensor-parallel-size", "2", "--kv-cache-dtype", "fp8_e4m3",
                  "--quantization", "fp8") as emu:
        stats = httpx.get(emu.base_url + "/ridgeline/stats").json()
    assert stats["parallelism"]["tp"] == 2
    assert stats["precision"]["kv"] == "fp8" and stats["precision"]["weights"] == "fp8"
