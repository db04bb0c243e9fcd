"""How much one arrival draw moves the replay's scores (why the replay averages draws).

Replays the 16 shared vLLM runs (`bench_vllm_replay.py`'s data and setup) with the shipped
engine costs, one arrival draw at a time for each seed given, and prints the mean APE per
metric over the runs for each seed; writes every run's predictions and APEs as JSON.

    .venv/bin/python benchmarks/accuracy/replay_seed_spread.py 0 1 2 3 [--out /tmp/seeds.json]

About 40 s per seed on the C core.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vllm_replay import DATA, HARDWARE, model_config
from ridgeline.calibrate.engine_fit import make_build
from ridgeline.calibrate.inference_perf import load_run
from ridgeline.calibrate.inference_perf_replay import METRICS, actual_values, ape, replay, score_raw
from ridgeline.sim.engine_costs import load_engine_costs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("seeds", nargs="*", type=int, default=[0, 1, 2, 3])
    ap.add_argument("--out", default="/tmp/replay_seed_spread.json")
    args = ap.parse_args(argv)
    costs = load_engine_costs("vllm")
    runs = [load_run(p) for p in sorted((DATA / "experiments").iterdir()) if p.is_dir()]
    build = make_build(lambda r: str(model_config(DATA, r)), HARDWARE)
    res: dict[int, dict[str, dict[str, float]]] = {}
    for seed in args.seeds:
        per = {}
        for r in runs:
            p = replay(r, build(r, costs.step_overhead_s), seed=seed, replications=1)
            v = score_raw(r, p.raw, costs.request_overhead_s,
                          costs.request_overhead_steps).values
            per[r.name] = {**ape(v, actual_values(r)), **{"pred_" + m: v[m] for m in METRICS}}
        res[seed] = per
        print(f"seed {seed} " + " ".join(
            f"{m}={np.mean([per[n][m] for n in per]):.3f}" for m in METRICS), flush=True)
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
