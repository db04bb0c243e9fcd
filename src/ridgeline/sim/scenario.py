"""One simulated scenario, typed: what `simulate`, `plan`, `advise`, the UI and Ray workers run.

A `Scenario` names everything a run needs (model, hardware, precision, parallelism, engine
settings, workload, arrivals, cluster, SLOs, seed and what-ifs) as plain picklable values,
and builds the step-time model, the engine and the cluster from them (`Built.of`). Running
it lives in `ridgeline.sim.scenario_run` (`run_scenario`, `probe_capacity`, `rate_sweep`,
`trace_header`), so what only builds an engine (`serve`) does not load the event loop.

>>> sc = Scenario(requests=20, prompt="fixed:100", output="fixed:10", rate_req_s=2.0)
>>> sc.requests
20
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ridgeline.errors import RidgelineError
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
from ridgeline.sim.kv_link import resolve_kv_link
from ridgeline.sim.pools import Pool, PoolDefaults, resolve_pools
from ridgeline.sim.step_model import engine_config_for, load_step_model
from ridgeline.sizes import check_fits
from ridgeline.specs import ModelSpec, load_hardware, load_model
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
