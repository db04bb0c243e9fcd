"""One workload, predicted and measured: `simulate --workload FILE` against
`bench --target emulator --workload FILE` (the emulator runs the same step-time model on the
wall clock, so what differs is the workload's plumbing, the client and the host).

Checks that both ran the same requests (send times, prompt and output lengths, request by
request) and records `ridgeline compare` of the two traces. Default workload: the first 200
rows of Azure's 2023 code trace (tests/data/traces/published, 199 s of real time).

    .venv/bin/python benchmarks/accuracy/workload_sim_vs_emulator.py \
        [--workload FILE] [--out benchmarks/results/workload_sim_vs_emulator.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
DEFAULT = ROOT / "tests/data/traces/published/AzureLLMInferenceTrace_code_head200.csv"


def requests(path: Path) -> list[dict]:
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    out = [r for r in recs if r.get("type") == "request"]
    return sorted(out, key=lambda r: int(str(r["id"]).lstrip("r")))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default=str(DEFAULT))
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/"
                                         "workload_sim_vs_emulator.json"))
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp())
    pred, meas = tmp / "predicted.jsonl", tmp / "measured.jsonl"
    t0 = time.perf_counter()
    subprocess.run([RIDGELINE, "simulate", "--workload", args.workload, "--trace", str(pred)],
                   check=True, capture_output=True, text=True)
    sim_wall_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run([RIDGELINE, "bench", "--target", "emulator", "--workload", args.workload,
                    "--trace", str(meas), "--no-server-metrics"], check=True,
                   capture_output=True, text=True)
    bench_wall_s = time.perf_counter() - t0
    p, m = requests(pred), requests(meas)
    same = {
        "requests": [len(p), len(m)],
        "prompt_tokens_equal": [r["prompt_tokens"] for r in p] == [r["prompt_tokens"]
                                                                    for r in m],
        "output_tokens_equal": [r["output_tokens"] for r in p] == [r["output_tokens"]
                                                                    for r in m],
        "max_scheduled_s_difference": max(abs(a["scheduled_s"] - b["scheduled_s"])
                                          for a, b in zip(p, m, strict=True)),
        "client_lag_p99_ms": sorted((b["sent_s"] - b["scheduled_s"]) * 1e3
                                    for b in m)[int(0.99 * (len(m) - 1))],
    }
    cmp = subprocess.run([RIDGELINE, "compare", str(pred), str(meas), "--json"], check=True,
                         capture_output=True, text=True)
    shown = Path(args.workload).resolve()
    workload = str(shown.relative_to(ROOT)) if shown.is_relative_to(ROOT) else args.workload
    result = {"date": time.strftime("%Y-%m-%d"), "workload": workload,
              "simulate_wall_s": round(sim_wall_s, 2), "bench_wall_s": round(bench_wall_s, 2),
              "same_requests": same, "compare": json.loads(cmp.stdout)}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "compare"}, indent=1))
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
