"""Fleet-scale simulate: whole-command wall and CPU time, peak RSS, sketch vs exact, shards.

Each case runs the installed `ridgeline` console script in a subprocess and records wall
time, CPU time (user + sys of the child, from getrusage) and its peak RSS. The box these
figures come from is named in docs/BENCHMARKS.md (it may be shared: CPU time is the steadier
figure then).

    .venv/bin/python benchmarks/speed/bench_fleet.py --out benchmarks/results/bench_fleet.json
    .venv/bin/python benchmarks/speed/bench_fleet.py --bar-requests 3600000   # the full bar
    .venv/bin/python benchmarks/speed/bench_fleet.py --python-core   # + the Python engine, same run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
WORKLOAD = ["--prompt", "lognormal:mean=800,sigma=0.8", "--output",
            "lognormal:mean=250,sigma=0.8"]


def run(args: list[str], base: str | None = None, env_extra: dict | None = None) -> dict:
    """One command: wall s, CPU s, peak RSS, and its JSON output."""
    if base:   # the code of another checkout (a baseline), through this interpreter
        cmd = [sys.executable, "-m", "ridgeline.cli", *args]
        env = {**os.environ, "PYTHONPATH": str(Path(base) / "src")}
    else:
        cmd, env = [RIDGELINE, *args], dict(os.environ)
    env.update(env_extra or {})
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, text=True, env=env)
        _, status, ru = os.wait4(p.pid, 0)   # this child's own CPU time and peak RSS
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(args)}: exit {p.returncode}")
        out.seek(0)
        data = json.loads(out.read())
    # Linux wait4 counts the child and the children it reaped (--workers processes); Ray
    # workers are not its children: their CPU is not in `ru`.
    return {"args": " ".join(args), "wall_s": round(wall, 2),
            "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
            "peak_rss_mb": round(ru.ru_maxrss / 1024, 1), "json": data}


PYTHON_CORE_CASES = ("single_replica_100k", "fleet_round_robin", "fleet_least_outstanding",
                     "closed_loop_100k", "pd_batch_100k")


def pct(d: dict, key: str, p: str) -> float:
    lat = d.get("latency") or d["analysis"]["latency"]
    return lat[key]["percentiles"][p]["value"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/bench_fleet.json")
    ap.add_argument("--baseline", help="a checkout of the code before (for the 100k case)")
    ap.add_argument("--fleet-requests", type=int, default=100_000)
    ap.add_argument("--lo-requests", type=int, default=10_000,
                    help="least-outstanding over 1,000 replicas (the slow router)")
    ap.add_argument("--bar-requests", type=int, default=0,
                    help="also the issue's bar: this many requests (3600000) over 1,000 "
                    "replicas, round-robin with --workers 2 and least-outstanding")
    ap.add_argument("--bar-lo-requests", type=int, default=0,
                    help="least-outstanding at this count for the bar (0: --bar-requests)")
    ap.add_argument("--python-core", action="store_true",
                    help="also run the 100k, round-robin, least-outstanding, closed-loop and "
                    "P/D batch cases on the Python engine (RIDGELINE_SIM_CORE=python): the C "
                    "core's ratio (the P/D one takes ~10 min there)")
    ap.add_argument("--skip", default="", help="comma list of cases to skip: single, rr, "
                    "lo, sketch, shards, dynamic")
    ap.add_argument("--scale-workers", default="",
                    help="comma list of --workers counts for the round-robin fleet")
    a = ap.parse_args()
    skip = set(a.skip.split(","))
    out: dict = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "cases": {}}

    def case(name: str, args: list[str], base: str | None = None) -> dict:
        r = run([*args, "--json"], base)
        if a.python_core and name in PYTHON_CORE_CASES:
            py = run([*args, "--json"], base, {"RIDGELINE_SIM_CORE": "python"})
            out["cases"][name + "_python_core"] = {k: v for k, v in py.items() if k != "json"}
            print(f"{name} on the Python engine: {py['wall_s']} s wall, {py['cpu_s']} s CPU "
                  f"({py['wall_s'] / r['wall_s']:.1f}x the C core's wall)", flush=True)
        n = r["json"].get("requests") or r["json"]["simulation"]["requests"]
        r["requests_per_wall_s"] = round(n / r["wall_s"])
        r["requests_per_cpu_s"] = round(n / r["cpu_s"])
        print(f"{name}: {r['wall_s']} s wall, {r['cpu_s']} s CPU, {r['peak_rss_mb']} MB, "
              f"{r['requests_per_wall_s']:,} req/wall-s, {r['requests_per_cpu_s']:,} "
              f"req/CPU-s", flush=True)
        out["cases"][name] = {k: v for k, v in r.items() if k != "json"}
        return r

    one = ["simulate", "--requests", "100000", "--rate", "20", *WORKLOAD]
    if "single" not in skip:
        case("single_replica_100k", one)
        if a.baseline:
            case("single_replica_100k_baseline", one, base=a.baseline)
    fleet = ["simulate", "--rate", "1000", "--replicas", "1000", *WORKLOAD, "--stream"]
    if "rr" not in skip:
        case("fleet_round_robin", [*fleet, "--requests", str(a.fleet_requests)])
    for w in [int(x) for x in a.scale_workers.split(",") if x]:
        case(f"fleet_round_robin_workers_{w}",
             [*fleet, "--requests", str(a.fleet_requests), "--workers", str(w)])
    if "lo" not in skip:
        case("fleet_least_outstanding",
             [*fleet, "--requests", str(a.lo_requests), "--router", "least-outstanding"])
        if a.baseline:   # the old loop costs ~1.7 ms a request: compare at 10k
            lo10k = [*fleet, "--requests", "10000", "--router", "least-outstanding"]
            case("fleet_least_outstanding_10k", lo10k)
            case("fleet_least_outstanding_10k_baseline", lo10k, base=a.baseline)
    if "dynamic" not in skip:   # closed-loop users; P/D pools (hand-offs), batch and streamed
        case("closed_loop_100k",
             ["simulate", "--concurrency", "256", "--think-time", "exponential:mean=2",
              *WORKLOAD, "--requests", "100000", "--replicas", "8", "--router",
              "least-outstanding"])
        pd = ["simulate", "--rate", "1000", "--pd", "300:700", "--router", "least-outstanding",
              *WORKLOAD]
        case("pd_batch_100k", [*pd, "--requests", "100000"])
        case("pd_stream_1m", [*pd, "--requests", "1000000", "--stream"])
    if a.bar_requests:
        case("bar_round_robin_workers_2",
             [*fleet, "--requests", str(a.bar_requests), "--workers", "2"])
        case("bar_least_outstanding",
             [*fleet, "--requests", str(a.bar_lo_requests or a.bar_requests), "--router",
              "least-outstanding"])
    if "sketch" not in skip:
        base = ["simulate", "--requests", "20000", "--rate", "200", "--replicas", "10",
                *WORKLOAD, "--stream"]
        ex = case("sketch_check_exact", base)["json"]
        sk = case("sketch_check_sketch", [*base, "--exact-max", "0"])["json"]
        worst = 0.0
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            for p in ("p50", "p90", "p95", "p99", "p99.9"):
                e, s = pct(ex, key, p), pct(sk, key, p)
                worst = max(worst, abs(s - e) / e)
        out["sketch_max_relative_error"] = worst
        out["sketch_stated_relative_error"] = 0.01
        print(f"sketch vs exact: worst relative error {worst:.4%} (stated 1%)")
    if "shards" not in skip:
        base = ["simulate", "--requests", "20000", "--rate", "200", "--replicas", "16",
                *WORKLOAD, "--stream"]
        single = case("shards_1", base)["json"]
        for w in (2, 4):
            r = case(f"shards_processes_{w}", [*base, "--workers", str(w)])["json"]
            assert r["latency"]["ttft_ms"]["percentiles"] == \
                single["latency"]["ttft_ms"]["percentiles"]
        try:
            import ray  # noqa: F401

            r = case("shards_ray_local_2", [*base, "--ray", "local", "--workers", "2"])["json"]
            same = all(r["latency"][k]["percentiles"] == single["latency"][k]["percentiles"]
                       for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"))
            out["ray_equals_single_process"] = same
            print(f"ray (local, 2 workers) percentiles equal to single process: {same}")
        except ImportError:
            out["ray_equals_single_process"] = "ray not installed"
    Path(a.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
