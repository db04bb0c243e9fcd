"""Empirical coverage of the model-error intervals on held-out models.

Leave-one-model-out over the shipped residual catalog's runs
(src/ridgeline/specs/data/prediction_error.json "runs": 16 real vLLM runs on H100 SXM, four
model families, each run's prediction already made without its family's runs): for each
family, the residual tables are rebuilt from the other families' runs only, each held-out
run's regime is judged from its *predicted* latencies (as `simulate` does), and the interval
`ridgeline.metrics.prediction_interval.predict_interval` gives its predicted value is checked
against the measured value. Reported per metric and per regime: coverage of the nominal 80%
and 95% intervals, the median relative width of the 80% interval, the median |error|, and
each level's half-width (the interval's reach from the prediction, (high - low) / 2 /
predicted) over the median |error|: the width bar is on the 80% half-width (a calibrated
normal 80% interval reaches 1.2816 / 0.6745 = 1.9 x the median |error|, its full width is
3.8 x; the 95% half-width is 2.9 x).

The calibrated case (a calibration profile times the steps): every stored calibrate-then-
verify start of a real llama.cpp server on CPU (the catalog's "calibrated" points, from
benchmarks/results/bench_calibration.json and llamacpp_open_loop_flow.json: TTFT, TPOT and E2E
P50 at three load points per start), leave-one-start-out: each start's points against the
calibrated intervals built from the other starts' residuals only; and the same points against
the interval shown for them before (the vLLM replay's residuals standing in), in the two
regimes their P50s allow (the near-knee test needs a mean these starts do not store). The
tails (TTFT and E2E P90/P99, mean TPOT and ITL) come from later starts on a loaded box
(benchmarks/results/bench_calibration_loaded_box.json, the catalog's "tail_points"), scored
the same way among themselves: as shipped (each widened to its idle median's interval), on
their own residuals alone, and against what a calibrated run showed for them before.

What it does not cover: the step-time propagation `simulate` adds (reruns of the scenario;
it only widens the intervals), other GPUs and engines (no end-to-end runs to hold out).

    .venv/bin/python benchmarks/accuracy/interval_coverage.py

Writes benchmarks/results/interval_coverage.json and prints a markdown table.
"""

from __future__ import annotations

import json
import math
import sys
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.metrics.prediction_interval import (
    CALIBRATED_METRICS,
    CALIBRATED_TAIL_METRICS,
    LEVELS,
    METRIC_RESIDUAL,
    REGIMES,
    Distance,
    calibrated_table,
    conformal_halfwidth,
    family_out_scores,
    leave_one_family_out,
    leave_one_start_out,
    load_catalog,
    median_centre_table,
    predict_interval,
    residual_interval,
    residual_table,
)

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "interval_coverage.json"
METRICS = ("ttft_mean", "ttft_p90", "ttft_p99", "itl", "e2e_mean", "e2e_p90", "e2e_p99")
BARS = {"80_low": 0.70, "80_high": 0.90, "95_low": 0.88, "width_over_error": 3.0}


def t_rule_table(runs: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Any]:
    """The previous rule, for comparison: per metric and regime (4 runs, 2 families or
    more, else pooled) the t prediction interval with model families as the units,
    enveloped with the empirical percentiles."""
    tab: dict[str, dict[str, Any]] = {}
    for m in metrics:
        by: dict[str, Any] = {}
        for reg in (*REGIMES, "all"):
            sel = [r for r in runs if reg in ("all", r["regime"])]
            vals = [r["log_ratio"][m] for r in sel]
            fams = len({r["family"] for r in sel})
            if len(vals) >= (2 if reg == "all" else 4) and fams >= 2:
                e: dict[str, Any] = {"n": len(vals), "mean": float(np.mean(vals))}
                for lv in LEVELS:
                    e[f"interval{lv}"] = list(residual_interval(vals, lv, fams))
                by[reg] = e
        tab[m] = by
    return tab


def pooled_table(centre: str) -> Any:
    """Comparison: one conformal interval per metric, all regimes pooled, centred on 0
    (`centre` "zero") or on the metric's median residual ("median")."""
    def build(runs: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Any]:
        tab: dict[str, dict[str, Any]] = {}
        for m in metrics:
            vals = np.array([r["log_ratio"][m] for r in runs])
            c = float(np.median(vals)) if centre == "median" else 0.0
            e: dict[str, Any] = {"n": int(vals.size), "centre": c}
            for lv in LEVELS:
                h = conformal_halfwidth(np.abs(vals - c), lv)[0]
                e[f"interval{lv}"] = [c - h, c + h]
            tab[m] = {"all": e}
        return tab
    return build


def mondrian_table(runs: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Any]:
    """Comparison: the previous rule with the 80% scale from the regime's own scores where
    the regime has 4 runs or more (the fewest with a finite 80% rank), centred on the
    regime's median; 95% as that rule's (no regime has the 19 runs its own 95% rank
    needs)."""
    tab = median_centre_table(runs, metrics)
    for m in metrics:
        for reg in REGIMES:
            sel = [r["log_ratio"][m] for r in runs if r["regime"] == reg]
            e = tab[m].get(reg)
            if e is None or "interval80" not in e or len(sel) < 4:
                continue
            c = e["centre"]
            h = conformal_halfwidth(np.abs(np.asarray(sel) - c), 80)[0]
            lo95, hi95 = e["interval95"]
            e["interval80"] = [c - h, c + h]
            e["interval95"] = [min(lo95, c - h), max(hi95, c + h)]
    return tab


def family_out_table(runs: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Any]:
    """Comparison: the regime's median centre, the half-width the conformal rank of the
    family-out scores (each run against a centre built without its family) at both levels."""
    tab = median_centre_table(runs, metrics)
    for m in metrics:
        hs = {lv: conformal_halfwidth(family_out_scores(runs, m), lv)[0] for lv in LEVELS}
        for e in tab[m].values():
            if "interval80" in e:
                e.update({f"interval{lv}": [e["centre"] - h, e["centre"] + h]
                          for lv, h in hs.items()})
    return tab


RULES = {"shipped": residual_table, "previous_median_centre": median_centre_table,
         "previous_t_families": t_rule_table,
         "pooled_centre_zero": pooled_table("zero"),
         "pooled_centre_median": pooled_table("median"),
         "family_out_scores": family_out_table,
         "mondrian_80": mondrian_table}


def nested_selection(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The rule chosen without the held-out family: for each family, every rule in RULES is
    scored by leave-one-family-out over the other three families only (the bars met at 80%
    and 95% over the 7 metrics, ties to the smaller summed |80% coverage - 0.8|), the best is
    built from those three families and judged on the held-out one. The held-out rows of all
    folds are then scored as `coverage` scores the shipped rule's."""
    chosen: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for fam in sorted({r["family"] for r in runs}):
        train = [r for r in runs if r["family"] != fam]
        score = {}
        for name, build in RULES.items():
            inner = leave_one_family_out(train, METRICS, build)
            by = {m: summary([x for x in inner if x["metric"] == m]) for m in METRICS}
            met = bars_met(by)
            score[name] = (met["80"] + met["95"],
                           -sum(abs(s["coverage80"] - 0.8) for s in by.values()))
        best = max(score, key=lambda k: score[k])
        chosen[fam] = {"rule": best, "inner_bars_met_80_95": score[best][0]}
        rows += [x for x in leave_one_family_out(runs, METRICS, RULES[best])
                 if x["family"] == fam]
    by_metric = {m: summary([x for x in rows if x["metric"] == m]) for m in METRICS}
    return {"what": "rule chosen by an inner leave-one-family-out on the other three "
                    "families only, then judged on the held-out family",
            "chosen": chosen, "by_metric": by_metric, "overall": summary(rows),
            "metrics_meeting_bars": bars_met(by_metric)}


def summary(sel: list[dict[str, Any]]) -> dict[str, Any]:
    """Coverage, widths, median |error| and the bars met of a set of held-out rows."""
    e = float(np.median([x["abs_error"] for x in sel]))
    out: dict[str, Any] = {"n": len(sel), "median_abs_error": e}
    for lv in LEVELS:
        w = float(np.median([x[f"rel_width{lv}"] for x in sel]))
        out[f"coverage{lv}"] = float(np.mean([x[f"in{lv}"] for x in sel]))
        out[f"median_rel_width{lv}"] = w
        # the interval's reach from the prediction: half its full width
        out[f"halfwidth{lv}_over_error"] = w / 2.0 / e if e > 0 else math.inf
    out["width_over_error"] = out["median_rel_width80"] / e if e > 0 else math.inf
    out["coverage_bars_met"] = bool(BARS["80_low"] <= out["coverage80"] <= BARS["80_high"]
                                    and out["coverage95"] >= BARS["95_low"])
    out["width_bar_met"] = bool(out["halfwidth80_over_error"] <= BARS["width_over_error"])
    return out


def bars_met(by_metric: dict[str, dict[str, Any]]) -> dict[str, int]:
    """How many metrics meet each bar."""
    return {"80": sum(BARS["80_low"] <= s["coverage80"] <= BARS["80_high"]
                      for s in by_metric.values()),
            "95": sum(s["coverage95"] >= BARS["95_low"] for s in by_metric.values()),
            "width": sum(s["width_bar_met"] for s in by_metric.values())}


def coverage(runs: list[dict[str, Any]], rule: str) -> dict[str, Any]:
    rows = leave_one_family_out(runs, METRICS, RULES[rule])
    by_metric = {m: summary([x for x in rows if x["metric"] == m]) for m in METRICS}
    by_regime = {g: summary([x for x in rows if x["regime_measured"] == g])
                 for g in REGIMES if any(x["regime_measured"] == g for x in rows)}
    return {"overall": summary(rows), "by_metric": by_metric, "by_regime_measured": by_regime,
            "metrics_meeting_bars": bars_met(by_metric), "rows": rows}


# What each calibrated metric is in the bar's terms, and the replay residual the stand-in rule
# (the vLLM replay's residuals, used for every scenario before the calibrated table) gives it.
CALIBRATED_AS = {"ttft_p50": ("TTFT P50 (the bar's TTFT at the median, no tail)", "ttft_ms"),
                 "tpot_p50": ("TPOT P50 (per-request decode time per token: the bar's ITL)",
                              "tpot_ms"),
                 "e2e_p50": ("E2E P50 (the bar's E2E at the median, no tail)", "e2e_ms")}


def summarise(rows: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Any]:
    """Per metric and pooled: coverage, widths, median |error|, the bars met."""
    by_metric = {m: summary([x for x in rows if x["metric"] == m]) for m in metrics}
    return {"overall": summary(rows), "by_metric": by_metric, "by_regime_measured": {},
            "metrics_meeting_bars": bars_met(by_metric), "rows": rows}


def stand_in_rows(points: list[dict[str, Any]], regime: str) -> list[dict[str, Any]]:
    """The calibrated points judged against the stand-in intervals: the vLLM replay's
    residuals for the median (kernel sigma 0, engine fitted), in `regime`."""
    dist = Distance("calibrated profile", "calibrated profile", 0.0, "", "vllm", True)
    rows = []
    for p in points:
        for m in CALIBRATED_METRICS:
            pred, meas = p["predicted"][m], p["measured"][m]
            iv = predict_interval(pred, METRIC_RESIDUAL[(CALIBRATED_AS[m][1], "median")],
                                  regime, dist)
            rows.append({"start": p["start"], "point": p["point"], "metric": m,
                         "predicted": pred, "measured": meas,
                         "abs_error": abs(pred / meas - 1.0),
                         **{f"interval{lv}": list(iv.bounds[lv]) for lv in LEVELS},
                         **{f"in{lv}": bool(iv.bounds[lv][0] <= meas <= iv.bounds[lv][1])
                            for lv in LEVELS},
                         **{f"rel_width{lv}": (iv.bounds[lv][1] - iv.bounds[lv][0]) / pred
                            for lv in LEVELS}})
    return rows


def calibrated_coverage() -> dict[str, Any]:
    """The CPU llama.cpp starts: leave-one-start-out coverage of the calibrated intervals,
    and the same points against the stand-in (vLLM replay) intervals shown before."""
    points = load_catalog()["calibrated"]["points"]
    shipped = summarise(leave_one_start_out(points, CALIBRATED_METRICS), CALIBRATED_METRICS)
    return {"what": "CPU llama.cpp, calibrated: each fresh start's load points against "
                    "intervals built from the other starts' held-out residuals only "
                    "(leave-one-start-out; "
                    f"{len({p['start'] for p in points})} starts, {len(points)} load points)",
            "metrics_as_bar": {m: a for m, (a, _) in CALIBRATED_AS.items()},
            "not_covered": "TTFT mean/P90/P99 and E2E mean/P90/P99: the stored rows hold "
                           "medians only",
            "calibrated_rule": shipped,
            **{f"stand_in_vllm_residuals_{reg}": {
                k: v for k, v in summarise(stand_in_rows(points, reg),
                                           CALIBRATED_METRICS).items() if k != "rows"}
               for reg in ("below_knee", "near_knee")}}


# The median whose interval a calibrated tail or mean is widened to (as `annotate_latency`
# does), and the replay residual the tail took before it had calibrated residuals.
TAIL_MEDIAN = {"ttft_p90": "ttft_p50", "ttft_p99": "ttft_p50", "e2e_p90": "e2e_p50",
               "e2e_p99": "e2e_p50", "tpot_mean": "tpot_p50", "itl_mean": "tpot_p50"}
TAIL_BEFORE = {"ttft_p90": ("ttft_ms", "p90"), "ttft_p99": ("ttft_ms", "p99"),
               "e2e_p90": ("e2e_ms", "p90"), "e2e_p99": ("e2e_ms", "p99")}


def tails_as_shipped(medians: dict[str, Any]) -> Any:
    """A build for `leave_one_start_out`: the tail table of the other loaded-box starts, each
    entry widened in log space to hold its median's interval (`medians`: the idle starts'
    calibrated table, other starts than these)."""
    def build(points: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Any]:
        tab = calibrated_table(points, metrics)
        for m, e in tab.items():
            med = medians[TAIL_MEDIAN[m]]
            for lv in LEVELS:
                lo, hi = e[f"interval{lv}"]
                e[f"interval{lv}"] = [min(lo, med[f"interval{lv}"][0]),
                                      max(hi, med[f"interval{lv}"][1])]
        return tab
    return build


def tails_before_rows(points: list[dict[str, Any]], medians: dict[str, Any]
                      ) -> list[dict[str, Any]]:
    """The loaded-box tail points against what a calibrated run showed before they were
    measured: TTFT/E2E P90/P99 the replay's below-knee interval widened to the calibrated
    median's; mean TPOT and ITL the calibrated TPOT P50 interval."""
    dist = Distance("calibrated profile", "calibrated profile", 0.0, "", "vllm", True)
    rows = []
    for p in points:
        for m in CALIBRATED_TAIL_METRICS:
            if m not in p["predicted"]:
                continue
            pred, meas = p["predicted"][m], p["measured"][m]
            med = medians[TAIL_MEDIAN[m]]
            bounds = {lv: (pred * math.exp(-med[f"interval{lv}"][1]),
                           pred * math.exp(-med[f"interval{lv}"][0])) for lv in LEVELS}
            if m in TAIL_BEFORE:
                iv = predict_interval(pred, METRIC_RESIDUAL[TAIL_BEFORE[m]], "below_knee",
                                      dist)
                bounds = {lv: (min(lo, iv.bounds[lv][0]), max(hi, iv.bounds[lv][1]))
                          for lv, (lo, hi) in bounds.items()}
            rows.append({"start": p["start"], "point": p["point"], "metric": m,
                         "predicted": pred, "measured": meas,
                         "abs_error": abs(pred / meas - 1.0),
                         **{f"interval{lv}": list(bounds[lv]) for lv in LEVELS},
                         **{f"in{lv}": bool(bounds[lv][0] <= meas <= bounds[lv][1])
                            for lv in LEVELS},
                         **{f"rel_width{lv}": (bounds[lv][1] - bounds[lv][0]) / pred
                            for lv in LEVELS}})
    return rows


def calibrated_tail_coverage() -> dict[str, Any]:
    """The loaded-box starts' tails, leave-one-start-out: as shipped (widened to the idle
    medians' intervals), their own intervals alone, and what was shown before."""
    cal = load_catalog()["calibrated"]
    points = cal.get("tail_points") or []
    if not points:
        return {"what": "no loaded-box tail points in the catalog"}
    medians = {m: cal["residuals"][m] for m in CALIBRATED_METRICS}
    metrics = tuple(m for m in CALIBRATED_TAIL_METRICS if any(m in p["predicted"]
                                                              for p in points))
    return {"what": "CPU llama.cpp, calibrated, tails: each loaded-box start's load points "
                    "against intervals from the other loaded-box starts only "
                    f"({len({p['start'] for p in points})} starts, {len(points)} load points)",
            "shipped": summarise(leave_one_start_out(points, metrics,
                                                     tails_as_shipped(medians)), metrics),
            "own_residuals_only": {k: v for k, v in summarise(
                leave_one_start_out(points, metrics), metrics).items() if k != "rows"},
            "before": {k: v for k, v in summarise(tails_before_rows(points, medians),
                                                  metrics).items() if k != "rows"}}


def print_table(title: str, res: dict[str, Any]) -> None:
    print(f"\n{title}\n")
    print("| scope | n | 80% coverage | 95% coverage | median 80% width (full) | median abs "
          "error | 80% half-width / error | 95% half-width / error | coverage bars | "
          "width bar |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, s in (*res["by_metric"].items(),
                    *((f"regime {k}", v) for k, v in res["by_regime_measured"].items()),
                    ("all", res["overall"])):
        print(f"| {name} | {s['n']} | {s['coverage80']:.0%} | {s['coverage95']:.0%} | "
              f"{s['median_rel_width80']:.1%} | {s['median_abs_error']:.1%} | "
              f"{s['halfwidth80_over_error']:.1f} | {s['halfwidth95_over_error']:.1f} | "
              f"{'met' if s['coverage_bars_met'] else 'missed'} | "
              f"{'met' if s['width_bar_met'] else 'missed'} |")


def main() -> int:
    runs = load_catalog()["runs"]
    results = {rule: coverage(runs, rule) for rule in RULES}
    nested = nested_selection(runs)
    cal = calibrated_coverage()
    tails = calibrated_tail_coverage()
    doc = {"what": "leave-one-model-family-out coverage of the model-error intervals "
                   "(benchmarks/accuracy/interval_coverage.py): each family's runs judged "
                   "against intervals built from the other families' residuals only",
           "date": date.today().isoformat(),
           "data": "16 real vLLM runs on H100 SXM (nested leave-one-model-out predictions "
                   "from the catalog's runs), 4 families, 7 metrics per run",
           "bars": "per metric: 80% intervals cover 70-90%; 95% cover >= 88%; the median "
                   "80% interval reaches no further than 3 x the median |error| from the "
                   "prediction (half-width: (high - low) / 2 / predicted)",
           "note": "for centred normal errors the median |error| is 0.6745 sigma; a "
                   "calibrated 80% interval's full width is 2 x 1.2816 sigma = 3.8 x that "
                   "(a full-width bar of 3 is met only by intervals that under-cover), its "
                   "half-width 1.9 x; the 95% interval's half-width is 1.96 / 0.6745 = "
                   "2.9 x; width_over_error is the full width, halfwidth*_over_error the "
                   "reach",
           "shipped_rule": results["shipped"],
           "shipped_rule_chosen_nested": nested,
           **{f"comparison_{k}": {kk: vv for kk, vv in v.items() if kk != "rows"}
              for k, v in results.items() if k != "shipped"},
           "cpu_llamacpp_calibrated": cal,
           "cpu_llamacpp_calibrated_tails": tails}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    for rule, res in results.items():
        print_table(f"{rule}: metrics meeting the bars {res['metrics_meeting_bars']}", res)
    picks = ", ".join(f"{f}: {c['rule']}" for f, c in nested["chosen"].items())
    print_table(f"rule chosen nested ({picks}): {nested['metrics_meeting_bars']}",
                {**nested, "by_regime_measured": {}})
    print_table("CPU llama.cpp, calibrated (leave-one-start-out): metrics meeting the bars "
                f"{cal['calibrated_rule']['metrics_meeting_bars']}", cal["calibrated_rule"])
    for reg in ("below_knee", "near_knee"):
        res = cal[f"stand_in_vllm_residuals_{reg}"]
        print_table(f"CPU llama.cpp, the stand-in vLLM residuals ({reg}): "
                    f"{res['metrics_meeting_bars']}", res)
    for key in ("shipped", "own_residuals_only", "before"):
        if key in tails:
            print_table(f"CPU llama.cpp, calibrated tails, loaded box ({key}): "
                        f"{tails[key]['metrics_meeting_bars']}",
                        {**tails[key], "by_regime_measured": {}})
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
