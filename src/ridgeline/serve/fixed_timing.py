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


class FixedTimingResponse:
    """One request served on its own timer: its chunks at t0 + TTFT, then every gap.

    `cut`: None, or (chunks to deliver, stall seconds or None) for an injected stream_cut
    or stall failure (serve/failures.py)."""

    def __init__(self, renderer: ChunkRenderer, streaming: bool, timing: FixedTiming,
                 rng: np.random.Generator, callbacks: DriverCallbacks, speed: float,
                 remote: bool = False, cut: tuple[int, float | None] | None = None,
                 on_abort: Callable[[], None] | None = None,
                 arrival_s: float | None = None) -> None:
        self.renderer = renderer
        self.streaming = streaming
        plan = renderer.plan
        self.times_s = self._schedule(plan.prompt_tokens, plan.output_tokens, timing, rng,
                                      speed, remote)
        self.callbacks = callbacks
        self.cut = cut
        self.on_abort = on_abort
        self.disconnected = False
        self.arrival_s = arrival_s   # perf_counter() when the request came in

    @staticmethod
    def _schedule(prompt_tokens: int, output_tokens: int, timing: FixedTiming,
                  rng: np.random.Generator, speed: float, remote: bool) -> list[float]:
        """Offsets from arrival of each output token, in seconds."""
        at = timing.first_token_s(prompt_tokens, rng, remote) / speed
        out = [at]
        for _ in range(output_tokens - 1):
            at += timing.gap_s(rng) / speed
            out.append(at)
        return out

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = self.arrival_s if self.arrival_s is not None else time.perf_counter()
        plan = self.renderer.plan
        stream = Stream(request_id=self.renderer.request_id, prompt_tokens=plan.prompt_tokens,
                        output_tokens=plan.output_tokens, max_tokens=plan.max_tokens,
                        arrival_emu_s=t0, scheduled_emu_s=t0)
        watcher = asyncio.get_running_loop().create_task(self._watch(receive))
        try:
            if self.streaming:
                await self._stream(send, stream, t0)
            else:
                await self._whole(send, stream, t0)
        except OSError:
            self.disconnected = True
        finally:
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
        n = len(self.times_s)
        prev: float | None = None
        for i, offset in enumerate(self.times_s):
            if self.cut is not None and i >= self.cut[0]:
                if self.cut[1]:
                    await asyncio.sleep(self.cut[1])
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            await asyncio.sleep(max(0.0, t0 + offset - time.perf_counter()))
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

        await asyncio.sleep(max(0.0, t0 + self.times_s[-1] - time.perf_counter()))
        if self.disconnected:
            return
        prev: float | None = None
        for i, offset in enumerate(self.times_s):
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


__all__ = ["FixedTiming", "FixedTimingResponse", "remote_prefill"]
