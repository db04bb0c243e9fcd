"""A run shorter than one request's stay is not called overloaded: nothing can finish inside
an arrival window shorter than the shortest latency, whatever the server's capacity. By
hand, through the installed `analyze`: 20 requests sent 0.06 s apart, each 1.8 s in the
system (a stable server: every request takes the same time, none waits)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).with_name("ridgeline")
RIDGELINE = str(BIN) if BIN.exists() else shutil.which("ridgeline") or "ridgeline"


def _trace(path: Path, n: int, gap_s: float, stay_s: float) -> None:
    recs = [{"type": "header", "source": "hand"}]
    for k in range(n):
        t = k * gap_s
        recs.append({"type": "request", "id": str(k), "sent_s": t,
                     "event_times_s": [t + 0.03, t + stay_s], "end_s": t + stay_s,
                     "output_tokens": 2, "status": "ok"})
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")


def analyze_json(path: Path) -> dict:
    proc = subprocess.run([RIDGELINE, "analyze", str(path), "--window", "all", "--format",
                           "json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_run_shorter_than_its_latency_is_an_edge_effect(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    _trace(trace, 20, 0.06, 1.8)
    lt = analyze_json(trace)["littles_law"]
    # Arrival window [0, 1.14]: L = sum(1.14 - 0.06 k) / 1.14 = 11.4 / 1.14 = 10;
    # lambda = 20 / 1.14, W = 1.8: L / (lambda W) = 10 / 31.58 = 0.3167.
    assert abs(lt["L_in_flight"] - 10.0) < 1e-9
    assert abs(lt["ratio_L_over_lambda_W"] - 10.0 / (20 / 1.14 * 1.8)) < 1e-9
    assert lt["status"] == "inconsistent" and "edge effects" in lt["note"]
    text = subprocess.run([RIDGELINE, "analyze", str(trace), "--window", "all"],
                          capture_output=True, text=True, timeout=120).stdout
    assert "OVERLOADED" not in text and "INCONSISTENT" not in text
    assert "edge effects explain" in text


def test_a_long_overloaded_run_is_still_overloaded(tmp_path: Path) -> None:
    """40 arrivals 0.1 s apart into one server of 0.2 s (FIFO): request k ends at
    0.2 (k + 1); the queue grows by one every 0.2 s."""
    recs = [{"type": "header", "source": "hand"}]
    for k in range(40):
        recs.append({"type": "request", "id": str(k), "sent_s": 0.1 * k,
                     "event_times_s": [0.2 * (k + 1)], "end_s": 0.2 * (k + 1),
                     "output_tokens": 1, "status": "ok"})
    trace = tmp_path / "o.jsonl"
    trace.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    assert analyze_json(trace)["littles_law"]["status"] == "overloaded"
