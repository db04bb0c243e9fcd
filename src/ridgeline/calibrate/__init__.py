"""Calibration: host microbenchmarks, a real engine as tooling, profiles fitted to measurement."""

# The package's public modules (imported one by one, so importing the package stays cheap).
__all__ = [
    "engine",
    "engine_fit",
    "engine_runs",
    "fit",
    "gguf_model",
    "host",
    "inference_perf",
    "inference_perf_replay",
    "llama_server",
    "microbench",
    "presets",
    "probe",
    "real_loop",
    "slot_state",
    "verify",
]
