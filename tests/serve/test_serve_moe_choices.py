"""`ridgeline serve`'s MoE choices reach the emulator's step-time function: the runner
backend (`--moe-backend` / `--moe-runner-backend`) and the EP dispatch/combine
(`--all2all-backend` / `--moe-a2a-backend`), as `estimate` and `simulate` price them."""

from __future__ import annotations

import numpy as np

from ridgeline.serve.factory import build_engine


def _decode_step_s(built: object) -> float:
    z = np.zeros(1)
    engine = built.engine  # type: ignore[attr-defined]
    return float(engine.time_steps(z, z, z, z, np.array([4.0]), np.array([1000.0]))[0])


def test_the_runner_backend_reaches_the_step() -> None:
    # SGLang on B200 runs Qwen3-30B-A3B on FlashInfer's TensorRT-LLM MoE by default; Triton
    # is its slower fused MoE on this layer (tests/perf/test_moe_backend.py, the rows).
    auto = build_engine("qwen3-30b-a3b", "b200", engine_name="sglang")
    triton = build_engine("qwen3-30b-a3b", "b200", engine_name="sglang", moe_backend="triton")
    assert triton.step_model.kernel_profile.measured.moe_backend == "triton"
    assert auto.step_model.kernel_profile.measured.moe_backend == "auto"
    assert _decode_step_s(triton) > _decode_step_s(auto)


def test_the_ep_backend_reaches_the_step() -> None:
    kw = dict(tp=1, ep=8, attn_dp=8, engine_name="sglang")
    deep = build_engine("deepseek-v3", "h200", ep_comm="deepep_low_latency", **kw)
    assert deep.step_model.parallel.ep_comm == "deepep_low_latency"
    plain = build_engine("deepseek-v3", "h200", **kw)
    assert plain.step_model.parallel.ep_comm == "allgather_reducescatter"
