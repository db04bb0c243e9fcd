"""Host microbenchmark repeatability: measure the host twice, compare the medians.

    .venv/bin/python benchmarks/accuracy/bench_host_calibration.py --quick --out /tmp/host
    .venv/bin/python benchmarks/accuracy/bench_host_calibration.py --model <dir>/config.json

Prints, for each figure (read/write/copy bandwidth, best GEMM FLOP/s per dtype, every GEMM
point), run 1, run 2 and the relative difference, then the 4096^2 fp32 m-sweep of run 1
(the 4096 x 4096 roofline table, on this CPU). Bar: repeatable within 5% run to run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ridgeline.calibrate.host import HostProfile, measure_host
from ridgeline.specs.model import load_model


def rel(a: float, b: float) -> float:
    return abs(a - b) / ((a + b) / 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--model", default=None, help="config.json (adds the model's projections)")
    ap.add_argument("--dtypes", default="fp32,fp64")
    ap.add_argument("--out", default=None, help="folder for host1.json and host2.json")
    args = ap.parse_args()
    spec = load_model(args.model) if args.model else None
    dtypes = args.dtypes.split(",")
    profiles: list[HostProfile] = []
    for run in (1, 2):
        t0 = time.perf_counter()
        prof = measure_host(spec, dtypes=dtypes, quick=args.quick,
                            progress=lambda msg: print("  ", msg, file=sys.stderr))
        print(f"run {run}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        profiles.append(prof)
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            prof.write(Path(args.out) / f"host{run}.json")
    a, b = profiles
    m = a.machine
    print(f"machine: {m.cpu_model}, {m.logical_cpus} CPUs, {m.threads} threads, LLC "
          f"{m.llc_bytes / 2**20:.0f} MiB, numpy {m.numpy}, BLAS "
          f"{[(x.get('internal_api'), x.get('version')) for x in m.blas]}")
    rows: list[tuple[str, float, float]] = []
    for kind in ("read", "write", "copy"):
        rows.append((f"{kind} GB/s", a.bandwidth_bytes_s(kind) / 1e9,
                     b.bandwidth_bytes_s(kind) / 1e9))
        rows.append((f"{kind} GB/s, best repeat", a.bandwidth_bytes_s(kind, best=True) / 1e9,
                     b.bandwidth_bytes_s(kind, best=True) / 1e9))
    for dt in dtypes:
        rows.append((f"peak {dt} GFLOP/s", a.peak_flops_s(dt) / 1e9, b.peak_flops_s(dt) / 1e9))
        rows.append((f"peak {dt} GFLOP/s, best repeat", a.peak_flops_s(dt, best=True) / 1e9,
                     b.peak_flops_s(dt, best=True) / 1e9))
    print("\n| figure | run 1 | run 2 | difference |\n|---|---|---|---|")
    for name, x, y in rows:
        print(f"| {name} | {x:.2f} | {y:.2f} | {100 * rel(x, y):.1f}% |")
    diffs = sorted(rel(p.flops_per_s, q.flops_per_s) for p, q in zip(a.gemm, b.gemm,
                                                                      strict=True))
    best = sorted(rel(p.best_flops_per_s, q.best_flops_per_s)
                  for p, q in zip(a.gemm, b.gemm, strict=True))
    n = len(diffs)
    for name, d in (("medians", diffs), ("best repeats", best)):
        print(f"\nGEMM points ({name}): {n}; run-to-run difference median "
              f"{100 * d[n // 2]:.1f}%, P90 {100 * d[int(0.9 * (n - 1))]:.1f}%, max "
              f"{100 * d[-1]:.1f}%; within 5%: {sum(x <= 0.05 for x in d)}/{n}")
    print("\nthe roofline table's shape on this CPU (4096x4096, run 1):\n"
          "| dtype | m | GFLOP/s (median) | GFLOP/s (best) | spread | intensity FLOP/B |\n"
          "|---|---|---|---|---|---|")
    for p in a.gemm:
        if p.label == "4096x4096":
            print(f"| {p.dtype} | {p.m} | {p.flops_per_s / 1e9:.1f} | "
                  f"{p.best_flops_per_s / 1e9:.1f} | "
                  f"{100 * p.spread_rel:.0f}% | {p.flops / p.bytes:.1f} |")
    for f in a.fits:
        print(f"fit {f.label} {f.dtype}: C {f.compute_flops_s / 1e9:.1f} GFLOP/s, B "
              f"{f.bandwidth_bytes_s / 1e9:.1f} GB/s, ridge m {f.ridge_m:.1f}, max |resid| "
              f"{100 * f.max_abs_residual_rel:.0f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
