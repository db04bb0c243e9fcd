"""`ridgeline bench` as a user runs it: Ctrl-C/SIGTERM leave a complete trace, sweeps,
one-line errors, the emulator target."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.bench.test_bench_server import fetch_log, start_subprocess_server


@pytest.fixture()
def server() -> Any:
    proc, url = start_subprocess_server()
    yield url
    proc.terminate()
    proc.wait(10)


def bench_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "ridgeline.cli", "bench", "--no-progress", *args]


def read_trace(path: Path) -> tuple[dict, list[dict], dict | None]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    footer = lines[-1] if lines[-1]["type"] == "footer" else None
    return lines[0], [x for x in lines if x["type"] == "request"], footer


def count_records(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if '"type":"request"' in line)


def interrupt_after(cmd: list[str], trace: Path, n_records: int, sig: int) -> tuple[int, str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    deadline = time.monotonic() + 60
    while count_records(trace) < n_records:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out + err


@pytest.mark.parametrize(("workers", "sig"), [("1", signal.SIGINT), ("2", signal.SIGTERM)])
def test_interrupt_leaves_every_finished_request_and_cuts_off_the_rest(
        server: str, tmp_path: Path, workers: str, sig: int) -> None:
    trace = tmp_path / "run.jsonl"
    # 8 users, each request 100 tokens 20 ms apart (~2 s); interrupted once the first 8
    # finished, when the next 8 have just started: they cannot finish in the 0.3 s grace.
    cmd = bench_cmd("--base-url", server, "--model", "steady", "--concurrency", "8",
                    "--requests", "1000", "--output", "fixed:100", "--grace", "0.3",
                    "--workers", workers, "--trace", str(trace), "--prompt", "fixed:4")
    rc, text = interrupt_after(cmd, trace, 8, sig)
    # Interrupted (Ctrl-C, or SIGTERM from a job runner): the summary and the trace are
    # written, then exit 130 as a shell reports an interrupted command (docs/cli.md).
    assert rc == 130, text
    assert "TTFT" in text
    _, recs, footer = read_trace(trace)
    assert footer is not None and footer["interrupted"] is True
    assert footer["requests_written"] == len(recs)
    ok = [r for r in recs if r["status"] == "ok"]
    cut = [r for r in recs if r["status"] == "cutoff"]
    assert len(ok) >= 8 and len(cut) >= 1 and len(ok) + len(cut) == len(recs)
    assert all(len(r["event_times_s"]) == 100 for r in ok)
    assert all(0 < len(r["event_times_s"]) < 100 for r in cut)  # partial streams kept
    # Nothing lost: every request the server received is in the trace, once.
    arrivals = fetch_log(server)["arrivals"]
    assert sorted(r["id"] for r in recs) == sorted(arrivals)
    # the cut-off ones ended within the grace period of the signal
    last_ok_end = max(r["end_s"] for r in ok)
    assert all(r["end_s"] - last_ok_end < 0.3 + 1.0 for r in cut)


def test_sweep_writes_one_trace_per_point_and_a_knee(server: str, tmp_path: Path) -> None:
    trace = tmp_path / "sweep.jsonl"
    out = subprocess.run(bench_cmd("--base-url", server, "--model", "steady",
                                   "--concurrency", "1,4", "--requests", "24",
                                   "--output", "fixed:4", "--trace", str(trace), "--json",
                                   "--slo", "ttft_ms<=1000"),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    assert [p["point"] for p in payload["sweep"]] == ["concurrency=1", "concurrency=4"]
    # The max-power point (metrics/knee.py: output tok/s per second of mean E2E). The
    # steady server answers every request in 20 ms + 3 x 10 ms = 50 ms whatever the
    # concurrency, so E2E stays near 50 ms, the power grows with the concurrency up to the
    # last point, and no knee is claimed at the range's end.
    rows = payload["sweep"]
    e2e = [r["e2e_mean_ms"] for r in rows]
    assert 45.0 <= e2e[0] <= 150.0 and 45.0 <= e2e[1] <= 150.0, e2e
    power = [r["output_tok_s"] / r["e2e_mean_ms"] for r in rows]
    assert power[1] > power[0] and payload["knee"] is None
    for c in (1, 4):
        header, recs, _ = read_trace(tmp_path / f"sweep.concurrency-{c}.jsonl")
        assert header["load"]["concurrency"] == c and len(recs) == 24
    assert payload["points"][1]["analysis"]["goodput"]["slos"] == ["ttft_ms<=1000"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("args", "message"), [
    (["--base-url", "http://127.0.0.1:{port}"], "error: --base-url: cannot reach"),
    (["--rate", "1,2", "--concurrency", "1,2"], "error: --rate/--concurrency"),
    (["--rate", "fast"], "error: --rate"),
    (["--prompt", "zipf:a=2"], "error: --prompt"),
    (["--ray", "local"], "pip install ray"),
])
def test_bad_input_is_one_line(args: list[str], message: str) -> None:
    if args[0] == "--ray":
        import importlib.util

        if importlib.util.find_spec("ray") is not None:
            pytest.skip("ray is installed: the missing-ray message cannot be shown")
    args = [a.format(port=_free_port()) for a in args]
    if "--base-url" not in args:
        args += ["--base-url", f"http://127.0.0.1:{_free_port()}"]
    out = subprocess.run(bench_cmd(*args), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr


def test_emulator_target_zero_setup(tmp_path: Path) -> None:
    pytest.importorskip("ridgeline.serve.launcher")
    trace = tmp_path / "emu.jsonl"
    out = subprocess.run(bench_cmd("--target", "emulator", "--model", "llama-3.1-8b",
                                   "--hardware", "h100-sxm", "--speed", "4",
                                   "--concurrency", "4", "--requests", "12",
                                   "--prompt", "uniform:min=20,max=200", "--output", "fixed:16",
                                   "--ignore-eos", "--trace", str(trace), "--json"),
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    header, recs, footer = read_trace(trace)
    assert header["engine"] == "ridgeline-emulator" and header["hardware"] == "h100-sxm"
    assert footer is not None and len(recs) == 12
    from ridgeline.workload.lengths import parse_lengths
    from ridgeline.workload.streams import workload_streams

    # The emulator counts prompts with cl100k; synthetic prompts are one token per word.
    asked = parse_lengths("uniform:min=20,max=200").sample(12, workload_streams(0).lengths)
    by_id = {r["id"]: r for r in recs}
    for i, n in enumerate(asked.tolist()):
        r = by_id[f"r{i}"]
        assert r["status"] == "ok" and r["prompt_token_source"] == "usage"
        assert r["prompt_tokens"] == n
        assert r["output_tokens"] == 16 and r["token_count_source"] == "usage"
        assert sum(r.get("event_tokens") or [1] * len(r["event_times_s"])) == 16
