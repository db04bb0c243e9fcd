"""Does a variable known at prediction time narrow the model-error intervals where they miss the
width bar (TTFT P90, E2E P99 on the 16 real vLLM runs)? Normalised split-conformal: the score
of a run is |r - c| / g(x), g(x) = exp(beta * z), z = (f(x) - the training runs' median f) over
the training runs' range of f, clipped to [-1, 1]; and the
interval at a new run reaches q * g(x), q the conformal rank of the training scores; beta = 0 is
the median-centre rule (`median_centre_table`, the rule shipped when this study ran). f is one
of the candidate variables below, each computed from the run's *predicted* latencies (what
`simulate` knows): none is read from the measured run.

beta is chosen without the held-out family (nested leave-one-family-out): for each held-out
family, an inner leave-one-family-out over the other three picks, from BETAS, the beta with the
narrowest median 80% half-width among those whose inner 80% coverage is at least 75% (beta 0
where none is); the outer interval is then built with that beta from the three families and
scored on the held-out one; a last row picks the variable and beta together in the inner
folds (fully nested: the variable is then not chosen on the folds it is scored on). For
reference (not honest: tuned on the evaluation folds) the beta
that does best on the outer folds themselves is reported too.

    .venv/bin/python benchmarks/accuracy/interval_conditioning.py

Writes benchmarks/results/interval_conditioning.json and prints a markdown table.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.metrics.prediction_interval import (
    conformal_halfwidth,
    load_catalog,
    median_centre_table,
    regime_of,
    residual_entry,
)

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "interval_conditioning.json"
METRICS = ("ttft_mean", "ttft_p90", "ttft_p99", "itl", "e2e_mean", "e2e_p90", "e2e_p99")
BETAS = (0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 4.0)
INNER_MIN_COVERAGE80 = 0.75


def _pred_regime(p: dict[str, float]) -> str:
    return regime_of(p["ttft_mean"], p["ttft_p99"], p["itl"])


# Candidates, from the predicted latencies only: how bursty the predicted TTFT is (a run near
# the knee), how deep the predicted queue is (TTFT over a decode step: utilisation), how long
# the outputs are (E2E over a decode step), and the predicted regime flags.
FEATURES: dict[str, Callable[[dict[str, float]], float]] = {
    "ln_ttft_p99_over_mean": lambda p: math.log(p["ttft_p99"] / p["ttft_mean"]),
    "ln_ttft_over_itl": lambda p: math.log(p["ttft_mean"] / p["itl"]),
    "ln_output_steps": lambda p: math.log(p["e2e_mean"] / p["itl"]),
    "near_knee_predicted": lambda p: float(_pred_regime(p) == "near_knee"),
    "overloaded_predicted": lambda p: float(_pred_regime(p) == "overloaded"),
}


def _centre(table: dict[str, Any], metric: str, regime: str) -> float:
    cat = {"residuals": {metric: table}}
    return float(residual_entry(metric, regime, True, cat)[0]["centre"])


def _fit(train: list[dict[str, Any]], metric: str, feature: str, beta: float
         ) -> tuple[dict[str, Any], tuple[float, float], dict[int, float]]:
    """(table for the centres, the variable's training median and range, level -> the
    normalised conformal quantile)."""
    table = median_centre_table(train, (metric,))[metric]
    f = FEATURES[feature]
    vals = [f(r["predicted"]) for r in train]
    span = (float(np.median(vals)), max(max(vals) - min(vals), 1e-12))
    scores = [abs(r["log_ratio"][metric] - _centre(table, metric, r["regime"]))
              / _g(beta, f(r["predicted"]), span) for r in train]
    return table, span, {lv: conformal_halfwidth(scores, lv)[0] for lv in (80, 95)}


def _g(beta: float, f: float, span: tuple[float, float]) -> float:
    """exp(beta * z), z the variable's distance from the training median over the training
    range, clipped to [-1, 1] (a new run outside the range counts as at its edge)."""
    return math.exp(beta * min(max((f - span[0]) / span[1], -1.0), 1.0))


def _score(train: list[dict[str, Any]], test: list[dict[str, Any]], metric: str, feature: str,
           beta: float) -> list[dict[str, Any]]:
    table, span, q = _fit(train, metric, feature, beta)
    rows = []
    for r in test:
        p = r["predicted"]
        c = _centre(table, metric, _pred_regime(p))
        g = _g(beta, FEATURES[feature](p), span)
        meas, pred = r["measured"][metric], p[metric]
        row: dict[str, Any] = {"run": r["run"], "abs_error": abs(pred / meas - 1.0)}
        for lv in (80, 95):
            lo, hi = pred * math.exp(-(c + q[lv] * g)), pred * math.exp(-(c - q[lv] * g))
            row[f"in{lv}"] = bool(lo <= meas <= hi)
            row[f"half{lv}"] = (hi - lo) / 2.0 / pred
        rows.append(row)
    return rows


# Not `leave_one_family_out`: its residual-table intervals have no per-run scale g(x) or beta.
def _lofo(runs: list[dict[str, Any]], metric: str, feature: str,
          beta: Callable[[list[dict[str, Any]]], float]) -> list[dict[str, Any]]:
    rows = []
    for fam in sorted({r["family"] for r in runs}):
        train = [r for r in runs if r["family"] != fam]
        rows += _score(train, [r for r in runs if r["family"] == fam], metric, feature,
                       beta(train))
    return rows


def _const(beta: float) -> Callable[[list[dict[str, Any]]], float]:
    def fixed(_train: list[dict[str, Any]]) -> float:
        return beta
    return fixed


def _summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    e = float(np.median([x["abs_error"] for x in rows]))
    return {"coverage80": float(np.mean([x["in80"] for x in rows])),
            "coverage95": float(np.mean([x["in95"] for x in rows])),
            "halfwidth80_over_error": float(np.median([x["half80"] for x in rows])) / e}


def _inner_beta(metric: str, feature: str) -> Callable[[list[dict[str, Any]]], float]:
    def pick(train: list[dict[str, Any]]) -> float:
        best, best_w = 0.0, math.inf
        for b in BETAS:
            s = _summary(_lofo(train, metric, feature, _const(b)))
            w = float(s["halfwidth80_over_error"])
            if s["coverage80"] >= INNER_MIN_COVERAGE80 and w < best_w:
                best, best_w = b, w
        return best
    return pick


def _joint(runs: list[dict[str, Any]], metric: str) -> tuple[dict[str, float], list[str]]:
    """Fully nested: for each held-out family the inner folds pick the variable and beta
    together (the narrowest inner 80% half-width with inner 80% coverage >= 75%)."""
    rows: list[dict[str, Any]] = []
    picks = []
    for fam in sorted({r["family"] for r in runs}):
        train = [r for r in runs if r["family"] != fam]
        best, best_w = (next(iter(FEATURES)), 0.0), math.inf
        for feat in FEATURES:
            for b in BETAS:
                s = _summary(_lofo(train, metric, feat, _const(b)))
                w = float(s["halfwidth80_over_error"]) - (1e-9 if b == 0 else 0.0)
                if s["coverage80"] >= INNER_MIN_COVERAGE80 and w < best_w:
                    best, best_w = (feat, b), w
        picks.append(f"{best[0]} {best[1]:g}")
        rows += _score(train, [r for r in runs if r["family"] == fam], metric, *best)
    return _summary(rows), picks


def main() -> int:
    runs = load_catalog()["runs"]
    out: dict[str, Any] = {}
    for m in METRICS:
        base = _summary(_lofo(runs, m, "near_knee_predicted", lambda _t: 0.0))
        out[m] = {"shipped": base}
        for feat in FEATURES:
            chosen: list[float] = []
            pick = _inner_beta(m, feat)

            def record(train: list[dict[str, Any]], pick: Any = pick,
                       chosen: list[float] = chosen) -> float:
                b = float(pick(train))
                chosen.append(b)
                return b

            nested = _summary(_lofo(runs, m, feat, record))
            tuned = {str(b): _summary(_lofo(runs, m, feat, _const(b))) for b in BETAS}
            out[m][feat] = {"nested": nested, "betas_chosen": chosen,
                            "fixed_beta_on_outer_folds": tuned}
        joint, picks = _joint(runs, m)
        out[m]["variable_and_beta_nested"] = {"nested": joint, "picked": picks}
    doc = {"what": "normalised split-conformal with one prediction-time variable, nested "
                   "leave-one-family-out (benchmarks/accuracy/interval_conditioning.py)",
           "date": date.today().isoformat(), "betas": list(BETAS),
           "inner_min_coverage80": INNER_MIN_COVERAGE80, "by_metric": out}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print("| metric | variable | 80% cov | 95% cov | 80% half / err | betas chosen | "
          "best fixed beta on the outer folds (not honest) |")
    print("|---|---|---|---|---|---|---|")
    for m, by in out.items():
        s = by["shipped"]
        print(f"| {m} | shipped (beta 0) | {s['coverage80']:.0%} | {s['coverage95']:.0%} | "
              f"{s['halfwidth80_over_error']:.1f} | | |")
        for feat in FEATURES:
            n = by[feat]["nested"]
            ok = {b: v for b, v in by[feat]["fixed_beta_on_outer_folds"].items()
                  if 0.7 <= v["coverage80"] <= 0.9 and v["coverage95"] >= 0.88}
            best = min(ok.items(), key=lambda kv: kv[1]["halfwidth80_over_error"]) \
                if ok else None
            bt = f"beta {best[0]}: {best[1]['halfwidth80_over_error']:.1f}x" if best else "-"
            print(f"| {m} | {feat} | {n['coverage80']:.0%} | {n['coverage95']:.0%} | "
                  f"{n['halfwidth80_over_error']:.1f} | {by[feat]['betas_chosen']} | {bt} |")
    print("\n| metric | variable and beta both picked in the inner folds: 80% cov | 95% cov | "
          "80% half / err | picked per held-out family |")
    print("|---|---|---|---|---|")
    for m, by in out.items():
        j = by["variable_and_beta_nested"]
        print(f"| {m} | {j['nested']['coverage80']:.0%} | {j['nested']['coverage95']:.0%} | "
              f"{j['nested']['halfwidth80_over_error']:.1f} | {'; '.join(j['picked'])} |")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
