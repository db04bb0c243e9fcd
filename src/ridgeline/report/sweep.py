"""A small simulated rate sweep as a library call (the UI's simulation tab and the report).

Same pieces as `ridgeline simulate --rate a,b,c`: `build_workload`, the KV pool from
`kv_blocks_from_memory`, `sim.runner.simulate`, and `analyze` on the trace of each rate.
"""

from __future__ import annotations

from typing import Any

from ridgeline.errors import RidgelineError
from ridgeline.metrics.analysis import analyze
from ridgeline.metrics.slo import parse_slos
from ridgeline.sim.cluster import ClusterConfig
from ridgeline.sim.engine import EngineConfig, kv_blocks_from_memory
from ridgeline.sim.engine_costs import request_overhead_fields
from ridgeline.sim.runner import simulate
from ridgeline.sim.workload import build_workload
from ridgeline.trace.schema import TraceHeader

MAX_RATES = 16
MAX_REQUESTS = 20_000


def simulate_sweep(step_model: Any, rates: list[float], *, requests: int = 500,
                   prompt: str = "lognormal:mean=512,sigma=0.5,max=4096",
                   output: str = "fixed:128", seed: int = 0, slos: list[str] | None = None,
                   gpu_memory_utilization: float = 0.9, block_size: int = 16
                   ) -> list[tuple[float, Any, Any]]:
    """(rate, AnalysisResult, SimResult) for each rate, Poisson arrivals, same requests.

    The engine's costs are the step model's (`engine_costs=` of the roofline): its per-step
    terms are compiled into the step, and its per-request shift is applied here, as
    `ridgeline simulate` applies both (`Scenario.engine_config`)."""
    if not rates or len(rates) > MAX_RATES or any(not (r > 0) for r in rates):
        raise RidgelineError(f"rates: got {rates!r}; allowed: 1 to {MAX_RATES} rates > 0")
    if not 1 <= requests <= MAX_REQUESTS:
        raise RidgelineError(f"requests: got {requests}; allowed: 1 to {MAX_REQUESTS}")
    slo_list = parse_slos(slos)
    blocks = kv_blocks_from_memory(step_model, gpu_memory_utilization, block_size)
    config = EngineConfig(max_num_seqs=step_model.max_num_seqs,
                          max_num_batched_tokens=step_model.max_num_batched_tokens,
                          block_size_tokens=block_size, num_kv_blocks=blocks,
                          enable_prefix_caching=True,
                          **request_overhead_fields(getattr(step_model, "engine_costs", None)))
    desc = step_model.describe()
    out = []
    for rate in sorted(rates):
        wl, load, dataset = build_workload(requests, prompt, output, rate_req_s=rate,
                                           seed=seed)
        res = simulate(wl, config, step_model, ClusterConfig())
        header = TraceHeader(source="simulate", clock="virtual", model=desc["model"],
                             hardware=desc["hardware"], engine="ridgeline-sim",
                             precision=desc["precision"], parallelism=desc["parallelism"],
                             engine_config=dict(config.__dict__), load=load, dataset=dataset,
                             seed=seed)
        out.append((rate, analyze(res.to_trace(header), slos=slo_list, seed=seed), res))
    return out
