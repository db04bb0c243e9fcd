"""SGLang's prefill attention on B200 against rows of NVIDIA's measured table.

Rows in tests/data/aic_kernels/attn_prefill_b200_sglang.csv are copied unchanged from
AIConfigurator's kernel database (ai-dynamo/aiconfigurator, commit 095f58a51,
aic-core/src/aiconfigurator_core/systems/data/<source_file>; latency in ms): SGLang 0.5.10's
TRT-LLM MHA prefill kernel on B200, 32 query / 8 KV heads of 128 (Llama-3.1-8B at TP 1), 16-bit
KV cache. The table's window-0 rows grow linearly in the context and run faster than its
128-token-window rows: that backend reads window 0 as no look-back, so they time no causal
attention, and the fit leaves them out. Each expected latency is a measured row or a hand count.
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ridgeline.perf import kernels
from ridgeline.perf.measured_attention import measured_catalog
from ridgeline.perf.window import EXT_VAR, EXT_VARS, build_ext_table
from ridgeline.specs import load_hardware, load_model, resolve_precision
from ridgeline.specs.parallel import Parallelism

DATA = Path(__file__).parents[1] / "data" / "aic_kernels"
with open(DATA / "attn_prefill_b200_sglang.csv", newline="") as _fh:
    ROWS = list(csv.DictReader(_fh))
assert len(ROWS) == 7
# B200's dense 16-bit datasheet peak (ridgeline's hardware catalog, b200.json).
B200_BF16_FLOPS = 2.25e15


def _band_pairs(s: int, w: int) -> float:
    """Causal pairs of one sequence of s tokens, each query seeing at most w keys."""
    return w * (w + 1) / 2 + (s - w) * w if s > w else s * (s + 1) / 2


def _prefill_per_layer_s(b: int, s: int, window: int) -> float:
    """Llama-3.1-8B's prefill attention per layer on B200 under SGLang, every layer banded
    by `window` (0: none), through the rows the step time and the C core evaluate."""
    w = window or 1 << 30
    spec = replace(load_model("llama-3.1-8b"), sliding_window=w, num_window_layers=32)
    hw = load_hardware("b200")
    pr = resolve_precision("bf16", None, "bf16")
    table = build_ext_table(spec, pr, Parallelism(tp=1), 1.0, 0.0)
    prof = replace(kernels.load_profile("b200", "sglang"), floor_scale=1.0,
                   measured_decode_scale=1.0)
    comp, mem = kernels.time_rows(table, hw, pr, prof)
    work = {"any": 1.0, "n": b * s, "s": b, "pt": b * s, "pre": 1.0,
            "pairs": b * s * (s + 1) / 2, "pairs_w": b * _band_pairs(s, min(w, s))}
    v = np.zeros(len(EXT_VARS))
    for k, x in work.items():
        v[EXT_VAR[k]] = x
    j = table.names.index("attn_prefill_window")
    return float(max(comp[j] @ v, mem[j] @ v) / table.layers[j])


def test_window_zero_rows_time_no_causal_attention_and_are_left_out() -> None:
    """At 16,384 tokens a full causal prefill has 134,225,920 pairs, 64x the 2,089,088 of a
    128-token window, yet the window-0 row (0.129 ms) is faster than the 128-window row
    (0.154 ms). The catalog's B200 SGLang prefill fits say they left those rows out; vLLM's
    FlashAttention rows on H100 (window 0 quadratic in the context) keep them."""
    at = {int(r["window_size"]): float(r["latency"]) for r in ROWS if r["isl"] == "16384"}
    assert _band_pairs(16384, 16384) / _band_pairs(16384, 128) > 64
    assert at[0] < at[128] < at[1024]
    gpus = measured_catalog()["gpus"]
    for kv in ("bfloat16", "fp8"):
        fit = gpus["b200_sxm"]["engines"]["sglang"]["prefill"][kv]["_fit"]
        assert fit["window_zero_rows"].startswith("dropped")
    assert "window_zero_rows" not in gpus["h100_sxm"]["engines"]["vllm"]["prefill"][
        "bfloat16"]["_fit"]


@pytest.mark.parametrize("row", [r for r in ROWS if r["window_size"] == "1024"],
                         ids=lambda r: f"b{r['batch_size']}-s{r['isl']}")
def test_b200_sglang_windowed_prefill_matches_measured(row: dict[str, str]) -> None:
    """The 1,024-token window rows (batch 1 and 4, 4k and 8k tokens) within 15% each (the
    class's leave-one-model-shape-out median is under 10%)."""
    b, s = int(row["batch_size"]), int(row["isl"])
    got = _prefill_per_layer_s(b, s, 1024)
    assert got == pytest.approx(float(row["latency"]) * 1e-3, rel=0.15)
    # Banded pairs x 4 x 32 heads x 128 FLOPs at the datasheet peak: never below it.
    assert got >= b * _band_pairs(s, 1024) * 16_384 / B200_BF16_FLOPS


def test_b200_sglang_full_causal_prefill_costs_more_than_any_measured_window() -> None:
    """One 16k-token sequence, no window: at least its 134M pairs x 16,384 FLOPs at the
    2.25 PFLOP/s peak (0.977 ms), so above the measured 1,024-window row (0.315 ms)."""
    got = _prefill_per_layer_s(1, 16384, 0)
    roof = _band_pairs(16384, 16384) * 16_384 / B200_BF16_FLOPS
    assert roof == pytest.approx(0.977e-3, rel=1e-3)
    assert got >= roof
    assert got > max(float(r["latency"]) for r in ROWS) * 1e-3
