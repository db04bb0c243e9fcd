"""Running a `Scenario`: one simulation, the capacity probe and the rate sweep.

- `run_scenario(sc, rate_req_s)`: one simulation and its `analyze` result;
- `probe_capacity(sc)`: saturation throughput (a closed loop that keeps every batch full);
- `rate_sweep(sc, rates)`: one run per rate, the knee and the highest SLO-meeting rate;
- `trace_header(sc, ...)`: the header of the trace a run writes.

>>> sc = Scenario(requests=20, prompt="fixed:100", output="fixed:10", rate_req_s=2.0)
>>> run = run_scenario(sc)
>>> run.summary()["finished"]
20
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.metrics.analysis import analyze
from ridgeline.metrics.knee import KNEE_FACTOR
from ridgeline.metrics.knee import ttft_knee_index as knee_index
from ridgeline.metrics.slo import parse_slos
from ridgeline.sim.event_loop import simulate
from ridgeline.sim.pools import pool_stats
from ridgeline.sim.scenario import (
    CAPACITY_PROBE_MAX_USERS,
    CAPACITY_PROBE_MIN_REQUESTS,
    CAPACITY_PROBE_REQUESTS_PER_USER,
    CAPACITY_PROBE_USERS_PER_SLOT,
    CAPACITY_RULE,
    Built,
    Scenario,
)
from ridgeline.sim.sweep import SweepPoint, best_rate_index, sweep_rates
from ridgeline.sim.workload import build_workload, check_context
from ridgeline.trace.schema import TraceHeader
from ridgeline.workload.lengths import parse_lengths


@dataclass
class ScenarioRun:
    """One simulation of a scenario: the raw result, its analysis and its trace header."""

    scenario: Scenario
    rate_req_s: float | None
    result: Any          # ridgeline.sim.event_loop.SimResult
    analysis: Any        # ridgeline.metrics.analysis.Analysis
    header: Any          # ridgeline.trace.schema.TraceHeader
    load: dict[str, Any]
    wall_s: float
    built: Built

    def summary(self) -> dict[str, Any]:
        """The simulator's own counters (what `simulate --json` prints as "simulation")."""
        res = self.result
        tl = res.timeline
        n = len(res)
        return {
            "requests": n,
            "finished": int(sum(s == "ok" for s in res.status)),
            "rejected": int(sum(s == "rejected" for s in res.status)),
            "preemptions": int(res.preemptions.sum()),
            "engine_steps": int(tl["end_s"].size),
            "mean_batch_size": float(tl["batch_size"].mean()) if tl["end_s"].size else 0.0,
            "max_kv_blocks_used": int(tl["kv_blocks_used"].max()) if tl["end_s"].size else 0,
            "simulated_s": float(np.nanmax(res.end_s)) if n else 0.0,
            "wall_s": self.wall_s,
            "simulated_requests_per_wall_s": n / self.wall_s if self.wall_s > 0 else math.inf,
            "mode": res.mode,
            "engine_core": res.core,
            "instances": res.roles,
            "engine_stats": res.engine_stats,
        }

    def pools_summary(self) -> dict[str, Any] | None:
        """Disaggregated runs: each pool's workers, layout, GPUs, utilisation and mean
        batch, and the KV transfers' statistics (`ridgeline.sim.pools.pool_stats`)."""
        sc = self.scenario
        pools = sc.pools()
        if pools is None:
            return None
        res = self.result
        return pool_stats(pools, res.roles, res.timeline, res.kv_transfer_s,
                          res.kv_transfer_wait_s, sc.kv_link_spec().describe(),
                          float(self.built.cluster.kv_bytes_per_token))

    def sweep_point(self) -> SweepPoint:
        """This run's headline numbers as one row of a sweep."""
        a = self.analysis
        res = self.result

        def pct(key: str, p: str) -> float:
            d = a.latency.get(key)
            if d is None or d.unavailable or p not in d.percentiles:
                return math.nan
            return float(d.percentiles[p].value)

        g = a.goodput
        return SweepPoint(
            rate_req_s=self.rate_req_s if self.rate_req_s is not None else math.nan,
            throughput_req_s=a.throughput.requests_s,
            output_tok_s=a.throughput.output_tok_s,
            ttft_p50_ms=pct("ttft_ms", "p50"), ttft_p99_ms=pct("ttft_ms", "p99"),
            tpot_p50_ms=pct("tpot_ms", "p50"), tpot_p99_ms=pct("tpot_ms", "p99"),
            goodput_req_s=g.requests_s if g else math.nan,
            attainment=g.attainment if g else math.nan,
            preemptions=int(res.preemptions.sum()),
            rejected=int(sum(s == "rejected" for s in res.status)))


@dataclass
class SweepResult:
    """Latency against load: the points, the knee and the highest SLO-meeting rate."""

    points: list[SweepPoint]
    slos: tuple[str, ...]
    attainment_target: float
    knee: int | None
    best: int | None
    assumptions: list[str] = field(default_factory=list)
    runs: list[ScenarioRun] = field(default_factory=list)
    capacity_req_s: float | None = None    # `probe_capacity`, when the rates came from it

    @property
    def rates(self) -> list[float]:
        return [p.rate_req_s for p in self.points]

    @property
    def knee_rate_req_s(self) -> float | None:
        return self.rates[self.knee] if self.knee is not None else None

    @property
    def max_rate_meeting_slos_req_s(self) -> float | None:
        return self.rates[self.best] if self.best is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "sweep": [p.to_dict() for p in self.points],
            "knee_rate_req_s": self.knee_rate_req_s,
            "knee_rule": f"highest rate with P99 TTFT <= {KNEE_FACTOR:g} x its value at the "
                         "lowest rate",
            "slos": list(self.slos),
            "max_rate_meeting_slos_req_s": self.max_rate_meeting_slos_req_s,
            "slo_attainment_target": self.attainment_target,
            **({"capacity_req_s": self.capacity_req_s,
                "capacity_rule": CAPACITY_RULE} if self.capacity_req_s is not None else {}),
            "assumptions": self.assumptions,
        }


def summarize_sweep(points: Sequence[SweepPoint], slos: Sequence[str] = (),
                    attainment_target: float = 0.99, assumptions: list[str] | None = None,
                    runs: list[ScenarioRun] | None = None) -> SweepResult:
    """Knee and best rate of sweep points (any source: simulate, bench)."""
    rates = [p.rate_req_s for p in points]
    knee = knee_index(rates, [p.ttft_p99_ms for p in points])
    best = best_rate_index(rates, [p.attainment for p in points], attainment_target) \
        if slos else None
    return SweepResult(list(points), tuple(slos), attainment_target, knee, best,
                       assumptions or [], runs or [])


def trace_header(sc: Scenario, built: Built, load: dict[str, Any],
                 dataset: dict[str, Any]) -> Any:
    """The trace header of a simulated run of `sc`."""
    desc = built.step_model.describe()
    cfg = built.config
    engine_config = {**cfg.__dict__, "kv_capacity_tokens": cfg.kv_capacity_tokens,
                     **built.cluster.describe(), "mode": sc.mode}
    memory = sc.kv_memory(built.step_model)
    if memory is not None:
        engine_config["kv_memory"] = memory.describe()
    if sc.whatif is not None and not sc.whatif.is_identity:
        engine_config["whatif"] = sc.whatif.describe()
    pools = sc.pools()
    if pools is not None:
        engine_config["pools"] = {p.role: p.describe() for p in pools}
        engine_config["kv_link_detail"] = sc.kv_link_spec().describe()
    return TraceHeader(
        source="simulate", clock="virtual (simulated seconds; t=0 is the first arrival)",
        model=desc.get("model", sc.model), hardware=desc.get("hardware", sc.hardware),
        engine="ridgeline-sim", precision=desc.get("precision", {}),
        parallelism=desc.get("parallelism", {}), engine_config=engine_config,
        load=load, dataset=dataset, seed=sc.seed)


def run_scenario(sc: Scenario, rate_req_s: float | None = None, *, built: Built | None = None,
                 progress: Callable[[int], None] | None = None,
                 keep_samples: bool = True, bootstrap: bool = True,
                 latency_keys: tuple[str, ...] | None = None) -> ScenarioRun:
    """Simulate `sc` (at `rate_req_s`, else `sc.rate_req_s`) and analyze the result.

    `keep_samples=False`: the analysis leaves the pooled ITL samples out of its `samples`
    (the same numbers: `analyze`'s lean path, one event-sized array instead of three), for
    a caller that reads only the figures (the report's plots need the samples).
    `bootstrap=False`: the analysis computes no confidence intervals (the same values);
    `latency_keys`: only these latency distributions (`analyze`)."""
    built = built or Built.of(sc)
    rate = rate_req_s if rate_req_s is not None else sc.rate_req_s
    if sc.concurrency is not None:
        rate = None
    wl, load, dataset = build_workload(
        sc.requests, sc.prompt, sc.output, rate_req_s=rate, arrival=sc.arrival,
        concurrency=sc.concurrency, think_time=sc.think_time, prefix_groups=sc.prefix_groups,
        prefix_tokens=sc.prefix_tokens, seed=sc.seed,
        prompt_from_replay=sc.prompt_from_replay, output_from_replay=sc.output_from_replay)
    check_context(wl, built.step_model)
    t0 = time.perf_counter()
    res = simulate(wl, built.config, built.step_model, built.cluster, mode=sc.mode,
                   progress=progress)
    wall_s = time.perf_counter() - t0
    header = trace_header(sc, built, load, dataset)
    analysis = analyze(res.to_trace(header), slos=parse_slos(list(sc.slos)), seed=sc.seed,
                       keep_samples=keep_samples, bootstrap=bootstrap,
                       latency_keys=latency_keys)
    return ScenarioRun(sc, rate, res, analysis, header, load, wall_s, built)


def capacity_probe_users(sc: Scenario, built: Built) -> int:
    """Users of the capacity probe's closed loop: 1.25 x the requests every instance can hold
    at once (max_num_seqs, or fewer when the KV cache holds fewer mean-length requests)."""
    context = (parse_lengths(sc.prompt, "--prompt").mean_tokens
               + parse_lengths(sc.output, "--output").mean_tokens + sc.prefix_tokens)
    kv_tokens = float(built.config.kv_capacity_tokens)
    per_instance = max(1.0, min(float(sc.setting("max_num_seqs")),
                                math.ceil(kv_tokens / max(context, 1.0))))
    pools = sc.pools()
    instances = pools[0].workers + pools[1].workers if pools else sc.replicas
    users = math.ceil(CAPACITY_PROBE_USERS_PER_SLOT * per_instance * instances) + 8
    return int(min(users, CAPACITY_PROBE_MAX_USERS))


def probe_capacity(sc: Scenario, built: Built | None = None) -> float:
    """Saturation throughput (req/s): the rate at which the engine(s) complete requests when
    work never runs out, the mu of rho = lambda / mu.

    Measured as `bench --rate sweep` measures a real server: a closed loop of
    `capacity_probe_users` users (more than every batch slot, so a queue always waits) sends
    max(2,000, 6 x users) of the scenario's requests, and the throughput is `analyze`'s
    completed requests per second in its steady window (warm-up of one median E2E and the
    drain after the last send cut off). A burst at t=0 measured over its makespan (the old
    probe) also counts the fill and the drain, when batches are not full: 25-30% low with 200
    requests, ~20% low with 2,000 long-tailed ones.
    """
    built = built or Built.of(sc)
    users = capacity_probe_users(sc, built)
    n = max(CAPACITY_PROBE_MIN_REQUESTS, CAPACITY_PROBE_REQUESTS_PER_USER * users)
    probe = sc.replace(requests=n, concurrency=users, think_time="0", arrival="poisson",
                       rate_req_s=None, slos=())
    # only the throughput is read: no samples kept, no intervals drawn
    run = run_scenario(probe, built=built, keep_samples=False, bootstrap=False,
                       latency_keys=("e2e_ms",))
    cap = float(run.analysis.throughput.requests_s)
    if not (math.isfinite(cap) and cap > 0):
        raise RidgelineError(f"{sc.model} on {sc.hardware}: the capacity probe completed no "
                             "requests")
    return cap


def sweep_rates_for(sc: Scenario, built: Built | None = None) -> list[float]:
    """The rates of `--rate sweep`: fractions of the probed capacity."""
    return sweep_rates(probe_capacity(sc, built))


def rate_sweep(sc: Scenario, rates: Sequence[float] | None = None,
               attainment_target: float = 0.99, *, built: Built | None = None,
               on_run: Callable[[ScenarioRun], None] | None = None,
               progress: Callable[[int], None] | None = None,
               keep_runs: bool = True) -> SweepResult:
    """One run per rate (None: rates around the probed capacity); the knee and best rate.

    `progress(done)` counts completed requests over the whole sweep; `on_run(run)` sees
    each run as it finishes (to write its trace, say).
    """
    built = built or Built.of(sc)
    capacity: float | None = None
    if rates is None:
        capacity = probe_capacity(sc, built)
        rate_list = sweep_rates(capacity)
    else:
        rate_list = list(rates)
    runs: list[ScenarioRun] = []
    points: list[SweepPoint] = []
    for k, rate in enumerate(rate_list):
        base = k * sc.requests
        cb = None if progress is None else (lambda d, base=base: progress(base + d))
        run = run_scenario(sc, rate, built=built, progress=cb)
        if progress is not None:
            progress(base + sc.requests)
        if on_run is not None:
            on_run(run)
        points.append(run.sweep_point())
        if keep_runs:
            runs.append(run)
    out = summarize_sweep(points, sc.slos, attainment_target, built.step_model.assumptions(),
                          runs)
    out.capacity_req_s = capacity
    return out


__all__ = ["Built", "Scenario", "ScenarioRun", "SweepResult", "capacity_probe_users",
           "probe_capacity", "rate_sweep",
           "run_scenario", "summarize_sweep", "sweep_rates_for", "trace_header"]
