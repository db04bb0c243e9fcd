"""How each serving engine sizes its KV pool at start-up, and the limits it derives from it.

Three rules, each the engine's own arithmetic (docs/engine.md has the derivations):

- **vLLM** (`gpu_memory_utilization`, default 0.9): of util x GPU memory, the weights, the peak
  activations of a profiling forward pass and the runtime reserve come first; the rest is KV
  (ridgeline.perf.memory.MemoryPlan).
- **SGLang** (`mem_fraction_static`): the fraction of GPU memory that holds weights plus the
  KV pool; the remainder holds activations and CUDA graphs. Unset, SGLang derives it from the
  GPU's memory: it reserves 512 MiB + 1.5 MiB per token of the chunked-prefill size
  (at least 2048) + 2 MiB per CUDA-graph batch slot + TP x PP / 8 GiB, at least 10 GiB on
  GPUs over 60 GiB, and takes round((memory - reserved) / memory, 3). The KV pool is
  memory x fraction - weights, one token per page. The chunked-prefill size and the largest
  CUDA-graph batch come from the GPU's memory too, and the request pool (the running-request
  limit) is min(max(KV tokens / context length x 512, 2048), 4096).
- **TensorRT-LLM** (`kv_cache_config.free_gpu_memory_fraction`, default 0.9): a profiling
  forward pass of `max_num_tokens` tokens measures the peak; the KV pool is
  fraction x (memory - that peak), the peak being weights + activations + the runtime.

>>> sglang_gpu_defaults(81559, 1)          # H100 80 GB, TP1: chunk 8192, graphs up to 256
(8192, 256)
>>> sglang_mem_fraction_static(81559, 1, 1, 8192, 256)
0.835
>>> sglang_max_running_requests(400_000, 131072)
2048
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ridgeline.perf.memory import (
    RUNTIME_RESERVE_BYTES,
    MemoryPlan,
    kv_bytes_per_token_per_gpu,
    weight_bytes_per_gpu,
    workspace_bytes,
)

MIB = 1 << 20
GIB = 1 << 30
RULES = ("vllm", "sglang", "trtllm")
# TensorRT-LLM's KvCacheConfig.free_gpu_memory_fraction when unset.
TRTLLM_FREE_GPU_MEMORY_FRACTION = 0.9
# SGLang's request pool: KV tokens / context length x this many, clamped to [min, max].
SGLANG_REQS_PER_CONTEXT = 512
SGLANG_MIN_RUNNING_REQUESTS = 2048
SGLANG_MAX_RUNNING_REQUESTS = 4096

# (GPU memory below this many MiB, chunked-prefill size, CUDA-graph max batch at TP < 4 and
# at TP >= 4), in SGLang's order (server_args: the CUDA branches; NPU ones left out).
_SGLANG_TIERS: tuple[tuple[float, int, int, int], ...] = (
    (20 * 1024, 2048, 8, 8),          # T4, RTX 4080
    (35 * 1024, 2048, 24, 80),        # A10, RTX 4090/5090, L4
    (60 * 1024, 4096, 32, 160),       # A100 40 GB, L40S
    (90 * 1024, 8192, 256, 512),      # H100, A100 80 GB
    (160 * 1024, 8192, 256, 512),     # H200, H20
    (math.inf, 16384, 512, 512),      # B200, MI300X and larger
)


def sglang_gpu_defaults(gpu_mem_mib: float, tp: int) -> tuple[int, int]:
    """(chunked-prefill size, CUDA-graph max batch) SGLang picks for a GPU of this memory."""
    for below, chunk, bs_small, bs_large in _SGLANG_TIERS:
        if gpu_mem_mib < below:
            return chunk, bs_small if tp < 4 else bs_large
    raise AssertionError("unreachable: the last tier is unbounded")


def sglang_reserved_mib(gpu_mem_mib: float, tp: int, pp: int, chunk: int,
                        graph_max_bs: int) -> float:
    """MiB SGLang keeps outside the static pool (activations, CUDA graphs, metadata)."""
    reserved = 512.0 + max(chunk, 2048) * 1.5 + graph_max_bs * 2.0 + tp * pp / 8 * 1024
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024.0)
    return reserved


def sglang_mem_fraction_static(gpu_mem_mib: float, tp: int, pp: int, chunk: int,
                               graph_max_bs: int) -> float:
    """SGLang's default `mem_fraction_static` (rounded to 3 decimals, as it does)."""
    reserved = sglang_reserved_mib(gpu_mem_mib, tp, pp, chunk, graph_max_bs)
    return round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)


def sglang_max_running_requests(kv_tokens: int, context_len: int) -> int:
    """SGLang's request-pool size with `--max-running-requests` unset."""
    if context_len <= 0:
        return SGLANG_MAX_RUNNING_REQUESTS
    pool = int(kv_tokens / context_len * SGLANG_REQS_PER_CONTEXT)
    return min(max(pool, SGLANG_MIN_RUNNING_REQUESTS), SGLANG_MAX_RUNNING_REQUESTS)


@dataclass(frozen=True)
class EngineMemory:
    """The KV pool an engine sizes on one GPU, and what it derived on the way."""

    rule: str                         # vllm, sglang or trtllm
    fraction: float                   # gpu_memory_utilization / mem_fraction_static / free fr.
    fraction_name: str                # the engine's name of that setting
    fraction_source: str              # "default" (the engine's rule) or "set"
    capacity_bytes: float
    weight_bytes: float
    activation_bytes: float           # what the rule sets aside for activations and runtime
    kv_budget_bytes: float
    kv_bytes_per_token_per_gpu: float
    kv_capacity_tokens: int
    # SGLang's derived limits (0 where the rule has none)
    chunked_prefill_size: int = 0
    cuda_graph_max_bs: int = 0
    max_running_requests: int = 0

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rule": self.rule, self.fraction_name: self.fraction,
            "fraction_source": self.fraction_source,
            "capacity_bytes": self.capacity_bytes, "weight_bytes": self.weight_bytes,
            "activation_bytes": self.activation_bytes,
            "kv_budget_bytes": self.kv_budget_bytes,
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "kv_capacity_tokens": self.kv_capacity_tokens, "summary": self.line()}
        if self.rule == "sglang":
            out.update(chunked_prefill_size=self.chunked_prefill_size,
                       cuda_graph_max_bs=self.cuda_graph_max_bs,
                       max_running_requests=self.max_running_requests)
        return out

    def line(self) -> str:
        """One assumption line: the engine's arithmetic with its numbers."""
        gib = GIB
        tok = f"{self.kv_capacity_tokens:,} KV tokens"
        if self.rule == "sglang":
            return (f"KV pool (SGLang's rule): mem_fraction_static {self.fraction:g} "
                    f"({self.fraction_source}) x {self.capacity_bytes / gib:.2f} GiB - weights "
                    f"{self.weight_bytes / gib:.2f} GiB = {self.kv_budget_bytes / gib:.2f} GiB "
                    f"-> {tok}, page size 1; chunked prefill {self.chunked_prefill_size}, "
                    f"CUDA graphs to batch {self.cuda_graph_max_bs}, request pool "
                    f"{self.max_running_requests}")
        if self.rule == "trtllm":
            return (f"KV pool (TensorRT-LLM's rule): free_gpu_memory_fraction "
                    f"{self.fraction:g} ({self.fraction_source}) x ({self.capacity_bytes / gib:.2f}"
                    f" GiB - weights {self.weight_bytes / gib:.2f} GiB - activations and "
                    f"runtime {self.activation_bytes / gib:.2f} GiB) = "
                    f"{self.kv_budget_bytes / gib:.2f} GiB -> {tok}")
        return (f"KV pool (vLLM's rule): gpu_memory_utilization {self.fraction:g} x "
                f"{self.capacity_bytes / gib:.2f} GiB - weights {self.weight_bytes / gib:.2f} GiB"
                f" - activations and runtime {self.activation_bytes / gib:.2f} GiB = "
                f"{self.kv_budget_bytes / gib:.2f} GiB -> {tok}")


def _tokens(budget: float, per_token: float) -> int:
    return max(0, math.floor(budget / per_token)) if per_token > 0 else 0


def engine_memory(rule: str, step_model: Any, fraction: float | None = None,
                  gpu_memory_utilization: float = 0.9) -> EngineMemory:
    """The KV pool `rule` sizes for a roofline step model (its model, GPU, precision and
    parallelism). `fraction`: the engine's own setting where given (SGLang's
    mem_fraction_static, TensorRT-LLM's free_gpu_memory_fraction), else its default rule;
    vLLM's is `gpu_memory_utilization`."""
    if rule not in RULES:
        raise ValueError(f"KV memory rule {rule!r}; allowed: {', '.join(RULES)}")
    m, hw, pr, par = step_model.model, step_model.hardware, step_model.precision, \
        step_model.parallel
    cap = float(hw.memory_bytes)
    per_tok = kv_bytes_per_token_per_gpu(m, pr, par)
    if rule == "vllm":
        plan: MemoryPlan = step_model.memory(gpu_memory_utilization)
        return EngineMemory(
            "vllm", gpu_memory_utilization, "gpu_memory_utilization", "set", cap,
            plan.weight_bytes, plan.workspace_bytes + plan.reserve_bytes + plan.state_bytes,
            plan.kv_budget_bytes, per_tok, plan.kv_capacity_tokens)
    weights = weight_bytes_per_gpu(m, pr, par)
    if rule == "sglang":
        mib = cap / MIB
        chunk, graph_bs = sglang_gpu_defaults(mib, par.tp)
        # the reserve follows the chunked-prefill size the engine runs (its own when set)
        chunk = int(getattr(step_model, "max_num_batched_tokens", chunk))
        source = "set" if fraction is not None else "default"
        if fraction is None:
            fraction = sglang_mem_fraction_static(mib, par.tp, par.pp, chunk, graph_bs)
        budget = cap * fraction - weights
        tokens = _tokens(budget, per_tok)
        return EngineMemory(
            "sglang", fraction, "mem_fraction_static", source, cap, weights,
            cap * (1.0 - fraction), budget, per_tok, tokens, chunk, graph_bs,
            sglang_max_running_requests(tokens, m.max_position_embeddings))
    # TensorRT-LLM: its profiling pass runs requests of min(max_num_tokens, max_seq_len)
    # tokens that fill max_num_tokens, one logits row each.
    source = "set" if fraction is not None else "default"
    if fraction is None:
        fraction = TRTLLM_FREE_GPU_MEMORY_FRACTION
    tokens_pass = float(step_model.max_num_batched_tokens)
    ctx = m.max_position_embeddings or tokens_pass
    rows = math.ceil(tokens_pass / min(tokens_pass, ctx))
    act = workspace_bytes(m, pr, par, tokens_pass, rows) + RUNTIME_RESERVE_BYTES
    budget = (cap - weights - act) * fraction
    return EngineMemory("trtllm", fraction, "free_gpu_memory_fraction", source, cap, weights,
                        act, budget, per_tok, _tokens(budget, per_tok))


def engine_memory_at(rule: str, step_model: Any, gpu_memory_utilization: float = 0.9
                     ) -> EngineMemory:
    """`engine_memory` with one memory setting for every engine: vLLM's utilization is its
    own; for SGLang and TensorRT-LLM a value other than vLLM's 0.9 default is read as the
    engine's fraction (mem_fraction_static, free_gpu_memory_fraction), and 0.9 leaves the
    engine's default rule (the reading `simulate`, `serve`, `plan` and `estimate` share)."""
    fraction = None if rule == "vllm" or gpu_memory_utilization == 0.9 \
        else gpu_memory_utilization
    return engine_memory(rule, step_model, fraction, gpu_memory_utilization)


__all__ = ["RULES", "TRTLLM_FREE_GPU_MEMORY_FRACTION", "EngineMemory", "engine_memory",
           "engine_memory_at",
           "sglang_gpu_defaults", "sglang_max_running_requests", "sglang_mem_fraction_static",
           "sglang_reserved_mib"]
