"""Price the real engine steps of a llama-server load point with a calibration profile.

    .venv/bin/python benchmarks/real_engine/llamacpp_step_pricing.py TRACE.jsonl SERVER.log \
        profile.json \
        [--skip N]

The steps are rebuilt from the client's chunk times and the server log's slot ids
(`llamacpp_steps.steps`). Each pure-decode step (no prompt joined it) is priced as the slot
model prices it: one graph per run of consecutive slot ids, T(run size) each from the
profile's table, plus the decode attention term (decode_per_pair_s x the streams' summed
context). Prints measured vs priced by (B, runs): where a prediction's step cost is off,
and whether the error depends on the batch or on the layout.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np

from llamacpp_steps import steps  # type: ignore[import-not-found]
from ridgeline.sim.calibrated_profile import CalibrationProfile
from ridgeline.sim.slots import split_equal_sequential


def price_point(trace: Path, log: Path, prof: CalibrationProfile, skip: int | None = None
                ) -> dict[tuple[int, int], list[tuple[float, float]]]:
    """(measured, priced) seconds of every pure-decode step of a point, by (B, graphs)."""
    n_ubatch = prof.scheduling.ubatch_tokens or 512
    groups: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for s in steps(trace, log, skip=skip):
        if s["new"]:
            continue
        # llama-server adds decode tokens in slot order; the slot model's own split and price
        graphs = split_equal_sequential([(slot, 1) for slot in sorted(s["decode_slots"])],
                                        n_ubatch)
        priced = prof.graphs_time_s(graphs, 0.0, float(sum(s["decode_contexts"])))
        groups[(s["B"], len(graphs))].append((s["dt_s"], priced))
    return groups


def priced_error(groups: dict[tuple[int, int], list[tuple[float, float]]]) -> float:
    """Summed priced over summed measured, minus 1, over every step of `groups`."""
    measured = sum(m for g in groups.values() for m, _ in g)
    priced = sum(p for g in groups.values() for _, p in g)
    return priced / measured - 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("log")
    ap.add_argument("profile")
    ap.add_argument("--skip", type=int, default=None)
    a = ap.parse_args()
    groups = price_point(Path(a.trace), Path(a.log), CalibrationProfile.load(a.profile), a.skip)
    tot_m = tot_p = 0.0
    print("B runs   n  measured ms (median)  priced ms (median)  sum error")
    for key in sorted(groups):
        m = np.array([x for x, _ in groups[key]])
        p = np.array([y for _, y in groups[key]])
        tot_m += m.sum()
        tot_p += p.sum()
        print(f"{key[0]} {key[1]:4d} {len(m):4d} {1e3 * statistics.median(m):10.1f} "
              f"{1e3 * statistics.median(p):19.1f} {p.sum() / m.sum() - 1:+10.1%}")
    print(f"all pure-decode steps: priced {tot_p:.2f} s vs measured {tot_m:.2f} s "
          f"({tot_p / tot_m - 1:+.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
