"""How long `ridgeline demo` takes, and how much of it is the report step.

    .venv/bin/python benchmarks/speed/bench_demo_report.py [--quick]

Runs the installed `ridgeline demo` once, then `ridgeline report` alone on the demo's own
outputs, and prints wall and CPU (user + sys, children included) seconds of each. CPU time
is the figure to compare across runs on a shared machine; wall time depends on the load.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")


def timed(args: list[str]) -> tuple[float, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen([RIDGELINE, *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"ridgeline {' '.join(args)} failed: {proc.stderr.read().decode()}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    quick = "--quick" in sys.argv
    with tempfile.TemporaryDirectory() as d:
        wall, cpu = timed(["demo", "--out-dir", d, *(["--quick"] if quick else [])])
        print(f"demo{' --quick' if quick else ''}: {wall:.1f} s wall, {cpu:.1f} s CPU")
        inputs = [] if quick else [f"{d}/simulate.jsonl", f"{d}/bench-emulator.jsonl",
                                   "--timeline", f"{d}/timeline.csv"]
        wall, cpu = timed(["report", *inputs, "--sweep", f"{d}/sweep.rate*.jsonl",
                           "--estimate-model", "llama-3.1-8b", "--slo", "ttft_ms<=500",
                           "--slo", "tpot_ms<=50", "--out", f"{d}/again.html"])
        size = Path(f"{d}/again.html").stat().st_size
        print(f"report step alone: {wall:.1f} s wall, {cpu:.1f} s CPU, {size / 1e6:.2f} MB HTML")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
