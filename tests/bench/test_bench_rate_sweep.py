"""`bench --rate sweep`: saturation first (closed loop), then rates below it, simulate's table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")


@pytest.mark.slow
def test_rate_sweep_measures_saturation_then_sweeps_below_it(tmp_path: Path) -> None:
    trace = tmp_path / "s.jsonl"
    out = subprocess.run(
        [RIDGELINE, "bench", "--target", "emulator", "--model", "llama-3.1-8b", "--speed", "4",
         "--rate", "sweep", "--concurrency", "32", "--requests", "30", "--prompt",
         "fixed:256", "--output", "fixed:16", "--trace", str(trace), "--slo",
         "ttft_ms<=1000", "--no-server-metrics", "--json"],
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    rs = obj["rate_sweep"]
    cap = rs["saturation_req_s"]
    # The probe's throughput is completed requests over its duration (its own trace).
    sat = obj["points"][0]
    assert sat["point"] == "saturation"
    assert cap == pytest.approx(sat["analysis"]["throughput"]["requests_per_s"])
    assert json.loads(Path(sat["trace"]).read_text().splitlines()[0])["load"]["concurrency"] == 32
    rates = [p["rate_req_s"] for p in rs["sweep"]]
    # 20% ... 110% of saturation, rounded to 3 significant figures, increasing.
    assert rates == sorted(rates) and len(rates) == 8
    assert rates[0] == pytest.approx(0.2 * cap, rel=0.01)
    assert rates[-1] == pytest.approx(1.1 * cap, rel=0.01)
    for p, point in zip(rs["sweep"], obj["points"][1:], strict=True):
        header = json.loads(Path(point["trace"]).read_text().splitlines()[0])
        assert header["load"]["pattern"] == "open"
        assert header["load"]["rate_req_s"] == p["rate_req_s"]
    # Never at the range's last rate (the knee would lie beyond it: None).
    assert rs["knee_rate_req_s"] is None or rs["knee_rate_req_s"] in rates[:-1]
    assert rs["max_rate_meeting_slos_req_s"] in rates


def test_rate_sweep_takes_one_probe_concurrency() -> None:
    out = subprocess.run([RIDGELINE, "bench", "--base-url", "http://127.0.0.1:9", "--rate",
                          "sweep", "--concurrency", "8,16"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "error: --rate sweep: --concurrency takes one value" in out.stderr
