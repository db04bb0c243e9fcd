"""Build the emulator's engine from catalog names: the same engine and step-time model
`ridgeline simulate` uses (docs/architecture.md#one-step-time-function), so the two cannot disagree
by construction.

>>> built = build_engine("llama-3.1-8b", "h100-sxm")  # doctest: +SKIP
>>> built.kv_capacity_tokens > 0                       # doctest: +SKIP
True
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ridgeline.jsonsafe import json_safe
from ridgeline.perf.engine_memory import SGLANG_MAX_RUNNING_REQUESTS, sglang_max_running_requests
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.sim.engine import (
    Engine,
    EngineConfig,
    EngineRequest,
    engine_memory_for,
    kv_blocks_from_memory,
    kv_tokens_for,
)
from ridgeline.sim.engine_costs import request_overhead_fields
from ridgeline.sim.engine_presets import AUTO
from ridgeline.specs.model import model_catalog

# Context limit when the model's config does not say (Llama 3.1's is 131072).
DEFAULT_MAX_MODEL_LEN = 131072


@dataclass
class BuiltEngine:
    """An engine ready for `create_app`, with what it was built from."""

    engine: Any
    make_request: Any
    step_model: Any
    kv_capacity_tokens: int
    max_model_len: int
    description: dict[str, Any] = field(default_factory=dict)


def model_max_len(model: str) -> int:
    """max_position_embeddings of a catalog model or a config.json path, else the default."""
    cfg: dict[str, Any] = {}
    path = Path(model)
    try:
        if path.is_file():
            cfg = json.loads(path.read_text(encoding="utf-8"))
        else:
            cfg = model_catalog().get(model, {})
    except (OSError, ValueError):
        cfg = {}
    value = cfg.get("max_position_embeddings") if isinstance(cfg, dict) else None
    return int(value) if isinstance(value, int) and value > 1 else DEFAULT_MAX_MODEL_LEN


def build_engine(
    model: str,
    hardware: str,
    *,
    weights: str | None = None,
    kv: str | None = None,
    activations: str | None = None,
    tp: int = 1,
    pp: int = 1,
    ep: int = 1,
    attn_dp: int = 1,
    ep_comm: str = "",
    moe_backend: str = "auto",
    compute_efficiency: float | None = None,
    bandwidth_efficiency: float | None = None,
    kernel_overhead_us: float | None = None,
    max_num_seqs: int | str = 256,
    max_num_batched_tokens: int = 8192,
    gpu_memory_utilization: float = 0.9,
    block_size_tokens: int = 16,
    enable_prefix_caching: bool = False,
    chunked_prefill: bool = True,
    step_model: Any | None = None,
    engine_costs: Any | None = None,
    capacity_policy: str = "vllm",
    scheduler_options: dict[str, Any] | None = None,
    engine_name: str = "vllm",
) -> BuiltEngine:
    """The real engine timed by the roofline perf model (or by `step_model` if given).

    `engine_costs` (an `ridgeline.sim.engine_costs.EngineCosts`, as `simulate --engine`
    loads it): its per-step terms go into the roofline model, its per-request shift into the
    engine config, where the driver reads it (serve/driver.py), as `simulate` does.
    A calibrated profile (`step_model`) measured those costs already: pass None with it.
    `scheduler_options`: the engine preset's other `EngineConfig` fields (SGLang's
    scheduler, ridgeline.sim.engine_presets); with overlap scheduling the per-step CPU cost
    is the engine's floor, not a term of the step."""
    options = dict(scheduler_options or {})
    capacity_policy = options.pop("capacity_policy", capacity_policy)
    rule = str(options.get("kv_memory_rule", "vllm"))
    # SGLang's request pool follows from its KV pool: sized below, once the pool is known.
    auto_seqs = max_num_seqs == AUTO
    seqs = SGLANG_MAX_RUNNING_REQUESTS if auto_seqs else int(max_num_seqs)
    if options.get("overlap_schedule") and engine_costs is not None:
        options["step_cpu_s"] = engine_costs.step_overhead_s
        engine_costs = engine_costs.with_values(step_overhead_s=0.0)
    if step_model is None:
        step_model = RooflineStepTime.from_names(
            model=model, hardware=hardware, weights=weights, kv=kv, activations=activations,
            tp=tp, pp=pp, ep=ep, attn_dp=attn_dp, ep_comm=ep_comm, moe_backend=moe_backend,
            compute_efficiency=compute_efficiency,
            bandwidth_efficiency=bandwidth_efficiency, kernel_overhead_us=kernel_overhead_us,
            max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=seqs,
            engine=engine_name,
            **({"engine_costs": engine_costs} if engine_costs is not None else {}))
    num_kv_blocks = kv_blocks_from_memory(step_model, gpu_memory_utilization,
                                          block_size_tokens, f"{model} on {hardware}", rule)
    kv_tokens = kv_tokens_for(step_model, gpu_memory_utilization, rule)
    # Attention data-parallel ranks step in lockstep: one engine holds every rank's batch
    # (each rank's limits are the flags', as the engines' DP ranks schedule their own).
    ranks = int(getattr(getattr(step_model, "parallel", None), "attn_dp", 1))
    if auto_seqs:
        # SGLang's request pool follows from the whole instance's KV pool.
        seqs = sglang_max_running_requests(
            num_kv_blocks * block_size_tokens,
            getattr(getattr(step_model, "model", None), "max_position_embeddings", 0))
    else:
        seqs *= ranks
    config = EngineConfig(
        max_num_seqs=seqs, max_num_batched_tokens=max_num_batched_tokens * ranks,
        chunked_prefill=chunked_prefill, block_size_tokens=block_size_tokens,
        num_kv_blocks=num_kv_blocks,
        enable_prefix_caching=enable_prefix_caching,
        **request_overhead_fields(engine_costs), capacity_policy=capacity_policy, **options)
    engine = Engine(config, step_model)
    assumptions = step_model.assumptions() if hasattr(step_model, "assumptions") else None
    description = {
        "model": model, "hardware": hardware,
        "precision": (step_model.precision.describe() if hasattr(step_model, "precision")
                      else {"weights": weights or "auto", "kv": kv or "auto",
                            "activations": activations or "auto"}),
        "parallelism": {"tp": tp, "pp": pp, "ep": ep},
        "engine_config": {"max_num_seqs": seqs,
                          "max_num_batched_tokens": max_num_batched_tokens,
                          "chunked_prefill": chunked_prefill,
                          "block_size_tokens": block_size_tokens,
                          "num_kv_blocks": num_kv_blocks,
                          "gpu_memory_utilization": gpu_memory_utilization,
                          "enable_prefix_caching": enable_prefix_caching,
                          "capacity_policy": capacity_policy, **options},
        "kv_capacity_tokens": kv_tokens,
        "kv_memory": (engine_memory_for(step_model, gpu_memory_utilization, rule).describe()
                      if hasattr(step_model, "parallel") else None),
        "engine_costs": engine_costs.describe() if engine_costs is not None else None,
    }
    if assumptions is not None:
        description["assumptions"] = json_safe(assumptions)
    return BuiltEngine(engine=engine, make_request=EngineRequest, step_model=step_model,
                       kv_capacity_tokens=kv_tokens, max_model_len=model_max_len(model),
                       description=description)


__all__ = ["DEFAULT_MAX_MODEL_LEN", "BuiltEngine", "build_engine", "model_max_len"]
