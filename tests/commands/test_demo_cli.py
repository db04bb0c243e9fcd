"""The README's main command: `ridgeline demo` runs the whole pipeline on built-in defaults."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def run_demo(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ridgeline.cli", "demo", "--out-dir", str(tmp_path / "demo"),
         *extra],
        capture_output=True, text=True, timeout=600,
    )


def test_quick_demo_predicts_and_simulates(tmp_path: Path) -> None:
    out = run_demo(tmp_path, "--quick")
    assert out.returncode == 0, out.stderr
    assert "static-batch prefill" in out.stdout  # the estimate's phase table
    assert "knee" in out.stdout  # the simulated latency-vs-load sweep
    assert "Traceback" not in out.stderr
    report = tmp_path / "demo" / "report.html"
    assert f"Report: {report.resolve()}" in out.stdout
    html = report.read_text()
    assert ">Prediction (roofline model)</h2>" in html and ">Latency vs load</h2>" in html


@pytest.mark.slow
def test_full_demo_measures_the_emulator_and_compares(tmp_path: Path) -> None:
    out = run_demo(tmp_path)
    assert out.returncode == 0, out.stderr
    bench = tmp_path / "demo" / "bench-emulator.jsonl"
    sim = tmp_path / "demo" / "simulate.jsonl"
    lines = bench.read_text().splitlines()
    assert json.loads(lines[0])["source"] == "bench"
    ok = [json.loads(x) for x in lines[1:] if json.loads(x).get("type") == "request"]
    assert len(ok) == 120 and all(r["status"] == "ok" for r in ok)
    assert json.loads(sim.read_text().splitlines()[0])["source"] == "simulate"
    assert "Does the measurement agree?" in out.stdout and "tpot_p50" in out.stdout
    html = (tmp_path / "demo" / "report.html").read_text()
    for section in ("Prediction (roofline model)", "Latency vs load", "Runs and metrics",
                    "Comparison", "Timelines"):
        assert f">{section}</h2>" in html
    assert "bench-emulator.jsonl" in html and "ridgeline-emulator" in html
    assert f"Report: {(tmp_path / 'demo' / 'report.html').resolve()}" in out.stdout
