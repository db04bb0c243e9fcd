"""Specs: HF config parsing, hand-computed parameter counts, catalogs, precision."""

from __future__ import annotations

import doctest
import importlib
import json
from pathlib import Path

import pytest

from ridgeline.errors import RidgelineError
from ridgeline.specs import (
    Parallelism,
    from_hf_config,
    hardware_catalog,
    load_hardware,
    load_model,
    model_catalog,
    resolve_precision,
)


def test_catalogs_have_the_required_entries() -> None:
    models = set(model_catalog())
    for name in ("llama-2-7b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "qwen2.5-7b",
                 "qwen2.5-72b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"):
        assert name in models
    gpus = set(hardware_catalog())
    for name in ("h100-sxm", "h100-pcie", "h200", "h20", "a100-40gb", "a100-80gb", "l40s",
                 "b200", "mi300x"):
        assert name in gpus
    for raw in list(model_catalog().values()) + list(hardware_catalog().values()):
        assert raw.get("_source"), raw


def test_dense_params_hand_computed() -> None:
    """Llama-3.1-8B: q 4096x4096, k/v 4096x1024, o 4096x4096, gated MLP 3x4096x14336,
    2 RMSNorms per layer, untied 128256x4096 embedding and LM head, final norm."""
    m = load_model("llama-3.1-8b")
    layer = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
    assert m.total_params == 32 * layer + 2 * 128256 * 4096 + 4096 == 8_030_261_248


def test_moe_params_hand_computed() -> None:
    """Qwen3-30B-A3B: 48 layers, 128 experts of 3x2048x768, router 2048x128, q/k norms."""
    m = load_model("qwen3-30b-a3b")
    attn = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 128
    expert = 3 * 2048 * 768
    layer = attn + 128 * expert + 2048 * 128 + 2 * 2048
    assert m.total_params == 48 * layer + 2 * 151936 * 2048 + 2048
    active = 48 * (attn + 8 * expert + 2048 * 128 + 2 * 2048) + 2 * 151936 * 2048 + 2048
    assert m.active_params == active


def test_mla_params_hand_computed() -> None:
    """DeepSeek-V3: MLA (q_lora 1536, kv_lora 512, rope 64, nope 128, v 128, 128 heads),
    3 dense layers (18432), 58 MoE layers (256 routed + 1 shared expert of 2048)."""
    m = load_model("deepseek-v3")
    d, h = 7168, 128
    mla = (d * 1536 + 1536 + 1536 * h * 192 + d * 576 + 512 + 512 * h * 256 + h * 128 * d)
    assert m.attention_params == mla
    assert (m.num_dense_layers, m.num_moe_layers) == (3, 58)
    expert = 3 * d * 2048
    dense_layer = mla + 3 * d * 18432 + 2 * d
    moe_layer = mla + 257 * expert + 256 * d + 2 * d
    assert m.total_params == 3 * dense_layer + 58 * moe_layer + 2 * 129280 * d + d
    assert m.kv_elements_per_token_per_layer == 576


def test_tied_embeddings_counted_once() -> None:
    m = load_model("qwen2.5-0.5b")
    assert m.tie_word_embeddings and m.lm_head_params == 0
    assert m.total_params == pytest.approx(0.494e9, rel=0.002)  # published 0.49 B


def test_config_path_and_explicit_head_dim(tmp_path: Path) -> None:
    cfg = dict(model_catalog()["llama-3.1-8b"])
    cfg.update(head_dim=64, num_attention_heads=16)  # explicit head_dim != hidden/heads
    path = tmp_path / "my-model" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    for ref in (str(path), str(path.parent)):
        m = load_model(ref)
        assert m.head_dim == 64 and m.q_dim == 1024 and m.name == "my-model"


def test_mistral_null_head_dim_defaults_to_hidden_over_heads() -> None:
    assert load_model("mistral-7b-v0.3").head_dim == 128


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c.pop("hidden_size"), "missing field 'hidden_size'"),
    (lambda c: c.pop("num_local_experts"), "missing field 'num_local_experts'"),
    # configs are parsed by architectures too: the refusals need an unknown architecture
    (lambda c: c.update(model_type="mamba", architectures=["MambaForCausalLM"]),
     "model_type 'mamba' is not supported"),
    (lambda c: (c.pop("model_type"), c.pop("architectures")), "missing field 'model_type'"),
])
def test_bad_config_is_one_line_error(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    cfg = dict(model_catalog()["mixtral-8x7b"])
    mutate(cfg)
    with pytest.raises(RidgelineError) as exc:
        from_hf_config(cfg)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_unknown_names() -> None:
    with pytest.raises(RidgelineError, match="allowed"):
        load_model("gpt-5")
    with pytest.raises(RidgelineError, match="allowed"):
        load_hardware("v100")
    with pytest.raises(RidgelineError, match="not found"):
        load_model("/nonexistent/config.json")


def test_hardware_dense_peaks_and_user_file(tmp_path: Path) -> None:
    h = load_hardware("h100-sxm")
    assert h.peak("bf16") == pytest.approx(989.4e12)  # dense: half of the 1,979 sparse figure
    assert h.peak("fp16") == h.peak("bf16")
    assert h.peak("fp8") == pytest.approx(2 * h.peak("bf16"), rel=1e-3)
    with pytest.raises(RidgelineError, match="no fp8"):
        load_hardware("a100-80gb").peak("fp8")
    assert load_hardware("b200").peak("fp4") == 9e15
    user = {"name": "toy", "peak_flops": {"bf16": 1e15, "fp32": 1e14},
            "memory_bandwidth_bytes_s": 2e12, "memory_bytes": 64e9,
            "interconnect_bandwidth_bytes_s": 1e11}
    p = tmp_path / "toy.json"
    p.write_text(json.dumps(user))
    toy = load_hardware(str(p))
    assert toy.ridge_point() == 500 and toy.compute_efficiency == 0.7
    del user["memory_bytes"]
    p.write_text(json.dumps(user))
    with pytest.raises(RidgelineError, match="memory_bytes: missing"):
        load_hardware(str(p))


def test_efficiency_overrides_validate() -> None:
    h = load_hardware("h100-sxm").with_efficiency(0.5, 1.0, 0.0)
    assert (h.compute_efficiency, h.bandwidth_efficiency, h.kernel_overhead_us) == (0.5, 1, 0)
    with pytest.raises(RidgelineError, match="bandwidth-efficiency"):
        h.with_efficiency(bandwidth_efficiency=0)


def test_precision_bytes_and_defaults() -> None:
    # KV is vLLM's `--kv-cache-dtype auto`: the model's 16-bit dtype, not the weight dtype.
    p = resolve_precision("fp8")
    # fp8 weights default to W8A8 (vLLM's --quantization fp8 runs fp8 GEMMs).
    assert (p.weight_bytes, p.kv, p.kv_bytes, p.gemm_compute_dtype) == (1.0, "bf16", 2.0, "fp8")
    assert resolve_precision("fp8", "fp8").kv_bytes == 1.0
    q = resolve_precision("int4", None, "bf16")
    assert q.kv == "bf16" and q.weight_bytes == 0.5 + 2 / 128 and q.embedding_bytes == 2.0
    assert resolve_precision("fp4", activations="fp4").gemm_compute_dtype == "fp4"
    assert resolve_precision("fp32", activations="fp32").activation_bytes == 4.0
    with pytest.raises(RidgelineError, match=r"^kv"):
        resolve_precision("bf16", "int4")


def test_parallelism_validation() -> None:
    m = load_model("qwen2.5-7b")  # 28 heads
    assert Parallelism(tp=4).validate(m).gpus_per_replica == 4
    with pytest.raises(RidgelineError, match=r"^tp"):
        Parallelism(tp=8).validate(m)
    with pytest.raises(RidgelineError, match=r"^pp"):
        Parallelism(pp=29).validate(m)
    moe = load_model("mixtral-8x7b")
    assert Parallelism(tp=4, ep=2).validate(moe).ep == 2
    with pytest.raises(RidgelineError, match=r"^ep"):
        Parallelism(tp=2, ep=4).validate(moe)


@pytest.mark.parametrize("module", [
    "ridgeline.specs.model", "ridgeline.specs.hardware", "ridgeline.specs.precision",
    "ridgeline.specs.parallel", "ridgeline.perf.roofline", "ridgeline.perf.moe",
    "ridgeline.perf.comm", "ridgeline.perf.memory", "ridgeline.perf.roofline_step",
    "ridgeline.perf.estimate", "ridgeline.perf.grid",
])
def test_docstring_examples_run(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and result.attempted > 0


def test_weight_bytes_count_every_parameter() -> None:
    """The GPU holds every parameter of Llama-3.1-8B at bf16: 2 x 8,030,261,248 bytes
    (the published count, final RMSNorm included); at PP 2 the last stage holds the head
    and the final norm, 16 layers and nothing of the embedding (a larger first stage is
    the embedding's; here the head side is larger by the norm's 4,096 elements)."""
    from ridgeline.perf.memory import weight_bytes_per_gpu
    from ridgeline.specs import Parallelism, Precision

    m = load_model("llama-3.1-8b")
    bf16 = Precision("bf16", "bf16", "bf16")
    assert weight_bytes_per_gpu(m, bf16, Parallelism()) == 2 * 8_030_261_248
    layer = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
    assert weight_bytes_per_gpu(m, bf16, Parallelism(pp=2)) == \
        2 * (16 * layer + 128256 * 4096 + 4096)
