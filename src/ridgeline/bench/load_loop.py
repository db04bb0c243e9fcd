"""The load loop of one process: send on schedule, stream, hand each finished record on.

`run_load` is the core that a single-process run, each `--workers` process and each Ray
actor all execute; they differ only in where records go (`emit`) and who says stop.

Stopping is graceful and loses nothing: once `stop` is set (Ctrl-C, SIGTERM, the duration
limit, the parent process) no new request is sent; requests in flight get `grace_s` seconds
to finish; whatever is still streaming after that is cancelled and recorded with status
"cutoff" and every event it had received. An error-rate abort cancels at once.

Open-loop honesty: a request's lag is `sent_s - max(scheduled_s, admitted_s)`, the time the
client itself was late. Lag is recorded for every request (it is derivable from the trace)
and `warn` is called when it grows past 10 ms, 100 ms and 1 s, so a slow client is not
mistaken for a slow server.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ridgeline.bench.client import (
    EndpointConfig,
    InFlight,
    make_session,
    request_body,
    stream_request,
)
from ridgeline.bench.load import RequestSource
from ridgeline.bench.tokens import Tokenizer

LAG_WARN_S = (0.01, 0.1, 1.0)
# Requests that must finish before --max-error-rate can abort the run.
MIN_REQUESTS_FOR_ABORT = 20


@dataclass
class RunOptions:
    grace_s: float = 10.0
    max_error_rate: float | None = None
    duration_s: float | None = None
    # AIPerf's request cancellation: this fraction of requests (drawn per request from
    # `cancel_seed`) is cancelled `cancel_delay_s` after it was sent, recorded as status
    # "cutoff", error_kind "cancelled", with every event received until then.
    cancel_fraction: float = 0.0
    cancel_delay_s: float = 0.0
    cancel_seed: int = 0


@dataclass
class RunStats:
    """What one load loop did (records themselves went to `emit`)."""

    sent: int = 0
    finished: int = 0
    errors: int = 0
    cutoff: int = 0
    in_flight: int = 0
    max_lag_s: float = 0.0
    lags_s: list[float] = field(default_factory=list)
    aborted: str | None = None
    notes: list[str] = field(default_factory=list)  # e.g. clock offsets of remote workers

    def to_dict(self) -> dict[str, Any]:
        return {"sent": self.sent, "finished": self.finished, "errors": self.errors,
                "cutoff": self.cutoff, "max_lag_s": self.max_lag_s, "aborted": self.aborted,
                "lags_s": self.lags_s}


async def _sleep_until(target_perf: float, stop: asyncio.Event) -> bool:
    """Sleep to a perf_counter time (sub-millisecond: the last ms is spent yielding).
    Returns False if `stop` was set first."""
    perf = time.perf_counter
    while True:
        if stop.is_set():
            return False
        delay = target_perf - perf()
        if delay <= 0:
            return True
        if delay > 0.0015:
            # The event loop's timers are about 1 ms coarse; wake early, then yield.
            try:
                await asyncio.wait_for(stop.wait(), min(delay - 0.001, 0.25))
                return False
            except asyncio.TimeoutError:
                continue
        await asyncio.sleep(0)


async def run_load(cfg: EndpointConfig, source: RequestSource, *, t0_perf: float,
                   concurrency: int | None, open_loop: bool, emit: Callable[[dict], None],
                   stop: asyncio.Event, options: RunOptions, tokenizer: Tokenizer | None = None,
                   hard_stop: asyncio.Event | None = None,
                   warn: Callable[[str], None] | None = None, worker: int | None = None,
                   stats: RunStats | None = None) -> RunStats:
    """Run one load loop until the source is exhausted, the duration ends or `stop` is set.

    `hard_stop` (a second Ctrl-C) ends the grace period at once.
    """
    loop = _LoadLoop(cfg, source, t0_perf, concurrency, open_loop, emit, stop, options,
                     tokenizer, warn, worker, stats if stats is not None else RunStats())
    perf = time.perf_counter
    deadline = t0_perf + options.duration_s if options.duration_s is not None else None
    duration_timer = None
    if deadline is not None:
        duration_timer = asyncio.get_running_loop().call_at(
            asyncio.get_running_loop().time() + max(deadline - perf(), 0.0), stop.set)

    async with make_session(cfg) as session:
        loop.session = session
        if open_loop:
            await loop.open_loop(deadline)
        else:
            await loop.closed_loop()
        # Drain: wait for in-flight requests (grace period after a stop), then cut off.
        await _drain(set(loop.live), stop, hard_stop, loop.abort, options.grace_s)
    if duration_timer is not None:
        duration_timer.cancel()
    return loop.stats


class _LoadLoop:
    """The state one `run_load` shares between its sender and its requests."""

    def __init__(self, cfg: EndpointConfig, source: RequestSource, t0_perf: float,
                 concurrency: int | None, open_loop: bool, emit: Callable[[dict], None],
                 stop: asyncio.Event, options: RunOptions, tokenizer: Tokenizer | None,
                 warn: Callable[[str], None] | None, worker: int | None,
                 stats: RunStats) -> None:
        self.cfg, self.source, self.t0_perf = cfg, source, t0_perf
        self.concurrency, self.emit, self.stop = concurrency, emit, stop
        self.options, self.tokenizer, self.warn, self.worker = options, tokenizer, warn, worker
        self.stats = stats
        self.live: dict[asyncio.Task[Any], InFlight] = {}
        # Open loop with a concurrency cap: arrivals wait for a slot. (Closed loop needs no
        # semaphore: the users themselves are the concurrency.)
        self.sem = asyncio.Semaphore(concurrency) if (open_loop and concurrency) else None
        self.warned = 0
        self.abort = asyncio.Event()
        self.cancel_rng = random.Random(options.cancel_seed * 1_000_003 + (worker or 0))
        self.session: Any = None

    def finish(self, state: InFlight) -> None:
        stats = self.stats
        stats.in_flight -= 1
        if self.sem is not None:
            self.sem.release()
        rec = state.record(worker=self.worker)
        stats.finished += 1
        if rec["status"] == "cutoff":
            stats.cutoff += 1
        elif rec["status"] != "ok":
            stats.errors += 1
        self.emit(rec)
        rate = self.options.max_error_rate
        if (rate is not None and stats.finished >= MIN_REQUESTS_FOR_ABORT
                and stats.errors > rate * stats.finished and stats.aborted is None):
            stats.aborted = (f"error rate {stats.errors}/{stats.finished} exceeds "
                             f"--max-error-rate {rate}")
            self.abort.set()
            self.stop.set()

    def note_lag(self, state: InFlight) -> None:
        stats = self.stats
        req = state.req
        ref = max(x for x in (req.scheduled_s, state.admitted_s, state.ready_s, 0.0)
                  if x is not None)
        lag = (state.sent_s or 0.0) - ref
        stats.lags_s.append(lag)
        if lag > stats.max_lag_s:
            stats.max_lag_s = lag
            while self.warned < len(LAG_WARN_S) and lag > LAG_WARN_S[self.warned]:
                if self.warn is not None:
                    self.warn(f"client lag {lag * 1e3:.1f} ms (send time minus scheduled "
                              "time): the load generator, not the server, is falling "
                              "behind; use --workers or a lower rate")
                self.warned += 1

    async def one(self, state: InFlight) -> None:
        cfg, options, t0_perf, perf = self.cfg, self.options, self.t0_perf, time.perf_counter
        body = request_body(cfg, state.req)
        cancel = (options.cancel_fraction > 0
                  and self.cancel_rng.random() < options.cancel_fraction)
        try:
            if cancel:
                await asyncio.wait_for(
                    stream_request(self.session, cfg, state, t0_perf, body),
                    options.cancel_delay_s)
            else:
                await stream_request(self.session, cfg, state, t0_perf, body)
        except asyncio.TimeoutError:  # wait_for's: stream_request handles its own timeouts
            state.status, state.error_kind = "cutoff", "cancelled"
            state.error = (f"cancelled by the client {options.cancel_delay_s:g} s after "
                           "sending (--request-cancellation-rate)")
            if state.end_s is None:
                state.end_s = perf() - t0_perf
        except asyncio.CancelledError:
            state.status, state.error_kind = "cutoff", "cutoff"
            state.error = "cut off by the client (stop or duration limit)"
            if state.end_s is None:
                state.end_s = perf() - t0_perf
            self.finish(state)
            raise
        except Exception as exc:  # a client-side bug must still leave a record
            state.fail("client", f"{type(exc).__name__}: {exc}")
            state.end_s = perf() - t0_perf
        self.note_lag(state)
        self.finish(state)

    def launch(self, state: InFlight) -> asyncio.Task[None]:
        self.stats.sent += 1
        self.stats.in_flight += 1
        task = asyncio.ensure_future(self.one(state))
        self.live[task] = state
        task.add_done_callback(lambda t: self.live.pop(t, None))
        return task

    async def open_loop(self, deadline: float | None) -> None:
        """Send each request at its scheduled time (waiting for a slot under a cap)."""
        stop, sem, perf, t0_perf = self.stop, self.sem, time.perf_counter, self.t0_perf
        i = 0
        while not stop.is_set():
            req = self.source.get(i)
            if req is None:
                break
            i += 1
            target = t0_perf + (req.scheduled_s or 0.0)
            if deadline is not None and target >= deadline:
                break
            if not await _sleep_until(target, stop):
                break
            state = InFlight(req, self.tokenizer)
            if sem is not None:
                if sem.locked():
                    acquired = asyncio.ensure_future(sem.acquire())
                    stopped = asyncio.ensure_future(stop.wait())
                    await asyncio.wait({acquired, stopped},
                                       return_when=asyncio.FIRST_COMPLETED)
                    stopped.cancel()
                    if not acquired.done():
                        acquired.cancel()
                        break
                    if stop.is_set():
                        sem.release()
                        break
                else:
                    await sem.acquire()
                state.admitted_s = perf() - t0_perf
            self.launch(state)

    async def closed_loop(self) -> None:
        """`concurrency` users, each sending its next request when the last one ends."""
        stop, perf, t0_perf = self.stop, time.perf_counter, self.t0_perf
        counter = [0]

        async def user() -> None:
            while not stop.is_set():
                req = self.source.get(counter[0])
                if req is None:
                    return
                counter[0] += 1
                state = InFlight(req, self.tokenizer)
                state.ready_s = perf() - t0_perf
                task = self.launch(state)
                # shield: cancelling a user (at stop) must not cancel its request, which
                # gets the grace period like every other request in flight.
                await asyncio.shield(task)

        users = [asyncio.ensure_future(user()) for _ in range(self.concurrency or 1)]
        stop_wait = asyncio.ensure_future(stop.wait())
        remaining: set[asyncio.Future[Any]] = set(users)
        while remaining and not stop.is_set():
            _, remaining = await asyncio.wait(remaining | {stop_wait},
                                              return_when=asyncio.FIRST_COMPLETED)
            remaining.discard(stop_wait)
        stop_wait.cancel()
        for u in users:
            u.cancel()
        for result in await asyncio.gather(*users, return_exceptions=True):
            if isinstance(result, Exception):
                raise result


async def _drain(pending: set[asyncio.Task[Any]], stop: asyncio.Event,
                 hard_stop: asyncio.Event | None, abort: asyncio.Event, grace_s: float) -> None:
    """Wait for every request; once `stop` is set, for at most `grace_s` more; then cancel
    the rest (each cancelled request records itself as "cutoff")."""
    waiters: list[asyncio.Future[Any]] = []
    try:
        stop_w = asyncio.ensure_future(stop.wait())
        waiters.append(stop_w)
        while pending and not stop.is_set():
            _, pending = await asyncio.wait(pending | {stop_w},
                                            return_when=asyncio.FIRST_COMPLETED)
            pending.discard(stop_w)
        hard = hard_stop if hard_stop is not None else asyncio.Event()
        hard_w = asyncio.ensure_future(hard.wait())
        waiters.append(hard_w)
        deadline = time.perf_counter() + (0.0 if abort.is_set() else grace_s)
        while pending and not hard.is_set():
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            _, pending = await asyncio.wait(pending | {hard_w}, timeout=left,
                                            return_when=asyncio.FIRST_COMPLETED)
            pending.discard(hard_w)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
    finally:
        for w in waiters:
            w.cancel()


__all__ = ["RunOptions", "RunStats", "run_load"]
