"""`report --sweep` with a closed-loop concurrency sweep (`bench --concurrency 1,8,32`):
latency against concurrency, a summary table, and `<report>.sweep.csv` with one row per
point, sorted numerically."""

from __future__ import annotations

import csv
import itertools
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")


def _trace(path: Path, concurrency: int, ttft_s: float, n: int = 40) -> None:
    """n requests, each with TTFT exactly `ttft_s` and 4 more tokens 10 ms apart."""
    header = {"type": "header", "source": "bench", "model": "m",
              "load": {"pattern": "closed", "concurrency": concurrency, "requests": n}}
    recs = []
    for i in range(n):
        sent = i * 0.05
        times = [sent + ttft_s + 0.01 * k for k in range(5)]
        recs.append({"type": "request", "id": str(i), "sent_s": sent, "event_times_s": times,
                     "end_s": times[-1], "prompt_tokens": 100, "output_tokens": 5,
                     "status": "ok"})
    path.write_text("\n".join(json.dumps(x) for x in [header, *recs]) + "\n")


def test_closed_loop_sweep_report_and_csv(tmp_path: Path) -> None:
    # TTFT grows with concurrency: 10 ms at 1, 20 ms at 2, 90 ms at 9, 100 ms at 10
    for c, ttft_ms in ((10, 100), (2, 20), (9, 90), (1, 10)):
        _trace(tmp_path / f"s.concurrency-{c}.jsonl", c, ttft_ms / 1e3)
    out = subprocess.run([RIDGELINE, "report", "--sweep", str(tmp_path / "s.*.jsonl"),
                          "--out", str(tmp_path / "r.html")], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    html = (tmp_path / "r.html").read_text()
    assert "Latency vs concurrency" in html
    rows = list(csv.DictReader((tmp_path / "r.sweep.csv").open()))
    assert [r["concurrency"] for r in rows] == ["1", "2", "9", "10"]  # numerically
    assert all(r["series"] == "measured (closed loop)" and r["rate_req_s"] == "" for r in rows)
    # every request of a point has the same TTFT and TPOT: its percentiles are those values
    for r, ttft_ms in zip(rows, (10, 20, 90, 100), strict=True):
        assert float(r["ttft_p50_ms"]) == ttft_ms and float(r["ttft_p99_ms"]) == ttft_ms
        assert abs(float(r["tpot_p50_ms"]) - 10.0) < 1e-6


def test_a_sweep_trace_without_rate_or_concurrency_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    _trace(path, 1, 0.01)
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    header["load"] = {}
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    out = subprocess.run([RIDGELINE, "report", "--sweep", str(path), "--out",
                          str(tmp_path / "r.html")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.startswith("error: --sweep") and out.stderr.count("\n") == 1


def _line_x(svg: str, gid: str) -> list[float]:
    """x coordinates of the path drawn for the line with matplotlib gid `gid`."""
    root = ET.fromstring(svg)
    for g in root.iter("{http://www.w3.org/2000/svg}g"):
        if g.get("id") == gid:
            path = next(g.iter("{http://www.w3.org/2000/svg}path"))
            nums = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", path.get("d", ""))]
            return nums[0::2]
    raise AssertionError(f"no line {gid!r} in the SVG")


def test_concurrency_plot_joins_points_in_numeric_order(tmp_path: Path) -> None:
    # Files named so that a sort by text would give 1, 10, 2, 9: the line must still run
    # left to right through 1, 2, 9, 10 (its x coordinates strictly increasing).
    for c, ttft_ms in ((10, 100), (2, 20), (9, 90), (1, 10)):
        _trace(tmp_path / f"s.concurrency-{c}.jsonl", c, ttft_ms / 1e3)
    out = subprocess.run([RIDGELINE, "plot", "load", str(tmp_path / "s.concurrency-1.jsonl"),
                          str(tmp_path / "s.concurrency-10.jsonl"),
                          str(tmp_path / "s.concurrency-2.jsonl"),
                          str(tmp_path / "s.concurrency-9.jsonl"),
                          "--out", str(tmp_path / "p.svg")], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    svg = (tmp_path / "p.svg").read_text()
    xs = _line_x(svg, "ttft:p50:concurrency:measured")
    assert len(xs) == 4
    assert all(b > a for a, b in itertools.pairwise(xs)), xs
    # and the gaps follow the concurrencies 1, 2, 9, 10 (pixel x is linear in concurrency)
    scale = (xs[3] - xs[0]) / 9.0
    assert [round((x - xs[0]) / scale, 6) for x in xs] == [0.0, 1.0, 8.0, 9.0]
