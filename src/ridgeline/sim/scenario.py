"""One simulated scenario, typed: what `simulate`, `plan`, `advise`, the UI and Ray workers run.

A `Scenario` names everything a run needs (model, hardware, precision, parallelism, engine
settings, workload, arrivals, cluster, SLOs, seed and what-ifs) as plain picklable values.
The library functions build the step-time model, the engine and the cluster from it:

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

import dataclasses
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
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.whatif import WhatIf, apply_whatif, kernel_overhead_for
from ridgeline.sim.cluster import ClusterConfig
from ridgeline.sim.engine import (
    EngineConfig,
    engine_memory_for,
    kv_blocks_from_memory,
    kv_tokens_for,
)
from ridgeline.sim.engine_costs import (
    capacity_policy_for,
    load_engine_costs,
    request_overhead_fields,
)
from ridgeline.sim.engine_presets import AUTO, SCENARIO_NAMES, load_scheduler, resolve, resolve_auto
from ridgeline.sim.event_loop import simulate
from ridgeline.sim.kv_link import resolve_kv_link
from ridgeline.sim.pools import Pool, PoolDefaults, pool_stats, resolve_pools
from ridgeline.sim.step_model import engine_config_for, load_step_model
from ridgeline.sim.sweep import SweepPoint, best_rate_index, sweep_rates
from ridgeline.sim.workload import build_workload, check_context
from ridgeline.sizes import check_fits
from ridgeline.specs import ModelSpec, load_hardware, load_model
from ridgeline.trace.schema import TraceHeader
from ridgeline.workload.lengths import parse_lengths
from ridgeline.workload.think import parse_think_time

DEFAULT_PROMPT = "lognormal:mean=250,sigma=1.0,max=4096"
DEFAULT_OUTPUT = "lognormal:mean=200,sigma=0.8,max=2048"
# The capacity probe (see `probe_capacity`): users per batch slot (the excess queues, so no
# slot ever waits for work), requests per user, and bounds that keep the probe's cost sane.
CAPACITY_PROBE_USERS_PER_SLOT = 1.25
CAPACITY_PROBE_REQUESTS_PER_USER = 6
CAPACITY_PROBE_MIN_REQUESTS = 2000
CAPACITY_PROBE_MAX_USERS = 16384
CAPACITY_RULE = ("saturation throughput: completed req/s in the steady window of a closed loop "
                 "of 1.25 x the batch slots (probe_capacity)")
# Engine instances (replicas, or P + D): a million is beyond any fleet; each holds ~4 KB
# (measured: 20,000 replicas of a 100-request run, 81 MB over one), 8 KB with margin.
MAX_INSTANCES = 1_000_000
BYTES_PER_INSTANCE = 8192


@dataclass(frozen=True)
class Scenario:
    """A complete, picklable description of one simulated serving setup."""

    # what runs, where
    model: str = "llama-3.1-8b"
    # a model spec parsed elsewhere (the UI's uploaded config.json) in place of loading
    # `model`, which then only names it
    model_spec: ModelSpec | None = None
    hardware: str = "h100-sxm"
    weights: str | None = None  # None: the checkpoint's quantization_config, else bf16
    kv: str | None = None
    activations: str | None = None
    tp: int = 1
    pp: int = 1
    ep: int = 1
    # attention data-parallel ranks in one engine instance (MoE): max_num_seqs and
    # max_num_batched_tokens are per rank, as each engine's DP ranks schedule their own
    attn_dp: int = 1
    # the MoE layers' expert-parallel dispatch/combine (perf/comm.py); "": the engine's own
    all2all_backend: str = ""
    # the MoE runner backend whose measured fit times the expert layers; "auto": the engine's
    moe_backend: str = "auto"
    compute_efficiency: float | None = None
    bandwidth_efficiency: float | None = None
    kernel_overhead_us: float | None = None
    # a calibrated profile (`ridgeline calibrate`) replaces the roofline model and brings the
    # measured engine's scheduling (docs/calibration.md)
    calibration: str | None = None
    # engine (vLLM names)
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    prefix_caching: bool = True
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    num_kv_blocks: int | None = None
    # the engine whose scheduling and CPU costs apply (ridgeline.sim.engine_costs): vllm,
    # trtllm, sglang (its scheduler too: engine_presets) or a path to an engine costs file;
    # engine_costs=False prices the GPU work only
    engine: str = "vllm"
    engine_costs: bool = True
    # workload and arrivals
    requests: int = 1000
    rate_req_s: float | None = None
    arrival: str = "poisson"
    concurrency: int | None = None
    think_time: str = "0"
    prompt: str = DEFAULT_PROMPT
    output: str = DEFAULT_OUTPUT
    prefix_groups: int = 0
    prefix_tokens: int = 0
    # a replay: arrival's own prompt / output lengths in place of draws from prompt / output
    prompt_from_replay: bool = False
    output_from_replay: bool = False
    # cluster
    replicas: int = 1
    router: str = "round-robin"
    pd: tuple[int, int] | None = None
    kv_transfer_latency_us: float = 0.0
    # disaggregated pools with their own layout and batch limits (`--prefill-pool`,
    # `--decode-pool` spec strings; ridgeline.sim.pools) and the KV link between them
    # (`--kv-link`: auto, nvlink, network or GB/s; ridgeline.sim.kv_link)
    prefill_pool: str | None = None
    decode_pool: str | None = None
    kv_link: str | None = None
    # SLOs (texts as `--slo` takes them) and the run
    slos: tuple[str, ...] = ()
    seed: int = 0
    mode: str = "fast"
    # what-ifs (see ridgeline.perf.whatif)
    whatif: WhatIf | None = None

    def replace(self, **changes: Any) -> Scenario:
        return dataclasses.replace(self, **changes)

    @property
    def gpus(self) -> int:
        """GPUs the scenario occupies (all instances x their GPUs each)."""
        pools = self.pools()
        if pools is not None:
            return pools[0].gpus + pools[1].gpus
        return self.replicas * self.tp * self.pp * self.attn_dp

    def pools(self) -> tuple[Pool, Pool] | None:
        """The prefill and decode pools (None: not disaggregated)."""
        if self.pd is None and self.prefill_pool is None and self.decode_pool is None:
            return None
        main = PoolDefaults(tp=self.tp, pp=self.pp, ep=self.ep, attn_dp=self.attn_dp,
                            max_num_seqs=self.max_num_seqs,
                            max_num_batched_tokens=self.max_num_batched_tokens)
        return resolve_pools(main, self.pd, self.prefill_pool, self.decode_pool)

    def own_pools(self) -> bool:
        """Whether a pool's layout or batch limits differ from the main flags' (each pool
        then gets its own step-time model and engine configuration)."""
        pools = self.pools()
        return pools is not None and any(
            (p.parallel.tp, p.parallel.pp, p.parallel.ep, p.parallel.attn_dp, p.max_num_seqs,
             p.max_num_batched_tokens) != (self.tp, self.pp, self.ep, self.attn_dp,
                                           self.max_num_seqs, self.max_num_batched_tokens)
            for p in pools)

    def pool_scenario(self, pool: Pool) -> Scenario:
        """One worker of `pool` as a scenario of its own (its layout and batch limits)."""
        par = pool.parallel
        return self.replace(tp=par.tp, pp=par.pp, ep=par.ep, attn_dp=par.attn_dp,
                            max_num_seqs=pool.max_num_seqs,
                            max_num_batched_tokens=pool.max_num_batched_tokens, pd=None,
                            prefill_pool=None, decode_pool=None, replicas=1)

    def step_model(self, costs: Any = None) -> Any:
        """The step-time model (roofline, with the what-ifs applied; or the calibrated profile).
        `costs` (an EngineCosts) replaces the scenario engine's per-step costs.
        RidgelineError when the model does not fit."""
        if self.calibration:
            if self.whatif is not None and (self.whatif.changes_step or
                                            self.whatif.enforce_eager):
                raise RidgelineError("--calibration: the what-if flags change the roofline "
                                     "model; a calibrated profile is a measurement (drop one)")
            return load_step_model(self.calibration, lambda: None)

        kernel_overhead_us = kernel_overhead_for(self.hardware, self.kernel_overhead_us,
                                                 self.whatif)
        engine_costs = _engine_costs_kwarg(self._gpu_costs(costs if costs is not None
                                                           else self.costs()))
        limits = {"max_num_batched_tokens": self.setting("max_num_batched_tokens"),
                  "max_num_seqs": self.setting("max_num_seqs")}
        base = RooflineStepTime.from_names(
            model=self.model_spec if self.model_spec is not None else self.model,
            hardware=self.hardware, weights=self.weights, kv=self.kv,
            activations=self.activations, tp=self.tp, pp=self.pp, ep=self.ep,
            attn_dp=self.attn_dp, ep_comm=self.all2all_backend, moe_backend=self.moe_backend,
            compute_efficiency=self.compute_efficiency,
            bandwidth_efficiency=self.bandwidth_efficiency,
            kernel_overhead_us=kernel_overhead_us, engine=self.engine_name,
            **limits, **engine_costs)
        return apply_whatif(base, self.whatif)

    def spec(self) -> ModelSpec:
        """The model's spec: `model_spec` when given, else `model` loaded by name or path."""
        return self.model_spec if self.model_spec is not None else load_model(self.model)

    def engine_config(self, step_model: Any) -> Any:
        sched = self.scheduler_fields()
        block_size = sched.get("block_size_tokens", self.block_size)
        rule = sched.get("kv_memory_rule", "vllm")
        blocks = self.num_kv_blocks
        if blocks is None:
            blocks = kv_blocks_from_memory(step_model, self.gpu_memory_utilization,
                                           block_size, f"{self.model} on {self.hardware}",
                                           rule)
        sched = self.scheduler_fields(kv_tokens=blocks * block_size)
        costs = self.costs()
        fields = {"max_num_seqs": self.max_num_seqs,
                  "max_num_batched_tokens": self.max_num_batched_tokens,
                  "block_size_tokens": self.block_size,
                  "enable_prefix_caching": self.prefix_caching, **sched}
        if self.attn_dp > 1:
            # One engine steps all attention ranks in lockstep: its batch holds every rank's
            # sequences (the KV blocks are already attn_dp ranks' worth).
            for name in ("max_num_seqs", "max_num_batched_tokens"):
                fields[name] = int(fields[name]) * self.attn_dp
        if sched.get("overlap_schedule") and costs is not None:
            fields["step_cpu_s"] = costs.step_overhead_s   # hidden behind the GPU's step
        fields = {"chunked_prefill": self.chunked_prefill,
                  "capacity_policy": self.capacity_policy, **fields}
        return engine_config_for(step_model, EngineConfig(
            num_kv_blocks=blocks, **request_overhead_fields(costs), **fields))

    def scheduler_fields(self, kv_tokens: int | None = None) -> dict[str, Any]:
        """The engine preset's scheduler settings (`EngineConfig` fields; {} for vLLM, whose
        loop is the default), less those this scenario set away from its defaults; the
        preset's "auto" limits as the engine derives them on this GPU (the running-request
        limit from `kv_tokens` once the KV pool is sized, its cap before)."""
        if self.calibration:
            return {}    # a calibrated profile brings the measured engine's scheduling
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        defaults = {f.name: f.default for f in dataclasses.fields(Scenario)}
        fields = resolve(load_scheduler(self.engine), own, defaults)
        if AUTO not in fields.values():
            return fields
        ctx = self.spec().max_position_embeddings if kv_tokens is not None else 0
        return resolve_auto(fields, load_hardware(self.hardware).memory_bytes, self.tp,
                            kv_tokens, ctx)

    def kv_capacity_tokens(self, step_model: Any) -> int:
        """KV tokens this scenario's engine sizes on one GPU of `step_model` (its rule:
        ridgeline.perf.engine_memory)."""
        rule = self.scheduler_fields().get("kv_memory_rule", "vllm")
        return kv_tokens_for(step_model, self.gpu_memory_utilization, rule)

    def kv_memory(self, step_model: Any) -> Any:
        """How this scenario's engine sized its KV pool (an `EngineMemory`; None for a
        calibrated profile, which measured its pool, or a fixed --num-kv-blocks)."""
        if self.calibration or self.num_kv_blocks is not None or \
                not hasattr(step_model, "parallel"):
            return None
        rule = self.scheduler_fields().get("kv_memory_rule", "vllm")
        return engine_memory_for(step_model, self.gpu_memory_utilization, rule)

    def auto_fields(self) -> set[str]:
        """The preset's limits left for the engine to derive ("auto" after this scenario's
        own settings)."""
        if self.calibration:
            return set()
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        defaults = {f.name: f.default for f in dataclasses.fields(Scenario)}
        return {k for k, v in resolve(load_scheduler(self.engine), own, defaults).items()
                if v == AUTO}

    def setting(self, name: str) -> Any:
        """A vLLM-named engine setting (max_num_seqs, max_num_batched_tokens, block_size) as
        the run uses it: the engine preset's unless this scenario set its own."""
        field = {v: k for k, v in SCENARIO_NAMES.items()}[name]
        return self.scheduler_fields().get(field, getattr(self, name))

    @property
    def engine_name(self) -> str:
        """The engine's name (an engine costs file names its engine): which kernel profile
        the step-time model uses."""
        if self.engine.endswith(".json"):
            return load_engine_costs(self.engine).engine
        return self.engine

    def _gpu_costs(self, costs: Any) -> Any:
        """The per-step costs the step-time model adds: with overlap scheduling the CPU's
        step cost is not added (the engine takes max(GPU, CPU) instead)."""
        if costs is None or not costs.step_overhead_s or \
                not self.scheduler_fields().get("overlap_schedule"):
            return costs
        return costs.with_values(step_overhead_s=0.0)

    @property
    def capacity_policy(self) -> str:
        """How the engine meets a KV shortage: vLLM preempts, TensorRT-LLM's default
        (GUARANTEED_NO_EVICT) reserves each request's whole KV at admission."""
        return str(self.scheduler_fields().get("capacity_policy",
                                               capacity_policy_for(self.engine)))

    def costs(self) -> Any:
        """The engine's fitted CPU costs (None: off, or a calibrated profile, which measured
        them already)."""
        if not self.engine_costs or self.calibration:
            return None
        return load_engine_costs(self.engine)

    def kv_link_spec(self) -> Any:
        """The KV link between the pools (a `KvLink`; None: not disaggregated)."""
        pools = self.pools()
        if pools is None:
            return None
        return resolve_kv_link(self.kv_link, load_hardware(self.hardware), *pools,
                               extra_latency_s=self.kv_transfer_latency_us * 1e-6)

    def cluster_config(self, step_model: Any,
                       pool_engines: dict[str, tuple[Any, Any]] | None = None) -> Any:
        """Replicas and router, or the P/D pools and their KV link; `pool_engines`: each
        pool's own (EngineConfig, step-time model) where its layout differs."""
        pools = self.pools()
        if pools is None:
            return ClusterConfig(replicas=self.replicas, router=self.router)
        link = self.kv_link_spec()
        engines = pool_engines or {}
        return ClusterConfig(
            replicas=self.replicas, router=self.router,
            pd=(pools[0].workers, pools[1].workers),
            kv_bytes_per_token=step_model.kv_bytes_per_token,
            link_bandwidth_bytes_s=link.bandwidth_bytes_s,
            kv_transfer_latency_s=link.latency_s, link_queue=True, link_kind=link.kind,
            prefill_engine=engines.get("prefill"), decode_engine=engines.get("decode"))

    def validate(self) -> Scenario:
        """Check the texts (lengths, think time, SLOs) early, with one-line errors."""
        parse_slos(list(self.slos))
        parse_lengths(self.prompt, "--prompt")
        parse_lengths(self.output, "--output")
        parse_think_time(self.think_time)
        pools = self.pools()
        if pools is not None:
            spec = self.spec()
            for pool in pools:
                pool.validate(spec)
            self.kv_link_spec()   # --kv-link checked before any work
            # P and D as the pools resolved them: every reader of `pd` sees the same counts
            if (pools[0].workers, pools[1].workers) != self.pd:
                return self.replace(pd=(pools[0].workers, pools[1].workers))._checked()
        return self._checked()

    def _checked(self) -> Scenario:
        self._check_instances()
        if self.mode not in ("fast", "step"):
            raise RidgelineError(f"mode: got {self.mode!r}; allowed: fast, step")
        return self

    def _check_instances(self) -> None:
        pools = self.pools()
        field = "--pd" if pools else "--replicas"
        inst = pools[0].workers + pools[1].workers if pools else self.replicas
        if not 1 <= inst <= MAX_INSTANCES:
            raise RidgelineError(f"{field}: {inst:,} engine instances; allowed: 1 to "
                                 f"{MAX_INSTANCES:,}")
        check_fits(inst * BYTES_PER_INSTANCE, field, f"{inst:,} engine instances",
                   per_unit_bytes=BYTES_PER_INSTANCE, unit="instances")


def _engine_costs_kwarg(costs: Any) -> dict[str, Any]:
    """`engine_costs=` for the roofline: it adds the per-step terms (zeros add nothing) and
    prints every cost among its assumptions."""
    return {} if costs is None else {"engine_costs": costs}


@dataclass
class Built:
    """The objects a scenario builds once and every run of it shares."""

    step_model: Any
    config: Any
    cluster: Any

    # P/D pools with their own layout: each pool's (EngineConfig, step-time model)
    pool_engines: dict[str, tuple[Any, Any]] | None = None

    @classmethod
    def of(cls, sc: Scenario,
           build: Callable[[Scenario], tuple[Any, Any]] | None = None) -> Built:
        """The step-time model, engine configuration and cluster of `sc`; `build(sc)` ->
        (step model, engine config) replaces building them (a cache, say)."""
        build = build or _build_engine
        if not sc.own_pools():
            sm, cfg = build(sc)
            return cls(sm, cfg, sc.cluster_config(sm))
        pools = sc.pools()
        assert pools is not None
        engines: dict[str, tuple[Any, Any]] = {}
        for pool in pools:
            try:
                sm, cfg = build(sc.pool_scenario(pool))
            except RidgelineError as exc:
                raise RidgelineError(f"--{pool.role}-pool: {exc}") from None
            engines[pool.role] = (cfg, sm)
        cfg, sm = engines["decode"]   # the decode pool's model speaks for the run
        return cls(sm, cfg, sc.cluster_config(sm, engines), engines)


def _build_engine(sc: Scenario) -> tuple[Any, Any]:
    sm = sc.step_model()
    return sm, sc.engine_config(sm)


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
