"""Model-error intervals for a predicted latency: how wrong ridgeline may be, from its own
held-out residuals (the catalog specs/data/prediction_error.json).

A residual is the log-ratio r = ln(predicted / measured) of one held-out replayed run (the
nested leave-one-model-out replay of real vLLM runs: every run predicted with constants fitted
without its model). For a new prediction p the measured value lies in
[p * exp(-r_high), p * exp(-r_low)] with the interval's nominal coverage, where
[r_low, r_high] is the metric's interval (`residual_table`), per metric (TTFT mean/P90/P99,
ITL, E2E mean/P90/P99: each metric its own scale, since the tails err more):

- 80%: centred at zero, the half-width h the split-conformal rank of the scores |r|: the
  ceil((n + 1) q)-th smallest of the n scores, which covers a new exchangeable run with
  probability >= q whatever the scores' distribution. The scores are the prediction's
  regime's (below the knee / near it / overloaded) where it holds SCALE_MIN_RUNS runs, else
  all regimes': the regimes err by different amounts. No centre is fitted: the model
  families disagree on it (the ITL errors of one family are 4-8% high where another's are
  0-2%, and overloaded runs are low), so a centre fitted on the other families does not
  carry to a new one, and scores taken around an in-sample centre understate its error
  (held out by family, a median centre covered 62% at 80% on ITL);
- 95%: the hull of that interval, the zero-centred conformal interval of all runs' |r|, and
  a random-effects interval: centre c = the regime's median residual (where the regime holds
  CENTRE_MIN_RUNS runs from two families or more, else all regimes'), half-width the
  conformal rank of the *family-out* scores |r - c built without the run's family|
  (`family_out_scores`), which hold a new family's own offset. With fewer than 19 runs the
  95% rank passes n and the largest score is used (the guarantee is then n / (n + 1),
  flagged `capped`): the hull of the two readings stands in for the missing rank.

The rule was chosen on the same leave-one-family-out folds it is scored on. Chosen again
inside each fold from the other three families only (nested, among the rules compared in
benchmarks/accuracy/interval_coverage.py), it is picked in three folds of four (docs/
BENCHMARKS.md has the nested coverage).

The older rules (the regime's median centre with in-sample scores, `median_centre_table`; the
t prediction interval with model families as the units, `residual_interval`) are kept for
comparison on the same held-out folds (benchmarks/accuracy/interval_coverage.py).

Out-of-data cases widen in log space, each half-width combined in quadrature with
z * sigma_kernel: a GPU with measured kernel tables other than the replay GPU takes sigma from
its GEMM fit's leave-shapes-out median APE (sigma = median |error| / 0.6745, the normal
median absolute deviation); a GPU derived by rule takes the nearest measured GPU's sigma
(nearest by memory bandwidth) twice over in quadrature, once for the fit and once for the
unmeasured transfer. An engine without fitted engine costs uses the residuals of the model
without engine costs. A model family outside the replay needs no extra term: the residuals
are already each family's prediction made without its own runs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

CATALOG_PATH = Path(__file__).resolve().parents[1] / "specs" / "data" / "prediction_error.json"
LEVELS = (80, 95)
# A regime's own centre needs this many runs from two families or more (else: all pooled).
CENTRE_MIN_RUNS = 3
MIN_RUNS = CENTRE_MIN_RUNS
# A regime takes its own 80% scale where it holds this many runs: the fewest whose 80%
# conformal rank is finite (ceil(5 x 0.8) = 4); else all regimes' runs give it.
SCALE_MIN_RUNS = 4
REGIMES = ("below_knee", "near_knee", "overloaded")
# Regime of a run from its (measured or predicted) latencies: TTFT more than this many
# decode steps means requests wait in a queue that grows (inference-perf's unloaded TTFT is
# 2-5 ITLs); a P99 TTFT this many times the mean means queueing bursts near the knee.
OVERLOAD_TTFT_OVER_ITL = 25.0
KNEE_TTFT_P99_OVER_MEAN = 2.5
MAD_TO_SIGMA = 0.6745   # median |x| of a standard normal
Z = {80: 1.2815516, 95: 1.9599640}
# Student t quantiles t(df, 0.90) and t(df, 0.975), df = 1..30 (standard tables).
_T90 = (3.078, 1.886, 1.638, 1.533, 1.476, 1.440, 1.415, 1.397, 1.383, 1.372, 1.363, 1.356,
        1.350, 1.345, 1.341, 1.337, 1.333, 1.330, 1.328, 1.325, 1.323, 1.321, 1.319, 1.318,
        1.316, 1.315, 1.314, 1.313, 1.311, 1.310)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
# Which catalog residual stands for each reported metric and statistic. TPOT and ITL both
# use the replay's decode time per token; a median uses the mean's residuals (the replay
# scores means and tails, not medians).
METRIC_RESIDUAL = {
    ("ttft_ms", "mean"): "ttft_mean", ("ttft_ms", "median"): "ttft_mean",
    ("ttft_ms", "p90"): "ttft_p90", ("ttft_ms", "p99"): "ttft_p99",
    ("e2e_ms", "mean"): "e2e_mean", ("e2e_ms", "median"): "e2e_mean",
    ("e2e_ms", "p90"): "e2e_p90", ("e2e_ms", "p99"): "e2e_p99",
}
for _m in ("itl_ms", "tpot_ms"):
    for _s in ("mean", "median", "p90", "p99"):
        METRIC_RESIDUAL[(_m, _s)] = "itl"


def t_quantile(df: int, level: int) -> float:
    """Two-sided `level`% Student t quantile; beyond 30 df, Cornish-Fisher's first term."""
    if df < 1:
        raise ValueError(f"df: got {df}; allowed: >= 1")
    if df <= 30:
        return (_T90 if level == 80 else _T975)[df - 1]
    z = Z[level]
    return z + (z ** 3 + z) / (4.0 * df)


def effective_units(log_ratios: list[float] | np.ndarray, groups: list[str]) -> float:
    """How many independent draws `log_ratios` hold when values of one group (a model
    family) share part of their error: n / (1 + (m - 1) rho), the cluster-sampling design
    effect, with m the mean group size and rho the intraclass correlation of a one-way
    analysis of variance (clipped to [0, 1]). Between the number of groups (rho = 1: a
    family's runs are one draw) and n (rho = 0: every run its own draw).

    >>> round(effective_units([0.1, 0.1, -0.1, -0.1], ["a", "a", "b", "b"]), 6)
    2.0
    >>> effective_units([0.1, -0.1, 0.1, -0.1], ["a", "a", "b", "b"])
    4.0
    """
    y = np.asarray(log_ratios, dtype=np.float64)
    n = y.size
    names = sorted(set(groups))
    k = len(names)
    if len(groups) != n:
        raise ValueError(f"groups: got {len(groups)} labels for {n} values; allowed: one each")
    if k < 2 or n <= k:
        return float(max(k, 1))
    g = np.asarray(groups)
    sizes = np.array([np.sum(g == a) for a in names], dtype=np.float64)
    means = np.array([y[g == a].mean() for a in names])
    msb = float(np.sum(sizes * (means - y.mean()) ** 2) / (k - 1))
    msw = float(sum(np.sum((y[g == a] - y[g == a].mean()) ** 2) for a in names) / (n - k))
    m0 = (n - float(np.sum(sizes ** 2)) / n) / (k - 1)
    den = msb + (m0 - 1.0) * msw
    rho = min(max((msb - msw) / den, 0.0), 1.0) if den > 0 else 1.0
    return float(min(max(n / (1.0 + (n / k - 1.0) * rho), k), n))


def residual_interval(log_ratios: list[float] | np.ndarray, level: int,
                      units: float | None = None,
                      groups: list[str] | None = None) -> tuple[float, float]:
    """[r_low, r_high] of the log-ratios at `level`% (80 or 95): the t prediction interval
    enveloped with the empirical percentiles (see the module docstring). Needs >= 2 values.
    `units`: independent draws among the values, which set the t's degrees of freedom
    (floor(units) - 1) and the 1/n term; `groups`: each value's group (model family), from
    which `effective_units` derives them; neither: every value its own draw."""
    r = np.asarray(log_ratios, dtype=np.float64)
    n = r.size
    if n < 2:
        raise ValueError(f"log_ratios: got {n} values; allowed: >= 2")
    if groups is not None:
        units = effective_units(r, groups)
    k = float(n) if units is None else max(2.0, min(float(units), float(n)))
    tail = (100 - level) / 2.0
    m, sd = float(r.mean()), float(r.std(ddof=1))
    half = t_quantile(math.floor(k) - 1, level) * sd * math.sqrt(1.0 + 1.0 / k)
    lo_e, hi_e = (float(x) for x in np.percentile(r, [tail, 100.0 - tail]))
    return min(m - half, lo_e), max(m + half, hi_e)


def regime_of(ttft_mean: float, ttft_p99: float, itl: float) -> str:
    """below_knee / near_knee / overloaded from TTFT mean and P99 and ITL (one unit)."""
    if not all(math.isfinite(x) and x > 0 for x in (ttft_mean, ttft_p99, itl)):
        return "below_knee"
    if ttft_mean > OVERLOAD_TTFT_OVER_ITL * itl:
        return "overloaded"
    if ttft_p99 > KNEE_TTFT_P99_OVER_MEAN * ttft_mean:
        return "near_knee"
    return "below_knee"


def conformal_rank(n: int, level: int) -> int:
    """Split-conformal rank ceil((n + 1) q) of `level`% among n scores (may exceed n: then no
    finite interval has the guarantee).

    >>> conformal_rank(12, 80), conformal_rank(12, 95), conformal_rank(19, 95)
    (11, 13, 19)
    """
    if n < 1:
        raise ValueError(f"n: got {n}; allowed: >= 1")
    # integer arithmetic: (n + 1) * 80 / 100 must not round up past an exact integer
    return -(-(n + 1) * level // 100)


def conformal_halfwidth(scores: list[float] | np.ndarray, level: int
                        ) -> tuple[float, int, bool]:
    """(h, rank used, capped): the conformal_rank-th smallest score, or the largest where the
    rank exceeds the number of scores (capped: the guarantee is then n / (n + 1))."""
    s = np.sort(np.abs(np.asarray(scores, dtype=np.float64)))
    k = conformal_rank(s.size, level)
    return float(s[min(k, s.size) - 1]), min(k, s.size), k > s.size


def _conformal_intervals(centre: float, conf: dict[int, tuple[float, int, bool]]
                         ) -> dict[str, Any]:
    """A catalog entry's conformal ranks and its intervals [centre - h, centre + h] per level,
    from `conformal_halfwidth`'s (h, rank, capped) by level."""
    return {"conformal": {str(lv): {"rank": k, "halfwidth": round(h, 6), "capped": cap}
                          for lv, (h, k, cap) in conf.items()},
            **{f"interval{lv}": [round(centre - h, 6), round(centre + h, 6)]
               for lv, (h, _, _) in conf.items()}}


def _describe(values: list[float], runs: list[str], groups: list[str]) -> dict[str, Any]:
    r = np.asarray(values, dtype=np.float64)
    e: dict[str, Any] = {"n": len(values), "families": len(set(groups)), "runs": runs,
                         "run_families": groups,
                         "log_ratios": [round(v, 6) for v in values]}
    if r.size >= 2:
        q = np.percentile(r, [2.5, 10, 90, 97.5])
        e.update({"mean": round(float(r.mean()), 6), "sd": round(float(r.std(ddof=1)), 6),
                  "median_abs": round(float(np.median(np.abs(r))), 6),
                  "empirical_percentiles": {f"q{p:g}": round(float(v), 6)
                                            for p, v in zip((2.5, 10, 90, 97.5), q,
                                                            strict=True)}})
    return e


def _regime_centres(runs: list[dict[str, Any]], metric: str) -> dict[str, tuple[float, str]]:
    """regime (and "all") -> (median residual, where from): the regime's own where it holds
    CENTRE_MIN_RUNS runs from two families or more, else all runs'."""
    vals = [float(r["log_ratio"][metric]) for r in runs]
    c_all = float(np.median(vals)) if vals else 0.0
    out = {"all": (c_all, "all")}
    for reg in REGIMES:
        sel = [float(r["log_ratio"][metric]) for r in runs if r["regime"] == reg]
        own = (len(sel) >= CENTRE_MIN_RUNS
               and len({r["family"] for r in runs if r["regime"] == reg}) >= 2)
        out[reg] = (float(np.median(sel)), reg) if own else (c_all, "all")
    return out


def family_out_scores(runs: list[dict[str, Any]], metric: str) -> list[float]:
    """Each run's |r - centre of its regime built without its own family| (`_regime_centres`
    of the other families' runs): a score that holds the family's own offset, the part of a
    new family's error no centre fitted on the others can remove."""
    out = []
    for fam in sorted({r["family"] for r in runs}):
        cen = _regime_centres([r for r in runs if r["family"] != fam], metric)
        out += [abs(float(r["log_ratio"][metric]) - cen[r["regime"]][0])
                for r in runs if r["family"] == fam]
    return out


def residual_table(runs: list[dict[str, Any]], metrics: tuple[str, ...]
                   ) -> dict[str, dict[str, Any]]:
    """metric -> regime (and "all") -> catalog entry, from held-out runs (each a dict with
    "run", "family", "regime" and "log_ratio": metric -> ln(pred/measured)); the rule is the
    module docstring's. Every regime with runs carries `interval80`/`interval95`."""
    out: dict[str, dict[str, Any]] = {}
    for m in metrics:
        by: dict[str, Any] = {}
        for reg in (*REGIMES, "all"):
            sel = [r for r in runs if reg in ("all", r["regime"])]
            if sel:
                by[reg] = _describe([float(r["log_ratio"][m]) for r in sel],
                                    [r["run"] for r in sel], [r["family"] for r in sel])
        out[m] = by
        if len(runs) < 2 or len({r["family"] for r in runs}) < 2:
            continue
        abs_all = [abs(float(r["log_ratio"][m])) for r in runs]
        cen = _regime_centres(runs, m)
        h95_zero = conformal_halfwidth(abs_all, 95)
        h95_fam = conformal_halfwidth(family_out_scores(runs, m), 95)
        for reg, e in by.items():
            own = reg != "all" and e["n"] >= SCALE_MIN_RUNS
            h80 = conformal_halfwidth([abs(v) for v in e["log_ratios"]] if own else abs_all, 80)
            c95, c95_from = cen[reg]
            lo95 = min(-h95_zero[0], c95 - h95_fam[0], -h80[0])
            hi95 = max(h95_zero[0], c95 + h95_fam[0], h80[0])
            e.update({"centre": 0.0,
                      "centre_from": "zero (80%); the 95% also spans the median of the "
                                     f"{c95_from} residuals, {round(c95, 6)}, +- the "
                                     "family-out half-width",
                      "scale_n": e["n"] if own else len(abs_all),
                      "scale_from": f"the {reg} runs" if own else "all runs",
                      "conformal": {
                          "80": {"rank": h80[1], "halfwidth": round(h80[0], 6),
                                 "capped": h80[2]},
                          "95": {"rank": h95_zero[1], "halfwidth": round(h95_zero[0], 6),
                                 "capped": h95_zero[2]},
                          "95_family_out": {"rank": h95_fam[1],
                                            "halfwidth": round(h95_fam[0], 6),
                                            "capped": h95_fam[2]}},
                      "interval80": [round(-h80[0], 6), round(h80[0], 6)],
                      "interval95": [round(lo95, 6), round(hi95, 6)]})
    return out


def median_centre_table(runs: list[dict[str, Any]], metrics: tuple[str, ...]
                        ) -> dict[str, dict[str, Any]]:
    """The previous rule, kept for comparison on the same held-out folds: centre = the
    regime's median residual (`_regime_centres`), half-width = the conformal rank of every
    run's |r - centre of its regime| (in-sample centres). A regime without a centre of its
    own carries no interval (`residual_entry` then uses "all")."""
    out: dict[str, dict[str, Any]] = {}
    for m in metrics:
        by: dict[str, Any] = {}
        for reg in (*REGIMES, "all"):
            sel = [r for r in runs if reg in ("all", r["regime"])]
            if sel:
                by[reg] = _describe([float(r["log_ratio"][m]) for r in sel],
                                    [r["run"] for r in sel], [r["family"] for r in sel])
        out[m] = by
        if len(runs) < 2 or len({r["family"] for r in runs}) < 2:
            continue
        centre = _regime_centres(runs, m)
        scores = [abs(float(r["log_ratio"][m]) - centre[r["regime"]][0]) for r in runs]
        conf = {lv: conformal_halfwidth(scores, lv) for lv in LEVELS}
        for reg, e in by.items():
            c, came_from = centre[reg]
            if reg != "all" and came_from == "all":
                continue   # no centre of its own: residual_entry uses "all"
            e.update({"centre": round(c, 6), "centre_from": f"median of the {came_from} "
                      "residuals", "scale_n": len(scores), **_conformal_intervals(c, conf)})
    return out


def leave_one_family_out(runs: list[dict[str, Any]], metrics: tuple[str, ...],
                         build: Any = None) -> list[dict[str, Any]]:
    """Held-out coverage rows: for each model family, the residual table is built from the
    other families' runs only (`build(runs, metrics)`, default `residual_table`), and each of
    the family's runs is judged in its regime from its *predicted* latencies (as `simulate`
    does). Each run needs "predicted" and "measured" (metric -> value) beside the fields
    `residual_table` reads. One row per run and metric: interval80/95 ([low, high]), in80/in95,
    rel_width80/95 (full width over the prediction), abs_error |pred / measured - 1|."""
    build = build or residual_table
    dist = Distance("replayed", "replayed", 0.0, "", "vllm", True)
    rows: list[dict[str, Any]] = []
    for fam in sorted({r["family"] for r in runs}):
        cat = {"replay_hardware": "replayed", "fitted_engines": ["vllm"],
               "residuals": build([r for r in runs if r["family"] != fam], metrics)}
        for r in (x for x in runs if x["family"] == fam):
            p = r["predicted"]
            regime = regime_of(p["ttft_mean"], p["ttft_p99"], p["itl"])
            for m in metrics:
                iv = predict_interval(p[m], m, regime, dist, cat)
                meas = r["measured"][m]
                rows.append({"run": r["run"], "family": fam, "metric": m,
                             "regime_predicted": regime, "regime_measured": r["regime"],
                             "predicted": p[m], "measured": meas,
                             "abs_error": abs(p[m] / meas - 1.0),
                             **{f"interval{lv}": list(iv.bounds[lv]) for lv in LEVELS},
                             **{f"in{lv}": bool(iv.bounds[lv][0] <= meas <= iv.bounds[lv][1])
                                for lv in LEVELS},
                             **{f"rel_width{lv}": (iv.bounds[lv][1] - iv.bounds[lv][0]) / p[m]
                                for lv in LEVELS}})
    return rows


# A calibrated profile prices the steps from a probe of the user's own engine, so its error
# is not the fitted model's: it has its own held-out residuals, those of calibrate-then-verify
# runs of a real llama.cpp server on CPU (each load point predicted from a profile fitted on
# the probe only). The medians: TTFT, TPOT (per-request decode time per token, standing for
# ITL as well) and E2E P50, from starts on an idle box; TTFT and E2E means take their
# median's residuals (as the replay's medians take its means'). The tails: TTFT and E2E P90
# and P99, and mean TPOT and ITL, from later starts on a loaded box (a separate set: their
# profiles and medians differ from the idle ones), each widened to at least its median's
# interval. TPOT and ITL P90/P99 (not measured) keep the replay's, widened the same way.
CALIBRATED_METRICS = ("ttft_p50", "tpot_p50", "e2e_p50")
CALIBRATED_TAIL_METRICS = ("ttft_p90", "ttft_p99", "e2e_p90", "e2e_p99", "tpot_mean",
                           "itl_mean")
CALIBRATED_RESIDUAL = {
    **{(m, s): r for m, r in (("ttft_ms", "ttft_p50"), ("tpot_ms", "tpot_p50"),
                              ("itl_ms", "tpot_p50"), ("e2e_ms", "e2e_p50"))
       for s in ("mean", "median")},
    **{(m, s): f"{m[:-3]}_{s}" for m in ("ttft_ms", "e2e_ms") for s in ("p90", "p99")},
    ("tpot_ms", "mean"): "tpot_mean", ("itl_ms", "mean"): "itl_mean"}


def calibrated_table(points: list[dict[str, Any]], metrics: tuple[str, ...] = CALIBRATED_METRICS
                     ) -> dict[str, dict[str, Any]]:
    """metric -> entry (centre, interval80/95, conformal ranks) from calibrated runs' held-out
    load points (each a dict with "start" and "log_ratio": metric -> ln(pred/measured)): the
    centre is the median log-ratio, the half-width the split-conformal rank of the points'
    |r - centre| (one score per load point; the largest where the rank exceeds n)."""
    out: dict[str, dict[str, Any]] = {}
    for m in metrics:
        vals = [float(p["log_ratio"][m]) for p in points if m in p["log_ratio"]]
        if len(vals) < 2:
            continue
        c = float(np.median(vals))
        conf = {lv: conformal_halfwidth([v - c for v in vals], lv) for lv in LEVELS}
        out[m] = {"n": len(vals), "starts": len({p["start"] for p in points}),
                  "centre": round(c, 6), "centre_from": "median of the calibrated residuals",
                  "median_abs": round(float(np.median(np.abs(vals))), 6),
                  **_conformal_intervals(c, conf)}
    return out


def leave_one_start_out(points: list[dict[str, Any]],
                        metrics: tuple[str, ...] = CALIBRATED_METRICS,
                        build: Any = None) -> list[dict[str, Any]]:
    """Held-out coverage rows of the calibrated intervals: each start's (each fresh server's)
    load points against intervals built (`build(points, metrics)`, default `calibrated_table`)
    from the other starts' points only. Each point needs "start", "point", "predicted" and
    "measured" (metric -> value). Rows as `leave_one_family_out`'s."""
    build = build or calibrated_table
    rows: list[dict[str, Any]] = []
    for start in sorted({p["start"] for p in points}):
        cat = {"calibrated": {"residuals": build([p for p in points if p["start"] != start],
                                                 metrics)}}
        for p in (x for x in points if x["start"] == start):
            for m in metrics:
                if m not in p["predicted"]:
                    continue
                iv = calibrated_interval(p["predicted"][m], m, cat)
                meas, pred = p["measured"][m], p["predicted"][m]
                rows.append({"start": start, "point": p["point"], "metric": m,
                             "predicted": pred, "measured": meas,
                             "abs_error": abs(pred / meas - 1.0),
                             **{f"interval{lv}": list(iv.bounds[lv]) for lv in LEVELS},
                             **{f"in{lv}": bool(iv.bounds[lv][0] <= meas <= iv.bounds[lv][1])
                                for lv in LEVELS},
                             **{f"rel_width{lv}": (iv.bounds[lv][1] - iv.bounds[lv][0]) / pred
                                for lv in LEVELS}})
    return rows


def calibrated_interval(value: float, residual: str, catalog: dict[str, Any] | None = None
                        ) -> Interval:
    """Model-error interval of one `value` a calibrated profile predicted, `residual` one of
    CALIBRATED_METRICS: from the calibrated runs' held-out residuals."""
    cat = catalog if catalog is not None else load_catalog()
    entry = cat["calibrated"]["residuals"][residual]
    bounds = {lv: (value * math.exp(-entry[f"interval{lv}"][1]),
                   value * math.exp(-entry[f"interval{lv}"][0])) for lv in LEVELS}
    src = {"residual": residual, "table": "calibrated", "n": entry["n"],
           "starts": entry.get("starts"), "centre_from": entry.get("centre_from"),
           "conformal": entry.get("conformal"),
           "method": "split-conformal on |ln(pred/measured) - centre| of the held-out load "
                     "points of calibrate-then-verify runs of a real llama.cpp server on CPU "
                     "(rank ceil((n + 1) q), the largest where that exceeds n), centred on "
                     "their median residual",
           "hardware_kind": "calibrated profile"}
    return Interval(value, bounds, src)


@lru_cache(maxsize=1)
def load_catalog(path: str | None = None) -> dict[str, Any]:
    """The shipped residual catalog (or the one at `path`)."""
    return dict(json.loads(Path(path or CATALOG_PATH).read_text()))


@dataclass(frozen=True)
class Distance:
    """How far a prediction is from the data behind the residuals."""

    hardware: str
    hardware_kind: str        # "replayed" | "measured kernels" | "derived by rule"
    kernel_sigma_log: float   # extra log-sigma for the GPU (0 on the replayed GPU)
    kernel_source: str
    engine: str
    engine_fitted: bool
    model: str = ""

    def describe(self) -> dict[str, Any]:
        return {"hardware": self.hardware, "hardware_kind": self.hardware_kind,
                "kernel_sigma_log": round(self.kernel_sigma_log, 5),
                "kernel_source": self.kernel_source, "engine": self.engine,
                "engine_fitted": self.engine_fitted}


def _gpu_sigma(entry: dict[str, Any], engine: str) -> float:
    gemm = entry.get(engine) or entry.get("vllm") or next(iter(entry.values()))
    ape = gemm.get("bf16") or next(iter(gemm.values()))
    return float(ape) / MAD_TO_SIGMA


def distance_from_data(hardware: str, engine: str = "vllm", model: str = "",
                       catalog: dict[str, Any] | None = None,
                       memory_bandwidth_bytes_s: float | None = None) -> Distance:
    """Classify `hardware` (a catalog name; a GPU outside the catalog is "derived by rule",
    its nearest measured GPU found by `memory_bandwidth_bytes_s`) and `engine` against the
    catalog's data (see the module docstring)."""
    cat = catalog if catalog is not None else load_catalog()
    kfit = cat["kernel_fit_cv"]
    engine_fitted = engine in cat["fitted_engines"]
    if hardware == cat["replay_hardware"]:
        return Distance(hardware, "replayed", 0.0, "end-to-end replay residuals on this GPU",
                        engine, engine_fitted, model)
    gpus = kfit["gpus"]
    if hardware in gpus:
        s = _gpu_sigma(gpus[hardware]["gemm_cv_median_ape"], engine)
        return Distance(hardware, "measured kernels", s,
                        f"{hardware} GEMM leave-shapes-out CV median APE / {MAD_TO_SIGMA}",
                        engine, engine_fitted, model)
    bw = memory_bandwidth_bytes_s or _bandwidth(hardware)
    near = min(gpus, key=lambda g: abs(math.log(bw / gpus[g]["memory_bandwidth_bytes_s"]))
               if bw > 0 else 0.0)
    s = math.sqrt(2.0) * _gpu_sigma(gpus[near]["gemm_cv_median_ape"], engine)
    return Distance(hardware, "derived by rule", s,
                    f"nearest measured GPU {near} (by memory bandwidth): its GEMM CV sigma "
                    "counted twice in quadrature (fit + unmeasured transfer)",
                    engine, engine_fitted, model)


def _bandwidth(hardware: str) -> float:
    p = Path(__file__).resolve().parents[1] / "specs" / "data" / "hardware" / f"{hardware}.json"
    try:
        return float(json.loads(p.read_text())["memory_bandwidth_bytes_s"])
    except (OSError, KeyError, ValueError):
        return 0.0


@dataclass
class Interval:
    value: float
    bounds: dict[int, tuple[float, float]]            # level -> (low, high), value's unit
    source: dict[str, Any] = field(default_factory=dict)


def residual_entry(residual: str, regime: str, engine_fitted: bool,
                   catalog: dict[str, Any] | None = None) -> tuple[dict[str, Any], str, str]:
    """The catalog entry used for `residual` in `regime`: (entry, regime used, table)."""
    cat = catalog if catalog is not None else load_catalog()
    table = "residuals" if engine_fitted else "engine_unfitted"
    by_regime = cat[table][residual]
    e = by_regime.get(regime)
    if e is None or "interval80" not in e:
        return by_regime["all"], f"all (no {regime} runs among the residuals)", table
    return e, regime, table


def predict_interval(value: float, residual: str, regime: str, distance: Distance,
                     catalog: dict[str, Any] | None = None) -> Interval:
    """Model-error interval of one predicted `value` whose residual kind is `residual`
    (a catalog key such as "ttft_p99")."""
    entry, used, table = residual_entry(residual, regime, distance.engine_fitted, catalog)
    bounds: dict[int, tuple[float, float]] = {}
    for level in LEVELS:
        r_lo, r_hi = entry[f"interval{level}"]
        k = Z[level] * distance.kernel_sigma_log
        if k > 0:   # widen each side in quadrature around the residuals' centre
            mid = entry.get("centre", entry.get("mean", 0.5 * (r_lo + r_hi)))
            r_lo = mid - math.hypot(mid - r_lo, k)
            r_hi = mid + math.hypot(r_hi - mid, k)
        bounds[level] = (value * math.exp(-r_hi), value * math.exp(-r_lo))
    src = {"residual": residual, "table": table, "regime": used, "n": entry["n"],
           "families": entry.get("families"),
           "centre_from": entry.get("centre_from"),
           "scale_n": entry.get("scale_n"),
           "conformal": entry.get("conformal"),
           "scale_from": entry.get("scale_from"),
           "method": "80%: split-conformal on |ln(pred/measured)| of held-out runs, centred "
                     "at zero (the regime's runs where it has 4 or more, else all; rank "
                     "ceil((n + 1) q), the largest where that exceeds n); 95%: the hull of "
                     "that, the zero-centred 95% of all runs, and the regime's median "
                     "residual +- the 95% rank of leave-one-family-out scores",
           **distance.describe()}
    return Interval(value, bounds, src)


def widen_by_propagation(iv: Interval, scaled_values: dict[int, tuple[float, float]],
                         note: str) -> Interval:
    """Envelope of `iv` with the values a rerun gave at the step-time residual's quantiles
    (level -> (value at the low step scale, value at the high)): near the knee a small
    step-time error is a large queueing error, which the replay's runs may not show."""
    out = {}
    for level, (lo, hi) in iv.bounds.items():
        a, b = scaled_values.get(level, (lo, hi))
        out[level] = (min(lo, a, b), max(hi, a, b))
    return Interval(iv.value, out, {**iv.source, "propagated": note})


def step_scales(regime: str, distance: Distance,
                catalog: dict[str, Any] | None = None) -> dict[int, tuple[float, float]]:
    """Step-time multipliers at the decode-time residual's interval ends, per level:
    measured/predicted = exp(-r), so (exp(-r_high), exp(-r_low))."""
    iv = predict_interval(1.0, "itl", regime, distance, catalog)
    return {lv: (lo, hi) for lv, (lo, hi) in iv.bounds.items()}


def interval_fields(iv: Interval, stat: str) -> dict[str, Any]:
    """JSON fields for one statistic: `<stat>_interval80`, `<stat>_interval95`."""
    return {f"{stat}_interval{lv}": [_r(lo), _r(hi)] for lv, (lo, hi) in iv.bounds.items()}


def _r(x: float) -> float | None:
    """7 significant figures (seconds and tokens/s alike), None when not finite."""
    return float(f"{x:.7g}") if math.isfinite(x) else None


COVERAGE_NOTE = ("model error intervals: nominal 80% and 95% coverage of the measured value, "
                 "from held-out (leave-one-model-out) residuals of replayed real vLLM runs; "
                 "empirical coverage in docs/BENCHMARKS.md")
CALIBRATED_NOTE = ("model error intervals: nominal 80% and 95% coverage of the measured value; "
                   "means, medians and TTFT/E2E P90 and P99 from the held-out residuals of "
                   "calibrate-then-verify runs of a real llama.cpp server on CPU (leave-one-"
                   "start-out coverage in docs/BENCHMARKS.md), TPOT/ITL P90 and P99 from the "
                   "replayed real vLLM runs'")


def _at_least(iv: Interval, med: Interval, med_key: str) -> Interval:
    """`iv` widened to hold `med` at each level: a tail errs at least as much as its median."""
    return Interval(iv.value, {lv: (min(lo, med.bounds[lv][0]), max(hi, med.bounds[lv][1]))
                               for lv, (lo, hi) in iv.bounds.items()},
                    {**iv.source, "widened": f"to at least the calibrated {med_key} interval"})


def calibrated_stat_interval(value: float, metric: str, stat: str,
                             residuals: dict[str, Any], catalog: dict[str, Any] | None = None
                             ) -> Interval | None:
    """The calibrated interval of `stat` (mean, median, p90, p99) of `metric` (ttft_ms, ...),
    or None where the calibrated table has no residuals for it: a median from its own P50
    residuals; a tail or a mean with residuals of its own (CALIBRATED_TAIL_METRICS) from
    them, widened to at least the median's; another mean from its median's."""
    key = CALIBRATED_RESIDUAL.get((metric, stat), "")
    med_key = CALIBRATED_RESIDUAL.get((metric, "median"), "")
    if key not in residuals and stat == "mean":
        key = med_key
    if key not in residuals:
        return None
    iv = calibrated_interval(value, key, catalog)
    if key == med_key or med_key not in residuals:
        return iv
    return _at_least(iv, calibrated_interval(value, med_key, catalog), med_key)


def annotate_latency(latency: dict[str, dict[str, Any]], regime: str, distance: Distance,
                     propagated: dict[str, dict[str, dict[int, tuple[float, float]]]]
                     | None = None, catalog: dict[str, Any] | None = None,
                     calibrated: bool = False) -> None:
    """Add `{mean,median,p90,p99}_interval{80,95}` and `interval_source` to the TTFT, TPOT,
    ITL and E2E objects of an analysis's `latency` dict (to_dict form), in place.
    `propagated[metric][stat]`: values of reruns at the step-time residual's ends.
    `calibrated`: a calibration profile timed the steps: a statistic with calibrated
    residuals takes them (`calibrated_stat_interval`), the others (TPOT and ITL P90/P99) the
    replay's widened to at least the calibrated median's."""
    cal = (catalog if catalog is not None else load_catalog()).get("calibrated") \
        if calibrated else None
    for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        d = latency.get(metric)
        if not d or d.get("available") is False:
            continue
        srcs = {}
        for stat in ("mean", "median", "p90", "p99"):
            v = json_stat(d, stat)
            if v is None:
                continue
            iv = calibrated_stat_interval(v, metric, stat, cal["residuals"], catalog) \
                if cal else None
            if iv is None:
                iv = predict_interval(v, METRIC_RESIDUAL[(metric, stat)], regime, distance,
                                      catalog)
                med_key = CALIBRATED_RESIDUAL.get((metric, "median"), "")
                if cal and med_key in cal["residuals"]:
                    iv = _at_least(iv, calibrated_interval(v, med_key, catalog), med_key)
            p = (propagated or {}).get(metric, {}).get(stat)
            if p:
                iv = widen_by_propagation(iv, p, "enveloped with reruns at the step-time "
                                                 "residual's interval ends")
            d.update(interval_fields(iv, stat))
            srcs[stat] = iv.source
        d["interval_source"] = {"coverage": "nominal 80% and 95%",
                                "note": CALIBRATED_NOTE if cal else COVERAGE_NOTE,
                                "by_statistic": srcs}


def json_stat(d: dict[str, Any], stat: str) -> float | None:
    """Statistic `stat` (mean, median, p90, p99) of one metric's JSON object (an analysis's
    or a streamed run's `latency.<metric>`): None where absent, not finite or not positive."""
    if stat == "mean":
        v = d.get("mean")
    else:
        key = "p50" if stat == "median" else stat
        p = (d.get("percentiles") or {}).get(key)
        v = p.get("value") if isinstance(p, dict) else p
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else None




# `estimate`'s scalar result: key -> (catalog residual, True for a rate, the inverse of a time)
ESTIMATE_KEYS = {
    "prefill_s": ("ttft_mean", False), "ttft_s": ("ttft_mean", False),
    "serving_ttft_s": ("ttft_mean", False),
    "tpot_s": ("itl", False), "e2e_s": ("e2e_mean", False),
    "decode_aggregate_tok_s": ("itl", True), "per_sequence_tok_s": ("itl", True),
    "e2e_output_tok_s": ("e2e_mean", True),
}


def annotate_estimate(result: dict[str, Any], distance: Distance,
                      catalog: dict[str, Any] | None = None) -> None:
    """Add `<name>_interval80_<unit>` and `..._interval95_<unit>` (e.g. `tpot_interval80_s`)
    beside estimate's TTFT, TPOT, E2E and throughput values and
    one `interval_source`, in place. One batch with no queue: the below-knee residuals. A
    rate is the inverse of a time: its interval is the time's, inverted."""
    srcs = {}
    for key, (residual, rate) in ESTIMATE_KEYS.items():
        v = result.get(key)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            continue
        iv = predict_interval(1.0 / v if rate else float(v), residual, "below_knee", distance,
                              catalog)
        base, unit = (key[:-6], "tok_s") if key.endswith("_tok_s") else (key[:-2], "s")
        for lv, (lo, hi) in iv.bounds.items():   # the unit stays last: ttft_interval80_s
            result[f"{base}_interval{lv}_{unit}"] = [_r(1.0 / hi), _r(1.0 / lo)] if rate \
                else [_r(lo), _r(hi)]
        srcs[key] = iv.source
    result["interval_source"] = {"coverage": "nominal 80% and 95%", "note": COVERAGE_NOTE,
                                 "regime": "below_knee (one batch, no queue)",
                                 "by_value": srcs}


__all__ = ["CALIBRATED_METRICS", "CALIBRATED_NOTE", "CALIBRATED_RESIDUAL",
           "CALIBRATED_TAIL_METRICS", "CATALOG_PATH",
           "CENTRE_MIN_RUNS", "COVERAGE_NOTE", "ESTIMATE_KEYS", "LEVELS", "MIN_RUNS", "REGIMES",
           "SCALE_MIN_RUNS", "Distance", "Interval", "annotate_estimate", "annotate_latency",
           "calibrated_interval", "calibrated_stat_interval", "calibrated_table",
           "conformal_halfwidth", "conformal_rank",
           "distance_from_data", "effective_units", "family_out_scores", "interval_fields",
           "json_stat", "leave_one_family_out", "leave_one_start_out", "load_catalog",
           "median_centre_table", "predict_interval", "regime_of", "residual_entry",
           "residual_interval", "residual_table", "step_scales", "t_quantile",
           "widen_by_propagation"]
