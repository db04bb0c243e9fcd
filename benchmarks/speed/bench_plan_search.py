"""Wall time of `ridgeline plan` on the search new users tried: Llama-3.1-8B over three GPUs
and two weight precisions, verification kept.

    .venv/bin/python benchmarks/speed/bench_plan_search.py [--workers 1] [--repeat 1]
        [--src DIR] [--label NAME] [--out benchmarks/results/bench_plan_search.json]

The command (docs/plan-advise.md's example, `--workers 1` unless told):

    ridgeline plan --model llama-3.1-8b --hardware h100-sxm,l40s,a100-80gb --weights bf16,fp8
        --rate 20 --slo ttft_ms<=1000 --slo tpot_ms<=50 --goodput-target 0.99 --json

It runs as a child process (what users run), timed from start to exit. `--src DIR` puts
another checkout's `src` first on the child's PYTHONPATH (to time an older commit in the
same conditions: copy the built C extensions into it). The machine may be shared: the load
average before and after each run is recorded beside the wall time. Results are appended
per label to `--out` (one current file; a label's earlier entry is replaced).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ARGS = ["plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm,l40s,a100-80gb",
        "--weights", "bf16,fp8", "--rate", "20", "--slo", "ttft_ms<=1000",
        "--slo", "tpot_ms<=50", "--goodput-target", "0.99", "--json"]


def run_once(workers: int, src: str | None) -> dict[str, object]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = str(Path(src).resolve()) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-c", "from ridgeline.cli import main; main()", *ARGS,
           "--workers", str(workers)]
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    load1 = os.getloadavg()
    out: dict[str, object] = {"wall_s": round(wall, 2), "exit_code": r.returncode,
                              "load_avg_1m_before": load0[0], "load_avg_1m_after": load1[0]}
    if r.returncode in (0, 1):
        d = json.loads(r.stdout)
        out.update(chosen=d["chosen"]["config"] if d["chosen"] else None,
                   chosen_usd_per_hour=d["chosen"]["usd_per_hour"] if d["chosen"] else None,
                   screened=d["simulated"], pruned=d["pruned"], space_size=d["space_size"],
                   verified=len(d["verification"]["candidates"]))
    else:
        out["stderr_tail"] = r.stderr[-2000:]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--src", default=None)
    ap.add_argument("--label", default="current")
    ap.add_argument("--out", default="benchmarks/results/bench_plan_search.json")
    args = ap.parse_args()
    runs = [run_once(args.workers, args.src) for _ in range(args.repeat)]
    for r in runs:
        print(json.dumps(r), file=sys.stderr)
    entry = {"label": args.label, "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
             "command": "ridgeline " + " ".join(ARGS) + f" --workers {args.workers}",
             "src": args.src, "machine": {"cpus": os.cpu_count(), "python":
                                          platform.python_version()},
             "runs": runs}
    path = Path(args.out)
    doc = json.loads(path.read_text()) if path.is_file() else {"benchmark": Path(__file__).name,
                                                               "entries": []}
    doc["entries"] = [e for e in doc["entries"] if e["label"] != args.label] + [entry]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(entry, indent=1))


if __name__ == "__main__":
    main()
