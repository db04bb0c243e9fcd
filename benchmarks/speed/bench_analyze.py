"""Benchmark: `analyze` on a 1,000,000-request trace (goal: < 10 s and < 2 GB, 2 cores).

The trace (written once, cached under /tmp): Poisson arrivals at 200 req/s (about 5,000 s
of run), prompt lengths lognormal (median 512 tokens), output lengths lognormal (median
128, 1..2048 tokens), TTFT lognormal (median 150 ms), per-request TPOT lognormal (median
30 ms). Output is streamed in chunks of 8 tokens (the last chunk takes the remainder), so a
request carries about 20 events on average, each with its time and token count; 1% of
requests fail with an HTTP error and no events. File size is about 0.5 GB.

Each measurement runs in a fresh process and reports, for read_trace + analyze (with two
SLOs, so goodput is computed too): wall time, CPU time (user + sys from getrusage, this
process and, separately, the reader's worker process), peak RSS (ru_maxrss, likewise) and
the load average, since wall times on a shared machine follow the load. Then the same with
the file read by the reference pydantic-per-line parser, to show what the fast path buys.

    .venv/bin/python benchmarks/speed/bench_analyze.py [--requests N] [--skip-pydantic]
        [--sequential]   # no worker process: read_trace in this process alone
        [--src DIR]      # import ridgeline from DIR (e.g. an older checkout, for before/after)
        [--no-hugepage]  # NUMPY_MADVISE_HUGEPAGE=0 for the measured process (see RESULTS)
        [--command]      # the whole `ridgeline analyze TRACE --slo .. --slo .. --json`
                         # command instead, for each --src in turn

`--command` (the bar: "analyze of 1 M requests takes < 5 s and < 1 GB as a whole
command"): each tree (`--src DIR`, repeatable; default the installed one) runs the command
in a fresh process, taking turns `--repeat` times; reported per run: wall, CPU (user + sys
of the command and its descendants, the reader's worker included: RUSAGE_CHILDREN), the
peak RSS of the largest process (ru_maxrss), the load average before and after, and the
SHA-256 of the JSON printed, which must be the same for every tree.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from bench_shaped_trace import write_trace  # noqa: E402  (the shape lives beside the tests)

CHILD = r"""
import json, os, resource, sys, time
t0 = time.perf_counter()
load0 = os.getloadavg()[0]
mode, path = sys.argv[1], sys.argv[2]
from ridgeline.metrics.analysis import analyze
if mode in ("fast", "sequential"):
    import ridgeline.trace.reader as reader
    if mode == "sequential" and hasattr(reader, "PARALLEL_MIN_BYTES"):
        reader.PARALLEL_MIN_BYTES = float("inf")
        reader.PARALLEL_MIN_BYTES_COMPILED = float("inf")
    trace = reader.read_trace(path)
else:
    from ridgeline.trace.schema import RequestRecord, TraceHeader
    from ridgeline.trace.table import Trace
    header, recs = None, []
    with open(path) as fh:
        for line in fh:
            obj = json.loads(line)
            if obj.get("type") == "header":
                header = TraceHeader.model_validate(obj)
            elif obj.get("type") == "request":
                recs.append(RequestRecord.model_validate(obj).model_dump(exclude_none=True))
    trace = Trace.from_records(header, recs)
t1 = time.perf_counter()
ru1 = resource.getrusage(resource.RUSAGE_SELF)
r = analyze(trace, slos=["ttft_ms<=500", "tpot_ms<=50"])
t2 = time.perf_counter()
d = r.to_dict()
ru = resource.getrusage(resource.RUSAGE_SELF)
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({
    "read_s": round(t1 - t0, 2), "analyze_s": round(t2 - t1, 2), "total_s": round(t2 - t0, 2),
    "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
    "cpu_user_s": round(ru.ru_utime, 2), "cpu_sys_s": round(ru.ru_stime, 2),
    "analyze_cpu_s": round(ru.ru_utime + ru.ru_stime - ru1.ru_utime - ru1.ru_stime, 2),
    "worker_cpu_s": round(ch.ru_utime + ch.ru_stime, 2),
    "peak_rss_mb": round(ru.ru_maxrss / 1024), "worker_peak_rss_mb": round(ch.ru_maxrss / 1024),
    "load1_start": round(load0, 2), "load1_end": round(os.getloadavg()[0], 2),
    "requests": len(trace), "events": int(trace.event_times_s.size),
    "ttft_p99_ms": d["latency"]["ttft_ms"]["percentiles"]["p99"],
    "output_tok_s": d["throughput"]["output_tok_s"],
    "little_ratio": d["littles_law"]["ratio_L_over_lambda_W"],
}))
"""


def run_child(mode: str, path: Path, src: str | None = None, hugepage: bool = True) -> dict:
    env = dict(os.environ)
    if not hugepage:
        env["NUMPY_MADVISE_HUGEPAGE"] = "0"
    if src:
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(path)], capture_output=True,
                          text=True, check=True, env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


COMMAND = ("import sys; sys.argv[0] = 'ridgeline'; from ridgeline.cli import main; "
           "sys.exit(main())")


def run_command(path: Path, src: str | None) -> dict:
    """The whole `ridgeline analyze` command in a fresh process (see the docstring)."""
    import hashlib
    import resource

    env = dict(os.environ)
    env.pop("NUMPY_MADVISE_HUGEPAGE", None)  # the command sets it itself
    if src:
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    argv = [sys.executable, "-c", COMMAND, "analyze", str(path), "--slo", "ttft_ms:500",
            "--slo", "tpot_ms:50", "--json"]
    load0 = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, env=env, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"src": src or "installed", "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "peak_rss_mib": round(after.ru_maxrss / 1024), "load1_start": round(load0, 2),
            "load1_end": round(os.getloadavg()[0], 2),
            "json_sha256": hashlib.sha256(proc.stdout).hexdigest()[:16]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--skip-pydantic", action="store_true")
    ap.add_argument("--sequential", action="store_true",
                    help="read in one process (no worker process for the second part)")
    ap.add_argument("--src", action="append",
                    help="import ridgeline from this directory (before/after runs; "
                    "repeatable with --command)")
    ap.add_argument("--command", action="store_true",
                    help="time the whole `ridgeline analyze` command")
    ap.add_argument("--no-hugepage", action="store_true",
                    help="NUMPY_MADVISE_HUGEPAGE=0 in the measured process")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--one-command", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--trace", help="the trace to analyze (default: written under /tmp)")
    args = ap.parse_args()
    path = Path(args.trace or f"/tmp/ridgeline_bench_trace_{args.requests}.jsonl")
    if not path.exists():
        t = time.perf_counter()
        write_trace(path, args.requests)
        print(f"wrote {path} ({path.stat().st_size / 1e6:.0f} MB) in "
              f"{time.perf_counter() - t:.1f} s")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, numpy {np.__version__}")
    print(f"trace: {path} ({path.stat().st_size / 1e6:.0f} MB)")
    if args.command:
        # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: the first tree's peak
        # would hide a smaller one, so each run is measured from a fresh helper process.
        for i in range(args.repeat):
            for src in args.src or [None]:
                out = subprocess.run(
                    [sys.executable, __file__, "--requests", str(args.requests),
                     "--one-command", "--trace", str(path),
                     *(["--src", src] if src else [])],
                    capture_output=True, text=True, check=True).stdout.strip().splitlines()
                print(f"command run {i + 1}: {out[-1]}", flush=True)
        return
    if args.one_command:
        print(json.dumps(run_command(path, (args.src or [None])[0])))
        return
    src = (args.src or [None])[0]
    mode = "sequential" if args.sequential else "fast"
    for i in range(args.repeat):
        res = run_child(mode, path, src, hugepage=not args.no_hugepage)
        print(f"{mode} path run {i + 1}: " + json.dumps(res))
    if not args.skip_pydantic:
        res = run_child("pydantic", path, src, hugepage=not args.no_hugepage)
        print("pydantic per-line reference: " + json.dumps(res))


if __name__ == "__main__":
    main()
