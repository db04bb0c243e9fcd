"""The serving engine (continuous batching, paged KV cache) and the simulator that drives it on
a virtual clock: clusters, sweeps, scenarios, fleet-scale runs (docs/engine.md).
"""

# The package's public modules (imported one by one, so importing the package stays cheap).
__all__ = [
    "calibrated_profile",
    "cluster",
    "core",
    "engine",
    "engine_costs",
    "event_loop",
    "fast_forward",
    "fleet",
    "kv_cache",
    "result",
    "scenario",
    "scheduler",
    "sequence",
    "slots",
    "step_model",
    "step_timing",
    "sweep",
    "workload",
]
