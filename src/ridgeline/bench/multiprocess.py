"""`--workers N`: the load spread over N processes on one machine, one trace.

Each worker process runs `run_load` (its own event loop, its own connections) on its
share of the workload: worker k of N takes arrivals k, k+N, k+2N, ... (so the union is
exactly the one-process schedule) or its share of the closed-loop users. Records stream
back to the parent through a queue and the parent writes them to the trace as they come,
so a crash or a Ctrl-C loses nothing that finished.

One clock: `time.perf_counter` is the system-wide monotonic clock on Linux
(CLOCK_MONOTONIC), macOS and Windows, so every process on the machine reads the same
clock. The parent picks the run origin `t0_perf` after all workers report ready and passes
it to them; each worker subtracts that same value. No offset needs estimating.

Signals: workers ignore SIGINT (a terminal Ctrl-C reaches the whole process group); the
parent turns SIGINT/SIGTERM into a shared stop event, which each worker polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ridgeline.bench.client import EndpointConfig, run_loop
from ridgeline.bench.load import RequestSource
from ridgeline.bench.load_loop import MIN_REQUESTS_FOR_ABORT, RunOptions, RunStats, run_load
from ridgeline.bench.tokens import load_tokenizer

# How often a worker checks the shared stop events and reports its in-flight count.
POLL_S = 0.05


@dataclass
class WorkerJob:
    """Everything one worker needs (picklable)."""

    worker: int
    endpoint: EndpointConfig
    source: RequestSource
    concurrency: int | None
    open_loop: bool
    options: RunOptions
    tokenizer: str | None = None


def split_concurrency(total: int | None, n_workers: int, k: int) -> int | None:
    """Worker k's share of `total` users (the first `total % n` workers take one more)."""
    if total is None:
        return None
    return total // n_workers + (1 if k < total % n_workers else 0)


def make_jobs(endpoint: EndpointConfig, source: RequestSource, n_workers: int,
              concurrency: int | None, open_loop: bool, options: RunOptions,
              tokenizer: str | None) -> list[WorkerJob]:
    if concurrency is not None:
        n_workers = max(1, min(n_workers, concurrency))
    return [WorkerJob(k, endpoint, source.subset(k, n_workers),
                      split_concurrency(concurrency, n_workers, k), open_loop, options,
                      tokenizer) for k in range(n_workers)]


async def worker_loop(job: WorkerJob, t0_perf: float, emit: Callable[[dict], None],
                      should_stop: Callable[[], bool], hard_stop: Callable[[], bool],
                      report: Callable[[int], None] | None = None,
                      warn: Callable[[str], None] | None = None) -> RunStats:
    """Run one worker's load loop, polling external stop flags (shared by Ray actors)."""
    tok = load_tokenizer(job.tokenizer)
    stop, hard = asyncio.Event(), asyncio.Event()
    stats = RunStats()

    async def poll() -> None:
        while True:
            if should_stop():
                stop.set()
            if hard_stop():
                stop.set()
                hard.set()
            if report is not None:
                report(stats.in_flight)
            await asyncio.sleep(POLL_S)

    poller = asyncio.ensure_future(poll())
    try:
        return await run_load(job.endpoint, job.source, t0_perf=t0_perf,
                              concurrency=job.concurrency, open_loop=job.open_loop, emit=emit,
                              stop=stop, hard_stop=hard, options=job.options, tokenizer=tok,
                              warn=warn, worker=job.worker, stats=stats)
    finally:
        poller.cancel()


def _worker_main(job: WorkerJob, out: Any, stop_ev: Any, hard_ev: Any, go_ev: Any,
                 t0_value: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the parent decides when to stop
    try:
        out.put(("ready", job.worker, os.getpid()))
        go_ev.wait()
        last = [-1]

        def report(n: int) -> None:
            if n != last[0]:
                last[0] = n
                out.put(("inflight", job.worker, n))

        stats = run_loop(worker_loop(
            job, t0_value.value, lambda rec: out.put(("rec", rec)), stop_ev.is_set,
            hard_ev.is_set, report, lambda msg: out.put(("warn", job.worker, msg))))
        out.put(("done", job.worker, stats.to_dict()))
    except BaseException as exc:  # report, never hang the parent
        out.put(("fail", job.worker, f"{type(exc).__name__}: {exc}"))
        raise


@contextlib.contextmanager
def _main_hidden() -> Any:
    """Start spawned workers without re-running the caller's __main__ module.

    A worker needs only ridgeline (its job is pickled from ridgeline classes). Re-running
    the main script in each child would repeat the caller's top-level code, and a script
    without an `if __name__ == "__main__"` guard would fail to start workers at all.
    """
    import sys

    main = sys.modules.get("__main__")
    saved = {k: getattr(main, k) for k in ("__file__", "__spec__") if hasattr(main, k)}
    try:
        for k in saved:
            if k == "__spec__":
                main.__spec__ = None  # type: ignore[union-attr]
            else:
                delattr(main, k)
        yield
    finally:
        for k, v in saved.items():
            setattr(main, k, v)


class StopSignals:
    """SIGINT/SIGTERM -> stop (first) and hard stop (second) flags, in the main thread."""

    def __init__(self, on_stop: Callable[[bool], None]) -> None:
        self.count = 0
        self._on_stop = on_stop
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        self.count += 1
        self._on_stop(self.count > 1)

    def __enter__(self) -> StopSignals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread
                self._old[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def run_workers(jobs: list[WorkerJob], emit: Callable[[dict], None], *,
                warn: Callable[[str], None], on_inflight: Callable[[int], None] | None = None,
                on_start: Callable[[float], None] | None = None,
                start_timeout_s: float = 120.0) -> tuple[RunStats, float, int]:
    """Run the jobs in processes; returns (merged stats, t0_perf, signals received)."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    stop_ev, hard_ev, go_ev = ctx.Event(), ctx.Event(), ctx.Event()
    t0_value = ctx.Value("d", 0.0)
    procs = [ctx.Process(target=_worker_main, args=(job, out, stop_ev, hard_ev, go_ev, t0_value),
                         daemon=True, name=f"ridgeline-bench-worker-{job.worker}")
             for job in jobs]
    merged = RunStats()
    inflight: dict[int, int] = {}
    failures: list[str] = []
    max_rate = jobs[0].options.max_error_rate if jobs else None
    seen = [0, 0]  # finished, not ok (cutoffs excluded)

    def emit_checked(rec: dict) -> None:
        # The error-rate abort is global: one worker's view would see only its share.
        emit(rec)
        seen[0] += 1
        seen[1] += rec.get("status") not in ("ok", "cutoff")
        if (max_rate is not None and merged.aborted is None and seen[0] >= MIN_REQUESTS_FOR_ABORT
                and seen[1] > max_rate * seen[0]):
            merged.aborted = (f"error rate {seen[1]}/{seen[0]} exceeds --max-error-rate "
                              f"{max_rate}")
            stop_ev.set()
            hard_ev.set()

    def on_stop(hard: bool) -> None:
        stop_ev.set()
        if hard:
            hard_ev.set()

    with StopSignals(on_stop) as signals:
        with _main_hidden():
            for p in procs:
                p.start()
        ready = 0
        deadline = time.monotonic() + start_timeout_s
        while ready < len(procs):
            try:
                msg = out.get(timeout=0.2)
            except queue_mod.Empty:
                if any(p.exitcode is not None for p in procs) or time.monotonic() > deadline:
                    stop_ev.set()
                    go_ev.set()
                    raise RuntimeError("a bench worker process failed to start") from None
                continue
            if msg[0] == "ready":
                ready += 1
            elif msg[0] == "fail":
                failures.append(msg[2])
        t0_perf = time.perf_counter() + 0.01
        t0_value.value = t0_perf
        if on_start is not None:
            on_start(t0_perf)
        go_ev.set()
        done: set[int] = set()
        while len(done) < len(procs):
            try:
                msg = out.get(timeout=0.2)
            except queue_mod.Empty:
                dead = [p for i, p in enumerate(procs)
                        if p.exitcode is not None and i not in done]
                if dead:
                    # Drain what the dead worker queued before it died, then give up on it.
                    time.sleep(0.2)
                    with contextlib.suppress(queue_mod.Empty):
                        while True:
                            _handle(out.get_nowait(), emit_checked, merged, inflight, done,
                                    failures, warn)
                    for p in dead:
                        idx = procs.index(p)
                        if idx not in done:
                            failures.append(f"worker {idx} died (exit code {p.exitcode})")
                            done.add(idx)
                continue
            _handle(msg, emit_checked, merged, inflight, done, failures, warn)
            if on_inflight is not None and msg[0] == "inflight":
                on_inflight(sum(inflight.values()))
        for p in procs:
            p.join(timeout=5)
    for f in failures:
        warn(f"worker failure: {f}")
    if failures and merged.aborted is None:
        merged.aborted = "; ".join(failures)
    return merged, t0_perf, signals.count


def _handle(msg: tuple, emit: Callable[[dict], None], merged: RunStats, inflight: dict[int, int],
            done: set[int], failures: list[str], warn: Callable[[str], None]) -> None:
    kind = msg[0]
    if kind == "rec":
        emit(msg[1])
    elif kind == "inflight":
        inflight[msg[1]] = msg[2]
    elif kind == "warn":
        warn(f"worker {msg[1]}: {msg[2]}")
    elif kind == "done":
        done.add(msg[1])
        inflight[msg[1]] = 0
        merge_stats(merged, msg[2])
    elif kind == "fail":
        failures.append(f"worker {msg[1]}: {msg[2]}")
        done.add(msg[1])


def merge_stats(merged: RunStats, part: dict[str, Any]) -> None:
    merged.sent += part["sent"]
    merged.finished += part["finished"]
    merged.errors += part["errors"]
    merged.cutoff += part["cutoff"]
    merged.max_lag_s = max(merged.max_lag_s, part["max_lag_s"])
    merged.lags_s.extend(part["lags_s"])
    if part.get("aborted") and merged.aborted is None:
        merged.aborted = part["aborted"]


__all__ = ["WorkerJob", "make_jobs", "merge_stats", "run_workers", "split_concurrency",
           "worker_loop"]
