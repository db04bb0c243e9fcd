"""A calibrated scenario's model-error intervals through the installed `ridgeline simulate
--calibration PROFILE --json`: the medians (and TTFT/E2E means) carry the calibrated llama.cpp
runs' 80% interval, the TTFT/E2E P90/P99 and TPOT/ITL means their own calibrated tails'
widened to the median's (computed here by hand from the stored benchmark rows; the 95% at
least it), the source names those runs; TPOT/ITL tails keep the replay's, no narrower than
the median's; an uncalibrated run keeps the replay's residuals."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ridgeline.sim.calibrated_profile import CalibrationProfile, Scheduling
from tests.metrics.test_prediction_interval_coverage import hand_interval, raw_tail_rows

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
# a CPU-like profile: 20 ms decode steps at one token, prefill 0.8 s at 512 tokens
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
STEP_S = [0.020, 0.029, 0.033, 0.044, 0.045, 0.06, 0.11, 0.21, 0.43, 0.78, 1.5, 3.0]
LOAD = ("--rate", "0.4", "-n", "100", "--prompt", "fixed:64", "--output", "fixed:128")
# metric -> the stored rows' metric whose residuals it takes (TPOT P50 stands for ITL too)
CALIBRATED = {"ttft_ms": "ttft_p50", "tpot_ms": "tpot_p50", "itl_ms": "tpot_p50",
              "e2e_ms": "e2e_p50"}


def _latency(tmp: Path, *args: str) -> dict[str, Any]:
    out = tmp / "sim.json"
    with out.open("w") as f:
        p = subprocess.run([RIDGELINE, "simulate", *args, *LOAD, "--json"], stdout=f,
                           stderr=subprocess.PIPE, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return dict(json.loads(out.read_text())["analysis"]["latency"])


def _value(d: dict[str, Any], stat: str) -> float:
    if stat == "mean":
        return float(d["mean"])
    v = d["percentiles"]["p50" if stat == "median" else stat]
    return float(v["value"] if isinstance(v, dict) else v)


def _profile(d: Path) -> Path:
    CalibrationProfile.from_table(
        TOKENS, STEP_S, kv_capacity_tokens=100_000,
        scheduling=Scheduling(preset="vllm", max_num_seqs=8, max_num_batched_tokens=2048),
    ).save(d / "profile.json")
    return d / "profile.json"


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("calibrated")
    return _latency(d, "--calibration", str(_profile(d)))


# statistic -> its own calibrated tail residuals (widened to the median's interval)
TAILS = {("ttft_ms", "p90"): "ttft_p90", ("ttft_ms", "p99"): "ttft_p99",
         ("e2e_ms", "p90"): "e2e_p90", ("e2e_ms", "p99"): "e2e_p99",
         ("tpot_ms", "mean"): "tpot_mean", ("itl_ms", "mean"): "itl_mean"}


def _hand(m: str, stat: str, level: int) -> tuple[float, float]:
    """The log-ratio interval a calibrated statistic should carry, by hand."""
    lo, hi = hand_interval(CALIBRATED[m], level)
    if (m, stat) in TAILS:
        a, b = hand_interval(TAILS[(m, stat)], level, raw_tail_rows())
        lo, hi = min(lo, a), max(hi, b)
    return lo, hi


def test_means_and_medians_carry_the_calibrated_runs_interval(
        calibrated: dict[str, Any]) -> None:
    for m, key in CALIBRATED.items():
        d = calibrated[m]
        for stat in ("mean", "median"):
            v = _value(d, stat)
            r_lo, r_hi = _hand(m, stat, 80)
            lo, hi = d[f"{stat}_interval80"]
            assert math.isclose(lo, v * math.exp(-r_hi), rel_tol=1e-5), (m, stat)
            assert math.isclose(hi, v * math.exp(-r_lo), rel_tol=1e-5), (m, stat)
            # at 95% the reruns at the step-time residual's ends may widen it further
            r_lo, r_hi = _hand(m, stat, 95)
            lo, hi = d[f"{stat}_interval95"]
            assert lo <= v * math.exp(-r_hi) * (1 + 1e-5), (m, stat)
            assert hi >= v * math.exp(-r_lo) * (1 - 1e-5), (m, stat)
            src = d["interval_source"]["by_statistic"][stat]
            assert src["table"] == "calibrated"
            assert src["residual"] == TAILS.get((m, stat), key)
            assert "llama.cpp" in src["method"]
        assert "llama.cpp" in d["interval_source"]["note"]


def test_tails_are_no_narrower_than_the_calibrated_median(calibrated: dict[str, Any]) -> None:
    for m in CALIBRATED:
        d = calibrated[m]
        for stat in ("p90", "p99"):
            v = _value(d, stat)
            r_lo, r_hi = _hand(m, stat, 80)
            lo, hi = d[f"{stat}_interval80"]
            src = d["interval_source"]["by_statistic"][stat]
            if (m, stat) in TAILS:   # TTFT and E2E: the calibrated tails' own, exactly
                assert math.isclose(lo, v * math.exp(-r_hi), rel_tol=1e-5), (m, stat)
                assert math.isclose(hi, v * math.exp(-r_lo), rel_tol=1e-5), (m, stat)
                assert src["table"] == "calibrated" and src["residual"] == TAILS[(m, stat)]
            else:                    # TPOT and ITL: the replay's, no narrower than the median
                assert lo <= v * math.exp(-r_hi) * (1 + 1e-5), (m, stat)
                assert hi >= v * math.exp(-r_lo) * (1 - 1e-5), (m, stat)
                assert src["table"] == "residuals"


def test_an_uncalibrated_run_keeps_the_replay_residuals(tmp_path: Path) -> None:
    lat = _latency(tmp_path, "--model", "llama-2-7b")
    for m in CALIBRATED:
        srcs = lat[m]["interval_source"]["by_statistic"]
        assert {s["table"] for s in srcs.values()} == {"residuals"}
        assert "llama.cpp" not in lat[m]["interval_source"]["note"]


def test_the_text_header_names_where_the_intervals_come_from(tmp_path: Path) -> None:
    out = tmp_path / "sweep.txt"
    with out.open("w") as f:
        p = subprocess.run([RIDGELINE, "simulate", "--calibration", str(_profile(tmp_path)),
                            "--rate", "0.2,0.4", "-n", "60", "--prompt", "fixed:64",
                            "--output", "fixed:64"], stdout=f, stderr=subprocess.PIPE,
                           text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    header = next(x for x in out.read_text().splitlines()
                  if x.startswith("model error, nominal 80%"))
    assert "calibrated llama.cpp runs" in header and "TTFT/E2E tails" in header
    assert "TPOT/ITL tails: replay residuals" in header
