"""The two library internals ridgeline relies on (docs/serve.md, "Pinned internals") are
really there in the installed aiohttp and uvicorn, not silently replaced by the public-API
fallbacks: bench's StreamReader class swap, and the emulator's direct write to uvicorn's
httptools response cycle. CI runs this file at the floor of the pins (a second venv,
`.ci/pins_floor`) and at the cap (the main venv)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import aiohttp
import pytest
from aiohttp import web

from ridgeline.bench.client import _hook, _StampingReader, _unhook


def test_aiohttp_stream_reader_swap_takes_the_chunks() -> None:
    async def main() -> list[bytes]:
        async def handler(request: web.Request) -> web.StreamResponse:
            resp = web.StreamResponse()
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            await asyncio.sleep(0.2)  # the client hooks its reader before any body byte
            for k in range(5):
                await resp.write(f"chunk{k};".encode())
                await asyncio.sleep(0.01)
            await resp.write_eof()
            return resp

        app = web.Application()
        app.router.add_get("/", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        got: list[bytes] = []
        try:
            async with aiohttp.ClientSession() as session, \
                    session.get(f"http://127.0.0.1:{port}/") as resp:
                reader = resp.content
                assert type(reader) is aiohttp.StreamReader
                assert _hook(reader, got.append)  # the swap, not the fallback
                assert type(reader) is _StampingReader
                for _ in range(200):
                    if b"".join(got).endswith(b"chunk4;"):
                        break
                    await asyncio.sleep(0.01)
                _unhook(reader)
                assert type(reader) is aiohttp.StreamReader
        finally:
            await runner.cleanup()
        return got

    got = asyncio.run(main())
    assert b"".join(got) == b"".join(f"chunk{k};".encode() for k in range(5))


def test_uvicorn_httptools_cycle_is_what_the_emulator_writes_to() -> None:
    """serve/responses.py writes straight to uvicorn's httptools response cycle when the
    ASGI `send` is its bound method, chunked, after the response started."""
    pytest.importorskip("httptools")
    import uvicorn

    seen: dict[str, object] = {}

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        cycle = getattr(send, "__self__", None)
        seen["module"] = type(cycle).__module__
        seen["chunked"] = getattr(cycle, "chunked_encoding", None)
        seen["started"] = getattr(cycle, "response_started", None)
        await send({"type": "http.response.body", "body": b"ok"})

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, http="httptools",
                                           log_level="error", lifespan="off"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    try:
        for _ in range(500):
            if server.started:
                break
            time.sleep(0.01)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while b"0\r\n\r\n" not in data:
                part = c.recv(4096)
                if not part:
                    break
                data += part
    finally:
        server.should_exit = True
        th.join(10)
    assert seen == {"module": "uvicorn.protocols.http.httptools_impl", "chunked": True,
                    "started": True}
