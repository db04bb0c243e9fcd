"""What `ridgeline bench` prints after a run: the metrics table of the one metrics
implementation plus the bench's own bookkeeping lines (token-count sources, error kinds),
and for a sweep, one row per load point and its max-power point. Written to a
report.tables.Out (plain full-width tables when piped)."""

from __future__ import annotations

from typing import Any

from ridgeline.metrics.knee import NO_KNEE, POWER_LABEL
from ridgeline.metrics.render import print_analysis
from ridgeline.report.tables import out_for


def print_summary(result: Any | None, book: dict[str, Any], notes: list[str],
                  console: Any = None, table_out: Any = None) -> None:
    """The metrics table (from ridgeline.metrics.render) and the bench's own lines.
    `table_out`: where the table goes when not to `console` (a csv page on stdout while
    the lines go to stderr)."""
    console = console or out_for()
    if result is not None:
        print_analysis(result, console=table_out if table_out is not None else console)
    else:
        console.print("statuses: " + ", ".join(f"{k} {v}" for k, v in book["statuses"].items()))
    sources = book["token_count_sources"]
    if len(sources) > 1:
        mix = ", ".join(f"{k} {v}" for k, v in sorted(sources.items()))
        console.print(f"[yellow]output tokens counted from mixed sources:[/] {mix}")
    elif sources:
        console.print(f"output tokens counted from: {next(iter(sources))}")
    if book["error_kinds"] and result is None:
        console.print("errors by kind: " + ", ".join(
            f"{k} {v}" for k, v in sorted(book["error_kinds"].items())))
    for note in notes:
        console.print(note)


def print_sweep(rows: list[dict[str, Any]], knee: int | None, console: Any = None) -> None:
    from rich.table import Table

    console = console or out_for()
    table = Table(title="sweep (one trace per point)")
    cols = [("point", "point"), ("ok", "ok"), ("failed", "failed"), ("req/s", "requests_per_s"),
            ("out tok/s", "output_tok_s"), ("TTFT P50 ms", "ttft_p50_ms"),
            ("TTFT P99 ms", "ttft_p99_ms"), ("TPOT P50 ms", "tpot_p50_ms"),
            ("TPOT P99 ms", "tpot_p99_ms"), ("E2E P50 ms", "e2e_p50_ms")]
    if any("goodput_req_s" in r for r in rows):
        cols.append(("goodput req/s", "goodput_req_s"))
    for title, _ in cols:
        table.add_column(title, justify="right")
    for i, r in enumerate(rows):
        cells = []
        for _, key in cols:
            v = r.get(key)
            cells.append(f"{v:,.3g}" if isinstance(v, float) else str(v if v is not None
                                                                       else "—"))
        if i == knee:
            cells[0] += f" ← {POWER_LABEL}"
        table.add_row(*cells)
    console.print(table)
    if knee is not None:
        console.print(f"{POWER_LABEL}: {rows[knee]['point']} (highest output tok/s per "
                      "second of mean E2E latency; beyond it latency grows faster than "
                      "throughput)", markup=False)
    elif len(rows) > 1:
        console.print(f"{POWER_LABEL}: {NO_KNEE} (the power still rises at the last point)",
                      markup=False)


__all__ = ["print_summary", "print_sweep"]
