"""What `ridgeline bench` prints after a run: the one metrics implementation on the trace,
plus the bench's own bookkeeping (token-count sources, error kinds, client lag), and for a
sweep, one row per load point and the knee.

A sweep marks its point of maximum *power* (Kleinrock): `ridgeline.metrics.knee`.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any


def bookkeeping(trace_path: str | Path) -> dict[str, Any]:
    """Counts the metrics module does not own: token-count sources, statuses, error kinds."""
    sources: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    with open(trace_path, encoding="utf-8") as fh:
        for line in fh:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if obj.get("type") != "request":
                continue
            statuses[obj.get("status", "ok")] += 1
            if obj.get("status", "ok") == "ok":
                sources[obj.get("token_count_source", "unknown")] += 1
            if obj.get("error_kind"):
                kinds[obj["error_kind"]] += 1
    return {"token_count_sources": dict(sources), "statuses": dict(statuses),
            "error_kinds": dict(kinds)}


def analyze_trace(trace_path: str | Path, slos: list[str] | None = None,
                  seed: int = 0) -> Any | None:
    """`ridgeline.metrics.analysis.analyze` on the trace; None if that module is absent."""
    try:
        from ridgeline.metrics.analysis import analyze
        from ridgeline.trace.reader import read_trace
    except ImportError:
        return None
    return analyze(read_trace(trace_path), slos=tuple(slos or ()), seed=seed)


def print_summary(result: Any | None, book: dict[str, Any], notes: list[str],
                  console: Any = None) -> None:
    """The metrics table (from ridgeline.metrics.render) and the bench's own lines."""
    from ridgeline.report.tables import out_for

    console = console or out_for()
    if result is not None:
        from ridgeline.metrics.render import print_analysis

        print_analysis(result, console=console)
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


def sweep_row(label: str, result: Any | None, book: dict[str, Any]) -> dict[str, Any]:
    """One sweep point's headline numbers, all taken from the metrics result."""
    row: dict[str, Any] = {"point": label, "ok": book["statuses"].get("ok", 0),
                           "failed": sum(v for k, v in book["statuses"].items() if k != "ok")}
    if result is None:
        return row
    d = result.to_dict()
    thr = d.get("throughput", {})
    row["requests_per_s"] = thr.get("requests_per_s")
    row["output_tok_s"] = thr.get("output_tok_s")
    lat = d.get("latency", {})
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        m = lat.get(key, {})
        pct = m.get("percentiles", {}) if isinstance(m, dict) else {}
        for p in ("p50", "p99"):
            v = pct.get(p)
            row[f"{key[:-3]}_{p}_ms"] = v.get("value") if isinstance(v, dict) else None
        row[f"{key[:-3]}_mean_ms"] = m.get("mean") if isinstance(m, dict) else None
    good = d.get("goodput")
    if good:
        row["goodput_req_s"] = good.get("requests_per_s")
    return row


def print_sweep(rows: list[dict[str, Any]], knee: int | None, console: Any = None) -> None:
    from rich.table import Table

    from ridgeline.metrics.knee import NO_KNEE, POWER_LABEL
    from ridgeline.report.tables import out_for

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


__all__ = ["analyze_trace", "bookkeeping", "print_summary", "print_sweep",
           "sweep_row"]
