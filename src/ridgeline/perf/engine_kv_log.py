"""The KV-cache line each engine logs at start-up, from the KV pool its sizing rule gives.

vLLM's three lines live in ridgeline.perf.vllm_kv_log. The other two engines, as their
sources format them:

- **SGLang** (mem_cache/memory_pool.py, when the token-to-KV pool is allocated, and the
  scheduler's start-up line)::

      KV Cache is allocated. #tokens: 422282, K size: 25.77 GB, V size: 25.77 GB
      max_total_num_tokens=422282, chunked_prefill_size=8192, max_prefill_tokens=16384,
      max_running_requests=2048, context_len=131072

  "GB" there is 2^30 bytes; K and V are each half of the pool (tokens x bytes per token / 2);
  `max_prefill_tokens` is the server default, 16384.
- **TensorRT-LLM** (batch_manager/kvCacheManager.cpp)::

      [MemUsageChange] Allocated 56.47 GiB for max tokens in paged KV cache (462656).

  The count is whole blocks of `tokens_per_block` (32 by default) x that block size, and the
  GiB are those blocks' bytes.

The counts are those of ridgeline's memory model (ridgeline.perf.engine_memory): compare them
with a real server's log to check it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ridgeline.perf.engine_memory import EngineMemory

GIB = 1 << 30
# TensorRT-LLM's KvCacheConfig tokens_per_block when unset.
TRTLLM_TOKENS_PER_BLOCK = 32
# SGLang's --max-prefill-tokens when unset.
SGLANG_MAX_PREFILL_TOKENS = 16384
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


@dataclass(frozen=True)
class EngineKvLog:
    """The KV-cache tokens an engine reports at start-up and its lines."""

    rule: str
    kv_cache_tokens: int
    kv_cache_bytes: float
    lines: tuple[str, ...]

    @property
    def engine_name(self) -> str:
        return ENGINE_NAMES[self.rule]

    @property
    def headline(self) -> str:
        """The line that carries the token count."""
        return next((line for line in self.lines if str(self.kv_cache_tokens) in
                     line.replace(",", "")), self.lines[0] if self.lines else "")

    def describe(self) -> dict[str, Any]:
        return {"rule": self.rule, "engine": self.engine_name,
                "kv_cache_tokens": self.kv_cache_tokens,
                "kv_cache_bytes": self.kv_cache_bytes, "lines": list(self.lines)}


def sglang_kv_log(mem: EngineMemory, context_len: int) -> EngineKvLog:
    """SGLang's allocation line and scheduler line for this pool (page size 1)."""
    tokens = mem.kv_capacity_tokens
    pool_bytes = tokens * mem.kv_bytes_per_token_per_gpu
    half_gb = pool_bytes / 2 / GIB
    return EngineKvLog("sglang", tokens, pool_bytes, (
        f"KV Cache is allocated. #tokens: {tokens}, K size: {half_gb:.2f} GB, "
        f"V size: {half_gb:.2f} GB",
        f"max_total_num_tokens={tokens}, chunked_prefill_size={mem.chunked_prefill_size}, "
        f"max_prefill_tokens={SGLANG_MAX_PREFILL_TOKENS}, "
        f"max_running_requests={mem.max_running_requests}, context_len={context_len}"))


def trtllm_kv_log(mem: EngineMemory,
                  tokens_per_block: int = TRTLLM_TOKENS_PER_BLOCK) -> EngineKvLog:
    """TensorRT-LLM's allocation line: whole blocks of `tokens_per_block` tokens."""
    blocks = mem.kv_capacity_tokens // tokens_per_block
    tokens = blocks * tokens_per_block
    pool_bytes = tokens * mem.kv_bytes_per_token_per_gpu
    return EngineKvLog("trtllm", tokens, pool_bytes, (
        f"Number of tokens per block: {tokens_per_block}.",
        f"[MemUsageChange] Allocated {pool_bytes / GIB:.2f} GiB for max tokens in paged KV "
        f"cache ({tokens})."))


def engine_kv_log(mem: EngineMemory, context_len: int, vllm_lines: tuple[str, ...] = (),
                  vllm_tokens: int = 0) -> EngineKvLog:
    """The start-up log of `mem.rule`'s engine; vLLM's lines come from its own module
    (ridgeline.perf.vllm_kv_log), passed in."""
    if mem.rule == "sglang":
        return sglang_kv_log(mem, context_len)
    if mem.rule == "trtllm":
        return trtllm_kv_log(mem)
    return EngineKvLog("vllm", vllm_tokens, mem.kv_budget_bytes, vllm_lines)


__all__ = ["ENGINE_NAMES", "SGLANG_MAX_PREFILL_TOKENS", "TRTLLM_TOKENS_PER_BLOCK",
           "EngineKvLog", "engine_kv_log", "sglang_kv_log", "trtllm_kv_log"]
