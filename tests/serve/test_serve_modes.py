"""`serve --mode echo|random` and the fixed latencies (llm-d-inference-sim's options),
through the installed `ridgeline serve` and a real HTTP client on the wall clock."""

from __future__ import annotations

import contextlib
import json
import re
import statistics
import time
from collections.abc import Iterator

import httpx
import pytest

from ridgeline.serve.launcher import EmulatorProcess
from tests.serve_emulator_helpers import emulator, one_error_line, serve_refuses

TTFT_MS = 200.0
ITL_MS = 25.0
PREFILL_PER_TOKEN_MS = 0.5


@pytest.fixture(scope="module")
def echo_server() -> Iterator[EmulatorProcess]:
    with emulator("--mode", "echo") as emu:
        yield emu


@pytest.fixture(scope="module")
def fixed_server() -> Iterator[EmulatorProcess]:
    with emulator("--mode", "random", "--time-to-first-token", str(TTFT_MS),
                  "--inter-token-latency", str(ITL_MS),
                  "--prefill-time-per-token", str(PREFILL_PER_TOKEN_MS)) as emu:
        yield emu


def _stream(url: str, body: dict, client: httpx.Client | None = None
            ) -> tuple[list[str], list[float], float, list[str]]:
    """(text pieces, their arrival times, the send time, raw data lines)."""
    pieces: list[str] = []
    times: list[float] = []
    lines: list[str] = []
    with contextlib.nullcontext(client) if client else httpx.Client(timeout=30) as client:
        t0 = time.perf_counter()
        with client.stream("POST", url, json={**body, "stream": True}) as resp:
            assert resp.status_code == 200
            for line in resp.iter_lines():
                if not line.startswith("data: "):
                    continue
                lines.append(line)
                if line == "data: [DONE]":
                    continue
                choice = json.loads(line[6:])["choices"]
                if not choice:
                    continue
                piece = choice[0].get("text")
                if piece is None:
                    piece = choice[0]["delta"].get("content")
                if piece:
                    pieces.append(piece)
                    times.append(time.perf_counter())
    return pieces, times, t0, lines


def test_echo_returns_the_prompt_and_the_last_user_message(echo_server: EmulatorProcess
                                                           ) -> None:
    base = echo_server.base_url
    prompt = "The quick brown fox jumps over the lazy dog."
    r = httpx.post(base + "/v1/completions", json={"prompt": prompt, "max_tokens": 64})
    assert r.status_code == 200
    choice = r.json()["choices"][0]
    assert choice["text"] == prompt and choice["finish_reason"] == "stop"
    # Chat: the last user message, not the system prompt nor an earlier turn.
    msgs = [{"role": "system", "content": "be brief"},
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "an answer"},
            {"role": "user", "content": "second   question, please"}]
    r = httpx.post(base + "/v1/chat/completions", json={"messages": msgs, "max_tokens": 50})
    assert r.json()["choices"][0]["message"]["content"] == "second   question, please"
    # Streamed, the pieces add up to the prompt.
    pieces, _, _, lines = _stream(base + "/v1/completions", {"prompt": prompt,
                                                             "max_tokens": 64})
    assert "".join(pieces) == prompt and lines[-1] == "data: [DONE]"
    assert len(pieces) == 9   # one piece per word: 9 words
    # Cut to max_tokens: the first 3 words, finish_reason "length".
    r = httpx.post(base + "/v1/completions", json={"prompt": prompt, "max_tokens": 3})
    choice = r.json()["choices"][0]
    assert choice["text"] == "The quick brown" and choice["finish_reason"] == "length"
    assert r.json()["usage"]["completion_tokens"] == 3


def test_random_mode_is_seeded_words(fixed_server: EmulatorProcess) -> None:
    url = fixed_server.base_url + "/v1/completions"

    def text(seed: int) -> str:
        r = httpx.post(url, json={"prompt": "hi", "max_tokens": 12, "seed": seed,
                                  "ignore_eos": True}, timeout=30)
        assert r.status_code == 200
        return str(r.json()["choices"][0]["text"])

    a, b, c = text(7), text(7), text(8)
    assert a == b and a != c
    assert len(a.split(" ")) == 12 and all(w.isalpha() for w in a.split(" "))
    assert a != "hi"   # not echo


def test_fixed_ttft_and_itl_within_5_percent(fixed_server: EmulatorProcess) -> None:
    url = fixed_server.base_url + "/v1/completions"
    ttfts_ms, itls_ms = [], []
    client = httpx.Client(timeout=30)   # one keep-alive connection: no connect in the TTFT
    assert client.get(fixed_server.base_url + "/v1/models").status_code == 200
    for _ in range(5):
        body = {"prompt": "hi", "max_tokens": 21, "ignore_eos": True,
                "ridgeline": {"prompt_tokens": 100}}
        pieces, times, t0, lines = _stream(url, body, client)
        assert len(pieces) == 21 and lines[-1] == "data: [DONE]"
        ttfts_ms.append((times[0] - t0) * 1000)
        itls_ms.append((times[-1] - times[0]) / 20 * 1000)
    client.close()
    # TTFT = the fixed part + 0.5 ms for each of the 100 prompt tokens = 250 ms.
    expected_ttft_ms = TTFT_MS + PREFILL_PER_TOKEN_MS * 100
    assert statistics.median(ttfts_ms) == pytest.approx(expected_ttft_ms, rel=0.05)
    assert statistics.median(itls_ms) == pytest.approx(ITL_MS, rel=0.05)


def test_kv_transfer_latency_replaces_ttft_for_remote_prefill() -> None:
    with emulator("--time-to-first-token", "600", "--kv-cache-transfer-latency", "200",
                  "--inter-token-latency", "10") as emu:
        url = emu.base_url + "/v1/completions"
        body = {"prompt": "hi", "max_tokens": 2, "ignore_eos": True,
                "kv_transfer_params": {"do_remote_prefill": True}}
        ttfts = []
        with httpx.Client(timeout=30) as client:
            assert client.get(emu.base_url + "/v1/models").status_code == 200
            for _ in range(3):
                _, times, t0, _ = _stream(url, body, client)
                ttfts.append((times[0] - t0) * 1000)
            metrics = client.get(emu.base_url + "/metrics").text
        assert statistics.median(ttfts) == pytest.approx(200.0, rel=0.05)
        # the vLLM metrics count these requests too: 3 TTFTs of ~0.2 s, 3 x 2 tokens
        count = re.search(r"^vllm:time_to_first_token_seconds_count\{[^}]*\} (\S+)$",
                          metrics, re.M)
        total = re.search(r"^vllm:time_to_first_token_seconds_sum\{[^}]*\} (\S+)$",
                          metrics, re.M)
        assert count and float(count.group(1)) == 3
        assert total and float(total.group(1)) == pytest.approx(0.6, rel=0.1)
        assert re.search(r"^vllm:generation_tokens_total\{[^}]*\} 6(\.0)?$", metrics, re.M)


def test_bad_mode_and_latencies_are_one_line_errors() -> None:
    assert one_error_line(serve_refuses("--mode", "parrot"), "--mode")
    assert one_error_line(serve_refuses("--time-to-first-token", "-5"),
                          "--time-to-first-token")
    assert one_error_line(serve_refuses("--inter-token-latency", "nan"),
                          "--inter-token-latency")
    assert one_error_line(serve_refuses("--inter-token-latency-std-dev", "-1"),
                          "--inter-token-latency-std-dev")
    assert one_error_line(serve_refuses("--time-factor-under-load", "0.5"),
                          "--time-factor-under-load")


def test_time_factor_under_load_scales_latencies_with_requests_in_flight() -> None:
    """--time-factor-under-load 2 with --max-num-seqs 5: alone a request's gaps are the
    configured 20 ms; with 5 in flight every gap is 2 x 20 = 40 ms."""
    import threading

    with emulator("--time-to-first-token", "50", "--inter-token-latency", "20",
                  "--time-factor-under-load", "2", "--max-num-seqs", "5") as emu:
        url = emu.base_url + "/v1/completions"
        body = {"prompt": "hi", "max_tokens": 21, "ignore_eos": True}
        _, times, _, _ = _stream(url, body)
        assert (times[-1] - times[0]) / 20 * 1000 == pytest.approx(20.0, rel=0.05)
        itls: list[float] = []

        def one() -> None:
            _, t, _, _ = _stream(url, body)
            itls.append((t[-1] - t[0]) / 20 * 1000)

        threads = [threading.Thread(target=one) for _ in range(5)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        assert len(itls) == 5
        assert statistics.median(itls) == pytest.approx(40.0, rel=0.10)
