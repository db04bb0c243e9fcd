"""Every package says what it is (a docstring) and names its public names (`__all__`), and
each of those names resolves. The lists are pinned here: a change to a package's public face
is a deliberate edit of this file."""

from __future__ import annotations

import importlib
import importlib.util

import pytest

PINNED: dict[str, list[str]] = {
    "ridgeline": ["__version__"],
    "ridgeline.bench": [
        "client", "dataset", "engine_timings", "export", "load", "load_loop",
        "load_points", "multiprocess", "multiturn", "options", "peer_flags", "progress",
        "prompts", "rate_sweep", "ray_workers", "replay", "results_peer", "selfdesc",
        "single_run", "sizes", "sse", "summary", "telemetry", "tokens",
    ],
    "ridgeline.calibrate": [
        "engine", "engine_fit", "engine_runs", "fit", "gguf_model", "host", "inference_perf",
        "inference_perf_replay", "llama_server", "microbench", "presets", "probe", "real_loop",
        "slot_state", "verify",
    ],
    "ridgeline.commands": [
        "advise", "analyze", "bench", "calibrate", "demo", "estimate", "export", "options", "plan",
        "report", "serve", "simulate", "simulate_streamed", "theory", "ui", "verify",
        "whatif_options",
    ],
    "ridgeline.metrics": [
        "analysis", "compare", "distribution", "gate", "order_stats", "per_request", "render",
        "select", "sketch", "slo", "streaming", "telemetry",
    ],
    "ridgeline.perf": [
        "comm", "estimate", "fast_step", "grid", "kernels", "linear_attention", "memory",
        "moe", "operator", "ops", "roofline", "roofline_step", "step_time", "vllm_kv_log",
        "whatif", "window",
    ],
    "ridgeline.plan": ["PlanRequest", "PlanResult", "plan"],
    "ridgeline.report": [
        "breakdown", "build", "cdf", "data", "estimate_view", "html", "load", "roofline", "style",
        "timeline",
    ],
    "ridgeline.serve": [
        "app", "driver", "embeddings", "factory", "failures", "fixed_timing", "header_timeout",
        "launcher", "lora", "modes", "prometheus", "prompt_blocks", "protocol", "responses",
        "structured", "tokenizer",
    ],
    "ridgeline.sim": [
        "calibrated_profile", "cluster", "core", "engine", "engine_costs", "event_loop",
        "fast_forward", "fleet", "kv_cache", "result", "scenario", "scheduler", "sequence",
        "slots", "step_model", "step_timing", "sweep", "workload",
    ],
    "ridgeline.specs": [
        "HardwareSpec", "ModelSpec", "Parallelism", "Precision", "from_hf_config",
        "hardware_catalog", "load_hardware", "load_model", "model_catalog", "resolve_precision",
    ],
    "ridgeline.theory": ["queueing", "stats"],
    "ridgeline.trace": ["formats", "importers", "reader", "schema", "table", "validator", "writer"],
    "ridgeline.trace.importers": [
        "FORMATS", "MAX_TRACE_TIME_S", "MAX_TRACE_TOKENS", "check_bounds", "detect_format",
        "load_trace",
    ],
    "ridgeline.ui": ["app"],
    "ridgeline.workload": ["arrivals", "lengths", "spec_syntax", "streams", "think",
                           "timed_trace_reader"],
}
# Packages whose __all__ lists their public modules: every name must be a module of it.
MODULE_LISTS = ["bench", "calibrate", "commands", "metrics", "perf", "report", "serve", "sim",
                "theory", "trace", "ui", "workload"]


def _all_packages() -> list[str]:
    import pkgutil

    import ridgeline

    names = ["ridgeline"]
    for info in pkgutil.walk_packages(ridgeline.__path__, "ridgeline."):
        if info.ispkg:
            names.append(info.name)
    return names


@pytest.mark.parametrize("name", _all_packages())
def test_every_package_has_a_docstring_and_all(name: str) -> None:
    pkg = importlib.import_module(name)
    assert pkg.__doc__ and len(pkg.__doc__.strip()) > 20, f"{name}: no docstring"
    assert isinstance(getattr(pkg, "__all__", None), list), f"{name}: no __all__ list"
    assert pkg.__all__ == sorted(pkg.__all__), f"{name}: __all__ unsorted"


@pytest.mark.parametrize("name", sorted(PINNED))
def test_pinned_public_names(name: str) -> None:
    assert importlib.import_module(name).__all__ == PINNED[name]


@pytest.mark.parametrize("pkg", MODULE_LISTS)
def test_listed_modules_exist(pkg: str) -> None:
    mod = importlib.import_module(f"ridgeline.{pkg}")
    missing = [n for n in mod.__all__
               if importlib.util.find_spec(f"ridgeline.{pkg}.{n}") is None]
    assert not missing, f"ridgeline.{pkg}.__all__ names missing modules: {missing}"


@pytest.mark.parametrize("name", ["ridgeline", "ridgeline.specs", "ridgeline.plan",
                                  "ridgeline.trace.importers"])
def test_re_exported_names_resolve(name: str) -> None:
    pkg = importlib.import_module(name)
    missing = [n for n in pkg.__all__ if not hasattr(pkg, n)]
    assert not missing, f"{name}.__all__ names nothing: {missing}"


def test_every_package_is_pinned() -> None:
    assert sorted(PINNED) == sorted(_all_packages())
