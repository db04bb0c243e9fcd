"""Show an `AnalysisResult`: rich tables for the terminal, markdown for CI logs and reports."""

from __future__ import annotations

import math
from typing import Any

from ridgeline.metrics.analysis import AnalysisResult
from ridgeline.metrics.distribution import Distribution

SHOWN = ("ttft_ms", "tpot_ms", "itl_ms", "itl_per_token_ms", "e2e_ms", "queue_ms",
         "decode_rate_tok_s")


def fmt(x: float | None, digits: int = 3) -> str:
    """A number with `digits` significant figures, thousands separators; '—' for missing."""
    if x is None or not math.isfinite(x):
        return "—"
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - mag)
    return f"{x:,.{decimals}f}"


def _pct_cell(d: Distribution, key: str) -> str:
    p = d.percentiles.get(key)
    if p is None:
        return "—"
    mark = "" if p.supported else "*"
    return f"{fmt(p.value)}{mark} [{fmt(p.ci_low)}, {fmt(p.ci_high)}]"


def _rows(result: AnalysisResult) -> list[list[str]]:
    rows = []
    for key in SHOWN:
        d = result.latency.get(key)
        if d is None:
            continue
        if d.unavailable:
            if key == "queue_ms":
                continue  # no scheduled times: nothing worth a row
            rows.append([f"{d.label} ({d.unit})", "—", f"unavailable: {d.unavailable}",
                         "", "", "", "", ""])
            continue
        rows.append([
            f"{d.label} ({d.unit})", f"{d.count:,}",
            f"{fmt(d.mean)} [{fmt(d.mean_ci[0])}, {fmt(d.mean_ci[1])}]",
            _pct_cell(d, "p50"), _pct_cell(d, "p90"), _pct_cell(d, "p95"),
            _pct_cell(d, "p99"), fmt(d.max),
        ])
    return rows


HEADERS = ["metric", "n", "mean [95% CI]", "P50 [CI]", "P90 [CI]", "P95 [CI]", "P99 [CI]", "max"]


def _summary_lines(result: AnalysisResult) -> list[str]:
    c = result.counts
    lines = [
        f"requests {c['requests']:,}: " + ", ".join(
            f"{k} {v:,}" for k, v in c["by_status"].items() if v
        ),
    ]
    if c["errors_by_kind"]:
        lines.append("errors by kind: " + ", ".join(
            f"{k} {v:,}" for k, v in sorted(c["errors_by_kind"].items())))
    w = result.window
    if w is not None:
        lines.append(f"window {fmt(w.start_s)}–{fmt(w.end_s)} s ({fmt(w.duration_s)} s; {w.how})")
    t = result.throughput
    if t.unavailable:
        lines.append(f"throughput: unavailable ({t.unavailable})")
    else:
        lines.append(
            f"throughput: {fmt(t.requests_s)} req/s, {fmt(t.output_tok_s)} output tok/s, "
            f"{fmt(t.total_tok_s)} total tok/s (tokens counted {t.token_counting})"
        )
    cc = result.concurrency
    if math.isfinite(cc.mean_in_flight):
        lines.append(f"concurrency: mean {fmt(cc.mean_in_flight)} in flight, max "
                     f"{cc.max_in_flight:,}")
    lt = result.little
    if math.isfinite(lt.ratio):
        lines.append(
            f"Little's law: L = {fmt(lt.l_in_flight)} vs λ·W = {fmt(lt.lambda_req_s)} × "
            f"{fmt(lt.w_s)} s = {fmt(lt.lambda_req_s * lt.w_s)} over the arrival window "
            f"(ratio {lt.ratio:.3f}): {lt.status.upper() if not lt.ok else lt.status}; "
            f"offered {fmt(lt.lambda_req_s)} req/s, completed {fmt(lt.completed_req_s)} req/s"
        )
        if lt.status == "overloaded":
            lines.append(f"  {lt.note}")
    elif lt.note:
        lines.append(f"Little's law: {lt.note}")
    g = result.goodput
    if g is not None:
        if g.unavailable:
            lines.append(f"goodput ({' & '.join(g.slos)}): unavailable ({g.unavailable})")
        else:
            lines.append(
                f"goodput ({' & '.join(g.slos)}): {fmt(g.requests_s)} req/s, "
                f"{fmt(g.output_tok_s)} output tok/s; SLO attainment "
                f"{g.attainment:.1%} [{g.attainment_ci[0]:.1%}, {g.attainment_ci[1]:.1%}] "
                f"({g.good_requests:,}/{g.judged_requests:,})"
            )
    return lines


def print_analysis(result: AnalysisResult, console: Any = None) -> None:
    """Print the analysis as rich tables (to `console`, or a new stdout console)."""
    from rich.console import Console
    from rich.table import Table

    con = console if console is not None else Console()
    src = result.source
    title = f"ridgeline analyze — {src.get('path') or src.get('source')}"
    table = Table(title=title, title_justify="left")
    for h in HEADERS:
        table.add_column(h, justify="left" if h == "metric" else "right")
    for row in _rows(result):
        table.add_row(*row)
    con.print(table)
    con.print("[dim]* fewer than 10 samples beyond this percentile: noise. CIs: 95% bootstrap "
              f"of whole requests in blocks of consecutive requests ({_blocks(result)}), "
              "numpy linear percentiles. TTFT is measured from the client send time.[/dim]")
    for line in _summary_lines(result):
        con.print(line, highlight=False)
    if result.warnings:
        con.print("[yellow]warnings:[/yellow]")
        for w in result.warnings:
            con.print(f"  - {w}", highlight=False, markup=False)


def _blocks(result: AnalysisResult) -> str:
    """Block lengths the CIs used, e.g. 'block 1-340 requests'."""
    b = [d.block_requests for d in result.latency.values() if d.block_requests]
    if not b:
        return "no blocks"
    lo, hi = min(b), max(b)
    return f"block {lo:.0f} requests" if round(lo) == round(hi) else \
        f"block {lo:.0f}-{hi:.0f} requests"


def analysis_markdown(result: AnalysisResult) -> str:
    """The analysis as a markdown document (tables and bullet lists)."""
    src = result.source
    out = [f"## ridgeline analyze: {src.get('path') or src.get('source')}", ""]
    out.append("| " + " | ".join(HEADERS) + " |")
    out.append("|" + "---|" * len(HEADERS))
    for row in _rows(result):
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    out.append("")
    out.append("`*` fewer than 10 samples beyond this percentile (noise). CIs are 95% bootstrap "
               f"of whole requests in blocks of consecutive requests ({_blocks(result)}); "
               "percentiles use numpy's linear method; TTFT is measured from the client send "
               "time.")
    out.append("")
    out.extend(f"- {line}" for line in _summary_lines(result))
    if result.warnings:
        out.append("")
        out.append("**Warnings**")
        out.append("")
        out.extend(f"- {w}" for w in result.warnings)
    return "\n".join(out) + "\n"
