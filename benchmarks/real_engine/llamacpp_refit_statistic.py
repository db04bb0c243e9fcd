"""Refit kept llama.cpp calibrations with another decode-step statistic; verify the same points.

    .venv/bin/python benchmarks/real_engine/llamacpp_refit_statistic.py RUN_DIR [RUN_DIR ...]

RUN_DIR is a run folder of `benchmarks/real_engine/llamacpp_open_loop_flow.py` (profile.json,
its probe
traces in profile-probe/, the measured points pt-*.jsonl). For each run the profile is refitted
from its own probe traces with the lockstep decode step T(B) taken as (a) the median gap (what
ships), (b) the mean gap with each gap capped at 3 medians, and every point is verified as
`ridgeline verify` does (the slot order the live profile recorded, chained). Prints the rows
met against the bars and the signed TPOT / E2E errors per point. An experiment on kept
data: the probes and points are the same real measurements for both statistics.
"""

from __future__ import annotations

import argparse
import glob
from pathlib import Path
from typing import Any

import numpy as np

from llamacpp_open_loop_flow import BARS, row_met  # type: ignore[import-not-found]


def refit(run: Path, statistic: str) -> Any:
    from ridgeline.calibrate import probe
    from ridgeline.calibrate.engine import calibrate_from_traces
    from ridgeline.sim.calibrated_profile import CalibrationProfile

    live = CalibrationProfile.load(run / "profile.json")
    median = probe.decode_step_s
    if statistic == "mean":
        def capped_mean(gaps: list[float]) -> float:
            v = np.asarray(gaps, dtype=float)
            return float(np.mean(np.minimum(v, 3.0 * np.median(v))))
        probe.decode_step_s = capped_mean
    try:
        prof = calibrate_from_traces(
            sorted(glob.glob(str(run / "profile-probe" / "probe-*.jsonl"))),
            preset="llama.cpp", slots=live.scheduling.max_num_seqs,
            kv_capacity_tokens=live.kv_capacity_tokens(),
            config_path=live.provenance.model_config_path)
    finally:
        probe.decode_step_s = median
    prof.scheduling = prof.scheduling.model_copy(update={
        "slot_order_after_calibration": live.scheduling.slot_order_after_calibration,
        "slot_order_at_unix_s": live.scheduling.slot_order_at_unix_s})
    return prof


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    from ridgeline.calibrate.verify import verify

    totals = {"median": 0, "mean": 0}
    n_rows = 0
    for run in map(Path, a.runs):
        traces = sorted(str(p) for p in run.glob("pt-*.jsonl"))
        for stat in ("median", "mean"):
            rep = verify(traces, refit(run, stat), closed_loop=True)
            rows = [r for r in rep.rows if r.metric in BARS]
            met = sum(row_met(r.metric, r.error, r.in_ci) for r in rows)
            totals[stat] += met
            errs = " ".join(f"{r.metric[:4]} {r.error:+.1%}" for r in rows
                            if r.metric != "ttft_p50")
            print(f"{run.name} {stat:6s}: {met}/{len(rows)}  {errs}")
        n_rows += len(rows)
    print(f"rows met over {len(a.runs)} runs: median {totals['median']}/{n_rows}, "
          f"mean {totals['mean']}/{n_rows}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
