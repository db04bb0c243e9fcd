"""Failure injection: `serve --failure-injection-rate PCT --failure-types a,b,...`.

A request fails with probability PCT/100 (llm-d-inference-sim's option, in percent); the
failure's type is drawn uniformly from --failure-types. Types that are an HTTP error
(llm-d-inference-sim's names, plus `unavailable`):

    rate_limit 429, invalid_request 400, context_length 400, model_not_found 404,
    server_error 500, unavailable 503

and two that only a streaming request can have (a non-streaming request draws among the
other types, and is served normally when there are none):

    stream_cut   the stream stops half-way through the output, without `data: [DONE]`
    stall        half the output, then nothing for --failure-stall-time ms, then the
                 stream ends without `data: [DONE]`

Each injected failure counts in /metrics as `ridgeline:injected_failures_total{type=...}`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from starlette.responses import JSONResponse

from ridgeline.serve.protocol import error_body
from ridgeline.serve.responses import ChunkRenderer, SSEWriter

# type -> (HTTP status, OpenAI error type, message)
STATUS_FAILURES: dict[str, tuple[int, str, str]] = {
    "rate_limit": (429, "rate_limit_exceeded",
                   "Rate limit reached for {model}: too many requests (injected failure)."),
    "invalid_request": (400, "invalid_request_error",
                        "Invalid request (injected failure)."),
    "context_length": (400, "invalid_request_error",
                       "This model's maximum context length is exceeded (injected failure)."),
    "model_not_found": (404, "NotFoundError",
                        "The model `{model}` does not exist (injected failure)."),
    "server_error": (500, "server_error", "Internal server error (injected failure)."),
    "unavailable": (503, "service_unavailable",
                    "Service unavailable; retry later (injected failure)."),
}
STREAM_FAILURES = ("stream_cut", "stall")
FAILURE_TYPES = (*STATUS_FAILURES, *STREAM_FAILURES)


def parse_failure_types(text: str) -> tuple[str, ...]:
    """`a,b,c` -> ("a", "b", "c"); raises ValueError naming the first unknown type."""
    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if not names:
        raise ValueError("no failure type given")
    for name in names:
        if name not in FAILURE_TYPES:
            raise ValueError(f"unknown failure type {name!r}")
    return names


@dataclass
class FailureInjector:
    """Draws, per request, whether it fails and how (seeded)."""

    rate_pct: float
    types: tuple[str, ...]
    stall_s: float
    rng: np.random.Generator

    def draw(self, streaming: bool) -> str | None:
        if self.rate_pct <= 0 or self.rng.random() * 100.0 >= self.rate_pct:
            return None
        allowed = self.types if streaming else tuple(
            t for t in self.types if t not in STREAM_FAILURES)
        if not allowed:
            return None
        return allowed[int(self.rng.integers(len(allowed)))]


def failure_response(kind: str, model: str) -> JSONResponse:
    """The error response of an HTTP-error failure type."""
    status, err_type, message = STATUS_FAILURES[kind]
    headers = {"retry-after": "1"} if status in (429, 503) else None
    return JSONResponse(error_body(message.format(model=model), err_type=err_type,
                                   code=str(status)), status_code=status, headers=headers)


def cut_after_chunks(output_tokens: int) -> int:
    """Chunks a cut stream still delivers: half of the output (0 for one token)."""
    return output_tokens // 2


class FailingWriter(SSEWriter):
    """An SSE writer that stops after `after_chunks` chunks: at once (stream_cut) or after
    `stall_s` of silence (stall), ending the HTTP body without `data: [DONE]`. The engine
    request is aborted at the cut, so it frees its slot as a dropped client's would."""

    def __init__(self, renderer: ChunkRenderer, on_failure: Callable[[], None],
                 after_chunks: int, stall_s: float | None) -> None:
        super().__init__(renderer, on_failure)
        self.after_chunks = after_chunks
        self.stall_s = stall_s
        self.chunks = 0
        self.cut = False

    def write(self, payload: bytes, last: bool) -> None:
        if self.cut:
            return
        if self.chunks < self.after_chunks and not last:
            self.chunks += 1
            super().write(payload, last)
            return
        self.cut = True
        loop = asyncio.get_running_loop()
        loop.call_soon(self.on_failure)  # not from inside the driver's fan-out loop
        end = super().write
        if self.stall_s:
            loop.call_later(self.stall_s, end, b"", True)
        else:
            end(b"", True)


__all__ = ["FAILURE_TYPES", "STATUS_FAILURES", "STREAM_FAILURES", "FailingWriter",
           "FailureInjector", "cut_after_chunks", "failure_response", "parse_failure_types"]
