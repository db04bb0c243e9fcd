"""Session traces (the Qwen-Bailian JSONL format: chat_id, parent_chat_id, timestamp in s,
lengths, 16-token hash_ids) through the installed command: sessions counted from the parent
chains, lengths and times as the file's, shared blocks reused by the server's prefix cache
when bench sends the workload. Expected values are read here with json only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
SAMPLE = Path(__file__).parents[1] / "data" / "traces" / "qwen_bailian_sessions.jsonl"


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=600)


def test_sessions_lengths_and_times_as_the_file(tmp_path: Path) -> None:
    recs = rows(SAMPLE)
    root: dict[int, int] = {}
    for r in recs:   # a session is a chain of parent_chat_id links from its root
        root[r["chat_id"]] = root[r["parent_chat_id"]] if r["parent_chat_id"] >= 0 \
            else r["chat_id"]
    sessions = len(set(root.values()))
    assert sessions == 8 and len(recs) == 40
    out = run("simulate", "--workload", str(SAMPLE), "--json", "--trace",
              str(tmp_path / "s.jsonl"))
    assert out.returncode == 0, out.stderr
    assert f"40 requests in {sessions} sessions (5.0 requests each)" in out.stderr
    at = {r["chat_id"]: r["timestamp"] for r in recs}
    gaps = [r["timestamp"] - at[r["parent_chat_id"]] for r in recs if r["parent_chat_id"] >= 0]
    assert len(gaps) == 32
    assert (f"a turn arrives {np.median(gaps):.2f} s after its parent's arrival (median; "
            f"p90 {np.percentile(gaps, 90):.2f} s)") in out.stderr
    assert json.loads(out.stdout)["workload"]["sessions"] == sessions
    sim = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    sim = sorted((r for r in sim if r.get("type") == "request"), key=lambda r: int(r["id"]))
    order = sorted(range(len(recs)), key=lambda i: recs[i]["timestamp"])
    t0 = recs[order[0]]["timestamp"]
    assert [r["prompt_tokens"] for r in sim] == [recs[i]["input_length"] for i in order]
    assert [r["output_tokens"] for r in sim] == [recs[i]["output_length"] for i in order]
    assert [r["scheduled_s"] for r in sim] == pytest.approx(
        [recs[i]["timestamp"] - t0 for i in order], abs=1e-6)


def test_bench_sends_the_shared_blocks_as_shared_text(tmp_path: Path) -> None:
    # the sample's first 12 requests, 20 times faster (bench sends at the file's times)
    recs = sorted(rows(SAMPLE), key=lambda r: r["timestamp"])[:12]
    fast = tmp_path / "fast.jsonl"
    fast.write_text("".join(json.dumps({**r, "timestamp": round(r["timestamp"] / 20, 4)})
                            + "\n" for r in recs))
    trace = tmp_path / "b.jsonl"
    out = run("bench", "--target", "emulator", "--emulator-arg=--enable-prefix-caching",
              "--workload", str(fast), "--trace", str(trace), "--no-server-metrics")
    assert out.returncode == 0, out.stderr
    sent = sorted((json.loads(x) for x in trace.read_text().splitlines()[1:]
                   if '"request"' in x), key=lambda r: int(r["id"][1:]))
    assert [r["prompt_tokens"] for r in sent] == [r["input_length"] for r in recs]
    assert [r["max_tokens"] for r in sent] == [r["output_length"] for r in recs]
    def shared(i: int, j: int) -> int:
        """Leading blocks request i shares with request j (the last prompt token of i is
        always computed, so a block holding it cannot be hit)."""
        a, b = recs[i]["hash_ids"], recs[j]["hash_ids"]
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k] and (k + 1) * 16 <= min(
                recs[j]["input_length"], recs[i]["input_length"] - 1):
            k += 1
        return k

    hits = 0
    for i, r in enumerate(sent):
        # blocks are in the server's cache once an earlier request's prefill has run (its
        # first token came back before this one was sent); 16 tokens a block, the
        # emulator's block size too
        ready = max([shared(i, j) for j in range(i)
                     if sent[j]["event_times_s"][0] < r["sent_s"]], default=0)
        if max([shared(i, j) for j in range(i)], default=0) == 0:
            assert r["cached_prompt_tokens"] == 0, (i, r)
        else:
            assert r["cached_prompt_tokens"] >= 16 * ready, (i, r, ready)
        hits += ready > 0
    assert hits >= 3   # the sample's sessions and shared system prompts do reuse blocks


@pytest.mark.parametrize(("line", "message"), [
    ('{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 40, '
     '"output_length": 3, "hash_ids": [1, 2, "x"]}', "line 2: hash_ids:"),
    ('{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.5, "output_length": 3}',
     "line 2: input_length: missing"),
    ('{"chat_id": 1, "parent_chat_id": -1, "timestamp": -4, "input_length": 40, '
     '"output_length": 3}', "line 2: timestamp: got -4"),
    ('{"chat_id": 1, "parent_chat_id": -1, "timestamp": 1, "input_length": 40, '
     '"output_length": 3, "hash_ids": [1, 2, 3, 4, 5, 6]}', "line 2: hash_ids: got 6 ids"),
])
def test_a_bad_session_line_is_one_error(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('{"chat_id": 0, "parent_chat_id": -1, "timestamp": 0, "input_length": 32, '
                    '"output_length": 2, "hash_ids": [7, 8]}\n' + line + "\n")
    out = run("simulate", "--arrival", f"replay:path={path}", "--requests", "2")
    errors = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    assert out.returncode != 0 and len(errors) == 1, out.stderr
    assert f"{str(path)!r} {message}" in errors[0], errors[0]


def test_a_line_past_the_cap_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    from ridgeline.workload.trace_formats import bounded_lines

    path = tmp_path / "big.jsonl"
    path.write_text('{"chat_id": 0}\n' + "x" * 5000 + "\n")
    with path.open() as fh:
        lines = bounded_lines(fh, "f", limit=1000)
        assert next(lines) == (1, '{"chat_id": 0}\n')
        with pytest.raises(Exception, match="f line 2: longer than 1,000 characters"):
            next(lines)


def test_burstgpt_3_session_ids_are_sessions(tmp_path: Path) -> None:
    # BurstGPT_3's columns: Session ID and Elapsed time inserted after Timestamp; API log
    # rows carry no session
    path = tmp_path / "BurstGPT_3.csv"
    path.write_text("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,"
                    "Total tokens,Log Type\n"
                    "0,a1f,2.5,ChatGPT,100,20,120,Conversation log\n"
                    "1,,1.0,GPT-4,50,10,60,API log\n"
                    "3,b2e,2.0,ChatGPT,80,15,95,Conversation log\n"
                    "6,a1f,3.1,ChatGPT,230,40,270,Conversation log\n")
    out = run("simulate", "--workload", str(path), "--json")
    assert out.returncode == 0, out.stderr
    assert "4 requests in 2 sessions (1.5 requests each; 1 outside any)" in out.stderr
    w = json.loads(out.stdout)["workload"]
    assert w["sessions"] == 2 and w["requests_outside_sessions"] == 1
