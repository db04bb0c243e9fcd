"""Aggregated against disaggregated serving of Llama-3.1-70B on 16 H100s, near the knee.

A model study (predictions, not measurements): the aggregated layout (2 replicas of TP 8)
is swept to find its knee (the highest rate with P99 TTFT <= 3x its low-load value); then
the same 16 GPUs run, at that rate and at the rate 20% below:

- aggregated: 2 x tp=8;
- P/D 1:1: one tp=8 prefill worker, one tp=8 decode worker (network link, 8 x 50 GB/s);
- P/D 2x tp4 + 1x tp8: two tp=4 prefill workers, one tp=8 decode worker (4 x 50 GB/s).

For each: TTFT and TPOT (mean, P99), E2E mean, each pool's utilisation and the KV transfer
statistics; and the transfer of a 2,000-token prompt checked by hand (80 layers x 8 KV
heads x 128 x 2 (K, V) x 2 bytes = 327,680 B a token).

    .venv/bin/python benchmarks/accuracy/disagg_vs_aggregated.py \
        --out benchmarks/results/disagg_vs_aggregated.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

from ridgeline.sim.scenario import Scenario
from ridgeline.sim.scenario_run import rate_sweep, run_scenario

MODEL = "llama-3.1-70b"
PROMPT = "lognormal:mean=2000,sigma=0.5,max=8192"
OUTPUT = "lognormal:mean=250,sigma=0.6,max=2048"
LAYOUTS: dict[str, dict[str, Any]] = {
    "aggregated 2 x tp8": {"replicas": 2},
    "P/D 1:1, tp8 + tp8": {"pd": (1, 1)},
    "P/D 2 x tp4 + 1 x tp8": {"pd": (2, 1), "prefill_pool": "tp=4"},
}
KV_BYTES_PER_TOKEN = 80 * 8 * 128 * 2 * 2


def _metric(run: Any, key: str, stat: str) -> float:
    d = run.analysis.latency.get(key)
    if d is None or d.unavailable:
        return math.nan
    return float(d.mean if stat == "mean" else d.percentiles[stat].value)


def _row(run: Any) -> dict[str, Any]:
    out = {f"{k}_{s}": _metric(run, f"{k}_ms", s) for k in ("ttft", "tpot", "e2e")
           for s in ("mean", "p99")}
    out["throughput_req_s"] = float(run.analysis.throughput.requests_s)
    out["engine_core"] = run.result.core
    out["wall_s"] = run.wall_s
    pools = run.pools_summary()
    if pools is not None:
        out["pools"] = pools
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    base = Scenario(model=MODEL, hardware="h100-sxm", tp=8, prompt=PROMPT, output=OUTPUT,
                    requests=args.requests, seed=1)
    t0 = time.perf_counter()
    sweep = rate_sweep(base.replace(replicas=2).validate(), keep_runs=False)
    knee = sweep.knee_rate_req_s
    assert knee is not None
    rates = {"knee": knee, "knee x 0.8": 0.8 * knee}
    results: dict[str, Any] = {}
    for label, rate in rates.items():
        for name, changes in LAYOUTS.items():
            sc = base.replace(**changes).validate()
            results[f"{name} @ {label}"] = {"rate_req_s": rate, **_row(run_scenario(sc, rate))}
            print(name, label, json.dumps({k: v for k, v in results[f"{name} @ {label}"].items()
                                           if k != "pools"}))
    hand_ms = (5e-6 + 2000 * KV_BYTES_PER_TOKEN / (4 * 50e9)) * 1e3
    check = run_scenario(base.replace(pd=(2, 1), prefill_pool="tp=4", prompt="fixed:2000",
                                      output="fixed:50", requests=20).validate(), 0.5)
    pools = check.pools_summary()
    assert pools is not None
    got_ms = pools["kv_transfer"]["transfer_ms"]["mean"]
    doc = {"date": "2026-12-07", "machine": "2-core box, loaded", "model": MODEL,
           "hardware": "h100-sxm", "gpus": 16, "prompt": PROMPT, "output": OUTPUT,
           "requests_per_run": args.requests,
           "aggregated_knee_req_s": knee, "aggregated_capacity_req_s": sweep.capacity_req_s,
           "sweep": [p.to_dict() for p in sweep.points], "runs": results,
           "hand_check": {"prompt_tokens": 2000, "kv_bytes_per_token": KV_BYTES_PER_TOKEN,
                          "link": "network, 4 GPUs x 50 GB/s, 5 us",
                          "hand_ms": hand_ms, "simulated_ms": got_ms},
           "wall_s": time.perf_counter() - t0}
    print(f"knee {knee:.3g} req/s; transfer of 2,000 tokens: hand {hand_ms:.4f} ms, "
          f"simulated {got_ms:.4f} ms")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1, default=float)


if __name__ == "__main__":
    main()
