"""OpenAI response bodies and the ASGI response bound to one engine stream.

The hot path of the emulator is the fan-out at each step boundary: hundreds of streams
receive a chunk at the same instant. So a streaming response's chunks are rendered when
the step *starts* (`ChunkRenderer.step`, called by the driver during the step), and at
the boundary the driver only calls `SSEWriter.write`, which pushes the bytes into the
socket without waking the request's task: the ASGI `send` coroutine is driven
synchronously, and only if it has to wait (a slow client's socket buffer is full) is the
rest of the send handed to a task, with later chunks queued behind it in order.
"""

from __future__ import annotations

import asyncio
import json
import types
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
from starlette.types import Receive, Scope, Send

from ridgeline.serve.driver import Stream
from ridgeline.serve.protocol import error_body
from ridgeline.serve.structured import ToolCall
from ridgeline.serve.tokenizer import FILLER_WORDS, filler_chars, filler_text

DONE = b"data: [DONE]\n\n"
# Synthetic logprobs: the sampled token at probability 0.9, the alternatives below it.
SAMPLED_LOGPROB = -0.10536051565782628  # ln 0.9


def _alternatives(token: str, k: int) -> list[tuple[str, float]]:
    """The top-k list for `token`: itself first (it was sampled), then other filler words
    at ln(0.05), ln(0.02), ... (vLLM returns the sampled token plus the top k)."""
    others = [w for w in FILLER_WORDS if w != token][: max(k - 1, 0)]
    out = [(token, SAMPLED_LOGPROB)]
    out.extend((w, float(np.log(0.05 / (i + 1)))) for i, w in enumerate(others))
    return out[: max(k, 1)]
RAW_SEND = "ridgeline.raw_send"  # scope key: the server's own, unwrapped ASGI `send`


@dataclass(frozen=True)
class Plan:
    """What one request will do in the engine, and how its stream is shaped."""

    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    include_usage: bool
    continuous_usage: bool
    # Content keys of the prompt's full KV blocks (prefix caching on), else None.
    block_hashes: tuple[int, ...] | None = None
    # `stop`: the output text ends before the stop string (its first character offset in
    # the filler text), and the request finishes with "stop".
    text_limit_chars: int | None = None
    # `n` choices (the same filler text each) and `logprobs`: None off; completions:
    # the top-k count; chat: top_logprobs (0 = the sampled token only).
    n: int = 1
    logprobs: int | None = None
    # The output's token pieces when the mode is echo or random (serve/modes.py); None:
    # the filler text.
    pieces: tuple[str, ...] | None = None
    # A synthetic tool call (chat with `tools`): the pieces are its arguments; `truncated`:
    # max_tokens cut the pieces (structured.py), so the call or JSON is incomplete.
    tool_call: ToolCall | None = None
    truncated: bool = False


class ChunkRenderer:
    """SSE chunks of one completion or chat completion, built around pre-encoded parts."""

    def __init__(self, chat: bool, request_id: str, model: str, created: int,
                 plan: Plan) -> None:
        self.chat = chat
        self.plan = plan
        self.request_id = request_id
        self.model = model
        self.created = created
        obj = "chat.completion.chunk" if chat else "text_completion"
        self.head = (f'data: {{"id":{json.dumps(request_id)},"object":"{obj}",'
                     f'"created":{created},"model":{json.dumps(model)},"choices":[')
        self.index = 0  # output tokens rendered so far
        self.chars = 0  # characters of filler text rendered so far (before any stop cut)
        self.engine_request: Any = None  # set after submit when prefix caching is on

    def usage(self, completion_tokens: int) -> str:
        p = self.plan.prompt_tokens
        details = ""
        if self.plan.block_hashes is not None:  # prefix caching on: say what it served
            cached = getattr(self.engine_request, "cached_tokens", None) or 0
            details = f',"prompt_tokens_details":{{"cached_tokens":{int(cached)}}}'
        completion_tokens *= self.plan.n  # every choice generates the same count
        return (f'{{"prompt_tokens":{p},"completion_tokens":{completion_tokens},'
                f'"total_tokens":{p + completion_tokens}{details}}}')

    def _text(self, start: int, n_tokens: int) -> str:
        """Filler tokens start .. start+n-1, cut where a stop string begins."""
        if self.plan.pieces is not None:
            return "".join(self.plan.pieces[start:start + n_tokens])
        text = filler_text(start, n_tokens)
        limit = self.plan.text_limit_chars
        if limit is None:
            return text
        begin = filler_chars(start)
        return text[: max(0, limit - begin)]

    def _logprobs(self, start: int, n_tokens: int) -> str:
        """Synthetic logprobs of tokens start .. start+n-1, in OpenAI's shapes."""
        k = self.plan.logprobs
        if k is None or n_tokens == 0:
            return "null"
        tokens = [FILLER_WORDS[(start + i) % len(FILLER_WORDS)] for i in range(n_tokens)]
        if self.chat:
            content = [{"token": t, "logprob": SAMPLED_LOGPROB, "bytes": list(t.encode()),
                        "top_logprobs": [{"token": a, "logprob": lp, "bytes": list(a.encode())}
                                         for a, lp in _alternatives(t, k)]} for t in tokens]
            return json.dumps({"content": content})
        offset = filler_chars(start)
        offsets = []
        for t in tokens:
            offsets.append(offset)
            offset += len(t)
        return json.dumps({"tokens": tokens, "token_logprobs": [SAMPLED_LOGPROB] * n_tokens,
                           "top_logprobs": [dict(_alternatives(t, k)) for t in tokens],
                           "text_offset": offsets})

    def step(self, n_tokens: int, finish_reason: str | None) -> bytes:
        """Everything a step sends: [role chunk,] token chunk [, usage chunk, DONE]."""
        first = self.index == 0
        text = json.dumps(self._text(self.index, n_tokens)) if n_tokens else '""'
        lp = self._logprobs(self.index, n_tokens)
        self.index += n_tokens
        if finish_reason is not None and self.plan.text_limit_chars is not None:
            finish_reason = "stop"  # the stop string ended it, at whatever length
        call = self.plan.tool_call if self.chat else None
        if finish_reason is not None and call is not None:
            finish_reason = "length" if self.plan.truncated else "tool_calls"
        fr = "null" if finish_reason is None else f'"{finish_reason}"'
        usage = (f',"usage":{self.usage(self.index)}' if self.plan.continuous_usage else "")
        out = ""
        for i in range(self.plan.n):
            if call is not None:
                entry: dict[str, Any] = {"index": 0, "function": {"arguments": json.loads(
                    text)}}
                if first:
                    entry = {"index": 0, **call.entry(json.loads(text))}
                delta = json.dumps({"tool_calls": [entry]})
                choice = (f'{{"index":{i},"delta":{delta},"logprobs":{lp},'
                          f'"finish_reason":{fr}}}')
            elif self.chat:
                choice = (f'{{"index":{i},"delta":{{"content":{text}}},"logprobs":{lp},'
                          f'"finish_reason":{fr}}}')
            else:
                choice = (f'{{"index":{i},"text":{text},"logprobs":{lp},'
                          f'"finish_reason":{fr}}}')
            chunk = self.head + choice + "]" + usage + "}\n\n"
            if first and self.chat:
                # vLLM sends the assistant role with the first token, not before it:
                # clients that time TTFT from the first non-empty `choices` see the real
                # first token.
                chunk = (self.head + f'{{"index":{i},"delta":{{"role":"assistant",'
                         '"content":""},"logprobs":null,"finish_reason":null}]}\n\n') + chunk
            out += chunk
        if finish_reason is not None:
            if self.plan.include_usage:
                out += self.head + '],"usage":' + self.usage(self.index) + "}\n\n"
            return out.encode() + DONE
        return out.encode()

    def error(self, message: str, status: int) -> bytes:
        body = error_body(message, err_type="server_error" if status >= 500
                          else "invalid_request_error", code=str(status))
        return ("data: " + json.dumps(body) + "\n\n").encode() + DONE

    def whole(self, stream: Stream) -> dict[str, Any]:
        """The non-streaming body."""
        text = self._text(0, stream.tokens_emitted)
        lp = json.loads(self._logprobs(0, stream.tokens_emitted))
        reason = "stop" if self.plan.text_limit_chars is not None else stream.finish_reason
        call = self.plan.tool_call if self.chat else None
        if call is not None:
            reason = "length" if self.plan.truncated else "tool_calls"
        choices = []
        for i in range(self.plan.n):
            choice: dict[str, Any] = ({"index": i, "message": {"role": "assistant",
                                                               "content": text}}
                                      if self.chat else {"index": i, "text": text})
            if call is not None:
                choice["message"] = {"role": "assistant", "content": None,
                                     "tool_calls": [call.entry(text)]}
            choice.update(logprobs=lp, finish_reason=reason)
            choices.append(choice)
        obj = "chat.completion" if self.chat else "text_completion"
        return {"id": self.request_id, "object": obj, "created": self.created,
                "model": self.model, "choices": choices,
                "usage": json.loads(self.usage(stream.tokens_emitted))}


@types.coroutine
def _resume(coro: Any, fut: Any) -> Generator[Any, Any, None]:
    """Let the current task finish a coroutine that was started by hand and is now
    waiting on `fut` (it yields that future to the task, then steps the coroutine)."""
    try:
        while True:
            value = yield fut
            fut = coro.send(value)
    except StopIteration:
        return
    finally:
        coro.close()


class SSEWriter:
    """Writes pre-rendered chunks to one client without a task switch per chunk."""

    def __init__(self, renderer: ChunkRenderer, on_failure: Callable[[], None]) -> None:
        self.renderer = renderer
        self.on_failure = on_failure
        self.send: Send | None = None
        self.closed = asyncio.Event()  # the last chunk was sent, or the client is gone
        self._busy = True              # a send is in flight (or headers not sent yet)
        self._backlog: list[tuple[bytes, bool]] = []
        self._cycle: Any = None        # uvicorn's response cycle, for the direct write

    # The driver's StreamWriter protocol.
    def render(self, n_tokens: int, finish_reason: str | None) -> bytes:
        return self.renderer.step(n_tokens, finish_reason)

    def render_error(self, message: str, status: int) -> bytes:
        return self.renderer.error(message, status)

    def write(self, payload: bytes, last: bool) -> None:
        if self.closed.is_set():
            return
        if self._busy:
            self._backlog.append((payload, last))
            return
        cycle = self._cycle
        if (cycle is not None and not last and not cycle.flow.write_paused
                and not cycle.disconnected and not cycle.response_complete):
            # What uvicorn's `send` does for a chunk that is not the last, minus the
            # coroutines: one chunked-encoding frame, one transport write.
            cycle.transport.write(b"%x\r\n%b\r\n" % (len(payload), payload))
            return
        coro = self.send({"type": "http.response.body", "body": payload,  # type: ignore[misc]
                          "more_body": not last})
        try:
            fut = coro.send(None)
        except StopIteration:
            if last:
                self.closed.set()
            return
        except Exception:
            coro.close()
            self._fail()
            return
        # The socket is applying backpressure: finish this send in a task, queue the rest.
        self._busy = True
        asyncio.get_running_loop().create_task(self._finish(coro, fut, last))

    async def start(self, send: Send, raw_send: Any = None) -> None:
        """Send the headers, then anything the engine produced meanwhile.

        `raw_send` is the server's own `send` (see `RAW_SEND`); when it is uvicorn's
        httptools response cycle, with chunked encoding, token chunks bypass the ASGI
        layers and go straight to its transport (flow control and disconnects are
        still honoured: the writer falls back to `send` whenever either applies).
        """
        self.send = send
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-request-id", self.renderer.request_id.encode())]})
        cycle = getattr(raw_send, "__self__", None)
        if (type(cycle).__module__ == "uvicorn.protocols.http.httptools_impl"
                and getattr(cycle, "chunked_encoding", None) is True
                and getattr(cycle, "response_started", False)):
            self._cycle = cycle
        await self._drain_backlog()

    async def _finish(self, coro: Any, fut: Any, last: bool) -> None:
        try:
            await _resume(coro, fut)
        except Exception:
            self._fail()
            return
        if last:
            self.closed.set()
            return
        await self._drain_backlog()

    async def _drain_backlog(self) -> None:
        assert self.send is not None
        try:
            while self._backlog:
                payload, last = self._backlog.pop(0)
                await self.send({"type": "http.response.body", "body": payload,
                                 "more_body": not last})
                if last:
                    self.closed.set()
                    return
        except Exception:
            self._fail()
            return
        self._busy = False

    def _fail(self) -> None:
        self._backlog.clear()
        self.closed.set()
        self.on_failure()


class EngineResponse:
    """An ASGI response bound to one engine stream.

    It watches the connection while it waits, so a client that goes away is aborted in
    the engine at once (its slot and KV blocks freed), whether it was waiting, in
    prefill, or decoding.
    """

    def __init__(self, stream: Stream, renderer: ChunkRenderer, writer: SSEWriter | None,
                 abort: Callable[[], None]) -> None:
        self.stream = stream
        self.renderer = renderer
        self.writer = writer
        self.abort = abort
        self.disconnected = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watcher = asyncio.get_running_loop().create_task(self._watch(receive))
        try:
            if self.writer is not None:
                await self.writer.start(send, scope.get(RAW_SEND))
                await self.writer.closed.wait()
            else:
                await self._whole(send)
        except OSError:
            self.disconnected = True
        finally:
            watcher.cancel()
            if not self.stream.finished:
                self.abort()

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                if self.writer is not None:
                    self.writer.closed.set()
                if not self.stream.finished:
                    self.abort()
                return

    async def _whole(self, send: Send) -> None:
        stream = self.stream
        await stream.done.wait()
        if self.disconnected:
            return
        if stream.error is not None:
            status = stream.error_status
            payload = error_body(stream.error, err_type="server_error" if status >= 500
                                 else "invalid_request_error")
        else:
            payload, status = self.renderer.whole(stream), 200
        data = json.dumps(payload).encode()
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
            (b"x-request-id", stream.request_id.encode())]})
        await send({"type": "http.response.body", "body": data})


__all__ = ["DONE", "RAW_SEND", "ChunkRenderer", "EngineResponse", "Plan", "SSEWriter"]
