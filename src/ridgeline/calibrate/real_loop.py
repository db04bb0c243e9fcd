"""The whole loop on a local llama.cpp `llama-server`: probe, calibrate, bench held-out load
points, simulate them with the profile, verify. Used by `ridgeline demo --real`, the
calibration benchmark (benchmarks/real_engine/bench_calibration.py) and the integration test.

The server is project tooling (built by tools/llama_server/build.sh, models written by
`ridgeline.calibrate.gguf_model`); it is started on 127.0.0.1 and always stopped by PID.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ridgeline.bench.client import EndpointConfig
from ridgeline.bench.load import LoadSpec
from ridgeline.bench.single_run import BenchConfig, run_bench
from ridgeline.calibrate.engine import calibrate_engine
from ridgeline.calibrate.gguf_model import ensure_model
from ridgeline.calibrate.llama_server import ENV_BINARY, LlamaServer, find_llama_server
from ridgeline.calibrate.probe import ProbeDesign, term_as_interrupt
from ridgeline.calibrate.verify import verify
from ridgeline.errors import RidgelineError
from ridgeline.perf.step_time import BatchWork
from ridgeline.report.calibrate_text import print_verify
from ridgeline.sim.slots import check_log
from ridgeline.workload.arrivals import parse_arrival
from ridgeline.workload.lengths import parse_lengths


@dataclass(frozen=True)
class LoadPoint:
    """A held-out load point: closed loop at `concurrency`, or Poisson at `rate_req_s`, or
    Poisson at `capacity_fraction` of the calibrated profile's capacity."""

    label: str
    concurrency: int | None = None
    rate_req_s: float | None = None
    requests: int = 20
    capacity_fraction: float | None = None


def capacity_req_s(profile: Any, slots: int, prompt_tokens: int, output_tokens: int) -> float:
    """Saturated request rate of a llama.cpp-like engine by the profile: every request costs
    its prefill step (everyone waits) plus its share of full-batch decode steps."""
    p = prompt_tokens + 1
    t_p = float(profile.step_time_s(BatchWork(prefill_tokens=p,
                                               prefill_attn_pairs=p * (p + 1) / 2)))
    t_d = float(profile.step_time_s(BatchWork(decode_seqs=slots,
                                               decode_context_tokens=slots * (p + output_tokens
                                                                              / 2))))
    return 1.0 / (t_p + output_tokens * t_d / slots)


@dataclass
class RealLoopConfig:
    out_dir: str = "ridgeline-real"
    shape: str = "tiny"                 # gguf_model shape: tiny | membound
    slots: int = 8                      # llama-server -np
    threads: int = 2
    ctx_per_slot: int = 1024
    batches: tuple[int, ...] = (1, 2, 4, 8)
    decode_prompt_tokens: int = 32
    decode_output_tokens: int = 32
    rounds: int = 2
    context_prompt_tokens: int = 384
    prefill_tokens: tuple[int, ...] = (16, 64, 128, 256, 512)
    prefill_repeats: int = 3
    open_requests: int = 0              # the open-loop probe (0: none; the slot model
    #                                     times each layout itself)
    open_prompt_tokens: int = 64
    open_output_tokens: int = 64
    open_rate_req_s: float | None = None
    prompt: str = "fixed:64"            # held-out points' lengths
    output: str = "fixed:32"
    points: tuple[LoadPoint, ...] = (LoadPoint("closed c=3", concurrency=3, requests=15),)
    bounds: dict[str, float] = field(default_factory=dict)
    seed: int = 0


@dataclass
class RealLoopResult:
    profile_path: Path
    traces: list[Path]
    report: Any
    profile: Any
    server_log: Path | None = None
    server_pid: int | None = None
    # llama-server's LRU slot order at each point's start (None: not a slot model)
    slot_orders: list[list[int] | None] = field(default_factory=list)


def binary_or_error() -> Path:
    exe = find_llama_server()
    if exe is None:
        raise RidgelineError(f"--real: llama-server not found; build it with "
                             f"tools/llama_server/build.sh and set {ENV_BINARY}=<its path>")
    return exe


def run_real_loop(cfg: RealLoopConfig, log: Callable[[str], None] = print) -> RealLoopResult:
    """Start llama-server, calibrate on closed-loop probes, bench `cfg.points`, verify."""
    exe = binary_or_error()
    term_as_interrupt()   # a SIGTERM still stops the server (the `with` below)
    model = ensure_model(cfg.shape, seed=cfg.seed)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    design = ProbeDesign(max_batch=max(cfg.batches), batches=cfg.batches,
                         decode_prompt_tokens=cfg.decode_prompt_tokens,
                         decode_output_tokens=cfg.decode_output_tokens, rounds=cfg.rounds,
                         context_prompt_tokens=cfg.context_prompt_tokens,
                         prefill_tokens=cfg.prefill_tokens,
                         prefill_repeats=cfg.prefill_repeats,
                         open_requests=cfg.open_requests,
                         open_prompt_tokens=cfg.open_prompt_tokens,
                         open_output_tokens=cfg.open_output_tokens,
                         open_rate_req_s=cfg.open_rate_req_s, slots=cfg.slots)
    traces: list[Path] = []
    orders: list[list[int] | None] = []
    log(f"llama-server {exe} with {model.gguf_path} (-np {cfg.slots} -t {cfg.threads})")
    srv = LlamaServer(exe, model.gguf_path, n_parallel=cfg.slots, threads=cfg.threads,
                      ctx_per_slot=cfg.ctx_per_slot)
    # Not `with`: a signal during start() (before __enter__ returns) must stop it too;
    # stop() is by PID and safe to call twice.
    try:
        srv.start()
        log(f"llama-server pid {srv.proc.pid if srv.proc else '?'} at {srv.base_url}")
        endpoint = EndpointConfig(base_url=srv.base_url, model=srv.alias, timeout_s=300.0,
                                  ignore_eos=True)
        profile = calibrate_engine(endpoint, design, out / "probe", preset="llama.cpp",
                                   slots=cfg.slots,
                                   kv_capacity_tokens=cfg.slots * cfg.ctx_per_slot,
                                   config_path=str(model.config_path), seed=cfg.seed, log=log)
        profile.provenance.model = f"{model.shape.name} ({model.gguf_path.name})"
        profile_path = out / "profile.json"
        profile.save(profile_path)

        cap = capacity_req_s(profile, cfg.slots,
                             int(parse_lengths(cfg.prompt, "--prompt").mean_tokens),
                             int(parse_lengths(cfg.output, "--output").mean_tokens))
        log(f"capacity by the profile: {cap:.3g} req/s")
        for i, pt in enumerate(cfg.points):
            # The server's slot history (its log) is where the point starts: with per-slot
            # KV the probes leave the LRU cycle permuted, and the slot model needs it.
            orders.append(server_slot_order(srv.log_file, cfg.slots)
                          if profile.scheduling.slot_graphs else None)
            if pt.capacity_fraction:
                pt = LoadPoint(f"poisson {pt.capacity_fraction:.0%} cap "
                               f"({pt.capacity_fraction * cap:.3g} req/s)",
                               rate_req_s=pt.capacity_fraction * cap, requests=pt.requests)
            traces.append(bench_point(endpoint, pt, out, cfg.prompt, cfg.output,
                                      cfg.seed + 100 + i, log))
        server_log = srv.log_file
        pid = srv.proc.pid if srv.proc is not None else None
    finally:
        srv.stop()
    report = verify([str(t) for t in traces], profile, cfg.bounds, slot_orders=orders)
    return RealLoopResult(profile_path, traces, report, profile, server_log, pid, orders)


def server_slot_order(log_file: Any, slots: int) -> list[int] | None:
    """llama-server's LRU slot order now, replayed from its log (`sim.slots.check_log`);
    None when the log cannot be read."""
    import time

    time.sleep(0.2)          # the server's log thread writes the last release lines
    try:
        return check_log(Path(log_file).read_text(errors="replace").splitlines(), slots)[2]
    except (OSError, ValueError):
        return None


def bench_point(endpoint: Any, pt: LoadPoint, out: Path, prompt: str, output: str, seed: int,
                log: Callable[[str], None]) -> Path:
    """One held-out load point through the bench client (cache_prompt off for llama.cpp)."""
    ep = type(endpoint)(**{**endpoint.__dict__,
                           "extra_body": {**endpoint.extra_body, "cache_prompt": False}})
    tag = pt.label.replace(" ", "-").replace("=", "").replace("/", "")
    path = out / f"bench-{tag}.jsonl"
    arrival = parse_arrival("poisson", pt.rate_req_s) if pt.rate_req_s else None
    load = LoadSpec(concurrency=pt.concurrency, arrival=arrival, requests=pt.requests)
    log(f"bench {pt.label}: {pt.requests} requests")
    outcome = run_bench(BenchConfig(endpoint=ep, load=load, trace_path=path,
                                    prompt=parse_lengths(prompt, "--prompt"),
                                    output=parse_lengths(output, "--output"), seed=seed),
                        warn=log)
    term_as_interrupt()
    if outcome.interrupted:
        raise KeyboardInterrupt
    if outcome.failed:
        why = outcome.aborted or "no request succeeded"
        raise RidgelineError(f"bench {pt.label} failed ({why}); see {path}")
    return path


__all__ = ["LoadPoint", "RealLoopConfig", "RealLoopResult", "bench_point", "binary_or_error",
           "capacity_req_s", "run_real_loop", "server_slot_order"]


def demo_real(out_dir: str) -> None:
    """`ridgeline demo --real`: the loop on the tiny model, then the per-point table."""
    from rich.console import Console

    con = Console(highlight=False)
    cfg = RealLoopConfig(
        out_dir=out_dir, shape="tiny", slots=4, threads=1, ctx_per_slot=1024,
        batches=(1, 2, 4), decode_output_tokens=24, prefill_tokens=(16, 64, 128, 256),
        prefill_repeats=2, context_prompt_tokens=384,
        points=(LoadPoint("closed c=3", concurrency=3, requests=12),
                LoadPoint("poisson 4 req/s", rate_req_s=4.0, requests=16)))
    res = run_real_loop(cfg, log=lambda m: con.print(f"[dim]{m}[/dim]"))
    con.print(f"profile: {res.profile_path} ({len(res.profile.tokens)} probed step sizes, "
              f"attention {res.profile.per_pair_s:.3g} s/pair)")
    print_verify(res.report)
    con.print(f"traces: {', '.join(str(t) for t in res.traces)}; the server was stopped")


__all__ += ["demo_real"]
