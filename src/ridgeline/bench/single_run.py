"""One benchmark run, end to end: probe, warm up, load, trace, outcome.

>>> from ridgeline.bench.single_run import BenchConfig, run_bench   # doctest: +SKIP
>>> cfg = BenchConfig(endpoint=EndpointConfig("http://127.0.0.1:8000", "m"),
...                   load=LoadSpec(concurrency=8, arrival=None, requests=100),
...                   trace_path="out.jsonl")                 # doctest: +SKIP
>>> run_bench(cfg).trace_path                               # doctest: +SKIP
PosixPath('out.jsonl')

The trace is the one format (`ridgeline.trace.schema`): header with the endpoint, load
pattern, dataset and seed; one line per request, written and flushed the moment it
finishes; a footer when the run ends (absent only if the process is killed).

Time origin: t = 0 is the moment the measured load starts, after warm-up; `sent_s`,
`scheduled_s`, `event_times_s` and `end_s` are `time.perf_counter()` seconds since then.
The header's `start_time_unix_s` anchors t = 0 to the wall clock and `t0_perf_counter_s`
gives the raw perf_counter value of t = 0 (same clock as any other process on the host).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.bench.client import (
    BenchRequest,
    EndpointConfig,
    ServerInfo,
    probe_endpoint,
    run_loop,
)
from ridgeline.bench.dataset import DatasetSpec, build_requests, exact_text
from ridgeline.bench.load import LoadSpec, RequestSource, plan_source, pool_size
from ridgeline.bench.load_loop import RunOptions, RunStats, run_load
from ridgeline.bench.multiprocess import make_jobs, run_workers
from ridgeline.bench.multiturn import MultiTurnSpec, plan_conversations, run_conversations
from ridgeline.bench.progress import LiveProgress
from ridgeline.bench.prompts import CacheWatch, PromptTagger, new_prompt_nonce, text_rng
from ridgeline.bench.ray_workers import run_ray
from ridgeline.bench.replay import ReplayTrace, replay_requests
from ridgeline.bench.telemetry import TelemetryConfig, TelemetrySampler
from ridgeline.bench.tokens import Tokenizer, load_tokenizer
from ridgeline.errors import RidgelineError
from ridgeline.trace.schema import TraceHeader
from ridgeline.trace.writer import TraceWriter
from ridgeline.workload.lengths import LengthDistribution, parse_lengths
from ridgeline.workload.streams import workload_streams


@dataclass
class BenchConfig:
    """Everything a run needs. Lengths use the `simulate` syntax (see workload.lengths)."""

    endpoint: EndpointConfig
    load: LoadSpec
    trace_path: str | Path = "bench.jsonl"
    dataset: DatasetSpec = field(default_factory=lambda: DatasetSpec("synthetic"))
    prompt: LengthDistribution = field(
        default_factory=lambda: parse_lengths("fixed:256", "--prompt"))
    output: LengthDistribution | None = None
    prefix_groups: int = 0
    prefix_tokens: int = 0
    tokenizer: str | None = None
    seed: int = 0
    grace_s: float = 10.0
    max_error_rate: float | None = None
    workers: int = 1
    ray_address: str | None = None
    progress: bool = False
    header_extra: dict[str, Any] = field(default_factory=dict)
    # Unique prompts (bench/prompts.py): texts keyed on (seed, nonce, point); None = random.
    prompt_nonce: int | None = None
    point_index: int = 0
    # Server /metrics and NVML sampling during the run (bench/telemetry.py); off by default
    # for library callers, on for the command.
    telemetry: TelemetryConfig = field(default_factory=lambda: TelemetryConfig(enabled=False))
    # `--replay`: arrival times and lengths from a production trace (bench/replay.py).
    replay: ReplayTrace | None = None
    # `--multi-turn`: conversations whose turns carry their history (bench/multiturn.py).
    multi_turn: MultiTurnSpec | None = None
    # AIPerf's --request-cancellation-rate (percent of requests) and -delay (seconds).
    cancel_rate_pct: float = 0.0
    cancel_delay_s: float = 0.0
    # `--slo` texts: recorded in the trace header, so `report`/`advise` judge by them.
    slos: list[str] = field(default_factory=list)


@dataclass
class BenchOutcome:
    trace_path: Path
    stats: RunStats
    server: ServerInfo
    interrupted: bool = False
    aborted: str | None = None
    duration_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> int:
        return self.stats.finished - self.stats.errors - self.stats.cutoff

    @property
    def failed(self) -> bool:
        """A real failure: aborted, or nothing succeeded although requests were sent."""
        if self.aborted:
            return True
        return self.ok == 0 and not self.interrupted


def lag_note(lags_s: list[float]) -> str:
    """One line on client lag (send time minus scheduled/admitted time)."""
    if not lags_s:
        return "client lag: no requests sent"
    arr = np.asarray(lags_s) * 1e3
    p50, p99 = np.percentile(arr, [50, 99])
    return (f"client lag (sent - scheduled): p50 {p50:.3f} ms, p99 {p99:.3f} ms, "
            f"max {arr.max():.3f} ms over {arr.size} requests")


def _warn_stderr(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr, flush=True)


def _header(cfg: BenchConfig, info: ServerInfo, t0_perf: float, n_pool: int,
            telemetry: dict[str, Any] | None = None) -> TraceHeader:
    ep = cfg.endpoint
    load = cfg.load.describe()
    load["workers"] = cfg.workers
    if cfg.ray_address:
        load["ray"] = cfg.ray_address
    dataset = cfg.dataset.describe()
    if cfg.dataset.kind == "synthetic":
        dataset["prompt"] = cfg.prompt.spec
        if cfg.prefix_groups:
            dataset["prefix_groups"] = cfg.prefix_groups
            dataset["prefix_tokens"] = cfg.prefix_tokens
    dataset["output"] = cfg.output.spec if cfg.output is not None else "from dataset"
    dataset["distinct_prompts"] = n_pool
    dataset["prompt_reuse"] = "prefix-groups" if cfg.prefix_groups else "none"
    if cfg.dataset.kind == "sonnet" and cfg.dataset.prefix_tokens:
        dataset["prompt_reuse"] = "sonnet prefix"  # vLLM's sonnet shares its first lines
    if cfg.multi_turn is not None:
        dataset["prompt_reuse"] = "multi-turn"
        dataset["multi_turn"] = cfg.multi_turn.describe()
    if cfg.replay is not None:
        dataset = {**cfg.replay.describe(), "distinct_prompts": n_pool,
                   "prompt_reuse": "trace hash_ids" if cfg.replay.hash_ids else
                   "prefix-groups" if cfg.replay.prefix_group else "none"}
    dataset["prompt_nonce"] = cfg.prompt_nonce
    dataset["point_index"] = cfg.point_index
    unix_now, perf_now = time.time(), time.perf_counter()
    extra = dict(cfg.header_extra)
    if telemetry is not None:
        extra["telemetry"] = telemetry
    if info.self_description:
        extra["engine_self_description"] = info.self_description
    header = TraceHeader(
        source="bench",
        clock="perf_counter",
        start_time_unix_s=unix_now - (perf_now - t0_perf),
        model=ep.model,
        hardware=extra.pop("hardware", None),
        engine=extra.pop("engine", None) or info.server,
        engine_version=extra.pop("engine_version", None) or info.version,
        engine_config={
            "base_url": ep.root_url, "api": ep.api, "stream": ep.stream,
            "ignore_eos": ep.ignore_eos,
            "min_tokens": ep.min_tokens, "temperature": ep.temperature,
            "timeout_s": ep.timeout_s, "stall_timeout_s": ep.stall_timeout_s,
            "include_usage": ep.include_usage, "tokenizer": cfg.tokenizer,
            "served_models": info.models[:20],
        },
        load=load,
        dataset=dataset,
        seed=cfg.seed,
        slos=list(cfg.slos),
        has_event_times=True,
        has_scheduled_times=cfg.load.arrival is not None,
        t0_perf_counter_s=t0_perf,
        bench={
            "client": "ridgeline bench (aiohttp)",
            "output_event": "a chunk with non-empty text/content/reasoning_content, "
                            "timestamped when the network read that completed it returned",
            "warmup_requests_excluded": cfg.load.warmup,
            "output_tokens": "server usage, else tokenizer, else one per chunk "
                             "(token_count_source per request)",
            "clock_sync": "one host: perf_counter (CLOCK_MONOTONIC) is shared by all worker "
                          "processes" if not cfg.ray_address else "ray: see footer notes",
        },
        **extra,
    )
    return header


def plan_requests(cfg: BenchConfig, tok: Tokenizer | None = None
                  ) -> tuple[list[BenchRequest], RequestSource]:
    """The run's prompt pool and request source, before anything is sent.

    The shared workload streams (`ridgeline.workload.streams`) make a synthetic run's
    lengths and schedule identical to `ridgeline simulate` with the same specs and seed.
    """
    streams = workload_streams(cfg.seed)
    nonce = cfg.prompt_nonce if cfg.prompt_nonce is not None else 0
    if cfg.replay is not None:
        n = min(cfg.load.requests or len(cfg.replay.times_s), len(cfg.replay.times_s))
        pool = replay_requests(cfg.replay, n, nonce, tok)
        return pool, plan_source(cfg.load, pool, streams.arrivals)
    pool = build_requests(cfg.dataset, pool_size(cfg.load), cfg.prompt, cfg.output,
                          streams.lengths, prefix_groups=cfg.prefix_groups,
                          prefix_tokens=cfg.prefix_tokens, tokenizer=tok,
                          text_rng=text_rng(cfg.seed, nonce, cfg.point_index))
    tagger = PromptTagger(nonce, cfg.point_index,
                          "replace" if cfg.dataset.kind in ("synthetic", "sonnet") else "prefix")
    return pool, plan_source(cfg.load, pool, streams.arrivals, tagger)


def run_bench(cfg: BenchConfig, *, warn: Callable[[str], None] = _warn_stderr,
              stop_check: Callable[[], bool] | None = None,
              on_start: Callable[[BenchConfig], None] | None = None) -> BenchOutcome:
    """Run one load point and write its trace. Bad input raises RidgelineError.

    `on_start(cfg)` is called once the endpoint answered and the workload is planned, just
    before the first request (cfg then names the model the server chose, if any).
    """
    tok = load_tokenizer(cfg.tokenizer)
    if cfg.prompt_nonce is None:
        cfg = BenchConfig(**{**cfg.__dict__, "prompt_nonce": new_prompt_nonce()})
    info = run_loop(probe_endpoint(cfg.endpoint))
    ep = cfg.endpoint
    if not ep.model:
        if not info.models:
            raise RidgelineError("--model: the server lists no models; give --model")
        ep = EndpointConfig(**{**ep.__dict__, "model": info.models[0]})
        cfg = BenchConfig(**{**cfg.__dict__, "endpoint": ep})
    elif info.models and ep.model not in info.models:
        warn(f"model {ep.model!r} is not in the server's /v1/models list {info.models[:5]}")

    pool, source = plan_requests(cfg, tok)
    if on_start is not None:
        on_start(cfg)
    warm = build_requests(cfg.dataset, cfg.load.warmup, cfg.prompt, cfg.output,
                          np.random.default_rng(cfg.seed + 1), tokenizer=tok,
                          id_prefix="warmup-",
                          text_rng=text_rng(cfg.seed + 1, cfg.prompt_nonce or 0,
                                            cfg.point_index)) if cfg.load.warmup else []
    options = RunOptions(grace_s=cfg.grace_s, max_error_rate=cfg.max_error_rate,
                         duration_s=cfg.load.duration_s,
                         cancel_fraction=cfg.cancel_rate_pct / 100.0,
                         cancel_delay_s=cfg.cancel_delay_s,
                         cancel_seed=cfg.seed * 7919 + cfg.point_index)
    open_loop = cfg.load.arrival is not None
    total = len(source) if len(source) < 2**62 else None
    writer_box: list[TraceWriter] = []
    progress = LiveProgress(total=total, enabled=cfg.progress)

    sampler = TelemetrySampler(cfg.telemetry, ep.root_url, cfg.trace_path, warn)

    def open_trace(t0_perf: float) -> None:
        writer_box.append(TraceWriter(cfg.trace_path, _header(cfg, info, t0_perf, len(pool),
                                                              sampler.header())))

    cache = CacheWatch(asked=bool(cfg.prefix_groups or cfg.multi_turn or (
        cfg.replay is not None and (cfg.replay.hash_ids or cfg.replay.prefix_group)) or (
        cfg.dataset.kind == "sonnet" and cfg.dataset.prefix_tokens)))

    def emit(rec: dict) -> None:
        writer_box[0].write_request(rec)
        progress.record(rec)
        cache.record(rec)

    t_start = time.perf_counter()
    sampler.start()
    try:
        with progress:
            if cfg.workers > 1 or cfg.ray_address:
                stats, t0, n_signals = _run_distributed(cfg, ep, source, warm, options,
                                                        open_loop, open_trace, emit, progress,
                                                        warn, tok)
            else:
                main = _multi_turn_main(cfg, ep, tok, emit) if cfg.multi_turn else None
                stats, t0, n_signals = run_loop(_run_single(
                    ep, source, warm, options, open_loop, cfg.load.concurrency, open_trace,
                    emit, progress, warn, tok, stop_check, main))
    finally:
        sampler.stop()
    if not writer_box:  # interrupted during warm-up: still leave a valid, empty trace
        open_trace(time.perf_counter())
    interrupted = n_signals > 0
    end_s = time.perf_counter() - t0
    notes = [lag_note(stats.lags_s), *stats.notes]
    if sampler.note():
        notes.append(sampler.note())  # type: ignore[arg-type]
    cache_warning = cache.warning()
    if cache_warning:
        warn(cache_warning)
        notes.append(cache_warning)
    if stats.aborted:
        notes.append(f"aborted: {stats.aborted}")
    if interrupted:
        notes.append("stopped by a signal; requests still streaming after the grace period "
                     "are recorded with status 'cutoff'")
    writer_box[0].close(end_s, interrupted=interrupted or bool(stats.aborted), notes=notes)
    lag_p99 = float(np.percentile(stats.lags_s, 99)) if stats.lags_s else 0.0
    if lag_p99 > 0.01:
        warn(f"client lag p99 {lag_p99 * 1e3:.1f} ms: the client was late sending; "
             "latencies include that delay only in queue_ms, but the load was lighter than "
             "asked")
    return BenchOutcome(Path(cfg.trace_path), stats, info, interrupted, stats.aborted,
                        time.perf_counter() - t_start, notes)


async def _run_single(ep: EndpointConfig, source: RequestSource, warm: list, options: RunOptions,
                      open_loop: bool, concurrency: int | None,
                      open_trace: Callable[[float], None], emit: Callable[[dict], None],
                      progress: LiveProgress, warn: Callable[[str], None], tok: Any,
                      stop_check: Callable[[], bool] | None, main: Any = None
                      ) -> tuple[RunStats, float, int]:
    loop = asyncio.get_running_loop()
    stop, hard = asyncio.Event(), asyncio.Event()
    signals = [0]

    def on_signal() -> None:
        signals[0] += 1
        if signals[0] > 1:
            hard.set()
            warn("second interrupt: cutting off requests in flight now")
        else:
            warn(f"interrupt: no new requests; waiting up to {options.grace_s:g} s for the "
                 "ones in flight (interrupt again to cut them off now)")
        stop.set()

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal)
            installed.append(sig)
    watcher = None
    if stop_check is not None:
        async def watch() -> None:
            while not stop_check():
                await asyncio.sleep(0.05)
            on_signal()
        watcher = asyncio.ensure_future(watch())
    stats = RunStats()

    async def tick() -> None:
        while True:
            progress.in_flight = stats.in_flight
            await asyncio.sleep(0.25)

    ticker = asyncio.ensure_future(tick())
    try:
        if warm:
            warm_source = RequestSource(warm, None, None).frozen()
            await run_load(ep, warm_source, t0_perf=time.perf_counter(),
                           concurrency=min(len(warm), concurrency or 8), open_loop=False,
                           emit=lambda rec: None, stop=stop, hard_stop=hard,
                           options=RunOptions(grace_s=0.0), tokenizer=tok)
        t0 = time.perf_counter()
        open_trace(t0)
        if main is not None and not stop.is_set():  # multi-turn conversations
            await main(t0, stop, stats)
        elif not stop.is_set():
            await run_load(ep, source, t0_perf=t0, concurrency=concurrency,
                           open_loop=open_loop, emit=emit, stop=stop, hard_stop=hard,
                           options=options, tokenizer=tok, warn=warn, stats=stats)
    finally:
        ticker.cancel()
        if watcher is not None:
            watcher.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)
    return stats, t0, signals[0]


def _multi_turn_main(cfg: BenchConfig, ep: EndpointConfig, tok: Any,
                     emit: Callable[[dict], None]) -> Any:
    """The load of a multi-turn run (bench/multiturn.py), run where run_load would run."""
    assert cfg.multi_turn is not None and cfg.load.requests is not None
    n = cfg.load.requests
    streams = workload_streams(cfg.seed)
    msg_lens = cfg.prompt.sample(n, streams.lengths)
    out_lens = (cfg.output or parse_lengths("fixed:256", "--output")).sample(n, streams.lengths)
    rng = text_rng(cfg.seed, cfg.prompt_nonce or 0, cfg.point_index)
    convs = plan_conversations(n, cfg.multi_turn.turns, msg_lens, out_lens,
                               lambda k: exact_text(k, rng, tok))

    async def main(t0: float, stop: asyncio.Event, stats: RunStats) -> None:
        await run_conversations(ep, convs, cfg.load.concurrency or 1, cfg.multi_turn.think,
                                streams.think, t0, emit, stop, tok, stats)

    return main


def _run_distributed(cfg: BenchConfig, ep: EndpointConfig, source: RequestSource, warm: list,
                     options: RunOptions, open_loop: bool, open_trace: Callable[[float], None],
                     emit: Callable[[dict], None], progress: LiveProgress,
                     warn: Callable[[str], None], tok: Any) -> tuple[RunStats, float, int]:
    if warm:
        stop = asyncio.Event()
        run_loop(run_load(ep, RequestSource(warm, None, None).frozen(),
                             t0_perf=time.perf_counter(),
                             concurrency=min(len(warm), cfg.load.concurrency or 8),
                             open_loop=False, emit=lambda rec: None, stop=stop,
                             options=RunOptions(grace_s=0.0), tokenizer=tok))
    n = max(cfg.workers, 1)
    jobs = make_jobs(ep, source, n, cfg.load.concurrency, open_loop, options, cfg.tokenizer)

    def set_inflight(k: int) -> None:
        progress.in_flight = k

    if cfg.ray_address:
        return run_ray(jobs, emit, address=cfg.ray_address, warn=warn, on_start=open_trace,
                       on_inflight=set_inflight)
    return run_workers(jobs, emit, warn=warn, on_start=open_trace, on_inflight=set_inflight)


__all__ = ["BenchConfig", "BenchOutcome", "lag_note", "run_bench"]
