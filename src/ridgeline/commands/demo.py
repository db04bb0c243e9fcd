"""`ridgeline demo`: the whole pipeline on built-in defaults, no GPU, no network.

predict (estimate) -> simulate a load sweep -> measure the emulator with the load generator
-> simulate the same workload -> compare measurement and simulation with bootstrap CIs
-> write one self-contained HTML report of all of it and print where it is.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ridgeline.commands.options import writable_dir


def demo_cmd(
    out_dir: Annotated[
        str, typer.Option("--out-dir", callback=writable_dir,
                          help="Where the demo writes its traces.")
    ] = "ridgeline-demo",
    model: Annotated[str, typer.Option("--model", "-m", help="Catalog model.")] = "llama-3.1-8b",
    hardware: Annotated[
        str, typer.Option("--hardware", "-g", help="Catalog GPU.")
    ] = "h100-sxm",
    quick: Annotated[
        bool, typer.Option("--quick", help="Skip the emulator measurement (seconds, not a minute).")
    ] = False,
    report: Annotated[str | None, typer.Option(
        "--report", help="Where to write the HTML report (default: <out-dir>/report.html).")
    ] = None,
    assumptions: Annotated[
        bool, typer.Option("--assumptions", help="Print every assumption with its provenance "
                           "(default: the few that change the answer), each once.")
    ] = False,
    real: Annotated[
        bool, typer.Option("--real", help="Instead: the whole loop on a local llama.cpp "
                           "llama-server (probe, calibrate, bench, simulate, verify); needs "
                           "RIDGELINE_LLAMA_SERVER (tools/llama_server/build.sh).")
    ] = False,
) -> None:
    """Run the whole pipeline on built-in defaults: estimate, simulate, bench the emulator,
    and compare measurement with simulation."""
    if real:
        from ridgeline.calibrate.real_loop import demo_real

        demo_real(out_dir if out_dir != "ridgeline-demo" else "ridgeline-demo-real")
        return
    from ridgeline.report.assumptions import each_printed_once

    # The steps share the model, the GPU and the engine: each assumption is printed once,
    # by the first step that makes it; a later step adds only its own (its TTFT's meaning).
    with each_printed_once():
        _pipeline(out_dir, model, hardware, quick, report,
                  ["--assumptions"] if assumptions else [])


def _pipeline(out_dir: str, model: str, hardware: str, quick: bool, report: str | None,
              all_assumptions: list[str]) -> None:
    import os
    import sys
    from pathlib import Path

    from rich.console import Console
    from rich.rule import Rule

    from ridgeline.cli import app

    if not sys.stdout.isatty():
        # Piped output (CI logs, `| less`): tables wide enough not to truncate numbers.
        os.environ.setdefault("COLUMNS", "150")
    console = Console()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    common = ["--model", model, "--hardware", hardware]
    # One workload for the measurement and its simulation: Poisson arrivals, lognormal
    # prompts, fixed outputs (the load generator forces exact lengths with ignore_eos).
    workload = ["--prompt", "lognormal:mean=512,sigma=0.5,max=4096", "--output", "fixed:128",
                "--seed", "7"]
    slos = ["--slo", "ttft_ms:500", "--slo", "tpot_ms:50"]

    def run(title: str, args: list[str]) -> None:
        console.print(Rule(f"[bold]{title}[/bold]"))
        console.print(f"[dim]$ ridgeline {' '.join(args)}[/dim]")
        # Without standalone mode click returns a step's exit code (and turns Ctrl-C into
        # 130): stop on an interrupt; a failed check (1) is reported and the demo goes on.
        code = app(args, standalone_mode=False)
        if code == 130:
            raise typer.Exit(130)

    run("1. Predict: roofline estimate (batch 32, prompt 1024, output 256)",
        ["estimate", *common, "--batch", "32", "--prompt", "1024", "--output", "256",
         *all_assumptions])
    report_path = report or str(out / "report.html")
    for stale in out.glob("sweep.rate*.jsonl"):  # an earlier demo's rates would mix in
        stale.unlink()
    run("2. Simulate: latency vs load, with the knee and the SLO-feasible rate",
        ["simulate", *common, "--rate", "sweep", "--requests", "2000", *workload, *slos,
         "--trace", str(out / "sweep.jsonl"), *all_assumptions])
    estimate_args = ["--estimate-model", model, "--hardware", hardware, "--batch", "32",
                     "--prompt", "1024", "--output", "256"]
    sweep_args = ["--sweep", str(out / "sweep.rate*.jsonl")]
    if quick:
        run("3. Report", ["report", *sweep_args, *estimate_args, *slos, "--out", report_path,
                          "--title", f"ridgeline demo (quick): {model} on {hardware}"])
        typer.echo(f"\nReport: {Path(report_path).resolve()}")  # plain: never wrapped
        return
    bench_trace = str(out / "bench-emulator.jsonl")
    sim_trace = str(out / "simulate.jsonl")
    load = ["--rate", "4", "--requests", "120"]
    run("3. Measure: the load generator against the built-in emulator (wall clock)",
        ["bench", "--target", "emulator", *common, *load, *workload, *slos,
         "--trace", bench_trace, "--no-progress"])
    timeline = str(out / "timeline.csv")
    # The emulator runs the same engine, step times and engine costs (the per-request shift
    # included, docs/engine.md) as the simulation, both with their defaults: they agree by
    # construction, up to the HTTP round trip and the wall clock's noise.
    run("4. Simulate the same workload on the virtual clock",
        ["simulate", *common, *load, *workload, *slos, "--trace", sim_trace,
         "--timeline", timeline, *all_assumptions])
    run("5. Does the measurement agree? compare (simulation vs measurement)",
        ["compare", sim_trace, bench_trace])
    run("6. Report: prediction, latency vs load, both runs, comparison, engine timeline",
        ["report", sim_trace, bench_trace, *sweep_args, "--timeline", timeline,
         *estimate_args, *slos, "--out", report_path,
         "--title", f"ridgeline demo: {model} on {hardware}"])
    console.print(f"\nTraces are in {out}/ — try `ridgeline analyze {bench_trace}`.")
    typer.echo(f"Report: {Path(report_path).resolve()}")  # plain: a path is never wrapped
    typer.echo("(one self-contained HTML file: open it in a browser; it works offline)")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_cmd)
