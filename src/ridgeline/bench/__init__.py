"""The load generator: `ridgeline bench` against any OpenAI-compatible endpoint.

A streaming client timed event by event, load patterns (closed, open, multi-turn, replay),
workers over processes or Ray, telemetry, and the trace every run writes. Modules are
imported one by one (`ridgeline.bench.single_run`, ...); nothing is imported here.
"""

# The package's public modules (imported one by one, so importing the package stays cheap).
__all__ = [
    "client",
    "dataset",
    "engine_timings",
    "export",
    "load",
    "load_loop",
    "load_points",
    "multiprocess",
    "multiturn",
    "options",
    "peer_flags",
    "progress",
    "prompts",
    "rate_sweep",
    "ray_workers",
    "replay",
    "results_peer",
    "selfdesc",
    "single_run",
    "sizes",
    "sse",
    "summary",
    "telemetry",
    "tokens",
]
