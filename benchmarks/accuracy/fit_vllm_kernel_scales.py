"""Fit the three vLLM-side scales of the kernel model on the real vLLM runs (replay harness).

Vidur's kernel times (benchmarks/accuracy/fit_kernel_constants.py) are eager-mode PyTorch
timings of one
operator at a time; vLLM runs its steps as CUDA graphs and all-reduces small messages with its
own custom all-reduce over NVLink, not NCCL, and its decode attention is its own paged kernel
(block 16) on H100, profiled nowhere in the data. Three numbers carry the kernel fit over to vLLM:

- floor_scale: the share of the fitted kernel floors (GEMM, vector, attention) left in
  vLLM's steps;
- allreduce_latency_scale: vLLM's NVLink all-reduce latency as a share of NCCL's alpha;
- attention_decode_scale: vLLM's decode-attention bandwidth efficiency as a share of the one
  carried from Vidur's A100 kernel (docs/model.md: 0.91 of HBM bandwidth on H100 by rule);
- attention_decode_grouped_scale: the same for grouped-query models only (more query heads
  than KV heads per GPU), on GPUs whose attention is carried (`--grouped-grid`);
- measured_decode_grouped_scale: grouped-query decode bandwidth as a share of the measured
  kernel's, on GPUs with measured attention tables (H100 SXM, where the runs are:
  `--measured-grouped-grid`). Shipped 2026-12-07 with the floor held at 0.5:

    .venv/bin/python benchmarks/accuracy/fit_vllm_kernel_scales.py --run --floor-grid 0.5 \
        --allreduce-grid 0.1 --measured-grouped-grid 1,0.9,0.85,0.8,0.75,0.7,0.65,0.6 --write

A grid point sets the scales it names over a copy of the catalog; the catalog's other vLLM
scales keep their shipped values, and `--write` replaces only the scales the grid explored
(more than one value).

All are picked from a grid by the mean ITL APE of the replay harness
(benchmarks/accuracy/bench_vllm_replay.py over shared/data/vllm-inference-perf, H100), with
leave-one-model-out cross-validation: for each model, the grid point best on the other three
is scored on it. The result goes into specs/data/kernels.json ("vllm"). The attention axis is
explored with --attention-grid (default: 1 only, not fitted): on this data it picks 1 and its
leave-one-model-out CV degrades (docs/BENCHMARKS.md, log 2026-12-01), so the shipped
catalog has no attention_decode_scale and --write leaves it out unless the grid explores it.
The grouped axis is fitted (docs/BENCHMARKS.md, log 2026-12-02):

    .venv/bin/python benchmarks/accuracy/fit_vllm_kernel_scales.py --run --floor-grid 0.25,0.5 \
        --allreduce-grid 0,0.1,0.2 --grouped-grid 1,0.85,0.75,0.7,0.65,0.6,0.55 --write

`--criterion stage_itl` scores each point by the stages' ITLs instead of the run's; on the
160-point grid its folds are the run criterion's (docs/BENCHMARKS.md, sixth pass), so the
shipped fit keeps `itl`.

    .venv/bin/python benchmarks/accuracy/fit_vllm_kernel_scales.py --run          # ~7 s per point
    .venv/bin/python benchmarks/accuracy/fit_vllm_kernel_scales.py --results DIR  # reuse grid runs
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
from typing import Any

import numpy as np

from bench_vllm_replay import HARDWARE  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "src" / "ridgeline" / "specs" / "data" / "kernels.json"
FLOOR_GRID = (0.0, 0.25, 0.5, 0.75)
ALLREDUCE_GRID = (0.2, 0.35)
ATTENTION_GRID = (1.0,)
GROUPED_GRID = (1.0,)
MEASURED_GRID = (1.0,)
# what a grid point is scored by (per_run keys of bench_vllm_replay.py's JSON)
CRITERIA = {"itl": "ITL", "stage_itl": "stage ITL"}
# (floor_scale, allreduce_latency_scale, attention_decode, attention_decode_grouped,
#  measured_decode_grouped)
Point = tuple[float, float, float, float, float]


def _model(exp: str) -> str:
    """The model an experiment id names (the harness's CV groups)."""
    for key in ("llama-2-70b", "llama-2-7b", "mixtral", "codellama"):
        if key in exp:
            return key
    raise ValueError(exp)


def grouped_kernel_profiles(cat: dict[str, Any]) -> list[str]:
    """The kernel profile of the runs' GPU (H100 SXM): where the grouped scale is fitted, and
    so where it applies."""
    return [cat["hardware"].get(HARDWARE, cat["default_hardware"])["kernels"]]


def lomo_picks(ape: dict[Any, dict[str, float]]) -> tuple[Any, dict[str, Any]]:
    """The grid point of least mean APE over all runs, and, for each model, the point of least
    mean APE over the other models' runs (`ape`: point -> experiment -> APE)."""
    exps = sorted(next(iter(ape.values())))
    models = sorted({_model(e) for e in exps})

    def mean_ape(pt: Any, keep: set[str]) -> float:
        return float(np.mean([ape[pt][e] for e in exps if _model(e) in keep]))

    best = min(ape, key=lambda pt: mean_ape(pt, set(models)))
    return best, {m: min(ape, key=lambda pt: mean_ape(pt, set(models) - {m})) for m in models}


def harness_pass(scales: dict[str, float], out: Path, harness_args: list[str]) -> None:
    """bench_vllm_replay.py (with `harness_args`, writing `out`) on a copy of src whose
    catalog's "vllm" section holds `scales` (scale name -> value)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
        cat = json.loads(CATALOG.read_text())
        # The scales given replace the catalog's; the others keep their shipped values (a
        # GPU with measured attention tables prices grouped decode with the measured scale).
        kept = {k: v for k, v in cat.get("vllm", {}).items()
                if k not in scales and isinstance(v, dict) and "value" in v}
        cat["vllm"] = {**kept, **{k: {"value": v} for k, v in scales.items()}}
        if "attention_decode_grouped_scale" in cat["vllm"]:
            cat["vllm"]["attention_decode_grouped_scale"]["kernel_profiles"] = \
                grouped_kernel_profiles(cat)
        (src / "ridgeline" / "specs" / "data" / "kernels.json").write_text(json.dumps(cat))
        env = dict(os.environ, PYTHONPATH=str(src))
        subprocess.run([sys.executable, str(Path(__file__).parent / "bench_vllm_replay.py"),
                        *harness_args, "--out", str(out)], cwd=ROOT, env=env, check=True,
                       capture_output=True)


def run_point(pt: Point, out: Path, replications: int) -> None:
    """One harness pass, no engine costs, with the vLLM scales set to `pt`."""
    fs, ar, at, gq, mq = pt
    harness_pass({"floor_scale": fs, "allreduce_latency_scale": ar,
                  "attention_decode_scale": at, "attention_decode_grouped_scale": gq,
                  "measured_decode_grouped_scale": mq},
                 out, ["--no-step-fit", "--replications", str(replications)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="store_true", help="run the grid (else reuse --results)")
    ap.add_argument("--results", type=Path, default=Path(tempfile.gettempdir()) / "rl_vllm_grid")
    ap.add_argument("--write", action="store_true", help="write the fit into kernels.json")
    ap.add_argument("--attention-grid", default=",".join(f"{x:g}" for x in ATTENTION_GRID),
                    help="comma list of attention_decode_scale values to explore (e.g. "
                         "1,0.85,0.7,0.6)")
    ap.add_argument("--grouped-grid", default=",".join(f"{x:g}" for x in GROUPED_GRID),
                    help="comma list of attention_decode_grouped_scale values (grouped-query "
                         "decode attention only) to explore, e.g. 1,0.8,0.7,0.6")
    ap.add_argument("--measured-grouped-grid",
                    default=",".join(f"{x:g}" for x in MEASURED_GRID),
                    help="comma list of measured_decode_grouped_scale values (grouped-query "
                         "decode bandwidth as a share of the measured kernel's, on GPUs with "
                         "measured attention tables), e.g. 1,0.9,0.8,0.7")
    ap.add_argument("--floor-grid", default=",".join(f"{x:g}" for x in FLOOR_GRID))
    ap.add_argument("--allreduce-grid", default=",".join(f"{x:g}" for x in ALLREDUCE_GRID))
    ap.add_argument("--criterion", choices=sorted(CRITERIA), default="itl",
                    help="the APE the grid minimises: itl (the run's mean decode step, what "
                         "ships) or stage_itl (the mean over the run's load stages of each "
                         "stage's)")
    ap.add_argument("--replications", type=int, default=1,
                    help="arrival draws per harness pass (ITL, the criterion, barely moves "
                         "with the draw)")
    args = ap.parse_args()
    att_grid = tuple(float(x) for x in args.attention_grid.split(","))
    gq_grid = tuple(float(x) for x in args.grouped_grid.split(","))
    mq_grid = tuple(float(x) for x in args.measured_grouped_grid.split(","))
    floor_grid = tuple(float(x) for x in args.floor_grid.split(","))
    ar_grid = tuple(float(x) for x in args.allreduce_grid.split(","))
    args.results.mkdir(parents=True, exist_ok=True)
    points: list[Point] = [(fs, ar, at, gq, mq) for mq in mq_grid for gq in gq_grid
                           for at in att_grid for fs in floor_grid for ar in ar_grid]
    ape: dict[Point, dict[str, float]] = {}
    for pt in points:
        fs, ar, at, gq, mq = pt
        suffix = ("" if gq == 1.0 else f"_g{gq}") + ("" if mq == 1.0 else f"_m{mq}")
        path = args.results / f"grid_{fs}_{ar}_{at}{suffix}_r{args.replications}.json"
        if args.run and not path.exists():
            print(f"point {pt} ...", flush=True)
            run_point(pt, path, args.replications)
        runs = json.loads(path.read_text())["per_run"]["baseline"]
        ape[pt] = {exp: r[args.criterion] for exp, r in runs.items()}
    exps = sorted(next(iter(ape.values())))
    best, fold_points = lomo_picks(ape)
    train = [ape[best][e] for e in exps]
    held: list[float] = []
    folds = {}
    for m, pick in fold_points.items():
        folds[m] = {"floor_scale": pick[0], "allreduce_latency_scale": pick[1]}
        if len(att_grid) > 1:
            folds[m]["attention_decode_scale"] = pick[2]
        if len(gq_grid) > 1:
            folds[m]["attention_decode_grouped_scale"] = pick[3]
        if len(mq_grid) > 1:
            folds[m]["measured_decode_grouped_scale"] = pick[4]
        held += [ape[pick][e] for e in exps if _model(e) == m]
    print("| floor_scale | allreduce_latency_scale | attention_decode_scale | "
          "attention_decode_grouped_scale | measured_decode_grouped_scale | "
          f"mean {CRITERIA[args.criterion]} APE | median {CRITERIA[args.criterion]} APE |")
    print("|---|---|---|---|---|---|---|")
    for pt in points:
        v = list(ape[pt].values())
        print(f"| {pt[0]:g} | {pt[1]:g} | {pt[2]:g} | {pt[3]:g} | {pt[4]:g} | "
              f"{100 * np.mean(v):.2f}% | {100 * np.median(v):.2f}% |")
    att_name = " x attention_decode_scale" if len(att_grid) > 1 else ""
    att_vals = f" x {list(att_grid)}" if len(att_grid) > 1 else ""
    if len(gq_grid) > 1:
        att_name += " x attention_decode_grouped_scale"
        att_vals += f" x {list(gq_grid)}"
    if len(mq_grid) > 1:
        att_name += " x measured_decode_grouped_scale"
        att_vals += f" x {list(mq_grid)}"
    fit = {"files": ["shared/data/vllm-inference-perf (16 experiments, H100 SXM)"],
           "rows": len(exps), "date": dt.date.today().isoformat(),
           "method": f"grid floor_scale x allreduce_latency_scale{att_name} = "
                     f"{list(floor_grid)} x {list(ar_grid)}{att_vals}, "
                     f"min mean {CRITERIA[args.criterion]} APE of "
                     "benchmarks/accuracy/bench_vllm_replay.py --no-step-fit",
           "residual": {"median_ape": round(float(np.median(train)), 4),
                        "mean_ape": round(float(np.mean(train)), 4)},
           "cv": {"kind": "leave-one-model-out", "median_ape": round(float(np.median(held)), 4),
                  "mean_ape": round(float(np.mean(held)), 4), "folds": folds}}
    print(f"best {best}: train {args.criterion} mean {100 * np.mean(train):.1f}% / median "
          f"{100 * np.median(train):.1f}%; LOMO CV mean {100 * np.mean(held):.1f}% / median "
          f"{100 * np.median(held):.1f}%; folds {folds}")
    if args.write:
        cat = json.loads(CATALOG.read_text())
        old = cat.get("vllm", {})
        fitted = {"floor_scale": (floor_grid, best[0]),
                  "allreduce_latency_scale": (ar_grid, best[1]),
                  "attention_decode_scale": (att_grid, best[2]),
                  "attention_decode_grouped_scale": (gq_grid, best[3]),
                  "measured_decode_grouped_scale": (mq_grid, best[4])}
        vllm: dict[str, Any] = {
            "_about": "vLLM-side scales of the kernel model (CUDA-graph steps, custom "
                      "all-reduce, grouped-query decode in serving); fitted on real vLLM "
                      "runs, not on the kernel tables"}
        for name, (grid, value) in fitted.items():
            if len(grid) > 1:
                vllm[name] = {**{k: v for k, v in old.get(name, {}).items()
                                 if k not in ("value", "_fit")}, "value": value, "_fit": fit}
            elif name in old:   # not explored here: the catalog's own fit stays
                vllm[name] = old[name]
        if "attention_decode_grouped_scale" in vllm:
            vllm["attention_decode_grouped_scale"]["kernel_profiles"] = \
                grouped_kernel_profiles(cat)
        cat["vllm"] = vllm
        CATALOG.write_text(json.dumps(cat, indent=1) + "\n")
        print(f"wrote {CATALOG}")


if __name__ == "__main__":
    main()
