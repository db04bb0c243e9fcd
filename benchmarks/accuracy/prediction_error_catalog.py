"""Build src/ridgeline/specs/data/prediction_error.json: ridgeline's held-out residuals.

Inputs (held-out errors only, nothing fitted here):
- benchmarks/results/vllm_nested_cv.json "per_run": each of the 16 real vLLM runs on H100 SXM
  predicted with kernel scales and engine costs fitted without its model (nested
  leave-one-model-out); the measured values come from the run's own files
  (<shared data>/vllm-inference-perf/experiments/<run>);
- benchmarks/results/bench_vllm_replay.json "per_run"."baseline": the same runs predicted with no
  engine costs, standing for an engine whose costs were never fitted;
- the kernel fits' cross-validated errors: specs/data/kernels_measured_gemm_moe.json (GEMM and
  MoE per GPU, engine and dtype, leave-shapes-out) and specs/data/kernels.json (older per-
  operator profiles, attention and collectives);
- the calibrated case (a calibration profile times the steps): every load point of the stored
  calibrate-then-verify starts of a real llama.cpp server on CPU (calibrated_points), whose
  medians' residuals give a calibrated scenario's median intervals
  (prediction_interval.calibrated_table: centre = median log-ratio, split-conformal half-width).

For each metric (TTFT mean/p90/p99, ITL, E2E mean/p90/p99) and regime (below_knee / near_knee /
overloaded, by the run's measured latencies: ridgeline.metrics.prediction_interval.regime_of)
and for all runs pooled: the log-ratios ln(pred/measured), n, mean, sd, the empirical 2.5/10/
90/97.5 percentiles and the shipped 80%/95% intervals (prediction_interval.residual_table:
80% centred at zero, half-width = the split-conformal rank ceil((n + 1) q) of the regime's
|residual| (all runs' where the regime has fewer than 4); 95% also spanning the regime's
median residual +- the rank of the leave-one-family-out scores).

    .venv/bin/python benchmarks/accuracy/prediction_error_catalog.py
"""

from __future__ import annotations

import json
import math
import os
import sys
from datetime import date
from pathlib import Path
from typing import Any

from ridgeline.calibrate.inference_perf import load_run
from ridgeline.calibrate.inference_perf_replay import METRICS, actual_values
from ridgeline.metrics.prediction_interval import (
    CALIBRATED_METRICS,
    CALIBRATED_TAIL_METRICS,
    CATALOG_PATH,
    calibrated_table,
    effective_units,
    regime_of,
    residual_table,
)

ROOT = Path(__file__).resolve().parents[2]
NESTED = ROOT / "benchmarks" / "results" / "vllm_nested_cv.json"
REPLAY = ROOT / "benchmarks" / "results" / "bench_vllm_replay.json"
KERNELS = ROOT / "src" / "ridgeline" / "specs" / "data" / "kernels.json"
MEASURED = ROOT / "src" / "ridgeline" / "specs" / "data" / "kernels_measured_gemm_moe.json"
HARDWARE_DIR = ROOT / "src" / "ridgeline" / "specs" / "data" / "hardware"
BENCH_CALIBRATION = ROOT / "benchmarks" / "results" / "bench_calibration.json"
OPEN_LOOP_FLOW = ROOT / "benchmarks" / "results" / "llamacpp_open_loop_flow.json"
BENCH_CALIBRATION_LOADED = ROOT / "benchmarks" / "results" / "bench_calibration_loaded_box.json"


def shared_data() -> Path:
    env = os.environ.get("RIDGELINE_SHARED_DATA")
    return Path(env) if env else ROOT.parent / "shared" / "data"


def run_records(per_run: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One record per run: name, model family, regime (measured), log-ratios per metric."""
    out = []
    for name, pred in sorted(per_run.items()):
        run = load_run(shared_data() / "vllm-inference-perf" / "experiments" / name)
        act = actual_values(run)
        regime = regime_of(act["ttft_mean"], act["ttft_p99"], act["itl"])
        out.append({"run": name, "family": run.family, "regime": regime,
                    "measured": {k: act[k] for k in METRICS},
                    "predicted": {k: pred[f"pred_{k}"] for k in METRICS},
                    "log_ratio": {k: math.log(pred[f"pred_{k}"] / act[k]) for k in METRICS}})
    return out


def table(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """metric -> regime (and "all") -> entry, from per-run records; each entry also records
    the effective number of independent draws (reported, not used)."""
    out = residual_table(records, METRICS)
    for by in out.values():
        for e in by.values():
            if e["n"] >= 2 and e["families"] >= 2:
                e["effective_units"] = round(effective_units(e["log_ratios"],
                                                             e["run_families"]), 4)
    return out


def calibrated_points() -> list[dict[str, Any]]:
    """One record per load point of every stored calibrate-then-verify start of a real
    llama.cpp server on CPU: start, point, predicted/measured/log-ratio per metric (TTFT, TPOT
    and E2E P50). Each start's profile was fitted on its probe, never on the load points; the
    "cross_start" rows of bench_calibration.json (a profile from the other start) are left
    out: they repeat the same measured values."""
    starts: list[tuple[str, list[dict[str, Any]]]] = []
    for i, st in enumerate(json.loads(BENCH_CALIBRATION.read_text())["starts"]):
        starts.append((f"bench_calibration start {i}", st["calibrated"]["rows"]))
    for i, run in enumerate(json.loads(OPEN_LOOP_FLOW.read_text())):
        starts.append((f"llamacpp_open_loop_flow entry {i} (run {run['run']})", run["rows"]))
    out = []
    for start, rows in starts:
        for point in dict.fromkeys(r["point"] for r in rows):
            sel = {r["metric"]: r for r in rows if r["point"] == point}
            keep = [m for m in CALIBRATED_METRICS if m in sel]
            out.append({"start": start, "point": point,
                        "predicted": {m: float(sel[m]["predicted"]) for m in keep},
                        "measured": {m: float(sel[m]["measured"]) for m in keep},
                        "log_ratio": {m: math.log(sel[m]["predicted"] / sel[m]["measured"])
                                      for m in keep}})
    return out


def calibrated_tail_points() -> list[dict[str, Any]]:
    """One record per load point of the loaded-box calibrate-then-verify starts
    (BENCH_CALIBRATION_LOADED, `starts[].calibrated_tails.rows`): TTFT and E2E P90/P99 and
    mean TPOT and ITL, predicted and measured from the same traces as the start's medians.
    A separate set from `calibrated_points`: its starts ran on a loaded box (their profiles
    and medians differ from the idle ones)."""
    if not BENCH_CALIBRATION_LOADED.exists():
        return []
    out = []
    for i, st in enumerate(json.loads(BENCH_CALIBRATION_LOADED.read_text())["starts"]):
        rows = (st.get("calibrated_tails") or {}).get("rows", [])
        for point in dict.fromkeys(r["point"] for r in rows):
            sel = {r["metric"]: r for r in rows if r["point"] == point
                   and r["predicted"] and r["measured"]}
            keep = [m for m in CALIBRATED_TAIL_METRICS if m in sel]
            out.append({"start": f"bench_calibration_loaded_box start {i}", "point": point,
                        "predicted": {m: float(sel[m]["predicted"]) for m in keep},
                        "measured": {m: float(sel[m]["measured"]) for m in keep},
                        "log_ratio": {m: math.log(sel[m]["predicted"] / sel[m]["measured"])
                                      for m in keep}})
    return out


def kernel_fit_cv() -> dict[str, Any]:
    meas = json.loads(MEASURED.read_text())
    gpus: dict[str, Any] = {}
    for name, aic in meas["hardware"].items():
        g: dict[str, Any] = {"aic_system": aic}
        for op in ("gemm", "moe"):
            fits = meas[op].get(aic, {})
            g[f"{op}_cv_median_ape"] = {
                eng: {dt: v["_fit"]["cv"]["median_ape"] for dt, v in by.items()
                      if "cv" in v.get("_fit", {})} for eng, by in fits.items()}
            g[f"{op}_cv_kind"] = next((v["_fit"]["cv"]["kind"] for by in fits.values()
                                       for v in by.values() if "cv" in v.get("_fit", {})), None)
        hw = json.loads((HARDWARE_DIR / f"{name}.json").read_text())
        g["memory_bandwidth_bytes_s"] = hw["memory_bandwidth_bytes_s"]
        gpus[name] = g
    profiles: dict[str, Any] = {}

    def walk(x: Any, path: str) -> None:
        if isinstance(x, dict):
            fit = x.get("_fit")
            if isinstance(fit, dict) and "cv" in fit:
                profiles[path.strip("/")] = {"cv_median_ape": fit["cv"].get("median_ape"),
                                             "cv_kind": fit["cv"].get("kind"),
                                             "rows": fit.get("rows")}
            for k, v in x.items():
                if k != "_fit":
                    walk(v, f"{path}/{k}")

    walk(json.loads(KERNELS.read_text()), "")
    return {"gpus": gpus, "operator_profiles": profiles,
            "source": "specs/data/kernels_measured_gemm_moe.json and specs/data/kernels.json "
                      "cross-validation entries"}


def main() -> int:
    nested = json.loads(NESTED.read_text())["per_run"]
    baseline = json.loads(REPLAY.read_text())["per_run"]["baseline"]
    recs = run_records(nested)
    base_recs = run_records(baseline)
    cal = calibrated_points()
    tails = calibrated_tail_points()
    doc = {
        "_about": "Held-out prediction residuals of ridgeline, for model-error intervals "
                  "(ridgeline.metrics.prediction_interval). Built by "
                  "benchmarks/accuracy/prediction_error_catalog.py from the nested leave-one-"
                  "model-out replay of 16 real vLLM runs on H100 SXM "
                  "(benchmarks/results/vllm_nested_cv.json, measured values from the runs' "
                  "inference-perf reports) and the kernel fits' cross-validated errors.",
        "date": date.today().isoformat(),
        "log_ratio": "ln(predicted / measured); the measured value lies in "
                     "[pred * exp(-r_high), pred * exp(-r_low)]",
        "interval_method": "per metric and regime: 80% = [-h, h], h = split-conformal, the "
                           "ceil((n + 1) q)-th smallest of the n scores |r| of the regime's "
                           "runs (of all runs where the regime has fewer than 4; the largest "
                           "where the rank exceeds n: guarantee n / (n + 1), 'capped'); 95% = "
                           "the hull of [-h80, h80], the zero-centred 95% of all runs' |r| and "
                           "c +- h_fo, c the regime's median log-ratio (all regimes' where "
                           "the regime has fewer than 3 runs or 1 family), h_fo the 95% rank "
                           "of the family-out scores |r - c built without the run's family|. "
                           "effective_units (n / (1 + (n/f - 1) rho)) is recorded, not used "
                           "(docs/BENCHMARKS.md)",
        "regime_rule": "overloaded: TTFT mean > 25 x ITL; near_knee: TTFT P99 > 2.5 x TTFT "
                       "mean; else below_knee (measured values for the catalog, predicted "
                       "values when applied)",
        "replay_hardware": "h100-sxm",
        "fitted_engines": ["vllm"],
        "runs": recs,
        "residuals": table(recs),
        "engine_unfitted": table(base_recs),
        "engine_unfitted_source": "benchmarks/results/bench_vllm_replay.json per_run.baseline: the "
                                  "perf model with no engine costs (kernel scales fitted on "
                                  "all runs)",
        "kernel_fit_cv": kernel_fit_cv(),
        "calibrated": {
            "source": "benchmarks/results/bench_calibration.json (starts[].calibrated.rows) and "
                      "benchmarks/results/llamacpp_open_loop_flow.json (rows): fresh starts "
                      "of a real llama.cpp server on 2-vCPU VMs, each calibrated on a probe "
                      "and then verified at closed C = 3 and two Poisson rates; the load "
                      "points are held out from the profile's fit",
            "metrics": "ttft_p50, tpot_p50 (stands for ITL too), e2e_p50 from the idle-box "
                       "starts; ttft_p90/p99, e2e_p90/p99, tpot_mean, itl_mean from the "
                       "loaded-box starts (tail_points)",
            "points": cal,
            "tail_source": "benchmarks/results/bench_calibration_loaded_box.json "
                           "(starts[].calibrated_tails.rows): fresh starts of the same server "
                           "on a 2-vCPU box loaded by other jobs (server and client at nice "
                           "-15), each calibrated on its probe and verified at the same three "
                           "points; kept apart from the idle starts (their medians differ)",
            "tail_points": tails,
            "residuals": {**calibrated_table(cal),
                          **calibrated_table(tails, CALIBRATED_TAIL_METRICS)},
        },
    }
    CATALOG_PATH.write_text(json.dumps(doc, indent=1) + "\n")
    for m, by in doc["residuals"].items():
        print(m, {k: (v["n"], v.get("interval80")) for k, v in by.items()})
    print(f"wrote {CATALOG_PATH.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
