"""Catalog models that ship quantized checkpoints carry their `quantization_config`, so their
precision resolves to what the checkpoint is, not to 16-bit.

As shipped on Hugging Face: deepseek-ai/DeepSeek-V3 and DeepSeek-R1, moonshotai/Kimi-K2 and
MiniMaxAI/MiniMax-M2 are fp8 with 128x128 block scales and dynamic activation scales
(`quant_method: fp8`, `weight_block_size: [128, 128]`, `activation_scheme: dynamic`);
openai/gpt-oss-20b and -120b ship MXFP4 experts (`quant_method: mxfp4`) with attention, router,
embeddings and head in bf16. The rest of the catalog ships 16-bit weights (the fp8 variants of
Llama-4, Qwen3 and GLM are separate repositories).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.specs import load_model
from ridgeline.specs.precision import resolve_model_precision

RIDGELINE = str(Path(sys.executable).with_name("ridgeline"))
MODELS = Path(__file__).parents[2] / "src/ridgeline/specs/data/models"
FP8_BLOCK = ("deepseek-v3", "deepseek-r1", "kimi-k2", "minimax-m2")
MXFP4 = ("gpt-oss-20b", "gpt-oss-120b")


@pytest.mark.parametrize("name", FP8_BLOCK)
def test_fp8_block_checkpoints_resolve_to_w8a8_block(name: str) -> None:
    cfg = json.loads((MODELS / f"{name}.json").read_text())["quantization_config"]
    assert (cfg["quant_method"], cfg["weight_block_size"], cfg["activation_scheme"]) == \
        ("fp8", [128, 128], "dynamic")
    p = resolve_model_precision(load_model(name))
    assert p.scheme == "W8A8 (fp8 block 128x128)"
    assert (p.weights, p.activations, p.weight_scale, p.weight_block) == \
        ("fp8", "fp8", "block", (128, 128))
    assert p.source.startswith("checkpoint quantization_config")


@pytest.mark.parametrize("name", MXFP4)
def test_mxfp4_checkpoints_resolve_to_mxfp4_experts(name: str) -> None:
    p = resolve_model_precision(load_model(name))
    assert p.weights == "mxfp4" and p.scheme == "W4A16 (mxfp4)"
    assert p.source.startswith("checkpoint quantization_config")


def test_every_other_catalog_model_ships_16_bit() -> None:
    names = sorted(f.stem for f in MODELS.glob("*.json"))
    rest = [n for n in names if n not in FP8_BLOCK + MXFP4]
    assert "llama-3.1-8b" in rest and "qwen3-235b-a22b" in rest
    for name in rest:
        assert "quantization_config" not in json.loads((MODELS / f"{name}.json").read_text())
        p = resolve_model_precision(load_model(name))
        assert p.scheme == "W16A16 (bf16)", name
        assert "no quantization_config" in p.source, name


def test_estimate_deepseek_v3_header_names_the_checkpoint_scheme() -> None:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    p = subprocess.run([RIDGELINE, "estimate", "--model", "deepseek-v3", "--hardware", "h200",
                        "--tp", "8", "--batch", "8", "--prompt", "1024", "--output", "64",
                        "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    pr = json.loads(p.stdout)["config"]["precision"]
    assert pr["scheme"] == "W8A8 (fp8 block 128x128)" and pr["gemm_kernel_dtype"] == "fp8_block"
    assert pr["source"].startswith("checkpoint quantization_config")
