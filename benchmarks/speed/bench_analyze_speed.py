"""Benchmark: CPU time of `analyze` on a simulated 100k-request trace, and of the whole
`ridgeline simulate ... --json` command that ends with it.

The workload is the issue's: 100,000 requests at 20 req/s, prompt lognormal mean 800 sigma
0.8, output lognormal mean 250 sigma 0.8 (about 25 M pooled ITL gaps). The trace is
simulated once and cached as JSONL under /tmp.

CPU time (user + sys, getrusage) rather than wall time: the machine this was written on is
a shared 2-core box whose wall times follow its load. Each source tree (`--src`, repeatable:
e.g. a checkout of the commit before and the working tree) is measured in fresh processes
taking turns, `--rounds` times; each process reads the trace once and runs `analyze`
`--repeat` times. The best CPU time of each tree is reported, with the median, and the JSON
results of the trees are compared number by number.

    .venv/bin/python benchmarks/speed/bench_analyze_speed.py --src /tmp/base/src --src src
        [--rounds 3] [--repeat 2] [--command]   # --command: also the whole simulate command
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ARGS = ["--requests", "100000", "--rate", "20", "--prompt", "lognormal:mean=800,sigma=0.8",
        "--output", "lognormal:mean=250,sigma=0.8"]

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from ridgeline.metrics.analysis import analyze
from ridgeline.trace.reader import read_trace
trace = read_trace(sys.argv[2])
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
times = []
for _ in range(int(sys.argv[3])):
    c0, w0 = cpu(), time.perf_counter()
    result = analyze(trace)
    times.append((cpu() - c0, time.perf_counter() - w0))
json.dump(result.to_dict(), open(sys.argv[4], "w"), sort_keys=True)
print(json.dumps(times))
"""

COMMAND = r"""
import sys
sys.path.insert(0, sys.argv[1])
from ridgeline.cli import main
sys.argv = ["ridgeline", "simulate", *sys.argv[2:]]
main()
"""


def ensure_trace(path: Path, src: str) -> None:
    if path.exists():
        return
    subprocess.run([sys.executable, "-c", COMMAND, src, *ARGS, "--trace", str(path)],
                   check=True, stdout=subprocess.DEVNULL)


def run_command(src: str) -> tuple[float, float]:
    """CPU and wall seconds of the whole simulate command (child rusage)."""
    import resource
    import time

    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", COMMAND, src, *ARGS, "--json"], check=True,
                   stdout=subprocess.DEVNULL)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
            time.perf_counter() - w0)


def differences(a: object, b: object, path: str = "") -> list[str]:
    """Leaves of two JSON results that differ, with the relative difference of numbers."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b))
                for d in differences(a.get(k), b.get(k), f"{path}/{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{i}]")]
    if a == b:
        return []
    if isinstance(a, float) and isinstance(b, float):
        return [f"{path}: {a!r} vs {b!r} (relative {abs(a - b) / max(abs(a), 1e-300):.2g})"]
    return [f"{path}: {a!r} vs {b!r}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", action="append", required=True,
                    help="a source tree to import ridgeline from (repeatable)")
    ap.add_argument("--trace", default="/tmp/ridgeline_bench_analyze_speed_100k.jsonl")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--command", action="store_true",
                    help="also time the whole simulate --json command")
    args = ap.parse_args()
    srcs = [str(Path(s).resolve()) for s in args.src]
    trace = Path(args.trace)
    ensure_trace(trace, srcs[-1])
    cpu: dict[str, list[float]] = {s: [] for s in srcs}
    cmd: dict[str, list[tuple[float, float]]] = {s: [] for s in srcs}
    out = Path(tempfile.mkdtemp(prefix="bench_analyze_speed_"))
    for _ in range(args.rounds):
        for i, s in enumerate(srcs):
            res = subprocess.run(
                [sys.executable, "-c", CHILD, s, str(trace), str(args.repeat),
                 str(out / f"{i}.json")], check=True, capture_output=True, text=True)
            cpu[s] += [c for c, _ in json.loads(res.stdout.strip().splitlines()[-1])]
            if args.command:
                cmd[s].append(run_command(s))
    print(f"trace: {trace} ({trace.stat().st_size / 1e6:.0f} MB); load average "
          f"{os.getloadavg()[0]:.2f} at the end")
    for s in srcs:
        line = (f"{s}: analyze CPU best {min(cpu[s]):.2f} s, median "
                f"{statistics.median(cpu[s]):.2f} s over {len(cpu[s])} runs")
        if cmd[s]:
            line += (f"; simulate --json CPU best {min(c for c, _ in cmd[s]):.2f} s, wall best "
                     f"{min(w for _, w in cmd[s]):.2f} s")
        print(line)
    results = [json.loads((out / f"{i}.json").read_text()) for i in range(len(srcs))]
    for i in range(1, len(srcs)):
        diff = differences(results[0], results[i])
        print(f"{srcs[0]} vs {srcs[i]}: {len(diff)} differing numbers")
        for d in diff[:20]:
            print("  " + d)


if __name__ == "__main__":
    main()
