"""`estimate --engine sglang|trtllm` sizes the KV cache with that engine's rule and prints the
engine's own start-up line, checked through the installed command against counts worked out
by hand from each engine's arithmetic (never against ridgeline's output).

Hand inputs (as in docs/engine.md's KV pool section): GPU memory as the device reports it
(H100 SXM 81,559 MiB = 85,520,809,984 B; H200 143,771 MiB = 150,754,820,096 B); weights =
parameters x 2 bytes (Llama-3.1-8B 8,030,261,248; Qwen2.5-7B 7,615,616,512); KV bytes per
token = layers x KV heads x head dim x 2 (K, V) x 2 bytes.

SGLang: mem_fraction_static = round((MiB - reserved) / MiB, 3), reserved = 512 + 1.5 x 8192 +
2 x 256 + 1/8 x 1024 = 13,440 MiB at TP1 on an H100 or H200; KV tokens = floor((memory x
fraction - weights) / bytes per token), page size 1.

TensorRT-LLM: KV tokens = floor(0.9 x (memory - weights - activations - 1 GiB) / bytes per
token), the activations those of one 8192-token profiling pass: 8192 x (2 hidden + q dim +
2 x KV dim + attention out + 3 x intermediate) x 2 bytes, plus one fp32 logits row of the
vocabulary; the log counts whole blocks of 32 tokens.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

RIDGELINE = str(Path(sys.executable).with_name("ridgeline"))
H100_B, H200_B = 85_520_809_984, 150_754_820_096
GIB = 1 << 30
LLAMA8 = dict(w=8_030_261_248 * 2, kv=32 * 8 * 128 * 2 * 2, hidden=4096, q=4096,
              kv_dim=8 * 128, inter=14336, vocab=128256, ctx=131072)
QWEN7 = dict(w=7_615_616_512 * 2, kv=28 * 4 * 128 * 2 * 2, hidden=3584, q=3584,
             kv_dim=4 * 128, inter=18944, vocab=152064, ctx=32768)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RIDGELINE, "estimate", *args], capture_output=True, text=True,
                          timeout=120)


def _json(model: str, hw: str, engine: str) -> dict:
    p = _run(model, "-g", hw, "--engine", engine, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _sglang_tokens(cap: int, mib: int, m: dict) -> int:
    frac = round((mib - 13440) / mib, 3)
    return math.floor((cap * frac - m["w"]) / m["kv"])


def _trtllm_tokens(cap: int, m: dict) -> int:
    per_tok_act = (2 * m["hidden"] + m["q"] + 2 * m["kv_dim"] + m["q"] + 3 * m["inter"]) * 2
    act = 8192 * per_tok_act + m["vocab"] * 4 + GIB
    return math.floor(0.9 * (cap - m["w"] - act) / m["kv"])


def test_hand_counts_match_the_worked_examples_in_the_docs() -> None:
    # docs/engine.md: Llama-3.1-8B on an H100 -> 422,282 (SGLang), 462,657 (TensorRT-LLM)
    assert _sglang_tokens(H100_B, 81559, LLAMA8) == 422_282
    assert _trtllm_tokens(H100_B, LLAMA8) == 462_657


@pytest.mark.parametrize(("model", "hw", "cap", "mib", "m"), [
    ("llama-3.1-8b", "h100-sxm", H100_B, 81559, LLAMA8),
    ("qwen2.5-7b", "h200", H200_B, 143771, QWEN7),
])
def test_sglang_estimate_sizes_kv_as_sglang(model: str, hw: str, cap: int, mib: int,
                                            m: dict) -> None:
    tokens = _sglang_tokens(cap, mib, m)
    out = _json(model, hw, "sglang")
    assert out["result"]["kv_capacity_tokens"] == tokens
    assert out["kv_memory"]["rule"] == "sglang"
    assert out["kv_memory"]["memory_fraction"] == round((mib - 13440) / mib, 3)
    assert out["kv_memory"]["fraction_name"] == "mem_fraction_static"
    log = out["engine_kv_log"]
    assert log["kv_cache_tokens"] == tokens
    half_gb = tokens * m["kv"] / 2 / GIB
    assert log["lines"][0] == (f"KV Cache is allocated. #tokens: {tokens}, "
                               f"K size: {half_gb:.2f} GB, V size: {half_gb:.2f} GB")
    assert log["lines"][1].startswith(f"max_total_num_tokens={tokens}, ")
    assert f"context_len={m['ctx']}" in log["lines"][1]
    assert "vllm_kv_log" not in out   # vLLM's lines belong to vLLM only
    text = _run(model, "-g", hw, "--engine", "sglang")
    assert text.returncode == 0, text.stderr
    assert f"KV capacity {tokens:,} tokens per replica" in text.stdout
    assert f"SGLang would log: KV Cache is allocated. #tokens: {tokens}," in text.stdout


@pytest.mark.parametrize(("model", "hw", "cap", "m"), [
    ("llama-3.1-8b", "h100-sxm", H100_B, LLAMA8),
    ("qwen2.5-7b", "h100-sxm", H100_B, QWEN7),
])
def test_trtllm_estimate_sizes_kv_as_tensorrt_llm(model: str, hw: str, cap: int,
                                                  m: dict) -> None:
    tokens = _trtllm_tokens(cap, m)
    logged = tokens // 32 * 32
    out = _json(model, hw, "trtllm")
    assert out["result"]["kv_capacity_tokens"] == tokens
    log = out["engine_kv_log"]
    assert log["kv_cache_tokens"] == logged
    assert log["lines"][-1] == (f"[MemUsageChange] Allocated {logged * m['kv'] / GIB:.2f} GiB "
                                f"for max tokens in paged KV cache ({logged}).")
    text = _run(model, "-g", hw, "--engine", "trtllm", "--details")
    assert text.returncode == 0, text.stderr
    assert "TensorRT-LLM start-up log" in text.stdout
    assert f"paged KV cache ({logged})." in text.stdout
    assert f"KV capacity {tokens:,} tokens per replica" in text.stdout


def test_vllm_keeps_its_own_line_and_a_sweep_follows_the_engine() -> None:
    out = _json("llama-3.1-8b", "h100-sxm", "vllm")
    assert out["engine_kv_log"]["lines"] == out["vllm_kv_log"]["lines"]
    # A sweep's rows carry the engine's KV capacity too.
    p = _run("llama-3.1-8b", "-g", "h100-sxm,h200", "--engine", "sglang", "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)["rows"]
    assert [r["kv_capacity_tokens"] for r in rows] == [
        _sglang_tokens(H100_B, 81559, LLAMA8), _sglang_tokens(H200_B, 143771, LLAMA8)]
