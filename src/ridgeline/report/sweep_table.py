"""The latency-vs-load table of a rate sweep, printed by `simulate --rate A,B,...` and by
`bench --rate sweep` for measured points (one table for both: the same columns, the same
knee and SLO lines)."""

from __future__ import annotations

import math
from typing import Any

from ridgeline.metrics.knee import KNEE_FACTOR, KNEE_LABEL, NO_KNEE
from ridgeline.metrics.render import fmt
from ridgeline.report.assumptions import as_above_line, not_yet_printed
from ridgeline.report.tables import out_for
from ridgeline.sim.scenario_run import SweepResult


def print_sweep_table(sweep: SweepResult,
                      title: str = "ridgeline simulate — latency vs load",
                      out: Any = None, full_assumptions: bool = False,
                      key_assumptions: list[str] | None = None,
                      model_error: str | None = None) -> None:
    """The sweep's points as a table, then its knee, its highest SLO-meeting rate and the
    assumptions (`sim.scenario_run.summarize_sweep` worked them out). `out`: a
    report.tables.Out (default: stdout in the default format). `key_assumptions`: printed
    instead of all of them unless `full_assumptions`. `model_error`: a line on the model's
    cross-validated error (simulated points)."""
    from rich.table import Table

    points, knee, best, rates = sweep.points, sweep.knee, sweep.best, sweep.rates
    slos, target = sweep.slos, sweep.attainment_target
    con = out if out is not None else out_for()
    table = Table(title=title, title_justify="left")
    cols = ["rate (req/s)", "throughput (req/s)", "output (tok/s)", "TTFT P50 (ms)",
            "TTFT P99 (ms)", "TPOT P50 (ms)", "TPOT P99 (ms)", "preempt"]
    if slos:
        cols += ["goodput (req/s)", "SLO met"]
    for c in cols:
        table.add_column(c, justify="right")
    for i, p in enumerate(points):
        mark = f" ◀ {KNEE_LABEL}" if i == knee else ""
        row = [f"{p.rate_req_s:g}{mark}", fmt(p.throughput_req_s), fmt(p.output_tok_s),
               fmt(p.ttft_p50_ms), fmt(p.ttft_p99_ms), fmt(p.tpot_p50_ms), fmt(p.tpot_p99_ms),
               f"{p.preemptions:,}"]
        if slos:
            row += [fmt(p.goodput_req_s),
                    f"{p.attainment:.1%}" if math.isfinite(p.attainment) else "—"]
        table.add_row(*row)
    con.print(table)
    if model_error:
        con.print(model_error, markup=False, highlight=False)
    rule = f"highest rate with P99 TTFT <= {KNEE_FACTOR:g}x its value at the lowest rate"
    con.print(f"{KNEE_LABEL}: {rates[knee]:g} req/s ({rule})" if knee is not None else
              f"{KNEE_LABEL}: {NO_KNEE} ({rates[0]:g}-{rates[-1]:g} req/s; P99 TTFT stays "
              f"within {KNEE_FACTOR:g}x up to the last rate, or the lowest is undefined)",
              highlight=False, markup=False)
    if slos:
        texts = ", ".join(slos)
        con.print(f"highest rate meeting {texts} for >= {target:.0%} of requests: "
                  + (f"{rates[best]:g} req/s" if best is not None else "none of the rates"),
                  highlight=False, markup=False)
    items = sweep.assumptions if full_assumptions or key_assumptions is None \
        else key_assumptions
    con.print("assumptions" + ("" if full_assumptions or key_assumptions is None else
                               " (the ones that change the answer; --assumptions for all)")
              + ":", style="dim", markup=False)
    items, seen = not_yet_printed(list(items))
    for a in items:
        con.print(f"  - {a}", style="dim", markup=False, highlight=False)
    if seen:
        con.print(as_above_line(seen), style="dim", markup=False, highlight=False)


__all__ = ["print_sweep_table"]
