"""`ridgeline simulate`: the serving engine on a virtual clock, under a synthetic load.

Only typer and the standard library at import time; the simulator loads inside the command.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ridgeline.commands.options import (
    MAX_NUM_SEQS,
    ActivationsOpt,
    BandwidthEffOpt,
    CalibrationOpt,
    ChunkedPrefillOpt,
    ComputeEffOpt,
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
    PpOpt,
    PrefixCachingOpt,
    SeedOpt,
    ServedModelNameOpt,
    SloOpt,
    TpOpt,
    TraceOutOpt,
    WeightsOpt,
    check_max_model_len,
    model_from,
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
# imports only typer; tests/test_scenario.py checks they agree.
DEFAULT_PROMPT = "lognormal:mean=250,sigma=1.0,max=4096"
DEFAULT_OUTPUT = "lognormal:mean=200,sigma=0.8,max=2048"


def simulate_cmd(
    model_arg: ModelArg = None,
    model: ModelOpt = "llama-3.1-8b",
    hardware: HardwareOpt = "h100-sxm",
    rate: Annotated[str | None, typer.Option(
        "--rate", help="Arrival rate in req/s; a comma list (1,2,4,8) for a latency-vs-load "
        "sweep; or 'sweep' (rates around the simulated capacity).")] = None,
    requests: Annotated[int, typer.Option("--requests", "-n", min=1,
                                          help="Requests per run.")] = 1000,
    arrival: Annotated[str, typer.Option(
        "--arrival", help="poisson, gamma:cv=2, constant, ramp:start=1,end=16, "
        "replay:path=FILE[,speedup=K] (also BurstGPT CSV, Mooncake JSONL), "
        "diurnal:peak=,trough=[,period=86400].")] = "poisson",
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", min=1, help="Closed loop: this many users, each sending its next request "
        "when the last one ends (instead of --rate).")] = None,
    think_time: Annotated[str, typer.Option(
        "--think-time", help="Closed loop: seconds a user waits between requests: 0, "
        "fixed:1.5, exponential:mean=2, uniform:min=1,max=3.")] = "0",
    prompt: Annotated[str, typer.Option(
        "--prompt", help="Prompt lengths (tokens): fixed:N, uniform:min=,max=, normal:mean=,"
        "std=, lognormal:mean=,sigma=, exponential:mean=, empirical:path=FILE.")
    ] = DEFAULT_PROMPT,
    output: Annotated[str, typer.Option("--output", help="Output lengths (same syntax).")
                      ] = DEFAULT_OUTPUT,
    prefix_groups: Annotated[int, typer.Option(
        "--prefix-groups", min=0,
        help="Shared-prefix groups: request i starts with prefix i mod G.")
    ] = 0,
    prefix_tokens: Annotated[int, typer.Option(
        "--prefix-tokens", min=0,
        help="Tokens of each group's shared prefix (added to the prompt).")
    ] = 0,
    replicas: Annotated[int, typer.Option("--replicas", min=1,
                                          help="Engine replicas (data parallel).")] = 1,
    router: Annotated[str, typer.Option(
        "--router", help="round-robin, least-outstanding, least-kv, prefix-affinity (a "
        "prefix group's requests on one replica: where its prefix is cached).")] = "round-robin",
    pd: Annotated[str | None, typer.Option(
        "--pd", help="Prefill/decode disaggregation P:D (P prefill and D decode instances; "
        "replaces --replicas).")] = None,
    kv_transfer_latency_us: Annotated[float, typer.Option(
        "--kv-transfer-latency-us", callback=number(ge=0, le=1e9),
        help="Fixed latency per P/D KV transfer.")] = 0.0,
    max_num_seqs: Annotated[int, typer.Option(
        "--max-num-seqs", min=1, max=MAX_NUM_SEQS,
        help="Most sequences in one engine step (vLLM's).")] = 256,
    max_num_batched_tokens: Annotated[int, typer.Option("--max-num-batched-tokens", min=1,
                                                                  max=10_000_000)
                                      ] = 8192,
    chunked_prefill: ChunkedPrefillOpt = True,
    prefix_caching: PrefixCachingOpt = True,
    max_model_len: MaxModelLenOpt = None,
    served_model_name: ServedModelNameOpt = None,
    block_size: Annotated[int, typer.Option("--block-size", min=1,
                                            help="KV block size (tokens).")] = 16,
    gpu_memory_utilization: Annotated[float, typer.Option(
        "--gpu-memory-utilization", callback=number(gt=0, le=1),
        help="Fraction of GPU memory for weights + KV.")] = 0.9,
    num_kv_blocks: Annotated[int | None, typer.Option(
        "--num-kv-blocks", min=1, max=10**10,
        help="Override the KV capacity from the memory model.")] = None,
    weights: WeightsOpt = None,
    kv: KvOpt = None,
    activations: ActivationsOpt = None,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    ep: EpOpt = 1,
    compute_efficiency: ComputeEffOpt = None,
    bandwidth_efficiency: BandwidthEffOpt = None,
    kernel_overhead_us: KernelOverheadOpt = None,
    calibration: CalibrationOpt = None,
    engine: EngineOpt = "vllm",
    engine_costs: EngineCostsOpt = True,
    slo: SloOpt = None,
    slo_attainment: Annotated[float, typer.Option(
        "--slo-attainment", callback=number(gt=0, le=1),
        help="Sweep: a rate meets the SLOs when at least this fraction "
        "of its requests meets all of them.")] = 0.99,
    trace: TraceOutOpt = None,
    timeline: Annotated[str | None, typer.Option(
        "--timeline", callback=writable_file,
        help="Write the engine timeline (one row per step) as CSV.")] = None,
    step_by_step: Annotated[bool, typer.Option(
        "--step-by-step", help="Reference mode: one engine step per loop iteration (slower; "
        "same trace).")] = False,
    spec_k: SpecKOpt = 0,
    spec_alpha: SpecAlphaOpt = 0.7,
    spec_draft_model: SpecDraftOpt = None,
    enforce_eager: EagerOpt = False,
    cpu_tokenize_us_per_token: CpuTokenizeOpt = 0.0,
    cpu_detokenize_us_per_event: CpuDetokenizeOpt = 0.0,
    stream: Annotated[bool | None, typer.Option(
        "--stream/--no-stream", help="Stream finished requests to the trace and to "
        "streaming metrics (memory bounded by what is in flight; whole-run window); default: "
        "on above 500,000 requests or with --workers/--ray.")] = None,
    workers: Annotated[int, typer.Option(
        "--workers", min=1, help="Shard replicas over this many processes (round-robin or "
        "prefix-affinity, open loop, no P/D: exact; other routers stay in one process).")] = 1,
    ray_address: Annotated[str | None, typer.Option(
        "--ray", help="Shard over Ray: 'local' or a cluster address (needs ridgeline[ray]).")
    ] = None,
    exact_max: Annotated[int, typer.Option(
        "--exact-max", min=0, help="Streamed: values per metric kept for exact percentiles; "
        "beyond, a sketch (--sketch-error).")] = 5_000_000,
    sketch_error: Annotated[float, typer.Option(
        "--sketch-error", callback=number(gt=0, lt=0.5),
        help="Streamed: relative error of sketch percentiles.")] = 0.01,
    json_out: JsonOpt = False,
    seed: SeedOpt = 0,
    report: ReportOpt = None,
) -> None:
    """Simulate an LLM serving engine under load; print the metrics of `analyze`."""
    from ridgeline.errors import RidgelineError
    from ridgeline.metrics.slo import parse_slos
    from ridgeline.sim.cluster import parse_pd
    from ridgeline.sim.scenario import Built, Scenario, sweep_rates_for
    from ridgeline.sim.sweep import parse_rates

    del served_model_name  # the API name: no effect on the simulated timings
    model = model_from(model_arg, model, "llama-3.1-8b")
    check_max_model_len(max_model_len, prompt, output)
    if concurrency is None and rate is None and not arrival.startswith(("ramp", "replay",
                                                                             "diurnal")):
        raise RidgelineError("--rate: give an arrival rate (req/s), a list, 'sweep', or "
                             "--concurrency for a closed loop")
    if concurrency is not None and rate is not None:
        raise RidgelineError("--rate/--concurrency: give one (open loop or closed loop)")
    if not 0 < slo_attainment <= 1:
        raise RidgelineError(f"--slo-attainment: got {slo_attainment}; allowed: (0, 1]")
    check_report_path(report)
    sc = Scenario(
        model=model, hardware=hardware, weights=weights, kv=kv, activations=activations,
        tp=tp, pp=pp, ep=ep, compute_efficiency=compute_efficiency,
        bandwidth_efficiency=bandwidth_efficiency, kernel_overhead_us=kernel_overhead_us,
        calibration=calibration, engine=engine, engine_costs=engine_costs,
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        chunked_prefill=chunked_prefill, prefix_caching=prefix_caching, block_size=block_size,
        gpu_memory_utilization=gpu_memory_utilization, num_kv_blocks=num_kv_blocks,
        requests=requests, arrival=arrival, concurrency=concurrency, think_time=think_time,
        prompt=prompt, output=output, prefix_groups=prefix_groups,
        prefix_tokens=prefix_tokens, replicas=replicas, router=router, pd=parse_pd(pd),
        kv_transfer_latency_us=kv_transfer_latency_us,
        slos=tuple(x.text for x in parse_slos(slo)), seed=seed,
        mode="step" if step_by_step else "fast", whatif=whatif_from_options(
            spec_k, spec_alpha, spec_draft_model, enforce_eager, cpu_tokenize_us_per_token,
            cpu_detokenize_us_per_event)).validate()
    from ridgeline.commands.simulate_streamed import STREAM_AUTO_REQUESTS
    from ridgeline.sim.sweep import SWEEP_FRACTIONS

    streamed = bool(stream or (stream is None and (workers > 1 or ray_address is not None
                                                   or requests > STREAM_AUTO_REQUESTS)))
    # Sizes first: before the step-time tables, the capacity probe or the workload.
    if streamed:
        _check_streamed_memory(requests)
    else:
        listed = parse_rates(rate) if concurrency is None and rate is not None else [None]
        _check_batch_memory(requests * len(listed if listed is not None else SWEEP_FRACTIONS),
                            output, stream)
    built = Built.of(sc)
    rates: list[float | None]
    if concurrency is not None or rate is None:
        rates = [None]
    else:
        parsed = parse_rates(rate)
        rates = list(parsed if parsed is not None else sweep_rates_for(sc, built))
    from ridgeline.commands.simulate_streamed import check_streamed, run_streamed_command

    if streamed:
        check_streamed(rates, timeline, step_by_step, sc.pd, sketch_error, built)
        run_streamed_command(sc, built, rates[0], trace, json_out, workers, ray_address,
                             exact_max, sketch_error)
        return
    # The pooled ITL samples (one value per token) are kept only for the report's plots.
    runs = _run_all(sc, built, rates, trace, timeline, keep_samples=bool(report))
    if len(runs) == 1:
        _report_one(runs[0], built.step_model, json_out)
    else:
        _report_sweep(runs, built.step_model, sc.slos, slo_attainment, json_out)
    if report:
        from ridgeline.commands.report import write_report_for_simulation

        typer.echo(f"report: {write_report_for_simulation(runs, built.step_model, report)}",
                   err=json_out)


# ---- running ----------------------------------------------------------------------------

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
    """Run each rate through the library (`ridgeline.sim.scenario.run_scenario`) under one
    progress bar, writing each run's trace and timeline as it finishes."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from ridgeline.sim.scenario import run_scenario

    n = sc.requests
    runs = []
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("ETA"), TimeRemainingColumn(),
                        console=Console(stderr=True), transient=True,
                        # off the terminal a bar is noise, and its closing newline would
                        # stand before a one-line error
                        disable=not sys.stderr.isatty())
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

    from ridgeline.sim.runner import TIMELINE_COLUMNS

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(TIMELINE_COLUMNS)
        w.writerows(res.timeline_rows())


# ---- reporting --------------------------------------------------------------------------


def _report_one(run: Any, step_model: Any, json_out: bool) -> None:
    summary = run.summary()
    if json_out:
        typer.echo(json.dumps({"simulation": summary, "analysis": run.analysis.to_dict(),
                               "assumptions": step_model.assumptions()}, indent=2))
        return
    from rich.console import Console

    from ridgeline.metrics.render import print_analysis

    con = Console()
    print_analysis(run.analysis, con)
    s = summary
    con.print(
        f"simulated {s['requests']:,} requests ({s['finished']:,} finished, {s['rejected']:,} "
        f"rejected) over {s['simulated_s']:,.1f} simulated s in {s['wall_s']:.2f} wall s "
        f"({s['simulated_requests_per_wall_s']:,.0f} req/s); {s['engine_steps']:,} engine "
        f"steps, mean batch {s['mean_batch_size']:.1f}, {s['preemptions']:,} preemptions, "
        f"peak KV {s['max_kv_blocks_used']:,} blocks; {s['engine_core']} engine core",
        highlight=False)
    con.print("[dim]assumptions: " + "; ".join(step_model.assumptions()) + "[/dim]",
              highlight=False)


def _report_sweep(runs: list[Any], step_model: Any, slos: tuple[str, ...], target: float,
                  json_out: bool) -> None:
    from ridgeline.sim.scenario import summarize_sweep
    from ridgeline.sim.sweep_table import print_sweep_table

    sweep = summarize_sweep([r.sweep_point() for r in runs], slos, target,
                            step_model.assumptions())
    if json_out:
        typer.echo(json.dumps(sweep.to_dict(), indent=2))
        return
    print_sweep_table(sweep)


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_cmd)
