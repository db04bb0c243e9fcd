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
  operator profiles, attention and collectives).

For each metric (TTFT mean/p90/p99, ITL, E2E mean/p90/p99) and regime (below_knee / near_knee /
overloaded, by the run's measured latencies: ridgeline.metrics.prediction_interval.regime_of)
and for all runs pooled: the log-ratios ln(pred/measured), n, mean, sd, the empirical 2.5/10/
90/97.5 percentiles and the shipped 80%/95% intervals (prediction_interval.residual_interval:
t prediction interval with model families as the independent units, enveloped with the
empirical percentiles).

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

import numpy as np

from ridgeline.calibrate.inference_perf import load_run
from ridgeline.calibrate.inference_perf_replay import METRICS, actual_values
from ridgeline.metrics.prediction_interval import (
    CATALOG_PATH,
    LEVELS,
    REGIMES,
    effective_units,
    regime_of,
    residual_interval,
)

ROOT = Path(__file__).resolve().parents[2]
NESTED = ROOT / "benchmarks" / "results" / "vllm_nested_cv.json"
REPLAY = ROOT / "benchmarks" / "results" / "bench_vllm_replay.json"
KERNELS = ROOT / "src" / "ridgeline" / "specs" / "data" / "kernels.json"
MEASURED = ROOT / "src" / "ridgeline" / "specs" / "data" / "kernels_measured_gemm_moe.json"
HARDWARE_DIR = ROOT / "src" / "ridgeline" / "specs" / "data" / "hardware"


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


def entry(values: list[float], runs: list[str], groups: list[str]) -> dict[str, Any] | None:
    families = len(set(groups))
    if len(values) < 2 or families < 2:
        return {"n": len(values), "families": families, "runs": runs,
                "log_ratios": values} if values else None
    r = np.asarray(values)
    q = np.percentile(r, [2.5, 10, 90, 97.5])
    e: dict[str, Any] = {
        "n": len(values), "families": families, "runs": runs,
        "run_families": groups,
        "effective_units": round(effective_units(values, groups), 4),
        "log_ratios": [round(v, 6) for v in values],
        "mean": round(float(r.mean()), 6), "sd": round(float(r.std(ddof=1)), 6),
        "median_abs": round(float(np.median(np.abs(r))), 6),
        "empirical_percentiles": {"q2.5": round(float(q[0]), 6), "q10": round(float(q[1]), 6),
                                  "q90": round(float(q[2]), 6), "q97.5": round(float(q[3]), 6)},
    }
    for lv in LEVELS:
        lo, hi = residual_interval(values, lv, families)
        e[f"interval{lv}"] = [round(lo, 6), round(hi, 6)]
    return e


def table(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """metric -> regime (and "all") -> entry, from per-run records."""
    out: dict[str, dict[str, Any]] = {}
    for m in METRICS:
        by: dict[str, Any] = {}
        for reg in (*REGIMES, "all"):
            rs = [r for r in records if reg in ("all", r["regime"])]
            e = entry([r["log_ratio"][m] for r in rs], [r["run"] for r in rs],
                      [r["family"] for r in rs])
            if e is not None:
                by[reg] = e
        out[m] = by
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
        "interval_method": "t prediction interval mean +- t(k-1, level) * sd * sqrt(1 + 1/k) "
                           "on the log-ratios (sd over the n runs, k = model families among "
                           "them: a new family's shift is one draw of k), widened to cover "
                           "the empirical percentiles (10/90 for 80%, 2.5/97.5 for 95%; "
                           "numpy linear); a regime with fewer than 4 runs or 2 families uses "
                           "all regimes pooled. effective_units (n / (1 + (n/f - 1) rho), "
                           "rho the within-family intraclass correlation) is recorded, not "
                           "used: intervals with it under-covered held-out families at 95% "
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
    }
    CATALOG_PATH.write_text(json.dumps(doc, indent=1) + "\n")
    for m, by in doc["residuals"].items():
        print(m, {k: (v["n"], v.get("interval80")) for k, v in by.items()})
    print(f"wrote {CATALOG_PATH.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
