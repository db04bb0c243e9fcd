"""Test a per-step cost per decode context token in place of vLLM's grouped-query decode scale.

The shipped model prices vLLM's grouped-query decode attention at `measured_decode_grouped_scale`
(0.75) x the measured kernel's bandwidth, a blanket stand-in for a serving cost that grows
with context. This script replaces it by a cost per step per decode context token, for every
model (`decode_context_token_ns` in kernels.json "vllm": host-side work over the tokens the
step's sequences hold, e.g. block-table and metadata preparation), with the scale at 1, and
judges both on the 16 vLLM runs (the replay harness, benchmarks/accuracy/bench_vllm_replay.py):

1. a grid over the cost (and the shipped scale as the reference point), no engine costs,
   scored by mean ITL APE with leave-one-model-out picks, as fit_vllm_kernel_scales.py does;
2. with `--nested`: for the LOMO picks, harness passes with the engine costs fitted, each
   held-out model's runs taken from the pass whose cost was picked without it (nested CV on
   E2E, TTFT mean/P90/P99 and ITL), beside the shipped model's nested figures
   (benchmarks/results/vllm_nested_cv.json).

    nice .venv/bin/python benchmarks/accuracy/fit_vllm_context_cost.py --nested

Writes benchmarks/results/vllm_context_cost.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from fit_vllm_kernel_scales import _model, harness_pass, lomo_picks  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "vllm_context_cost.json"
NESTED = ROOT / "benchmarks" / "results" / "vllm_nested_cv.json"
COST_GRID_NS = (0.0, 3.0, 6.0, 9.0, 12.0, 15.0)
SHIPPED_SCALE = 0.75
METRICS = ("e2e_mean", "ttft_mean", "ttft_p90", "ttft_p99", "itl")
Point = tuple[float, float]  # (measured_decode_grouped_scale, decode_context_token_ns)


def _scales(pt: Point) -> dict[str, float]:
    return {"measured_decode_grouped_scale": pt[0], "decode_context_token_ns": pt[1]}


def _path(folder: Path, pt: Point, kind: str) -> Path:
    return folder / f"{kind}_s{pt[0]:g}_k{pt[1]:g}.json"


def grid(folder: Path, points: list[Point]) -> dict[Point, dict[str, float]]:
    """Mean ITL APE per run at each point (harness passes without engine costs)."""
    ape: dict[Point, dict[str, float]] = {}
    for pt in points:
        out = _path(folder, pt, "grid")
        if not out.exists():
            print(f"grid point {pt} ...", flush=True)
            harness_pass(_scales(pt), out, ["--no-step-fit", "--replications", "1"])
        runs = json.loads(out.read_text())["per_run"]["baseline"]
        ape[pt] = {exp: r["itl"] for exp, r in runs.items()}
    return ape


def nested(folder: Path, folds: dict[str, Point]) -> dict[str, dict[str, float]]:
    """Each held-out model's runs from the engine-cost pass at the point picked without it
    (that pass's CV column: engine costs refitted without the model too)."""
    per_run: dict[str, dict[str, float]] = {}
    for model, pt in sorted(folds.items()):
        out = _path(folder, pt, "nested")
        if not out.exists():
            print(f"engine-cost pass at {pt} (fold without {model}) ...", flush=True)
            harness_pass(_scales(pt), out, [])
        res = json.loads(out.read_text())
        per_run.update({n: v for n, v in res["per_run"]["cv"].items() if _model(n) == model})
    return per_run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path,
                    default=Path(tempfile.gettempdir()) / "rl_vllm_context_cost")
    ap.add_argument("--cost-grid", default=",".join(f"{x:g}" for x in COST_GRID_NS),
                    help="comma list of decode_context_token_ns values (scale 1)")
    ap.add_argument("--nested", action="store_true",
                    help="also the nested CV of the picks on every metric (engine costs fitted)")
    args = ap.parse_args()
    args.results.mkdir(parents=True, exist_ok=True)
    costs = [float(x) for x in args.cost_grid.split(",")]
    points: list[Point] = [(1.0, k) for k in costs]
    ape = grid(args.results, [*points, (SHIPPED_SCALE, 0.0)])
    cost_ape = {pt: ape[pt] for pt in points}
    best, fold_points = lomo_picks(cost_ape)
    exps = sorted(ape[best])
    held = [cost_ape[fold_points[_model(e)]][e] for e in exps]
    print("| scale | cost ns/token | mean ITL APE | median ITL APE |")
    print("|---:|---:|---:|---:|")
    for pt, runs in ape.items():
        v = list(runs.values())
        print(f"| {pt[0]:g} | {pt[1]:g} | {np.mean(v):.2%} | {np.median(v):.2%} |")
    print(f"best cost {best[1]:g} ns: ITL train mean {np.mean([ape[best][e] for e in exps]):.2%}"
          f", LOMO {np.mean(held):.2%}; folds "
          + ", ".join(f"{m} {p[1]:g}" for m, p in fold_points.items()))
    doc: dict[str, Any] = {
        "what": "decode_context_token_ns (scale 1) vs measured_decode_grouped_scale, mean ITL "
                "APE of the 16 vLLM runs without engine costs "
                "(benchmarks/accuracy/fit_vllm_context_cost.py)",
        "grid": {f"scale {pt[0]:g} cost {pt[1]:g} ns": runs for pt, runs in ape.items()},
        "best_cost_ns": best[1], "folds_cost_ns": {m: p[1] for m, p in fold_points.items()},
        "itl_train_mean": float(np.mean([ape[best][e] for e in exps])),
        "itl_lomo_mean": float(np.mean(held))}
    if args.nested:
        got = nested(args.results, fold_points)
        shipped = json.loads(NESTED.read_text())["summary"]
        table = {m: {"nested_cv": float(np.mean([got[n][m] for n in exps])),
                     "shipped_nested_cv": float(shipped[m]["nested_cv"])} for m in METRICS}
        doc["nested"] = {"summary": table, "per_run": got}
        print("| metric | shipped scale, nested CV | context cost, nested CV |")
        print("|---|---:|---:|")
        for m, v in table.items():
            print(f"| {m} | {v['shipped_nested_cv']:.1%} | {v['nested_cv']:.1%} |")
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
