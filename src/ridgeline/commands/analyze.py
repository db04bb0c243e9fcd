"""`ridgeline analyze`, `compare`, `gate` and `validate`: metrics from traces.

Only typer and the standard library at import time; the metrics load inside the commands.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ridgeline.commands.options import (
    OUTPUT_FORMATS,
    JsonOpt,
    SeedOpt,
    SloOpt,
    writable_file,
)

FormatOpt = Annotated[
    str | None,
    typer.Option("--format", metavar="FORMAT", help="Output format: table (the default in a "
                 "terminal), plain (full-width text; the default when piped), markdown, csv, "
                 "json. An input format's name here (vllm, aiperf, ...) is read as "
                 "--input-format."),
]
InputFormatOpt = Annotated[
    str | None,
    typer.Option("--input-format", "-f", help="Input format: auto, ridgeline, vllm, aiperf, "
                 "guidellm, llmperf (default: auto)."),
]
SelectOpt = Annotated[
    int | None,
    typer.Option("--select", min=0, max=1_000_000,
                 help="Which run to import from a file holding several (vLLM "
                 "--append-result objects, GuideLLM benchmarks); 0-based."),
]
WindowOpt = Annotated[
    str | None,
    typer.Option("--window", help="Measurement window START:END in trace seconds, 'all', or "
                 "'auto' (default: warm-up and cool-down cut)."),
]
MarkdownOpt = Annotated[bool, typer.Option("--markdown", help="Markdown output.")]
AgainstOpt = Annotated[
    str | None,
    typer.Option("--against", metavar="PREDICTED_TRACE",
                 help="A trace of a simulation of the same workload: also split the miss "
                 "into queueing, prefill, decode and overhead, naming the component that "
                 "differs most (`verify` does this with a calibration profile)."),
]


def _load(path: str, fmt: str, select: int | None):
    from ridgeline.trace.importers import load_trace

    return load_trace(path, fmt=fmt, select=select)


def split_formats(fmt: str | None, input_fmt: str | None) -> tuple[str | None, str]:
    """(output format or None, input format) from --format and --input-format: --format
    takes an output format, or (as it did before output formats) an input format."""
    from ridgeline.errors import RidgelineError
    from ridgeline.trace.importers import FORMATS

    inputs = ("auto", *FORMATS)
    if fmt is None or fmt in OUTPUT_FORMATS:
        return fmt, input_fmt or "auto"
    if fmt in inputs and input_fmt is None:
        return None, fmt
    raise RidgelineError(f"--format: got {fmt!r}; allowed: {', '.join(OUTPUT_FORMATS)} (output)"
                         f" or an input format {', '.join(inputs)} (--input-format)")


def analyze_cmd(
    trace: Annotated[str, typer.Argument(help="Trace file (ridgeline JSONL or a peer's "
                                              "result file).")],
    slo: SloOpt = None,
    window: WindowOpt = None,
    json_out: JsonOpt = False,
    markdown: MarkdownOpt = False,
    fmt: FormatOpt = None,
    input_fmt: InputFormatOpt = None,
    select: SelectOpt = None,
    seed: SeedOpt = 0,
    against: AgainstOpt = None,
) -> None:
    """Metrics of one trace: latency percentiles with 95% CIs, throughput, goodput,
    concurrency and the Little's-law check."""
    from ridgeline.metrics.analysis import analyze
    from ridgeline.metrics.slo import parse_slos
    from ridgeline.metrics.telemetry import telemetry_lines, trace_telemetry_of
    from ridgeline.report.tables import out_for

    out_fmt, in_fmt = split_formats(fmt, input_fmt)
    json_out = json_out or out_fmt == "json"
    markdown = markdown or out_fmt == "markdown"
    slos = parse_slos(slo)
    loaded = _load(trace, in_fmt, select)
    # The pooled samples are not printed: left out, so analyze holds one event-sized array.
    result = analyze(loaded, slos=slos, window=window, seed=seed, keep_samples=False)
    telemetry = trace_telemetry_of(trace, loaded)  # server/GPU samples of a bench run
    decomposition = None
    if against is not None:
        from ridgeline.calibrate.explain import explain_traces

        decomposition = explain_traces(loaded, _load(against, "auto", None))
    if json_out:
        payload = result.to_dict()
        if telemetry is not None:
            payload["telemetry"] = telemetry
        if decomposition is not None:
            payload["decomposition"] = {"against": against, **decomposition.to_dict()}
        typer.echo(json.dumps(payload, indent=2))
    elif markdown:
        from ridgeline.metrics.render import analysis_markdown

        typer.echo(analysis_markdown(result))
        for line in telemetry_lines(telemetry):
            typer.echo(f"- {line}")
        if decomposition is not None:
            typer.echo("\n".join(["", *decomposition.lines()]))
    else:
        from ridgeline.metrics.render import print_analysis

        # The whole run's figures, for one line on what the default window cut.
        whole = (analyze(loaded, window="all", seed=seed, keep_samples=False)
                 if window is None and result.counts.get("excluded_outside_window") else None)
        with out_for(out_fmt) as out:
            print_analysis(result, out, whole=whole)
            for line in telemetry_lines(telemetry):
                out.print(line, markup=False)
            if decomposition is not None:
                from ridgeline.report.calibrate_text import print_decomposition

                print_decomposition(decomposition, out, f"against {against}: where the "
                                    "miss comes from (means per request)")


def compare_cmd(
    a: Annotated[str, typer.Argument(help="Trace A (the reference).")],
    b: Annotated[str, typer.Argument(help="Trace B.")],
    metric: Annotated[
        list[str] | None,
        typer.Option("--metric", help="Metric to compare, e.g. ttft_p99, tpot_mean, "
                     "output_tok_s (repeatable; default: a standard set)."),
    ] = None,
    window: WindowOpt = None,
    json_out: JsonOpt = False,
    markdown: MarkdownOpt = False,
    fmt: FormatOpt = None,
    input_fmt: InputFormatOpt = None,
    seed: SeedOpt = 0,
) -> None:
    """Per metric: A, B, B − A with its bootstrap 95% CI, and 'significant' or
    'within noise'."""
    from ridgeline.metrics.analysis import analyze
    from ridgeline.metrics.compare import (
        DEFAULT_ROWS,
        compare,
        comparison_markdown,
        parse_metric,
        print_comparison,
    )
    from ridgeline.report.tables import out_for

    out_fmt, in_fmt = split_formats(fmt, input_fmt)
    json_out = json_out or out_fmt == "json"
    markdown = markdown or out_fmt == "markdown"
    metrics = tuple(metric) if metric else DEFAULT_ROWS
    for m in metrics:
        parse_metric(m)
    ra = analyze(_load(a, in_fmt, None), window=window, seed=seed)
    rb = analyze(_load(b, in_fmt, None), window=window, seed=seed)
    c = compare(ra, rb, metrics)
    if json_out:
        typer.echo(json.dumps(c.to_dict(), indent=2))
    elif markdown:
        typer.echo(comparison_markdown(c))
    else:
        with out_for(out_fmt) as out:
            print_comparison(c, out)


def gate_cmd(
    baseline: Annotated[str, typer.Argument(help="Baseline trace.")],
    candidate: Annotated[str, typer.Argument(help="Candidate trace.")],
    max_regression: Annotated[
        list[str],
        typer.Option("--max-regression", help="METRIC=PERCENT, e.g. tpot_p95=5% (or a "
                     "fraction below 1, 0.05; a bare 5 is refused as ambiguous). Repeatable. "
                     "Latencies regress upward, throughputs downward."),
    ],
    window: WindowOpt = None,
    json_out: JsonOpt = False,
    summary_file: Annotated[
        str | None,
        typer.Option("--summary-file", callback=writable_file, help="Also append the markdown "
                     "summary here (e.g. $GITHUB_STEP_SUMMARY)."),
    ] = None,
    fmt: FormatOpt = None,
    input_fmt: InputFormatOpt = None,
    seed: SeedOpt = 0,
) -> None:
    """Exit 1 when a regression beyond its threshold is established (the 95% CI of the
    relative change lies above the threshold), 3 when a rule cannot be evaluated (no
    successful request in a run's window, an undefined metric), 0 otherwise."""
    from ridgeline.metrics.analysis import analyze
    from ridgeline.metrics.gate import gate, gate_markdown, parse_rule

    out_fmt, in_fmt = split_formats(fmt, input_fmt)
    rules = [parse_rule(r) for r in max_regression]
    rb = analyze(_load(baseline, in_fmt, None), window=window, seed=seed)
    rc = analyze(_load(candidate, in_fmt, None), window=window, seed=seed + 1)
    result = gate(rb, rc, rules)
    md = gate_markdown(result, baseline, candidate)
    if json_out or out_fmt == "json":
        typer.echo(json.dumps(result.to_dict(), indent=2))
    elif out_fmt is None:
        typer.echo(md)  # markdown reads as text in a log and renders in a step summary
    else:
        from ridgeline.report.tables import print_markdown_document

        print_markdown_document(md, out_fmt)
    if summary_file:
        with open(summary_file, "a", encoding="utf-8") as fh:
            fh.write(md)
    raise typer.Exit(result.exit_code)


def validate_cmd(
    trace: Annotated[str, typer.Argument(help="ridgeline trace file (JSONL).")],
    json_out: JsonOpt = False,
) -> None:
    """Check a trace against the schema and for consistent times; exit 1 on errors."""
    from ridgeline.trace.validator import validate_trace

    report = validate_trace(trace)
    if json_out:
        typer.echo(json.dumps({"path": report.path, "requests": report.requests,
                               "ok": report.ok, "errors": report.errors,
                               "warnings": report.warnings}, indent=2))
    else:
        for e in report.errors:
            typer.echo(f"error: {e}", err=True)
        for w in report.warnings[:50]:
            typer.echo(f"warning: {w}", err=True)
        if len(report.warnings) > 50:
            typer.echo(f"warning: ... {len(report.warnings) - 50} more", err=True)
        status = "valid" if report.ok else "INVALID"
        typer.echo(f"{report.path}: {status}: {report.requests} requests, "
                   f"{len(report.errors)} errors, {len(report.warnings)} warnings")
    if not report.ok:
        sys.stdout.flush()
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add analyze, compare, gate and validate to the `ridgeline` app."""
    app.command("analyze")(analyze_cmd)
    app.command("compare")(compare_cmd)
    app.command("gate")(gate_cmd)
    app.command("validate")(validate_cmd)
