"""`bench --rate sweep`: measure saturation, then latency against load below it.

As `simulate --rate sweep`: first a closed loop at high concurrency (`--concurrency`, default
`SATURATION_CONCURRENCY`) measures the server's saturation throughput; then open-loop
Poisson runs at `ridgeline.sim.sweep.sweep_rates(capacity)` (20% ... 110% of it). The knee
and the highest rate meeting the SLOs use simulate's rules (`metrics.knee.ttft_knee_index`,
`best_rate_index`), and the table is simulate's sweep table.

>>> from types import SimpleNamespace as NS
>>> a = NS(throughput=NS(requests_s=2.0, output_tok_s=50.0), latency={}, goodput=None)
>>> sweep_point(4.0, a, {"statuses": {"ok": 9, "rejected": 1}}, None).rejected
1
"""

from __future__ import annotations

import math
from typing import Any

from ridgeline.report.sweep_table import print_sweep_table
from ridgeline.report.tables import out_for
from ridgeline.sim.scenario_run import summarize_sweep
from ridgeline.sim.sweep import SweepPoint, sweep_rates

SATURATION_CONCURRENCY = 64
SLO_ATTAINMENT = 0.99  # as simulate's --slo-attainment default


def capacity_req_s(analysis: Any) -> float:
    """Saturation throughput (completed requests per second) of the closed-loop probe."""
    value = float(getattr(getattr(analysis, "throughput", None), "requests_s", math.nan))
    return value if math.isfinite(value) and value > 0 else math.nan


def rates_below(capacity: float) -> list[float]:
    return sweep_rates(capacity)


def _pct(analysis: Any, key: str, p: str) -> float:
    d = analysis.latency.get(key) if isinstance(analysis.latency, dict) else None
    if d is None or getattr(d, "unavailable", False) or p not in d.percentiles:
        return math.nan
    return float(d.percentiles[p].value)


def sweep_point(rate: float, analysis: Any, book: dict[str, Any],
                telemetry: dict[str, Any] | None) -> SweepPoint:
    g = analysis.goodput
    srv = (telemetry or {}).get("server") or {}
    return SweepPoint(
        rate_req_s=rate, throughput_req_s=analysis.throughput.requests_s,
        output_tok_s=analysis.throughput.output_tok_s,
        ttft_p50_ms=_pct(analysis, "ttft_ms", "p50"), ttft_p99_ms=_pct(analysis, "ttft_ms", "p99"),
        tpot_p50_ms=_pct(analysis, "tpot_ms", "p50"), tpot_p99_ms=_pct(analysis, "tpot_ms", "p99"),
        goodput_req_s=g.requests_s if g else math.nan,
        attainment=g.attainment if g else math.nan,
        preemptions=int(srv.get("preemptions") or 0),
        rejected=int(book.get("statuses", {}).get("rejected", 0)))


def sweep_summary(capacity: float, points: list[SweepPoint], slos: list[Any]
                  ) -> dict[str, Any]:
    """The JSON of simulate's sweep (`sim.scenario_run.summarize_sweep`) plus the saturation."""
    sweep = summarize_sweep(points, tuple(str(s) for s in slos), SLO_ATTAINMENT)
    return {"saturation_req_s": capacity, **sweep.to_dict()}


def print_rate_sweep(capacity: float, runs: list[dict[str, Any]], slos: list[Any],
                     notes: list[str], out: Any = None) -> None:
    """simulate's sweep table (`report.sweep_table`) for measured runs.

    runs: {"rate", "analysis", "book", "telemetry"} per rate. The preemption column comes
    from the server's telemetry (0 when the server exposes none).
    """
    points = [sweep_point(r["rate"], r["analysis"], r["book"], r.get("telemetry"))
              for r in runs]
    page = out if out is not None else out_for()
    page.print(f"saturation (closed loop): {capacity:.3g} req/s", markup=False)
    print_sweep_table(summarize_sweep(points, tuple(str(s) for s in slos),
                                      SLO_ATTAINMENT, notes),
                      title="ridgeline bench — latency vs load", out=page)
    if out is None:
        page.close()


__all__ = ["SATURATION_CONCURRENCY", "capacity_req_s", "print_rate_sweep", "rates_below",
           "sweep_point", "sweep_summary"]
