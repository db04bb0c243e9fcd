"""The streamed form of `ridgeline simulate` (--stream, --workers, --ray, or a long run):
build the workload, run `run_fleet` with a progress bar and ETA, print the metrics.
A Ctrl-C prints what finished and exits 130 (the trace footer says interrupted)."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:  # the fleet loads with a streamed run: a batch `simulate` never needs it
    from ridgeline.sim.fleet import FleetRun

# `simulate` streams by itself above this many requests (batch results hold ~13 KB each).
STREAM_AUTO_REQUESTS = 500_000


def run_streamed_command(sc: Any, built: Any, rate: float | None, trace: str | None,
                         json_out: bool, workers: int, ray_address: str | None,
                         exact_max: int, sketch_error: float) -> None:
    """`sc`/`built`: the command's `ridgeline.sim.scenario.Scenario` and its `Built`."""

    from ridgeline.sim.fleet import run_fleet
    from ridgeline.sim.scenario_run import trace_header
    from ridgeline.sim.workload import build_workload, check_context

    n = sc.requests
    wl, load, dataset = build_workload(
        n, sc.prompt, sc.output, rate_req_s=rate, arrival=sc.arrival,
        concurrency=sc.concurrency, think_time=sc.think_time,
        prefix_groups=sc.prefix_groups, prefix_tokens=sc.prefix_tokens, seed=sc.seed,
        prompt_from_replay=sc.prompt_from_replay, output_from_replay=sc.output_from_replay)
    check_context(wl, built.step_model)
    header = trace_header(sc, built, load, dataset)
    from ridgeline.report.progress import progress_for

    # A bar with an ETA in a terminal; a line every few seconds on stderr in a log.
    progress = progress_for("simulate")
    with progress:
        task = progress.add_task("simulating (streamed)", total=n)
        run = run_fleet(wl, built.config, built.step_model, built.cluster, header,
                        slos=tuple(sc.slos), trace_path=trace, workers=workers,
                        ray_address=ray_address, exact_max=exact_max,
                        relative_error=sketch_error,
                        progress=lambda d: progress.update(task, completed=d))
    report_fleet(run, sc.seed, json_out, built.step_model, sc, built, rate)
    if run.interrupted:
        # SystemExit, not typer.Exit: click's non-standalone mode returns an Exit's code
        # instead of exiting with it.
        raise SystemExit(130)


def check_streamed(rates: list[float | None], timeline: str | None, step_by_step: bool,
                   pd: Any, sketch_error: float, built: Any = None) -> None:
    """Options the streamed run does not take, as one-line errors."""
    from ridgeline.errors import RidgelineError
    from ridgeline.sim.core import engine_blocker

    if len(rates) > 1:
        raise RidgelineError("--stream/--workers/--ray: one rate at a time (not a sweep)")
    if timeline:
        raise RidgelineError("--timeline: not with --stream/--workers/--ray (the streamed "
                             "run folds the timeline into totals)")
    if step_by_step:
        raise RidgelineError("--step-by-step: not with --stream/--workers/--ray")
    why = "no engine given" if built is None else engine_blocker(built.step_model,
                                                                 built.config)
    if pd and built is not None and built.cluster.own_pools:
        raise RidgelineError("--prefill-pool/--decode-pool: not with --stream/--workers/--ray "
                             "(pools with their own layout run on the Python engine, which "
                             "does not stream P/D hand-offs)")
    if pd and why:
        raise RidgelineError("--pd: not with --stream/--workers/--ray here (P/D hand-offs "
                             f"stream only on the C engine core: {why})")
    if not 0 < sketch_error < 0.5:
        raise RidgelineError(f"--sketch-error: got {sketch_error}; allowed: (0, 0.5)")


def _fmt(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{x:,.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def report_fleet(run: FleetRun, seed: int, json_out: bool, step_model: Any,
                 sc: Any = None, built: Any = None, rate: float | None = None) -> None:
    """Print a streamed run's metrics; with its scenario `sc` and `built`, each latency
    carries its model-error intervals (`latency.<metric>.<stat>_interval80`, as
    `analysis.latency` does in a batch run's JSON)."""
    from ridgeline.sim.model_error import (
        add_model_error_for,
        interval_origin,
        model_error_lines,
    )

    s = run.summary(seed)
    if sc is not None and built is not None and not run.interrupted:
        add_model_error_for(sc, built, rate, s["latency"])
    if json_out:
        typer.echo(json.dumps({**s, "assumptions": step_model.assumptions()}, indent=2,
                              default=float))
        return
    from rich.table import Table

    from ridgeline.report.tables import out_for

    con = out_for()
    title = "ridgeline simulate — streamed" + (" (INTERRUPTED: what finished)"
                                               if run.interrupted else "")
    table = Table(title=title, title_justify="left")
    for c in ("metric", "n", "mean", "P50", "P90", "P99", "P99.9", "max", "percentiles"):
        table.add_column(c, justify="left" if c in ("metric", "percentiles") else "right")
    for key, d in s["latency"].items():
        if not d.get("available"):
            continue
        p = d["percentiles"]
        method = s["percentile_method"][key]
        table.add_row(f"{d['label']} ({d['unit']})", f"{d['count']:,}", _fmt(d["mean"]),
                      *(_fmt(p[k]["value"]) for k in ("p50", "p90", "p99", "p99.9")),
                      _fmt(d["max"]), method.split(" (")[0])
    con.print(table)
    lines = model_error_lines(s["latency"])
    if lines:
        con.print("model error, nominal 80% interval of the measured value "
                  f"({interval_origin(s['latency'])}, step-time error propagated):",
                  highlight=False, markup=False)
        for line in lines:
            con.print(line, highlight=False, markup=False)
    sketched = [k for k, m in s["percentile_method"].items() if m.startswith("sketch")]
    exact = [k for k in s["percentile_method"] if k not in sketched]
    if exact:
        con.print(f"exact percentiles (sorted sample, bootstrap 95% CIs in --json): "
                  f"{', '.join(exact)}", highlight=False)
    if sketched:
        con.print(f"sketch percentiles (each within {run.metrics.relative_error:.0%} "
                  f"relative of exact; CIs unavailable): {', '.join(sketched)}",
                  highlight=False)
    w, t = s["window"], s["throughput"]
    con.print(f"window: whole run {w['start_s']:,.1f}–{w['end_s']:,.1f} s; throughput "
              f"{_fmt(t['requests_per_s'])} req/s, {_fmt(t['output_tok_s'])} output tok/s; "
              f"mean in flight {_fmt(s['mean_in_flight'])}", highlight=False)
    if "goodput" in s:
        g = s["goodput"]
        con.print(f"goodput ({', '.join(g['slos'])}): {_fmt(g['requests_per_s'])} req/s, "
                  f"{g['attainment']:.1%} of requests meet all", highlight=False)
    m = s["simulation"]
    con.print(f"simulated {s['requests']:,} of {m['requests']:,} requests "
              f"({m['finished']:,} finished, {m['rejected']:,} rejected), "
              f"{m['engine_steps']:,} engine steps, {m['preemptions']:,} preemptions, peak KV "
              f"{m['max_kv_blocks_used']:,} blocks, in {m['wall_s']:.2f} wall s "
              f"({m['simulated_requests_per_wall_s']:,.0f} req/s); {m['backend']}, "
              f"{'C' if m['engine_core'] == 'c' else m['engine_core']} engine loop",
              highlight=False)
    for note in m["notes"]:
        con.print(f"note: {note}", highlight=False, markup=False)
    from ridgeline.report.assumptions import print_assumptions

    print_assumptions(con, step_model, False)
    con.close()
