"""Server input limits: prompts past the context, and connections that never finish their
headers."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from ridgeline.perf.step_time import LinearStepTime
from ridgeline.serve.app import EmulatorConfig, create_app
from ridgeline.serve.launcher import running_in_thread
from ridgeline.serve.tokenizer import _pieces, get_tokenizer
from tests.serve.test_serve_standin import StandInEngine, StandInRequest

MODEL = "emu-model"
HEADER_TIMEOUT_S = 0.5


@pytest.fixture(scope="module", params=["httptools", "h11"])
def server(request: pytest.FixtureRequest, monkeypatch_module: pytest.MonkeyPatch) -> str:
    monkeypatch_module.setenv("RIDGELINE_SERVE_HTTP", request.param)
    engine = StandInEngine(LinearStepTime(base_s=0.001), max_num_seqs=8)
    app = create_app(engine, StandInRequest, EmulatorConfig(
        served_model_name=MODEL, max_model_len=4096, header_timeout_s=HEADER_TIMEOUT_S))
    with running_in_thread(app) as url:
        yield url


@pytest.fixture(scope="module")
def monkeypatch_module() -> pytest.MonkeyPatch:
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.mark.parametrize("chars", [1_000_000, 3_000_000])
def test_prompt_past_the_context_is_a_400_like_vllm(server: str, chars: int) -> None:
    # bpe-openai refuses >= 1,000,000 characters; this was an HTTP 500.
    prompt = "hello world " * (chars // 12)
    r = httpx.post(server + "/v1/completions", json={"prompt": prompt, "max_tokens": 4},
                   timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "prompt" and err["type"] == "invalid_request_error"
    assert "maximum context length is 4096 tokens" in err["message"]
    r = httpx.post(server + "/v1/chat/completions", timeout=60,
                   json={"messages": [{"role": "user", "content": prompt}], "max_tokens": 4})
    assert r.status_code == 400, r.text
    assert "maximum context length" in r.json()["error"]["message"]


def test_counting_in_pieces_matches_the_whole_text() -> None:
    tok = get_tokenizer()
    if not tok.exact:
        pytest.skip("bpe-openai not installed: the approximate count has no pieces")
    text = "The quick brown fox jumps over the lazy dog, 12345 times! " * 3000
    whole = tok.count(text)
    pieces = _pieces(text, 10_000)
    assert len(pieces) > 10 and "".join(pieces) == text
    # Cuts fall before a space, where cl100k's pre-tokenizer splits anyway: same count.
    assert sum(tok.count(p) for p in pieces) == whole


def _closed_within(sock: socket.socket, limit_s: float) -> float:
    """Seconds until the server closes `sock` (recv returns b''), failing after limit_s."""
    sock.settimeout(limit_s)
    t0 = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for more than {limit_s} s")
    except ConnectionResetError:
        pass
    return time.monotonic() - t0


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=5)


def test_partial_headers_are_closed_after_the_header_timeout(server: str) -> None:
    with _connect(server) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: app")
        waited = _closed_within(sock, HEADER_TIMEOUT_S + 5)
    assert HEADER_TIMEOUT_S * 0.8 <= waited <= HEADER_TIMEOUT_S + 2


def test_silent_connection_is_closed_after_the_header_timeout(server: str) -> None:
    with _connect(server) as sock:
        waited = _closed_within(sock, HEADER_TIMEOUT_S + 5)
    assert waited <= HEADER_TIMEOUT_S + 2


def test_keep_alive_then_slow_second_request_is_closed(server: str) -> None:
    with _connect(server) as sock:
        body = b'{"prompt": "hi", "max_tokens": 2}'
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: " + str(len(body)).encode()
                     + b"\r\n\r\n" + body)
        sock.settimeout(5)
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200"), first[:200]
        time.sleep(HEADER_TIMEOUT_S * 2)  # idle between requests: keep-alive, not headers
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")  # ...and never finishes
        waited = _closed_within(sock, HEADER_TIMEOUT_S + 5)
    assert waited <= HEADER_TIMEOUT_S + 2


def test_a_stream_longer_than_the_header_timeout_is_not_cut(server: str) -> None:
    # 1,500 tokens at 1 ms per step: the response outlives the header timeout 3 times.
    r = httpx.post(server + "/v1/completions", timeout=30, json={
        "prompt": "hi", "max_tokens": 1500, "ignore_eos": True, "stream": False})
    assert r.status_code == 200
    assert r.json()["usage"]["completion_tokens"] == 1500


def _read_until_closed(sock: socket.socket, limit_s: float) -> bytes:
    sock.settimeout(limit_s)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for more than {limit_s} s "
                    f"(sent {got[:80]!r})")
    except ConnectionResetError:
        pass
    return got


def test_a_body_that_never_comes_is_408_and_closed(server: str) -> None:
    # Content-Length 100 and 6 bytes sent held the connection
    # (and its buffers) forever; the header timeout covered the headers only.
    with _connect(server) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: 100\r\n\r\n{\"mess")
        t0 = time.monotonic()
        got = _read_until_closed(sock, HEADER_TIMEOUT_S + 10)
    assert got.startswith(b"HTTP/1.1 408"), got[:200]
    assert time.monotonic() - t0 <= HEADER_TIMEOUT_S + 5


def test_a_413_closes_the_connection_instead_of_reading_the_body_as_a_request(
        server: str) -> None:
    # Without Connection: close the unread 99 TB "body" stayed the connection's next input.
    with _connect(server) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                     b"99999999999999\r\n\r\n{}")
        got = _read_until_closed(sock, 10)
    assert got.startswith(b"HTTP/1.1 413"), got[:200]
    assert b"connection: close" in got.lower()
