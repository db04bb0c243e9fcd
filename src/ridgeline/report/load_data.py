"""The numbers of a latency-against-load sweep: one `LoadPoint` per offered rate (or
concurrency), read from an AnalysisResult, its knee, its CSV rows. No matplotlib: the UI and
the report's collector read these without loading the plotting stack
(`ridgeline.report.load` draws them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ridgeline.jsonsafe import json_safe
from ridgeline.metrics.knee import ttft_knee_index as knee_index

NAN = math.nan


@dataclass
class LoadPoint:
    """One rate's numbers; `*_ci` are (low, high) of the 95 % bootstrap CI."""

    rate_req_s: float
    ttft_p50_ms: float
    ttft_p50_ci: tuple[float, float]
    ttft_p99_ms: float
    ttft_p99_ci: tuple[float, float]
    tpot_p50_ms: float
    tpot_p50_ci: tuple[float, float]
    tpot_p99_ms: float
    tpot_p99_ci: tuple[float, float]
    throughput_req_s: float
    output_tok_s: float
    goodput_req_s: float = NAN
    # A closed-loop point (`bench --concurrency 1,8,32`): its concurrency; rate_req_s is then
    # NaN (nothing is offered: each user sends when its last answer ends).
    concurrency: float = NAN

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = json_safe(dict(self.__dict__))
        return out


def _pct(a: Any, key: str, p: str) -> tuple[float, tuple[float, float]]:
    d = a.latency.get(key)
    if d is None or d.unavailable or p not in d.percentiles:
        return NAN, (NAN, NAN)
    q = d.percentiles[p]
    return float(q.value), (float(q.ci_low), float(q.ci_high))


def load_point(rate_req_s: float, analysis: Any) -> LoadPoint:
    """The numbers of one analyzed run at an offered rate."""
    t50, t50c = _pct(analysis, "ttft_ms", "p50")
    t99, t99c = _pct(analysis, "ttft_ms", "p99")
    p50, p50c = _pct(analysis, "tpot_ms", "p50")
    p99, p99c = _pct(analysis, "tpot_ms", "p99")
    g = analysis.goodput
    return LoadPoint(rate_req_s, t50, t50c, t99, t99c, p50, p50c, p99, p99c,
                     float(analysis.throughput.requests_s),
                     float(analysis.throughput.output_tok_s),
                     float(g.requests_s) if g is not None and not g.unavailable else NAN)


def concurrency_point(concurrency: float, analysis: Any) -> LoadPoint:
    """The numbers of one analyzed closed-loop run at a concurrency."""
    p = load_point(NAN, analysis)
    p.concurrency = float(concurrency)
    return p


# One row per point, GuideLLM's benchmarks.csv in spirit: the load, then the numbers.
CSV_COLUMNS = ("series", "concurrency", "rate_req_s", "throughput_req_s", "output_tok_s",
               "goodput_req_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms")


def sweep_csv_rows(series: dict[str, list[LoadPoint]]) -> list[list[str]]:
    """Every point of every series, sorted numerically by concurrency, then rate."""
    def key(p: LoadPoint) -> tuple[float, float]:
        c, r = p.concurrency, p.rate_req_s
        return (c if math.isfinite(c) else math.inf, r if math.isfinite(r) else math.inf)

    rows = [list(CSV_COLUMNS)]
    for name, pts in series.items():
        for p in sorted(pts, key=key):
            vals = [getattr(p, c) for c in CSV_COLUMNS[1:]]
            rows.append([name] + ["" if not math.isfinite(v) else f"{v:.6g}" for v in vals])
    return rows


def knee_rate(points: list[LoadPoint]) -> float | None:
    """The knee by `ridgeline.metrics.knee.ttft_knee_index` (the rule `simulate` prints)."""
    pts = sorted(points, key=lambda p: p.rate_req_s)
    k = knee_index([p.rate_req_s for p in pts], [p.ttft_p99_ms for p in pts])
    return pts[k].rate_req_s if k is not None else None
