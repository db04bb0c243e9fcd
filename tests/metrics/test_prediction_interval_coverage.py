"""Held-out coverage of the model-error intervals on the stored residuals (no timing): each
model family's runs against intervals built from the other families' runs only, and each
calibrated llama.cpp start's load points against intervals built from the other starts' only.
Fails if a change to the interval rule or the catalog's runs drops a metric below the bars."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ridgeline.metrics.prediction_interval import (
    calibrated_table,
    leave_one_family_out,
    leave_one_start_out,
    load_catalog,
    residual_table,
)

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
CAL_METRICS = ("ttft_p50", "tpot_p50", "e2e_p50")
# The calibrated intervals' width bar is met on TTFT P50 only: TPOT and E2E P50 have a few
# start-wide errors of 20-27% against a median |error| of 5-6% (docs/BENCHMARKS.md).
CAL_WIDTH_MET = ("ttft_p50",)

METRICS = ("ttft_mean", "ttft_p90", "ttft_p99", "itl", "e2e_mean", "e2e_p90", "e2e_p99")
# Where each bar is met on the current model's held-out residuals (docs/BENCHMARKS.md,
# model-error intervals): 80% coverage in 70-90% and 95% coverage >= 88% on all seven
# metrics (the zero-centred rule; a median centre covered ITL 62% / 81%), the width bar on
# four (TTFT P90 and P99, E2E P99 have heavy-tailed held-out errors). The others are held to
# where they stand, so a drop still fails.
COVERAGE80_MET = METRICS
COVERAGE95_MET = METRICS
WIDTH_MET = ("ttft_mean", "itl", "e2e_mean", "e2e_p90")


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    k = len(xs)
    return xs[k // 2] if k % 2 else 0.5 * (xs[k // 2 - 1] + xs[k // 2])


def _coverage_and_width(sel: list[dict[str, Any]]) -> tuple[float, float, float]:
    """(80% coverage, 95% coverage, median 80% half-width / median |error|) of held-out rows:
    coverage counts the measured value inside the interval's [low, high]."""
    cov80 = sum(x["interval80"][0] <= x["measured"] <= x["interval80"][1]
                for x in sel) / len(sel)
    cov95 = sum(x["interval95"][0] <= x["measured"] <= x["interval95"][1]
                for x in sel) / len(sel)
    half = _median([(x["interval80"][1] - x["interval80"][0]) / 2 / x["predicted"]
                    for x in sel])
    err = _median([abs(x["predicted"] / x["measured"] - 1) for x in sel])
    return cov80, cov95, half / err


def test_the_interval_never_sees_the_held_out_family() -> None:
    runs = load_catalog()["runs"]
    seen: list[set[str]] = []

    def build(train: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Any]:
        seen.append({r["family"] for r in train})
        return residual_table(train, metrics)

    rows = leave_one_family_out(runs, METRICS, build)
    families = {r["family"] for r in runs}
    assert len(seen) == len(families) == 4
    for fam in families:
        built_for = [s for s in seen if fam not in s]
        assert len(built_for) == 1 and built_for[0] == families - {fam}
    assert len(rows) == 7 * 16


def test_held_out_coverage_per_metric() -> None:
    rows = leave_one_family_out(load_catalog()["runs"], METRICS)
    for m in METRICS:
        sel = [x for x in rows if x["metric"] == m]
        assert len(sel) == 16
        cov80, cov95, width = _coverage_and_width(sel)
        assert (0.70 if m in COVERAGE80_MET else 0.60) <= cov80 <= 0.90, (m, cov80)
        assert cov95 >= (0.88 if m in COVERAGE95_MET else 0.80), (m, cov95)
        if m in WIDTH_MET:
            assert width <= 3.0, (m, width)


def raw_calibrated_rows() -> list[tuple[str, str, str, float, float]]:
    """(start, point, metric, predicted, measured) of every stored calibrate-then-verify
    start of the real llama.cpp server, read from the benchmark result files themselves."""
    out = []
    for i, st in enumerate(json.loads((RESULTS / "bench_calibration.json").read_text())
                           ["starts"]):
        out += [(f"b{i}", r["point"], r["metric"], r["predicted"], r["measured"])
                for r in st["calibrated"]["rows"]]
    for i, run in enumerate(json.loads((RESULTS / "llamacpp_open_loop_flow.json").read_text())):
        out += [(f"f{i}", r["point"], r["metric"], r["predicted"], r["measured"])
                for r in run["rows"]]
    return out


def raw_tail_rows() -> list[tuple[str, str, str, float, float]]:
    """(start, point, metric, predicted, measured) of the loaded-box starts' tails, read from
    the benchmark result file itself."""
    doc = json.loads((RESULTS / "bench_calibration_loaded_box.json").read_text())
    return [(f"l{i}", r["point"], r["metric"], r["predicted"], r["measured"])
            for i, st in enumerate(doc["starts"]) for r in st["calibrated_tails"]["rows"]]


def hand_interval(metric: str, level: int,
                  rows: list[tuple[str, str, str, float, float]] | None = None
                  ) -> tuple[float, float]:
    """[r_low, r_high] of `metric` over all stored rows (the idle starts' medians unless
    `rows`), by hand: the median log-ratio, and the ceil((n + 1) q)-th smallest |r - median|
    (the largest where that passes n)."""
    r = sorted(math.log(p / m) for _, _, k, p, m in (rows or raw_calibrated_rows())
               if k == metric)
    n = len(r)
    c = r[n // 2] if n % 2 else 0.5 * (r[n // 2 - 1] + r[n // 2])
    scores = sorted(abs(x - c) for x in r)
    k = min(math.ceil((n + 1) * level / 100 - 1e-9), n)
    return c - scores[k - 1], c + scores[k - 1]


def test_calibrated_points_are_the_stored_rows() -> None:
    raw = raw_calibrated_rows()
    pts = load_catalog()["calibrated"]["points"]
    assert len({s for s, *_ in raw}) == 7 and len(raw) == 63
    got = sorted((p["point"], m, p["predicted"][m], p["measured"][m]) for p in pts
                 for m in CAL_METRICS)
    assert got == sorted((pt, m, pr, me) for _, pt, m, pr, me in raw)


def test_shipped_calibrated_intervals_match_a_hand_computation() -> None:
    res = load_catalog()["calibrated"]["residuals"]
    for m in CAL_METRICS:
        for lv in (80, 95):
            lo, hi = hand_interval(m, lv)
            assert math.isclose(res[m][f"interval{lv}"][0], lo, abs_tol=2e-6), (m, lv)
            assert math.isclose(res[m][f"interval{lv}"][1], hi, abs_tol=2e-6), (m, lv)


def test_the_calibrated_interval_never_sees_the_held_out_start() -> None:
    pts = load_catalog()["calibrated"]["points"]
    seen: list[set[str]] = []

    def build(train: list[dict[str, Any]], metrics: tuple[str, ...]) -> dict[str, Any]:
        seen.append({p["start"] for p in train})
        return calibrated_table(train, metrics)

    rows = leave_one_start_out(pts, CAL_METRICS, build)
    starts = {p["start"] for p in pts}
    assert len(seen) == len(starts) == 7
    assert sorted(len(starts - s) for s in seen) == [1] * 7
    assert {next(iter(starts - s)) for s in seen} == starts
    assert len(rows) == 3 * 21


def test_calibrated_held_out_coverage_meets_the_bars_per_metric() -> None:
    rows = leave_one_start_out(load_catalog()["calibrated"]["points"], CAL_METRICS)
    for m in CAL_METRICS:
        sel = [x for x in rows if x["metric"] == m]
        assert len(sel) == 21
        cov80, cov95, width = _coverage_and_width(sel)
        assert 0.70 <= cov80 <= 0.90, (m, cov80)
        assert cov95 >= 0.88, (m, cov95)
        if m in CAL_WIDTH_MET:
            assert width <= 3.0, (m, width)


CAL_TAIL_METRICS = ("ttft_p90", "ttft_p99", "e2e_p90", "e2e_p99", "tpot_mean", "itl_mean")
TAIL_MEDIAN = {"ttft_p90": "ttft_p50", "ttft_p99": "ttft_p50", "e2e_p90": "e2e_p50",
               "e2e_p99": "e2e_p50", "tpot_mean": "tpot_p50", "itl_mean": "tpot_p50"}


def test_calibrated_tails_are_the_stored_rows_and_match_a_hand_computation() -> None:
    raw = raw_tail_rows()
    cal = load_catalog()["calibrated"]
    got = sorted((p["start"][-1], p["point"], m, p["predicted"][m], p["measured"][m])
                 for p in cal["tail_points"] for m in CAL_TAIL_METRICS)
    assert got == sorted((s[-1], pt, m, pr, me) for s, pt, m, pr, me in raw)
    for m in CAL_TAIL_METRICS:
        for lv in (80, 95):
            lo, hi = hand_interval(m, lv, raw)
            e = cal["residuals"][m]
            assert math.isclose(e[f"interval{lv}"][0], lo, abs_tol=2e-6), (m, lv)
            assert math.isclose(e[f"interval{lv}"][1], hi, abs_tol=2e-6), (m, lv)


# Where the 95% bar stands on the loaded-box tails (docs/BENCHMARKS.md): met on TTFT P90 and
# P99; E2E and the TPOT/ITL means cover 9 of 12: every miss is start 0's, whose box load
# shifted between its probe and its points (predicted 55-84% slow at the first, 37-92% fast at
# the next two), beyond any error of the other three starts.
TAIL_COVERAGE95 = {"ttft_p90": 0.88, "ttft_p99": 0.88, "e2e_p90": 0.75, "e2e_p99": 0.75,
                   "tpot_mean": 0.75, "itl_mean": 0.75}


def _tails_as_shipped(train: list[dict[str, Any]], metrics: tuple[str, ...]
                      ) -> dict[str, Any]:
    """The other loaded-box starts' tail table, each interval widened to hold its median's
    (the idle starts' table), as a calibrated `simulate` shows it."""
    med = load_catalog()["calibrated"]["residuals"]
    tab = calibrated_table(train, metrics)
    for m, e in tab.items():
        for lv in (80, 95):
            a, b = med[TAIL_MEDIAN[m]][f"interval{lv}"]
            e[f"interval{lv}"] = [min(e[f"interval{lv}"][0], a), max(e[f"interval{lv}"][1], b)]
    return tab


def test_calibrated_tail_held_out_coverage() -> None:
    pts = load_catalog()["calibrated"]["tail_points"]
    rows = leave_one_start_out(pts, CAL_TAIL_METRICS, _tails_as_shipped)
    for m in CAL_TAIL_METRICS:
        sel = [x for x in rows if x["metric"] == m]
        assert len(sel) == len(pts)
        cov80, cov95, _ = _coverage_and_width(sel)
        assert 0.70 <= cov80 <= 0.90, (m, cov80)
        assert cov95 >= TAIL_COVERAGE95[m], (m, cov95)
