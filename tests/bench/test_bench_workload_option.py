"""`bench --workload`: the workload `simulate --workload` simulates, sent to a server (a
`ridgeline serve` on a free port, or `--target emulator`). The sent requests' lengths and send
times are checked against the workload file read here independently, and against the request
list `simulate --workload` plans for the same file and seed."""

from __future__ import annotations

import csv
import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
PUBLISHED = Path(__file__).parents[1] / "data" / "traces" / "published"
IP_CONFIG = """load:
  type: constant
  stages:
    - rate: 4
      duration: 1.5
    - rate: 2
      duration: 1
data:
  type: shared_prefix
  shared_prefix:
    num_groups: 2
    num_prompts_per_group: 2
    system_prompt_len: 40
    question_len: 24
    output_len: 5
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen([RIDGELINE, "serve", "--model", "llama-3.1-8b", "--host",
                             "127.0.0.1", "--port", str(port), "--enable-prefix-caching"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/v1/models", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=600)


def records(path: Path) -> tuple[dict, list[dict]]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    recs = [r for r in lines if r.get("type") == "request"]
    recs.sort(key=lambda r: int(re.sub(r"\D", "", str(r["id"]))))
    return lines[0], recs


def inference_perf_plan(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(send times, prompt id per request) of IP_CONFIG, as inference-perf's constant load
    and shared-prefix generator make them: per stage int(rate x duration) exponential gaps
    rescaled to the stage's duration, stages end to end; the 2 x 2 prompts shuffled once and
    sent in turn."""
    rng = np.random.default_rng(seed)
    times, start = [], 0.0
    for rate, dur in ((4.0, 1.5), (2.0, 1.0)):
        gaps = rng.exponential(1.0 / rate, int(rate * dur))
        gaps *= dur / gaps.sum()
        times.append(start + np.cumsum(gaps))
        start += dur
    t = np.concatenate(times)
    order = rng.permutation(4)
    return t, order[np.arange(t.size) % 4]


def test_inference_perf_config_sent_as_simulated(server: str, tmp_path: Path) -> None:
    cfg = tmp_path / "ip.yaml"
    cfg.write_text(IP_CONFIG)
    trace = tmp_path / "bench.jsonl"
    out = run("bench", "--base-url", server, "--workload", str(cfg), "--trace", str(trace),
              "--no-server-metrics")
    assert out.returncode == 0, out.stderr
    assert "workload: inference-perf config" in out.stderr
    header, recs = records(trace)
    assert header["dataset"]["kind"] == "workload"
    assert header["dataset"]["workload"]["source"] == "inference-perf config"
    assert header["engine_config"]["ignore_eos"] is True
    want_t, prompt_id = inference_perf_plan()
    assert len(recs) == want_t.size == 8
    assert [r["scheduled_s"] for r in recs] == pytest.approx(want_t.tolist(), abs=2e-6)
    assert all(r["prompt_tokens"] == 64 and r["output_tokens"] == 5 and r["max_tokens"] == 5
               for r in recs)
    # a prompt that comes round again is the same text: the server's cache holds its full
    # 16-token blocks once an earlier send of it has finished; a first send shares nothing
    # (the two groups' prompts differ from the first token)
    for i, r in enumerate(recs):
        earlier = [recs[j] for j in range(i) if prompt_id[j] == prompt_id[i]]
        if not earlier:
            assert r["cached_prompt_tokens"] == 0, (i, r)
        elif any(e["end_s"] < r["sent_s"] for e in earlier):
            assert r["cached_prompt_tokens"] == 48, (i, r)
    # simulate --workload plans the very same request list
    sim = tmp_path / "sim.jsonl"
    out = run("simulate", "--workload", str(cfg), "--trace", str(sim))
    assert out.returncode == 0, out.stderr
    _, srecs = records(sim)
    assert [(r["scheduled_s"], r["prompt_tokens"], r["output_tokens"]) for r in srecs] == \
        [(r["scheduled_s"], r["prompt_tokens"], r["max_tokens"]) for r in recs]


def _azure_rows(n: int) -> tuple[list[float], list[int], list[int]]:
    rows = list(csv.DictReader((PUBLISHED / "AzureLLMInferenceTrace_code_head200.csv").open()))
    rows = rows[:n]

    def secs(text: str) -> float:
        whole, _, frac = text.partition(".")
        return datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").timestamp() + int(frac) / 1e7

    t = [secs(r["TIMESTAMP"]) for r in rows]
    return ([x - t[0] for x in t], [int(r["ContextTokens"]) for r in rows],
            [int(r["GeneratedTokens"]) for r in rows])


def test_real_azure_trace_sent_at_its_timestamps(tmp_path: Path) -> None:
    trace = tmp_path / "azure.jsonl"
    out = run("bench", "--target", "emulator", "--workload",
              str(PUBLISHED / "AzureLLMInferenceTrace_code_head200.csv"), "--requests", "10",
              "--trace", str(trace), "--no-server-metrics")
    assert out.returncode == 0, out.stderr
    assert "workload: Azure LLM inference trace" in out.stderr
    assert "(the first 10 sent: --requests)" in out.stderr
    header, recs = records(trace)
    assert header["dataset"]["workload"]["format"] == "azure"
    want_t, want_p, want_o = _azure_rows(10)
    assert [r["scheduled_s"] for r in recs] == pytest.approx(want_t, abs=2e-6)
    assert [r["prompt_tokens"] for r in recs] == want_p
    assert [r["output_tokens"] for r in recs] == want_o


def test_vllm_command_closed_loop_as_simulated(tmp_path: Path) -> None:
    cmd = ("vllm bench serve --model m --dataset-name random --random-input-len 40 "
           "--random-output-len 6 --random-range-ratio 0.5 --num-prompts 9 "
           "--max-concurrency 3")
    trace = tmp_path / "v.jsonl"
    out = run("bench", "--target", "emulator", "--workload", cmd, "--trace", str(trace),
              "--no-server-metrics")
    assert out.returncode == 0, out.stderr
    header, recs = records(trace)
    assert header["load"]["pattern"] == "closed" and header["load"]["concurrency"] == 3
    assert len(recs) == 9
    p = [r["prompt_tokens"] for r in recs]
    o = [r["max_tokens"] for r in recs]
    # vLLM's random lengths: uniform over [len x (1 - ratio), len x (1 + ratio)]
    assert all(20 <= x <= 60 for x in p) and all(3 <= x <= 9 for x in o) and len(set(p)) > 1
    assert [r["output_tokens"] for r in recs] == o
    sim = tmp_path / "s.jsonl"
    out = run("simulate", "--workload", cmd, "--trace", str(sim))
    assert out.returncode == 0, out.stderr
    _, srecs = records(sim)
    assert [(r["prompt_tokens"], r["output_tokens"]) for r in srecs] == list(zip(p, o, strict=True))
    # never more than 3 in flight
    events = sorted([(r["sent_s"], 1) for r in recs] + [(r["end_s"], -1) for r in recs],
                    key=lambda e: (e[0], e[1]))
    assert max(np.cumsum([e[1] for e in events])) <= 3


@pytest.mark.parametrize(("args", "message"), [
    (["--workload", "nope.yaml"], "--workload: file 'nope.yaml' not found"),
    (["--workload", "vllm bench serve --num-prompts 3", "--rate", "2"],
     "--workload: sets the load itself; allowed: without --rate"),
    (["--workload", "vllm bench serve --num-prompts 3", "--prompt", "fixed:5"],
     "without --prompt"),
    (["--workload", str(PUBLISHED / "vidur_arxiv_summarization_head200.csv")],
     "vidur-lengths file, which has no timestamps"),
    (["--workload", "vllm bench serve --num-prompts 0"], "--num-prompts: got 0"),
])
def test_bad_workload_is_one_error_line(args: list[str], message: str) -> None:
    out = run("bench", "--base-url", "http://127.0.0.1:9", *args)
    assert out.returncode != 0, out.stderr
    assert "Traceback" not in out.stderr
    errors = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], out.stderr


def test_bad_row_in_a_trace_workload_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:17:03.9799600,4808,10\n"
                    "2023-11-16 18:17:04.0319600,-3,8\n")
    out = run("bench", "--base-url", "http://127.0.0.1:9", "--workload", str(path))
    errors = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    assert out.returncode != 0 and len(errors) == 1, out.stderr
    assert f"{str(path)!r} line 3: ContextTokens: got '-3'" in errors[0]


def test_a_long_gap_in_a_workload_names_the_way_out(tmp_path: Path) -> None:
    path = tmp_path / "burst.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "5,ChatGPT,40,3,43,Conversation log\n"
                    "7,ChatGPT,40,3,43,Conversation log\n"
                    "1807,GPT-4,40,3,43,API log\n")
    out = run("bench", "--base-url", "http://127.0.0.1:9", "--workload", str(path))
    errors = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    assert out.returncode != 0 and len(errors) == 1, out.stderr
    assert "--workload: " in errors[0] and "waits 1,800 s between requests 1 and 2" in errors[0]
    assert "pass --duration to bound the run, or --requests 2" in errors[0]
