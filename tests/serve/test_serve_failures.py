"""Failure injection (`--failure-injection-rate`, `--failure-types`) through the installed
`ridgeline serve`: the rate, what each type looks like to a client, the /metrics counter."""

from __future__ import annotations

import json
import math
import re
import time
from collections import Counter

import httpx

from tests.serve_emulator_helpers import emulator, one_error_line, serve_refuses


def _binomial_99_interval(n: int, p: float) -> tuple[int, int]:
    """The central 99% interval of Binomial(n, p), from its exact CDF."""
    cdf, lo, hi = 0.0, None, None
    for k in range(n + 1):
        cdf += math.comb(n, k) * p**k * (1 - p) ** (n - k)
        if lo is None and cdf >= 0.005:
            lo = k
        if hi is None and cdf >= 0.995:
            hi = k
    assert lo is not None and hi is not None
    return lo, hi


def _injected(metrics: str) -> dict[str, float]:
    out = {}
    for line in metrics.splitlines():
        m = re.match(r'ridgeline:injected_failures_total\{(.*)\} (\S+)', line)
        if m:
            kind = re.search(r'type="([^"]+)"', m.group(1))
            assert kind is not None
            out[kind.group(1)] = float(m.group(2))
    return out


def test_rate_is_binomial_and_each_status_is_what_it_claims() -> None:
    n = 200
    with emulator("--failure-injection-rate", "30",
                  "--failure-types", "rate_limit,server_error,unavailable",
                  "--time-to-first-token", "0", "--inter-token-latency", "0") as emu:
        statuses: Counter[int] = Counter()
        with httpx.Client(timeout=30) as client:
            for _ in range(n):
                r = client.post(emu.base_url + "/v1/completions",
                                json={"prompt": "hi", "max_tokens": 1})
                statuses[r.status_code] += 1
                if r.status_code != 200:
                    err = r.json()["error"]   # OpenAI's error envelope
                    assert err["message"] and err["code"] == str(r.status_code)
            metrics = client.get(emu.base_url + "/metrics").text
    assert set(statuses) <= {200, 429, 500, 503}
    failed = n - statuses[200]
    lo, hi = _binomial_99_interval(n, 0.30)   # [44, 77] for 200 requests at 30%
    assert lo <= failed <= hi
    assert statuses[429] and statuses[500] and statuses[503]   # every type drawn
    assert _injected(metrics) == {"rate_limit": statuses[429], "server_error": statuses[500],
                                  "unavailable": statuses[503]}


def _stream_lines(url: str, max_tokens: int) -> tuple[list[str], list[float], float]:
    lines, times = [], []
    with httpx.stream("POST", url, timeout=30, json={
            "prompt": "hi", "max_tokens": max_tokens, "ignore_eos": True,
            "stream": True}) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: "):
                lines.append(line)
                times.append(time.perf_counter())
    return lines, times, time.perf_counter()


def test_stream_cut_ends_half_way_without_done() -> None:
    """On the engine-timed path: 10 tokens asked, 5 delivered, no [DONE], no finish_reason;
    the engine freed the request (nothing left running)."""
    with emulator("--failure-injection-rate", "100", "--failure-types", "stream_cut") as emu:
        url = emu.base_url + "/v1/completions"
        lines, _, _ = _stream_lines(url, 10)
        assert "data: [DONE]" not in lines
        chunks = [json.loads(ln[6:]) for ln in lines]
        assert len(chunks) == 5
        assert all(c["choices"][0]["finish_reason"] is None for c in chunks)
        # A non-streaming request cannot be cut: it is served whole.
        r = httpx.post(url, json={"prompt": "hi", "max_tokens": 4}, timeout=30)
        assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"
        metrics = httpx.get(emu.base_url + "/metrics").text
        assert _injected(metrics) == {"stream_cut": 1}
        assert re.search(r"vllm:num_requests_running\{[^}]*\} 0(\.0)?$", metrics, re.M)


def test_stall_goes_silent_then_ends_without_done() -> None:
    with emulator("--failure-injection-rate", "100", "--failure-types", "stall",
                  "--failure-stall-time", "1500", "--time-to-first-token", "50",
                  "--inter-token-latency", "10") as emu:
        lines, times, end = _stream_lines(emu.base_url + "/v1/completions", 8)
        assert "data: [DONE]" not in lines and len(lines) == 4
        assert end - times[-1] >= 1.4      # silent for the stall time, then closed
        assert _injected(httpx.get(emu.base_url + "/metrics").text) == {"stall": 1}


def test_bad_failure_options_are_one_line_errors() -> None:
    assert one_error_line(serve_refuses("--failure-injection-rate", "150"),
                          "--failure-injection-rate")
    assert one_error_line(serve_refuses("--failure-types", "rate_limit,meteor"),
                          "--failure-types")
    assert one_error_line(serve_refuses("--failure-types", " , "), "--failure-types")
