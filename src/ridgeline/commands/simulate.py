"""`ridgeline simulate`: the serving engine on a virtual clock, under a synthetic load.

Only typer and the standard library at import time; the simulator loads inside the command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ridgeline.commands.options import (
    MAX_NUM_SEQS,
    ActivationsOpt,
    All2AllBackendOpt,
    AssumptionsOpt,
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
    JsonOpt,
    KernelOverheadOpt,
    KvOpt,
    MaxModelLenOpt,
    ModelArg,
    ModelOpt,
    MoeA2aBackendOpt,
    MoeBackendOpt,
    MoeRunnerBackendOpt,
    OutFormatOpt,
    PpOpt,
    PrefixCachingOpt,
    SeedOpt,
    ServedModelNameOpt,
    SloOpt,
    TpOpt,
    TraceOutOpt,
    WeightsOpt,
    check_max_model_len,
    layout_from_flags,
    model_from,
    moe_choices,
    number,
    writable_file,
)
from ridgeline.commands.report import ReportOpt, check_report_path
from ridgeline.commands.whatif_options import (
    CpuDetokenizeOpt,
    CpuTokenizeOpt,
    EagerOpt,
    SpecAlphaOpt,
    SpecDraftOpt,
    SpecKOpt,
    whatif_from_options,
)

# The library's defaults (ridgeline.sim.scenario), repeated as literals so the command module
# imports only typer; tests/sim/test_scenario.py checks they agree.
DEFAULT_PROMPT = "lognormal:mean=250,sigma=1.0,max=4096"
DEFAULT_OUTPUT = "lognormal:mean=200,sigma=0.8,max=2048"


# The options of `simulate` (one alias per option, so the command reads as a list).
RateOpt = Annotated[str | None, typer.Option(
    "--rate", help="Arrival rate in req/s; a comma list (1,2,4,8) for a latency-vs-load "
    "sweep; or 'sweep' (rates around the simulated capacity).")]
RequestsOpt = Annotated[int, typer.Option("--requests", "-n", min=1,
                                          help="Requests per run.")]
ArrivalOpt = Annotated[str, typer.Option(
    "--arrival", help="poisson, gamma:cv=2, constant, ramp:start=1,end=16, "
    "replay:path=FILE[,speedup=K,format=F] (also BurstGPT, Mooncake, Azure, Vidur, "
    "ShareGPT: docs/workloads.md), "
    "diurnal:peak=,trough=[,period=86400].")]
WorkloadOpt = Annotated[str | None, typer.Option(
    "--workload", help="Simulate a load test's own workload: an inference-perf config "
    "YAML, a `vllm bench serve` command line (or a file holding one) or its result "
    "JSON, a GuideLLM benchmarks file or an AIPerf profile export; replaces --rate, "
    "--arrival, --concurrency, --prompt, --output and --prefix-* (docs/workloads.md).")]
ConcurrencyOpt = Annotated[int | None, typer.Option(
    "--concurrency", min=1, help="Closed loop: this many users, each sending its next request "
    "when the last one ends (instead of --rate).")]
ThinkTimeOpt = Annotated[str, typer.Option(
    "--think-time", help="Closed loop: seconds a user waits between requests: 0, "
    "fixed:1.5, exponential:mean=2, uniform:min=1,max=3.")]
PromptOpt = Annotated[str | None, typer.Option(
    "--prompt", help="Prompt lengths (tokens): fixed:N, uniform:min=,max=, normal:mean=,"
    "std=, lognormal:mean=,sigma=, exponential:mean=, empirical:path=FILE. Default: "
    f"{DEFAULT_PROMPT}; with --arrival replay of a BurstGPT or Mooncake file, each "
    "request's own length from the file.")
    ]
OutputOpt = Annotated[str | None, typer.Option(
    "--output", help="Output lengths (same syntax). Default: "
    f"{DEFAULT_OUTPUT}; with --arrival replay of a BurstGPT or Mooncake file, each "
    "request's own length from the file.")
    ]
PrefixGroupsOpt = Annotated[int, typer.Option(
    "--prefix-groups", min=0,
    help="Shared-prefix groups: request i starts with prefix i mod G.")
    ]
PrefixTokensOpt = Annotated[int, typer.Option(
    "--prefix-tokens", min=0,
    help="Tokens of each group's shared prefix (added to the prompt).")
    ]
ReplicasOpt = Annotated[int, typer.Option("--replicas", min=1,
                                          help="Engine replicas (data parallel).")]
RouterOpt = Annotated[str, typer.Option(
    "--router", help="round-robin, least-outstanding, least-kv, prefix-affinity (a "
    "prefix group's requests on one replica: where its prefix is cached).")]
PdOpt = Annotated[str | None, typer.Option(
    "--pd", help="Prefill/decode disaggregation P:D (P prefill and D decode instances; "
    "replaces --replicas).")]
KvTransferLatencyUsOpt = Annotated[float, typer.Option(
    "--kv-transfer-latency-us", callback=number(ge=0, le=1e9),
    help="Fixed latency per P/D KV transfer, added to the link's own.")]
PrefillPoolOpt = Annotated[str | None, typer.Option(
    "--prefill-pool", help="Disaggregated prefill workers, e.g. 'workers=2,tp=4,max-batched-"
    "tokens=16384' (keys: workers, tp, pp, ep, attention-dp, max-batch, max-batched-tokens; "
    "a key left out takes the main flag's value).")]
DecodePoolOpt = Annotated[str | None, typer.Option(
    "--decode-pool", help="Disaggregated decode workers, e.g. 'workers=4,tp=8,max-batch=256' "
    "(the keys of --prefill-pool).")]
KvLinkOpt = Annotated[str | None, typer.Option(
    "--kv-link", help="The link the KV crosses from prefill to decode: auto (NVLink when both "
    "pools fit one NVLink domain, else the network), nvlink, network, or GB/s per transfer.")]
MaxNumSeqsOpt = Annotated[int, typer.Option(
    "--max-num-seqs", min=1, max=MAX_NUM_SEQS,
    help="Most sequences in one engine step (vLLM's).")]
MaxNumBatchedTokensOpt = Annotated[int, typer.Option("--max-num-batched-tokens", min=1,
                                                                  max=10_000_000)
                                      ]
BlockSizeOpt = Annotated[int, typer.Option("--block-size", min=1,
                                            help="KV block size (tokens).")]
GpuMemoryUtilizationOpt = Annotated[float, typer.Option(
    "--gpu-memory-utilization", callback=number(gt=0, le=1),
    help="Fraction of GPU memory for weights + KV.")]
NumKvBlocksOpt = Annotated[int | None, typer.Option(
    "--num-kv-blocks", min=1, max=10**10,
    help="Override the KV capacity from the memory model.")]
SloAttainmentOpt = Annotated[float, typer.Option(
    "--slo-attainment", callback=number(gt=0, le=1),
    help="Sweep: a rate meets the SLOs when at least this fraction "
    "of its requests meets all of them.")]
TimelineOpt = Annotated[str | None, typer.Option(
    "--timeline", callback=writable_file,
    help="Write the engine timeline (one row per step) as CSV.")]
StepByStepOpt = Annotated[bool, typer.Option(
    "--step-by-step", help="Reference mode: one engine step per loop iteration (slower; "
    "same trace).")]
StreamOpt = Annotated[bool | None, typer.Option(
    "--stream/--no-stream", help="Stream finished requests to the trace and to "
    "streaming metrics (memory bounded by what is in flight; whole-run window); default: "
    "on above 500,000 requests or with --workers/--ray.")]
WorkersOpt = Annotated[int, typer.Option(
    "--workers", min=1, help="Shard replicas over this many processes (round-robin or "
    "prefix-affinity, open loop, no P/D: exact; other routers stay in one process).")]
RayAddressOpt = Annotated[str | None, typer.Option(
    "--ray", help="Shard over Ray: 'local' or a cluster address (needs ridgeline[ray]).")
    ]
ExactMaxOpt = Annotated[int, typer.Option(
    "--exact-max", min=0, help="Streamed: values per metric kept for exact percentiles; "
    "beyond, a sketch (--sketch-error).")]
SketchErrorOpt = Annotated[float, typer.Option(
    "--sketch-error", callback=number(gt=0, lt=0.5),
    help="Streamed: relative error of sketch percentiles.")]


def _check_load(arrival: str, rate: str | None, concurrency: int | None,
                slo_attainment: float) -> None:
    """An open or a closed loop, not both, and an attainment in (0, 1]."""
    from ridgeline.errors import RidgelineError

    if concurrency is None and rate is None and not arrival.startswith(("ramp", "replay",
                                                                             "diurnal")):
        raise RidgelineError("--rate: give an arrival rate (req/s), a list, 'sweep', or "
                             "--concurrency for a closed loop")
    if concurrency is not None and rate is not None:
        raise RidgelineError("--rate/--concurrency: give one (open loop or closed loop)")
    if not 0 < slo_attainment <= 1:
        raise RidgelineError(f"--slo-attainment: got {slo_attainment}; allowed: (0, 1]")


def _check_sizes(streamed: bool, requests: int, rate: str | None, concurrency: int | None,
                 output: str, stream: bool | None) -> None:
    """Sizes first: before the step-time tables, the capacity probe or the workload."""
    from ridgeline.sim.sweep import SWEEP_FRACTIONS, parse_rates

    if streamed:
        _check_streamed_memory(requests)
        return
    listed = parse_rates(rate) if concurrency is None and rate is not None else [None]
    _check_batch_memory(requests * len(listed if listed is not None else SWEEP_FRACTIONS),
                        output, stream)


def simulate_cmd(
    model_arg: ModelArg = None,
    model: ModelOpt = "llama-3.1-8b",
    hardware: HardwareOpt = "h100-sxm",
    rate: RateOpt = None,
    requests: RequestsOpt = 1000,
    arrival: ArrivalOpt = "poisson",
    concurrency: ConcurrencyOpt = None,
    think_time: ThinkTimeOpt = "0",
    prompt: PromptOpt = None,
    output: OutputOpt = None,
    prefix_groups: PrefixGroupsOpt = 0,
    prefix_tokens: PrefixTokensOpt = 0,
    workload: WorkloadOpt = None,
    replicas: ReplicasOpt = 1,
    router: RouterOpt = "round-robin",
    pd: PdOpt = None,
    kv_transfer_latency_us: KvTransferLatencyUsOpt = 0.0,
    prefill_pool: PrefillPoolOpt = None,
    decode_pool: DecodePoolOpt = None,
    kv_link: KvLinkOpt = None,
    max_num_seqs: MaxNumSeqsOpt = 256,
    max_num_batched_tokens: MaxNumBatchedTokensOpt = 8192,
    chunked_prefill: ChunkedPrefillOpt = True,
    prefix_caching: PrefixCachingOpt = True,
    max_model_len: MaxModelLenOpt = None,
    served_model_name: ServedModelNameOpt = None,
    block_size: BlockSizeOpt = 16,
    gpu_memory_utilization: GpuMemoryUtilizationOpt = 0.9,
    num_kv_blocks: NumKvBlocksOpt = None,
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
    slo: SloOpt = None,
    slo_attainment: SloAttainmentOpt = 0.99,
    trace: TraceOutOpt = None,
    timeline: TimelineOpt = None,
    step_by_step: StepByStepOpt = False,
    spec_k: SpecKOpt = 0,
    spec_alpha: SpecAlphaOpt = 0.7,
    spec_draft_model: SpecDraftOpt = None,
    enforce_eager: EagerOpt = False,
    cpu_tokenize_us_per_token: CpuTokenizeOpt = 0.0,
    cpu_detokenize_us_per_event: CpuDetokenizeOpt = 0.0,
    stream: StreamOpt = None,
    workers: WorkersOpt = 1,
    ray_address: RayAddressOpt = None,
    exact_max: ExactMaxOpt = 5_000_000,
    sketch_error: SketchErrorOpt = 0.01,
    json_out: JsonOpt = False,
    fmt: OutFormatOpt = None,
    all_assumptions: AssumptionsOpt = False,
    seed: SeedOpt = 0,
    report: ReportOpt = None,
) -> None:
    """Simulate an LLM serving engine under load; print the metrics of `analyze`."""
    from ridgeline.metrics.slo import parse_slos
    from ridgeline.sim.cluster import parse_pd
    from ridgeline.sim.scenario import Built, Scenario

    load_test = None
    if workload is not None:
        from ridgeline.commands.workload_option import apply_workload

        opts, load_test = apply_workload(workload, seed, {"requests": requests}, json_out)
        arrival, rate, concurrency, prompt, output, prefix_groups, prefix_tokens, requests = (
            opts[k] for k in ("arrival", "rate", "concurrency", "prompt", "output",
                              "prefix_groups", "prefix_tokens", "requests"))
    del served_model_name  # the API name: no effect on the simulated timings
    model = model_from(model_arg, model, "llama-3.1-8b")
    moe_backend, all2all_backend = moe_choices(moe_backend, moe_runner_backend, all2all_backend,
                                               moe_a2a_backend, deepep_mode)
    check_max_model_len(max_model_len, prompt or DEFAULT_PROMPT, output or DEFAULT_OUTPUT)
    _check_load(arrival, rate, concurrency, slo_attainment)
    check_report_path(report)
    prompt_from_replay, output_from_replay, memory_output = _replay_lengths(
        arrival, concurrency, prompt, output, requests)
    if load_test is not None and load_test.from_file:   # a closed loop's lengths too
        prompt_from_replay, output_from_replay = prompt is None, output is None
    prompt = prompt or DEFAULT_PROMPT
    output = output or DEFAULT_OUTPUT
    tp, ep, attn_dp, dp_replicas = layout_from_flags(
        model, tp, ep, dp, attention_dp, data_parallel_size, enable_expert_parallel,
        enable_dp_attention)
    sc = Scenario(
        model=model, hardware=hardware, weights=weights, kv=kv, activations=activations,
        tp=tp, pp=pp, ep=ep, attn_dp=attn_dp, all2all_backend=all2all_backend,
        compute_efficiency=compute_efficiency, bandwidth_efficiency=bandwidth_efficiency,
        kernel_overhead_us=kernel_overhead_us, calibration=calibration, engine=engine,
        engine_costs=engine_costs, moe_backend=moe_backend,
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        chunked_prefill=chunked_prefill, prefix_caching=prefix_caching, block_size=block_size,
        gpu_memory_utilization=gpu_memory_utilization, num_kv_blocks=num_kv_blocks,
        requests=requests, arrival=arrival, concurrency=concurrency, think_time=think_time,
        prompt=prompt, output=output, prefix_groups=prefix_groups, prefix_tokens=prefix_tokens,
        prompt_from_replay=prompt_from_replay, output_from_replay=output_from_replay,
        replicas=replicas * dp_replicas, router=router, pd=parse_pd(pd), kv_link=kv_link,
        kv_transfer_latency_us=kv_transfer_latency_us, prefill_pool=prefill_pool,
        decode_pool=decode_pool, slos=tuple(x.text for x in parse_slos(slo)), seed=seed,
        mode="step" if step_by_step else "fast", whatif=whatif_from_options(
            spec_k, spec_alpha, spec_draft_model, enforce_eager, cpu_tokenize_us_per_token,
            cpu_detokenize_us_per_event)).validate()
    from ridgeline.commands.simulate_streamed import STREAM_AUTO_REQUESTS

    streamed = _is_streamed(sc, stream, workers, ray_address, STREAM_AUTO_REQUESTS)
    _check_sizes(streamed, requests, rate, concurrency, memory_output or output, stream)
    built = Built.of(sc)
    rates = _rates(sc, built, rate, concurrency)
    from ridgeline.commands.simulate_streamed import check_streamed, run_streamed_command

    if streamed:
        check_streamed(rates, timeline, step_by_step, sc.pd, sketch_error, built)
        run_streamed_command(sc, built, rates[0], trace, json_out, workers, ray_address,
                             exact_max, sketch_error)
        return
    # The pooled ITL samples (one value per token) are kept only for the report's plots.
    runs = _run_all(sc, built, rates, trace, timeline, keep_samples=bool(report))
    json_out = json_out or fmt == "json"
    if len(runs) == 1:
        _report_one(runs[0], built.step_model, json_out, fmt, all_assumptions,
                    load_test.described if load_test is not None else None)
    else:
        _report_sweep(runs, built.step_model, sc.slos, slo_attainment, json_out, fmt,
                      all_assumptions)
    if report:
        from ridgeline.commands.report import write_report_for_simulation

        typer.echo(f"report: {write_report_for_simulation(runs, built.step_model, report)}",
                   err=json_out)


# ---- running ----------------------------------------------------------------------------

def _is_streamed(sc: Any, stream: bool | None, workers: int, ray_address: str | None,
                 auto_requests: int) -> bool:
    """Whether the run streams: asked, or workers / Ray, or past `auto_requests` requests
    (not with pools of their own layout: the Python engine keeps every request)."""
    return bool(stream or (stream is None and (
        workers > 1 or ray_address is not None
        or (sc.requests > auto_requests and not sc.own_pools()))))


def _rates(sc: Any, built: Any, rate: str | None, concurrency: int | None
           ) -> list[float | None]:
    """The arrival rates to run: [None] for a closed loop or a process that sets its own
    rate, the listed rates, or for 'sweep' rates around the simulated capacity."""
    from ridgeline.sim.scenario_run import sweep_rates_for
    from ridgeline.sim.sweep import parse_rates

    if concurrency is not None or rate is None:
        return [None]
    parsed = parse_rates(rate)
    return list(parsed if parsed is not None else sweep_rates_for(sc, built))


def _replay_lengths(arrival: str, concurrency: int | None, prompt: str | None,
                    output: str | None, requests: int) -> tuple[bool, bool, str | None]:
    """Which lengths a replay uses, said on stderr: each request's own from a BurstGPT or
    Mooncake file unless --prompt / --output is given. Returns (prompt from the trace,
    output from the trace, a fixed-length spec of the trace's mean output for the memory
    check, or None)."""
    if concurrency is not None or not arrival.startswith("replay"):
        return False, False, None
    import numpy as np

    from ridgeline.workload.arrivals import parse_arrival

    proc = parse_arrival(arrival)
    if proc.replay_prompt_tokens is None:
        typer.echo("replay: the file has timestamps only; prompt and output lengths from "
                   f"--prompt {prompt or DEFAULT_PROMPT} and --output "
                   f"{output or DEFAULT_OUTPUT}", err=True)
        return False, False, None
    assert proc.replay_output_tokens is not None
    n = min(requests, len(proc.replay_prompt_tokens))
    own_p = np.maximum(np.asarray(proc.replay_prompt_tokens[:n]), 1)
    raw_o = np.asarray(proc.replay_output_tokens[:n])
    own_o = np.maximum(raw_o, 1)
    fmt = proc.replay_format
    zeros = int(np.count_nonzero(raw_o == 0))
    parts = [f"prompt lengths from --prompt {prompt}" if prompt else
             f"prompt lengths from the file ({fmt}; mean {own_p.mean():.1f} tokens over "
             f"the first {n:,} requests)",
             f"output lengths from --output {output}" if output else
             f"output lengths from the file (mean {own_o.mean():.1f} tokens"
             + (f"; {zeros} zero-token responses asked as 1" if zeros else "") + ")"]
    typer.echo("replay: " + "; ".join(parts), err=True)
    return prompt is None, output is None, (None if output else f"fixed:{own_o.mean():.6g}")


# What a batch run holds at its peak: per output token (token times, segments and the
# analysis's copies: 100k requests of 250 tokens, 948 MB peak RSS, 38 B a token) and per
# request (its records and columns: 150k requests of 10 tokens, 215 MB, ~1 KB each).
BATCH_BYTES_PER_OUTPUT_TOKEN = 40
BATCH_BYTES_PER_REQUEST = 1500
# A streamed run still builds the whole workload (arrival times, lengths) up front and
# keeps up to --exact-max values per metric: 2M requests, 745 MB; 1M, 423 MB (~320 B each).
STREAMED_BYTES_PER_REQUEST = 400


def _check_batch_memory(requests: int, output: str, stream: bool | None) -> None:
    """A batch run that cannot fit this machine's memory (or this process's limit) fails
    now, in one line, instead of being killed after minutes; streaming would fit and is
    offered. `requests`: over all the rates of a sweep (each run is kept)."""
    from ridgeline.sizes import check_fits
    from ridgeline.workload.lengths import parse_lengths

    per = BATCH_BYTES_PER_REQUEST + parse_lengths(output, "--output").mean_tokens \
        * BATCH_BYTES_PER_OUTPUT_TOKEN
    how = "drop --no-stream" if stream is False else "add --stream"
    check_fits(requests * per, "--requests", f"a batch run of {requests:,} requests",
               per_unit_bytes=per, unit="requests",
               advice=f"{how} (memory bounded by what is in flight) or lower --requests")


def _check_streamed_memory(requests: int) -> None:
    from ridgeline.sizes import check_fits

    check_fits(requests * STREAMED_BYTES_PER_REQUEST, "--requests",
               f"a streamed run of {requests:,} requests (its workload is built up front)",
               per_unit_bytes=STREAMED_BYTES_PER_REQUEST, unit="requests",
               advice="lower --requests")


def _run_all(sc: Any, built: Any, rates: list[float | None], trace: str | None,
             timeline: str | None, keep_samples: bool = True) -> list[Any]:
    """Run each rate through the library (`ridgeline.sim.scenario_run.run_scenario`) under one
    progress bar, writing each run's trace and timeline as it finishes."""
    from ridgeline.report.progress import progress_for
    from ridgeline.sim.scenario_run import run_scenario

    n = sc.requests
    runs = []
    # A bar with an ETA in a terminal; a line every few seconds on stderr in a log.
    progress = progress_for("simulate")
    with progress:
        task = progress.add_task("simulating", total=n * len(rates))
        for k, rate in enumerate(rates):
            progress.update(task, description=f"simulating {rate:g} req/s"
                            if rate else "simulating")
            base = k * n
            run = run_scenario(sc, rate, built=built,
                               progress=lambda d, base=base: progress.update(
                                   task, completed=base + d), keep_samples=keep_samples)
            progress.update(task, completed=base + n)
            suffix = f".rate{rate:g}" if len(rates) > 1 and rate is not None else ""
            if trace:
                _write_trace(_with_suffix(trace, suffix), run.header, run.result)
            if timeline:
                _write_timeline(_with_suffix(timeline, suffix), run.result)
            runs.append(run)
    return runs


def _with_suffix(path: str, suffix: str) -> str:
    if not suffix:
        return path
    p = Path(path)
    return str(p.with_name(p.stem + suffix + p.suffix))


def _write_trace(path: str, header: Any, res: Any) -> None:
    from ridgeline.trace.writer import TraceWriter

    with TraceWriter(path, header) as w:
        batch: list[dict[str, Any]] = []
        for rec in res.records():
            batch.append(rec)
            if len(batch) >= 2000:
                w.write_requests(batch)
                batch = []
        w.write_requests(batch)


def _write_timeline(path: str, res: Any) -> None:
    import csv

    from ridgeline.sim.event_loop import TIMELINE_COLUMNS

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(TIMELINE_COLUMNS)
        w.writerows(res.timeline_rows())


# ---- reporting --------------------------------------------------------------------------


# How simulate defines TTFT (the first of its key assumptions).
TTFT_DEFINITION = ("TTFT: from the request's arrival to its first token, queueing included, "
                   "plus the engine's per-request costs (continuous batching, chunked prefill)")


def model_error_cells(step_model: Any) -> dict[str, str]:
    """Per analyze metric key, the model's cross-validated error (a column beside the
    simulated figures)."""
    from ridgeline.perf.model_error import model_error, pm

    err = model_error(step_model)
    serving = err.ttft_ape is not None
    return {
        "ttft_ms": f"{pm(err.ttft_ape)} mean, {pm(err.ttft_p99_ape)} P99" if serving
        else pm(err.prefill_ape),
        "tpot_ms": pm(err.itl_ape if serving else err.decode_step_ape),
        "itl_ms": pm(err.itl_ape if serving else err.decode_step_ape),
        "itl_per_token_ms": pm(err.itl_ape if serving else err.decode_step_ape),
        "e2e_ms": pm(err.e2e_ape) if serving else "",
    }


def _report_one(run: Any, step_model: Any, json_out: bool, fmt: str | None,
                all_assumptions: bool, workload: dict[str, Any] | None = None) -> None:
    from ridgeline.sim.model_error import (
        add_model_error,
        interval_origin,
        model_error_cells_80,
        model_error_lines,
    )

    summary = run.summary()
    analysis = run.analysis.to_dict()
    add_model_error(run, analysis["latency"])   # model-error intervals beside each latency
    pr = getattr(step_model, "precision", None)  # a calibrated profile has none
    from ridgeline.sim.pools import pool_lines


    sched = _scheduler_lines(run)
    pools = run.pools_summary() if hasattr(run, "pools_summary") else None
    pd_notes = _pd_notes(run) if pools is not None else []
    if json_out:
        from ridgeline.perf.model_error import model_error
        from ridgeline.report.assumptions import key_assumptions

        out = {"simulation": summary, "analysis": analysis,
               "model_error": model_error(step_model).describe(),
               "key_assumptions": key_assumptions(step_model, TTFT_DEFINITION),
               "assumptions": sched + pd_notes + step_model.assumptions()}
        if pr is not None:
            out["precision"] = pr.describe()
        par = getattr(step_model, "parallel", None)
        if par is not None:
            out["parallelism"] = par.describe()
        engine = _engine_block(run)
        if engine is not None:
            out["engine"] = engine
        if pools is not None:
            out["pools"] = pools
            out["gpus"] = pools["gpus"]
        if workload is not None:
            out["workload"] = workload
        typer.echo(json.dumps(out, indent=2))
        return
    from ridgeline.metrics.render import print_analysis
    from ridgeline.report.assumptions import print_assumptions
    from ridgeline.report.tables import out_for

    s = summary
    core = "C" if s["engine_core"] == "c" else s["engine_core"]
    with out_for(fmt) as page:
        if pr is not None:
            par = getattr(step_model, "parallel", None)
            layout = "" if par is None or par.gpus_per_replica == 1 else (
                f" x{par.gpus_per_replica} (tp={par.tp} pp={par.pp}"
                + (f" attention-dp={par.attn_dp}" if par.attn_dp > 1 else "")
                + (f" ep={par.ep}" if par.ep > 1 else "") + ")")
            page.print(f"{step_model.model.name} on {step_model.hardware.name}{layout} · "
                       f"{pr.scheme} · KV {pr.kv}", markup=False)
        for line in sched:
            page.print(line, markup=False)
        # The model's error beside each prediction: its nominal 80% interval (held-out
        # replay residuals) where the metric has one, else its cross-validated error.
        cells = model_error_cells(step_model) | model_error_cells_80(analysis["latency"])
        print_analysis(run.analysis, page, model_errors=cells, what="ridgeline simulate",
                       model_error_header="model error (80% interval / CV)")
        if all_assumptions:   # every statistic's interval, on request
            page.print("model error, nominal 80% interval of the measured value "
                       f"({interval_origin(analysis['latency'])}):", markup=False)
            for line in model_error_lines(analysis["latency"]):
                page.print(line, markup=False)
        page.print(
            f"simulated {s['requests']:,} requests ({s['finished']:,} finished, "
            f"{s['rejected']:,} rejected) over {s['simulated_s']:,.1f} simulated s in "
            f"{s['wall_s']:.2f} wall s; {s['engine_steps']:,} engine steps, mean batch "
            f"{s['mean_batch_size']:.1f}, {s['preemptions']:,} preemptions, peak KV "
            f"{s['max_kv_blocks_used']:,} blocks ({core} engine loop)", markup=False)
        if pools is not None:
            for line in pool_lines(pools) + pd_notes:
                page.print(line, markup=False)
        print_assumptions(page, step_model, all_assumptions, TTFT_DEFINITION)


def _engine_block(run: Any) -> dict[str, Any] | None:
    """`--json`'s engine: its name, the limits and policies the run used (the engine config)
    and how it sized its KV pool."""
    sc = getattr(run, "scenario", None)
    built = getattr(run, "built", None)
    if sc is None or built is None:
        return None
    cfg = built.config
    memory = sc.kv_memory(built.step_model)
    return {"name": sc.engine_name, "config": dict(cfg.__dict__),
            "kv_capacity_tokens": cfg.kv_capacity_tokens,
            "kv_memory": memory.describe() if memory is not None else None}
def _pd_notes(run: Any) -> list[str]:
    """What a disaggregated run assumed: the KV link, where TTFT is counted, and which
    model the step-time assumptions below describe."""
    from ridgeline.sim.pools import TTFT_CONVENTION

    sc = run.scenario
    notes = [sc.kv_link_spec().assumption(), TTFT_CONVENTION]
    if sc.own_pools():
        notes.append("each pool's step times and KV capacity come from its own layout; the "
                     "step-time assumptions listed are the decode pool's")
    return notes


def _scheduler_lines(run: Any) -> list[str]:
    """The engine preset's scheduler as the run used it (none for vLLM's default loop)."""
    from ridgeline.sim.engine_presets import FIELDS, describe

    sc = getattr(run, "scenario", None)
    if sc is None or not sc.scheduler_fields():
        return []
    cfg = run.built.config
    lines = describe(sc.engine, {k: getattr(cfg, k) for k in FIELDS if hasattr(cfg, k)})
    memory = sc.kv_memory(run.built.step_model)
    if memory is not None:
        lines.append(f"engine {sc.engine}: {memory.line()}")
    return lines


def _report_sweep(runs: list[Any], step_model: Any, slos: tuple[str, ...], target: float,
                  json_out: bool, fmt: str | None, all_assumptions: bool) -> None:
    from ridgeline.report.assumptions import key_assumptions
    from ridgeline.report.sweep_table import print_sweep_table
    from ridgeline.report.tables import out_for
    from ridgeline.sim.model_error import (
        annotated_latency,
        interval_origin,
        sweep_model_error_lines,
    )
    from ridgeline.sim.scenario_run import summarize_sweep

    sweep = summarize_sweep([r.sweep_point() for r in runs], slos, target,
                            step_model.assumptions())
    # Each point's model-error intervals, as a single run carries them.
    latencies = [annotated_latency(r) for r in runs]
    if json_out:
        doc = sweep.to_dict()
        for point, lat in zip(doc["sweep"], latencies, strict=True):
            point["analysis"] = {"latency": lat}
        typer.echo(json.dumps(doc, indent=2))
        return
    with out_for(fmt) as out:
        cells = model_error_cells(step_model)
        lines = sweep_model_error_lines([p.rate_req_s for p in sweep.points], latencies)
        print_sweep_table(sweep, out=out, full_assumptions=all_assumptions,
                          key_assumptions=key_assumptions(step_model, TTFT_DEFINITION),
                          model_error="\n".join(
                              ["model error, nominal 80% interval of the measured value "
                               f"({interval_origin(latencies[0]) if latencies else ''}, "
                               "step-time error propagated):",
                               *lines,
                               f"model error (cross-validated): TTFT {cells['ttft_ms']}; "
                               f"TPOT {cells['tpot_ms']}"]))


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_cmd)
