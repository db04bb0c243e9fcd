"""Per-stage and per-request decode of the vLLM replay against the measured runs.

The replay harness (`bench_vllm_replay.py`) scores whole runs. This script looks inside them:

- per stage of each of the 16 runs, the measured ITL ((E2E mean - TTFT mean)/(out mean - 1) of
  the stage's successes) against the replay's, with the shipped kernel scales and engine
  costs (the per-request shift cancels out of this ITL);
- for the overloaded (single-stage reasoning) runs, the spread of the per-request decode step
  over the run: inference-perf's per-request time per output token x 2 against the replay's
  per-request (last token - first token)/(tokens - 1), at the same percentiles. The factor 2 is
  about the ratio of the summary ITL to inference-perf's mean time per output token on the
  TP2/TP4 reasoning runs (printed: 2.00-2.04); on Llama-2-7B reasoning it is 2.63, so that
  row's measured spread is only indicative.

    .venv/bin/python benchmarks/accuracy/vllm_replay_stages.py [--replications 2]

About a minute on 2 cores (C core, the overloaded runs on the Python engine for the client's
timeout). Prints markdown tables (docs/BENCHMARKS.md, log 2026-12-02).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from bench_vllm_replay import DATA, HARDWARE, model_config  # type: ignore[import-not-found]
from ridgeline.calibrate.engine_fit import make_build
from ridgeline.calibrate.inference_perf import load_run
from ridgeline.calibrate.inference_perf_replay import replay

PERCENTILES = (("min", 0), ("p10", 10), ("median", 50), ("p90", 90), ("max", 100))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replications", type=int, default=2)
    args = ap.parse_args()
    build = make_build(lambda r: str(model_config(DATA, r)), HARDWARE)
    print("| run | stage: measured / replay ITL (ms) |")
    print("|---|---|")
    spreads = []
    for path in sorted((DATA / "experiments").iterdir()):
        run = load_run(path)
        built = build(run, 0.0)
        pred = replay(run, built, replications=args.replications)
        cells = [f"{st.rate_req_s:g} req/s: {a.itl_s * 1e3:.2f} / {q * 1e3:.2f} "
                 f"({100 * (q / a.itl_s - 1):+.0f}%)"
                 for st, a, q in zip(run.stages, run.per_stage, pred.stage_itl_s, strict=True)]
        print(f"| {run.name[16:]} | {'; '.join(cells)} |")
        if len(run.stages) == 1 and "reasoning" in run.name:
            summary = json.loads((path / "results" / "summary_lifecycle_metrics.json")
                                 .read_text())
            tpot = summary["successes"]["latency"]["time_per_output_token"]
            raw = pred.raw[0]   # the first draw (seed 0): its finished requests' own steps
            steps = raw.decode_step_s[raw.done & np.isfinite(raw.decode_step_s)]
            spreads.append((run.name[16:], run.summary.itl_s / tpot["mean"],
                            [2e3 * tpot[k] for k, _ in PERCENTILES],
                            [1e3 * float(np.percentile(steps, p)) for _, p in PERCENTILES]))
    print()
    print("| run | summary ITL / mean TPOT | per-request decode step (ms), measured "
          "(TPOT x 2) / replay: " + ", ".join(k for k, _ in PERCENTILES) + " |")
    print("|---|---:|---|")
    for name, ratio, meas, rep in spreads:
        print(f"| {name} | {ratio:.2f} | " + ", ".join(
            f"{m:.1f} / {r:.1f}" for m, r in zip(meas, rep, strict=True)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
