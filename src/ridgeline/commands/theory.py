"""`ridgeline theory`: the serving math of the seeds, as small calculators.

`ridgeline theory` alone prints the seeds' worked examples; each sub-command computes one
formula for your numbers. Only typer and the standard library at import time.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from ridgeline.commands.options import JsonOpt, OutFormatOpt, number

theory_app = typer.Typer(
    rich_markup_mode=None,  # plain help, as the root app (no emoji codes, no style tags)
    help="Serving math: Amdahl, Little (and KV memory), M/M/1, M/M/c, fan-out tails, "
    "samples for a stable percentile, E2E from TTFT/TPOT.",
    no_args_is_help=False,
    invoke_without_command=True,
)


def _emit(rows: list[tuple[str, Any]], as_json: bool, title: str,
          fmt: str | None = None) -> None:
    if as_json or fmt == "json":
        typer.echo(json.dumps({k: v for k, v in rows}, indent=2))
        return
    from rich.table import Table

    from ridgeline.report.tables import out_for

    t = Table(title=title, title_justify="left", show_header=False)
    t.add_column("quantity")
    t.add_column("value", justify="right")
    for k, v in rows:
        t.add_row(k, str(v) if fmt == "csv" else _fmt(v))  # csv: numbers a program reads
    with out_for(fmt) as out:
        out.print(t)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if v == 0 or 1e-3 <= abs(v) < 1e7:
            return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.1f}"
        return f"{v:.4g}"
    return str(v)


@theory_app.callback()
def theory_examples(ctx: typer.Context, json_out: JsonOpt = False,
                    fmt: OutFormatOpt = None) -> None:
    """Without a sub-command: the seeds' worked examples, computed."""
    if ctx.invoked_subcommand is not None:
        return
    from ridgeline.theory import queueing as q
    from ridgeline.theory import stats as s

    rows: list[tuple[str, Any]] = [
        ("Amdahl f=0.3 s=2 (speedup ×)", round(q.amdahl_speedup(0.3, 2), 4)),
        ("Amdahl f=0.3 s=100 (speedup ×)", round(q.amdahl_speedup(0.3, 100), 4)),
        ("Amdahl f=0.8 s=2 (speedup ×)", round(q.amdahl_speedup(0.8, 2), 4)),
        ("Little L = 20 req/s × 8 s (requests)", q.little_in_system(20, 8)),
        ("KV = 50 req/s × 6 s × 4000 tok × 57,344 B/tok (GB)",
         round(q.little_kv_bytes(50, 6, 4000, 57_344) / 1e9, 2)),
        ("M/M/1 stay / service time at ρ=0.80", round(q.mm1(8, 10).stay_over_service(10), 3)),
        ("M/M/1 stay / service time at ρ=0.95",
         round(q.mm1(9.5, 10).stay_over_service(10), 3)),
        ("M/M/1 μ=10/s ρ=0.95: P99 time in system (s)",
         round(q.mm1_time_in_system_percentile_s(9.5, 10, 99), 3)),
        ("Fan-out 10 calls: P(some call > its P99)", round(q.fanout_tail_probability(0.99, 10),
                                                           4)),
        ("Fan-out 10 calls: page P99 = call percentile",
         round(q.fanout_call_quantile_for_page(0.99, 10) * 100, 3)),
        ("Samples for P99 with 10 beyond it", s.min_samples_for_percentile(99)),
        ("Samples for P99 within ±0.5 points (95%)", s.samples_for_rank_precision(99, 0.5)),
        ("E2E: TTFT 500 ms + 40 ms × (20 − 1) (ms)", round(q.e2e_latency_s(0.5, 0.04, 20) * 1e3,
                                                            3)),
        ("E2E: TTFT 500 ms + 40 ms × (800 − 1) (ms)",
         round(q.e2e_latency_s(0.5, 0.04, 800) * 1e3, 3)),
    ]
    _emit(rows, json_out, "ridgeline theory — the worked examples", fmt)


@theory_app.command("amdahl")
def amdahl_cmd(
    fraction: Annotated[float, typer.Option(
        "--fraction", callback=number(ge=0, le=1),
        help="Share of time of the part being optimized (0..1).")],
    speedup: Annotated[float, typer.Option(
        "--speedup", callback=number(gt=0), help="How many times faster that part gets.")],
    json_out: JsonOpt = False,
    fmt: OutFormatOpt = None,
) -> None:
    """Overall speedup 1/((1 − f) + f/s), and its ceiling 1/(1 − f)."""
    from ridgeline.theory.queueing import amdahl_limit, amdahl_speedup

    _emit([("overall speedup (×)", amdahl_speedup(fraction, speedup)),
           ("ceiling as s → ∞ (×)", amdahl_limit(fraction))], json_out, "Amdahl", fmt)


@theory_app.command("little")
def little_cmd(
    rate: Annotated[float, typer.Option("--rate", callback=number(ge=0),
                                        help="Arrival rate λ (req/s).")],
    latency_s: Annotated[float, typer.Option(
        "--latency-s", callback=number(ge=0), help="Mean time in system W (s), e.g. mean E2E.")],
    context_tokens: Annotated[float | None, typer.Option(
        "--context-tokens", callback=number(ge=0),
        help="Mean context length per request (tokens), for KV memory.")]
    = None,
    kv_bytes_per_token: Annotated[float | None, typer.Option(
        "--kv-bytes-per-token", callback=number(ge=0),
        help="KV-cache bytes per token (whole model).")] = None,
    json_out: JsonOpt = False,
    fmt: OutFormatOpt = None,
) -> None:
    """L = λW requests in flight; with a context length and KV bytes/token, the KV memory."""
    from ridgeline.theory.queueing import little_in_system, little_kv_bytes

    rows: list[tuple[str, Any]] = [("requests in system L = λW", little_in_system(rate,
                                                                                  latency_s))]
    if context_tokens is not None and kv_bytes_per_token is not None:
        kv = little_kv_bytes(rate, latency_s, context_tokens, kv_bytes_per_token)
        rows += [("KV cache in use (bytes)", kv), ("KV cache in use (GB, 1e9 B)", kv / 1e9),
                 ("KV cache in use (GiB)", kv / 2**30)]
    _emit(rows, json_out, "Little's law", fmt)


@theory_app.command("mm1")
def mm1_cmd(
    arrival_rate: Annotated[float, typer.Option("--arrival-rate", callback=number(ge=0),
                                                help="λ (req/s).")],
    service_rate: Annotated[float, typer.Option("--service-rate", callback=number(gt=0),
                                                help="μ (req/s).")],
    percentile: Annotated[list[float] | None, typer.Option(
        "--percentile", callback=number(gt=0, lt=100),
        help="Percentiles of the time in system / in queue (repeatable).")]
    = None,
    json_out: JsonOpt = False,
    fmt: OutFormatOpt = None,
) -> None:
    """M/M/1: mean and percentiles of the time in system and in the queue."""
    from ridgeline.theory.queueing import (
        mm1,
        mm1_time_in_system_percentile_s,
        mm1_wait_percentile_s,
    )

    r = mm1(arrival_rate, service_rate)
    rows: list[tuple[str, Any]] = [
        ("utilization ρ", r.utilization),
        ("mean time in system W (s)", r.mean_time_in_system_s),
        ("W / service time (×)", r.stay_over_service(service_rate)),
        ("mean wait in queue Wq (s)", r.mean_wait_s),
        ("mean number in system L", r.mean_in_system),
    ]
    for q in percentile or [50.0, 90.0, 99.0]:
        rows.append((f"P{q:g} time in system (s)",
                     mm1_time_in_system_percentile_s(arrival_rate, service_rate, q)))
        rows.append((f"P{q:g} wait in queue (s)",
                     mm1_wait_percentile_s(arrival_rate, service_rate, q)))
    _emit(rows, json_out, "M/M/1", fmt)


@theory_app.command("mmc")
def mmc_cmd(
    arrival_rate: Annotated[float, typer.Option("--arrival-rate", callback=number(ge=0),
                                                help="λ (req/s).")],
    service_rate: Annotated[float, typer.Option("--service-rate", callback=number(gt=0),
                                                help="μ per replica (req/s).")],
    servers: Annotated[int, typer.Option("--servers", "-c", min=1, help="Replicas c.")],
    percentile: Annotated[list[float] | None, typer.Option(
        "--percentile", callback=number(gt=0, lt=100),
        help="Percentiles of the queueing wait (repeatable).")] = None,
    json_out: JsonOpt = False,
    fmt: OutFormatOpt = None,
) -> None:
    """M/M/c (Erlang C): probability of waiting, mean wait and time in system."""
    from ridgeline.theory.queueing import mmc, mmc_wait_percentile_s

    r = mmc(arrival_rate, service_rate, servers)
    rows: list[tuple[str, Any]] = [
        ("utilization per replica ρ", r.utilization),
        ("P(wait) (Erlang C)", r.prob_wait),
        ("mean wait in queue Wq (s)", r.mean_wait_s),
        ("mean time in system W (s)", r.mean_time_in_system_s),
        ("mean number in system L", r.mean_in_system),
    ]
    for q in percentile or [90.0, 99.0]:
        rows.append((f"P{q:g} wait in queue (s)",
                     mmc_wait_percentile_s(arrival_rate, service_rate, servers, q)))
    _emit(rows, json_out, "M/M/c", fmt)


@theory_app.command("fanout")
def fanout_cmd(
    calls: Annotated[int, typer.Option("--calls", "-k", min=1, help="Parallel calls per "
                                       "page/request.")],
    percentile: Annotated[float, typer.Option("--percentile", callback=number(gt=0, lt=100),
                                              help="Per-call percentile, e.g. 99.")] = 99.0,
    json_out: JsonOpt = False,
    fmt: OutFormatOpt = None,
) -> None:
    """Tail amplification: a page waiting for the slowest of k calls."""
    from ridgeline.theory.queueing import (
        fanout_call_quantile_for_page,
        fanout_page_quantile,
        fanout_tail_probability,
    )

    q = percentile / 100.0
    _emit([
        (f"P(some call > its P{percentile:g})", fanout_tail_probability(q, calls)),
        (f"a call's P{percentile:g} is the page's percentile", fanout_page_quantile(q, calls)
         * 100),
        (f"page P{percentile:g} needs the call percentile",
         fanout_call_quantile_for_page(q, calls) * 100),
    ], json_out, "Fan-out", fmt)


@theory_app.command("samples")
def samples_cmd(
    percentile: Annotated[float, typer.Option("--percentile", callback=number(gt=0, lt=100),
                                              help="e.g. 99.")] = 99.0,
    tail: Annotated[int, typer.Option("--tail", min=1, help="Samples wanted beyond the "
                                      "percentile.")] = 10,
    half_width: Annotated[float, typer.Option("--half-width", callback=number(ge=1e-6, lt=100),
                                              help="Rank precision in percentile points (±).")
                          ] = 0.5,
    have: Annotated[int | None, typer.Option("--have", min=1, help="A sample size to judge.")]
    = None,
    json_out: JsonOpt = False,
    fmt: OutFormatOpt = None,
) -> None:
    """How many samples a percentile needs to be more than noise."""
    from ridgeline.theory.stats import (
        min_samples_for_percentile,
        rank_interval_pct,
        samples_for_rank_precision,
    )

    rows: list[tuple[str, Any]] = [
        (f"samples with {tail} beyond P{percentile:g}",
         min_samples_for_percentile(percentile, tail)),
        (f"samples for P{percentile:g} within ±{half_width:g} points (95%)",
         samples_for_rank_precision(percentile, half_width)),
    ]
    if have:
        lo, hi = rank_interval_pct(percentile, have)
        rows.append((f"with {have} samples, P{percentile:g} is really between",
                     f"P{lo:.2f} and P{hi:.2f}"))
    _emit(rows, json_out, "Samples for a stable percentile", fmt)


@theory_app.command("e2e")
def e2e_cmd(
    ttft_ms: Annotated[float, typer.Option("--ttft-ms", callback=number(ge=0),
                                           help="Time to first token (ms).")],
    tpot_ms: Annotated[float, typer.Option("--tpot-ms", callback=number(ge=0),
                                           help="Time per output token (ms).")],
    output_tokens: Annotated[int, typer.Option("--output-tokens", min=1)],
    json_out: JsonOpt = False,
    fmt: OutFormatOpt = None,
) -> None:
    """E2E = TTFT + TPOT × (N − 1), and TTFT's share of it."""
    from ridgeline.theory.queueing import e2e_latency_s

    e2e = e2e_latency_s(ttft_ms / 1e3, tpot_ms / 1e3, output_tokens) * 1e3
    _emit([("E2E (ms)", e2e), ("TTFT share", ttft_ms / e2e)], json_out, "E2E latency", fmt)


def register(app: typer.Typer) -> None:
    """Add `theory` to the `ridgeline` app."""
    app.add_typer(theory_app, name="theory")
