"""`ridgeline demo`: the whole pipeline on built-in defaults, no GPU, no network.

predict (estimate) -> simulate a load sweep -> measure the emulator with the load generator
-> simulate the same workload -> compare measurement and simulation with bootstrap CIs.
"""

from __future__ import annotations

from typing import Annotated

import typer


def demo_cmd(
    out_dir: Annotated[
        str, typer.Option("--out-dir", help="Where the demo writes its traces.")
    ] = "ridgeline-demo",
    model: Annotated[str, typer.Option("--model", "-m", help="Catalog model.")] = "llama-3.1-8b",
    hardware: Annotated[
        str, typer.Option("--hardware", "-g", help="Catalog GPU.")
    ] = "h100-sxm",
    quick: Annotated[
        bool, typer.Option("--quick", help="Skip the emulator measurement (seconds, not a minute).")
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
    slos = ["--slo", "ttft_ms<=500", "--slo", "tpot_ms<=50"]

    def run(title: str, args: list[str]) -> None:
        console.print(Rule(f"[bold]{title}[/bold]"))
        console.print(f"[dim]$ ridgeline {' '.join(args)}[/dim]")
        try:
            app(args, standalone_mode=False)
        except SystemExit as exc:  # a sub-command's own exit code; the demo goes on
            if exc.code not in (0, None):
                raise

    run("1. Predict: roofline estimate (batch 32, prompt 1024, output 256)",
        ["estimate", *common, "--batch", "32", "--prompt", "1024", "--output", "256"])
    run("2. Simulate: latency vs load, with the knee and the SLO-feasible rate",
        ["simulate", *common, "--rate", "sweep", "--requests", "2000", *workload, *slos])
    if quick:
        return
    bench_trace = str(out / "bench-emulator.jsonl")
    sim_trace = str(out / "simulate.jsonl")
    load = ["--rate", "4", "--requests", "120"]
    run("3. Measure: the load generator against the built-in emulator (wall clock)",
        ["bench", "--target", "emulator", *common, *load, *workload, *slos,
         "--trace", bench_trace, "--no-progress"])
    run("4. Simulate the same workload on the virtual clock",
        ["simulate", *common, *load, *workload, *slos, "--trace", sim_trace])
    run("5. Does the measurement agree? compare (simulation vs measurement)",
        ["compare", sim_trace, bench_trace])
    console.print(f"\nTraces are in {out}/ — try `ridgeline analyze {bench_trace}`.")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_cmd)
