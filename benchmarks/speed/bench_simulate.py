"""Benchmark `ridgeline simulate`: simulated requests per wall-second and peak memory.

    .venv/bin/python benchmarks/speed/bench_simulate.py [--sizes 10000,100000] [--repeat 3]
        [--skip-vidur]

Workload (ShareGPT-like, without the dataset): prompt lengths lognormal mean 250 tokens,
sigma 1.0 (heavy tail), capped at 4096; output lengths lognormal mean 200, sigma 0.8, capped at
2048; Poisson arrivals at rho = 0.8 of the simulated saturation throughput (measured first,
with every request arriving at once). Llama-3.1-8B on one H100-SXM, bf16, vLLM V1 defaults
(max_num_seqs 256, max_num_batched_tokens 8192, chunked prefill, block 16, 90% memory).

Each size runs in a fresh child process, so its peak RSS (ru_maxrss) is its own. "sim" is the
simulation proper (the engine(s) and event loop, producing every request's token times in
compact form); "trace+analyze" adds building the columnar trace and running `analyze`. The
machine may be shared: each run records its CPU time and the load average, and with
`--repeat N` each configuration runs N times (fresh processes) and the fastest is reported
(all wall times are kept).

`--command` (the speed bar: ">= 40,000 requests per wall-second for 100k requests, as a
whole command") times the command itself, `ridgeline simulate -n N --rate R` (default 100,000
at 20 req/s, the defaults for everything else; `--command-json` adds `--json`), start-up,
workload, simulation, analysis, printing and exit included. Each `--ridgeline PATH`
(repeatable; default the one beside this Python) runs in turn, A B A B ..., `--repeat` times,
each from a fresh helper process so that its peak RSS (ru_maxrss of RUSAGE_CHILDREN) is its
own; reported per run: wall, CPU (user + sys), peak RSS, the 1-minute load average before,
and the SHA-256 of stdout with the two wall-clock figures masked (white space collapsed: the
figures' digits move where rich wraps the line), the same for every tree that prints the same:

    .venv/bin/python benchmarks/speed/bench_simulate.py --command --repeat 5 \
        --ridgeline /work/main/.venv/bin/ridgeline --ridgeline .venv/bin/ridgeline

Vidur is tried in a throwaway virtualenv under /tmp (never a project dependency); what happens
is recorded. Its published/measured speed on a 2-core machine (PEERS.md): 460-950 simulated
requests per wall-second (4,000 Poisson requests at 4 QPS, Llama-2-7B on A100), so the same
workload is also run here on ridgeline for a like-for-like figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

PROMPT = "lognormal:mean=250,sigma=1.0,max=4096"
OUTPUT = "lognormal:mean=200,sigma=0.8,max=2048"
VIDUR_VENV = Path("/tmp/ridgeline-bench-vidur-venv")


def _setup(model: str, hardware: str):
    from ridgeline.perf.roofline_step import RooflineStepTime
    from ridgeline.sim.engine import EngineConfig

    step_model = RooflineStepTime.from_names(model=model, hardware=hardware)
    config = EngineConfig(num_kv_blocks=step_model.kv_capacity_tokens(0.9) // 16,
                          enable_prefix_caching=True)
    return step_model, config


def capacity_req_s(model: str, hardware: str, n: int = 3000) -> float:
    import numpy as np

    from ridgeline.sim.event_loop import simulate
    from ridgeline.sim.workload import build_workload

    step_model, config = _setup(model, hardware)
    wl, _, _ = build_workload(n, PROMPT, OUTPUT, rate_req_s=1.0, seed=0)
    wl.arrival_s = np.zeros(n)
    res = simulate(wl, config, step_model)
    return n / float(np.nanmax(res.end_s))


def child(n: int, rate: float, mode: str, model: str, hardware: str, prompt: str,
          output: str, core: str = "auto", loop: str = "auto", replicas: int = 1,
          router: str = "round-robin") -> dict:
    """One measured run (in its own process). `core`: "auto" (the C core where it applies) or
    "python"; `loop` (the Python engine's loop over replicas): "auto", "scan" (no heap) or
    "heap" (no lazy advance)."""
    if core == "python":
        os.environ["RIDGELINE_SIM_CORE"] = "python"
    from ridgeline.metrics.analysis import analyze
    from ridgeline.sim import event_loop
    from ridgeline.sim.cluster import ClusterConfig
    from ridgeline.sim.event_loop import simulate
    from ridgeline.sim.workload import build_workload
    from ridgeline.trace.schema import TraceHeader

    if loop == "scan":
        event_loop.HEAP_MIN_REPLICAS = 1 << 30
    elif loop == "heap":
        event_loop.LAZY_ROUTERS = frozenset()
    step_model, config = _setup(model, hardware)
    wl, _, _ = build_workload(n, prompt, output, rate_req_s=rate, seed=1)
    cluster = ClusterConfig(replicas=replicas, router=router)
    rss_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    load = os.getloadavg()
    c0 = time.process_time()
    t0 = time.perf_counter()
    res = simulate(wl, config, step_model, cluster, mode=mode)
    t1 = time.perf_counter()
    c1 = time.process_time()
    rss_sim_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = analyze(res.to_trace(TraceHeader(source="simulate")), seed=0)
    t2 = time.perf_counter()
    rss_all_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "requests": n, "rate_req_s": rate, "mode": mode, "core": core, "loop": loop,
        "replicas": replicas, "router": router,
        "sim_wall_s": t1 - t0, "sim_req_per_wall_s": n / (t1 - t0),
        "sim_cpu_s": c1 - c0, "sim_req_per_cpu_s": n / (c1 - c0),
        "loadavg_1m_before": load[0],
        "trace_analyze_wall_s": t2 - t1,
        "end_to_end_req_per_wall_s": n / (t2 - t0),
        "peak_rss_before_sim_mib": rss_before_kib / 1024,
        "peak_rss_after_sim_mib": rss_sim_kib / 1024,
        "peak_rss_after_analyze_mib": rss_all_kib / 1024,
        "engine_steps": int(res.timeline["end_s"].size),
        "output_tokens": int(res.tokens_out.sum()),
        "preemptions": int(res.preemptions.sum()),
        "ttft_p99_ms": result.latency["ttft_ms"].percentiles["p99"].value,
        "throughput_req_s": result.throughput.requests_s,
    }


def forms(repeat: int, n: int, replicas: int) -> list[dict]:
    """Each form of the one scheduler on the same workload (rho 0.8 of one replica's
    capacity, times the replicas for the multi-replica rows), so each form's speed can be set
    against the one it would fall back to: the C core against the Python engine's
    fast-forward, the fast-forward against the step-by-step reference, and over many
    replicas the lazy advance and the heap against the plain scan."""
    model, hw = "llama-3.1-8b", "h100-sxm"
    cap = capacity_req_s(model, hw)
    base = dict(model=model, hardware=hw, prompt=PROMPT, output=OUTPUT)
    rate1 = round(0.8 * cap, 2)
    plan = [
        ("C core", dict(n=n, rate=rate1, mode="fast")),
        ("Python fast-forward", dict(n=n, rate=rate1, mode="fast", core="python")),
        ("Python step (reference)", dict(n=n, rate=rate1, mode="step", core="python")),
    ]
    rate_r = round(0.8 * cap * replicas, 2)
    for router in ("least-outstanding", "least-kv"):
        multi = dict(n=n, rate=rate_r, mode="fast", core="python", replicas=replicas,
                     router=router)
        if router == "least-outstanding":
            plan.append((f"{replicas} replicas {router}: lazy advance", dict(multi)))
        plan.append((f"{replicas} replicas {router}: heap", dict(multi, loop="heap")))
        plan.append((f"{replicas} replicas {router}: scan", dict(multi, loop="scan")))
        plan.append((f"{replicas} replicas {router}: C core", dict(multi, core="auto")))
    out = []
    for name, kw in plan:
        r = run_child(repeat, key="sim_cpu_s", **base, **kw)
        r["form"] = name
        print(f"{name:45s} {r['sim_cpu_s']:8.3f} CPU-s  {r['sim_req_per_cpu_s']:10.0f} req/CPU-s",
              flush=True)
        out.append(r)
    return out


def run_child(repeat: int = 1, key: str = "sim_wall_s", **kw) -> dict:
    """The fastest of `repeat` runs by `key`, each in a fresh process (all times kept)."""
    cmd = [sys.executable, __file__, "--child", json.dumps(kw)]
    runs = []
    for _ in range(repeat):
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    best = min(runs, key=lambda r: r[key])
    best["sim_wall_s_all"] = [round(r["sim_wall_s"], 3) for r in runs]
    best["sim_cpu_s_all"] = [round(r["sim_cpu_s"], 3) for r in runs]
    return best


def masked_sha256(stdout: bytes, json_out: bool) -> str:
    """SHA-256 (16 hex) of `simulate`'s stdout with its wall time and req/wall-s masked; the
    text with its white space collapsed first (rich wraps the summary line at the terminal
    width, and the digits of those two figures move where it wraps)."""
    import hashlib
    import re

    if json_out:
        d = json.loads(stdout)
        d["simulation"]["wall_s"] = d["simulation"]["simulated_requests_per_wall_s"] = None
        text = json.dumps(d, indent=2)
    else:
        # (the summary line reads "in 0.84 wall s; ..." now, "in 0.84 wall s (N req/s)" before)
        text = re.sub(r"in [0-9.]+ wall s( \([0-9,]+ req/s\))?", "in <wall> wall s",
                      " ".join(stdout.decode().split()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_command(exe: str, n: int, rate: float, json_out: bool) -> dict:
    """One whole `ridgeline simulate` command (call from a fresh process: ru_maxrss of
    RUSAGE_CHILDREN is the largest child so far)."""
    argv = [exe, "simulate", "-n", str(n), "--rate", f"{rate:g}", *(["--json"] if json_out
                                                                     else [])]
    load0 = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user = after.ru_utime - before.ru_utime
    system = after.ru_stime - before.ru_stime
    return {"ridgeline": exe, "requests": n, "wall_s": round(wall, 3),
            "req_per_wall_s": round(n / wall), "user_s": round(user, 2),
            "sys_s": round(system, 2), "peak_rss_mib": round(after.ru_maxrss / 1024),
            "load1_before": round(load0, 2),
            "stdout_sha256_masked": masked_sha256(proc.stdout, json_out)}


def commands(exes: list[str], repeat: int, n: int, rate: float, json_out: bool) -> list[dict]:
    """`run_command` for each executable in turn, `repeat` times (A B A B ...)."""
    runs = []
    for i in range(repeat):
        for exe in exes:
            arg = json.dumps({"exe": exe, "n": n, "rate": rate, "json_out": json_out})
            out = subprocess.run([sys.executable, __file__, "--one-command", arg],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            r["run"] = i + 1
            print(json.dumps(r), flush=True)
            runs.append(r)
    return runs


def try_vidur() -> dict:
    """Install Vidur in a throwaway venv and try the PEERS.md workload; record what happens."""
    log: dict = {"venv": str(VIDUR_VENV)}
    py = VIDUR_VENV / "bin" / "python"
    try:
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(VIDUR_VENV)], check=True,
                           capture_output=True, timeout=300)
        t0 = time.perf_counter()
        inst = subprocess.run([str(py), "-m", "pip", "install", "-q", "vidur"],
                              capture_output=True, text=True, timeout=1500)
        log["pip_install_s"] = round(time.perf_counter() - t0, 1)
        log["pip_install_rc"] = inst.returncode
        log["pip_install_tail"] = (inst.stdout + inst.stderr)[-1500:]
        if inst.returncode != 0:
            return log
        args = [str(py), "-m", "vidur.main",
                "--replica_config_device", "a100",
                "--replica_config_model_name", "meta-llama/Llama-2-7b-hf",
                "--request_generator_config_type", "synthetic",
                "--synthetic_request_generator_config_num_requests", "4000",
                "--interval_generator_config_type", "poisson",
                "--poisson_request_interval_generator_config_qps", "4",
                "--replica_scheduler_config_type", "sarathi",
                "--sarathi_scheduler_config_chunk_size", "512"]
        t0 = time.perf_counter()
        run = subprocess.run(args, capture_output=True, text=True, timeout=900,
                             cwd="/tmp", env={**os.environ, "WANDB_MODE": "disabled"})
        log["run_wall_s"] = round(time.perf_counter() - t0, 2)
        log["run_rc"] = run.returncode
        log["run_tail"] = (run.stdout + run.stderr)[-2500:]
        if run.returncode == 0:
            log["req_per_wall_s"] = 4000 / log["run_wall_s"]
    except subprocess.TimeoutExpired as exc:
        log["timeout"] = str(exc)[:300]
    except Exception as exc:  # record, never fail the benchmark because of the peer
        log["error"] = repr(exc)[:500]
    return log


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--repeat", type=int, default=1, help="runs per configuration (best kept)")
    ap.add_argument("--skip-vidur", action="store_true",
                    help="do not retry Vidur; keep the previous attempt's record from --out")
    ap.add_argument("--child")
    ap.add_argument("--out", default="benchmarks/results/bench_simulate.json")
    ap.add_argument("--command", action="store_true",
                    help="time the whole `ridgeline simulate -n N --rate R` command instead"
                    "; results to --command-out")
    ap.add_argument("--ridgeline", action="append",
                    help="with --command: a ridgeline executable (repeatable: taking turns)")
    ap.add_argument("--command-requests", type=int, default=100_000)
    ap.add_argument("--command-rate", type=float, default=20.0)
    ap.add_argument("--command-json", action="store_true", help="with --command: add --json")
    ap.add_argument("--command-out", default="benchmarks/results/bench_simulate_command.json")
    ap.add_argument("--one-command", help=argparse.SUPPRESS)
    ap.add_argument("--forms", action="store_true",
                    help="time each engine form on one workload; results to --forms-out")
    ap.add_argument("--forms-requests", type=int, default=20_000)
    ap.add_argument("--forms-replicas", type=int, default=64)
    ap.add_argument("--forms-out", default="benchmarks/results/bench_simulate_forms.json")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(**json.loads(a.child))))
        return
    if a.one_command:
        print(json.dumps(run_command(**json.loads(a.one_command))))
        return
    if a.forms:
        report = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                              "python": platform.python_version(),
                              "loadavg_at_start": os.getloadavg()},
                  "runs": forms(a.repeat, a.forms_requests, a.forms_replicas)}
        report["machine"]["loadavg_at_end"] = os.getloadavg()
        Path(a.forms_out).write_text(json.dumps(report, indent=2))
        print(f"wrote {a.forms_out}")
        return
    if a.command:
        exes = a.ridgeline or [str(Path(sys.executable).parent / "ridgeline")]
        report = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                              "python": platform.python_version()},
                  "command": f"ridgeline simulate -n {a.command_requests} --rate "
                             f"{a.command_rate:g}" + (" --json" if a.command_json else ""),
                  "runs": commands(exes, a.repeat, a.command_requests, a.command_rate,
                                   a.command_json)}
        Path(a.command_out).write_text(json.dumps(report, indent=2))
        print(f"wrote {a.command_out}")
        return
    sizes = [int(s) for s in a.sizes.split(",")]
    model, hw = "llama-3.1-8b", "h100-sxm"
    report: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                "python": platform.python_version(),
                                "loadavg_at_start": os.getloadavg()},
                    "workload": {"model": model, "hardware": hw, "prompt": PROMPT,
                                 "output": OUTPUT}}
    cap = capacity_req_s(model, hw)
    rate = round(0.8 * cap, 2)
    report["workload"].update(capacity_req_s=cap, rate_req_s=rate, rho=0.8)
    print(f"capacity {cap:.1f} req/s -> rate {rate} req/s (rho 0.8)", flush=True)
    runs = []
    for n in sizes:
        r = run_child(a.repeat, n=n, rate=rate, mode="fast", model=model, hardware=hw,
                      prompt=PROMPT, output=OUTPUT)
        print(json.dumps(r), flush=True)
        runs.append(r)
    ref = run_child(a.repeat, n=min(sizes), rate=rate, mode="step", model=model, hardware=hw,
                    prompt=PROMPT, output=OUTPUT)
    print(json.dumps(ref), flush=True)
    runs.append(ref)
    # Vidur's workload as reported in PEERS.md, on ridgeline (ridgeline's roofline step times
    # for Llama-2-7B on an A100-80GB; ShareGPT-like lengths as above).
    like = run_child(a.repeat, n=4000, rate=4.0, mode="fast", model="llama-2-7b",
                     hardware="a100-80gb", prompt=PROMPT, output=OUTPUT)
    like["note"] = "Vidur's PEERS.md workload: 4,000 Poisson requests at 4 QPS, Llama-2-7B/A100"
    print(json.dumps(like), flush=True)
    runs.append(like)
    report["runs"] = runs
    if not a.skip_vidur:
        report["vidur"] = try_vidur()
        print(json.dumps(report["vidur"])[:3000], flush=True)
    elif Path(a.out).exists() and "vidur" in (old := json.loads(Path(a.out).read_text())):
        report["vidur"] = {**old["vidur"], "note": "from an earlier run (--skip-vidur)"}
    report["machine"]["loadavg_at_end"] = os.getloadavg()
    Path(a.out).write_text(json.dumps(report, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
