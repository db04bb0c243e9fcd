"""vLLM's per-step cost per decode context token (kernels.json "vllm" decode_context_token_ns),
the form benchmarks/accuracy/fit_vllm_context_cost.py tests in place of the grouped-query decode
scale: a ragged step of two sequences at 128 and 8192 tokens costs exactly the cost x 8,320
tokens more, added to the step (not inside the roofline max), in the matrix rows, the compiled
step and the C core alike. Not fitted: the shipped catalog has no such cost.
"""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources

import numpy as np

from ridgeline.perf import kernels
from ridgeline.perf.fast_step import CompiledStep
from ridgeline.perf.ops import VAR, WORK_VARS, build_table
from ridgeline.specs import load_hardware, load_model, resolve_precision
from ridgeline.specs.parallel import Parallelism

COST_S = 7e-9  # per context token per step
CONTEXTS = (128, 8192)  # two sequences of one decode step


def _rows(cost_s: float) -> tuple[np.ndarray, np.ndarray, int]:
    hw = load_hardware("h100-sxm")
    pr = resolve_precision("bf16", None, "bf16")
    table = build_table(load_model("llama-3.1-8b"), pr, Parallelism(tp=1), 1.0, 0.0)
    prof = replace(kernels.load_profile("h100-sxm"), decode_context_token_s=cost_s)
    comp, mem = kernels.time_rows(table, hw, pr, prof)
    return comp, mem, table.names.index("attn_decode")


def _step_work() -> np.ndarray:
    v = np.zeros(len(WORK_VARS))
    b = len(CONTEXTS)
    for k, x in {"any": 1.0, "dec": 1.0, "n": b, "s": b, "dq": b,
                 "dc": sum(CONTEXTS)}.items():
        v[VAR[k]] = x
    return v


def test_ragged_step_pays_the_cost_per_context_token() -> None:
    comp0, mem0, j = _rows(0.0)
    comp1, mem1, _ = _rows(COST_S)
    # Only decode attention's dc coefficient moves, on both rows (the cost adds to the step).
    dc = VAR["dc"]
    assert abs(comp1[j, dc] - comp0[j, dc] - COST_S) < 1e-22
    assert abs(mem1[j, dc] - mem0[j, dc] - COST_S) < 1e-22
    changed = (comp1 != comp0) | (mem1 != mem0)
    assert changed.sum() == 1 and changed[j, dc]
    v = _step_work()
    t0 = float(np.maximum(comp0 @ v, mem0 @ v).sum())
    t1 = float(np.maximum(comp1 @ v, mem1 @ v).sum())
    assert abs((t1 - t0) - COST_S * (128 + 8192)) < 1e-12   # 58.24 us by hand


def test_compiled_step_carries_the_cost() -> None:
    comp, mem, _ = _rows(COST_S)
    lin = np.zeros(len(WORK_VARS))
    step = CompiledStep(comp, mem, lin, moe=False, num_experts=0.0, miss=1.0)
    v = _step_work()
    want = float(np.maximum(comp @ v, mem @ v).sum())
    got = step.scalar(0.0, 0.0, 0.0, 0.0, float(len(CONTEXTS)), float(sum(CONTEXTS)))
    assert abs(got - want) <= 1e-12 * want


def test_shipped_catalog_has_no_context_cost() -> None:
    cat = json.loads(resources.files("ridgeline.specs.data").joinpath("kernels.json")
                     .read_text())
    assert "decode_context_token_ns" not in cat.get("vllm", {})
    assert kernels.load_profile("h100-sxm").decode_context_token_s == 0.0


def test_kernel_model_line_names_the_cost() -> None:
    prof = replace(kernels.load_profile("h100-sxm"), decode_context_token_s=COST_S)
    lines = kernels.assumptions(prof, load_hardware("h100-sxm"),
                                resolve_precision("bf16", None, "bf16"), 1)
    assert any("7 ns per step per decode context token" in x for x in lines)
