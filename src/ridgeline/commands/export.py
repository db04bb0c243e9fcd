"""`ridgeline export`: a trace as a per-request table (CSV, Parquet) or a peer's result file.

Only typer and the standard library at import time.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ridgeline.commands.options import writable_file


def export_cmd(
    trace: Annotated[str, typer.Argument(help="Trace file (ridgeline JSONL or a peer's result "
                                              "file, as analyze reads).")],
    to: Annotated[str, typer.Option("--to", help="csv or parquet (one row per request, "
                                    "docs/trace.md), aiperf (profile_export.jsonl), guidellm "
                                    "(benchmarks.json) or vllm (--save-result JSON).")],
    out: Annotated[str, typer.Option("--out", "-o", callback=writable_file,
                                     help="Output file.")],
) -> None:
    """Write a trace as per-request CSV/Parquet, or as AIPerf's, GuideLLM's or vLLM's result
    file (each reads back through `ridgeline analyze` to the same numbers)."""
    from ridgeline.bench.export import export_trace

    path = export_trace(trace, to, out)
    typer.echo(f"export: {path}")


def register(app: typer.Typer) -> None:
    app.command("export", help="Write a trace as per-request CSV/Parquet or as AIPerf's, "
                "GuideLLM's or vLLM's result file.")(export_cmd)
