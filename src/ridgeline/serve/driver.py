"""The engine on the wall clock: one asyncio task steps `ridgeline.sim.engine.Engine`.

One scheduler (docs/architecture.md#one-scheduler): the simulator drives the engine with
a virtual clock, the emulator drives the very same engine here with the wall clock.

    loop:
        result = engine.step(start)              # the batch and its duration, from the perf model
        sleep until start + result.duration_s    # on the emulated timeline
        deliver result.emitted to the streams    # tokens become visible at the step boundary
        start = start + result.duration_s        # back-to-back steps, no drift

The emulated timeline runs `speed` times faster than the wall clock: emulated seconds =
(perf_counter() - t0) * speed. Step boundaries are computed on the emulated timeline, so
the scheduling never drifts: if the process falls behind (a slow scrape, a busy CPU),
steps run back to back until the emitted tokens catch up with the timeline, and every
late token is counted in `lag_s` (its emitted wall time minus its intended wall time).

A request joins the first step that starts at or after its arrival, as in the simulator:
the driver holds each submitted request and hands it to the engine just before the first
step whose start is not earlier than its arrival. Behind the wall clock (a busy CPU, a
late timer) the driver computes steps whose emulated start has already passed; a request
that arrived after that start must not join them, or it would be batched (and its prefill
timed) with steps it never saw in `simulate`. When the engine is idle, the next step starts
at the first held request's arrival time, as in the simulator.

The engine's per-request cost (`EngineConfig.request_overhead_s` + `request_overhead_steps`
x the mean decode step, ridgeline.sim.engine_costs) delays the delivery of each step's
tokens, as `simulate` shifts its token times: the engine steps on meanwhile, so the shift
stays out of batching exactly as in simulate. The mean decode step is the run's so far
(`LiveRequestOverhead`): the pooled gaps between each request's tokens on the engine's
timeline, before any shift; before the first gap, the step model's decode step for the batch
at hand. One shift per step keeps the tokens of one step together across requests, as
simulate's one shift per replica does. Every time the emulator reports (the callbacks behind
/metrics, the streams' token times, the lag) is the delivery time, shift included.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ridgeline.sim.engine_costs import LiveRequestOverhead
from ridgeline.sim.sequence import WAITING


class EngineLike(Protocol):
    """The part of `ridgeline.sim.engine.Engine` the driver uses (docs/engine.md)."""

    def add_request(self, request: Any) -> None: ...
    def step(self, now_s: float) -> Any: ...
    def abort_request(self, request_id: str) -> Any: ...
    def has_unfinished(self) -> bool: ...
    def stats(self) -> Any: ...


class Overloaded(Exception):
    """The waiting queue is full (or the server is draining): answer 429/503."""

    def __init__(self, reason: str, retry_after_s: float) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


class StreamWriter(Protocol):
    """Where a streaming request's output goes (the HTTP layer implements it).

    `render` runs at the start of the step that produces the tokens (while the driver
    waits for the step boundary), so at the boundary only `write` is left: the fan-out to
    hundreds of streams then costs one non-blocking socket write each.
    """

    def render(self, n_tokens: int, finish_reason: str | None) -> bytes: ...
    def render_error(self, message: str, status: int) -> bytes: ...
    def write(self, payload: bytes, last: bool) -> None: ...


@dataclass(eq=False)
class Stream:
    """One request's view of the engine: its token counts, times and end.

    A streaming request has a `writer` and receives each step's tokens at the step
    boundary; a non-streaming one awaits `done` and reads `tokens_emitted`.
    """

    request_id: str
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    arrival_emu_s: float
    writer: StreamWriter | None = None
    tokens_emitted: int = 0
    # Tokens the engine has produced (>= tokens_emitted while a shifted delivery is pending)
    # and when it produced the last one, on the engine's timeline (no shift).
    tokens_produced: int = 0
    produced_emu_s: float | None = None
    # When the engine first scheduled it (vLLM's "scheduled" event: queue time ends).
    scheduled_emu_s: float | None = None
    first_token_emu_s: float | None = None
    last_token_emu_s: float | None = None
    finished: bool = False
    error: str | None = None
    error_status: int = 500
    finish_reason: str | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    engine_request: Any = field(default=None, repr=False)  # its EngineRequest (cached_tokens)

    def _finish(self, reason: str | None, error: str | None = None, status: int = 500) -> None:
        if self.finished:
            return
        self.finished = True
        self.finish_reason = reason
        self.error = error
        self.error_status = status
        if error is not None and self.writer is not None:
            self.writer.write(self.writer.render_error(error, status), True)
        self.done.set()


@dataclass
class DriverCallbacks:
    """Hooks the app uses for metrics; all times on the emulated timeline (seconds)."""

    on_first_token: Callable[[Stream, float], None] | None = None
    on_tokens: Callable[[Stream, int, float, float | None], None] | None = None
    on_finish: Callable[[Stream, float], None] | None = None
    on_step: Callable[[Any], None] | None = None
    on_lags: Callable[[np.ndarray], None] | None = None


class LagRecorder:
    """The emulator's own timing error: emitted wall time minus intended wall time."""

    def __init__(self, capacity: int = 1 << 20) -> None:
        self._buf = np.zeros(capacity, dtype=np.float64)
        self._n = 0

    def add_many(self, lags_s: np.ndarray) -> None:
        size = self._buf.size
        idx = (self._n + np.arange(lags_s.size)) % size
        self._buf[idx] = lags_s
        self._n += int(lags_s.size)

    def samples(self) -> np.ndarray:
        return self._buf[: min(self._n, self._buf.size)].copy()

    def reset(self) -> None:
        self._n = 0


class EngineDriver:
    """Steps an engine on the wall clock and fans its tokens out to per-request streams.

    Construct inside a running event loop (or call `start()` from one). `speed` > 1 runs
    the emulated timeline faster than real time.
    """

    def __init__(
        self,
        engine: EngineLike,
        make_request: Callable[..., Any],
        *,
        speed: float = 1.0,
        max_waiting: int = 1024,
        retry_after_s: float = 1.0,
        callbacks: DriverCallbacks | None = None,
        clock: Callable[[], float] = time.perf_counter,
        spin_s: float = 0.0015,
    ) -> None:
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self.engine = engine
        self._make_request = make_request
        self.speed = float(speed)
        self.max_waiting = int(max_waiting)
        self.retry_after_s = float(retry_after_s)
        self.callbacks = callbacks or DriverCallbacks()
        self._clock = clock
        self.spin_s = float(spin_s)
        self._t0_wall_s = clock()
        self.streams: dict[str, Stream] = {}
        self._unscheduled: dict[str, Stream] = {}  # submitted, not yet in a step
        # Submitted, not yet handed to the engine (in arrival order): each waits for the
        # first step starting at or after its arrival.
        self._held: dict[str, Stream] = {}
        self._ids = itertools.count()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.draining = False
        self.lag = LagRecorder()
        self.steps = 0
        self.tokens_delivered = 0
        # The per-request cost (None: deliver at the step boundary), from the engine config
        # simulate reads too; steps wait in `_pending` until their shifted delivery time.
        cfg = getattr(engine, "config", None)
        over_s = float(getattr(cfg, "request_overhead_s", 0.0) or 0.0)
        over_steps = float(getattr(cfg, "request_overhead_steps", 0.0) or 0.0)
        self.overhead = (LiveRequestOverhead(over_s, over_steps) if over_s or over_steps
                         else None)
        self._pending: collections.deque[tuple[float, Any, list[Any]]] = collections.deque()
        self._pending_wake = asyncio.Event()
        self._last_delivery_emu_s = 0.0
        self._deliver_task: asyncio.Task[None] | None = None

    # -- time -----------------------------------------------------------------------
    def now_emu_s(self) -> float:
        """Seconds on the emulated timeline since the driver was created."""
        return (self._clock() - self._t0_wall_s) * self.speed

    def wall_of(self, emu_s: float) -> float:
        """perf_counter() value at which emulated time `emu_s` happens."""
        return self._t0_wall_s + emu_s / self.speed

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            loop = asyncio.get_running_loop()
            self._task = loop.create_task(self._run())
            if self.overhead is not None:
                self._deliver_task = loop.create_task(self._deliver_loop())

    async def stop(self) -> None:
        """End every open stream (clients get an error event) and stop the loop."""
        self.end_all("server shutting down")
        for task in (self._task, self._deliver_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._deliver_task = None
        self._pending.clear()

    def begin_drain(self) -> None:
        """Refuse new requests (503); streams in flight go on to their end."""
        self.draining = True

    def end_all(self, message: str) -> None:
        """Cleanly end every open stream with an error and free its engine state."""
        for stream in list(self.streams.values()):
            stream._finish("abort", error=message, status=503)
            self._forget(stream.request_id, abort=True)

    async def drain(self, grace_s: float) -> None:
        """Refuse new requests, let open streams finish for up to grace_s, then end them."""
        self.begin_drain()
        deadline = time.perf_counter() + grace_s
        while self.streams and time.perf_counter() < deadline:
            await asyncio.sleep(0.02)
        self.end_all("server shutting down")
        # Give the ended streams' writers a moment to send their last event and [DONE].
        await asyncio.sleep(0.05)

    # -- requests -------------------------------------------------------------------
    def submit(self, prompt_tokens: int, output_tokens: int, max_tokens: int,
               request_id: str | None = None, writer: StreamWriter | None = None,
               **engine_fields: Any) -> Stream:
        """Queue a request in the engine; raises Overloaded when the queue is full."""
        if self.draining:
            raise Overloaded("server is shutting down", self.retry_after_s)
        if self.max_waiting >= 0 and self.num_waiting() >= self.max_waiting:
            raise Overloaded(
                f"waiting queue full ({self.max_waiting} requests)", self.retry_after_s)
        rid = request_id or f"req-{next(self._ids)}"
        now = self.now_emu_s()
        stream = Stream(request_id=rid, prompt_tokens=int(prompt_tokens),
                        output_tokens=int(output_tokens), max_tokens=int(max_tokens),
                        arrival_emu_s=now, writer=writer)
        self.streams[rid] = stream
        stream.engine_request = self._make_request(
            request_id=rid, prompt_tokens=int(prompt_tokens),
            output_tokens=int(output_tokens), arrival_s=now, **engine_fields)
        self._held[rid] = stream
        self._wake.set()
        return stream

    def abort(self, request_id: str) -> None:
        """The client went away: free its slot and KV blocks now."""
        stream = self.streams.get(request_id)
        if stream is None:
            return
        stream.writer = None  # nothing more is written to a client that is gone
        stream._finish("abort")
        self._forget(request_id, abort=True)

    def _forget(self, request_id: str, *, abort: bool) -> None:
        self.streams.pop(request_id, None)
        self._unscheduled.pop(request_id, None)
        if self._held.pop(request_id, None) is not None:
            return  # never reached the engine
        if abort:
            with contextlib.suppress(KeyError, ValueError):
                self.engine.abort_request(request_id)
            self._wake.set()

    @property
    def pending_deliveries(self) -> int:
        """Steps that ran whose tokens wait for their shifted delivery time."""
        return len(self._pending)

    def num_waiting(self) -> int:
        """Requests not yet scheduled: the engine's waiting queue and those held for the
        next step."""
        return int(_stat(self.engine.stats(), "num_waiting", 0)) + len(self._held)

    def _first_held_arrival_emu_s(self) -> float:
        return next(iter(self._held.values())).arrival_emu_s

    def _admit(self, start_emu: float) -> bool:
        """Hand the engine every held request that arrived by `start_emu`; True if any."""
        held = self._held
        admitted = []
        for rid, stream in held.items():
            if stream.arrival_emu_s > start_emu:
                break  # arrival order: the rest arrived later still
            admitted.append(rid)
        for rid in admitted:
            stream = held.pop(rid)
            self._unscheduled[rid] = stream
            self.engine.add_request(stream.engine_request)
        return bool(admitted)

    # -- the loop -------------------------------------------------------------------
    async def _run(self) -> None:
        next_start_emu: float | None = None
        while True:
            busy = self.engine.has_unfinished()
            if not busy and not self._held:
                next_start_emu = None
                self._wake.clear()
                await self._wake.wait()
                continue
            if next_start_emu is None:
                # Idle until now: the step starts when the first new request arrived.
                next_start_emu = (self._first_held_arrival_emu_s() if self._held
                                  else self.now_emu_s())
            elif not busy:
                # Nothing running: the next step starts at the next arrival, not earlier.
                next_start_emu = max(next_start_emu, self._first_held_arrival_emu_s())
            start = next_start_emu
            # A request that can never fit is not "unfinished" for the engine: it waits in
            # this step's `rejected`, so the step runs whenever one was handed over.
            self._admit(start)
            result = self.engine.step(start)
            self.steps += 1
            if self._unscheduled:
                self._mark_scheduled(start)
            duration = float(result.duration_s)
            end = start + duration
            prepared = self._prepare(result)
            if duration > 0:
                await self._sleep_until(end)
            if self.overhead is None:
                self._deliver(result, prepared, end)
            else:
                self._defer(result, prepared, end)
            if duration <= 0 and not (result.emitted or result.finished
                                      or _ids(result, "rejected")):
                # Work exists but nothing can be scheduled now (blocked on KV, say):
                # wait for an abort or a new request rather than spin.
                if self._held:
                    next_start_emu = max(end, self._first_held_arrival_emu_s())
                    continue
                next_start_emu = None
                self._wake.clear()
                await self._wake.wait()
                continue
            next_start_emu = end

    def _mark_scheduled(self, start_emu: float) -> None:
        """Stamp the streams the step just admitted (no longer waiting in the scheduler)
        with the step's start: vLLM's queue time ends there, its prefill time begins."""
        seqs = getattr(getattr(self.engine, "scheduler", None), "seqs", None)
        admitted = []
        for rid, stream in self._unscheduled.items():
            seq = seqs.get(rid) if seqs is not None else None
            if seq is None or seq.state != WAITING:
                # An idle engine's step starts at the first arrival (see _run); a request
                # that arrived later but joined that step waited for nothing.
                stream.scheduled_emu_s = max(start_emu, stream.arrival_emu_s)
                admitted.append(rid)
        for rid in admitted:
            del self._unscheduled[rid]

    async def _sleep_until(self, emu_s: float) -> None:
        target = self.wall_of(emu_s)
        clock = self._clock
        delay = target - clock()
        # asyncio's timers wake up to ~1 ms late (epoll rounds its timeout up to whole
        # milliseconds), so sleep until spin_s before the boundary, then poll the clock,
        # yielding to the stream writers between polls.
        if delay > self.spin_s:
            await asyncio.sleep(delay - self.spin_s)
        # Behind the timeline, this still yields once so streams can write between steps.
        await asyncio.sleep(0)
        while clock() < target:
            await asyncio.sleep(0)

    def _defer(self, result: Any, prepared: list[Any], end_emu: float) -> None:
        """Queue a step's output for delivery at its end plus the per-request shift."""
        over = self.overhead
        assert over is not None
        gap_sum, gaps = 0.0, 0
        contexts: list[int] = []
        for stream, _n, _payload, reason in prepared:
            if stream.produced_emu_s is not None:
                gap_sum += end_emu - stream.produced_emu_s
                gaps += 1
            stream.produced_emu_s = end_emu
            if reason is None:
                contexts.append(stream.prompt_tokens + stream.tokens_produced)
        over.observe_gaps(gap_sum, gaps)
        prior = 0.0 if over.gaps else self._predicted_decode_s(contexts, result)
        # never before an earlier step's delivery (the mean moves a little between steps)
        at = max(end_emu + over.shift_s(prior), self._last_delivery_emu_s)
        self._last_delivery_emu_s = at
        self._pending.append((at, result, prepared))
        self._pending_wake.set()

    def _predicted_decode_s(self, contexts: list[int], result: Any) -> float:
        """The step model's decode step for these sequences (before any token gap exists)."""
        time_steps = getattr(self.engine, "time_steps", None)
        if not contexts or time_steps is None:
            return float(result.duration_s)
        z = np.zeros(1)
        return float(time_steps(z, z, z, z, np.array([float(len(contexts))]),
                                np.array([float(sum(contexts))]))[0])

    async def _deliver_loop(self) -> None:
        pending = self._pending
        while True:
            if not pending:
                self._pending_wake.clear()
                await self._pending_wake.wait()
                continue
            at, result, prepared = pending[0]
            await self._sleep_until(at)
            pending.popleft()
            self._deliver(result, prepared, at)

    def _prepare(self, result: Any) -> list[tuple[Stream, int, bytes | None, str | None]]:
        """Render this step's output now, while the step is "running"."""
        finished = set(result.finished)
        streams = self.streams
        prepared = []
        for rid, n in result.emitted:
            stream = streams.get(rid)
            if stream is None or n <= 0:
                continue
            reason = None
            stream.tokens_produced += int(n)
            if rid in finished:
                reason = "length" if stream.tokens_produced >= stream.max_tokens else "stop"
            writer = stream.writer
            payload = writer.render(int(n), reason) if writer is not None else None
            prepared.append((stream, int(n), payload, reason))
        return prepared

    def _deliver(self, result: Any, prepared: list[tuple[Stream, int, bytes | None,
                                                          str | None]], end_emu: float) -> None:
        """At the step boundary: write every stream's output first, then book-keep."""
        wall = self.wall_of(end_emu)
        clock = self._clock
        written_at: list[float] = []
        for stream, _n, payload, reason in prepared:
            writer = stream.writer
            if payload is not None and writer is not None and not stream.finished:
                writer.write(payload, reason is not None)
                written_at.append(clock())
        cb = self.callbacks
        if written_at:
            lags_s = np.asarray(written_at) - wall
            self.lag.add_many(lags_s)
            if cb.on_lags is not None:
                cb.on_lags(lags_s)
        if cb.on_step is not None:
            cb.on_step(result)
        for stream, n, _payload, reason in prepared:
            if stream.finished:  # aborted during the step
                continue
            first = stream.first_token_emu_s is None
            prev = stream.last_token_emu_s
            if first:
                stream.first_token_emu_s = end_emu
            stream.last_token_emu_s = end_emu
            stream.tokens_emitted += n
            self.tokens_delivered += n
            if first and cb.on_first_token is not None:
                cb.on_first_token(stream, end_emu)
            if cb.on_tokens is not None:
                cb.on_tokens(stream, n, end_emu, prev)
            if reason is not None:
                stream._finish(reason)
                if cb.on_finish is not None:
                    cb.on_finish(stream, end_emu)
                self._forget(stream.request_id, abort=False)
        streams = self.streams
        for rid in result.finished:  # finished without output this step (defensive)
            stream = streams.get(rid)
            if stream is None:
                continue
            reason = "length" if stream.tokens_emitted >= stream.max_tokens else "stop"
            if stream.writer is not None:
                stream.writer.write(stream.writer.render(0, reason), True)
            stream._finish(reason)
            if cb.on_finish is not None:
                cb.on_finish(stream, end_emu)
            self._forget(rid, abort=False)
        for rid in _ids(result, "rejected"):
            stream = streams.get(rid)
            if stream is None:
                continue
            stream._finish(
                "abort", status=400,
                error=(f"the prompt ({stream.prompt_tokens} tokens) plus its output can never "
                       "fit in the emulated KV cache"))
            self._forget(rid, abort=False)


def _ids(result: Any, name: str) -> list[str]:
    return list(getattr(result, name, None) or ())


def _stat(stats: Any, name: str, default: float) -> float:
    if isinstance(stats, dict):
        return stats.get(name, default)
    return getattr(stats, name, default)


__all__ = ["DriverCallbacks", "EngineDriver", "EngineLike", "LagRecorder", "Overloaded",
           "Stream", "StreamWriter"]
