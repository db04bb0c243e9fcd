"""How much this host's single-thread memory streaming moves from one moment to the next.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/accuracy/host_memory_spread.py [--samples 30]

Sums a 160 MB float32 array (more than any L3 here) once per `--interval` seconds and prints
the fastest, median and slowest pass and the GB/s they mean. A llama.cpp decode step of a
model that streams its weights (308 MB F32 per step) moves with this figure; run it
on an idle box to see the drift calibration cannot remove (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between passes")
    a = ap.parse_args()
    x = np.random.default_rng(0).random(40_000_000, dtype=np.float32)
    x.sum()  # touch every page first
    ms = []
    for _ in range(a.samples):
        t = time.perf_counter()
        x.sum()
        ms.append((time.perf_counter() - t) * 1e3)
        time.sleep(a.interval)
    gbs = [x.nbytes / (m * 1e6) for m in (min(ms), statistics.median(ms), max(ms))]
    print(f"{a.samples} passes over {x.nbytes / 1e6:.0f} MB: fastest {min(ms):.2f} ms, median "
          f"{statistics.median(ms):.2f} ms, slowest {max(ms):.2f} ms "
          f"({gbs[0]:.1f} / {gbs[1]:.1f} / {gbs[2]:.1f} GB/s); slowest/fastest "
          f"{max(ms) / min(ms):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
