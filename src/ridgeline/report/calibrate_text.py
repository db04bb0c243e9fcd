"""What calibrated commands print: `estimate --calibration` and the verify table (through
the shared renderer, report.tables)."""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

from ridgeline.perf.estimate import estimate
from ridgeline.perf.grid import parse_grid
from ridgeline.report.tables import out_for
from ridgeline.sim.step_model import load_step_model


def estimate_calibrated(calibration: str, batch: str, prompt: str, output: str,
                        context: str | None, prefix: int, as_json: bool,
                        fmt: str | None = None) -> None:
    """`ridgeline estimate --calibration FILE`: the phase timings from the measured profile."""
    prof = load_step_model(calibration, lambda: None)
    grids = [np.array(parse_grid(x, f)) for x, f in ((batch, "batch"), (prompt, "prompt"),
                                                     (output, "output"))]
    ctx = np.array(parse_grid(context, "context")) if context is not None else None
    b, s, n = (x.ravel() for x in np.meshgrid(*grids, indexing="ij"))
    if ctx is not None:
        b, s, n, ctx = np.broadcast_arrays(b[:, None], s[:, None], n[:, None], ctx[None, :])
        b, s, n, ctx = (x.ravel() for x in (b, s, n, ctx))
    r = estimate(prof, b, s, n, prefix, ctx, details=False)
    keys = ("batch_seqs", "prompt_tokens", "output_tokens", "decode_context_tokens",
            "ttft_s", "tpot_s", "e2e_s", "decode_aggregate_tok_s")
    rows = [{k: float(np.asarray(r[k]).ravel()[i]) for k in keys} for i in range(b.size)]
    notes = prof.assumptions()
    if as_json:
        sys.stdout.write(json.dumps({"calibration": calibration, "rows": rows,
                                     "assumptions": notes}, indent=2) + "\n")
        return
    from rich.table import Table

    con = out_for(fmt)
    tab = Table(title=f"calibrated estimate ({calibration})", title_justify="left")
    for c in ("B", "S", "N", "T", "TTFT (ms)", "TPOT (ms)", "E2E (ms)", "decode tok/s"):
        tab.add_column(c, justify="right")
    for row in rows:
        tab.add_row(f"{row['batch_seqs']:g}", f"{row['prompt_tokens']:g}",
                    f"{row['output_tokens']:g}", f"{row['decode_context_tokens']:g}",
                    f"{row['ttft_s'] * 1e3:.2f}", f"{row['tpot_s'] * 1e3:.3f}",
                    f"{row['e2e_s'] * 1e3:.1f}", f"{row['decode_aggregate_tok_s']:,.1f}")
    con.print(tab)
    con.print("assumptions: " + "; ".join(prof.assumptions()), style="dim", markup=False)
    con.close()


def print_verify(report: Any, fmt: str | None = None) -> None:
    """The per-point table of `ridgeline verify`."""
    from rich.table import Table

    con = out_for(fmt)
    tab = Table(title="ridgeline verify — predicted vs measured", title_justify="left")
    for c in ("point", "metric", "predicted", "measured", "measured 95% CI", "error",
              "in CI", "bound", "ok"):
        tab.add_column(c, justify="left" if c in ("point", "metric") else "right")
    for row in report.rows:
        bound = f"±{row.bound:.0%}" if row.bound is not None else ""
        ok = "" if row.bound is None else ("yes" if row.within_bound else "NO")
        tab.add_row(row.point, row.metric, f"{row.predicted:.2f}", f"{row.measured:.2f}",
                    f"[{row.ci_low:.2f}, {row.ci_high:.2f}]", f"{row.error:+.1%}",
                    "yes" if row.in_ci else "no", bound, ok)
    con.print(tab)
    if report.loads:
        lt = Table(title="engine load per point (time averages) — predicted vs measured",
                   title_justify="left")
        for c in ("point", "in flight pred", "in flight meas", "decode batch pred",
                  "decode batch meas"):
            lt.add_column(c, justify="left" if c == "point" else "right")
        for x in report.loads:
            lt.add_row(x.point, f"{x.in_flight_predicted:.2f}", f"{x.in_flight_measured:.2f}",
                       f"{x.decoding_predicted:.2f}", f"{x.decoding_measured:.2f}")
        con.print(lt)
    for so in getattr(report, "slot_orders", []):
        con.print(so.line())
    for rp in getattr(report, "replays", []):
        con.print(f"{rp['point']}: replayed as {rp['how']}", markup=False)
    for point, dec in getattr(report, "decompositions", []):
        print_decomposition(dec, con, f"{point}: where the miss comes from (means per "
                            "request)")
    for line in report.summary_lines():
        con.print(line)
    con.close()


def print_decomposition(dec: Any, con: Any, title: str) -> None:
    """The per-component table of a miss (`metrics/decomposition.py`) and its sentence."""
    from rich.table import Table

    tab = Table(title=title, title_justify="left")
    for c in ("component", "predicted ms", "measured ms", "difference ms",
              "share of E2E difference"):
        tab.add_column(c, justify="left" if c == "component" else "right")

    def share(x: float) -> str:
        return f"{x:.0%}" if x == x else "-"

    for r in dec.rows:
        tab.add_row(r.component, f"{r.predicted_ms:.2f}", f"{r.measured_ms:.2f}",
                    f"{r.difference_ms:+.2f}", share(r.share_of_e2e_difference))
    tab.add_row("E2E (the sum)", f"{dec.e2e_predicted_ms:.2f}", f"{dec.e2e_measured_ms:.2f}",
                f"{dec.e2e_predicted_ms - dec.e2e_measured_ms:+.2f}", "100%")
    tab.add_row(f"decode step per token (mean batch {dec.batch_predicted:.1f} predicted, "
                f"{dec.batch_measured:.1f} measured)", f"{dec.step_predicted_ms:.3f}",
                f"{dec.step_measured_ms:.3f}",
                f"{dec.step_predicted_ms - dec.step_measured_ms:+.3f}", "")
    con.print(tab)
    con.print(dec.sentence, markup=False)
    for side, src in dec.sources.items():
        con.print(f"{side} side: " + "; ".join(src), markup=False)
