"""`calibrate engine` / `calibrate fit` as library functions (the commands only parse options).

>>> # calibrate_from_traces(["probe-decode-b1.jsonl", ...], preset="llama.cpp", slots=8)
"""

from __future__ import annotations

import platform
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ridgeline import __version__
from ridgeline.calibrate.engine_detect import (
    VLLM_DEFAULT_BLOCK_SIZE_TOKENS,
    VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS,
    VLLM_DEFAULT_MAX_NUM_SEQS,
    DetectedEngine,
    engine_props,
)
from ridgeline.calibrate.fit import fit_profile
from ridgeline.calibrate.presets import preset_scheduling
from ridgeline.calibrate.probe import (
    ProbeDesign,
    engine_facts,
    run_probe,
    samples_from_traces,
)
from ridgeline.calibrate.slot_state import calibration_slot_order, same_step_s_of
from ridgeline.errors import RidgelineError
from ridgeline.sim.calibrated_profile import CalibrationProfile, Provenance
from ridgeline.specs.model import load_model


def host_facts() -> dict[str, Any]:
    import os

    return {"hostname": socket.gethostname(), "platform": platform.platform(),
            "machine": platform.machine(), "processor": platform.processor(),
            "cpu_count": os.cpu_count(), "python": platform.python_version()}


def kv_bytes_per_token_of(config_path: str | None, kv_bytes: float = 2.0) -> float:
    """K and V of every layer for one token (llama.cpp's default f16 cache: 2 bytes)."""
    if not config_path:
        return 0.0

    m = load_model(config_path)
    return float(2 * m.num_layers * m.num_kv_heads * m.head_dim * kv_bytes)


def calibrate_from_traces(paths: list[str], *, preset: str = "llama.cpp",
                          slots: int | None = None, n_batch: int = 2048, n_ubatch: int = 512,
                          kv_capacity_tokens: int = 1 << 20, config_path: str | None = None,
                          design: dict[str, Any] | None = None,
                          facts: dict[str, Any] | None = None,
                          kv_unified: bool = False,
                          max_num_batched_tokens: int | None = None,
                          block_size_tokens: int = 16) -> CalibrationProfile:
    """Fit a profile from probe traces (`ridgeline calibrate fit`). With llama.cpp's per-slot
    KV (no `kv_unified`) the profile is a slot model: its decode probes must have been
    pinned to slots 0..B-1 (`calibrate engine` does that), so each T(B) is one graph."""
    samples, refs, notes = samples_from_traces(paths)
    ef = engine_facts(paths)
    batches = [s.tokens for s in samples
               if not s.point.startswith(("prefill", "context", "open"))]
    sched = preset_scheduling(preset, slots or (max(batches) if batches else None), n_batch,
                              n_ubatch, kv_unified=kv_unified,
                              max_num_batched_tokens=max_num_batched_tokens,
                              block_size_tokens=block_size_tokens)
    prov = Provenance(engine=preset if ef.engine in ("unknown", "None") else ef.engine,
                      engine_version=ef.engine_version, base_url=ef.base_url, model=ef.model,
                      model_config_path=config_path, host=host_facts(),
                      ridgeline_version=__version__, probe_design=design or {},
                      probe_traces=refs, **(facts or {}))
    return fit_profile(samples, sched, prov, kv_bytes_per_token_of(config_path),
                       kv_capacity_tokens, notes)


def calibrate_engine(endpoint: Any, design: ProbeDesign, probe_dir: str | Path, *,
                     preset: str = "llama.cpp", slots: int | None = None, n_batch: int = 2048,
                     n_ubatch: int = 512, kv_capacity_tokens: int | None = None,
                     config_path: str | None = None, seed: int = 0,
                     log: Callable[[str], None] | None = None,
                     kv_unified: bool = False,
                     detected: DetectedEngine | None = None,
                     max_num_batched_tokens: int | None = None) -> CalibrationProfile:
    """Probe a live endpoint through the bench client, then fit (`ridgeline calibrate
    engine`). llama.cpp's /props, when it answers, gives the slots and the KV capacity
    (slots x per-slot context) unless they are given. With the vllm preset, a vLLM server
    (`detected`, see engine_detect.py) gives max_num_seqs, max_num_batched_tokens, the
    block size and the KV capacity (blocks x block size) where its /metrics state them,
    else vLLM's defaults."""
    props = engine_props(endpoint.base_url) if preset == "llama.cpp" else {}
    vllm = detected if preset == "vllm" and detected is not None and \
        detected.engine == "vllm" else None
    block_size_tokens = VLLM_DEFAULT_BLOCK_SIZE_TOKENS
    if preset == "vllm":
        slots = slots or (vllm.max_num_seqs if vllm else None) or VLLM_DEFAULT_MAX_NUM_SEQS
        max_num_batched_tokens = (max_num_batched_tokens
                                  or (vllm.max_num_batched_tokens if vllm else None)
                                  or VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS)
        block_size_tokens = (vllm.block_size_tokens if vllm else None) or block_size_tokens
    slots = slots or props.get("total_slots") or design.max_batch
    if kv_capacity_tokens is None:
        kv_capacity_tokens = slots * props["slot_n_ctx"] if "slot_n_ctx" in props else \
            (vllm.kv_capacity_tokens if vllm else None) or 1 << 20
    import dataclasses

    slot_model = preset_scheduling(preset, slots, n_batch, n_ubatch,
                                   kv_unified=kv_unified).slot_graphs
    design = dataclasses.replace(design, slots=design.slots or slots,
                                 pin_slots=design.pin_slots or slot_model)
    points = run_probe(endpoint, design, probe_dir, engine=preset, seed=seed, log=log)
    facts = {"engine_props": props} if props else {}
    if props.get("build_info"):
        facts["engine_version"] = str(props["build_info"])
    if vllm is not None:
        facts["engine_detected"] = vllm.facts()
        if vllm.version:
            facts["engine_version"] = vllm.version
    prof = calibrate_from_traces([p.trace_path for p in points], preset=preset, slots=slots,
                                 n_batch=n_batch, n_ubatch=n_ubatch,
                                 kv_capacity_tokens=kv_capacity_tokens,
                                 config_path=config_path, design=design.describe(),
                                 kv_unified=kv_unified,
                                 max_num_batched_tokens=max_num_batched_tokens,
                                 block_size_tokens=block_size_tokens)
    for k, v in facts.items():
        setattr(prof.provenance, k, v)
    if prof.scheduling.slot_graphs:
        record_slot_order(prof, points, design.pin_slots, endpoint.base_url, log)
    return prof


def record_slot_order(prof: CalibrationProfile, points: list[Any], pinned: bool,
                      base_url: str | None, log: Callable[[str], None] | None = None) -> None:
    """Store the LRU slot order calibrate leaves the server in (a slot-model profile), so
    `verify` can start the next measured point from it (calibrate/slot_state.py)."""
    try:
        order, at_s, note = calibration_slot_order(points, pinned,
                                                   prof.scheduling.max_num_seqs,
                                                   same_step_s_of(prof), base_url)
    except (ValueError, RidgelineError) as exc:
        prof.scheduling.slot_order_provenance = f"not recorded: {exc}"
        return
    prof.scheduling.slot_order_after_calibration = order
    prof.scheduling.slot_order_at_unix_s = at_s
    prof.scheduling.slot_order_provenance = note
    if log is not None:
        log(f"slot order left by calibration: {' '.join(map(str, order))} ({note})")


__all__ = ["calibrate_engine", "calibrate_from_traces", "host_facts", "kv_bytes_per_token_of",
           "record_slot_order"]
