"""What server/GPU telemetry costs the bench client (the bar: < 2% of its CPU at 256
streams, and no worse timestamp error).

  1. CPU: 256 concurrent streams against the emulator (`ridgeline serve`, its own process),
     once with telemetry off and once on (default 500 ms, and 50 ms as a stress case). The
     client's CPU is this process's `time.process_time()` over the run; the sampler's is the
     `cpu_s` its process reports in the sidecar's last line.
  2. Timestamp error at 256 streams (as bench_client_overhead.py: client event time minus the
     scripted server's write stamp, same host clock), telemetry off vs on; the sampler scrapes
     the emulator's vLLM-named /metrics (`--server-metrics`) meanwhile, so it does real work.

Run: .venv/bin/python benchmarks/speed/bench_telemetry_overhead.py [--quick] [--timestamp-only]
[--on-first]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from test_bench_server import fetch_log, start_subprocess_server  # noqa: E402

from ridgeline.bench.client import EndpointConfig  # noqa: E402
from ridgeline.bench.load import LoadSpec  # noqa: E402
from ridgeline.bench.single_run import BenchConfig, run_bench  # noqa: E402
from ridgeline.bench.telemetry import TelemetryConfig, read_final_status, sidecar_path  # noqa: E402
from ridgeline.serve.launcher import EmulatorProcess  # noqa: E402
from ridgeline.workload.lengths import parse_lengths  # noqa: E402


def cpu_point(url: str, tmp: Path, streams: int, requests: int, interval_s: float | None
              ) -> dict:
    name = f"cpu-{interval_s or 'off'}.jsonl"
    cfg = BenchConfig(
        endpoint=EndpointConfig(url, "llama-3.1-8b", ignore_eos=True),
        load=LoadSpec(streams, None, requests=requests), trace_path=tmp / name,
        prompt=parse_lengths("fixed:128"), output=parse_lengths("fixed:128"),
        telemetry=TelemetryConfig(enabled=interval_s is not None,
                                  interval_s=interval_s or 0.5))
    c0, w0 = time.process_time(), time.perf_counter()
    out = run_bench(cfg, warn=lambda m: None)
    client_cpu_s = time.process_time() - c0
    wall_s = time.perf_counter() - w0
    final = read_final_status(sidecar_path(tmp / name)) if interval_s else {}
    sampler_cpu_s = float(final.get("cpu_s", 0.0))
    startup_cpu_s = float(final.get("startup_cpu_s", 0.0))
    steady_s = sampler_cpu_s - startup_cpu_s
    return {"interval_ms": interval_s * 1e3 if interval_s else None, "streams": streams,
            "requests": requests, "ok": out.ok, "wall_s": wall_s,
            "client_cpu_s": client_cpu_s, "sampler_cpu_s": sampler_cpu_s,
            "sampler_startup_cpu_s": startup_cpu_s, "samples": final.get("samples"),
            "cpu_per_sample_ms": 1e3 * steady_s / final["samples"] if final.get("samples")
            else None,
            # The sampler's CPU over the client's, in total and without its one-off start.
            "sampler_share_pct": 100 * sampler_cpu_s / client_cpu_s if client_cpu_s else None,
            "steady_share_pct": 100 * steady_s / client_cpu_s if client_cpu_s else None}


def error_point(url: str, metrics_url: str, tmp: Path, streams: int, tokens: int,
                interval_s: float | None) -> dict:
    name = f"err-{interval_s or 'off'}.jsonl"
    cfg = BenchConfig(
        endpoint=EndpointConfig(url, "steady", extra_body={"ttft_s": 0.01, "itl_s": 0.02}),
        load=LoadSpec(streams, None, requests=streams), trace_path=tmp / name,
        prompt=parse_lengths("fixed:8"), output=parse_lengths(f"fixed:{tokens}"),
        telemetry=TelemetryConfig(enabled=interval_s is not None, url=metrics_url,
                                  interval_s=interval_s or 0.5))
    run_bench(cfg, warn=lambda m: None)
    lines = [json.loads(x) for x in (tmp / name).read_text().splitlines()]
    header, recs = lines[0], [x for x in lines if x["type"] == "request"]
    log = fetch_log(url)["events"]
    errs = []
    for r in recs:
        errs.extend(header["t0_perf_counter_s"] + c - s
                    for c, s in zip(r["event_times_s"], log[r["id"]], strict=True))
    e = np.asarray(errs) * 1e3
    final = read_final_status(sidecar_path(tmp / name)) if interval_s else {}
    return {"interval_ms": interval_s * 1e3 if interval_s else None, "streams": streams,
            "chunks": int(e.size), "p50_ms": float(np.percentile(e, 50)),
            "p99_ms": float(np.percentile(e, 99)), "samples": final.get("samples")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--timestamp-only", action="store_true", help="skip the CPU part")
    ap.add_argument("--on-first", action="store_true",
                    help="timestamp runs in the order on, off, on, off (to check order effects)")
    args = ap.parse_args()
    streams = 256
    requests = 512 if args.quick else 1024
    tokens = 50 if args.quick else 100
    out: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "platform": platform.platform()}, "cpu": [], "timestamp": []}
    with tempfile.TemporaryDirectory() as d, EmulatorProcess(
            model="llama-3.1-8b", hardware="h100-sxm", speed=4.0,
            extra_args=["--max-num-seqs", "256"]) as emu:
        tmp = Path(d)
        for interval in (() if args.timestamp_only else (None, 0.5, 0.05)):
            out["cpu"].append(cpu_point(emu.base_url, tmp, streams, requests, interval))
            print(json.dumps(out["cpu"][-1]), flush=True)
        proc, url = start_subprocess_server()
        try:
            for interval in ((0.5, None, 0.5, None) if args.on_first else (None, 0.5, None, 0.5)):
                out["timestamp"].append(error_point(url, emu.base_url + "/metrics", tmp,
                                                    streams, tokens, interval))
                print(json.dumps(out["timestamp"][-1]), flush=True)
        finally:
            proc.terminate()
            proc.wait(10)
    out_path = ROOT / "benchmarks" / "results" / "bench_telemetry_overhead.json"
    out_path.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
