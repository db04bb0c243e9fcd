"""`ridgeline serve`: the emulator, an OpenAI-compatible server with the simulator's timing.

Only typer and the standard library are imported here; the server is built inside the
command (ridgeline.serve.*), so `ridgeline --help` stays fast.
"""

from __future__ import annotations

import gc
from typing import Annotated, Any

import typer

from ridgeline.commands.options import (
    MAX_NUM_SEQS,
    ActivationsOpt,
    All2AllBackendOpt,
    AttentionDpOpt,
    BandwidthEffOpt,
    CalibrationOpt,
    ChunkedPrefillOpt,
    ComputeEffOpt,
    DataParallelSizeOpt,
    DeepepModeOpt,
    DpOpt,
    EnableDpAttentionOpt,
    EnableExpertParallelOpt,
    EngineCostsOpt,
    EngineOpt,
    EpOpt,
    HardwareOpt,
    KernelOverheadOpt,
    KvOpt,
    MaxModelLenOpt,
    ModelArg,
    ModelOpt,
    MoeA2aBackendOpt,
    MoeBackendOpt,
    MoeRunnerBackendOpt,
    PpOpt,
    PrefixCachingOpt,
    SeedOpt,
    ServedModelNameOpt,
    TpOpt,
    WeightsOpt,
    layout_from_flags,
    model_from,
    moe_choices,
    number,
)

_FIXED = ("milliseconds; any latency option times each request on its own, bypassing "
          "the engine model: docs/serve.md, fixed latencies")


def _ms(flag: str, text: str) -> Any:
    return typer.Option(flag, callback=number(ge=0), help=f"{text} ({_FIXED}).")


# The options of `serve` (one alias per option, so the command reads as a list).
HostOpt = Annotated[str, typer.Option(
    "--host", help="Address to bind. Default loopback only; anything else exposes the "
    "emulator to the network.")]
PortOpt = Annotated[int, typer.Option(
    "--port", min=0, max=65535, help="TCP port; 0 picks a free one (printed).")]
SpeedOpt = Annotated[float, typer.Option(
    "--speed", callback=number(gt=0),
    help="Run the emulated timeline this many times faster than "
    "real time (tests); latencies in /metrics stay on the emulated timeline.")]
MaxNumSeqsOpt = Annotated[int, typer.Option(
    "--max-num-seqs", min=1, max=MAX_NUM_SEQS,
    help="Most sequences in one engine step (vLLM's).")]
MaxNumBatchedTokensOpt = Annotated[int, typer.Option(
    "--max-num-batched-tokens", min=1, help="Token budget of one engine step.")]
GpuMemoryUtilizationOpt = Annotated[float, typer.Option(
    "--gpu-memory-utilization", callback=number(gt=0, le=1),
    help="Fraction of GPU memory the engine may use (sets the KV-cache size).")]
BlockSizeOpt = Annotated[int, typer.Option(
    "--block-size", min=1, help="KV-cache block size in tokens.")]
MaxWaitingOpt = Annotated[int, typer.Option(
    "--max-waiting", min=0, help="Waiting-queue bound; a request past it is refused "
    "with --overload-status and Retry-After.")]
OverloadStatusOpt = Annotated[int, typer.Option(
    "--overload-status", help="HTTP status for a full queue: 429 or 503.")]
RetryAfterOpt = Annotated[float, typer.Option(
    "--retry-after", callback=number(ge=0),
    help="Retry-After seconds sent with the overload status.")]
ApiKeyOpt = Annotated[str | None, typer.Option(
    "--api-key", envvar="RIDGELINE_API_KEY", show_envvar=True,
    help="Require 'Authorization: Bearer KEY' on every endpoint but /health.")]
DefaultMaxTokensOpt = Annotated[int | None, typer.Option(
    "--default-max-tokens", min=1, help="Output length of chat requests that set no "
    "max_tokens (default: the rest of the context, as vLLM).")]
EosLengthsOpt = Annotated[str | None, typer.Option(
    "--eos-lengths", help="Distribution of natural output lengths for requests without "
    "ignore_eos (same syntax as --output, e.g. lognormal:mean=200,sigma=0.8); default: "
    "every request runs to max_tokens.")]
ShutdownGraceOpt = Annotated[float, typer.Option(
    "--shutdown-grace", callback=number(ge=0),
    help="Seconds in-flight streams get to finish on "
    "SIGTERM/SIGINT before they are ended with an error event.")]
HeaderTimeoutOpt = Annotated[float, typer.Option(
    "--header-timeout", callback=number(gt=0), help="Close a connection whose request "
    "headers are not complete this many seconds after it opens or its request starts "
    "(nginx's client_header_timeout).")]
TokenizerOpt = Annotated[str | None, typer.Option(
    "--tokenizer", help="Count prompt tokens with the served model's tokenizer: a "
    "tokenizer.json, a folder holding one, a Hugging Face model id (needs "
    "huggingface_hub and network or its cache) or tiktoken:<encoding>; default "
    "cl100k_base.")]
LogLevelOpt = Annotated[str, typer.Option(
    "--log-level", help="uvicorn log level.")]
AccessLogOpt = Annotated[bool, typer.Option(
    "--access-log/--no-access-log", help="Log every request (slows the server).")]
ModeOpt = Annotated[str, typer.Option(
    "--mode", help="Output text: timing (filler words), echo (the prompt or last user "
    "message, cut to max_tokens), random (seeded random words).")]
TimeToFirstTokenMsOpt = Annotated[float | None, _ms(
    "--time-to-first-token", "Fixed time to first token")]
TimeToFirstTokenStdDevMsOpt = Annotated[float, _ms(
    "--time-to-first-token-std-dev", "Standard deviation of the TTFT")]
InterTokenLatencyMsOpt = Annotated[float | None, _ms(
    "--inter-token-latency", "Fixed time between output tokens")]
InterTokenLatencyStdDevMsOpt = Annotated[float, _ms(
    "--inter-token-latency-std-dev", "Standard deviation of the inter-token time")]
PrefillTimePerTokenMsOpt = Annotated[float | None, _ms(
    "--prefill-time-per-token", "TTFT added per prompt token")]
KvCacheTransferLatencyMsOpt = Annotated[float | None, _ms(
    "--kv-cache-transfer-latency", "TTFT of a request whose prefill ran elsewhere "
    "(kv_transfer_params.do_remote_prefill)")]
KvCacheTransferLatencyStdDevMsOpt = Annotated[float, _ms(
    "--kv-cache-transfer-latency-std-dev", "Its standard deviation")]
TimeFactorUnderLoadOpt = Annotated[float, typer.Option(
    "--time-factor-under-load", callback=number(ge=1, le=1000),
    help="With fixed latencies: every latency x this factor when --max-num-seqs "
    "requests run, less in proportion when fewer do (1: no slowdown).")]
FailureInjectionRatePctOpt = Annotated[float, typer.Option(
    "--failure-injection-rate", callback=number(ge=0, le=100),
    help="Percent of requests that fail on purpose (see --failure-types).")]
FailureTypesOpt = Annotated[str | None, typer.Option(
    "--failure-types", help="Comma list of injected failures: rate_limit, "
    "invalid_request, context_length, model_not_found, server_error, unavailable, "
    "stream_cut, stall (default: all).")]
FailureStallTimeMsOpt = Annotated[float, typer.Option(
    "--failure-stall-time", callback=number(ge=0),
    help="Milliseconds of silence before a `stall` failure ends its stream.")]
LoraModulesOpt = Annotated[list[str] | None, typer.Option(
    "--lora-modules", help="A LoRA adapter served as its own model name: name=path or "
    'JSON {"name": ..., "path": ...}; several after one flag, as vLLM, or the flag '
    "repeated.")]
MaxLorasOpt = Annotated[int, typer.Option(
    "--max-loras", min=1, help="Most LoRA adapters loaded at once.")]
EmbeddingDimOpt = Annotated[int | None, typer.Option(
    "--embedding-dim", min=1, max=65536, help="Length of /v1/embeddings vectors "
    "(default: the model's hidden size).")]


def serve(
    model_arg: ModelArg = None,
    model: ModelOpt = "llama-3.1-8b",
    hardware: HardwareOpt = "h100-sxm",
    weights: WeightsOpt = None,
    kv: KvOpt = None,
    activations: ActivationsOpt = None,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    ep: EpOpt = 1,
    dp: DpOpt = 1,
    attention_dp: AttentionDpOpt = 1,
    all2all_backend: All2AllBackendOpt = "",
    moe_a2a_backend: MoeA2aBackendOpt = None, deepep_mode: DeepepModeOpt = None,
    data_parallel_size: DataParallelSizeOpt = None,
    enable_expert_parallel: EnableExpertParallelOpt = False,
    enable_dp_attention: EnableDpAttentionOpt = False,
    compute_efficiency: ComputeEffOpt = None,
    bandwidth_efficiency: BandwidthEffOpt = None,
    kernel_overhead_us: KernelOverheadOpt = None,
    calibration: CalibrationOpt = None,
    engine: EngineOpt = "vllm",
    moe_backend: MoeBackendOpt = "auto",
    moe_runner_backend: MoeRunnerBackendOpt = None,
    engine_costs: EngineCostsOpt = True,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8000,
    speed: SpeedOpt = 1.0,
    max_num_seqs: MaxNumSeqsOpt = 256,
    max_num_batched_tokens: MaxNumBatchedTokensOpt = 8192,
    gpu_memory_utilization: GpuMemoryUtilizationOpt = 0.9,
    block_size: BlockSizeOpt = 16,
    enable_prefix_caching: PrefixCachingOpt = True,
    chunked_prefill: ChunkedPrefillOpt = True,
    max_model_len: MaxModelLenOpt = None,
    served_model_name: ServedModelNameOpt = None,
    max_waiting: MaxWaitingOpt = 1024,
    overload_status: OverloadStatusOpt = 429,
    retry_after_s: RetryAfterOpt = 1.0,
    api_key: ApiKeyOpt = None,
    default_max_tokens: DefaultMaxTokensOpt = None,
    eos_lengths: EosLengthsOpt = None,
    seed: SeedOpt = 0,
    shutdown_grace_s: ShutdownGraceOpt = 10.0,
    header_timeout_s: HeaderTimeoutOpt = 30.0,
    tokenizer: TokenizerOpt = None,
    log_level: LogLevelOpt = "warning",
    access_log: AccessLogOpt = False,
    mode: ModeOpt = "timing",
    time_to_first_token_ms: TimeToFirstTokenMsOpt = None,
    time_to_first_token_std_dev_ms: TimeToFirstTokenStdDevMsOpt = 0.0,
    inter_token_latency_ms: InterTokenLatencyMsOpt = None,
    inter_token_latency_std_dev_ms: InterTokenLatencyStdDevMsOpt = 0.0,
    prefill_time_per_token_ms: PrefillTimePerTokenMsOpt = None,
    kv_cache_transfer_latency_ms: KvCacheTransferLatencyMsOpt = None,
    kv_cache_transfer_latency_std_dev_ms: KvCacheTransferLatencyStdDevMsOpt = 0.0,
    time_factor_under_load: TimeFactorUnderLoadOpt = 1.0,
    failure_injection_rate_pct: FailureInjectionRatePctOpt = 0.0,
    failure_types: FailureTypesOpt = None,
    failure_stall_time_ms: FailureStallTimeMsOpt = 30000.0,
    lora_modules: LoraModulesOpt = None,
    max_loras: MaxLorasOpt = 1,
    embedding_dim: EmbeddingDimOpt = None,
) -> None:
    """Serve the OpenAI API with the timing of MODEL on HARDWARE (emulated, no GPU).

    Each engine step takes the perf model's time for that step's batch, on the wall clock;
    the engine's per-request cost delays every token of a request, as in `simulate`
    (docs/serve.md). Endpoints: /v1/completions, /v1/chat/completions, /v1/models,
    /metrics (vLLM names), /health, /ridgeline/stats. Binds 127.0.0.1 unless --host says otherwise.
    """
    from ridgeline.errors import RidgelineError, field_error
    from ridgeline.serve.app import EmulatorConfig, create_app
    from ridgeline.serve.launcher import serve_app

    model = model_from(model_arg, model, "llama-3.1-8b")
    moe_backend, all2all_backend = moe_choices(moe_backend, moe_runner_backend, all2all_backend,
                                               moe_a2a_backend, deepep_mode)
    if overload_status not in (429, 503):
        raise field_error("--overload-status", overload_status, "429 or 503")
    from ridgeline.serve.fixed_timing import FixedTiming
    from ridgeline.serve.modes import MODES

    if mode not in MODES:
        raise field_error("--mode", mode, ", ".join(MODES))
    types = _failure_types(failure_types)
    fixed = None
    if any(v is not None for v in (time_to_first_token_ms, inter_token_latency_ms,
                                   prefill_time_per_token_ms, kv_cache_transfer_latency_ms)):
        fixed = FixedTiming(
            time_to_first_token_ms=time_to_first_token_ms or 0.0,
            time_to_first_token_std_dev_ms=time_to_first_token_std_dev_ms,
            inter_token_latency_ms=inter_token_latency_ms or 0.0,
            inter_token_latency_std_dev_ms=inter_token_latency_std_dev_ms,
            prefill_time_per_token_ms=prefill_time_per_token_ms or 0.0,
            kv_cache_transfer_latency_ms=kv_cache_transfer_latency_ms or 0.0,
            kv_cache_transfer_latency_std_dev_ms=kv_cache_transfer_latency_std_dev_ms,
            time_factor_under_load=time_factor_under_load, max_num_seqs=max_num_seqs)
    adapters = _lora_adapters(lora_modules, served_model_name or model, max_loras)
    if log_level not in ("critical", "error", "warning", "info", "debug", "trace"):
        raise field_error("--log-level", log_level, "critical, error, warning, info, debug")
    tp, ep, attn_dp = _one_instance(model, tp, ep, dp, attention_dp, data_parallel_size,
                                    enable_expert_parallel, enable_dp_attention)
    built, sched = _build_engine(
        model, hardware, calibration, engine, engine_costs,
        dict(weights=weights, kv=kv, activations=activations, tp=tp, pp=pp, ep=ep,
             attn_dp=attn_dp, ep_comm=all2all_backend, moe_backend=moe_backend,
             compute_efficiency=compute_efficiency, bandwidth_efficiency=bandwidth_efficiency,
             kernel_overhead_us=kernel_overhead_us,
             gpu_memory_utilization=gpu_memory_utilization),
        dict(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
             block_size_tokens=block_size, enable_prefix_caching=enable_prefix_caching,
             chunked_prefill=chunked_prefill),
        (max_num_seqs, max_num_batched_tokens, block_size, enable_prefix_caching))
    # As vLLM: a context that cannot fit in the KV cache is a configuration error, and by
    # default the context is capped to what fits (vLLM would refuse to start instead).
    if max_model_len is not None and max_model_len > built.kv_capacity_tokens:
        raise field_error("--max-model-len", max_model_len,
                          f"<= the KV-cache capacity, {built.kv_capacity_tokens} tokens")
    context = max_model_len or min(built.max_model_len, built.kv_capacity_tokens)
    config = EmulatorConfig(
        served_model_name=served_model_name or model, speed=speed, max_model_len=context,
        max_waiting=max_waiting, overload_status=overload_status,
        retry_after_s=retry_after_s, api_key=api_key, default_max_tokens=default_max_tokens,
        eos_lengths=eos_lengths, seed=seed, shutdown_grace_s=shutdown_grace_s,
        header_timeout_s=header_timeout_s,
        description=built.description, tokenizer=tokenizer, mode=mode, fixed_timing=fixed,
        failure_injection_rate_pct=failure_injection_rate_pct, failure_types=types,
        failure_stall_s=failure_stall_time_ms / 1000.0, lora_modules=tuple(adapters),
        max_loras=max_loras, embedding_dim=embedding_dim or _hidden_size(built))
    if tokenizer:
        from ridgeline.serve.tokenizer import model_tokenizer

        model_tokenizer(tokenizer)  # a bad --tokenizer fails here, in one line
    try:
        app = create_app(built.engine, built.make_request, config)
    except ValueError as exc:
        raise RidgelineError(str(exc)) from None
    if host not in ("127.0.0.1", "localhost", "::1"):
        typer.echo(f"warning: binding {host}: the emulator is reachable from the network",
                   err=True)
    _say_startup(built, app, model, hardware, speed, context, engine, sched)
    # Objects alive now live as long as the server: keep the collector from rescanning them.
    gc.collect()
    gc.freeze()
    try:
        serve_app(app, host, port, log_level=log_level, access_log=access_log)
    except OSError as exc:
        raise RidgelineError(f"--port: cannot bind {host}:{port} ({exc.strerror})") from None


def _failure_types(failure_types: str | None) -> tuple[str, ...]:
    """The --failure-types to inject (default: every kind)."""
    from ridgeline.errors import field_error
    from ridgeline.serve.failures import FAILURE_TYPES, parse_failure_types

    if failure_types is None:
        return FAILURE_TYPES
    try:
        return parse_failure_types(failure_types)
    except ValueError:
        raise field_error("--failure-types", failure_types,
                          "a comma list of " + ", ".join(FAILURE_TYPES)) from None


def _lora_adapters(lora_modules: list[str] | None, served: str, max_loras: int
                   ) -> list[tuple[str, str]]:
    """The --lora-modules adapters as (name, path): distinct names, none the served model's
    name, at most --max-loras of them."""
    from ridgeline.errors import field_error
    from ridgeline.serve.lora import parse_lora_module

    adapters: list[tuple[str, str]] = []
    for entry in lora_modules or []:
        try:
            adapters.append(parse_lora_module(entry))
        except ValueError:
            raise field_error("--lora-modules", entry,
                              'name=path or {"name": ..., "path": ...}') from None
    names = [n for n, _ in adapters]
    if len(set(names)) != len(names) or served in names:
        raise field_error("--lora-modules", " ".join(names),
                          "distinct names, none the served model's")
    if len(adapters) > max_loras:
        raise field_error("--lora-modules", f"{len(adapters)} adapters",
                          f"at most --max-loras={max_loras}")
    return adapters


def _one_instance(model: str, tp: int, ep: int, dp: int, attention_dp: int,
                  data_parallel_size: int | None, enable_expert_parallel: bool,
                  enable_dp_attention: bool) -> tuple[int, int, int]:
    """(tp, ep, attn_dp) of the one engine instance serve emulates (replicas refused)."""
    from ridgeline.errors import field_error

    tp, ep, attn_dp, replicas = layout_from_flags(
        model, tp, ep, dp, attention_dp, data_parallel_size, enable_expert_parallel,
        enable_dp_attention)
    if replicas > 1:
        raise field_error("--dp" if data_parallel_size is None else "--data-parallel-size",
                          replicas, "1 replica (serve emulates one engine instance; start "
                          "one server per replica, or use simulate --replicas)")
    return tp, ep, attn_dp


def _build_engine(model: str, hardware: str, calibration: str | None, engine: str,
                  engine_costs: bool, specs: dict[str, Any], engine_kw: dict[str, Any],
                  limits: tuple[int, int, int, bool]) -> Any:
    """The emulated engine: the engine preset, its scheduler (SGLang's; none for vLLM) and
    its fitted CPU costs, chosen as `simulate` chooses them (one Scenario rule: off with
    --no-engine-costs or a calibrated profile, which measured them). Returns (built engine,
    the preset's scheduler fields)."""
    from ridgeline.serve.factory import build_engine
    from ridgeline.sim.engine_costs import capacity_policy_for
    from ridgeline.sim.engine_presets import SCENARIO_NAMES
    from ridgeline.sim.scenario import Scenario

    max_num_seqs, max_num_batched_tokens, block_size, prefix_caching = limits
    costs = Scenario(engine=engine, engine_costs=engine_costs, calibration=calibration).costs()
    policy = capacity_policy_for(engine)
    sc = Scenario(engine=engine, calibration=calibration, max_num_seqs=max_num_seqs,
                  max_num_batched_tokens=max_num_batched_tokens, block_size=block_size,
                  prefix_caching=prefix_caching, model=model, hardware=hardware,
                  tp=int(specs.get("tp", 1)))
    sched = sc.scheduler_fields()
    engine_kw = dict(engine_kw)
    engine_kw.update({k: sched.pop(k) for k in list(sched) if k in SCENARIO_NAMES})
    if "max_num_seqs" in sc.auto_fields():   # the engine derives it from its KV pool
        engine_kw["max_num_seqs"] = "auto"
    policy = sched.pop("capacity_policy", policy)
    if calibration:   # the measured engine's step times and scheduling
        from ridgeline.sim.step_model import engine_kwargs, load_step_model

        engine_kw = engine_kwargs(load_step_model(calibration, lambda: None))
        policy = "vllm"  # the profile's scheduling, as `simulate --calibration` runs it
    built = build_engine(model, hardware, **specs, engine_costs=costs, capacity_policy=policy,
                         scheduler_options=sched,
                         engine_name=Scenario(engine=engine).engine_name, **engine_kw)
    return built, sched


def _say_startup(built: Any, app: Any, model: str, hardware: str, speed: float,
                 context: int, engine: str, sched: dict[str, Any]) -> None:
    par = getattr(built.step_model, "parallel", None)
    if par is not None and par.gpus_per_replica > 1:
        hardware = (f"{hardware} x{par.gpus_per_replica} (tp={par.tp} pp={par.pp}"
                    + (f" attention-dp={par.attn_dp}" if par.attn_dp > 1 else "")
                    + (f" ep={par.ep}" if par.ep > 1 else "") + ")")
    typer.echo(f"ridgeline serve: {model} on {hardware}, speed x{speed:g}, "
               f"KV capacity {built.kv_capacity_tokens} tokens, max_model_len {context}, "
               f"tokenizer {app.state.emulator.tokenizer.name}", err=True)
    # vLLM's start-up KV lines, for the pool the emulated engine really has (whole blocks)
    from ridgeline.perf.vllm_kv_log import VllmKvLog

    cfg = built.engine.config
    kv_log = VllmKvLog(0.0, int(cfg.num_kv_blocks), int(cfg.block_size_tokens), context)
    for line in kv_log.lines()[1:]:
        typer.echo(line, err=True)
    if sched:   # the engine preset's scheduler, as `simulate` prints it
        from ridgeline.sim.engine_presets import FIELDS, describe

        for line in describe(engine, {k: getattr(cfg, k) for k in FIELDS}):
            typer.echo(line, err=True)
        memory = built.description.get("kv_memory")
        if memory and memory.get("rule") != "vllm":
            typer.echo(f"engine {engine}: {memory['summary']}", err=True)
    if hasattr(built.step_model, "assumptions"):   # the key lines `simulate` prints
        from ridgeline.report.assumptions import key_assumptions

        typer.echo("assumptions (`ridgeline simulate --assumptions` prints all):", err=True)
        for line in key_assumptions(built.step_model):
            typer.echo(f"  - {line}", err=True)


def _hidden_size(built: Any) -> int:
    """The served model's hidden size (its embeddings' width), 4096 when unknown."""
    size = getattr(getattr(built.step_model, "model", None), "hidden_size", None)
    return int(size) if isinstance(size, int) and size > 0 else 4096


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
