"""Leave-one-model-out CV of the whole vLLM fit: kernel scales and engine costs both refitted.

`bench_vllm_replay.py`'s CV column refits the engine costs per fold on the kernel scales
fitted on all 16 runs. Here each held-out model is predicted with everything fitted without
it: the vLLM kernel scales the grid picked on the other three models
(`kernels.json` "vllm" -> floor_scale._fit.cv.folds, from `fit_vllm_kernel_scales.py`), then
the engine costs fitted on the other three under those scales (a harness pass on a copy of
src whose catalog holds the fold's scales; its CV column is exactly that for the held-out
model). Folds whose scales equal the shipped ones reuse `results/bench_vllm_replay.json`.

    .venv/bin/python benchmarks/accuracy/vllm_nested_cv.py        # ~5 min per distinct fold

Prints the train / nested-CV table (mean APE over the 16 runs, as bench_vllm_replay.py
scores) and writes benchmarks/results/vllm_nested_cv.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from fit_vllm_kernel_scales import CATALOG, _model, harness_pass  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "benchmarks" / "results" / "bench_vllm_replay.json"
OUT = ROOT / "benchmarks" / "results" / "vllm_nested_cv.json"
SCALES = ("floor_scale", "allreduce_latency_scale", "attention_decode_grouped_scale",
          "measured_decode_grouped_scale")
METRICS = ("e2e_mean", "e2e_p90", "e2e_p99", "ttft_mean", "ttft_p90", "ttft_p99", "itl")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fold-dir", type=Path, default=None,
                    help="keep each fold's harness pass here and reuse one already there "
                         "(default: a temporary folder)")
    args = ap.parse_args()
    vllm = json.loads(CATALOG.read_text())["vllm"]
    shipped_scales = {k: float(vllm[k]["value"]) for k in SCALES if k in vllm}
    # The folds of the latest grid fit: the one that explored the measured grouped-query
    # scale where it ships, else the floor scale's.
    fitted = next(vllm[k] for k in ("measured_decode_grouped_scale", "floor_scale")
                  if k in vllm and "folds" in (vllm[k].get("_fit", {}).get("cv") or {}))
    folds = fitted["_fit"]["cv"]["folds"]
    shipped = json.loads(SHIPPED.read_text())
    nested: dict[str, dict[str, float]] = {}
    fold_runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        fold_dir = args.fold_dir or Path(tmp)
        fold_dir.mkdir(parents=True, exist_ok=True)
        for model, pick in sorted(folds.items()):
            scales = {k: float(pick.get(k, 1.0)) for k in shipped_scales}
            if scales == shipped_scales:
                res, how = shipped, "the shipped scales (results/bench_vllm_replay.json)"
            else:
                out = fold_dir / ("fold_" + "_".join(f"{k}{v:g}" for k, v in
                                                     sorted(scales.items())) + ".json")
                if not out.exists():
                    print(f"fold without {model}: harness with {scales} ...", flush=True)
                    harness_pass(scales, out, [])
                res, how = json.loads(out.read_text()), "own pass"
            held = {n: v for n, v in res["per_run"]["cv"].items() if _model(n) == model}
            nested.update(held)
            fold_runs[model] = {"kernel_scales": scales, "engine_costs":
                                res["cv_fold_values"][next(f for f in res["cv_fold_values"]
                                                           if _model(f) == model)],
                                "source": how}
    names = shipped["experiments"]
    train = shipped["per_run"]["train"]
    table = {m: {"train": float(np.mean([train[n][m] for n in names])),
                 "nested_cv": float(np.mean([nested[n][m] for n in names])),
                 "engine_cost_cv": float(shipped["summary"]["cv"][m]["mean"])}
             for m in METRICS}
    OUT.write_text(json.dumps({"what": "leave-one-model-out CV of kernel scales + engine "
                               "costs (benchmarks/accuracy/vllm_nested_cv.py)", "folds": fold_runs,
                               "summary": table, "per_run": nested}, indent=1) + "\n")
    print("| metric | train mean | CV, engine costs only | CV, scales and costs | ratio |")
    print("|---|---:|---:|---:|---:|")
    for m, v in table.items():
        print(f"| {m} | {v['train']:.1%} | {v['engine_cost_cv']:.1%} | {v['nested_cv']:.1%} | "
              f"{v['nested_cv'] / v['train']:.2f} |")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
