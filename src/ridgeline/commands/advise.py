"""`ridgeline advise TRACE`: diagnosis and recommendations (see ridgeline.advise).

Only typer and the standard library at import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ridgeline.commands.options import JsonOpt


def advise_cmd(
    trace: Annotated[str, typer.Argument(help="Trace (JSONL, or a format `analyze` imports).")],
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="Model (default: the trace header's).")] = None,
    hardware: Annotated[str | None, typer.Option(
        "--hardware", "-g", help="GPU (default: the trace header's).")] = None,
    weights: Annotated[str | None, typer.Option("--weights", help="Weight dtype (default: "
                                                "the header's, else bf16).")] = None,
    kv: Annotated[str | None, typer.Option("--kv", help="KV dtype (default: the "
                                           "header's).")] = None,
    tp: Annotated[int | None, typer.Option("--tp", min=1, help="TP degree (default: the "
                                           "header's, else 1).")] = None,
    slo: Annotated[list[str] | None, typer.Option(
        "--slo", help="TTFT/TPOT budgets, e.g. ttft_ms<=1000 (default: the SLOs the trace "
        "records, from `bench --slo`; else TTFT P99 < 1000 ms, TPOT P99 < 50 ms).")] = None,
    metrics: Annotated[str | None, typer.Option(
        "--metrics", help="Prometheus text scraped from the server (/metrics) during the "
        "run.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Diagnose a trace (OOM -> TTFT -> TPOT -> tail) and recommend what to change."""
    from ridgeline.advise import advise
    from ridgeline.errors import RidgelineError

    if not Path(trace).is_file():
        raise RidgelineError(f"TRACE: no such file: {trace}")
    metrics_text = None
    if metrics is not None:
        from ridgeline.inputs import read_text

        metrics_text = read_text(metrics, "--metrics", max_bytes=64 << 20)
    result = advise(trace, model=model, hardware=hardware, weights=weights, kv=kv, tp=tp,
                    slos=slo, metrics_text=metrics_text)
    if json_out:
        typer.echo(result.to_json())
        return
    from rich.console import Console
    from rich.markdown import Markdown

    Console().print(Markdown(result.markdown()))


def register(app: typer.Typer) -> None:
    app.command("advise")(advise_cmd)
