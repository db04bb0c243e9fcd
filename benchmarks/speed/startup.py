"""Start-up time of `ridgeline serve` and `ridgeline bench --target emulator`, as a user
sees it: the installed command, launched fresh, timed on the wall clock.

    serve   spawn -> GET /health answers 200
    bench   spawn -> the "bench: ..." line, printed just before the first request is sent
            (the emulator started, health-checked and probed)

Median of 5 runs each (after one untimed run that warms the file cache). With
`--baseline-src DIR` (another checkout's `src`, e.g. `git archive <commit> src`), the same
measurements of that code run interleaved with these (PYTHONPATH=DIR for its processes),
so both see the same host load. Writes benchmarks/results/startup.json.

    .venv/bin/python benchmarks/speed/startup.py [--runs 5] [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RIDGELINE = str(Path(sys.executable).parent / "ridgeline")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds a live process has used (Linux /proc): the start-up's
    cost independent of how busy the host is."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


CPU: dict[str, list[float]] = {"serve": [], "bench": []}


ENV: dict[str, str] = dict(os.environ)


def serve_ready_s() -> float:
    port = _free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen([RIDGELINE, "serve", "--port", str(port)], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health",
                                            timeout=1) as r:
                    if r.status == 200:
                        wall = time.perf_counter() - t0
                        CPU["serve"].append(_cpu_s(proc.pid))
                        return wall
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("serve exited") from None
                time.sleep(0.005)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def bench_first_request_s() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        proc = subprocess.Popen([RIDGELINE, "bench", "--target", "emulator", "-n", "1",
                                 "--prompt", "16", "--output", "2", "--no-progress"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                cwd=tmp, env={**ENV, "XDG_CACHE_HOME": tmp})
        assert proc.stderr is not None
        try:
            for line in proc.stderr:
                if line.startswith("bench: "):
                    wall = time.perf_counter() - t0
                    CPU["bench"].append(_cpu_s(proc.pid))
                    return wall
            raise RuntimeError("bench printed no start line")
        finally:
            proc.wait(timeout=60)


def _measure(fn: object, key: str, src: str | None) -> tuple[float, float]:
    ENV.clear()
    ENV.update(os.environ)
    if src:
        ENV["PYTHONPATH"] = src
    CPU[key].clear()
    wall = fn()  # type: ignore[operator]
    return wall, CPU[key][0]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--baseline-src", default=None)
    args = ap.parse_args()
    out: dict = {"what": "wall seconds from spawning the installed command to ready, and "
                         "the CPU seconds its own process used by then (bench: not counting "
                         "the emulator it started)",
                 "load_average_1min_before": round(os.getloadavg()[0], 2),
                 "date": time.strftime("%Y-%m-%d"), "host": platform.node(),
                 "cpus": os.cpu_count(), "python": platform.python_version(),
                 "runs": args.runs}
    variants = [("this", None)] + ([("baseline", args.baseline_src)] if args.baseline_src
                                   else [])
    for name, key, fn in (("serve_ready_s", "serve", serve_ready_s),
                          ("bench_emulator_first_request_s", "bench", bench_first_request_s)):
        for _, src in variants:
            _measure(fn, key, src)  # warm the file cache
        got: dict[str, list[tuple[float, float]]] = {v: [] for v, _ in variants}
        for _ in range(args.runs):
            for label, src in variants:
                got[label].append(_measure(fn, key, src))
        for label, _ in variants:
            walls = [w for w, _ in got[label]]
            cpus = [c for _, c in got[label]]
            out.setdefault(label, {})[name] = {
                "median": round(statistics.median(walls), 3),
                "all": [round(t, 3) for t in walls],
                "cpu_median_s": round(statistics.median(cpus), 3)}
            print(f"{label} {name}: median {statistics.median(walls):.3f} s "
                  f"({', '.join(f'{t:.2f}' for t in walls)}); own CPU "
                  f"{statistics.median(cpus):.3f} s")
    out["load_average_1min_after"] = round(os.getloadavg()[0], 2)
    path = ROOT / "benchmarks" / "results" / "startup.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
