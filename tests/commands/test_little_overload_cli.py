"""`simulate` through the installed command: overload is reported as overloaded.

The capacity comes from a run far past saturation (every request queued: the completion
rate is the engine's ceiling). At twice that rate the queue grows all run long: the
Little's-law check must say "overloaded" (offered twice what is completed), never
"consistent", whatever the window; at half the capacity it is consistent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXE = Path(sys.executable).parent / "ridgeline"
ARGS = ["--prompt", "fixed:512", "--output", "fixed:128", "-n", "1500", "--json"]


def _analysis(rate: float) -> dict:
    proc = subprocess.run([str(EXE), "simulate", "--rate", f"{rate:g}", *ARGS],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)["analysis"]


def _little(rate: float) -> dict:
    return _analysis(rate)["littles_law"]


def test_twice_capacity_is_overloaded_half_is_consistent() -> None:
    # 1,500 requests in under a second: all queued, the run's completion rate (whole run,
    # the window falls back to it) is the engine's ceiling.
    ceiling = _analysis(2000.0)
    assert ceiling["littles_law"]["status"] == "overloaded"
    capacity = ceiling["throughput"]["requests_per_s"]
    over = _little(2 * capacity)
    assert over["status"] == "overloaded" and over["ok"] is False
    assert over["offered_req_s"] == pytest.approx(2 * capacity, rel=0.1)
    # Departures run at most at the ceiling (less while the first batch fills).
    assert over["completed_req_s"] <= 1.1 * capacity < 0.6 * over["offered_req_s"]
    assert over["in_system_end"] > over["in_system_start"]
    under = _little(0.5 * capacity)
    assert under["status"] == "consistent" and under["ok"] is True
    assert under["completed_req_s"] == pytest.approx(under["offered_req_s"], rel=0.1)
