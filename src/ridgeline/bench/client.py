"""The streaming client: one OpenAI-compatible request, timed event by event.

aiohttp was chosen over httpx by measured overhead (benchmarks/speed/bench_client_http.py, results
in benchmarks/results/bench_client.md). Every time is `time.perf_counter() - t0_perf` for the run's
origin `t0_perf`; an output event is timestamped when the network read that completed it
returns, before any JSON parsing, so parsing cost never shows up as server latency.

What counts as an output event: a chunk whose `text`, `delta.content` or
`delta.reasoning_content` is non-empty. Role-only deltas, empty deltas, usage-only chunks
and `[DONE]` are not events (vLLM counts a role-only delta as the first token; AIPerf and
GuideLLM do not; see docs/metrics.md).

Error kinds recorded per request (`error_kind`):
  http_<status>  non-200 answer (429 is status "rejected", everything else "error")
  connect        connection refused / DNS / TLS failure before the request was sent
  disconnect     the server closed or reset the connection mid-response
  timeout        the whole request exceeded `--timeout`
  stall          no bytes for `--stall-timeout` seconds
  stream_error   the server sent an error object inside the stream
  malformed      a data line that is not JSON (the rest of the stream is still read)
  truncated      the stream ended without [DONE] or a finish_reason
  client         anything else raised on the client side (message recorded)
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from ridgeline.bench.engine_timings import has_timings, parse_timings
from ridgeline.bench.selfdesc import describe_server
from ridgeline.bench.sse import MalformedChunk, SSEParser, parse_chunk
from ridgeline.bench.tokens import Tokenizer
from ridgeline.errors import RidgelineError

_SocketTimeout = getattr(aiohttp, "SocketTimeoutError", aiohttp.ServerTimeoutError)
_ConnectTimeout = getattr(aiohttp, "ConnectionTimeoutError", None)


@dataclass(frozen=True)
class EndpointConfig:
    """Where and how to send requests. `base_url` may end in /v1 or not."""

    base_url: str
    model: str
    api: str = "completions"  # or "chat"
    api_key: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 600.0
    stall_timeout_s: float | None = None
    temperature: float | None = None
    ignore_eos: bool = False
    min_tokens: bool = False
    verify_tls: bool = True
    include_usage: bool = True
    # Timestamp bytes in the connection's receive callback (see stream_request).
    stamp_on_arrival: bool = True
    extra_body: dict[str, Any] = field(default_factory=dict)
    # llama-server calibration probes: request i is sent with `id_slot` = i mod
    # pin_slots, so B lockstep streams decode in slots 0..B-1 (one graph per step); 0: off.
    pin_slots: int = 0
    # False: `"stream": false`, one JSON answer; its arrival is the only output event, so
    # TTFT = E2E and TPOT/ITL are undefined (as vLLM's and AIPerf's clients report it).
    stream: bool = True

    @property
    def root_url(self) -> str:
        url = self.base_url.rstrip("/")
        return url[:-3] if url.endswith("/v1") else url

    @property
    def url(self) -> str:
        path = "/v1/chat/completions" if self.api == "chat" else "/v1/completions"
        return self.root_url + path

    def request_headers(self) -> dict[str, str]:
        out = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            out["Authorization"] = f"Bearer {self.api_key}"
        out.update(dict(self.headers))
        return out


@dataclass(slots=True)
class BenchRequest:
    """One request of the workload. `prompt_tokens` is the dataset's length, if known."""

    id: str
    prompt: str
    max_tokens: int | None
    prompt_tokens: int | None = None
    scheduled_s: float | None = None
    tag_at: int = 0  # where the per-request uniqueness tag goes (after a shared prefix)


def request_body(cfg: EndpointConfig, req: BenchRequest) -> bytes:
    """The JSON body, serialised once before the clock starts."""
    body: dict[str, Any] = {"model": cfg.model, "stream": cfg.stream}
    if cfg.api == "chat":
        body["messages"] = [{"role": "user", "content": req.prompt}]
    else:
        body["prompt"] = req.prompt
    if req.max_tokens is not None:
        body["max_tokens"] = int(req.max_tokens)
        if cfg.min_tokens:
            body["min_tokens"] = int(req.max_tokens)
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    if cfg.temperature is not None:
        body["temperature"] = cfg.temperature
    if cfg.include_usage and cfg.stream:
        body["stream_options"] = {"include_usage": True}
    body.update(cfg.extra_body)
    if cfg.pin_slots:
        digits = req.id[len(req.id.rstrip("0123456789")):]
        body["id_slot"] = int(digits or 0) % cfg.pin_slots
    return json.dumps(body, separators=(",", ":")).encode()


class InFlight:
    """A request's state while it streams; the runner turns it into a trace record even
    when the request is cut off (cancelled) half-way."""

    __slots__ = ("admitted_s", "cached_tokens", "chunk_tokens", "completion_tokens", "done",
                 "end_s", "engine_timings", "error", "error_kind", "event_times_s",
                 "finish_reason", "http_status", "malformed",
                 "pieces", "prompt_usage", "ready_s", "reasoning_events", "req", "sent_s",
                 "status", "tokenizer")

    def __init__(self, req: BenchRequest, tokenizer: Tokenizer | None = None) -> None:
        self.req = req
        self.tokenizer = tokenizer
        self.admitted_s: float | None = None
        self.ready_s: float | None = None  # closed loop: when the user was ready to send
        self.sent_s: float | None = None
        self.end_s: float | None = None
        self.event_times_s: list[float] = []
        self.chunk_tokens: list[int] = []
        self.pieces: list[str] = []
        self.completion_tokens: int | None = None
        self.prompt_usage: int | None = None
        self.cached_tokens: int | None = None
        self.reasoning_events = 0
        self.finish_reason: str | None = None
        self.http_status: int | None = None
        self.malformed = 0
        self.done = False
        self.status = "ok"
        self.error_kind: str | None = None
        self.error: str | None = None
        self.engine_timings: dict[str, Any] | None = None  # llama.cpp `timings`

    def fail(self, kind: str, message: str, status: str = "error") -> None:
        if self.error_kind is None:  # the first failure is the cause; later ones follow it
            self.status, self.error_kind, self.error = status, kind, message[:500]

    def on_payload(self, payload: str, now_s: float) -> None:
        try:
            chunk = parse_chunk(payload)
        except MalformedChunk as exc:
            self.malformed += 1
            self.fail("malformed", str(exc))
            return
        if chunk.done:
            self.done = True
            return
        if has_timings(payload):
            self.engine_timings = parse_timings(payload) or self.engine_timings
        if chunk.error is not None:
            self.fail("stream_error", chunk.error)
            self.done = True
            return
        if chunk.prompt_tokens is not None:
            self.prompt_usage = chunk.prompt_tokens
        if chunk.cached_tokens is not None:
            self.cached_tokens = chunk.cached_tokens
        new_tokens: int | None = None
        if chunk.completion_tokens is not None:
            if chunk.has_choices:  # usage on every chunk (vLLM continuous_usage_stats)
                new_tokens = chunk.completion_tokens - (self.completion_tokens or 0)
            self.completion_tokens = chunk.completion_tokens
        if chunk.finish_reason:
            self.finish_reason = chunk.finish_reason
        if not chunk.is_output:
            return
        self.event_times_s.append(now_s)
        text = chunk.text + chunk.reasoning
        self.pieces.append(text)
        if chunk.reasoning:
            self.reasoning_events += 1
        if new_tokens is None:
            tok = self.tokenizer
            new_tokens = max(tok.count(text), 1) if tok is not None else 1
        self.chunk_tokens.append(new_tokens)

    def record(self, *, worker: int | None = None) -> dict[str, Any]:
        """The trace record (schema RequestRecord plus a few extra fields)."""
        req = self.req
        per_chunk = sum(self.chunk_tokens)
        if self.completion_tokens is not None:
            output_tokens, source = self.completion_tokens, "usage"
        elif self.tokenizer is not None:
            # The whole text, not the sum over chunks: a token split across chunks counts once.
            output_tokens, source = self.tokenizer.count("".join(self.pieces)), "tokenizer"
        else:
            output_tokens, source = len(self.event_times_s), "chunks"
        rec: dict[str, Any] = {"id": req.id}
        if req.scheduled_s is not None:
            rec["scheduled_s"] = round(req.scheduled_s, 6)
        if self.admitted_s is not None:
            rec["admitted_s"] = round(self.admitted_s, 6)
        rec["sent_s"] = round(self.sent_s if self.sent_s is not None else
                              (self.end_s or 0.0), 6)
        rec["event_times_s"] = [round(t, 6) for t in self.event_times_s]
        # Per-event token counts only when they are known and add up to the total.
        if any(n != 1 for n in self.chunk_tokens) and per_chunk == output_tokens:
            rec["event_tokens"] = list(self.chunk_tokens)
        if self.end_s is not None:
            rec["end_s"] = round(self.end_s, 6)
        prompt_tokens = self.prompt_usage if self.prompt_usage is not None else req.prompt_tokens
        if prompt_tokens is not None:
            rec["prompt_tokens"] = prompt_tokens
            rec["prompt_token_source"] = "usage" if self.prompt_usage is not None else "dataset"
        if self.cached_tokens is not None:
            rec["cached_prompt_tokens"] = self.cached_tokens
        rec["output_tokens"] = output_tokens
        rec["token_count_source"] = source
        rec["status"] = self.status
        if self.error_kind is not None:
            rec["error_kind"] = self.error_kind
            rec["error"] = self.error
        if req.max_tokens is not None:
            rec["max_tokens"] = req.max_tokens
        if self.http_status is not None:
            rec["http_status"] = self.http_status
        if self.finish_reason is not None:
            rec["finish_reason"] = self.finish_reason
        if self.reasoning_events:
            rec["reasoning_events"] = self.reasoning_events
        if worker is not None:
            rec["worker"] = worker
        if self.engine_timings:
            rec["engine_timings"] = self.engine_timings
        return rec


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when it is importable (and not turned off), else asyncio's default.

    `RIDGELINE_BENCH_LOOP=asyncio` forces asyncio's own loop class (for A/B measurements),
    named rather than taken from the policy: uvicorn < 0.30 installs uvloop's policy
    process-wide when it serves in-process, and the policy's loop would then be uvloop's.
    """
    if os.environ.get("RIDGELINE_BENCH_LOOP", "").lower() == "asyncio":
        return (asyncio.ProactorEventLoop if sys.platform == "win32"  # type: ignore[attr-defined]
                else asyncio.SelectorEventLoop)
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run_loop(coro: Awaitable[Any]) -> Any:
    """`asyncio.run(coro)` on uvloop when available, with the heap frozen for the GC.

    uvloop's I/O callbacks are cheaper, which shortens the wait between a socket becoming
    readable and the chunk's timestamp when many streams are busy. `gc.freeze()` moves what
    exists before the run out of the collector's reach, so the full collections that a long
    run still triggers scan only the run's own objects (a 47 ms pause at 1,024 streams
    before). Both measured in benchmarks/results/bench_client.md, "uvloop client".
    """
    gc.collect()
    gc.freeze()
    try:
        return run_with_loop_factory(coro, _loop_factory())
    finally:
        gc.unfreeze()


def run_with_loop_factory(coro: Awaitable[Any],
                          factory: Callable[[], asyncio.AbstractEventLoop] | None) -> Any:
    """`asyncio.Runner(loop_factory=factory).run(coro)`, also on Python 3.10 (no Runner)."""
    if hasattr(asyncio, "Runner"):  # Python >= 3.11
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coro)
    loop = factory() if factory is not None else asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(coro)
    finally:
        try:  # what asyncio.run does on the way out
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def make_session(cfg: EndpointConfig) -> aiohttp.ClientSession:
    """One session per event loop: unlimited connections (concurrency is ours to set)."""
    connector = aiohttp.TCPConnector(limit=0, ssl=None if cfg.verify_tls else False,
                                     ttl_dns_cache=300)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None),
                                 read_bufsize=2**16)


async def stream_request(session: aiohttp.ClientSession, cfg: EndpointConfig,
                         state: InFlight, t0_perf: float, body: bytes | None = None) -> InFlight:
    """Send `state.req`, stream the answer into `state`; never raises for server faults.

    Cancellation (the runner cutting a request off) propagates; `state` then holds every
    event received so far.
    """
    perf = time.perf_counter
    data = body if body is not None else request_body(cfg, state.req)
    timeout = aiohttp.ClientTimeout(total=cfg.timeout_s, sock_read=cfg.stall_timeout_s)
    state.sent_s = perf() - t0_perf
    try:
        headers = cfg.request_headers()
        headers.setdefault("X-Request-Id", state.req.id)  # lets server logs be matched
        async with session.post(cfg.url, data=data, headers=headers,
                                timeout=timeout) as resp:
            state.http_status = resp.status
            if resp.status != 200:
                text = (await resp.content.read(2048)).decode("utf-8", errors="replace")
                state.fail(f"http_{resp.status}", f"HTTP {resp.status}: {text.strip()[:300]}",
                           "rejected" if resp.status == 429 else "error")
                state.end_s = perf() - t0_perf
                return state
            if not cfg.stream:
                raw_body = await resp.read()
                state.end_s = perf() - t0_perf
                state.on_payload(_as_stream_chunk(raw_body), state.end_s)
                state.done = True
                if state.finish_reason is None and state.error is None:
                    state.fail("truncated", "the answer has no finish_reason")
                return state
            parser = SSEParser()
            on_payload = state.on_payload
            last = [state.sent_s]
            reader = resp.content

            def take(raw: bytes, now_s: float) -> None:
                last[0] = now_s
                try:
                    for payload in parser.feed(raw):
                        on_payload(payload, now_s)
                except Exception as exc:  # a client bug must not break the connection
                    state.fail("client", f"{type(exc).__name__}: {exc}")

            if cfg.stamp_on_arrival and isinstance(reader, aiohttp.StreamReader):
                await _stream_stamped(reader, state, take, perf, t0_perf)
            else:
                async for raw in reader.iter_any():
                    take(raw, perf() - t0_perf)
                    if state.done:
                        break
            now_s = last[0]
            for payload in parser.flush():
                on_payload(payload, now_s)
            state.end_s = now_s if state.done else perf() - t0_perf
            if not state.done and state.finish_reason is None:
                state.fail("truncated", "stream ended without [DONE] or a finish_reason")
    except asyncio.CancelledError:
        state.end_s = perf() - t0_perf
        raise
    except _SocketTimeout:
        state.fail("stall", f"no data for {cfg.stall_timeout_s} s")
    except aiohttp.ClientConnectorError as exc:
        state.fail("connect", f"{type(exc).__name__}: {exc}")
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError,
            aiohttp.ClientOSError) as exc:
        state.fail("disconnect", f"{type(exc).__name__}: {exc}")
    except asyncio.TimeoutError as exc:
        if _ConnectTimeout is not None and isinstance(exc, _ConnectTimeout):
            state.fail("connect", f"connection timed out: {exc}")
        else:
            state.fail("timeout", f"request exceeded {cfg.timeout_s} s")
    except aiohttp.ClientError as exc:
        state.fail("client", f"{type(exc).__name__}: {exc}")
    if state.end_s is None:
        state.end_s = perf() - t0_perf
    return state


def _as_stream_chunk(raw: bytes) -> str:
    """A non-streaming answer as one stream chunk (chat `message` as `delta`), so the
    streaming bookkeeping reads it; text that is not JSON comes back as is (malformed)."""
    text = raw.decode("utf-8", errors="replace")
    try:
        obj = json.loads(text)
    except ValueError:
        return text
    if isinstance(obj, dict) and isinstance(obj.get("choices"), list):
        for choice in obj["choices"]:
            if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
                choice["delta"] = choice.pop("message")
    return json.dumps(obj)


async def _stream_stamped(reader: aiohttp.StreamReader, state: InFlight,
                          take: Callable[[bytes, float], None], perf: Callable[[], float],
                          t0_perf: float) -> None:
    """Stamp every body chunk in the connection's receive callback, parse it just after.

    The event loop calls the callback as soon as the socket is readable; this task, were it
    to read the body itself, would resume one loop iteration later, and under many streams
    that is milliseconds. The callback only takes the time and keeps the bytes: parsing runs
    in a `call_soon` handle, so the stamps of the other sockets that became readable in the
    same loop iteration are not held up by this stream's JSON. The bytes bypass the reader's
    buffer (nothing wakes this task per chunk); the task wakes at the end of the body, on a
    connection error or timeout (the reader raises them), or when the stream says [DONE].
    """
    loop = asyncio.get_running_loop()
    pending: list[tuple[float, bytes]] = []
    finished = loop.create_future()

    def drain() -> None:
        batch = pending[:]
        pending.clear()
        for now_s, raw in batch:
            take(raw, now_s)
        if state.done and not finished.done():
            finished.set_result(None)

    def stamp(raw: bytes) -> None:
        now_s = perf() - t0_perf  # first thing: nothing runs between the read and the stamp
        if not pending:
            loop.call_soon(drain)
        pending.append((now_s, raw))

    if not _hook(reader, stamp):
        async for raw in reader.iter_any():
            take(raw, perf() - t0_perf)
            if state.done:
                break
        return
    try:
        head = reader.read_nowait(-1)  # anything that came with the headers
        if head:
            take(head, perf() - t0_perf)
        if state.done:
            return
        body_end = asyncio.ensure_future(reader.readany())  # b"" at EOF, or raises
        try:
            await asyncio.wait((body_end, finished), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not body_end.done():
                body_end.cancel()
        drain()
        if body_end.done() and not body_end.cancelled():
            exc = body_end.exception()
            if exc is not None and not state.done:
                raise exc  # a disconnect or stall: stream_request records it
    finally:
        _unhook(reader)
        if pending:  # cut off: keep every event received so far
            drain()


class _StampingReader(aiohttp.StreamReader):
    """aiohttp's StreamReader whose body chunks go to a per-instance callback instead of the
    buffer (aiohttp then never wakes the reading task per chunk).

    Swapped in with `__class__` (same memory layout: no new slots); the callback lives in
    `_HOOKS` because the reader has `__slots__` and no instance dict.
    """

    __slots__ = ()

    def feed_data(self, data: bytes, *args: Any) -> Any:
        hook = _HOOKS.get(id(self))
        if hook is None:
            return super().feed_data(data, *args)
        if data:
            hook(data)
        return False


_HOOKS: dict[int, Callable[[bytes], None]] = {}


def _hook(reader: Any, stamp: Callable[[bytes], None]) -> bool:
    if type(reader) is not aiohttp.StreamReader:
        return False
    try:
        reader.__class__ = _StampingReader
    except TypeError:  # a future aiohttp whose reader cannot be subclassed this way
        return False
    _HOOKS[id(reader)] = stamp
    return True


def _unhook(reader: Any) -> None:
    _HOOKS.pop(id(reader), None)
    if type(reader) is _StampingReader:
        reader.__class__ = aiohttp.StreamReader


@dataclass
class ServerInfo:
    """What the endpoint says about itself before the run (recorded in the trace header)."""

    models: list[str]
    server: str | None = None
    version: str | None = None
    # The engine's own description where it offers one (bench/selfdesc.py).
    self_description: dict[str, Any] = field(default_factory=dict)


async def probe_endpoint(cfg: EndpointConfig, timeout_s: float = 10.0) -> ServerInfo:
    """GET /v1/models and the engine's self-description endpoints; an unreachable endpoint
    is one RidgelineError line."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    model_entries: list[dict[str, Any]] = []
    async with make_session(cfg) as session:
        try:
            async with session.get(cfg.root_url + "/v1/models", headers=cfg.request_headers(),
                                   timeout=timeout) as resp:
                server = resp.headers.get("Server")
                models: list[str] = []
                if resp.status == 200:
                    try:
                        obj = await resp.json(content_type=None)
                        model_entries = [m for m in obj.get("data", []) if isinstance(m, dict)]
                        models = [str(m.get("id")) for m in model_entries]
                    except (json.JSONDecodeError, aiohttp.ContentTypeError, AttributeError):
                        pass
                elif resp.status in (401, 403):
                    raise RidgelineError(
                        f"--api-key: {cfg.root_url} answered HTTP {resp.status} (unauthorised)")
        except (aiohttp.ClientConnectionError, asyncio.TimeoutError, OSError) as exc:
            reason = str(exc) or type(exc).__name__
            raise RidgelineError(
                f"--base-url: cannot reach {cfg.root_url} ({reason}); is the server running?"
            ) from None
        info = ServerInfo(models=models, server=server)
        await describe_server(session, cfg, info, model_entries, timeout)
    return info


__all__ = ["BenchRequest", "EndpointConfig", "InFlight", "ServerInfo", "make_session",
           "probe_endpoint", "request_body", "run_loop", "stream_request"]
