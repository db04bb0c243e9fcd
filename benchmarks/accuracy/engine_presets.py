"""The three engine presets side by side (deterministic; no measurement behind the engines'
CPU costs): the KV pool each sizes on start for a few (model, GPU) pairs, and Llama-3.1-8B on
one H100 under the same workload near each engine's knee.

Run: `.venv/bin/python benchmarks/accuracy/engine_presets.py` (about a minute on 2 cores);
writes `benchmarks/results/engine_presets.json`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from ridgeline.metrics.knee import ttft_knee_index
from ridgeline.sim.scenario import Scenario
from ridgeline.sim.scenario_run import run_scenario

ENGINES = ("vllm", "sglang", "trtllm")
PAIRS = (("llama-3.1-8b", "h100-sxm", 1), ("qwen2.5-7b", "h200", 1),
         ("llama-3.1-70b", "h100-sxm", 4), ("qwen3-30b-a3b", "h100-sxm", 1),
         ("llama-3.1-8b", "l4", 1), ("deepseek-v3", "h200", 8))


def kv_pools() -> list[dict[str, Any]]:
    rows = []
    for model, hw, tp in PAIRS:
        row: dict[str, Any] = {"model": model, "hardware": hw, "tp": tp}
        for engine in ENGINES:
            sc = Scenario(model=model, hardware=hw, tp=tp, engine=engine)
            sm = sc.step_model()
            mem = sc.kv_memory(sm)
            cfg = sc.engine_config(sm)
            row[engine] = {"fraction": mem.fraction, "kv_tokens": mem.kv_capacity_tokens,
                           "max_num_seqs": cfg.max_num_seqs,
                           "max_num_batched_tokens": cfg.max_num_batched_tokens}
        rows.append(row)
    return rows


# (prompt, output) length specs: the simulator's default mix, and a long-output mix whose KV
# outgrows the pool (preemptions, retractions) before the batch limits bind.
WORKLOADS = {
    "default": ("lognormal:mean=250,sigma=1.0,max=4096", "lognormal:mean=200,sigma=0.8,max=2048"),
    "long": ("lognormal:mean=2000,sigma=0.5,max=8192", "lognormal:mean=1500,sigma=0.5,max=4096"),
}


def knee_runs(rates: list[float], requests: int, workload: str) -> dict[str, Any]:
    prompt, output = WORKLOADS[workload]
    out: dict[str, Any] = {"rates_req_s": rates, "requests": requests, "prompt": prompt,
                           "output": output, "engines": {}}
    for engine in ENGINES:
        sc = Scenario(engine=engine, requests=requests, seed=1, prompt=prompt, output=output)
        points = []
        for r in rates:
            run = run_scenario(sc, r, keep_samples=False, bootstrap=False)
            p = run.sweep_point()
            a = run.analysis.latency
            points.append({"rate_req_s": r, "throughput_req_s": p.throughput_req_s,
                           "output_tok_s": p.output_tok_s,
                           "ttft_mean_ms": float(a["ttft_ms"].mean),
                           "ttft_p99_ms": p.ttft_p99_ms,
                           "tpot_mean_ms": float(a["tpot_ms"].mean),
                           "tpot_p99_ms": p.tpot_p99_ms, "preemptions": p.preemptions})
        knee = ttft_knee_index([q["rate_req_s"] for q in points],
                               [q["ttft_p99_ms"] for q in points])
        out["engines"][engine] = {"points": points, "knee_index": knee}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rates", type=float, nargs="+",
                    default=[10, 20, 30, 40, 45, 50, 55, 60, 70])
    ap.add_argument("--long-requests", type=int, default=1000)
    ap.add_argument("--long-rates", type=float, nargs="+", default=[1, 2, 3, 4, 5, 6, 8])
    ap.add_argument("--out", default="benchmarks/results/engine_presets.json")
    a = ap.parse_args()
    t0 = time.perf_counter()
    doc = {"date": time.strftime("%Y-%m-%d"), "kv_pools": kv_pools(),
           "knee": knee_runs(a.rates, a.requests, "default"),
           "knee_long": knee_runs(a.long_rates, a.long_requests, "long")}
    doc["wall_s"] = time.perf_counter() - t0
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    for row in doc["kv_pools"]:
        print(row["model"], row["hardware"], row["tp"],
              {e: (row[e]["fraction"], row[e]["kv_tokens"], row[e]["max_num_seqs"])
               for e in ENGINES})
    for key in ("knee", "knee_long"):
        for e, d in doc[key]["engines"].items():
            print(key, e, "knee index", d["knee_index"])
            for q in d["points"]:
                print("  ", {k: round(v, 2) if isinstance(v, float) else v
                             for k, v in q.items()})


if __name__ == "__main__":
    main()
