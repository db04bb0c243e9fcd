"""Fixed latencies for unit tests (llm-d-inference-sim's options, in milliseconds).

With any of `--time-to-first-token`, `--inter-token-latency`, `--prefill-time-per-token` or
`--kv-cache-transfer-latency` given, requests bypass the engine model: each is timed on
its own, whatever the load (no batching, no queueing), as llm-d-inference-sim times them:

    TTFT = N(time_to_first_token, time_to_first_token_std_dev)
           + prefill_time_per_token x prompt tokens
    TTFT = N(kv_cache_transfer_latency, kv_cache_transfer_latency_std_dev)
           for a request whose prefill ran elsewhere
           (`"kv_transfer_params": {"do_remote_prefill": true}`, vLLM's P/D field)
    gap between tokens = N(inter_token_latency, inter_token_latency_std_dev)

A normal draw is clipped at 0; unset options are 0. Times are divided by `--speed`.

`--time-factor-under-load F` (>= 1) slows every request while others run, as
llm-d-inference-sim does: with n requests in flight each latency above (the TTFT, and each
gap when it starts) is multiplied by 1 + (F - 1) x (n - 1) / (max_num_seqs - 1), so by F
when max_num_seqs requests run (more are not queued here: the factor stops at F).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from starlette.types import Receive, Scope, Send

from ridgeline.serve.driver import DriverCallbacks, Stream
from ridgeline.serve.responses import ChunkRenderer


@dataclass(frozen=True)
class FixedTiming:
    """Per-request latencies in milliseconds (see the module docstring)."""

    time_to_first_token_ms: float = 0.0
    time_to_first_token_std_dev_ms: float = 0.0
    inter_token_latency_ms: float = 0.0
    inter_token_latency_std_dev_ms: float = 0.0
    prefill_time_per_token_ms: float = 0.0
    kv_cache_transfer_latency_ms: float = 0.0
    kv_cache_transfer_latency_std_dev_ms: float = 0.0
    time_factor_under_load: float = 1.0
    max_num_seqs: int = 1

    def load_factor(self, running: int) -> float:
        """The latency multiplier with `running` requests in flight (this one included)."""
        if self.time_factor_under_load == 1.0 or self.max_num_seqs <= 1:
            return 1.0
        share = min(max(running - 1, 0) / (self.max_num_seqs - 1), 1.0)
        return 1.0 + (self.time_factor_under_load - 1.0) * share

    def first_token_s(self, prompt_tokens: int, rng: np.random.Generator,
                      remote_prefill: bool = False) -> float:
        if remote_prefill:
            return _normal_ms(self.kv_cache_transfer_latency_ms,
                              self.kv_cache_transfer_latency_std_dev_ms, rng) / 1000.0
        base = _normal_ms(self.time_to_first_token_ms, self.time_to_first_token_std_dev_ms,
                          rng)
        return (base + self.prefill_time_per_token_ms * prompt_tokens) / 1000.0

    def gap_s(self, rng: np.random.Generator) -> float:
        return _normal_ms(self.inter_token_latency_ms, self.inter_token_latency_std_dev_ms,
                          rng) / 1000.0


def _normal_ms(mean: float, std: float, rng: np.random.Generator) -> float:
    return max(0.0, float(rng.normal(mean, std))) if std > 0 else mean


def remote_prefill(extra: dict[str, Any] | None) -> bool:
    params = (extra or {}).get("kv_transfer_params")
    return isinstance(params, dict) and params.get("do_remote_prefill") is True


class InFlight:
    """How many fixed-latency requests are being served now (for the load factor)."""

    def __init__(self) -> None:
        self.running = 0


class FixedTimingResponse:
    """One request served on its own timer: its chunks at t0 + TTFT, then every gap.

    `cut`: None, or (chunks to deliver, stall seconds or None) for an injected stream_cut
    or stall failure (serve/failures.py)."""

    def __init__(self, renderer: ChunkRenderer, streaming: bool, timing: FixedTiming,
                 rng: np.random.Generator, callbacks: DriverCallbacks, speed: float,
                 remote: bool = False, cut: tuple[int, float | None] | None = None,
                 on_abort: Callable[[], None] | None = None,
                 arrival_s: float | None = None, in_flight: InFlight | None = None
                 ) -> None:
        self.renderer = renderer
        self.streaming = streaming
        plan = renderer.plan
        self.timing = timing
        self.in_flight = in_flight if in_flight is not None else InFlight()
        # each token's latency after the previous one (the first: the TTFT), before the load
        # factor, which is read when the wait starts
        self.steps_s = self._schedule(plan.prompt_tokens, plan.output_tokens, timing, rng,
                                      speed, remote)
        self.callbacks = callbacks
        self.cut = cut
        self.on_abort = on_abort
        self.disconnected = False
        self.arrival_s = arrival_s   # perf_counter() when the request came in

    @staticmethod
    def _schedule(prompt_tokens: int, output_tokens: int, timing: FixedTiming,
                  rng: np.random.Generator, speed: float, remote: bool) -> list[float]:
        """Each output token's latency after the previous one (arrival for the first), s."""
        out = [timing.first_token_s(prompt_tokens, rng, remote) / speed]
        out.extend(timing.gap_s(rng) / speed for _ in range(output_tokens - 1))
        return out

    def _factor(self) -> float:
        return self.timing.load_factor(self.in_flight.running)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = self.arrival_s if self.arrival_s is not None else time.perf_counter()
        plan = self.renderer.plan
        stream = Stream(request_id=self.renderer.request_id, prompt_tokens=plan.prompt_tokens,
                        output_tokens=plan.output_tokens, max_tokens=plan.max_tokens,
                        arrival_emu_s=t0, scheduled_emu_s=t0)
        watcher = asyncio.get_running_loop().create_task(self._watch(receive))
        self.in_flight.running += 1
        try:
            if self.streaming:
                await self._stream(send, stream, t0)
            else:
                await self._whole(send, stream, t0)
        except OSError:
            self.disconnected = True
        finally:
            self.in_flight.running -= 1
            watcher.cancel()
            if self.disconnected and self.on_abort is not None:
                self.on_abort()

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                return

    def _account(self, stream: Stream, i: int, at_s: float, prev_s: float | None) -> None:
        cb = self.callbacks
        stream.tokens_emitted = i + 1
        if i == 0:
            stream.first_token_emu_s = at_s
            if cb.on_first_token is not None:
                cb.on_first_token(stream, at_s)
        if cb.on_tokens is not None:
            cb.on_tokens(stream, 1, at_s, prev_s)

    def _finish_reason(self, stream: Stream) -> str:
        return "length" if stream.tokens_emitted >= stream.max_tokens else "stop"

    async def _stream(self, send: Send, stream: Stream, t0: float) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-request-id", stream.request_id.encode())]})
        n = len(self.steps_s)
        prev: float | None = None
        due = t0
        for i, step_s in enumerate(self.steps_s):
            if self.cut is not None and i >= self.cut[0]:
                if self.cut[1]:
                    await asyncio.sleep(self.cut[1])
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            due += step_s * self._factor()
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            if self.disconnected:
                return
            at = time.perf_counter()
            self._account(stream, i, at, prev)
            prev = at
            last = i == n - 1
            payload = self.renderer.step(1, self._finish_reason(stream) if last else None)
            await send({"type": "http.response.body", "body": payload, "more_body": not last})
        stream.finish_reason = self._finish_reason(stream)
        if self.callbacks.on_finish is not None and prev is not None:
            self.callbacks.on_finish(stream, prev)

    async def _whole(self, send: Send, stream: Stream, t0: float) -> None:
        import json

        factor = self._factor()
        offsets = [float(x) for x in np.cumsum(self.steps_s) * factor]
        await asyncio.sleep(max(0.0, t0 + offsets[-1] - time.perf_counter()))
        if self.disconnected:
            return
        prev: float | None = None
        for i, offset in enumerate(offsets):
            self._account(stream, i, t0 + offset, prev)
            prev = t0 + offset
        stream.finish_reason = self._finish_reason(stream)
        if self.callbacks.on_finish is not None and prev is not None:
            self.callbacks.on_finish(stream, prev)
        data = json.dumps(self.renderer.whole(stream)).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
            (b"x-request-id", stream.request_id.encode())]})
        await send({"type": "http.response.body", "body": data})


__all__ = ["FixedTiming", "FixedTimingResponse", "InFlight", "remote_prefill"]
