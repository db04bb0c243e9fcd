"""Calibration accuracy against a real llama.cpp llama-server, against its bars.

    .venv/bin/python benchmarks/real_engine/bench_calibration.py [--shape membound] [--starts 2]
        [--out benchmarks/results/bench_calibration.json]

Each of `--starts` fresh server starts (memory-bound random Llama, ~400 MB F32, `-np 8`,
`-t 1` by default): calibrate (decode lockstep at B = 1, 2, 4, 8; B = 1 at a long context;
single-stream prefills of 16..512 tokens; decode probes pinned to slots 0..B-1, the profile
a slot model: LRU slots, a step = the sum of T over its consecutive-slot graphs),
then bench three load points NOT used for
fitting (closed loop at C = 3; open-loop Poisson at 35% and 80% of the capacity the profile
predicts, `--fractions`; prompt 128, output 128 tokens, unlike the probes) and predict them
with `verify` (each point from the server's LRU slot order at its start, read from its log).
Reported per point:
predicted, measured, error for TTFT/TPOT/E2E P50 (and, as "calibrated_tails", TTFT and E2E
P90/P99 and mean TPOT and ITL); the median absolute error per metric; the
same prediction from the profile of the *other* start (cross-start); the measured run-to-run
noise between starts; and the uncalibrated roofline's error on the same points, using the
model's config.json and a hardware file of this host's numpy figures (sgemm, copy bandwidth,
efficiency 1.0), as the issue's table did. Also: the probed decode step times (is the step at
8 faster than at 4?).

Needs RIDGELINE_LLAMA_SERVER (tools/llama_server/build.sh) and the `gguf` package.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

# Stored per point beside the medians, predicted and measured from the same traces: the
# tails a calibrated prediction's intervals need (the medians alone leave them uncovered).
TAIL_METRICS = ("ttft_p90", "ttft_p99", "e2e_p90", "e2e_p99", "tpot_mean", "itl_mean")


def host_hardware(path: Path) -> dict:
    """This host's numpy figures as a ridgeline hardware file (efficiency 1.0)."""
    n = 1024
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = a.T.copy()
    a @ b
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t0)
    sgemm = 2 * n**3 / min(ts)
    src = np.ones(64 * 1024 * 1024 // 8)   # 64 MiB, beyond the last-level cache
    dst = np.empty_like(src)
    np.copyto(dst, src)
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        ts.append(time.perf_counter() - t0)
    copy_bytes_s = 2 * src.nbytes / min(ts)
    hw = {"name": "this-host", "display_name": f"{platform.processor() or 'CPU'} (numpy)",
          "peak_flops": {k: sgemm for k in ("fp32", "tf32", "bf16", "fp16")},
          "memory_bandwidth_bytes_s": copy_bytes_s, "memory_bytes": 64 * 1024**3,
          "interconnect_bandwidth_bytes_s": 1e10, "compute_efficiency": 1.0,
          "bandwidth_efficiency": 1.0, "kernel_overhead_us": 0.0,
          "_source": "benchmarks/real_engine/bench_calibration.py: "
                     "numpy 1024^2 sgemm, 64 MiB copyto"}
    path.write_text(json.dumps(hw, indent=2))
    return hw


def roofline_rows(traces: list[str], config_path: str, hw_path: Path, slots: int) -> list:
    from ridgeline.calibrate.presets import preset_scheduling
    from ridgeline.calibrate.verify import verify
    from ridgeline.perf.roofline_step import RooflineStepTime
    from ridgeline.sim.engine import EngineConfig

    m = RooflineStepTime.from_names(model=config_path, hardware=str(hw_path), weights="fp32",
                                    kv="fp16", activations="fp32", max_num_seqs=slots,
                                    check_fit=False)
    s = preset_scheduling("llama.cpp", slots)
    cfg = EngineConfig(max_num_seqs=s.max_num_seqs,
                       max_num_batched_tokens=s.max_num_batched_tokens, chunked_prefill=True,
                       num_kv_blocks=65536)
    return verify(traces, m, {}, config=cfg).rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="membound")
    ap.add_argument("--starts", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/bench_calibration.json")
    ap.add_argument("--work", default="/tmp/ridgeline-bench-calibration")
    ap.add_argument("--threads", type=int, default=1, help="llama-server -t (1 on a shared "
                    "box: with 2 threads on 2 busy cores ggml's spinning barriers stall)")
    ap.add_argument("--fractions", type=lambda t: [float(x) for x in t.split(",")],
                    default=[0.35, 0.8], help="the open-loop points' rates as fractions of "
                    "the profile's capacity")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--output", type=int, default=128)
    ap.add_argument("--machine-note", default="", help="what else ran on the box (recorded "
                    "with the results beside the load averages)")
    args = ap.parse_args()

    from ridgeline.calibrate.gguf_model import ensure_model
    from ridgeline.calibrate.real_loop import LoadPoint, RealLoopConfig, run_real_loop
    from ridgeline.calibrate.verify import verify
    from ridgeline.errors import RidgelineError

    points = (LoadPoint("closed c=3", concurrency=3, requests=24),
              LoadPoint("open low", capacity_fraction=args.fractions[0], requests=24),
              LoadPoint("open high", capacity_fraction=args.fractions[1], requests=32))
    work = Path(args.work)
    runs = []
    for k in range(args.starts):
        cfg = RealLoopConfig(out_dir=str(work / f"start{k}"), shape=args.shape, slots=8,
                             threads=args.threads, ctx_per_slot=1024, batches=(1, 2, 4, 8),
                             decode_prompt_tokens=32, decode_output_tokens=32, rounds=2,
                             context_prompt_tokens=384,
                             prefill_tokens=(16, 64, 128, 256, 512), prefill_repeats=3,
                             prompt=f"fixed:{args.prompt}", output=f"fixed:{args.output}",
                             points=points, seed=k)
        t0 = time.time()
        try:
            res = run_real_loop(cfg, log=lambda m: print(m, file=sys.stderr, flush=True))
        except RidgelineError as exc:   # a failed start is reported, the others kept
            print(f"start {k} failed: {exc}", file=sys.stderr)
            continue
        runs.append({"res": res, "wall_s": time.time() - t0, "load1": os.getloadavg()[0]})
    model = ensure_model(args.shape)
    hw_path = work / "host-hardware.json"
    hw = host_hardware(hw_path)
    out: dict = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                             "note": args.machine_note},
                 "host_numpy": {"sgemm_flop_s": hw["peak_flops"]["fp32"],
                                "copy_bytes_s": hw["memory_bandwidth_bytes_s"]},
                 "starts": []}
    for k, run in enumerate(runs):
        res = run["res"]
        prof = res.profile
        traces = [str(t) for t in res.traces]
        other = runs[(k + 1) % len(runs)]["res"].profile if len(runs) > 1 else None
        entry = {
            "wall_s": run["wall_s"], "load_average_1m": run["load1"],
            "probe_decode_step_ms": {r.point: r.measured_s * 1e3 for r in prof.residuals
                                     if r.point.startswith("decode")},
            "table_tokens": prof.tokens, "table_step_ms": [t * 1e3 for t in prof.step_s],
            "per_pair_s": prof.per_pair_s, "fit_notes": prof.fit_notes,
            "calibrated": res.report.to_dict(),
            "calibrated_tails": verify(traces, prof, slot_orders=res.slot_orders,
                                       metrics=list(TAIL_METRICS)).to_dict(),
            "cross_start": verify(traces, other, slot_orders=res.slot_orders).to_dict()
            if other is not None else None,
            "slot_orders": res.slot_orders,
            "decode_per_pair_s": prof.decode_per_pair_s,
            "roofline": [r.__dict__ for r in roofline_rows(traces, str(model.config_path),
                                                           hw_path, 8)],
        }
        out["starts"].append(entry)
    if len(runs) > 1:
        noise = []
        r0, r1 = (run["res"].report.rows for run in runs[:2])
        for a, b in zip(r0, r1, strict=True):
            noise.append({"point": a.point, "metric": a.metric, "start0": a.measured,
                          "start1": b.measured, "diff": (b.measured - a.measured) / a.measured})
        out["noise"] = noise
    Path(args.out).write_text(json.dumps(out, indent=2, default=str))
    print_tables(out)
    return 0


def print_tables(out: dict) -> None:
    for k, st in enumerate(out["starts"]):
        print(f"\n### start {k} (wall {st['wall_s']:.0f} s, load {st['load_average_1m']:.1f})")
        print("probe decode step (ms): " + ", ".join(
            f"{p}: {v:.1f}" for p, v in st["probe_decode_step_ms"].items()))
        print("| point | metric | predicted | measured | error | in CI | cross-start error |"
              " roofline error |")
        print("|---|---|---|---|---|---|---|---|")
        cross = st["cross_start"]["rows"] if st["cross_start"] else [None] * 99
        for r, c, rf in zip(st["calibrated"]["rows"], cross, st["roofline"], strict=False):
            ce = f"{c['error']:+.1%}" if c else "—"
            print(f"| {r['point']} | {r['metric']} | {r['predicted']:.1f} | "
                  f"{r['measured']:.1f} | {r['error']:+.1%} | {'yes' if r['in_ci'] else 'no'}"
                  f" | {ce} | {rf['error']:+.1%} |")
        for ld in st["calibrated"].get("loads", []):
            print(f"load {ld['point']}: in flight {ld['in_flight_predicted']:.2f} predicted vs "
                  f"{ld['in_flight_measured']:.2f} measured; decoding "
                  f"{ld['decoding_predicted']:.2f} vs {ld['decoding_measured']:.2f}")
        med = st["calibrated"]["median_abs_error"]
        rmed = {m: statistics.median(abs(r["error"]) for r in st["roofline"]
                                     if r["metric"] == m) for m in med}
        print("median |error|: " + ", ".join(f"{m} {v:.1%} (roofline {rmed[m]:.1%})"
                                             for m, v in med.items()))
    if "noise" in out:
        print("\nrun-to-run noise (start1 vs start0 measured): " + ", ".join(
            f"{n['point']} {n['metric']} {n['diff']:+.1%}" for n in out["noise"]))


if __name__ == "__main__":
    raise SystemExit(main())
