"""Fit the two vLLM-side scales of the kernel model on the real vLLM runs (replay harness).

Vidur's kernel times (benchmarks/fit_kernel_constants.py) are eager-mode PyTorch timings of one
operator at a time; vLLM runs its steps as CUDA graphs and all-reduces small messages with its
own custom all-reduce over NVLink, not NCCL. Two numbers carry the kernel fit over to vLLM:

- floor_scale: the share of the fitted kernel floors (GEMM, vector, attention) left in
  vLLM's steps;
- allreduce_latency_scale: vLLM's NVLink all-reduce latency as a share of NCCL's alpha.

Both are picked from a grid by the mean ITL APE of the replay harness
(benchmarks/bench_vllm_replay.py over shared/data/vllm-inference-perf, H100), with
leave-one-model-out cross-validation: for each model, the grid point best on the other three
is scored on it. The result goes into specs/data/kernels.json ("vllm").

    .venv/bin/python benchmarks/fit_vllm_kernel_scales.py --run          # ~80 s per point
    .venv/bin/python benchmarks/fit_vllm_kernel_scales.py --results DIR  # reuse grid runs
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "src" / "ridgeline" / "specs" / "data" / "kernels.json"
FLOOR_GRID = (0.0, 0.25, 0.5)
ALLREDUCE_GRID = (0.2, 0.35)


def _model(exp: str) -> str:
    """The model an experiment id names (the harness's CV groups)."""
    for key in ("llama-2-70b", "llama-2-7b", "mixtral", "codellama"):
        if key in exp:
            return key
    raise ValueError(exp)


def run_point(fs: float, ar: float, out: Path) -> None:
    """One harness pass with the catalog's vLLM scales set to (fs, ar), on a copy of src."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
        cat = json.loads(CATALOG.read_text())
        cat["vllm"] = {"floor_scale": {"value": fs}, "allreduce_latency_scale": {"value": ar}}
        (src / "ridgeline" / "specs" / "data" / "kernels.json").write_text(json.dumps(cat))
        env = dict(os.environ, PYTHONPATH=str(src))
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_vllm_replay.py"),
                        "--no-step-fit", "--out", str(out)], cwd=ROOT, env=env, check=True,
                       capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="store_true", help="run the grid (else reuse --results)")
    ap.add_argument("--results", type=Path, default=Path(tempfile.gettempdir()) / "rl_vllm_grid")
    ap.add_argument("--write", action="store_true", help="write the fit into kernels.json")
    args = ap.parse_args()
    args.results.mkdir(parents=True, exist_ok=True)
    points = [(fs, ar) for fs in FLOOR_GRID for ar in ALLREDUCE_GRID]
    ape: dict[tuple[float, float], dict[str, float]] = {}
    for fs, ar in points:
        path = args.results / f"grid_{fs}_{ar}.json"
        if args.run:
            run_point(fs, ar, path)
        runs = json.loads(path.read_text())["per_run"]["baseline"]
        ape[(fs, ar)] = {exp: r["itl"] for exp, r in runs.items()}
    exps = sorted(next(iter(ape.values())))
    models = sorted({_model(e) for e in exps})

    def mean_itl(pt: tuple[float, float], keep: set[str]) -> float:
        return float(np.mean([ape[pt][e] for e in exps if _model(e) in keep]))

    best = min(points, key=lambda pt: mean_itl(pt, set(models)))
    train = [ape[best][e] for e in exps]
    held: list[float] = []
    folds = {}
    for m in models:
        pick = min(points, key=lambda pt: mean_itl(pt, set(models) - {m}))
        folds[m] = {"floor_scale": pick[0], "allreduce_latency_scale": pick[1]}
        held += [ape[pick][e] for e in exps if _model(e) == m]
    print("| floor_scale | allreduce_latency_scale | mean ITL APE | median ITL APE |")
    print("|---|---|---|---|")
    for pt in points:
        v = list(ape[pt].values())
        print(f"| {pt[0]:g} | {pt[1]:g} | {100 * np.mean(v):.1f}% | {100 * np.median(v):.1f}% |")
    fit = {"files": ["shared/data/vllm-inference-perf (16 experiments, H100 SXM)"],
           "rows": len(exps), "date": dt.date.today().isoformat(),
           "method": "grid floor_scale x allreduce_latency_scale = "
                     f"{list(FLOOR_GRID)} x {list(ALLREDUCE_GRID)}, min mean ITL APE of "
                     "benchmarks/bench_vllm_replay.py",
           "residual": {"median_ape": round(float(np.median(train)), 4),
                        "mean_ape": round(float(np.mean(train)), 4)},
           "cv": {"kind": "leave-one-model-out", "median_ape": round(float(np.median(held)), 4),
                  "mean_ape": round(float(np.mean(held)), 4), "folds": folds}}
    print(f"best {best}: train ITL mean {100 * np.mean(train):.1f}% / median "
          f"{100 * np.median(train):.1f}%; LOMO CV mean {100 * np.mean(held):.1f}% / median "
          f"{100 * np.median(held):.1f}%; folds {folds}")
    if args.write:
        cat = json.loads(CATALOG.read_text())
        cat["vllm"] = {
            "_about": "vLLM-side scales of the kernel model (CUDA-graph steps, custom "
                      "all-reduce); fitted on real vLLM runs, not on Vidur's kernels",
            "floor_scale": {"value": best[0], "_fit": fit},
            "allreduce_latency_scale": {"value": best[1], "_fit": fit}}
        CATALOG.write_text(json.dumps(cat, indent=1) + "\n")
        print(f"wrote {CATALOG}")


if __name__ == "__main__":
    main()
