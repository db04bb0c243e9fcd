"""How much a ragged decode batch costs FlashAttention-3 over the uniform batch the kernel
tables time, on the steps of the 16 replayed vLLM runs.

The measured decode-attention rows time uniform batches (every sequence the same context). A
serving step holds sequences of different contexts. FA3's decode (vLLM's backend on H100)
runs one tile per (sequence, KV head, KV split); the split count is one number for the batch,
chosen from the batch's tile count and its longest sequence (FA3's `num_splits_heuristic`,
capped at 16 under vLLM's CUDA graphs); tiles go to the SMs in order as SMs free up. A step's
kernel time then follows the longest tiles and the wave quantisation, not the mean context.

This replays each run once (the Python engine, instrumented to record every step's decode
contexts), and for each step prices both batches with that schedule: the step's own contexts,
and the same count at their mean context (what the uniform-batch fit sees). Per run it prints
the ratio of the summed kernel times (ragged / uniform), under two bounds on a lone SM's
bandwidth once the others have finished: the fair share (1x: the makespan ratio, the largest
the effect can be) and 2x the fair share. Compare with what the runs need: the grouped-query
scale 0.75 makes decode attention 1.33x slower on every grouped-query run.

    nice .venv/bin/python benchmarks/accuracy/vllm_ragged_decode.py

Writes benchmarks/results/vllm_ragged_decode.json.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from _paths import shared_data_dir
from bench_vllm_replay import HARDWARE, model_config  # type: ignore[import-not-found]
from ridgeline.calibrate.engine_fit import make_build
from ridgeline.calibrate.inference_perf import load_run
from ridgeline.calibrate.inference_perf_replay import replay
from ridgeline.sim import core
from ridgeline.sim.scheduler import Scheduler
from ridgeline.sim.sequence import DECODE

ROOT = Path(__file__).resolve().parents[2]
DATA = shared_data_dir() / "vllm-inference-perf"
OUT = ROOT / "benchmarks" / "results" / "vllm_ragged_decode.json"
NUM_SMS = 132           # H100 SXM
BLOCK_N = 128           # FA3's KV tile for head dim 128
MAX_SPLITS = 16         # vLLM's cap on FA3 splits under full CUDA graphs
TILE_OVERHEAD_BLOCKS = 1.0  # a tile's prologue/epilogue, in KV tiles' time
# KV heads per GPU of each run's model and TP (config.json / tp)
KV_HEADS = {"llama-2-7b": 32, "llama-2-70b": 2, "mixtral": 4, "codellama": 4}


def num_splits(tiles: int, n_blocks: int) -> int:
    """FA3's num_splits_heuristic: no split once the tiles fill 80% of the SMs; else the
    fewest splits within 85% of the best wave efficiency."""
    if tiles >= 0.8 * NUM_SMS:
        return 1
    top = min(MAX_SPLITS, NUM_SMS, n_blocks)
    eff = []
    for s in range(1, top + 1):
        waves = tiles * s / NUM_SMS
        eff.append(waves / math.ceil(waves))
    best = max(eff)
    return next(s for s, e in enumerate(eff, 1) if e >= 0.85 * best)


def kernel_time(ctx: list[int], kv_heads: int, lone_speedup: float) -> float:
    """Kernel time (in one SM's time per KV tile at the fair bandwidth share) of a decode
    batch with contexts `ctx`: tiles in order onto the first free SM; while fewer SMs than
    all are busy, each runs up to `lone_speedup` x faster (bandwidth no longer shared)."""
    blocks = [math.ceil(c / BLOCK_N) for c in ctx]
    s = num_splits(len(ctx) * kv_heads, max(blocks))
    work = []
    for b in blocks:
        per = math.ceil(b / s)
        for k in range(s):
            nb = min(per, b - k * per)
            if nb > 0:
                work += [nb + TILE_OVERHEAD_BLOCKS] * kv_heads
    free = [0.0] * min(NUM_SMS, len(work))
    ends = []
    for w in work:
        t = heapq.heappop(free)
        heapq.heappush(free, t + w)
        ends.append(t + w)
    ends.sort()
    # Fluid correction for the tail: once SMs sit idle, the busy ones share the bandwidth.
    total = float(sum(work))
    fair = total / NUM_SMS
    makespan = ends[-1]
    if lone_speedup <= 1.0:
        return max(makespan, fair)
    return max(fair, fair + (makespan - fair) / lone_speedup)


def _model_key(name: str) -> str:
    return next(k for k in KV_HEADS if k in name)


def diagnose(exp: Path, build: Any, every: int) -> dict[str, Any]:
    run = load_run(exp)
    steps: list[list[int]] = []
    orig = Scheduler._schedule_decodes

    def recording(self: Scheduler, n: int, out: Any) -> None:
        orig(self, n, out)
        if self.dec_count and n % every == 0:
            steps.append([s.a + n for s in self.running if s.state == DECODE])

    Scheduler._schedule_decodes = recording  # type: ignore[method-assign]
    try:
        replay(run, build(run, 0.0), seed=0, replications=1)
    finally:
        Scheduler._schedule_decodes = orig  # type: ignore[method-assign]
    h = KV_HEADS[_model_key(exp.name)]
    out: dict[str, Any] = {"steps": len(steps), "kv_heads_per_gpu": h,
                           "mean_batch": float(np.mean([len(c) for c in steps])),
                           "mean_context": float(np.mean([np.mean(c) for c in steps])),
                           "mean_max_over_mean": float(np.mean(
                               [max(c) / np.mean(c) for c in steps]))}
    for speed in (1.0, 2.0):
        rag = sum(kernel_time(c, h, speed) for c in steps)
        uni = sum(kernel_time([round(float(np.mean(c)))] * len(c), h, speed) for c in steps)
        out[f"ragged_over_uniform_lone_{speed:g}x"] = rag / uni
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=7,
                    help="price every k-th decode step (the ratio barely moves with k)")
    ap.add_argument("--only", default="", help="substring of the experiments to run")
    args = ap.parse_args()
    core.blocker = lambda *a, **k: "recording decode contexts"  # type: ignore[assignment]
    exps = sorted(p for p in (DATA / "experiments").iterdir()
                  if p.is_dir() and args.only in p.name)
    build = make_build(lambda run: str(model_config(DATA, run)), HARDWARE)
    res: dict[str, Any] = {}
    print("| run | steps | mean batch | mean ctx | max/mean | ragged/uniform (1x) | (2x) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for exp in exps:
        t0 = time.time()
        r = diagnose(exp, build, args.every)
        res[exp.name] = r
        print(f"| {exp.name} | {r['steps']} | {r['mean_batch']:.1f} | {r['mean_context']:.0f} "
              f"| {r['mean_max_over_mean']:.2f} | {r['ragged_over_uniform_lone_1x']:.3f} | "
              f"{r['ragged_over_uniform_lone_2x']:.3f} | ({time.time() - t0:.0f} s)",
              flush=True)
    OUT.write_text(json.dumps({"what": __doc__.splitlines()[0], "num_sms": NUM_SMS,
                               "block_n": BLOCK_N, "max_splits": MAX_SPLITS,
                               "tile_overhead_blocks": TILE_OVERHEAD_BLOCKS,
                               "runs": res}, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
