"""Benchmark `ridgeline estimate`: vectorized sweep speed vs llm-analysis, and a side-by-side.

Run:  .venv/bin/python benchmarks/speed/bench_estimate.py [--points 1000000] [--peer-points 300]

1. Speed: one (batch, prompt) grid of --points configurations (output 128 tokens) through
   `ridgeline.perf.estimate.estimate` (prefill/TTFT, decode/TPOT, E2E, throughput), best of 3;
   then the same grid's first --peer-points configurations through llm-analysis's in-process
   `infer()` (llm-analysis 0.2.2, installed into a throwaway virtualenv under /tmp, never a
   project dependency) and one llm-analysis CLI call. The ratio is measured in this one run.
2. Side by side: Llama-2-7B on A100-SXM-80GB, batch 1 and 32, prompt 512, output 128, all
   efficiencies 1.0 (llm-analysis's default) and no kernel overhead, with each difference
   explained, and an ablation that feeds ridgeline llm-analysis's KV assumption.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ridgeline.perf.estimate import decode_work, estimate, prefill_work
from ridgeline.perf.roofline_step import RooflineStepTime

VENV = Path("/tmp/ridgeline-bench-llm-analysis")
PEER = "llm-analysis==0.2.2"

PEER_SCRIPT = r"""
import json, sys, time, logging
from llm_analysis.analysis import infer
grid = json.loads(sys.argv[1])
args = dict(model_name="NousResearch_Llama-2-7b-hf", gpu_name="a100-sxm-80gb",
            dtype_name="w16a16e16", num_tokens_to_generate=128, flops_efficiency=1.0,
            hbm_memory_efficiency=1.0, log_level="ERROR")
logging.disable(logging.CRITICAL)
infer(batch_size_per_gpu=1, seq_len=512, **args)  # warm
t0 = time.perf_counter()
done = 0
for b, s in grid["points"]:
    try:
        infer(batch_size_per_gpu=int(b), seq_len=int(s), **args)
    except AssertionError:  # llm-analysis asserts when memory does not fit
        pass
    done += 1
speed = done / (time.perf_counter() - t0)
side = {str(b): infer(batch_size_per_gpu=b, seq_len=512, **args) for b in (1, 32)}
print(json.dumps({"points_per_s": speed, "points": done, "side": side}))
"""


def ensure_peer() -> tuple[Path | None, str]:
    py = VENV / "bin" / "python"
    if py.exists():
        return py, "reused"
    try:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True,
                       capture_output=True, text=True, timeout=300)
        proc = subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", PEER],
                              capture_output=True, text=True, timeout=900)
    except (subprocess.SubprocessError, OSError) as exc:
        return None, f"virtualenv failed: {exc}"
    if proc.returncode != 0:
        return None, "pip install failed: " + proc.stderr.strip().splitlines()[-1]
    return py, "installed"


def bench_ridgeline(n_points: int) -> tuple[float, float, float, np.ndarray, np.ndarray]:
    m = RooflineStepTime.from_names(model="llama-2-7b", hardware="a100-80gb",
                                    compute_efficiency=1.0, bandwidth_efficiency=1.0,
                                    kernel_overhead_us=0.0, check_fit=False)
    side = int(np.sqrt(n_points))
    b = np.arange(1.0, side + 1.0)[:, None]
    s = np.linspace(64, 4096, side).round()[None, :]
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        estimate(m, b, s, 128, details=False)
        best = max(best, b.size * s.size / (time.perf_counter() - t0))
    # With details (FLOPs, bytes, bounds, memory fit, seed quantities) on a tenth of the grid.
    bd, sd = b[: max(1, side // 10)], s
    t0 = time.perf_counter()
    estimate(m, bd, sd, 128, details=True)
    detailed = bd.size * sd.size / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(200):
        estimate(m, 32, 512, 128)
    single_ms = (time.perf_counter() - t0) / 200 * 1e3
    bb, ss = np.broadcast_arrays(b, s)
    return best, detailed, single_ms, bb.ravel(), ss.ravel()


def side_by_side(peer: dict | None) -> list[str]:
    m = RooflineStepTime.from_names(model="llama-2-7b", hardware="a100-80gb",
                                    compute_efficiency=1.0, bandwidth_efficiency=1.0,
                                    kernel_overhead_us=0.0)
    lines = ["| batch | quantity | ridgeline | llm-analysis | why they differ |",
             "|---|---|---|---|---|"]
    for b in (1, 32):
        r = {k: (v.item() if isinstance(v, np.ndarray) else v)
             for k, v in estimate(m, b, 512, 128).items()}
        # Ablation: llm-analysis reads the KV cache twice at its final length (512+128) on
        # every step; that equals reading one cache of 2*640 tokens.
        abl = m.step_time_s(decode_work(b, 2 * 640 - 1))
        kv_mean_ms = b * (575 + 1) * m.kv_bytes_per_token / 2.039e12 * 1e3
        kv_peer_ms = 2 * b * 640 * m.kv_bytes_per_token / 2.039e12 * 1e3
        p = (peer or {}).get(str(b), {})
        bd = m.breakdown(prefill_work(b, 512))
        elem_ms = sum(float(t) for t, k in zip(bd.time_s, bd.kinds, strict=True)
                      if k == "vector") * 1e3
        pf_gap = (r["prefill_flops"] / p["prefill_num_flops_fwd_total"] - 1) if p else float("nan")

        def cell(key: str, scale: float = 1e3, fmt: str = ".2f", p=p) -> str:
            return f"{p[key] * scale:{fmt}}" if key in p else "n/a"

        lines += [
            f"| {b} | prefill = TTFT (ms) | {r['prefill_s'] * 1e3:.2f} | "
            f"{cell('prefill_latency')} | ridgeline has {pf_gap:+.1%} FLOPs "
            f"({r['prefill_flops'] / 1e12:.1f} "
            f"vs {p.get('prefill_num_flops_fwd_total', float('nan')) / 1e12:.1f} T: causal "
            "attention pairs S(S+1)/2, LM head on the last prompt token only, gated MLP 3 x 4096"
            " x 11008 instead of 2 x 4096 x 16384) but adds the memory-bound RMSNorm, RoPE and "
            f"SiLU kernels between the GEMMs ({elem_ms:.1f} ms) |",
            f"| {b} | decode step = TPOT (ms) | {r['tpot_s'] * 1e3:.3f} | "
            f"{cell('decode_latency', fmt='.3f')} | KV: llm-analysis reads the cache twice at its "
            f"final length 640 on every step ({kv_peer_ms:.2f} ms); ridgeline reads it once at "
            f"the mean context 575 plus the new token's write ({kv_mean_ms:.2f} ms). Weights: "
            "ridgeline reads Llama-2's untied 262 MB LM head every step, llm-analysis reads the "
            "input embedding table instead (same bytes) |",
            f"| {b} | ablation: ridgeline with llm-analysis' KV rule (ms) | {abl * 1e3:.3f} | "
            f"{cell('decode_latency', fmt='.3f')} | with the KV read as 2 x 640 tokens the two "
            "models agree: the remaining gap is activation IO and the MLP width |",
            f"| {b} | E2E (s) | {r['e2e_s']:.3f} | {cell('total_latency', 1.0, '.3f')} | "
            "TTFT + TPOT (N-1) in both; llm-analysis sums N decode steps |",
            f"| {b} | weights (GiB) | {r['weights_per_gpu_bytes'] / 2**30:.2f} | "
            f"{cell('weight_memory_per_gpu', 2**-30)} | llm-analysis ties embeddings: it "
            "leaves out Llama-2's separate 0.24 GiB LM head |",
            f"| {b} | KV cache of the batch at 640 tokens (GiB) | "
            f"{b * 640 * m.kv_bytes_per_token / 2**30:.3f} | "
            f"{cell('kv_cache_memory_per_gpu', 2**-30, '.3f')} | same formula "
            "(2 L h_kv d b_kv per token) |",
        ]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--peer-points", type=int, default=300)
    args = ap.parse_args()
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, numpy {np.__version__}")
    pts_s, detailed, single_ms, bb, ss = bench_ridgeline(args.points)
    print(f"ridgeline estimate, vectorized ({bb.size:,} points, timings + throughput): "
          f"{pts_s:,.0f} points/s")
    print(f"ridgeline estimate, vectorized with details: {detailed:,.0f} points/s")
    print(f"ridgeline estimate, one point in-process (all details): {single_ms:.3f} ms")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ridgeline.cli", "estimate", "--model", "llama-2-7b",
                    "--hardware", "a100-80gb"], capture_output=True, check=True)
    print(f"ridgeline estimate CLI, one point: {time.perf_counter() - t0:.2f} s wall")

    py, how = ensure_peer()
    peer_side = None
    if py is None:
        print(f"llm-analysis: unavailable ({how})")
    else:
        rng = np.random.default_rng(0)
        idx = rng.choice(bb.size, size=min(args.peer_points, bb.size), replace=False)
        grid = {"points": [[float(bb[i]), float(ss[i])] for i in idx]}
        proc = subprocess.run([str(py), "-c", PEER_SCRIPT, json.dumps(grid)],
                              capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            print("llm-analysis run failed:", proc.stderr.strip().splitlines()[-1:])
        else:
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            peer_side = res["side"]
            print(f"llm-analysis {PEER} ({how}), in-process infer(): "
                  f"{res['points_per_s']:,.1f} points/s ({res['points']} points of the same grid)")
            print(f"ratio ridgeline/llm-analysis (vectorized vs in-process): "
                  f"{pts_s / res['points_per_s']:,.0f}x")
            t0 = time.perf_counter()
            subprocess.run([str(py), "-m", "llm_analysis.analysis", "infer",
                            "--model_name=NousResearch_Llama-2-7b-hf",
                            "--gpu_name=a100-sxm-80gb", "--dtype_name=w16a16e16",
                            "--batch_size_per_gpu=1", "--seq_len=512",
                            "--num_tokens_to_generate=128", "--log_level=ERROR"],
                           capture_output=True, timeout=300)
            print(f"llm-analysis CLI, one point: {time.perf_counter() - t0:.2f} s wall")
    print()
    print("Llama-2-7B on A100-SXM-80GB, prompt 512, output 128, efficiency 1.0, "
          "no kernel overhead:")
    print("\n".join(side_by_side(peer_side)))


if __name__ == "__main__":
    main()
