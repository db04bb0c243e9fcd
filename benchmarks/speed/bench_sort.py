"""The sort `analyze` runs on a pooled ITL sample: numpy's ndarray.sort against
`ridgeline.metrics.distribution.sort_in_place` (partition at the parts' edges, parts sorted
in threads), on the same values, checked bit for bit.

    .venv/bin/python benchmarks/speed/bench_sort.py [--values 20000000] [--repeat 3]

The default size is what `ridgeline simulate -n 100000 --rate 20` pools (~20 M ITL gaps).
Prints the best of `--repeat` wall times of each and the CPUs sort_in_place used.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ridgeline.metrics import distribution


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", type=int, default=20_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    x = np.random.default_rng(0).lognormal(3.0, 0.5, args.values)
    x[::1000] = np.nan
    want = np.sort(x)
    best = {"ndarray.sort": np.inf, "sort_in_place": np.inf}
    for _ in range(args.repeat):
        for name, fn in (("ndarray.sort", np.ndarray.sort),
                         ("sort_in_place", distribution.sort_in_place)):
            y = x.copy()
            t0 = time.perf_counter()
            fn(y)
            best[name] = min(best[name], time.perf_counter() - t0)
            assert np.array_equal(y.view(np.int64), want.view(np.int64)), name
    print(f"{args.values:,} float64 values, best of {args.repeat}, usable CPUs "
          f"{distribution._usable_cpus()}: ndarray.sort {best['ndarray.sort']:.3f} s, "
          f"sort_in_place {best['sort_in_place']:.3f} s (bit for bit equal), "
          f"ratio {best['ndarray.sort'] / best['sort_in_place']:.2f}x")


if __name__ == "__main__":
    main()
