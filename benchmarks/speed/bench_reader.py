"""Benchmark: the trace reader's paths, one at a time, on a bench-like and a simulate trace,
and simulate's traces with times at 17 digits against 1 us.

    .venv/bin/python benchmarks/speed/bench_reader.py [--bench-trace PATH] [--bench-requests N]
        [--sim-requests N] [--repeat 3] [--modes compiled,msgspec,...]

Paths (`--modes`), each in a fresh process reading the whole file in one process
(`RIDGELINE_READ_WORKER=0`, so the paths compare, not the split):

    compiled        the default: the compiled scanner (`_scan.c`), the others for what it declines
    msgspec         the scanner off (as in a build without a C compiler): msgspec per batch,
                    the header's and footer's batches by the hand-cut numpy path
    msgspec-only    the scanner and the hand-cut numpy path off: msgspec, and json.loads for
                    the header's and footer's batches
    numpy-cut       the scanner and msgspec off: the hand-cut numpy path for every batch
    exact           json.loads and the record checks only (`_read_trace(fast=False)`)

A mode whose path is not in this tree is reported as absent. Reports CPU seconds (user + sys of a
fresh process: on a shared machine the wall time follows the load, the CPU time much less) and
peak RSS, the minimum of `--repeat` runs. The bench-like trace is
benchmarks/speed/bench_analyze.py's shape (1 M requests, 23 M events, 0.5 GB by default), written
once to /tmp if missing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import json, os, resource, sys
os.environ["RIDGELINE_READ_WORKER"] = "0"
import ridgeline.trace.reader as reader
mode = sys.argv[2]


def _declines(*args, **kwargs):
    raise reader._Cannot


if mode != "compiled":
    reader._cscan = None
if mode == "msgspec-only" and hasattr(reader, "_FastBatch"):
    reader._FastBatch = _declines
if mode == "numpy-cut":
    reader._msgspec = None
if mode in ("msgspec-only", "numpy-cut") and not hasattr(reader, "_FastBatch"):
    print(json.dumps({"absent": True}))
    sys.exit(0)
t = reader._read_trace(sys.argv[1], fast=mode != "exact")
ru = resource.getrusage(resource.RUSAGE_SELF); ch = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"cpu_s": ru.ru_utime + ru.ru_stime + ch.ru_utime + ch.ru_stime,
                  "peak_rss_mb": max(ru.ru_maxrss, ch.ru_maxrss) / 1024, "requests": len(t),
                  "events": int(t.event_times_s.size)}))
"""


def measure(path: Path, mode: str, repeat: int) -> dict:
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", CHILD, str(path), mode], check=True,
                             capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    if runs[0].get("absent"):
        return {"absent": True}
    best = min(runs, key=lambda r: r["cpu_s"])
    best["cpu_s_runs"] = [round(r["cpu_s"], 2) for r in runs]
    return best


def write_sim_traces(n: int, rounded: Path, full: Path) -> None:
    """One simulate run written twice: as simulate writes it (1 us) and at full precision."""
    import numpy as np

    from ridgeline.perf.roofline_step import RooflineStepTime
    from ridgeline.sim.engine import EngineConfig, kv_blocks_from_memory
    from ridgeline.sim.event_loop import Workload, simulate
    from ridgeline.trace.schema import TraceHeader
    from ridgeline.trace.writer import TraceWriter

    step = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
    cfg = EngineConfig(num_kv_blocks=kv_blocks_from_memory(step, 0.9, 16, "bench"))
    rng = np.random.default_rng(0)
    wl = Workload(prompt_tokens=np.full(n, 512), output_tokens=rng.integers(64, 257, n),
                  arrival_s=np.cumsum(rng.exponential(1 / 30.0, n)))
    res = simulate(wl, cfg, step)
    header = TraceHeader(source="simulate", model="llama-3.1-8b", hardware="h100-sxm")
    with TraceWriter(rounded, header) as w:
        w.write_requests(list(res.records()))
    off, ev = res.event_offsets.tolist(), res.event_times_s
    with TraceWriter(full, header) as w:
        recs = []
        for rec, i in zip(res.records(), range(len(res)), strict=True):
            rec.update(scheduled_s=float(res.sent_s[i]), sent_s=float(res.sent_s[i]),
                       end_s=float(res.end_s[i]), event_times_s=ev[off[i]:off[i + 1]].tolist())
            recs.append(rec)
        w.write_requests(recs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-trace", help="default /tmp/ridgeline_bench_trace_<N>.jsonl")
    ap.add_argument("--bench-requests", type=int, default=1_000_000)
    ap.add_argument("--sim-requests", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--modes", default="compiled,msgspec,msgspec-only,numpy-cut,exact")
    ap.add_argument("--out", default="benchmarks/results/bench_reader.json")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    bench = Path(args.bench_trace
                 or f"/tmp/ridgeline_bench_trace_{args.bench_requests}.jsonl")
    if not bench.exists():
        sys.path.insert(0, str(Path(__file__).parent))
        import bench_analyze

        bench_analyze.write_trace(bench, args.bench_requests)
    results: dict = {}
    rounded = Path(f"/tmp/ridgeline_sim_{args.sim_requests}_1us.jsonl")
    full = Path(f"/tmp/ridgeline_sim_{args.sim_requests}_full.jsonl")
    if not rounded.exists() or not full.exists():
        t = time.perf_counter()
        write_sim_traces(args.sim_requests, rounded, full)
        print(f"wrote simulate traces in {time.perf_counter() - t:.0f} s")
    bench_name = f"bench-like {args.bench_requests:,}"
    for name, path in ((bench_name, bench), ("simulate 17 digits", full),
                       ("simulate 1 us", rounded)):
        for mode in args.modes.split(","):
            r = measure(path, mode, args.repeat)
            r["file_mb"] = round(path.stat().st_size / 1e6)
            results[f"{name} / {mode}"] = r
            print(f"{name:20s} {mode:10s} {json.dumps(r)}", flush=True)
    print(f"load average at end: {os.getloadavg()}")
    Path(args.out).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"),
                                          "loadavg_end": os.getloadavg(),
                                          "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
