"""The HTML report's charts without a browser (test_report_browser.py drives one where it is
installed): through the installed command, the page holds uPlot itself (the vendored file,
byte for byte), loads nothing from elsewhere, and carries each chart's numbers as data: the
sweep's rates on x and, for TTFT P50, the value `analyze --format json` gives each point's
trace."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

BIN = Path(sys.executable).with_name("ridgeline")
RIDGELINE = str(BIN) if BIN.exists() else shutil.which("ridgeline") or "ridgeline"


def ok(*args: str) -> str:
    proc = subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_report_charts_are_inlined_data_and_library(tmp_path: Path) -> None:
    ok("simulate", "--rate", "2,6", "--requests", "150", "--trace", str(tmp_path / "s.jsonl"),
       "--format", "json")
    report = tmp_path / "r.html"
    ok("report", "--sweep", str(tmp_path / "s.rate*.jsonl"), "--out", str(report))
    html = report.read_text()
    lib = resources.files("ridgeline.report").joinpath("static", "uPlot.iife.min.js")
    assert lib.read_text("utf-8") in html   # the library itself, inlined
    # Nothing fetched: no script, stylesheet or image from another place.
    assert not re.findall(r"""(?:src|href)=["']?(?:https?:)?//""", html)
    data = re.search(r'<script type="application/json" id="ridgeline-charts">(.*?)</script>',
                     html, re.S)
    assert data is not None
    charts = {c["id"]: c for c in json.loads(data.group(1).replace("<\\/", "</"))}
    ttft = charts["load_ttft"]
    assert ttft["x"] == [2, 6]
    p50 = ttft["series"][0]
    assert p50["label"].endswith("P50")
    for rate, y in zip(ttft["x"], p50["y"], strict=True):
        js = json.loads(ok("analyze", str(tmp_path / f"s.rate{rate:g}.jsonl"), "--format",
                           "json"))
        assert abs(y - js["latency"]["ttft_ms"]["percentiles"]["p50"]["value"]) < 1e-6 * y
