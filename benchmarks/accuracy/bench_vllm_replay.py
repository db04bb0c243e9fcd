"""Replay every real vLLM run of the shared vllm-inference-perf data and score ridgeline on it.

Each experiment is replayed as it ran (ridgeline.calibrate.inference_perf_replay: the
shared-prefix workload with its measured prompt lengths, inference-perf's staged constant-load
arrivals, the vLLM flags, the client's 300 s timeout) through `ridgeline.sim.event_loop.simulate`,
the function `ridgeline simulate` calls, on the H100 SXM catalog entry with the run's HF
config.json.

Scores: APE = |pred - actual| / actual per experiment over the whole run, for E2E and TTFT
mean/p90/p99 and ITL = (E2E_mean - TTFT_mean)/(out_mean - 1); mean and median over the
experiments. Three columns of models:

- baseline: the perf model with no engine costs (what ridgeline predicted before them);
- train: the engine costs fitted on all 16 runs (what ships in specs/data/engines/vllm.json);
- cv: leave-one-model-out, each model's runs predicted with costs fitted on the other three.

    .venv/bin/python benchmarks/accuracy/bench_vllm_replay.py            # table + results JSON
    .venv/bin/python benchmarks/accuracy/bench_vllm_replay.py --write-catalog   # also the data file

Writes benchmarks/results/bench_vllm_replay.json and prints the markdown table for
docs/BENCHMARKS.md. Takes about a minute (C core).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from _paths import shared_data_dir
from ridgeline.calibrate.engine_fit import fit_engine_document, make_build, score_runs
from ridgeline.calibrate.inference_perf import InferencePerfRun, load_run
from ridgeline.calibrate.inference_perf_replay import METRICS, REPLICATIONS, actual_values

ROOT = Path(__file__).resolve().parents[2]
DATA = shared_data_dir() / "vllm-inference-perf"
OUT = ROOT / "benchmarks" / "results" / "bench_vllm_replay.json"
CATALOG = ROOT / "src" / "ridgeline" / "specs" / "data" / "engines" / "vllm.json"
BARS = {"e2e": 0.091, "ttft": 0.195, "itl": 0.098}
HARDWARE = "h100-sxm"


def model_config(data: Path, run: InferencePerfRun) -> Path:
    return data / "model_configs" / run.model.rsplit("/", 1)[-1] / "config.json"


def summarize(per_run: dict[str, dict[str, float]], names: list[str]) -> dict[str, Any]:
    return {m: {"mean": float(np.mean([per_run[n][m] for n in names])),
                "median": float(np.median([per_run[n][m] for n in names]))} for m in METRICS}


def bar_for(metric: str) -> float:
    return BARS[metric.split("_")[0]]


def table(cols: dict[str, dict[str, Any]]) -> str:
    head = "| metric | bar (mean) | " + " | ".join(f"{c} mean | {c} median" for c in cols) + " |"
    sep = "|---|---:|" + "---:|---:|" * len(cols)
    rows = [head, sep]
    for m in METRICS:
        cells = [f"{cols[c][m]['mean']:.1%} | {cols[c][m]['median']:.1%}" for c in cols]
        rows.append(f"| {m} | < {bar_for(m):.1%} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def per_run_table(runs: list[InferencePerfRun], res: dict[str, dict[str, dict[str, float]]]
                  ) -> str:
    rows = ["| experiment | actual TTFT mean (ms) | pred (ms) | actual ITL (ms) | pred (ms) | "
            "actual E2E mean (s) | pred (s) | successes actual / pred | CV APE TTFT/ITL/E2E |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in runs:
        a = actual_values(r)
        t, c = res["train"][r.name], res["cv"][r.name]
        rows.append(f"| {r.name[16:]} | {a['ttft_mean'] * 1e3:.1f} | "
                    f"{t['pred_ttft_mean'] * 1e3:.1f} | {a['itl'] * 1e3:.2f} | "
                    f"{t['pred_itl'] * 1e3:.2f} | {a['e2e_mean']:.2f} | "
                    f"{t['pred_e2e_mean']:.2f} | {r.summary.count} / "
                    f"{t['pred_successes']:.0f} | {c['ttft_mean']:.0%}/{c['itl']:.0%}/"
                    f"{c['e2e_mean']:.0%} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--write-catalog", action="store_true",
                    help="write the fitted costs to specs/data/engines/vllm.json")
    ap.add_argument("--no-step-fit", action="store_true",
                    help="fit only the per-request costs (no per-step CPU cost)")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--replications", type=int, default=REPLICATIONS,
                    help="arrival draws averaged per prediction (default %(default)s)")
    args = ap.parse_args(argv)
    data = Path(args.data)
    runs = [load_run(p) for p in sorted((data / "experiments").iterdir()) if p.is_dir()]
    build = make_build(lambda r: str(model_config(data, r)), HARDWARE)
    cache: dict[tuple[str, float], Any] = {}
    t0 = time.perf_counter()
    names = [r.name for r in runs]
    base = score_runs(runs, build, {}, cache, args.replications)
    doc, fit, cv = fit_engine_document(runs, build, "vllm", f"shared/data/{data.name}",
                                       fit_step=not args.no_step_fit, cache=cache,
                                       replications=args.replications)
    folds = {f: {k: v["cv_fold_values"][f] for k, v in doc["costs"].items()}
             for f in next(iter(doc["costs"].values()))["cv_fold_values"]}
    wall = time.perf_counter() - t0
    res = {"baseline": base, "train": fit.per_run, "cv": cv}
    cols = {k: summarize(v, names) for k, v in res.items()}
    out = {
        "what": "replay of the shared real vLLM runs (benchmarks/accuracy/bench_vllm_replay.py)",
        "hardware": HARDWARE, "replications": args.replications, "experiments": names,
        "fitted": fit.values,
        "cv_fold_values": folds, "summary": cols, "per_run": res, "wall_s": wall,
        "engine_core": sorted({p.extra.get("engine_core", "?") for p in cache.values()}),
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    if args.write_catalog:
        doc["description"] = ("vLLM V1 (v0.15.1) costs outside the GPU kernels, fitted by "
                              "replaying the shared real H100 runs (docs/engine.md, "
                              "ridgeline.sim.engine_costs)")
        CATALOG.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"fitted (all 16 runs): {fit.values}")
    for fam, v in folds.items():
        print(f"  fold without {fam}: {v}")
    print()
    print(table(cols))
    print()
    print(per_run_table(runs, res))
    print(f"\n{len(runs)} experiments, {wall:.0f} s wall; results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
