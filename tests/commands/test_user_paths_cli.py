"""A new user's paths through the installed command, stdout a pipe: the GPU names people
type, and the SLOs a bench run was measured against carried by its trace into advise and
the report."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).with_name("ridgeline")
RIDGELINE = str(BIN) if BIN.exists() else shutil.which("ridgeline") or "ridgeline"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, cwd=cwd)


@pytest.mark.parametrize(("typed", "entry"), [
    ("H100", "h100-sxm"), ("h100", "h100-sxm"), ("H100-SXM5-80GB", "h100-sxm"),
    ("A100-80GB", "a100-80gb"), ("mi300x", "mi300x"),
])
def test_estimate_takes_the_gpu_names_people_type(typed: str, entry: str) -> None:
    proc = run("estimate", "-g", typed, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["config"]["hardware"] == entry


def test_an_ambiguous_gpu_name_is_refused_with_the_choices() -> None:
    proc = run("simulate", "-g", "A100", "--rate", "1", "-n", "10")
    assert proc.returncode == 2
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "'A100'" in errors[0]
    assert "a100-40gb" in errors[0] and "a100-80gb" in errors[0]


def test_bench_slos_reach_advise_and_the_report(tmp_path: Path) -> None:
    """A 1 ms TTFT SLO no request can meet: the trace records it, advise judges against it
    (not the default 1,000 ms) and the report's goodput is 0 against it."""
    b = run("bench", "--target", "emulator", "--requests", "20", "--rate", "20", "--output",
            "fixed:8", "--prompt", "fixed:64", "--slo", "ttft_ms:1", "--trace", "s.jsonl",
            "--format", "vllm", "--no-progress", cwd=tmp_path)
    assert b.returncode == 0, b.stderr
    header = json.loads((tmp_path / "s.jsonl").read_text().splitlines()[0])
    assert header["slos"] == ["ttft_ms:1"]
    adv = run("advise", "s.jsonl", cwd=tmp_path)
    assert adv.returncode == 0, adv.stderr
    assert "TTFT P99 <= 1 ms" in adv.stdout and "No symptom found" not in adv.stdout
    rep = run("report", "s.jsonl", "--out", "r.html", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    html = (tmp_path / "r.html").read_text()
    assert "goodput (ttft_ms&lt;=1): 0 req/s" in html
