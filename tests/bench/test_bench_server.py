"""A tiny scripted OpenAI-compatible server for the load-generator tests, and its own tests.

The scenario is the request's `model`; its parameters come from extra body fields. The
server logs when it wrote each output chunk (time.perf_counter, the host-wide monotonic
clock) under the request's X-Request-Id, served at GET /_log, so a test can compare the
client's event times with the server's, event by event.

Run standalone (a subprocess with its own interpreter, as a real server would be):
    python tests/bench/test_bench_server.py [PORT]     # prints "listening on http://127.0.0.1:PORT"
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

from aiohttp import web

_TEXT_WORDS = ("the", "of", "and", "to", "in", "is", "was", "for")


def completion_chunk(text: str, finish: str | None = None, usage: dict | None = None) -> dict:
    obj: dict[str, Any] = {"id": "cmpl-1", "object": "text_completion", "model": "m",
                           "choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = usage
    return obj


def chat_chunk(content: str | None = None, role: str | None = None,
               reasoning: str | None = None, finish: str | None = None,
               usage: dict | None = None) -> dict:
    delta: dict[str, Any] = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    obj: dict[str, Any] = {"id": "chat-1", "object": "chat.completion.chunk", "model": "m",
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = usage
    return obj


def usage_chunk(prompt: int, completion: int) -> dict:
    return {"id": "x", "choices": [], "usage": {"prompt_tokens": prompt,
                                               "completion_tokens": completion,
                                               "total_tokens": prompt + completion}}


def words(n: int, start: int = 0) -> str:
    return "".join(" " + _TEXT_WORDS[i % len(_TEXT_WORDS)] for i in range(start, start + n))


class ScriptedServer:
    """Serve scenarios on 127.0.0.1 (a random free port) from a background thread."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.log: dict[str, list[float]] = {}
        self.arrivals: dict[str, float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    # --- lifecycle -------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self.handle)
        app.router.add_post("/v1/chat/completions", self.handle)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/_log", self.get_log)
        return app

    def start(self) -> str:
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            self._runner = web.AppRunner(self.app(), handle_signals=False)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", self.port, backlog=4096)
            loop.run_until_complete(site.start())
            self.port = self._runner.addresses[0][1]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self.base_url

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> ScriptedServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- handlers --------------------------------------------------------------------
    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "steady"}]},
                                 headers={"Server": "scripted-test-server"})

    async def get_log(self, request: web.Request) -> web.Response:
        return web.json_response({"events": self.log, "arrivals": self.arrivals})

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        rid = request.headers.get("X-Request-Id", "")
        self.arrivals[rid] = time.perf_counter()
        chat = request.path.endswith("/chat/completions")
        scenario = str(body.get("model", "steady"))
        if scenario in ("http_500", "http_429"):
            status = int(scenario[5:])
            return web.json_response({"error": {"message": "scripted failure"}}, status=status)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        times = self.log[rid] = []  # ids repeat across runs: the latest run wins

        async def send(obj: dict | str, output: bool = False) -> None:
            if isinstance(obj, dict) and not obj.get("choices") and "usage" in obj \
                    and not want_usage:
                return  # usage-only chunks only when the client asked for them
            data = f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()
            if output:
                # stamped just before the write: the client cannot see it any earlier
                times.append(time.perf_counter())
            await resp.write(data)

        def out(text: str, **kw: Any) -> dict:
            return chat_chunk(content=text, **kw) if chat else completion_chunk(text, **kw)

        n_tokens = int(body.get("max_tokens") or 8)
        ttft_s = float(body.get("ttft_s", 0.02))
        itl_s = float(body.get("itl_s", 0.01))
        prompt_tokens = len(str(body.get("prompt", "x")).split()) if not chat else 7
        want_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        try:
            if chat:
                await send(chat_chunk(role="assistant", content=""))  # role-only: no event
            await asyncio.sleep(ttft_s)
            if scenario == "steady":
                for i in range(n_tokens):
                    if i:
                        await asyncio.sleep(itl_s)
                    await send(out(words(1), finish="length" if i == n_tokens - 1 else None),
                               output=True)
                await send(usage_chunk(prompt_tokens, n_tokens))
                await send("[DONE]")
            elif scenario == "multi":
                # Chunks of `per_chunk` tokens, an empty delta between them, usage at the end.
                per = int(body.get("per_chunk", 3))
                sent = 0
                while sent < n_tokens:
                    k = min(per, n_tokens - sent)
                    await send(out(words(k, sent)), output=True)
                    sent += k
                    await send(out(""))  # empty delta: not an event
                    await asyncio.sleep(itl_s)
                await send(out("", finish="length"))
                await send(usage_chunk(prompt_tokens, n_tokens))
                await send("[DONE]")
            elif scenario == "continuous":
                # vLLM continuous_usage_stats: cumulative usage on every chunk.
                sizes = [int(x) for x in body.get("sizes", [2, 1, 3])]
                total = 0
                for k in sizes:
                    total += k
                    await send(out(words(k), usage={"prompt_tokens": prompt_tokens,
                                                    "completion_tokens": total}), output=True)
                    await asyncio.sleep(itl_s)
                await send(usage_chunk(prompt_tokens, total))
                await send("[DONE]")
            elif scenario == "reasoning":
                for _ in range(3):
                    await send(chat_chunk(reasoning=words(1)), output=True)
                    await asyncio.sleep(itl_s)
                for i in range(2):
                    await send(chat_chunk(content=words(1),
                                          finish="stop" if i == 1 else None), output=True)
                    await asyncio.sleep(itl_s)
                await send(usage_chunk(prompt_tokens, 5))
                await send("[DONE]")
            elif scenario == "error_midstream":
                for _ in range(2):
                    await send(out(words(1)), output=True)
                    await asyncio.sleep(itl_s)
                await send({"error": {"message": "scripted engine failure", "code": 500}})
                await send("[DONE]")
            elif scenario == "malformed":
                await send(out(words(1)), output=True)
                await resp.write(b"data: {this is not json\n\n")
                await send(out(words(1), finish="length"), output=True)
                await send("[DONE]")
            elif scenario == "stall":
                await send(out(words(1)), output=True)
                await asyncio.sleep(float(body.get("stall_s", 30.0)))
                await send("[DONE]")
            elif scenario == "disconnect":
                for _ in range(2):
                    await send(out(words(1)), output=True)
                    await asyncio.sleep(itl_s)
                assert request.transport is not None
                request.transport.abort()  # reset mid-stream, no terminating chunk
                return resp
            elif scenario == "nodone":
                await send(out(words(1)), output=True)
                # connection ends cleanly with neither [DONE] nor finish_reason
            else:
                await send({"error": {"message": f"unknown scenario {scenario}"}})
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return resp


def start_subprocess_server() -> tuple[subprocess.Popen[str], str]:
    """The scripted server in its own process (its own GIL); returns (process, base_url)."""
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("listening on "), line
    return proc, line.split("listening on ", 1)[1].strip()


def fetch_log(base_url: str) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(base_url + "/_log", timeout=10) as resp:
        return dict(json.loads(resp.read()))


def test_scripted_server_streams_what_its_script_says() -> None:
    """The fixture itself: the 'multi' scenario's raw SSE has the chunks the tests rely on."""
    import urllib.request

    with ScriptedServer() as srv:
        req = urllib.request.Request(
            srv.base_url + "/v1/completions",
            data=json.dumps({"model": "multi", "prompt": "a b", "max_tokens": 7,
                             "ttft_s": 0, "itl_s": 0,
                             "stream_options": {"include_usage": True}}).encode(),
            headers={"Content-Type": "application/json", "X-Request-Id": "q"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            lines = [ln for ln in resp.read().decode().split("\n") if ln.startswith("data: ")]
        assert len(srv.log["q"]) == 3  # 3 + 3 + 1 tokens
    texts = [json.loads(ln[6:])["choices"][0]["text"] for ln in lines[:-2]
             if json.loads(ln[6:])["choices"]]
    assert [t for t in texts if t] == [" the of and", " to in is", " was"]
    assert json.loads(lines[-2][6:])["usage"]["completion_tokens"] == 7
    assert lines[-1] == "data: [DONE]"


if __name__ == "__main__":
    server = ScriptedServer(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    server.start()
    print(f"listening on {server.base_url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
