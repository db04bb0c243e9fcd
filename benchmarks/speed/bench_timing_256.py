"""Where the time goes at 256 streams: timestamp error, CPU per chunk of client and
server, core pinning and `--workers`.

Against the scripted test server (tests/bench/test_bench_server.py, its own process), as
bench_client_overhead.py: 256 streams, 40 chunks each, 50 ms apart; error = client event
time - server write stamp (same host monotonic clock). Per point it reports error P50/P99,
chunks/s, the client's CPU (this process + finished `--workers` children, getrusage) and the
server's (/proc/<pid>/stat utime+stime), each per chunk and as a share of the wall time.

`--stagger` spreads the stream starts over one ITL (constant arrivals, still 256 streams) so
their chunks are not written in lockstep bursts of 256.
Modes: `shared` (both unpinned on the 2 cores), `pinned` (server on core 0, client and its
workers on core 1, `sched_setaffinity`). `--profile FILE` cProfiles one single-process
client run instead (pstats dump).

Run: .venv/bin/python benchmarks/speed/bench_timing_256.py [--reps 2] [--profile out.prof]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from test_bench_server import fetch_log  # noqa: E402

from ridgeline.bench.client import EndpointConfig  # noqa: E402
from ridgeline.bench.load import LoadSpec  # noqa: E402
from ridgeline.bench.single_run import BenchConfig, run_bench  # noqa: E402
from ridgeline.workload.arrivals import parse_arrival  # noqa: E402
from ridgeline.workload.lengths import parse_lengths  # noqa: E402

STREAMS, TOKENS, ITL_S = 256, 40, 0.05
TICK_S = os.sysconf("SC_CLK_TCK")


def start_server(cpus: set[int] | None) -> tuple[subprocess.Popen[str], str]:
    """The scripted server in its own process, optionally pinned to `cpus`."""
    pre = ["taskset", "-c", ",".join(map(str, sorted(cpus)))] if cpus else []
    server = ROOT / "tests" / "bench" / "test_bench_server.py"
    proc = subprocess.Popen([*pre, sys.executable, str(server)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("listening on "), line
    return proc, line.split("listening on ", 1)[1].strip()


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK_S  # utime, stime


def client_cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def point(url: str, server_pid: int, trace: Path, workers: int,
          prof: cProfile.Profile | None = None, stagger: bool = False) -> dict:
    cfg = BenchConfig(
        endpoint=EndpointConfig(url, "steady", extra_body={"ttft_s": 0.01, "itl_s": ITL_S}),
        # stagger: the 256 starts spread evenly over one ITL (constant arrivals), so the
        # streams' chunks interleave instead of being written in lockstep bursts.
        load=LoadSpec(STREAMS, parse_arrival("constant", STREAMS / ITL_S) if stagger else None,
                      requests=STREAMS), trace_path=trace,
        prompt=parse_lengths("fixed:8"), output=parse_lengths(f"fixed:{TOKENS}"),
        workers=workers)
    c0, s0, w0 = client_cpu_s(), proc_cpu_s(server_pid), time.perf_counter()
    if prof:
        prof.enable()
    run_bench(cfg, warn=lambda m: None)
    if prof:
        prof.disable()
    wall_s = time.perf_counter() - w0
    client_s, server_s = client_cpu_s() - c0, proc_cpu_s(server_pid) - s0
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    header, recs = lines[0], [x for x in lines if x["type"] == "request"]
    log = fetch_log(url)["events"]
    errs, stamps = [], []
    for r in recs:
        errs.extend(header["t0_perf_counter_s"] + c - s
                    for c, s in zip(r["event_times_s"], log[r["id"]], strict=True))
        stamps.extend(log[r["id"]])
    e = np.asarray(errs) * 1e3
    # Is the tail a few stalls or spread out? Share of the > P99 chunks whose server stamp
    # falls in the 5 worst 10 ms windows (the run lasts ~2 s: 200 windows).
    st = np.asarray(stamps)
    tail = e > np.percentile(e, 99)
    win = ((st - st.min()) / 0.01).astype(int)
    per_win = np.bincount(win[tail], minlength=win.max() + 1)
    tail_in_5_windows_pct = 100 * np.sort(per_win)[-5:].sum() / max(tail.sum(), 1)
    first = min(r["sent_s"] for r in recs)
    last = max(r["end_s"] for r in recs)
    return {"workers": workers, "ok": sum(r["status"] == "ok" for r in recs),
            "chunks": int(e.size), "chunks_s": e.size / (last - first),
            "p50_ms": float(np.percentile(e, 50)), "p99_ms": float(np.percentile(e, 99)),
            "max_ms": float(e.max()), "wall_s": wall_s,
            "tail_in_5_worst_10ms_windows_pct": float(tail_in_5_windows_pct),
            "worst_windows_ms": sorted(int(10 * w) for w in np.argsort(per_win)[-5:]),
            # Steady state: without the first and last 100 ms (start-up and the 256 ends).
            "p99_middle_ms": float(np.percentile(
                e[(st - st.min() > 0.1) & (st.max() - st > 0.1)], 99)),
            "client_cpu_s": client_s, "server_cpu_s": server_s,
            "client_us_per_chunk": 1e6 * client_s / e.size,
            "server_us_per_chunk": 1e6 * server_s / e.size,
            "client_busy_pct": 100 * client_s / wall_s, "server_busy_pct": 100 * server_s / wall_s}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--modes", default="shared,pinned")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--stagger", action="store_true",
                    help="spread the stream starts over one ITL (no lockstep chunk bursts)")
    ap.add_argument("--profile", help="cProfile one single-process run into this file")
    args = ap.parse_args()
    tmp = Path("/tmp/ridgeline-timing-256")
    tmp.mkdir(exist_ok=True)
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()}", flush=True)
    all_cpus = os.sched_getaffinity(0)
    for mode in args.modes.split(","):
        pinned = mode == "pinned"
        proc, url = start_server({0} if pinned else None)
        os.sched_setaffinity(0, {1} if pinned else all_cpus)
        try:
            if args.profile:
                prof = cProfile.Profile()
                r = point(url, proc.pid, tmp / "prof.jsonl", 1, prof, args.stagger)
                prof.dump_stats(args.profile)
                print(json.dumps({"mode": mode, "profiled": True, **r}), flush=True)
                continue
            for rep in range(args.reps):
                for w in map(int, args.workers.split(",")):
                    r = point(url, proc.pid, tmp / f"{mode}-{w}.jsonl", w, stagger=args.stagger)
                    print(json.dumps({"mode": mode, "stagger": args.stagger, "rep": rep, **r}),
                          flush=True)
        finally:
            os.sched_setaffinity(0, all_cpus)
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
