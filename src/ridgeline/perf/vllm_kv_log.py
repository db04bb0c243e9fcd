"""The KV-cache lines vLLM logs at start-up, from ridgeline's memory plan.

vLLM V1 sizes its KV cache once, at start-up, and logs the result (vllm/v1/worker/
gpu_worker.py and vllm/v1/core/kv_cache_utils.py `_report_kv_cache_config`):

    Available KV cache memory: 52.36 GiB
    GPU KV cache size: 686,320 tokens
    Maximum concurrency for 100,000 tokens per request: 6.86x

How it counts, for a model whose attention layers share one KV spec (one KV-cache group):
the available memory is divided by the page size of one block over all the layers of the
GPU (block_size x the KV bytes per token per GPU), rounded down to whole blocks; the size
in tokens is blocks x block_size; the maximum concurrency is blocks / cdiv(max_model_len,
block_size) (the blocks one request of max_model_len tokens needs). Under tensor parallelism
each GPU holds its share of the KV heads and the line is the per-GPU block count (every rank
has the same), in tokens.

ridgeline's available memory is the memory plan's KV budget (perf/memory.py: util x memory -
weights - the activation peak of a `max_num_batched_tokens` step - a 1 GiB runtime reserve),
so these lines say what vLLM would log if that plan is right: compare them with a real
server's log to check the memory model. Models with windowed or linear-attention layers get
several KV-cache groups in vLLM (its hybrid allocator); ridgeline allocates every token on
every layer for them, so its line is the conservative, single-group count (said in `note`).

>>> from ridgeline.perf.memory import MemoryPlan
>>> plan = MemoryPlan(80 * 2**30, 72 * 2**30, 15 * 2**30, 2**30, 2**30, 131072.0, 131072.0)
>>> log = vllm_kv_log(plan, block_size_tokens=16, max_model_len=131072)
>>> log.lines()[1]
'GPU KV cache size: 450,560 tokens'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

GIB = 1024**3


@dataclass(frozen=True)
class VllmKvLog:
    available_kv_bytes: float
    num_gpu_blocks: int
    block_size_tokens: int
    max_model_len: int
    note: str = ""

    @property
    def kv_cache_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size_tokens

    @property
    def max_concurrency(self) -> float:
        return self.num_gpu_blocks / math.ceil(self.max_model_len / self.block_size_tokens)

    def lines(self) -> list[str]:
        """The three lines, formatted as vLLM formats them (GiB to 2 places, commas)."""
        return [f"Available KV cache memory: {self.available_kv_bytes / GIB:.2f} GiB",
                f"GPU KV cache size: {self.kv_cache_tokens:,} tokens",
                f"Maximum concurrency for {self.max_model_len:,} tokens per request: "
                f"{self.max_concurrency:.2f}x"]

    def describe(self) -> dict[str, Any]:
        # vLLM's num_gpu_blocks, max_model_len and max concurrency, with their units
        return {"available_kv_bytes": self.available_kv_bytes,
                "gpu_kv_cache_blocks": self.num_gpu_blocks,
                "block_size_tokens": self.block_size_tokens,
                "kv_cache_tokens": self.kv_cache_tokens,
                "max_model_len_tokens": self.max_model_len,
                "max_concurrency_seqs": self.max_concurrency, "lines": self.lines(),
                "note": self.note}


def vllm_kv_log(plan: Any, block_size_tokens: int = 16, max_model_len: int = 131072,
                hybrid: bool = False) -> VllmKvLog:
    """What vLLM would log for this memory plan (a `perf.memory.MemoryPlan`)."""
    available = max(0.0, float(plan.kv_budget_bytes))
    page_bytes = block_size_tokens * float(plan.kv_bytes_per_token_per_gpu)
    blocks = int(available // page_bytes) if page_bytes > 0 else 0
    note = ("windowed or linear-attention layers: vLLM's hybrid allocator keeps fewer tokens "
            "per layer, so its count would be higher" if hybrid else "")
    return VllmKvLog(available, blocks, int(block_size_tokens), int(max_model_len), note)


def vllm_kv_log_for(step_model: Any, gpu_memory_utilization: float = 0.9,
                    block_size_tokens: int = 16, max_model_len: int | None = None) -> VllmKvLog:
    """vLLM's lines for a roofline step-time model serving at its `max_num_batched_tokens`
    (the activation peak vLLM profiles), vLLM's default block size and, by default, the
    model's max_position_embeddings as max_model_len (vLLM's default)."""
    mdl = step_model.model
    mml = max_model_len or int(mdl.max_position_embeddings or 0) or 131072
    return vllm_kv_log(step_model.memory(gpu_memory_utilization), block_size_tokens, mml,
                       hybrid=bool(mdl.is_windowed or mdl.num_linear_layers))


__all__ = ["VllmKvLog", "vllm_kv_log", "vllm_kv_log_for"]
