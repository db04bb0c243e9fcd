"""`estimate` prints the KV-cache lines vLLM logs at start-up, checked against a hand count.

Llama-3.1-8B (HF config: 32 layers, 8 KV heads of 128, hidden 4096, MLP 14336, vocab
128,256; 8,030,261,248 parameters on its model card) in bf16 on one H100 SXM at vLLM's
defaults (gpu_memory_utilization 0.9, block size 16, max_num_batched_tokens 8192,
max_num_seqs 256, max_model_len = max_position_embeddings 131,072), counted by hand the way
vLLM counts (vllm/v1/core/kv_cache_utils.py):

    memory        85,520,809,984 B (79.65 GiB, what torch reports for an H100 80GB)
    budget        0.9 x memory                      = 76,968,728,985.6 B
    weights       8,030,261,248 x 2 B               = 16,060,522,496 B
    activations   8192 tokens x (2 x 4096 + 4096 + 2 x 1024 + 4096 + 3 x 14336) x 2 B
                  + 256 rows x 128,256 x 4 B (fp32 logits) = 1,137,967,104 B
    reserve       1 GiB                             = 1,073,741,824 B
    available     58,696,497,561.6 B                = 54.67 GiB
    one block     16 tokens x 32 layers x 2 x 8 x 128 x 2 B = 2,097,152 B
    blocks        floor(available / one block)      = 27,988 -> 447,808 tokens
    concurrency   27,988 / cdiv(131,072, 16) = 27,988 / 8,192 = 3.42x
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ridgeline.perf.memory import MemoryPlan
from ridgeline.perf.vllm_kv_log import vllm_kv_log

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
HAND = ["Available KV cache memory: 54.67 GiB",
        "GPU KV cache size: 447,808 tokens",
        "Maximum concurrency for 131,072 tokens per request: 3.42x"]


def _estimate(*extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RIDGELINE, "estimate", "--model", "llama-3.1-8b", "--hardware",
                           "h100-sxm", "--batch", "1", "--prompt", "512", "--output", "64",
                           *extra], capture_output=True, text=True, timeout=120)


def test_estimate_prints_the_lines_vllm_would_log() -> None:
    out = _estimate("--details")   # the whole start-up log is a details section
    assert out.returncode == 0, out.stderr
    for line in HAND:
        assert line in out.stdout, (line, out.stdout[-1500:])
    js = _estimate("--json")
    assert js.returncode == 0, js.stderr
    log = json.loads(js.stdout)["vllm_kv_log"]
    assert log["lines"] == HAND
    assert log["gpu_kv_cache_blocks"] == 27_988 and log["kv_cache_tokens"] == 447_808


def test_blocks_round_down_per_block_and_requests_round_up() -> None:
    # 10.5 blocks of memory hold 10 blocks (160 tokens, not 168); a request of 33 tokens
    # needs cdiv(33, 16) = 3 blocks, so 10 / 3 = 3.33 of them fit (not 160 / 33 = 4.85).
    page_bytes = 16 * 1000.0
    plan = MemoryPlan(capacity_bytes=0, budget_bytes=10.5 * page_bytes, weight_bytes=0,
                      workspace_bytes=0, reserve_bytes=0, kv_bytes_per_token_per_gpu=1000.0,
                      kv_bytes_per_token=1000.0)
    log = vllm_kv_log(plan, block_size_tokens=16, max_model_len=33)
    assert (log.num_gpu_blocks, log.kv_cache_tokens) == (10, 160)
    assert log.lines()[2] == "Maximum concurrency for 33 tokens per request: 3.33x"


def test_serve_logs_the_same_kv_lines_for_its_pool() -> None:
    from ridgeline.serve.launcher import EmulatorProcess

    with EmulatorProcess(command=[RIDGELINE, "serve", "--model", "llama-3.1-8b",
                                  "--hardware", "h100-sxm", "--port", "0"]) as emu:
        stderr = emu.stderr_text()
    assert HAND[1] in stderr and HAND[2] in stderr, stderr[-800:]
