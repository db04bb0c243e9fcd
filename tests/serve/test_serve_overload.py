"""Overload, disconnects and shutdown: refused requests get 429 + Retry-After, accepted
ones all complete, a client that leaves frees its slot at once, shutdown ends streams
cleanly.

The engine is the stand-in (one sequence per step when max_num_seqs=1) with a fixed step
time, so counts can be reasoned out exactly where the test asserts them.
"""

from __future__ import annotations

import asyncio
import json

import httpx

from ridgeline.perf.step_time import LinearStepTime
from ridgeline.serve.app import EmulatorConfig, create_app
from ridgeline.serve.launcher import bind_socket, running_server
from tests.serve.test_serve_standin import StandInEngine, StandInRequest


def _app(engine: StandInEngine, **cfg: object):  # type: ignore[no-untyped-def]
    return create_app(engine, StandInRequest, EmulatorConfig(served_model_name="m", **cfg))


async def _stream(client: httpx.AsyncClient, url: str, max_tokens: int) -> dict:
    body = {"prompt": "x", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    async with client.stream("POST", url + "/v1/completions", json=body) as resp:
        if resp.status_code != 200:
            await resp.aread()
            return {"status": resp.status_code, "headers": resp.headers, "body": resp.json()}
        tokens, done, errors = 0, False, []
        async for line in resp.aiter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                obj = json.loads(line[6:])
                if "error" in obj:
                    errors.append(obj["error"])
                else:
                    tokens += len(obj["choices"])
        return {"status": 200, "tokens": tokens, "done": done, "errors": errors}


def test_overload_gets_429_and_no_accepted_request_is_lost() -> None:
    async def main() -> tuple[list[dict], StandInEngine]:
        # 2 running + 3 waiting at most; 10 requests sent at once.
        engine = StandInEngine(LinearStepTime(base_s=0.01), max_num_seqs=2)
        async with running_server(_app(engine, max_waiting=3, retry_after_s=2.5)) as url, \
                httpx.AsyncClient(timeout=30) as client:
            results = await asyncio.gather(*(_stream(client, url, 5) for _ in range(10)))
        return results, engine

    results, engine = asyncio.run(main())
    ok = [r for r in results if r["status"] == 200]
    refused = [r for r in results if r["status"] != 200]
    assert refused, "a 3-deep queue cannot take 10 simultaneous requests"
    assert len(ok) >= 3
    for r in refused:
        assert r["status"] == 429
        assert r["headers"]["retry-after"] == "3"  # ceil(2.5 s)
        assert r["body"]["error"]["code"] == "rate_limit_exceeded"
    for r in ok:  # every accepted request ran to the end
        assert r["tokens"] == 5 and r["done"] and not r["errors"]
    assert not engine.aborted


def test_overload_status_503_when_configured() -> None:
    async def main() -> list[int]:
        engine = StandInEngine(LinearStepTime(base_s=0.01), max_num_seqs=1)
        async with running_server(_app(engine, max_waiting=0, overload_status=503)) as url, \
                httpx.AsyncClient(timeout=30) as client:
            r = await client.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 2})
            return [r.status_code]

    assert asyncio.run(main()) == [503]


def test_disconnect_frees_the_slot_at_once() -> None:
    """One sequence fits; A streams a long output; B waits behind it. When A's client
    goes away, A is aborted in the engine and B starts in the very next steps, long
    before A would have finished (A would need 2,000 steps x 10 ms = 20 s)."""

    async def main() -> tuple[StandInEngine, float, dict]:
        engine = StandInEngine(LinearStepTime(base_s=0.01), max_num_seqs=1)
        async with running_server(_app(engine)) as url, \
                httpx.AsyncClient(timeout=30) as client_a, \
                httpx.AsyncClient(timeout=30) as client_b:
            body_a = {"prompt": "x", "max_tokens": 2000, "stream": True}
            async with client_a.stream("POST", url + "/v1/completions", json=body_a) as resp:
                lines = resp.aiter_lines()
                while not (await lines.__anext__()).startswith("data: {"):
                    pass
                task_b = asyncio.create_task(_stream(client_b, url, 3))
                await asyncio.sleep(0.1)
                assert not task_b.done()  # B is stuck behind A
                assert engine.stats()["num_waiting"] == 1
            # Leaving the block closes A's connection mid-stream.
            t0 = asyncio.get_running_loop().time()
            result_b = await asyncio.wait_for(task_b, 5)
            elapsed = asyncio.get_running_loop().time() - t0
        return engine, elapsed, result_b

    engine, elapsed_s, result_b = asyncio.run(main())
    assert len(engine.aborted) == 1 and engine.aborted[0].startswith("cmpl-")
    assert result_b["tokens"] == 3 and result_b["done"]
    assert elapsed_s < 2.0  # 3 steps of 10 ms plus scheduling; far below A's 20 s


def test_disconnect_while_waiting_leaves_the_queue() -> None:
    async def main() -> StandInEngine:
        engine = StandInEngine(LinearStepTime(base_s=0.01), max_num_seqs=1)
        async with running_server(_app(engine)) as url, \
                httpx.AsyncClient(timeout=30) as client:
            hog = asyncio.create_task(_stream(client, url, 300))
            await asyncio.sleep(0.05)
            waiter = asyncio.create_task(client.post(
                url + "/v1/completions", json={"prompt": "y", "max_tokens": 5}))
            await asyncio.sleep(0.1)
            assert engine.stats()["num_waiting"] == 1
            waiter.cancel()  # the non-streaming client gives up while queued
            for _ in range(100):
                await asyncio.sleep(0.01)
                if engine.stats()["num_waiting"] == 0:
                    break
            assert engine.stats()["num_waiting"] == 0
            hog.cancel()
        return engine

    engine = asyncio.run(main())
    assert len(engine.aborted) >= 1


def test_shutdown_ends_open_streams_cleanly() -> None:
    """A stream still running at shutdown gets an error event and `data: [DONE]` after the
    grace period, instead of a cut connection; new requests are refused meanwhile."""

    async def main() -> dict:
        engine = StandInEngine(LinearStepTime(base_s=0.01), max_num_seqs=4)
        app = _app(engine, shutdown_grace_s=0.3)
        async with running_server(app) as url:
            client = httpx.AsyncClient(timeout=30)
            task = asyncio.create_task(_stream(client, url, 5000))
            await asyncio.sleep(0.2)
        result = await asyncio.wait_for(task, 10)
        await client.aclose()
        return result

    result = asyncio.run(main())
    assert result["status"] == 200 and result["done"]
    assert 5 < result["tokens"] < 5000
    assert result["errors"] and "shutting down" in result["errors"][0]["message"]


def test_disconnect_frees_kv_blocks_in_the_real_engine() -> None:
    """With the real engine: a 1,000-token prompt holds ceil(1001/16) = 63 blocks while it
    decodes; when its client goes away they are all back in the pool within a step."""
    from ridgeline.sim.engine import Engine, EngineConfig, EngineRequest

    async def main() -> tuple[int, int, int]:
        engine = Engine(EngineConfig(num_kv_blocks=256, block_size_tokens=16),
                        LinearStepTime(base_s=0.005))
        app = create_app(engine, EngineRequest, EmulatorConfig(served_model_name="m"))
        async with running_server(app) as url, httpx.AsyncClient(timeout=30) as client:
            body = {"prompt": list(range(1000)), "max_tokens": 3000, "stream": True}
            async with client.stream("POST", url + "/v1/completions", json=body) as resp:
                lines = resp.aiter_lines()
                while not (await lines.__anext__()).startswith("data: {"):
                    pass
                held = engine.stats().kv_blocks_used
                running = engine.stats().num_running
            for _ in range(200):
                await asyncio.sleep(0.005)
                if engine.stats().kv_blocks_used == 0:
                    break
            return held, running, engine.stats().kv_blocks_used

    held, running, after = asyncio.run(main())
    assert running == 1 and held >= 63
    assert after == 0


def test_request_that_can_never_fit_the_kv_cache_is_refused() -> None:
    """4,096 tokens of KV (256 blocks of 16): 1,000 + 5,000 can never fit. The engine
    rejects it in its next step; non-streaming gets a 400, streaming an error event."""
    from ridgeline.sim.engine import Engine, EngineConfig, EngineRequest

    async def main() -> tuple[int, str, list[str]]:
        engine = Engine(EngineConfig(num_kv_blocks=256, block_size_tokens=16),
                        LinearStepTime(base_s=0.005))
        app = create_app(engine, EngineRequest, EmulatorConfig(served_model_name="m"))
        body = {"prompt": list(range(1000)), "max_tokens": 5000}
        async with running_server(app) as url, httpx.AsyncClient(timeout=10) as client:
            r = await client.post(url + "/v1/completions", json=body)
            async with client.stream("POST", url + "/v1/completions",
                                     json={**body, "stream": True}) as resp:
                lines = [line async for line in resp.aiter_lines() if line]
        return r.status_code, r.json()["error"]["message"], lines

    status, message, lines = asyncio.run(main())
    assert status == 400 and "never fit" in message
    assert "never fit" in lines[0] and lines[-1] == "data: [DONE]"


def test_slow_reader_gets_every_token_in_order() -> None:
    """A client that stops reading fills its socket buffers; the server's writes then
    wait (backpressure) and later chunks queue behind them, in order, while other
    streams go on. The client then reads everything: all tokens, in order, and [DONE]."""
    import socket

    from ridgeline.serve.tokenizer import filler_text

    n_tokens = 3000

    async def main() -> tuple[bytes, dict]:
        engine = StandInEngine(LinearStepTime(base_s=0.0005), max_num_seqs=4)
        # Small kernel buffers on both ends, so ~250-byte chunks fill them quickly.
        listen = bind_socket("127.0.0.1", 0)
        listen.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        async with running_server(_app(engine, speed=4.0), sock=listen) as url:
            host, port = url.removeprefix("http://").split(":")
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((host, int(port)))
            sock.setblocking(False)
            # A small limit: the StreamReader stops pulling from the socket while unread.
            reader, writer = await asyncio.open_connection(sock=sock, limit=4096)
            body = json.dumps({"prompt": "x", "max_tokens": n_tokens, "ignore_eos": True,
                               "stream": True, "stream_options": {
                                   "include_usage": True, "continuous_usage_stats": True}})
            writer.write((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                          f"Content-Type: application/json\r\nContent-Length: {len(body)}"
                          f"\r\nConnection: close\r\n\r\n{body}").encode())
            await writer.drain()
            await asyncio.sleep(0.5)  # not reading; the stream outruns the buffers
            async with httpx.AsyncClient(timeout=30) as client:  # others are served
                other = await _stream(client, url, 20)
            raw = await asyncio.wait_for(reader.read(), 60)
            writer.close()
        return raw, other

    raw, other = asyncio.run(main())
    assert other["tokens"] == 20 and other["done"]
    text, usage_seen = [], []
    for line in raw.split(b"\n"):
        if line.startswith(b"data: {"):
            obj = json.loads(line[6:])
            usage_seen.append(obj["usage"]["completion_tokens"])
            text.extend(c["text"] for c in obj["choices"])
    assert "".join(text) == filler_text(0, n_tokens)
    assert usage_seen == sorted(usage_seen) and usage_seen[-1] == n_tokens
    assert raw.rstrip().endswith(b"data: [DONE]\n\n\r\n0")
