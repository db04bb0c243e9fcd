"""`ridgeline report`: one self-contained HTML file (or markdown) from traces, a rate sweep,
an estimate and timelines. `ridgeline plot ...` writes one plot as PNG or SVG.

Only typer and the standard library at import time; matplotlib loads inside the commands.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ridgeline.commands.options import (
    ActivationsOpt,
    EpOpt,
    KvOpt,
    PpOpt,
    SeedOpt,
    SloOpt,
    TpOpt,
    WeightsOpt,
    number,
)

ReportOpt = Annotated[str | None, typer.Option(
    "--report", help="Also write a self-contained HTML report here at the end (.md: "
    "markdown).")]
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="Trace format: auto, ridgeline, "
                                        "vllm, aiperf, guidellm, llmperf.")]
WindowOpt = Annotated[str | None, typer.Option(
    "--window", help="Measurement window START:END, 'all' or 'auto' (as `analyze`).")]
SweepOpt = Annotated[list[str] | None, typer.Option(
    "--sweep", help="Traces of a rate sweep (one per rate; a glob pattern such as "
    "'out/sweep.rate*.jsonl' is expanded; repeatable) for the latency-vs-load plot, or of a "
    "closed-loop concurrency sweep (latency vs concurrency and vs achieved throughput); "
    "the points' summary also goes to <report>.sweep.csv.")]
TimelineOpt = Annotated[list[str] | None, typer.Option(
    "--timeline", help="Engine timeline CSV of `simulate --timeline` (repeatable).")]
CalibrationOpt = Annotated[str | None, typer.Option(
    "--calibration", help="JSON of measured kernels (e.g. `ridgeline calibrate` output) to "
    "overlay on the roofline.")]
# The same ceilings as a length spec (10 M tokens) and --max-num-seqs: past them the
# roofline's numbers overflow and the plots have no axis.
BatchOpt = Annotated[float, typer.Option("--batch", "-b", callback=number(ge=1, le=65_536),
                                         help="Estimate: sequences per step.")]
PromptOpt = Annotated[float, typer.Option("--prompt", "-p", callback=number(ge=1, le=1e7),
                                          help="Estimate: prompt tokens.")]
OutputOpt = Annotated[float, typer.Option("--output", "-o", callback=number(ge=1, le=1e7),
                                          help="Estimate: output tokens.")]
HwOpt = Annotated[str, typer.Option("--hardware", "-g", help="Estimate: catalog GPU or "
                                    "hardware JSON.")]


def report_cmd(
    inputs: Annotated[list[str] | None, typer.Argument(
        help="Traces or peer result files (anything `analyze` reads) and timeline CSVs.",
        show_default=False)] = None,
    out: Annotated[str | None, typer.Option("--out", help="Report file (.html; .md with "
                                            "--markdown) [default: report.html or report.md]."
                                            )] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Markdown for a pull request "
                                           "(PNGs written to <name>_files/).")] = False,
    sweep: SweepOpt = None,
    timeline: TimelineOpt = None,
    estimate_model: Annotated[str | None, typer.Option(
        "--estimate-model", help="Add the roofline prediction of this model (catalog name or "
        "config.json).")] = None,
    hardware: HwOpt = "h100-sxm",
    batch: BatchOpt = 32,
    prompt: PromptOpt = 1024,
    output: OutputOpt = 256,
    weights: WeightsOpt = None,
    kv: KvOpt = None,
    activations: ActivationsOpt = None,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    ep: EpOpt = 1,
    calibration: CalibrationOpt = None,
    slo: SloOpt = None,
    window: WindowOpt = None,
    fmt: FormatOpt = "auto",
    title: Annotated[str | None, typer.Option("--title", help="Report title.")] = None,
    seed: SeedOpt = 0,
) -> None:
    """Write a self-contained HTML report (no network needed to open it): run headers,
    metrics with CIs, plots, comparison, advice."""
    from ridgeline.errors import RidgelineError
    from ridgeline.report.build import collect, write

    if out is None:
        out = "report.md" if markdown else "report.html"
    est = None
    if estimate_model is not None:
        est = dict(model=estimate_model, hardware=hardware, weights=weights, kv=kv,
                   activations=activations, tp=tp, pp=pp, ep=ep, batch=batch, prompt=prompt,
                   output=output)
    if not out.lower().endswith((".md", ".markdown") if markdown else (".html", ".htm")):
        raise RidgelineError(f"--out: got {out!r}; allowed: a "
                             + (".md file with --markdown" if markdown else ".html file"))
    data = collect(list(inputs or []), sweep=sweep, timeline=timeline, estimate=est,
                   calibration=calibration, slos=slo, window=window, seed=seed, fmt=fmt,
                   title=title)
    path = write(data, out, markdown=markdown)
    typer.echo(f"report: {path}")


def check_report_path(path: str | None) -> None:
    """Fail before a run, not after it, when `--report` names an unusable file."""
    if path is None:
        return
    from pathlib import Path

    from ridgeline.errors import RidgelineError

    p = Path(path)
    if p.suffix.lower() not in (".html", ".htm", ".md", ".markdown") or p.is_dir():
        raise RidgelineError(f"--report: got {path!r}; allowed: an .html file name (or .md "
                             "for markdown)")


def write_report_for_traces(traces: list[str], out: str, *, sweep: bool = False,
                            slos: list[str] | None = None, seed: int = 0,
                            title: str | None = None) -> str:
    """`bench --report`: the traces it wrote, as runs (or as a sweep when `sweep`)."""
    from ridgeline.report.build import collect, write

    data = collect([] if sweep else traces, sweep=traces if sweep else None, slos=slos,
                   seed=seed, title=title)
    return str(write(data, out, markdown=out.lower().endswith((".md", ".markdown"))))


def write_report_for_simulation(runs: list[Any], step_model: Any, out: str) -> str:
    """`simulate --report`: the in-memory runs (`ridgeline.sim.scenario_run.ScenarioRun`)."""
    from ridgeline.report.build import simulation_report_data, write

    data = simulation_report_data(
        [{"rate": r.rate_req_s, "analysis": r.analysis, "load": r.load, "result": r.result,
          "trace": r.result.to_trace(r.header)} for r in runs], step_model)
    return str(write(data, out, markdown=out.lower().endswith((".md", ".markdown"))))


# ---- ridgeline plot -------------------------------------------------------------------------

plot_app = typer.Typer(help="Write one plot as PNG or SVG (the file name's suffix decides).",
                       no_args_is_help=True)
OutOpt = Annotated[str, typer.Option("--out", help="Output file: .png or .svg.")]
PlotModelOpt = Annotated[str, typer.Option("--model", "-m", help="Catalog model or "
                                           "config.json.")]


def _save(fig: Any, out: str) -> None:
    from ridgeline.report.style import close, save_figure

    path = save_figure(fig, out)
    close(fig)
    typer.echo(f"plot: {path}")


def _check_out(out: str) -> None:
    from ridgeline.report.style import figure_format

    figure_format(out)  # a bad suffix fails before any work


@plot_app.command("roofline")
def plot_roofline_cmd(
    out: OutOpt,
    model: PlotModelOpt = "llama-3.1-8b", hardware: HwOpt = "h100-sxm",
    batch: BatchOpt = 32, prompt: PromptOpt = 1024, output: OutputOpt = 256,
    weights: WeightsOpt = None, kv: KvOpt = None, activations: ActivationsOpt = None,
    tp: TpOpt = 1, pp: PpOpt = 1, ep: EpOpt = 1, calibration: CalibrationOpt = None,
) -> None:
    """Roofline of the hardware with the estimate's operators (prefill and decode)."""
    _check_out(out)
    from ridgeline.report.estimate_view import estimate_view
    from ridgeline.report.roofline import load_measured_points, plot_roofline

    v = estimate_view(model, hardware, weights=weights, kv=kv, activations=activations, tp=tp,
                      pp=pp, ep=ep, batch=batch, prompt=prompt, output=output)
    measured = load_measured_points(calibration) if calibration else None
    _save(plot_roofline(v["roofline"], measured,
                        title=f"Roofline: {v['config']['model']} on {v['config']['hardware']}"
                        f" (B={batch:g}, S={prompt:g})"), out)


@plot_app.command("ops")
def plot_ops_cmd(
    out: OutOpt,
    model: PlotModelOpt = "llama-3.1-8b", hardware: HwOpt = "h100-sxm",
    batch: BatchOpt = 32, prompt: PromptOpt = 1024, output: OutputOpt = 256,
    weights: WeightsOpt = None, kv: KvOpt = None, activations: ActivationsOpt = None,
    tp: TpOpt = 1, pp: PpOpt = 1, ep: EpOpt = 1,
) -> None:
    """Per-operator time breakdown of the prefill and decode steps (stacked bars)."""
    _check_out(out)
    from ridgeline.report.breakdown import plot_op_breakdown
    from ridgeline.report.estimate_view import estimate_view

    v = estimate_view(model, hardware, weights=weights, kv=kv, activations=activations, tp=tp,
                      pp=pp, ep=ep, batch=batch, prompt=prompt, output=output)
    _save(plot_op_breakdown(v["ops"]), out)


@plot_app.command("load")
def plot_load_cmd(
    traces: Annotated[list[str], typer.Argument(help="Traces of a rate sweep (one per rate; "
                                                "simulated and measured may be mixed) or of "
                                                "a closed-loop concurrency sweep.")],
    out: OutOpt,
    slo: SloOpt = None, fmt: FormatOpt = "auto", seed: SeedOpt = 0,
) -> None:
    """Latency vs load: TTFT/TPOT P50/P99 with CI bands, throughput, goodput, the knee."""
    _check_out(out)
    from ridgeline.report.build import collect
    from ridgeline.report.load import plot_latency_vs_concurrency, plot_latency_vs_load

    data = collect([], sweep=traces, slos=slo, seed=seed, fmt=fmt)
    if data.concurrency_sweeps and not data.sweeps:
        _save(plot_latency_vs_concurrency(data.concurrency_sweeps), out)
    else:
        _save(plot_latency_vs_load(data.sweeps), out)


@plot_app.command("cdf")
def plot_cdf_cmd(
    traces: Annotated[list[str], typer.Argument(help="One or more traces.")],
    out: OutOpt,
    window: WindowOpt = None, fmt: FormatOpt = "auto", seed: SeedOpt = 0,
) -> None:
    """CDFs of TTFT, TPOT, ITL and E2E, one line per trace."""
    _check_out(out)
    from ridgeline.errors import RidgelineError
    from ridgeline.report.build import collect
    from ridgeline.report.cdf import plot_cdfs

    data = collect(traces, window=window, seed=seed, fmt=fmt)
    if not data.runs:
        raise RidgelineError("traces: no trace among the inputs (timeline CSVs go to "
                             "`ridgeline plot timeline`)")
    _save(plot_cdfs([(r.label, r.analysis) for r in data.runs]), out)


@plot_app.command("timeline")
def plot_timeline_cmd(
    timeline_csv: Annotated[str, typer.Argument(help="CSV of `simulate --timeline`.")],
    out: OutOpt,
) -> None:
    """Engine timeline: batch size, prefill tokens, KV blocks in use, queue length."""
    _check_out(out)
    from ridgeline.errors import RidgelineError
    from ridgeline.report.timeline import plot_engine_timeline, read_timeline_csv

    tl = read_timeline_csv(timeline_csv)
    if tl["end_s"].size == 0:
        raise RidgelineError(f"timeline: {timeline_csv} holds no engine steps; nothing to plot")
    _save(plot_engine_timeline(tl), out)


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
    app.add_typer(plot_app, name="plot")
