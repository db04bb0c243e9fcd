"""The serving engine: one API for the simulator (virtual clock) and the emulator (wall clock).

The engine never reads a clock. `step(now_s)` schedules one continuous-batching step starting
at `now_s` and says how long it takes (from the step-time model) and what it produces; the
caller decides when the next step starts. See docs/engine.md.

>>> from ridgeline.perf.step_time import LinearStepTime
>>> eng = Engine(EngineConfig(num_kv_blocks=64), LinearStepTime(base_s=0.01,
...                                                               per_prefill_token_s=1e-4))
>>> eng.add_request(EngineRequest("r1", prompt_tokens=100, output_tokens=3))
>>> r = eng.step(0.0); round(r.duration_s, 6), r.emitted    # prefill emits the first token
(0.02, [('r1', 1)])
>>> r = eng.step(0.02); r = eng.step(0.03); r.finished, eng.has_unfinished()
(['r1'], False)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.perf.engine_memory import EngineMemory, engine_memory_at
from ridgeline.perf.fast_step import CompiledStep
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.step_time import BatchWork, StepTimeModel
from ridgeline.sim.kv_cache import BlockPool, kv_layout
from ridgeline.sim.scheduler import Scheduler
from ridgeline.sim.sequence import EngineRequest, Sequence, StepOutcome

CAPACITY_POLICIES = ("vllm", "guaranteed_no_evict", "max_utilization")
SCHEDULE_POLICIES = ("fcfs", "lpm")
PREEMPTION_ORDERS = ("newest", "fewest_outputs")

__all__ = ["Engine", "EngineConfig", "EngineRequest", "EngineStats", "StepResult"]


@dataclass(frozen=True)
class EngineConfig:
    """vLLM-style scheduler and KV-cache settings (same names as vLLM's flags)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    block_size_tokens: int = 16
    num_kv_blocks: int = 65536
    enable_prefix_caching: bool = False
    # Per-request costs outside the step loop (ridgeline.sim.engine_costs): added to each
    # request's token times after the engine ran; 0 for a bare engine.
    request_overhead_s: float = 0.0
    request_overhead_steps: float = 0.0
    # "vllm" (preempt the newest request when KV runs out), "guaranteed_no_evict"
    # (TensorRT-LLM's default: reserve a request's whole KV at admission, never preempt) or
    # "max_utilization" (TensorRT-LLM's other policy: admit on the KV of the moment and
    # pause the newest request when it runs out, as vLLM does)
    capacity_policy: str = "vllm"
    # Which running requests give their KV back when decode runs out: "newest" (vLLM: the
    # most recently admitted, one at a time, to the head of the queue) or "fewest_outputs"
    # (SGLang's retract_decode: fewest output tokens first, the longer prompt first among
    # equals, until RETRACT_DECODE_STEPS tokens per remaining request are free; to the back
    # of the queue)
    preemption_order: str = "newest"
    # How the KV pool was sized (ridgeline.perf.engine_memory): vllm, sglang or trtllm.
    # Informational here: the builder sized num_kv_blocks with it.
    kv_memory_rule: str = "vllm"
    # SGLang's scheduler (the sglang preset, docs/engine.md); the defaults keep vLLM V1's.
    # prefill_first: a step runs a prefill batch whenever one can be formed and decodes
    # only otherwise (SGLang without --enable-mixed-chunk); False mixes both as vLLM does.
    prefill_first: bool = False
    # Admission reserves KV for the running requests' future tokens: ratio x each one's
    # remaining output (at most new_token_clip_tokens); the ratio starts at
    # new_token_ratio_init, falls linearly to new_token_ratio_min over
    # new_token_ratio_decay_steps decode steps and restarts when the engine idles.
    # 0: no reservation (vLLM).
    new_token_ratio_init: float = 0.0
    new_token_ratio_min: float = 0.0
    new_token_ratio_decay_steps: int = 600
    new_token_clip_tokens: int = 4096
    # "fcfs", or "lpm": the waiting request with the longest cached prefix first
    schedule_policy: str = "fcfs"
    # Overlap scheduling: the CPU work of step i+1 runs while the GPU runs step i, so a
    # step takes max(GPU time, step_cpu_s) instead of their sum.
    overlap_schedule: bool = False
    step_cpu_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size_tokens",
                     "num_kv_blocks"):
            if int(getattr(self, name)) < 1:
                raise RidgelineError(f"{name}: got {getattr(self, name)}; allowed: >= 1")
        if self.capacity_policy not in CAPACITY_POLICIES:
            raise RidgelineError(f"capacity_policy: got {self.capacity_policy!r}; allowed: "
                                 + ", ".join(CAPACITY_POLICIES))
        if self.kv_memory_rule not in ("vllm", "sglang", "trtllm"):
            raise RidgelineError(f"kv_memory_rule: got {self.kv_memory_rule!r}; allowed: "
                                 "vllm, sglang, trtllm")
        if self.preemption_order not in PREEMPTION_ORDERS:
            raise RidgelineError(f"preemption_order: got {self.preemption_order!r}; allowed: "
                                 + ", ".join(PREEMPTION_ORDERS))
        if self.schedule_policy not in SCHEDULE_POLICIES:
            raise RidgelineError(f"schedule_policy: got {self.schedule_policy!r}; allowed: "
                                 + ", ".join(SCHEDULE_POLICIES))
        for name in ("new_token_ratio_init", "new_token_ratio_min"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:   # NaN fails too
                raise RidgelineError(f"{name}: got {v}; allowed: 0 to 1")
        if self.new_token_ratio_min > self.new_token_ratio_init:
            raise RidgelineError(f"new_token_ratio_min: got {self.new_token_ratio_min}; "
                                 f"allowed: <= new_token_ratio_init ({self.new_token_ratio_init})")
        for name in ("new_token_ratio_decay_steps", "new_token_clip_tokens"):
            if int(getattr(self, name)) < 1:
                raise RidgelineError(f"{name}: got {getattr(self, name)}; allowed: >= 1")
        if not 0.0 <= self.step_cpu_s <= 60.0:
            raise RidgelineError(f"step_cpu_s: got {self.step_cpu_s}; allowed: 0 to 60")
        if self.max_num_batched_tokens < self.max_num_seqs and not self.prefill_first:
            # Every running sequence must be able to decode in every step (vLLM checks this;
            # prefill-first decode steps carry no prefill, so the budget does not bind them).
            raise RidgelineError(
                f"max_num_batched_tokens: got {self.max_num_batched_tokens}; allowed: >= "
                f"max_num_seqs ({self.max_num_seqs})")

    @property
    def vllm_loop(self) -> bool:
        """True where the step loop is vLLM V1's (the C core implements only that one)."""
        return not (self.prefill_first or self.new_token_ratio_init
                    or self.schedule_policy != "fcfs" or self.overlap_schedule
                    or self.preemption_order != "newest")

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_kv_blocks * self.block_size_tokens


def kv_tokens_for(step_model: Any, gpu_memory_utilization: float, rule: str = "vllm"
                  ) -> int:
    """KV tokens the engine's sizing rule (ridgeline.perf.engine_memory) gives this step
    model. For SGLang and TensorRT-LLM, a `gpu_memory_utilization` other than vLLM's 0.9
    default is read as the engine's own fraction (mem_fraction_static,
    free_gpu_memory_fraction); 0.9 leaves the engine's default rule. A calibrated profile
    (no roofline model behind it) keeps its own capacity."""
    if rule == "vllm" or not hasattr(step_model, "parallel"):
        return int(step_model.kv_capacity_tokens(gpu_memory_utilization))
    return engine_memory_for(step_model, gpu_memory_utilization, rule).kv_capacity_tokens


def engine_memory_for(step_model: Any, gpu_memory_utilization: float, rule: str
                      ) -> EngineMemory:
    """`engine_memory` with the fraction rule of `kv_tokens_for`."""
    return engine_memory_at(rule, step_model, gpu_memory_utilization)


def kv_blocks_from_memory(step_model: Any, gpu_memory_utilization: float,
                          block_size_tokens: int, what: str = "the model",
                          rule: str = "vllm") -> int:
    """KV blocks that fit beside the weights: the memory model's capacity in whole blocks,
    sized by the engine's rule (`kv_tokens_for`).

    Used by both `simulate` and `serve`, so the emulator and the simulator size the KV pool
    identically. Raises a one-line error when not even one block fits.
    """
    kv_tokens = kv_tokens_for(step_model, gpu_memory_utilization, rule)
    if kv_tokens < block_size_tokens:
        raise RidgelineError(
            f"--gpu-memory-utilization: {what} leaves no room for the KV cache "
            f"({kv_tokens} tokens); use more GPUs (--tp/--pp), smaller weights, or a larger GPU")
    layout = kv_layout(step_model, block_size_tokens)
    if not layout.windowed:
        return kv_tokens // block_size_tokens
    # vLLM's hybrid pool: blocks of one group's layers (memory // (page x group size)).
    return layout.blocks_from_tokens(kv_tokens, step_model.model.num_softmax_layers)


@dataclass
class StepResult:
    """One step: its duration and what became visible at `now_s + duration_s`."""

    duration_s: float = 0.0
    emitted: list[tuple[str, int]] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    prefill_tokens: int = 0
    prefill_seqs: int = 0
    decode_seqs: int = 0
    kv_blocks_used: int = 0
    num_waiting: int = 0

    @property
    def batch_size(self) -> int:
        """Sequences that computed something in this step."""
        return self.prefill_seqs + self.decode_seqs


@dataclass(frozen=True)
class EngineStats:
    """Gauges and counters, named like vLLM's Prometheus metrics (`vllm:num_requests_running`
    = num_running, `vllm:kv_cache_usage_perc` = kv_usage_fraction, ...). Also readable as a
    mapping: `stats["num_running"]`."""

    num_running: int
    num_waiting: int
    kv_usage_fraction: float
    kv_blocks_used: int
    num_kv_blocks: int
    num_preemptions_total: int
    prompt_tokens_total: int
    generation_tokens_total: int
    num_finished_total: int
    num_rejected_total: int
    num_steps_total: int
    prefix_cache_queries_tokens_total: int
    prefix_cache_hits_tokens_total: int

    @property
    def num_preemptions(self) -> int:
        return self.num_preemptions_total

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _compiled_step(step_model: StepTimeModel) -> CompiledStep | None:
    """The compiled path behind `step_model.step_time_s`, if that method is exactly
    `RooflineStepTime.step_time_s` (not overridden, not replaced on the instance)."""
    if type(step_model).step_time_s is not RooflineStepTime.step_time_s or \
            "step_time_s" in getattr(step_model, "__dict__", {}):
        return None
    fast = getattr(step_model, "_fast", None)
    return fast if type(fast) is CompiledStep and fast.applicable else None


class Engine:
    """A continuous-batching engine with a paged KV cache, timed by a step-time model."""

    def __init__(self, config: EngineConfig, step_model: StepTimeModel, *,
                 keep_finished: bool = False) -> None:
        self.config = config
        self.step_model = step_model
        # KV groups of vLLM's hybrid allocator (sliding-window models; one group otherwise).
        layout = kv_layout(step_model, config.block_size_tokens)
        pool = BlockPool(config.num_kv_blocks, config.block_size_tokens,
                         config.enable_prefix_caching, key_blocks=layout.groups)
        self.scheduler = Scheduler(config.max_num_seqs, config.max_num_batched_tokens,
                                   config.chunked_prefill, pool,
                                   no_evict=config.capacity_policy == "guaranteed_no_evict",
                                   layout=layout)
        self.scheduler.retract_fewest_outputs = config.preemption_order == "fewest_outputs"
        self.scheduler.configure_sglang(config)
        # keep_finished: retired sequences (with their emission segments) are kept in
        # `scheduler.done` for the simulator to turn into trace records.
        self.scheduler.keep_done = keep_finished
        # The roofline model's step times, computed by the scheduler one step at a time with
        # the same arithmetic (see `Scheduler.use_compiled`); other models go through
        # `time_steps`.
        compiled = _compiled_step(step_model)
        # Overlap scheduling with CPU work takes max(GPU, CPU) in `time_steps`, which the
        # compiled scalar path does not see.
        self._cpu_floor_s = config.step_cpu_s if config.overlap_schedule else 0.0
        if compiled is not None and not self._cpu_floor_s:
            self.scheduler.use_compiled(compiled)
        # A calibrated llama.cpp profile with per-slot KV times steps by slot layout.
        slot_steps = getattr(step_model, "slot_steps", None)
        if callable(slot_steps):
            self.scheduler.slots = slot_steps(config.max_num_seqs)

    # ---- timing --------------------------------------------------------------------------

    def time_steps(self, prefill_tokens: np.ndarray, prefill_attn_pairs: np.ndarray,
                   prefill_context_tokens: np.ndarray, prefill_seqs: np.ndarray,
                   decode_seqs: np.ndarray, decode_context_tokens: np.ndarray) -> np.ndarray:
        """Durations of several steps in one step-time call (six float64 arrays, one shape).

        A step must get the same duration whether it is timed alone or inside a
        fast-forwarded run (so the step-by-step and event-driven modes agree). The roofline
        model computes each step on its own (`ridgeline.perf.fast_step`), but a model built
        on BLAS matrix products may not: one column can take a different code path (and
        differ in the last bit) from the same column inside a wider product. So every call
        evaluates at least two steps.
        """
        cols = (prefill_tokens, prefill_attn_pairs, prefill_context_tokens, prefill_seqs,
                decode_seqs, decode_context_tokens)
        shape = decode_context_tokens.shape
        if shape[0] == 1:   # timed as two identical steps
            return self.time_steps(*np.array([(c.item(0),) * 2 for c in cols]))[:1]
        t = self.step_model.step_time_s(BatchWork(*cols))   # the fields, in order
        if not (type(t) is np.ndarray and t.shape == shape and t.dtype == np.float64):
            t = np.broadcast_to(np.asarray(t, dtype=np.float64), shape)
        if self._cpu_floor_s:   # overlap scheduling: the CPU hides behind the GPU, or not
            t = np.maximum(t, self._cpu_floor_s)
        return t

    # ---- the API of docs/engine.md -------------------------------------------------------

    def add_request(self, request: EngineRequest) -> None:
        """Queue a request; it joins the next step. Too-large requests show up in
        the next step's `rejected`."""
        self.scheduler.add(request)

    def abort_request(self, request_id: str) -> bool:
        """Drop a request now (client gone): frees its slot and KV blocks. False if unknown."""
        return self.scheduler.abort(request_id)

    def has_unfinished(self) -> bool:
        """Anything running or waiting."""
        return self.scheduler.has_unfinished()

    def step(self, now_s: float) -> StepResult:
        """Schedule and time one step that starts at now_s."""
        sch = self.scheduler
        out = sch.step(now_s, self.time_steps, collect=True)
        rejected = [s.request_id for s in sch.pending_rejected]
        sch.pending_rejected.clear()
        emitted = [(rid, 1) for rid in out.decode_ids]
        emitted.extend((rid, 1) for rid in out.first_tokens)
        return StepResult(
            duration_s=out.duration_s,
            emitted=emitted,
            finished=[s.request_id for s in out.finished],
            preempted=[s.request_id for s in out.preempted],
            rejected=rejected,
            prefill_tokens=out.prefill_tokens,
            prefill_seqs=out.prefill_seqs,
            decode_seqs=out.decode_seqs,
            kv_blocks_used=sch.pool.used_blocks,
            num_waiting=len(sch.waiting),
        )

    def stats(self) -> EngineStats:
        """Current gauges and counters (what vLLM's /metrics exposes)."""
        sch = self.scheduler
        pool = sch.pool
        return EngineStats(
            num_running=len(sch.running),
            num_waiting=len(sch.waiting),
            kv_usage_fraction=pool.used_blocks / pool.num_blocks,
            kv_blocks_used=pool.used_blocks,
            num_kv_blocks=pool.num_blocks,
            num_preemptions_total=sch.num_preemptions,
            prompt_tokens_total=sch.prompt_tokens_total,
            generation_tokens_total=sch.generation_tokens_total,
            num_finished_total=sch.num_finished,
            num_rejected_total=sch.num_rejected,
            num_steps_total=sch.step_index,
            prefix_cache_queries_tokens_total=sch.prefix_queries_tokens,
            prefix_cache_hits_tokens_total=sch.prefix_hits_tokens,
        )

    # ---- the simulator's fast path (same scheduler, no per-token lists) ------------------

    def step_compact(self, now_s: float) -> StepOutcome:
        """`step` without building per-token lists (the simulator records emission segments
        on each sequence instead)."""
        return self.scheduler.step(now_s, self.time_steps, collect=False)

    def can_fast_forward(self) -> bool:
        """Only decodes would run and nobody would be admitted: `decode_run` applies."""
        return self.scheduler.can_fast_forward()

    def decode_run(self, now_s: float, stop_before_s: float, max_steps: int = 1 << 30
                   ) -> tuple[list[float], list[int], list[Sequence]]:
        """Advance all decode-only steps starting before `stop_before_s` up to the next batch
        change; returns (step end times, KV blocks used after each, finished sequences)."""
        return self.scheduler.decode_run(now_s, stop_before_s, self.time_steps, max_steps)

    def drain_retired(self) -> list[Sequence]:
        """Finished, aborted and rejected sequences since the last call (keep_finished)."""
        done = self.scheduler.done
        self.scheduler.done = []
        return done
