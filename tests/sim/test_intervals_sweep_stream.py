"""Model-error intervals on every point of a rate sweep and on streamed runs, through the
installed `ridgeline simulate`: the same fields as a single batch run, the same numbers as a
single run at that rate, and at least the catalog's residual interval around each value."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ridgeline.metrics.prediction_interval import load_catalog

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
SCENARIO = ("simulate", "--model", "llama-2-7b", "-n", "300")
METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
STATS = ("mean", "median", "p90", "p99")
# catalog residual of each metric's mean (TPOT and ITL share the decode-time residual)
MEAN_RESIDUAL = {"ttft_ms": "ttft_mean", "tpot_ms": "itl", "itl_ms": "itl", "e2e_ms": "e2e_mean"}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([RIDGELINE, *SCENARIO, *args], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    return p


def _json(*args: str) -> dict[str, Any]:
    return dict(json.loads(_run(*args, "--json").stdout))


def _check_latency(lat: dict[str, Any]) -> None:
    """Every metric carries both levels for every statistic, nested, around its value, and
    at least the catalog's interval for the regime its source names."""
    cat = load_catalog()["residuals"]
    for m in METRICS:
        d = lat[m]
        for stat in STATS:
            lo80, hi80 = d[f"{stat}_interval80"]
            lo95, hi95 = d[f"{stat}_interval95"]
            assert 0 < lo95 <= lo80 < hi80 <= hi95
        assert d["mean_interval80"][0] < d["mean"] < d["mean_interval80"][1]
        src = d["interval_source"]
        assert src["coverage"] == "nominal 80% and 95%"
        assert "reruns" in src["step_time_propagation"]
        by = src["by_statistic"]["mean"]
        assert by["residual"] == MEAN_RESIDUAL[m]
        e = cat[MEAN_RESIDUAL[m]]
        reg = by["regime"]
        r_lo, r_hi = (e[reg] if reg in e else e["all"])["interval80"]
        lo, hi = d["mean_interval80"]
        assert lo <= d["mean"] * math.exp(-r_hi) * (1 + 1e-6)
        assert hi >= d["mean"] * math.exp(-r_lo) * (1 - 1e-6)


def test_each_sweep_point_carries_the_single_runs_intervals() -> None:
    sweep = _json("--rate", "2,8")["sweep"]
    assert [p["rate_req_s"] for p in sweep] == [2.0, 8.0]
    for p in sweep:
        _check_latency(p["analysis"]["latency"])
    # the point at 8 req/s is the single run at 8 req/s (same seed): same intervals
    one = _json("--rate", "8")["analysis"]["latency"]
    at8 = sweep[1]["analysis"]["latency"]
    for m in METRICS:
        for stat in STATS:
            for lv in (80, 95):
                key = f"{stat}_interval{lv}"
                assert at8[m][key] == pytest.approx(one[m][key], rel=1e-9)
    # and the low-rate point is not the high-rate one (each point its own run)
    assert sweep[0]["analysis"]["latency"]["ttft_ms"]["p99_interval80"] != \
        at8["ttft_ms"]["p99_interval80"]


def test_sweep_text_shows_each_points_intervals() -> None:
    text = _run("--rate", "2,8").stdout
    doc = _json("--rate", "2,8")["sweep"]
    for p in doc:
        lat = p["analysis"]["latency"]
        line = next(x for x in text.splitlines()
                    if x.strip().startswith(f"{p['rate_req_s']:g} req/s:"))
        lo, hi = lat["ttft_ms"]["p99_interval80"]
        got = re.search(r"TTFT P50 \[[^]]+\], P99 \[([\d.,]+), ([\d.,]+)\]", line)
        assert got is not None, line
        assert float(got.group(1).replace(",", "")) == pytest.approx(lo, rel=0.01)
        assert float(got.group(2).replace(",", "")) == pytest.approx(hi, rel=0.01)


@pytest.mark.parametrize("how", [("--stream",), ("--workers", "2")])
def test_streamed_runs_carry_intervals(how: tuple[str, ...]) -> None:
    out = _json("--rate", "8", *how)
    _check_latency(out["latency"])
    text = _run("--rate", "8", *how).stdout
    assert "model error, nominal 80% interval" in text
    lo, hi = out["latency"]["ttft_ms"]["mean_interval80"]
    line = next(x for x in text.splitlines() if x.strip().startswith("TTFT (ms): mean"))
    got = re.search(r"mean [\d.,]+ model error 80%: \[([\d.,]+), ([\d.,]+)\]", line)
    assert got is not None, line
    assert float(got.group(1)) == pytest.approx(lo, rel=0.01)
    assert float(got.group(2)) == pytest.approx(hi, rel=0.01)
