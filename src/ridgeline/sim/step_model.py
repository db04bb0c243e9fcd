"""One place that turns `--calibration FILE` (or the roofline specs) into a step-time model.

`estimate`, `simulate`, `serve` and `bench --target emulator` all accept `--calibration`; each
calls `load_step_model` and, for the engine, `engine_config_for`, so a calibrated profile
replaces the roofline model everywhere in the same way
(docs/architecture.md#a-calibrated-profile-is-a-step-time-model). It is in
sim/ (with the profile, `sim.calibrated_profile`) because the simulator's Scenario needs it
and the library imports downward only: `calibrate` measures and writes profiles; the
simulator, the emulator and `estimate` read them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

_PROFILE_MODULE = "ridgeline.sim.calibrated_profile"


def load_step_model(calibration: str | None, roofline: Callable[[], Any]) -> Any:
    """The profile in `calibration` if given, else `roofline()` (the perf model)."""
    if calibration:
        # Left lazy on purpose: the profile's pydantic models take ~25 ms to build, which a
        # roofline run (every default `simulate`, `serve`, `plan`) never needs; `is_calibrated`
        # relies on it.
        from ridgeline.sim.calibrated_profile import CalibrationProfile

        return CalibrationProfile.load(calibration)
    return roofline()


def is_calibrated(step_model: Any) -> bool:
    # A profile exists only once its module is loaded: a roofline run never imports it (its
    # pydantic models take ~25 ms to build).
    module = sys.modules.get(_PROFILE_MODULE)
    return module is not None and isinstance(step_model, module.CalibrationProfile)


def engine_config_for(step_model: Any, config: Any) -> Any:
    """A calibrated profile brings the measured engine's scheduling; otherwise `config`.

    The profile's KV capacity replaces the memory model's; its scheduling (slots, token
    budget, chunked prefill, prefix caching, block size) replaces the command's defaults.
    """
    if is_calibrated(step_model):
        return step_model.engine_config()
    return config


def engine_kwargs(step_model: Any) -> dict[str, Any]:
    """`ridgeline.serve.factory.build_engine` keyword arguments of a calibrated profile."""
    s = step_model.scheduling
    return {"step_model": step_model, "max_num_seqs": s.max_num_seqs,
            "max_num_batched_tokens": s.max_num_batched_tokens,
            "chunked_prefill": s.chunked_prefill,
            "enable_prefix_caching": s.enable_prefix_caching,
            "block_size_tokens": s.block_size_tokens}


__all__ = ["engine_config_for", "engine_kwargs", "is_calibrated", "load_step_model"]
