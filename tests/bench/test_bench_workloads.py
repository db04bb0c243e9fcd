"""Multi-turn conversations and trace replay (BurstGPT, Mooncake) against the emulator, whose
prefix-cache counters show exactly which prompt blocks were reused."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
BLOCK = 16


@pytest.fixture(scope="module")
def emulator() -> Iterator[str]:
    from ridgeline.serve.launcher import EmulatorProcess

    with EmulatorProcess(model="llama-3.1-8b", hardware="h100-sxm",
                         extra_args=["--enable-prefix-caching"]) as emu:
        yield emu.base_url


def hits_queries(base_url: str) -> tuple[float, float]:
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    vals = {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("vllm:prefix_cache_")}
    return vals["vllm:prefix_cache_hits_total"], vals["vllm:prefix_cache_queries_total"]


def bench(base_url: str, trace: Path, *args: str) -> list[dict]:
    out = subprocess.run([RIDGELINE, "bench", "--base-url", base_url, "--trace", str(trace),
                          "--no-server-metrics", *args], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    return lines


def test_each_conversation_reuses_exactly_its_own_history(emulator: str,
                                                          tmp_path: Path) -> None:
    h0, q0 = hits_queries(emulator)
    lines = bench(emulator, tmp_path / "mt.jsonl", "--multi-turn", "3", "--think-time",
                  "0.15", "--concurrency", "3", "--requests", "15", "--prompt",
                  "uniform:min=20,max=120", "--output", "uniform:min=5,max=30", "--ignore-eos")
    h1, q1 = hits_queries(emulator)
    header, recs = lines[0], [x for x in lines if x.get("type") == "request"]
    assert header["dataset"]["prompt_reuse"] == "multi-turn"
    assert header["dataset"]["multi_turn"] == {"turns": 3, "think_time": "0.15"}
    assert len(recs) == 15 and all(r["status"] == "ok" for r in recs)
    by = {(r["conversation"], r["turn"]): r for r in recs}
    # New-message lengths are the seed's prompt-length draws, request i = 3c + (k - 1).
    from ridgeline.workload.lengths import parse_lengths
    from ridgeline.workload.streams import workload_streams

    msg = parse_lengths("uniform:min=20,max=120").sample(15, workload_streams(0).lengths)
    expected = 0
    for (c, k), r in by.items():
        if k == 1:
            assert r["prompt_tokens"] == msg[3 * c] and r["cached_prompt_tokens"] == 0
            continue
        prev = by[(c, k - 1)]
        # the user reads the reply for the think time before sending the next turn
        assert r["sent_s"] - prev["end_s"] >= 0.15 - 1e-3, (c, k)
        # turn k's prompt = turn k-1's prompt + its reply + a new message
        assert r["prompt_tokens"] == prev["prompt_tokens"] + prev["output_tokens"] + \
            msg[3 * c + k - 1]
        # the cache holds the full blocks of turn k-1's prompt and reply (the KV of all but
        # its last output token, as vLLM): exactly those are reused, request by request
        # (the emulator's usage.prompt_tokens_details.cached_tokens)
        held = prev["prompt_tokens"] + prev["output_tokens"] - 1
        expected += BLOCK * (held // BLOCK)
        assert r["cached_prompt_tokens"] == BLOCK * (held // BLOCK)
    assert h1 - h0 == expected > 0
    assert q1 - q0 == sum(r["prompt_tokens"] for r in recs)


def test_mooncake_replay_shares_the_blocks_its_hash_ids_share(emulator: str,
                                                              tmp_path: Path) -> None:
    path = tmp_path / "mooncake.jsonl"
    rows = []
    for i in range(9):
        group = i % 3  # three groups of requests sharing two 512-token blocks
        rows.append({"timestamp": 400 * i, "input_length": 1124, "output_length": 4,
                     "hash_ids": [10 + group, 20 + group, 100 + i]})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    h0, _ = hits_queries(emulator)
    lines = bench(emulator, tmp_path / "mc.jsonl", "--replay", str(path), "--replay-speed",
                  "2", "--ignore-eos")
    h1, _ = hits_queries(emulator)
    header, recs = lines[0], [x for x in lines if x.get("type") == "request"]
    assert header["dataset"]["kind"] == "replay:mooncake"
    assert header["dataset"]["prompt_reuse"] == "trace hash_ids"
    assert len(recs) == 9
    assert [r["scheduled_s"] for r in recs] == pytest.approx([0.2 * i for i in range(9)])
    assert all(r["prompt_tokens"] == 1124 and r["output_tokens"] == 4 for r in recs)
    # every request but the first of each group reuses its group's two blocks
    assert h1 - h0 == 6 * 1024


def test_burstgpt_replay_times_and_lengths(emulator: str, tmp_path: Path) -> None:
    path = tmp_path / "burst.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "10.0,ChatGPT,120,7,127,Conversation log\n"
                    "10.2,ChatGPT,80,0,80,Conversation log\n"       # failed: skipped
                    "10.4,GPT-4,200,5,205,API log\n"
                    "10.5,GPT-4,64,3,67,API log\n")
    h0, _ = hits_queries(emulator)
    lines = bench(emulator, tmp_path / "b.jsonl", "--replay", str(path), "--ignore-eos")
    h1, _ = hits_queries(emulator)
    header, recs = lines[0], [x for x in lines if x.get("type") == "request"]
    assert header["dataset"]["skipped_rows"] == 1 and header["load"]["arrival"] == "replay"
    assert [r["scheduled_s"] for r in recs] == pytest.approx([0.0, 0.4, 0.5])
    assert [(r["prompt_tokens"], r["output_tokens"]) for r in recs] == [(120, 7), (200, 5),
                                                                        (64, 3)]
    assert h1 == h0  # replayed prompts are unique


@pytest.mark.parametrize(("args", "message"), [
    (["--multi-turn", "1"], "--multi-turn: got 1"),
    (["--multi-turn", "3", "--rate", "2"], "--multi-turn: a closed loop"),
    (["--think-time", "2"], "--think-time: only with --multi-turn"),
    (["--multi-turn", "2", "--think-time", "bogus:x=1"], "--think-time"),
    (["--replay", "nope.csv"], "--replay: file 'nope.csv' not found"),
    (["--replay-speed", "2"], "--replay-speed: only with --replay"),
    (["--replay", __file__, "--replay-speed", "0"], "--replay-speed: got 0"),
])
def test_workload_options_fail_in_one_line(args: list[str], message: str) -> None:
    out = subprocess.run([RIDGELINE, "bench", "--base-url", "http://127.0.0.1:9", *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    errors = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], out.stderr


def test_replay_outlasting_the_duration_is_a_warning_with_its_span() -> None:
    from ridgeline.bench.replay import ReplayTrace, check_replay_gaps

    tr = ReplayTrace("t.csv", "burstgpt", 1.0, (0.0, 10.0, 40.0, 90.0), (5,) * 4, (1,) * 4)
    assert check_replay_gaps(tr, None, 90.5) == []
    # bench keeps the arrivals before --duration: one exactly at it is not sent, so warned
    for duration_s in (90.0, 60.0):
        (line,) = check_replay_gaps(tr, None, duration_s)
        assert f"the 4 requests span 90 s, reaching --duration {duration_s:g} s" in line
    (line,) = check_replay_gaps(tr, 3, 30.0)         # only the first 3 are replayed
    assert "the 3 requests span 40 s" in line
