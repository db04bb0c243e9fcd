"""An engine preset's scheduler: the `scheduler` section of `specs/data/engines/<engine>.json`.

vLLM's preset has none (the simulator's defaults are vLLM V1's). SGLang's names its own
defaults, each with the fact it comes from: chunked prefill size, running-request limit,
page size 1 (token-granularity radix cache), prefill-first batching, the new-token-ratio
admission and overlap scheduling. They become `EngineConfig` fields (ridgeline.sim.engine);
the one scheduler (ridgeline.sim.scheduler) branches on them.

TensorRT-LLM's names its capacity policy (GUARANTEED_NO_EVICT), batch limits, page size and
no chunked context; both name how the KV pool is sized (`kv_memory_rule`,
ridgeline.perf.engine_memory). SGLang's limits that depend on the GPU are "auto"
(`resolve_auto`).

A command's own values for the vLLM-named settings (`--max-num-seqs`,
`--max-num-batched-tokens`, `--block-size`) win over the preset's unless they are the
command's defaults (`resolve`).
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from typing import Any, cast

from ridgeline.errors import RidgelineError
from ridgeline.inputs import loads_json, read_text
from ridgeline.perf.engine_memory import (
    MIB,
    SGLANG_MAX_RUNNING_REQUESTS,
    sglang_gpu_defaults,
    sglang_max_running_requests,
)
from ridgeline.sim.engine_costs import ENGINES

# EngineConfig field -> (type, what it allows)
FIELDS: dict[str, tuple[type, str]] = {
    "max_num_seqs": (int, "an integer >= 1"),
    "max_num_batched_tokens": (int, "an integer >= 1"),
    "block_size_tokens": (int, "an integer >= 1"),
    "enable_prefix_caching": (bool, "true or false"),
    "prefill_first": (bool, "true or false"),
    "schedule_policy": (str, "fcfs or lpm"),
    "new_token_ratio_init": (float, "a number from 0 to 1"),
    "new_token_ratio_min": (float, "a number from 0 to 1"),
    "new_token_ratio_decay_steps": (int, "an integer >= 1"),
    "new_token_clip_tokens": (int, "an integer >= 1"),
    "overlap_schedule": (bool, "true or false"),
    "chunked_prefill": (bool, "true or false"),
    "capacity_policy": (str, "vllm, guaranteed_no_evict or max_utilization"),
    "preemption_order": (str, "newest or fewest_outputs"),
    "kv_memory_rule": (str, "vllm, sglang or trtllm"),
}
# The values a text field allows.
CHOICES: dict[str, tuple[str, ...]] = {
    "schedule_policy": ("fcfs", "lpm"),
    "capacity_policy": ("vllm", "guaranteed_no_evict", "max_utilization"),
    "preemption_order": ("newest", "fewest_outputs"),
    "kv_memory_rule": ("vllm", "sglang", "trtllm"),
}
# Limits an engine derives at start-up (SGLang: the chunked-prefill size from the GPU's
# memory, the request pool from the KV pool): a preset may give them as "auto".
AUTO_FIELDS = ("max_num_seqs", "max_num_batched_tokens")
AUTO = "auto"
# The Scenario's (and the commands') names of the settings vLLM also has.
SCENARIO_NAMES = {"max_num_seqs": "max_num_seqs",
                  "max_num_batched_tokens": "max_num_batched_tokens",
                  "block_size_tokens": "block_size", "enable_prefix_caching": "prefix_caching",
                  "chunked_prefill": "chunked_prefill"}


def _preset_text(engine: str) -> tuple[str, str]:
    p = Path(engine)
    if p.suffix == ".json":
        return read_text(p, "--engine", max_bytes=1 << 20), p.stem
    if engine not in ENGINES:
        raise RidgelineError(f"--engine: got {engine!r}; allowed: {', '.join(ENGINES)} "
                             "or a path to an engine costs .json")
    return resources.files("ridgeline.specs").joinpath(
        "data", "engines", f"{engine}.json").read_text(), engine


def load_scheduler(engine: str = "vllm") -> dict[str, Any]:
    """`EngineConfig` fields of `engine`'s preset ({} where it has no `scheduler`)."""
    text, name = _preset_text(engine)
    d = loads_json(text, f"--engine: {name}")
    sched = d.get("scheduler") if isinstance(d, dict) else None
    if sched is None:
        return {}
    if not isinstance(sched, dict):
        raise RidgelineError(f"--engine: {name}: scheduler: got {type(sched).__name__}; "
                             "allowed: an object of " + ", ".join(FIELDS))
    out: dict[str, Any] = {}
    for key, entry in sched.items():
        if key not in FIELDS:
            raise RidgelineError(f"--engine: {name}: scheduler.{key[:100]}: unknown; allowed: "
                                 + ", ".join(FIELDS))
        kind, allowed = FIELDS[key]
        value = entry.get("value") if isinstance(entry, dict) else None
        if value == AUTO and key in AUTO_FIELDS:
            out[key] = AUTO
            continue
        ok = (isinstance(value, bool) if kind is bool
              else isinstance(value, str) if kind is str
              else isinstance(value, int) and not isinstance(value, bool) if kind is int
              else isinstance(value, (int, float)) and not isinstance(value, bool)
              and math.isfinite(value))
        if ok and key in CHOICES and value not in CHOICES[key]:
            ok = False
        if not ok:
            raise RidgelineError(f"--engine: {name}: scheduler.{key}: got {value!r:.100}; "
                                 f"allowed: {{\"value\": {allowed}}}")
        out[key] = float(cast(float, value)) if kind is float else value
    return out


def resolve(scheduler: dict[str, Any], own: dict[str, Any], defaults: dict[str, Any]
            ) -> dict[str, Any]:
    """The preset's fields, except the vLLM-named settings a command set to a value other
    than its default (`own` and `defaults` by the Scenario's names)."""
    out = dict(scheduler)
    for field, name in SCENARIO_NAMES.items():
        if field in out and name in own and own[name] != defaults.get(name):
            out[field] = own[name]
    return out


def resolve_auto(fields: dict[str, Any], gpu_memory_bytes: float, tp: int,
                 kv_tokens: int | None = None, context_len: int = 0) -> dict[str, Any]:
    """The preset's "auto" limits as SGLang derives them: the chunked-prefill size from the
    GPU's memory and TP; the running-request limit from the KV pool (`kv_tokens`), or its
    cap (4096) while the pool is not sized yet."""
    out = dict(fields)
    if out.get("max_num_batched_tokens") == AUTO:
        out["max_num_batched_tokens"] = sglang_gpu_defaults(gpu_memory_bytes / MIB, tp)[0]
    if out.get("max_num_seqs") == AUTO:
        out["max_num_seqs"] = (SGLANG_MAX_RUNNING_REQUESTS if kv_tokens is None
                               else sglang_max_running_requests(kv_tokens, context_len))
    return out


def describe(engine: str, fields: dict[str, Any]) -> list[str]:
    """The assumption lines of a preset's scheduler (none for vLLM's loop)."""
    if not fields:
        return []
    f = fields
    parts = [(f"chunked prefill {f.get('max_num_batched_tokens', '?')} tokens"
              if f.get("chunked_prefill", True)
              else f"no chunked prefill; at most {f.get('max_num_batched_tokens', '?')} "
              "tokens a step"),
             f"at most {f.get('max_num_seqs', '?')} running requests",
             f"page size {f.get('block_size_tokens', '?')} token(s)"
             + ((" (radix cache on)" if f.get("block_size_tokens") == 1
                 else " (prefix block reuse on)") if f.get("enable_prefix_caching")
                else " (no prefix cache)"),
             "prefill-first batches (a step is prefill or decode)" if f.get("prefill_first")
             else "mixed prefill and decode steps",
             f"schedule policy {f.get('schedule_policy', 'fcfs')}"]
    if f.get("new_token_ratio_init"):
        parts.append(f"new-token ratio {f['new_token_ratio_init']:g} decaying to "
                     f"{f.get('new_token_ratio_min', 0.0):g} over "
                     f"{f.get('new_token_ratio_decay_steps', 600)} decode steps reserves KV "
                     "for running requests' outputs")
    if f.get("overlap_schedule"):
        parts.append("overlap scheduling (step = max(GPU, CPU))")
    policy = f.get("capacity_policy", "vllm")
    if policy == "guaranteed_no_evict":
        parts.append("admission GUARANTEED_NO_EVICT (a request starts only when the KV of its "
                     "whole prompt + output fits beside the running ones' reservations; never "
                     "preempted)")
    elif policy == "max_utilization":
        parts.append("admission MAX_UTILIZATION (admits on the KV of the moment; pauses the "
                     "newest request when KV runs out)")
    elif f.get("preemption_order") == "fewest_outputs":
        parts.append("retraction when decode runs out of KV: fewest output tokens first "
                     "(longest prompt among equals), until 20 tokens per remaining request "
                     "are free; new-token ratio reset to (decoded + 20 per request) / max new "
                     "tokens" + ("; a retracted request's last prefill stays in the radix "
                                 "cache (evictable) for its re-admission"
                                 if f.get("enable_prefix_caching") else ""))
    return [f"engine {engine}: scheduler " + "; ".join(parts)]


__all__ = ["AUTO", "AUTO_FIELDS", "FIELDS", "describe", "load_scheduler", "resolve",
           "resolve_auto"]
