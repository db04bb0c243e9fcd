"""Benchmark `ridgeline plan`: a search of about 1,000 configurations on local processes.

    .venv/bin/python benchmarks/speed/bench_plan.py [--workers 2] [--requests 300] [--out FILE]

Space: Llama-3.1-8B on H100-SXM, A100-80GB and L40S; bf16 and fp8 weights; TP 1, 2, 4, 8;
max_num_seqs 64, 256; max_num_batched_tokens 2048, 8192; chunked prefill on and off; the
analytic minimum of replicas and one more; P/D splits near the prefill share.
Workload: prompts lognormal mean 1000 tokens (sigma 0.8, max 8192),
outputs lognormal mean 250 (sigma 0.8, max 2048), Poisson at 40 req/s, planned with 20%
headroom; SLOs TTFT <= 1 s and TPOT <= 40 ms for 99% of requests. Each surviving candidate
is screened with `--requests` requests; the cheapest survivors are verified with 6,086
requests on two new seeds (docs/plan-advise.md).

Reports the space size, how many were pruned analytically and simulated, the wall time of
each stage, CPU time, and the machine's load average (the box may be shared: say so).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from ridgeline.plan import PlanRequest, plan

    req = PlanRequest(
        models=("llama-3.1-8b",), hardware=("h100-sxm", "a100-80gb", "l40s"),
        weights=("bf16", "fp8"), tp=(1, 2, 4, 8), max_num_seqs=(64, 256),
        max_num_batched_tokens=(2048, 8192), chunked_prefill=(True, False),
        prompt="lognormal:mean=1000,sigma=0.8,max=8192",
        output="lognormal:mean=250,sigma=0.8,max=2048", rate_req_s=40.0,
        slos=("ttft_ms<=1000", "tpot_ms<=40"), goodput_target=0.99, headroom=0.2,
        requests=args.requests, max_replicas=32, max_gpus=128, extra_replicas=1)
    stages: dict[str, float] = {}
    t0 = time.perf_counter()
    t_stage = [time.perf_counter(), ""]

    def progress(stage: str, done: int, total: int) -> None:
        if done % 50 == 0 or done == total:
            print(f"{time.perf_counter() - t0:8.1f} s  {stage}: {done}/{total}",
                  file=sys.stderr, flush=True)
        if stage != t_stage[1]:
            now = time.perf_counter()
            if t_stage[1]:
                stages[str(t_stage[1])] = now - float(t_stage[0])
            t_stage[0], t_stage[1] = now, stage

    load0 = os.getloadavg()
    cpu0 = time.process_time()
    result = plan(req, workers=args.workers, progress=progress)
    wall = time.perf_counter() - t0
    stages[str(t_stage[1])] = time.perf_counter() - float(t_stage[0])
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = {
        "space_size": result.space_size, "pruned": len(result.pruned),
        "simulated": len(result.simulated), "requests_per_simulation": args.requests,
        "workers": args.workers, "wall_s": wall, "stage_wall_s": stages,
        "cpu_s_driver": time.process_time() - cpu0,
        "cpu_s_workers": children.ru_utime + children.ru_stime,
        "chosen": result.chosen.candidate.label if result.chosen else None,
        "chosen_usd_per_hour": result.chosen.candidate.usd_per_hour if result.chosen else None,
        "usd_per_million_output_tokens": (result.details.usd_per_million_output_tokens
                                          if result.details else None),
        "verified": len(result.verified), "verify_requests": result.verify_requests,
        "verify_seeds": list(result.verify_seeds),
        "pareto_points": len(result.pareto),
        "rejected_families": len(result.rejected_families),
        "loadavg_before": load0, "loadavg_after": os.getloadavg(),
        "cpus": os.cpu_count(), "python": sys.version.split()[0],
        "machine": platform.platform(),
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
