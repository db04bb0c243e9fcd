"""The latency-vs-load table of a rate sweep, printed by `simulate --rate A,B,...` and by
`bench --rate sweep` for measured points (one table for both: the same columns, the same
knee and SLO lines)."""

from __future__ import annotations

import math

from ridgeline.sim.scenario import SweepResult


def print_sweep_table(sweep: SweepResult,
                      title: str = "ridgeline simulate — latency vs load") -> None:
    """The sweep's points as a table, then its knee, its highest SLO-meeting rate and the
    assumptions (`sim.scenario.summarize_sweep` worked them out)."""
    from rich.console import Console
    from rich.table import Table

    from ridgeline.metrics.render import fmt
    from ridgeline.sim.sweep import KNEE_FACTOR

    points, knee, best, rates = sweep.points, sweep.knee, sweep.best, sweep.rates
    slos, target = sweep.slos, sweep.attainment_target
    con = Console()
    table = Table(title=title, title_justify="left")
    cols = ["rate (req/s)", "throughput (req/s)", "output (tok/s)", "TTFT P50 (ms)",
            "TTFT P99 (ms)", "TPOT P50 (ms)", "TPOT P99 (ms)", "preempt"]
    if slos:
        cols += ["goodput (req/s)", "SLO met"]
    for c in cols:
        table.add_column(c, justify="right")
    for i, p in enumerate(points):
        mark = " ◀ knee" if i == knee else ""
        row = [f"{p.rate_req_s:g}{mark}", fmt(p.throughput_req_s), fmt(p.output_tok_s),
               fmt(p.ttft_p50_ms), fmt(p.ttft_p99_ms), fmt(p.tpot_p50_ms), fmt(p.tpot_p99_ms),
               f"{p.preemptions:,}"]
        if slos:
            row += [fmt(p.goodput_req_s),
                    f"{p.attainment:.1%}" if math.isfinite(p.attainment) else "—"]
        table.add_row(*row)
    con.print(table)
    con.print(f"knee: highest rate with P99 TTFT <= {KNEE_FACTOR:g}x its value at the lowest "
              f"rate: {rates[knee]:g} req/s" if knee is not None else "knee: not found",
              highlight=False)
    if slos:
        texts = ", ".join(slos)
        con.print(f"highest rate meeting {texts} for >= {target:.0%} of requests: "
                  + (f"{rates[best]:g} req/s" if best is not None else "none of the rates"),
                  highlight=False)
    con.print("[dim]assumptions: " + "; ".join(sweep.assumptions) + "[/dim]",
              highlight=False)


__all__ = ["print_sweep_table"]
