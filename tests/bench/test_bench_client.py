"""The streaming client: SSE parsing, event timing against a scripted server, error kinds."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ridgeline.bench.client import (
    BenchRequest,
    EndpointConfig,
    InFlight,
    make_session,
    probe_endpoint,
    stream_request,
)
from ridgeline.bench.load import LoadSpec
from ridgeline.bench.single_run import BenchConfig, run_bench
from ridgeline.bench.sse import MalformedChunk, SSEParser, parse_chunk
from ridgeline.errors import RidgelineError
from ridgeline.workload.lengths import parse_lengths
from tests.bench.test_bench_server import fetch_log, start_subprocess_server

# Client receive time minus server write time, both on the host's monotonic clock. The
# loopback hop is ~50 us; the rest is scheduling on a 2-core machine shared with other
# test runs, so the bound is generous. The benchmark measures the real error.
TOLERANCE_S = 0.025


# --- SSE parsing ---------------------------------------------------------------------

STREAM = (b": keep-alive comment\r\n\r\n"
          b'data: {"choices":[{"delta":{"role":"assistant"}}]}\r\n\r\n'
          b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n'
          b"event: message\ndata: {\"choices\":[{\"delta\":\n"
          b'data: {"content":"lo"}}]}\n\n'
          b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
          b"data: [DONE]\n\n")
EXPECTED = ['{"choices":[{"delta":{"role":"assistant"}}]}',
            '{"choices":[{"delta":{"content":"Hel"}}]}',
            '{"choices":[{"delta":\n{"content":"lo"}}]}',
            '{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}',
            "[DONE]"]


def test_sse_parser_same_events_whatever_the_read_boundaries() -> None:
    whole = SSEParser().feed(STREAM)
    assert whole == EXPECTED
    for step in (1, 2, 3, 7, 64):
        p = SSEParser()
        got: list[str] = []
        for i in range(0, len(STREAM), step):
            got += p.feed(STREAM[i:i + step])
        got += p.flush()
        assert got == EXPECTED, step


def test_sse_last_event_without_blank_line_is_kept_on_flush() -> None:
    p = SSEParser()
    assert p.feed(b"data: [DONE]") == []
    assert p.flush() == ["[DONE]"]


def test_chunk_kinds() -> None:
    role_only = parse_chunk(EXPECTED[0])
    assert role_only.has_choices and not role_only.is_output
    assert parse_chunk('{"choices":[{"delta":{"content":""}}]}').is_output is False
    usage = parse_chunk(EXPECTED[3])
    assert (usage.prompt_tokens, usage.completion_tokens, usage.has_choices) == (3, 2, False)
    assert parse_chunk("[DONE]").done
    reasoning = parse_chunk('{"choices":[{"delta":{"reasoning_content":"hmm"}}]}')
    assert reasoning.is_output and reasoning.reasoning == "hmm" and reasoning.text == ""
    completion = parse_chunk('{"choices":[{"text":" a b","finish_reason":"length"}]}')
    assert (completion.text, completion.finish_reason) == (" a b", "length")
    assert parse_chunk('{"error":{"message":"boom"}}').error == "boom"
    with pytest.raises(MalformedChunk):
        parse_chunk("{not json")
    with pytest.raises(MalformedChunk):
        parse_chunk("[1, 2]")


# --- against the scripted server ------------------------------------------------------

@pytest.fixture(scope="module")
def server() -> Any:
    proc, url = start_subprocess_server()
    yield url
    proc.terminate()
    proc.wait(10)


def _run(server: str, tmp_path: Path, model: str, *, api: str = "completions",
         n: int = 3, output: str = "fixed:7", concurrency: int = 3, **endpoint: Any
         ) -> list[dict]:
    extra = endpoint.pop("extra_body", {})
    cfg = BenchConfig(
        endpoint=EndpointConfig(server, model, api=api, extra_body=extra, **endpoint),
        load=LoadSpec(concurrency=concurrency, arrival=None, requests=n),
        trace_path=tmp_path / f"{model}-{api}.jsonl", prompt=parse_lengths("fixed:12"),
        output=parse_lengths(output))
    run_bench(cfg, warn=lambda m: None)
    lines = [json.loads(x) for x in cfg.trace_path.read_text().splitlines()]
    assert lines[0]["type"] == "header" and lines[-1]["type"] == "footer"
    header = lines[0]
    recs = [x for x in lines if x["type"] == "request"]
    for r in recs:
        r["_t0"] = header["t0_perf_counter_s"]
    return recs


def _assert_events_match_server(recs: list[dict], server: str) -> None:
    log = fetch_log(server)["events"]
    for r in recs:
        server_times = log[r["id"]]
        client_times = [r["_t0"] + t for t in r["event_times_s"]]
        assert len(client_times) == len(server_times)
        for c, s in zip(client_times, server_times, strict=True):
            # received after it was written, and soon after
            assert -1e-4 <= c - s <= TOLERANCE_S, (c - s)


def test_events_match_the_server_write_times(server: str, tmp_path: Path) -> None:
    recs = _run(server, tmp_path, "steady", extra_body={"ttft_s": 0.03, "itl_s": 0.02})
    assert len(recs) == 3
    for r in recs:
        assert r["status"] == "ok" and len(r["event_times_s"]) == 7
        assert (r["output_tokens"], r["token_count_source"]) == (7, "usage")
        assert r["prompt_tokens"] == 12 and r["prompt_token_source"] == "usage"
        assert "event_tokens" not in r  # one token per event
        ev = r["event_times_s"]
        # the script: first token 30 ms after arrival, then 20 ms apart (sleeps overshoot)
        assert 0.03 <= ev[0] - r["sent_s"] < 0.03 + TOLERANCE_S
        gaps = np.diff(ev)
        assert all(0.02 - 1e-3 <= g < 0.02 + TOLERANCE_S for g in gaps)
        # end = when [DONE] arrived (the server sends it right after the usage chunk)
        assert 0 <= r["end_s"] - ev[-1] < TOLERANCE_S
    _assert_events_match_server(recs, server)


def test_multi_token_chunks_and_empty_deltas(server: str, tmp_path: Path) -> None:
    # 7 tokens in chunks of 3: events of 3, 3 and 1 tokens; empty deltas are not events.
    recs = _run(server, tmp_path, "multi", extra_body={"per_chunk": 3})
    for r in recs:
        assert len(r["event_times_s"]) == 3
        assert (r["output_tokens"], r["token_count_source"]) == (7, "usage")
        assert "event_tokens" not in r  # per-chunk counts unknown: not invented
    _assert_events_match_server(recs, server)


def test_per_chunk_usage_gives_event_tokens(server: str, tmp_path: Path) -> None:
    recs = _run(server, tmp_path, "continuous", extra_body={"sizes": [2, 1, 4]})
    for r in recs:
        assert r["event_tokens"] == [2, 1, 4] and r["output_tokens"] == 7
    _assert_events_match_server(recs, server)


def test_chat_role_only_and_reasoning(server: str, tmp_path: Path) -> None:
    recs = _run(server, tmp_path, "reasoning", api="chat")
    for r in recs:
        # role-only first chunk is not an event; 3 reasoning + 2 content chunks are
        assert len(r["event_times_s"]) == 5 and r["reasoning_events"] == 3
        assert r["finish_reason"] == "stop" and r["status"] == "ok"
    _assert_events_match_server(recs, server)


class WordTokenizer:
    name = "words"

    def count(self, text: str) -> int:
        return len(text.split())

    def encode(self, text: str) -> list[int]:
        return [len(w) for w in text.split()]

    def decode(self, ids: list[int]) -> str:
        return " ".join("x" * i for i in ids)


def test_token_count_fallbacks_without_usage(server: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    recs = _run(server, tmp_path, "multi", include_usage=False)
    assert all((r["output_tokens"], r["token_count_source"]) == (3, "chunks") for r in recs)
    import ridgeline.bench.single_run as run_mod

    monkeypatch.setattr(run_mod, "load_tokenizer", lambda spec: WordTokenizer())
    recs = _run(server, tmp_path, "multi", include_usage=False)
    for r in recs:
        assert (r["output_tokens"], r["token_count_source"]) == (7, "tokenizer")
        assert r["event_tokens"] == [3, 3, 1]


@pytest.mark.parametrize(("model", "status", "kind", "events"), [
    ("error_midstream", "error", "stream_error", 2),
    ("malformed", "error", "malformed", 2),
    ("disconnect", "error", "disconnect", 2),
    ("nodone", "error", "truncated", 1),
    ("http_500", "error", "http_500", 0),
    ("http_429", "rejected", "http_429", 0),
    ("stall", "error", "stall", 1),
])
def test_errors_are_classified_and_keep_their_events(server: str, tmp_path: Path, model: str,
                                                     status: str, kind: str,
                                                     events: int) -> None:
    recs = _run(server, tmp_path, model, n=2, stall_timeout_s=0.3)
    assert len(recs) == 2
    for r in recs:
        assert (r["status"], r["error_kind"], len(r["event_times_s"])) == (status, kind, events)
        assert r["error"]
        assert r["end_s"] >= r["sent_s"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_endpoint_is_one_line_error() -> None:
    cfg = EndpointConfig(f"http://127.0.0.1:{_free_port()}", "m")
    with pytest.raises(RidgelineError, match="--base-url: cannot reach"):
        asyncio.run(probe_endpoint(cfg, timeout_s=2.0))


def test_connection_refused_mid_run_is_recorded() -> None:
    cfg = EndpointConfig(f"http://127.0.0.1:{_free_port()}", "m")

    async def go() -> InFlight:
        async with make_session(cfg) as session:
            state = InFlight(BenchRequest("r0", "hi", 4))
            return await stream_request(session, cfg, state, 0.0)

    rec = asyncio.run(go()).record()
    assert (rec["status"], rec["error_kind"], rec["event_times_s"]) == ("error", "connect", [])


def test_request_body_forces_lengths() -> None:
    from ridgeline.bench.client import request_body

    cfg = EndpointConfig("http://x/v1", "m", api="chat", ignore_eos=True, min_tokens=True,
                         temperature=0.0, extra_body={"top_p": 0.9})
    body = json.loads(request_body(cfg, BenchRequest("r", "hello", 32)))
    assert body["messages"] == [{"role": "user", "content": "hello"}]
    assert (body["max_tokens"], body["min_tokens"], body["ignore_eos"]) == (32, 32, True)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0.0 and body["top_p"] == 0.9
    assert cfg.url == "http://x/v1/chat/completions"


def test_tokenizer_specs(tmp_path: Path) -> None:
    from ridgeline.bench.tokens import load_tokenizer

    assert load_tokenizer(None) is None
    with pytest.raises(RidgelineError, match="--tokenizer"):
        load_tokenizer(str(tmp_path / "missing.json"))
    import importlib.util

    if importlib.util.find_spec("bpe_openai") is None:
        pytest.skip("bpe-openai not installed")
    tok = load_tokenizer("tiktoken:cl100k_base")
    assert tok is not None and tok.count("hello world") == 2  # ' world' is one token
    from ridgeline.bench.dataset import exact_text

    rng = np.random.default_rng(0)
    for n in (1, 17, 300):
        assert tok.count(exact_text(n, rng, tok)) == n


def test_run_loop_uses_uvloop_when_importable(monkeypatch):
    import asyncio
    import gc

    from ridgeline.bench.client import run_loop

    async def loop_name() -> str:
        return type(asyncio.get_running_loop()).__module__

    try:
        import uvloop  # noqa: F401
        expected = "uvloop"
    except ImportError:
        expected = "asyncio"
    assert run_loop(loop_name()).startswith(expected)
    monkeypatch.setenv("RIDGELINE_BENCH_LOOP", "asyncio")
    assert run_loop(loop_name()).startswith("asyncio")
    assert gc.get_freeze_count() == 0  # the heap is unfrozen again after the run


def test_max_error_rate_aborts_after_twenty_with_the_counts(server: str, tmp_path: Path) -> None:
    # Every request is an HTTP 500: with --max-error-rate 0.5 the run stops once 20 have
    # finished (runner.MIN_REQUESTS_FOR_ABORT) and 20 of 20 failed; one at a time, so the
    # counts at that instant are exact.
    cfg = BenchConfig(
        endpoint=EndpointConfig(server, "http_500"),
        load=LoadSpec(concurrency=1, arrival=None, requests=60),
        trace_path=tmp_path / "abort.jsonl", prompt=parse_lengths("fixed:12"),
        output=parse_lengths("fixed:3"), max_error_rate=0.5)
    out = run_bench(cfg, warn=lambda m: None)
    assert out.aborted == "error rate 20/20 exceeds --max-error-rate 0.5"
    footer = json.loads(cfg.trace_path.read_text().splitlines()[-1])
    assert footer["interrupted"] is True
    assert f"aborted: {out.aborted}" in footer["notes"]
    assert footer["requests_written"] < 60


def test_client_lag_is_send_minus_when_the_request_was_ready(server: str,
                                                             tmp_path: Path) -> None:
    # closed loop: a request is due when its user is free, so its lag is the client's own
    # delay before the send: never negative, and small on loopback
    cfg = BenchConfig(
        endpoint=EndpointConfig(server, "steady"),
        load=LoadSpec(concurrency=2, arrival=None, requests=12),
        trace_path=tmp_path / "lag.jsonl", prompt=parse_lengths("fixed:12"),
        output=parse_lengths("fixed:3"))
    lags = run_bench(cfg, warn=lambda m: None).stats.lags_s
    assert len(lags) == 12
    assert min(lags) >= 0.0 and max(lags) < 0.5
