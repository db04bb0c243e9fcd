"""Benchmark: the trace reader with and without msgspec, on a bench-like and a simulate trace,
and simulate's traces with times at 17 digits against 1 us.

    .venv/bin/python benchmarks/speed/bench_reader.py [--bench-trace PATH] [--sim-requests N]
        [--repeat 3]

Reports CPU seconds (user + sys of a fresh process, reader's worker included: on a shared
machine the wall time follows the load, the CPU time much less) and peak RSS, the minimum of
`--repeat` runs. The bench-like trace is benchmarks/speed/bench_analyze.py's (1 M requests, 23 M
events, 0.5 GB), written once to /tmp if missing.
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
import ridgeline.trace.reader as reader
if sys.argv[2] == "no-msgspec":
    reader._msgspec = None
t = reader.read_trace(sys.argv[1])
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
    best = min(runs, key=lambda r: r["cpu_s"])
    best["cpu_s_runs"] = [round(r["cpu_s"], 2) for r in runs]
    return best


def write_sim_traces(n: int, rounded: Path, full: Path) -> None:
    """One simulate run written twice: as simulate writes it (1 us) and at full precision."""
    import numpy as np

    from ridgeline.perf.serving_model import RooflineStepTime
    from ridgeline.sim.engine import EngineConfig, kv_blocks_from_memory
    from ridgeline.sim.runner import Workload, simulate
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
    ap.add_argument("--bench-trace", default="/tmp/ridgeline_bench_trace_1000000.jsonl")
    ap.add_argument("--sim-requests", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    bench = Path(args.bench_trace)
    if not bench.exists():
        sys.path.insert(0, str(Path(__file__).parent))
        import bench_analyze

        bench_analyze.write_trace(bench, 1_000_000)
    results: dict = {}
    rounded = Path(f"/tmp/ridgeline_sim_{args.sim_requests}_1us.jsonl")
    full = Path(f"/tmp/ridgeline_sim_{args.sim_requests}_full.jsonl")
    if not rounded.exists() or not full.exists():
        t = time.perf_counter()
        write_sim_traces(args.sim_requests, rounded, full)
        print(f"wrote simulate traces in {time.perf_counter() - t:.0f} s")
    for name, path in (("bench-like 1M", bench), ("simulate 17 digits", full),
                       ("simulate 1 us", rounded)):
        for mode in ("msgspec", "no-msgspec"):
            r = measure(path, mode, args.repeat)
            r["file_mb"] = round(path.stat().st_size / 1e6)
            results[f"{name} / {mode}"] = r
            print(f"{name:20s} {mode:10s} {json.dumps(r)}", flush=True)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
