"""`ridgeline simulate`: the serving engine on a virtual clock, under a synthetic load.

Only typer and the standard library at import time; the simulator loads inside the command.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from ridgeline.commands.options import (
    ActivationsOpt,
    BandwidthEffOpt,
    ComputeEffOpt,
    EpOpt,
    HardwareOpt,
    JsonOpt,
    KernelOverheadOpt,
    KvOpt,
    ModelOpt,
    PpOpt,
    SeedOpt,
    SloOpt,
    TpOpt,
    TraceOutOpt,
    WeightsOpt,
)

DEFAULT_PROMPT = "lognormal:mean=250,sigma=1.0,max=4096"
DEFAULT_OUTPUT = "lognormal:mean=200,sigma=0.8,max=2048"


def simulate_cmd(
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
        "--concurrency", help="Closed loop: this many users, each sending its next request "
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
        "--prefix-groups", help="Shared-prefix groups: request i starts with prefix i mod G.")
    ] = 0,
    prefix_tokens: Annotated[int, typer.Option(
        "--prefix-tokens", help="Tokens of each group's shared prefix (added to the prompt).")
    ] = 0,
    replicas: Annotated[int, typer.Option("--replicas", min=1,
                                          help="Engine replicas (data parallel).")] = 1,
    router: Annotated[str, typer.Option(
        "--router", help="round-robin, least-outstanding, least-kv.")] = "round-robin",
    pd: Annotated[str | None, typer.Option(
        "--pd", help="Prefill/decode disaggregation P:D (P prefill and D decode instances; "
        "replaces --replicas).")] = None,
    kv_transfer_latency_us: Annotated[float, typer.Option(
        "--kv-transfer-latency-us", help="Fixed latency per P/D KV transfer.")] = 0.0,
    max_num_seqs: Annotated[int, typer.Option("--max-num-seqs", min=1)] = 256,
    max_num_batched_tokens: Annotated[int, typer.Option("--max-num-batched-tokens", min=1)
                                      ] = 8192,
    chunked_prefill: Annotated[bool, typer.Option(
        "--chunked-prefill/--no-chunked-prefill", help="Chunked prefill (vLLM V1 default: "
        "on).")] = True,
    prefix_caching: Annotated[bool, typer.Option(
        "--prefix-caching/--no-prefix-caching", help="Automatic prefix caching (vLLM V1 "
        "default: on).")] = True,
    block_size: Annotated[int, typer.Option("--block-size", min=1,
                                            help="KV block size (tokens).")] = 16,
    gpu_memory_utilization: Annotated[float, typer.Option(
        "--gpu-memory-utilization", help="Fraction of GPU memory for weights + KV.")] = 0.9,
    num_kv_blocks: Annotated[int | None, typer.Option(
        "--num-kv-blocks", help="Override the KV capacity from the memory model.")] = None,
    weights: WeightsOpt = "bf16",
    kv: KvOpt = None,
    activations: ActivationsOpt = "bf16",
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    ep: EpOpt = 1,
    compute_efficiency: ComputeEffOpt = None,
    bandwidth_efficiency: BandwidthEffOpt = None,
    kernel_overhead_us: KernelOverheadOpt = None,
    slo: SloOpt = None,
    slo_attainment: Annotated[float, typer.Option(
        "--slo-attainment", help="Sweep: a rate meets the SLOs when at least this fraction "
        "of its requests meets all of them.")] = 0.99,
    trace: TraceOutOpt = None,
    timeline: Annotated[str | None, typer.Option(
        "--timeline", help="Write the engine timeline (one row per step) as CSV.")] = None,
    step_by_step: Annotated[bool, typer.Option(
        "--step-by-step", help="Reference mode: one engine step per loop iteration (slower; "
        "same trace).")] = False,
    stream: Annotated[bool | None, typer.Option(
        "--stream/--no-stream", help="Stream finished requests to the trace and to "
        "streaming metrics (memory bounded by what is in flight; whole-run window); default: "
        "on above 500,000 requests or with --workers/--ray.")] = None,
    workers: Annotated[int, typer.Option(
        "--workers", min=1, help="Shard replicas over this many processes (round-robin, "
        "open loop, no P/D: exact; other routers stay in one process).")] = 1,
    ray_address: Annotated[str | None, typer.Option(
        "--ray", help="Shard over Ray: 'local' or a cluster address (needs ridgeline[ray]).")
    ] = None,
    exact_max: Annotated[int, typer.Option(
        "--exact-max", min=0, help="Streamed: values per metric kept for exact percentiles; "
        "beyond, a sketch (--sketch-error).")] = 5_000_000,
    sketch_error: Annotated[float, typer.Option(
        "--sketch-error", help="Streamed: relative error of sketch percentiles.")] = 0.01,
    json_out: JsonOpt = False,
    seed: SeedOpt = 0,
) -> None:
    """Simulate an LLM serving engine under load; print the metrics of `analyze`."""
    from ridgeline.errors import RidgelineError
    from ridgeline.metrics.slo import parse_slos
    from ridgeline.perf.serving_model import RooflineStepTime
    from ridgeline.sim.cluster import ClusterConfig, parse_pd
    from ridgeline.sim.engine import EngineConfig, kv_blocks_from_memory
    from ridgeline.sim.sweep import parse_rates
    from ridgeline.workload.lengths import parse_lengths
    from ridgeline.workload.think import parse_think_time

    slos = parse_slos(slo)
    parse_lengths(prompt, "--prompt")
    parse_lengths(output, "--output")
    parse_think_time(think_time)
    if concurrency is None and rate is None and not arrival.startswith(("ramp", "replay",
                                                                             "diurnal")):
        raise RidgelineError("--rate: give an arrival rate (req/s), a list, 'sweep', or "
                             "--concurrency for a closed loop")
    if concurrency is not None and rate is not None:
        raise RidgelineError("--rate/--concurrency: give one (open loop or closed loop)")
    if not 0 < slo_attainment <= 1:
        raise RidgelineError(f"--slo-attainment: got {slo_attainment}; allowed: (0, 1]")
    step_model = RooflineStepTime.from_names(
        model=model, hardware=hardware, weights=weights, kv=kv, activations=activations,
        tp=tp, pp=pp, ep=ep, compute_efficiency=compute_efficiency,
        bandwidth_efficiency=bandwidth_efficiency, kernel_overhead_us=kernel_overhead_us,
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs)
    if num_kv_blocks is None:
        num_kv_blocks = kv_blocks_from_memory(step_model, gpu_memory_utilization, block_size,
                                              f"{model} on {hardware}")
    config = EngineConfig(max_num_seqs=max_num_seqs,
                          max_num_batched_tokens=max_num_batched_tokens,
                          chunked_prefill=chunked_prefill, block_size_tokens=block_size,
                          num_kv_blocks=num_kv_blocks, enable_prefix_caching=prefix_caching)
    pd_split = parse_pd(pd)
    cluster = ClusterConfig(
        replicas=replicas, router=router, pd=pd_split,
        kv_bytes_per_token=step_model.kv_bytes_per_token,
        link_bandwidth_bytes_s=step_model.interconnect_bandwidth_bytes_s,
        kv_transfer_latency_s=kv_transfer_latency_us * 1e-6)
    rates: list[float | None]
    if concurrency is not None or rate is None:
        rates = [None]
    else:
        parsed = parse_rates(rate)
        if parsed is None:
            parsed = _rates_from_capacity(requests, prompt, output, config, step_model,
                                          cluster, seed, prefix_groups, prefix_tokens)
        rates = list(parsed)
    ctx = dict(model=model, hardware=hardware, requests=requests, arrival=arrival,
               concurrency=concurrency, think_time=think_time, prompt=prompt, output=output,
               prefix_groups=prefix_groups, prefix_tokens=prefix_tokens, config=config,
               step_model=step_model, cluster=cluster, slos=slos, seed=seed,
               mode="step" if step_by_step else "fast")
    if stream or (stream is None and (workers > 1 or ray_address is not None
                                      or requests > 500_000)):
        from ridgeline.sim.fleet_command import check_streamed, run_streamed_command

        check_streamed(rates, timeline, step_by_step, pd_split, sketch_error)
        run_streamed_command(ctx, rates[0], trace, json_out, workers, ray_address, exact_max,
                             sketch_error, _header)
        return
    runs = _run_all(rates, ctx, trace, timeline)
    if len(runs) == 1:
        _report_one(runs[0], step_model, json_out)
    else:
        _report_sweep(runs, step_model, slos, slo_attainment, json_out)


# ---- running ----------------------------------------------------------------------------


def _rates_from_capacity(requests: int, prompt: str, output: str, config: Any,
                         step_model: Any, cluster: Any, seed: int, prefix_groups: int,
                         prefix_tokens: int) -> list[float]:
    """Saturation throughput from a run with every request arriving at once."""
    import numpy as np

    from ridgeline.sim.runner import simulate
    from ridgeline.sim.sweep import sweep_rates
    from ridgeline.sim.workload import build_workload

    n = min(requests, 2000)
    wl, _, _ = build_workload(n, prompt, output, rate_req_s=1.0, arrival="constant",
                              prefix_groups=prefix_groups, prefix_tokens=prefix_tokens,
                              seed=seed)
    wl.arrival_s = np.zeros(n)
    res = simulate(wl, config, step_model, cluster)
    span = float(np.nanmax(res.end_s))
    return sweep_rates(n / span)


def _header(ctx: dict[str, Any], load: dict[str, Any], dataset: dict[str, Any]) -> Any:
    from ridgeline.trace.schema import TraceHeader

    desc = ctx["step_model"].describe()
    cfg = ctx["config"]
    return TraceHeader(
        source="simulate", clock="virtual (simulated seconds; t=0 is the first arrival)",
        model=desc.get("model", ctx["model"]), hardware=desc.get("hardware", ctx["hardware"]),
        engine="ridgeline-sim", precision=desc.get("precision", {}),
        parallelism=desc.get("parallelism", {}),
        engine_config={**cfg.__dict__, "kv_capacity_tokens": cfg.kv_capacity_tokens,
                       **ctx["cluster"].describe(), "mode": ctx["mode"]},
        load=load, dataset=dataset, seed=ctx["seed"],
        )


def _run_all(rates: list[float | None], ctx: dict[str, Any], trace: str | None,
             timeline: str | None) -> list[dict[str, Any]]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from ridgeline.metrics.analysis import analyze
    from ridgeline.sim.runner import simulate
    from ridgeline.sim.workload import build_workload

    n = ctx["requests"]
    runs = []
    from rich.progress import TimeRemainingColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("ETA"), TimeRemainingColumn(),
                        console=Console(stderr=True), transient=True)
    with progress:
        task = progress.add_task("simulating", total=n * len(rates))
        for k, rate in enumerate(rates):
            wl, load, dataset = build_workload(
                n, ctx["prompt"], ctx["output"], rate_req_s=rate, arrival=ctx["arrival"],
                concurrency=ctx["concurrency"], think_time=ctx["think_time"],
                prefix_groups=ctx["prefix_groups"], prefix_tokens=ctx["prefix_tokens"],
                seed=ctx["seed"])
            progress.update(task, description=f"simulating {load.get('rate_req_s', '')} req/s"
                            if rate else "simulating")
            base = k * n
            t0 = time.perf_counter()
            res = simulate(wl, ctx["config"], ctx["step_model"], ctx["cluster"],
                           mode=ctx["mode"],
                           progress=lambda d, base=base: progress.update(task,
                                                                         completed=base + d))
            wall_s = time.perf_counter() - t0
            progress.update(task, completed=base + n)
            header = _header(ctx, load, dataset)
            tr = res.to_trace(header)
            result = analyze(tr, slos=ctx["slos"], seed=ctx["seed"])
            suffix = f".rate{rate:g}" if len(rates) > 1 and rate is not None else ""
            if trace:
                _write_trace(_with_suffix(trace, suffix), header, res)
            if timeline:
                _write_timeline(_with_suffix(timeline, suffix), res)
            runs.append({"rate": rate, "result": res, "analysis": result, "wall_s": wall_s,
                         "load": load})
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


def _sim_summary(run: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    res = run["result"]
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
        "wall_s": run["wall_s"],
        "simulated_requests_per_wall_s": n / run["wall_s"] if run["wall_s"] > 0 else math.inf,
        "mode": res.mode,
        "instances": res.roles,
        "engine_stats": res.engine_stats,
    }


def _report_one(run: dict[str, Any], step_model: Any, json_out: bool) -> None:
    summary = _sim_summary(run)
    if json_out:
        typer.echo(json.dumps({"simulation": summary, "analysis": run["analysis"].to_dict(),
                               "assumptions": step_model.assumptions()}, indent=2))
        return
    from rich.console import Console

    from ridgeline.metrics.render import print_analysis

    con = Console()
    print_analysis(run["analysis"], con)
    s = summary
    con.print(
        f"simulated {s['requests']:,} requests ({s['finished']:,} finished, {s['rejected']:,} "
        f"rejected) over {s['simulated_s']:,.1f} simulated s in {s['wall_s']:.2f} wall s "
        f"({s['simulated_requests_per_wall_s']:,.0f} req/s); {s['engine_steps']:,} engine "
        f"steps, mean batch {s['mean_batch_size']:.1f}, {s['preemptions']:,} preemptions, "
        f"peak KV {s['max_kv_blocks_used']:,} blocks", highlight=False)
    con.print("[dim]assumptions: " + "; ".join(step_model.assumptions()) + "[/dim]",
              highlight=False)


def _report_sweep(runs: list[dict[str, Any]], step_model: Any, slos: Any, target: float,
                  json_out: bool) -> None:
    from ridgeline.sim.sweep import KNEE_FACTOR, SweepPoint, best_rate_index, knee_index

    points = []
    for run in runs:
        a = run["analysis"]
        res = run["result"]

        def pct(key: str, p: str, a: Any = a) -> float:
            d = a.latency.get(key)
            if d is None or d.unavailable or p not in d.percentiles:
                return math.nan
            return float(d.percentiles[p].value)

        g = a.goodput
        points.append(SweepPoint(
            rate_req_s=run["rate"], throughput_req_s=a.throughput.requests_s,
            output_tok_s=a.throughput.output_tok_s,
            ttft_p50_ms=pct("ttft_ms", "p50"), ttft_p99_ms=pct("ttft_ms", "p99"),
            tpot_p50_ms=pct("tpot_ms", "p50"), tpot_p99_ms=pct("tpot_ms", "p99"),
            goodput_req_s=g.requests_s if g else math.nan,
            attainment=g.attainment if g else math.nan,
            preemptions=int(res.preemptions.sum()),
            rejected=int(sum(s == "rejected" for s in res.status))))
    rates = [p.rate_req_s for p in points]
    knee = knee_index(rates, [p.ttft_p99_ms for p in points])
    best = best_rate_index(rates, [p.attainment for p in points], target) if slos else None
    if json_out:
        typer.echo(json.dumps({
            "sweep": [p.to_dict() for p in points],
            "knee_rate_req_s": rates[knee] if knee is not None else None,
            "knee_rule": f"highest rate with P99 TTFT <= {KNEE_FACTOR:g} x its value at the "
                         "lowest rate",
            "slos": [s.text for s in slos],
            "max_rate_meeting_slos_req_s": rates[best] if best is not None else None,
            "slo_attainment_target": target,
            "assumptions": step_model.assumptions(),
        }, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    from ridgeline.metrics.render import fmt

    con = Console()
    table = Table(title="ridgeline simulate — latency vs load", title_justify="left")
    cols = ["rate (req/s)", "throughput (req/s)", "output (tok/s)", "TTFT P50 (ms)",
            "TTFT P99 (ms)", "TPOT P50 (ms)", "TPOT P99 (ms)", "preempt"]
    if slos:
        cols += ["goodput (req/s)", "SLO met"]
    for c in cols:
        table.add_column(c, justify="right")
    for i, p in enumerate(points):
        mark = " ◀ knee" if i == knee else ""
        row = [f"{p.rate_req_s:g}{mark}", fmt(p.throughput_req_s), fmt(p.output_tok_s),
               fmt(p.ttft_p50_ms), fmt(p.ttft_p99_ms), fmt(p.tpot_p50_ms), fmt(p.tpot_p99_ms),
               f"{p.preemptions:,}"]
        if slos:
            row += [fmt(p.goodput_req_s),
                    f"{p.attainment:.1%}" if math.isfinite(p.attainment) else "—"]
        table.add_row(*row)
    con.print(table)
    con.print(f"knee: highest rate with P99 TTFT <= {KNEE_FACTOR:g}x its value at the lowest "
              f"rate: {rates[knee]:g} req/s" if knee is not None else "knee: not found",
              highlight=False)
    if slos:
        texts = ", ".join(s.text for s in slos)
        con.print(f"highest rate meeting {texts} for >= {target:.0%} of requests: "
                  + (f"{rates[best]:g} req/s" if best is not None else "none of the rates"),
                  highlight=False)
    con.print("[dim]assumptions: " + "; ".join(step_model.assumptions()) + "[/dim]",
              highlight=False)


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_cmd)
