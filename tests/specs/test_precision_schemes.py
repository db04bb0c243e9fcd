"""Quantization as engines run it: the GEMM scheme a weight dtype or a checkpoint's
quantization_config gives on a GPU (W8A8 where the GPU has fp8 tensor cores, W8A16 where
not, NVFP4 W4A4 on Blackwell only, MXFP4 W4A16), its label and its kernel family.

The peaks compared against are the datasheet figures in the hardware catalog (H100 SXM:
989.4 bf16 / 1,978.9 fp8 TFLOP/s dense; A100: 312 bf16; B200: 9 PFLOP/s fp4)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.errors import RidgelineError
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.step_time import BatchWork
from ridgeline.specs import load_hardware
from ridgeline.specs.model import from_hf_config
from ridgeline.specs.precision import (
    GEMM_KERNEL_DTYPES,
    precision_from_vllm_quantization,
    resolve_model_precision,
    resolve_precision,
)

H100_BF16, H100_FP8, A100_BF16, B200_FP4 = 989.4e12, 1978.9e12, 312e12, 9e15

LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
         "vocab_size": 128256, "max_position_embeddings": 131072}


def _step(hardware: str, cfg: dict | None = None, **kw: object) -> RooflineStepTime:
    m = from_hf_config(cfg or LLAMA, name="llama")
    pr = resolve_model_precision(m, kw.pop("weights", None), kw.pop("kv", None),  # type: ignore[arg-type]
                                 kw.pop("activations", None))  # type: ignore[arg-type]
    return RooflineStepTime(m, load_hardware(hardware), pr)


@pytest.mark.parametrize(("weights", "activations", "scheme", "kernel"), [
    ("bf16", None, "W16A16 (bf16)", "bf16"),
    ("fp8", None, "W8A8 (fp8 per-tensor)", "fp8"),
    ("fp8", "bf16", "W8A16 (fp8)", "w8a16"),
    ("int8", None, "W8A16 (int8)", "w8a16"),
    ("int8", "int8", "W8A8 (int8)", "fp8"),
    ("int4", None, "W4A16 (int4)", "w4a16"),
    ("fp4", None, "W4A4 (nvfp4)", "fp4"),
    ("mxfp4", None, "W4A16 (mxfp4)", "w4a16"),
    ("mxfp4", "fp8", "W4A8 (mxfp4 x mxfp8)", "fp8"),
    ("fp8_block", None, "W8A8 (fp8 block 128x128)", "fp8_block"),
    ("awq", None, "W4A16 (int4)", "w4a16"),
    ("modelopt_fp4", None, "W4A4 (nvfp4)", "fp4"),
])
def test_scheme_and_kernel_dtype_of_the_flags(weights: str, activations: str | None,
                                              scheme: str, kernel: str) -> None:
    p = resolve_precision(weights, None, activations)
    assert (p.scheme, p.gemm_kernel_dtype) == (scheme, kernel)
    assert p.gemm_kernel_dtype in GEMM_KERNEL_DTYPES


def test_fp8_weights_are_w8a8_on_hopper_and_w8a16_on_ampere() -> None:
    h = _step("h100-sxm", weights="fp8")
    assert (h.precision.activations, h.gemm_peak_flops) == ("fp8", H100_FP8)
    a = _step("a100-80gb", weights="fp8")  # no fp8 tensor cores: vLLM's Marlin W8A16
    assert (a.precision.scheme, a.gemm_peak_flops) == ("W8A16 (fp8)", A100_BF16)
    assert a.precision.gemm_kernel_dtype == "w8a16" and "a100" in a.precision.fallback
    # W8A16 only when asked: the GEMMs run at the bf16 peak on H100 too
    asked = _step("h100-sxm", weights="fp8", activations="bf16")
    assert (asked.precision.scheme, asked.gemm_peak_flops) == ("W8A16 (fp8)", H100_BF16)
    with pytest.raises(RidgelineError, match="activations"):  # asked fp8 on an A100
        _step("a100-80gb", weights="fp8", activations="fp8")


def test_w8a8_halves_a_compute_bound_gemm_on_the_plain_roofline() -> None:
    hw = load_hardware("h100-sxm").with_efficiency(0.7, 0.85, 0)
    m = from_hf_config(LLAMA, name="llama")
    w = BatchWork.for_chunks([8192], [0], [])
    t16 = RooflineStepTime(m, hw, resolve_precision("bf16")).breakdown(w)
    t8 = RooflineStepTime(m, hw, resolve_precision("fp8")).breakdown(w)
    i = t16.names.index("gate_up_proj")
    # 32 layers x 2 x 8192 x 4096 x 2 x 14336 FLOPs at 0.7 x the dense peak
    flops = 32 * 2 * 8192 * 4096 * 2 * 14336
    assert t16.time_s[i] == pytest.approx(flops / (0.7 * H100_BF16), rel=1e-9)
    assert t8.time_s[i] == pytest.approx(flops / (0.7 * H100_FP8), rel=1e-9)


def test_nvfp4_runs_fp4_gemms_on_blackwell_and_weight_only_on_hopper() -> None:
    assert _step("b200", weights="fp4").gemm_peak_flops == B200_FP4
    h = _step("h100-sxm", weights="fp4")
    assert (h.precision.scheme, h.precision.gemm_kernel_dtype) == ("W4A16 (nvfp4)", "w4a16")
    assert h.gemm_peak_flops == H100_BF16


def test_checkpoint_fp8_block_compressed_tensors_and_modelopt() -> None:
    ds = {**LLAMA, "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic",
                                           "fmt": "e4m3", "weight_block_size": [128, 128]}}
    p = _step("h200", ds).precision
    assert (p.scheme, p.gemm_kernel_dtype) == ("W8A8 (fp8 block 128x128)", "fp8_block")
    assert _step("a100-80gb", ds).precision.gemm_kernel_dtype == "w8a16"
    ct = {**LLAMA, "quantization_config": {"quant_method": "compressed-tensors",
          "config_groups": {"group_0": {
              "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
              "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                    "dynamic": True}}},
          "ignore": ["lm_head"]}}
    p = _step("h100-sxm", ct).precision
    assert (p.scheme, p.gemm_kernel_dtype) == ("W8A8 (fp8 per-channel)", "fp8")
    w4 = {**LLAMA, "quantization_config": {"quant_method": "compressed-tensors",
          "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int", "group_size": 128,
                                              "strategy": "group"}}}}}
    assert _step("h100-sxm", w4).precision.scheme == "W4A16 (int4)"
    nv = {**LLAMA, "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                           "exclude_modules": ["lm_head"]}}
    assert _step("b200", nv).precision.scheme == "W4A4 (nvfp4)"
    assert _step("h100-sxm", nv).precision.scheme == "W4A16 (nvfp4)"


def test_gpt_oss_mxfp4_experts_as_vllm_runs_them() -> None:
    cfg = {**LLAMA, "quantization_config": {"quant_method": "mxfp4",
                                            "modules_to_not_convert": ["model.layers.*.self_attn",
                                                                       "model.layers.*.mlp.router",
                                                                       "model.embed_tokens",
                                                                       "lm_head"]}}
    for gpu in ("h100-sxm", "b200"):
        p = _step(gpu, cfg).precision
        assert (p.scheme, p.gemm_kernel_dtype, p.expert_weight_bytes) == (
            "W4A16 (mxfp4)", "w4a16", 0.5 + 1 / 32)
    p = _step("b200", cfg, activations="fp8").precision
    assert (p.scheme, p.gemm_kernel_dtype) == ("W4A8 (mxfp4 x mxfp8)", "fp8")


def test_fp8_kv_cache_halves_kv_bytes() -> None:
    m = _step("h100-sxm", kv="fp8")
    assert m.precision.kv_bytes == 1.0
    # vLLM's --kv-cache-dtype spellings
    assert resolve_precision("bf16", "fp8_e5m2").kv == "fp8"
    assert resolve_precision("fp8", "auto").kv == "bf16"
    assert m.kv_bytes_per_token == 32 * 2 * 8 * 128 * 1.0  # layers x K,V x heads x dim x 1 B


def test_vllm_quantization_names() -> None:
    assert precision_from_vllm_quantization("fp8") == ("fp8", None, ())
    assert precision_from_vllm_quantization("gptq_marlin") == ("int4", "bf16", ())
    assert precision_from_vllm_quantization("mxfp4") == ("mxfp4", None, ())
    with pytest.raises(RidgelineError, match=r"^quantization: got 'hqq'; allowed: .*awq"):
        precision_from_vllm_quantization("hqq")
    awq = from_hf_config({**LLAMA, "quantization_config": {
        "quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}}, name="x")
    # the name of the checkpoint's own method reads the checkpoint (zero points included)
    p = resolve_model_precision(awq, "awq")
    assert p.source.startswith("checkpoint") and p.weight_bytes == 0.5 + 2.5 / 128
    assert resolve_model_precision(awq, "fp8").scheme == "W8A8 (fp8 per-tensor)"


def _cli() -> list[str]:
    exe = shutil.which("ridgeline", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-c", "from ridgeline.cli import main; main()"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_cli(), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})


def test_installed_cli_prints_the_scheme() -> None:
    base = ("estimate", "-m", "llama-3.1-8b", "--weights", "fp8", "--batch", "4")
    out = _run(*base, "-g", "h100-sxm")
    assert out.returncode == 0, out.stderr
    assert "W8A8 (fp8 per-tensor)" in out.stdout.splitlines()[0]
    js = _run(*base, "-g", "a100-80gb", "--json")
    assert js.returncode == 0, js.stderr
    pr = json.loads(js.stdout)["config"]["precision"]
    assert (pr["scheme"], pr["gemm_kernel_dtype"], pr["activations"]) == (
        "W8A16 (fp8)", "w8a16", "bf16")


def test_plan_refuses_an_unknown_activation_dtype() -> None:
    out = _run("plan", "--activations", "fp9", "--slo", "ttft_ms<=1000")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith("error: activations: got 'fp9'")


def test_plan_carries_activations_to_every_candidate() -> None:
    from ridgeline.plan.space import PlanRequest, enumerate_space

    req = PlanRequest(models=("llama-3.1-8b",), hardware=("H100",), weights=("fp8",),
                      activations="bf16", slos=("ttft_ms<=1000",), tp=(1,),
                      max_num_seqs=(64,), max_num_batched_tokens=(2048,),
                      requests=50).validate()
    space = enumerate_space(req)
    assert space.candidates
    for c in space.candidates:
        sm = c.scenario.step_model()
        assert (c.scenario.activations, sm.precision.scheme) == ("bf16", "W8A16 (fp8)")
    assert req.price_of("H100") == req.price_of("h100-sxm")  # an alias has the entry's price
