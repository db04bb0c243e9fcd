"""What `ridgeline bench` works out after a run: the one metrics implementation on the
trace, the bench's own bookkeeping (token-count sources, error kinds, client lag), and for a
sweep, one row per load point. Its printing is ridgeline.report.bench_text (importable from
here too); a sweep's point of maximum power is `ridgeline.metrics.knee`.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from ridgeline.metrics.analysis import analyze
from ridgeline.report.bench_text import print_summary, print_sweep
from ridgeline.trace.reader import read_trace


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
    """`ridgeline.metrics.analysis.analyze` on the trace."""
    return analyze(read_trace(trace_path), slos=tuple(slos or ()), seed=seed)


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


__all__ = ["analyze_trace", "bookkeeping", "print_summary", "print_sweep",
           "sweep_row"]
