"""The UI's API keeps the CLI's contract under hostile bodies, the twin of
tests/commands/test_cli_exit_codes.py: 400 with a JSON error naming the field, 413 on a large body,
429 when every worker is busy, and the emulator's header timeout (raw sockets, on the
installed `ridgeline ui`). Never a 500."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from ridgeline.ui.app import MAX_BODY_BYTES, create_app

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app())


def _nested(depth: int) -> Any:
    x: Any = 1
    for _ in range(depth):
        x = [x]
    return x


HOSTILE: list[tuple[str, Any, str]] = [
    ("/api/estimate", {"batch": 1e308}, "batch"),
    ("/api/estimate", {"batch": 10**300}, "batch"),
    ("/api/estimate", {"prompt": -(10**300)}, "prompt"),
    ("/api/estimate", {"output": 2.5}, "output"),
    ("/api/estimate", {"batch": True}, "batch"),
    ("/api/estimate", {"batch": [8]}, "batch"),
    ("/api/estimate", {"tp": 10**30}, "tp"),
    ("/api/estimate", {"tp": "1e400"}, "tp"),
    ("/api/estimate", {"model": {"a": 1}}, "model"),
    ("/api/estimate", {"hardware": "h" * 5000}, "hardware"),
    ("/api/estimate", {"config": {"hidden_size": "big", "num_hidden_layers": 2}}, "config"),
    ("/api/estimate", {"config": {"model_type": "llama", "hidden_size": 10**300}}, "config"),
    ("/api/estimate", {"x": _nested(500)}, "nested"),
    ("/api/simulate", {"seed": -1}, "seed"),
    ("/api/simulate", {"seed": 2**64}, "seed"),
    ("/api/simulate", {"rates": [1e308]}, "rates"),
    ("/api/simulate", {"rates": [float("nan")]}, "rates"),
    ("/api/simulate", {"rates": [1] * 17}, "rates"),
    ("/api/simulate", {"rates": [True]}, "rates"),
    ("/api/simulate", {"requests": 10**300}, "requests"),
    ("/api/simulate", {"rates": [1] * 16, "requests": 5000}, "requests"),
    ("/api/simulate", {"prompt": "empirical:path=/etc/passwd"}, "prompt"),
    ("/api/simulate", {"prompt": "fixed:2000000000"}, "prompt"),
    ("/api/simulate", {"output": "lognormal:mean=5,sigma=1e300"}, "output"),
    ("/api/simulate", {"slos": "ttft_ms:5"}, "slos"),
    ("/api/simulate", {"slos": ["bogus<<5"]}, "slo"),
    ("/api/simulate", {"slos": ["x"] * 100}, "slos"),
]


@pytest.mark.parametrize(("path", "body", "field"), HOSTILE,
                         ids=[f"{p} {json.dumps(b)[:40]}" for p, b, _ in HOSTILE])
def test_hostile_body_is_a_400_naming_the_field(client, path, body, field):
    # NaN is not JSON: send it as Python's json writes it, as a careless client would.
    r = client.post(path, content=json.dumps(body).encode(),
                    headers={"content-type": "application/json"})
    assert r.status_code == 400, (r.status_code, r.text[:300])
    msg = r.json()["error"]
    assert "\n" not in msg and field in msg.lower(), msg


def test_nesting_limit_is_32_levels_exactly(client):
    # the body object is level 1, each list one more, the innermost value the last:
    # {"x": 30 lists deep} is 32 levels (past the depth check, to the schema, which names
    # the unknown field), 31 lists deep is 33 (refused for its depth)
    r = client.post("/api/estimate", json={"x": _nested(30)})
    assert r.status_code == 400 and r.json()["error"].startswith("request: x: unknown field")
    r = client.post("/api/estimate", json={"x": _nested(31)})
    assert r.status_code == 400
    assert r.json()["error"] == "request: JSON nested more than 32 levels; allowed: at most that"


def test_an_out_of_range_number_names_its_range(client):
    for path, body, msg in [
            ("/api/estimate", {"tp": 2000}, "tp: got 2000; allowed: an integer from 1 to 1024"),
            ("/api/simulate", {"requests": 0},
             "requests: got 0; allowed: an integer from 1 to 5000"),
            ("/api/estimate", {"prompt": 10**7 + 1},
             "prompt: got 10000001; allowed: an integer from 1 to 1e+07")]:
        r = client.post(path, json=body)
        assert r.status_code == 400 and r.json()["error"] == msg


def test_simulate_defaults_to_the_clis_seed_and_takes_eight_slos(client):
    small = {"rates": [2], "requests": 40}
    # no seed is `ridgeline simulate`'s default, 0; another seed draws other arrivals
    default = client.post("/api/simulate", json=small).json()
    assert default == client.post("/api/simulate", json={**small, "seed": 0}).json()
    assert default != client.post("/api/simulate", json={**small, "seed": 1}).json()
    slo = "ttft_ms<=500"
    assert client.post("/api/simulate", json={**small, "slos": [slo] * 8}).status_code == 200
    r = client.post("/api/simulate", json={**small, "slos": [slo] * 9})
    assert r.status_code == 400 and "at most 8 SLO texts" in r.json()["error"]


def test_deep_json_beyond_the_parser_is_a_400(client):
    r = client.post("/api/estimate", content=b"[" * 100_000 + b"]" * 100_000)
    assert r.status_code == 400 and "nested" in r.json()["error"]


def test_a_large_body_is_413_before_it_is_read(client):
    r = client.post("/api/estimate", content=b" " * (MAX_BODY_BYTES + 1))
    assert r.status_code == 413 and "body" in r.json()["error"]
    r = client.post("/api/estimate", content=b"{}", headers={"content-length": "99999999999"})
    assert r.status_code == 413


def test_every_worker_busy_is_a_429_not_a_queue():
    from ridgeline.ui import app as ui_app

    app = create_app(workers=1)
    gate = asyncio.Semaphore(1)
    # Hold the only worker, as a long simulation would, then ask again.
    app.state.workers = gate

    async def held() -> tuple[int, int]:
        await gate.acquire()
        try:
            import httpx

            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                # A queued request would wait for the held worker forever: bound it.
                busy = (await asyncio.wait_for(c.post("/api/estimate", json={"batch": 8}),
                                               10)).status_code
        finally:
            gate.release()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as c:
            free = (await c.post("/api/estimate", json={"batch": 8})).status_code
        return busy, free

    busy, free = asyncio.run(held())
    assert (busy, free) == (429, 200)
    assert ui_app.WORKERS >= 1


# ---- the header and body timeouts, on the installed command, with raw sockets -----------

HEADER_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def ui_server():
    proc = subprocess.Popen([RIDGELINE, "ui", "--port", "0", "--header-timeout",
                             str(HEADER_TIMEOUT_S)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # "ridgeline ui: http://127.0.0.1:PORT/ ..."
        assert "http://" in line, proc.stderr.read() if proc.poll() is not None else line
        port = int(line.split("http://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
        deadline = time.monotonic() + 30  # the address is printed before uvicorn listens
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _closed_within(sock: socket.socket, limit_s: float) -> tuple[float, bytes]:
    """Seconds until the server closes `sock`, and what it sent; fails past limit_s."""
    sock.settimeout(limit_s)
    t0 = time.monotonic()
    got = b""
    try:
        while chunk := sock.recv(4096):
            got += chunk
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for more than {limit_s} s")
    except ConnectionResetError:
        pass
    return time.monotonic() - t0, got


def test_ui_closes_a_slow_header_connection(ui_server):
    with socket.create_connection(("127.0.0.1", ui_server), timeout=5) as sock:
        sock.sendall(b"POST /api/estimate HTTP/1.1\r\nHost: x\r\nContent-Ty")
        waited, _ = _closed_within(sock, HEADER_TIMEOUT_S + 10)
    assert waited <= HEADER_TIMEOUT_S + 5


def test_ui_answers_408_to_a_body_that_never_comes(ui_server):
    with socket.create_connection(("127.0.0.1", ui_server), timeout=5) as sock:
        sock.sendall(b"POST /api/estimate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: 100\r\n\r\n{\"ba")
        waited, got = _closed_within(sock, HEADER_TIMEOUT_S + 10)
    assert got.startswith(b"HTTP/1.1 408"), got[:200]
    assert waited <= HEADER_TIMEOUT_S + 5


def test_ui_still_answers_after_the_slow_clients(ui_server):
    body = json.dumps({"batch": 8}).encode()
    with socket.create_connection(("127.0.0.1", ui_server), timeout=30) as sock:
        sock.sendall(b"POST /api/estimate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     b"Content-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        _, got = _closed_within(sock, 30)
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
