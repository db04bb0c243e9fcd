"""`simulate --arrival replay:path=FILE` takes each request's own prompt and output lengths
from a BurstGPT or Mooncake file (unless --prompt / --output is given) and says which it
used. The file here is in BurstGPT's format (its header and columns), written by the test
with seeded heavy-tailed lengths and 3% zero-token responses (BurstGPT's failed requests);
the trace's lengths are compared with the file's own, read back with the csv module."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

CLI = str(Path(sys.executable).parent / "ridgeline")
N = 300


@pytest.fixture(scope="module")
def burstgpt(tmp_path_factory) -> Path:
    rng = np.random.default_rng(11)
    ts = 1_700_000_000 + np.cumsum(rng.exponential(0.3, N))
    prompt = np.maximum(1, np.rint(rng.lognormal(6.2, 1.0, N))).astype(int)
    output = np.rint(rng.lognormal(5.3, 0.9, N)).astype(int)
    output[rng.random(N) < 0.03] = 0
    order = rng.permutation(N)          # rows out of time order, as a merged log may be
    path = tmp_path_factory.mktemp("replay") / "burst.csv"
    with path.open("w") as f:
        f.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
        for i in order:
            f.write(f"{ts[i]:.3f},ChatGPT,{prompt[i]},{output[i]},{prompt[i] + output[i]},"
                    "Conversation log\n")
    return path


def _file_lengths(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The file's own lengths in time order, by the csv module."""
    with path.open() as f:
        rows = sorted(csv.DictReader(f), key=lambda r: float(r["Timestamp"]))
    return (np.array([int(r["Request tokens"]) for r in rows]),
            np.array([int(r["Response tokens"]) for r in rows]))


def _trace_lengths(path: Path) -> tuple[dict, np.ndarray, np.ndarray]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    reqs = sorted((x for x in lines if x["type"] == "request"),
                  key=lambda x: x["scheduled_s"])
    return (lines[0], np.array([r["prompt_tokens"] for r in reqs]),
            np.array([r["output_tokens"] for r in reqs]))


def _simulate(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    trace = tmp_path / "t.jsonl"
    r = subprocess.run([CLI, "simulate", "-n", str(N), "--json", "--trace", str(trace),
                        *extra], capture_output=True, text=True)
    return r, trace


def test_replay_takes_each_requests_own_lengths(burstgpt, tmp_path):
    r, trace = _simulate(tmp_path, "--arrival", f"replay:path={burstgpt}")
    assert r.returncode == 0, r.stderr
    want_p, want_o = _file_lengths(burstgpt)
    header, got_p, got_o = _trace_lengths(trace)
    assert got_p.tolist() == want_p.tolist()
    # a zero-token response (a failed request) is asked for as one token
    assert got_o.tolist() == np.maximum(want_o, 1).tolist()
    zeros = int(np.count_nonzero(want_o == 0))
    assert zeros > 0
    # the statistics follow: the file's mean request, not the default lognormal's 450
    assert got_p.mean() + got_o.mean() == pytest.approx(
        want_p.mean() + np.maximum(want_o, 1).mean(), rel=1e-12)
    assert got_p.mean() > 2 * 250
    assert header["dataset"]["kind"] == "replay"
    assert header["dataset"]["zero_output_as_one"] == zeros
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("replay:"))
    assert f"mean {want_p.mean():.1f} tokens" in line and "from the file (burstgpt" in line
    assert f"{zeros} zero-token responses" in line


def test_an_explicit_length_overrides_the_files(burstgpt, tmp_path):
    r, trace = _simulate(tmp_path, "--arrival", f"replay:path={burstgpt}",
                         "--prompt", "fixed:123")
    assert r.returncode == 0, r.stderr
    _, want_o = _file_lengths(burstgpt)
    _, got_p, got_o = _trace_lengths(trace)
    assert set(got_p.tolist()) == {123}
    assert got_o.tolist() == np.maximum(want_o, 1).tolist()
    assert "prompt lengths from --prompt fixed:123" in r.stderr
    assert "output lengths from the file" in r.stderr


def test_a_file_of_timestamps_only_says_the_lengths_are_drawn(tmp_path):
    times = tmp_path / "times.txt"
    times.write_text("".join(f"{0.1 * i:.1f}\n" for i in range(N)))
    r, trace = _simulate(tmp_path, "--arrival", f"replay:path={times}",
                         "--output", "fixed:7")
    assert r.returncode == 0, r.stderr
    assert "timestamps only" in r.stderr and "--output fixed:7" in r.stderr
    _, _, got_o = _trace_lengths(trace)
    assert set(got_o.tolist()) == {7}


def test_the_library_refuses_trace_lengths_without_a_replay():
    from ridgeline.errors import RidgelineError
    from ridgeline.sim.workload import build_workload

    with pytest.raises(RidgelineError, match="--prompt/--output"):
        build_workload(10, "fixed:5", "fixed:5", rate_req_s=1.0, prompt_from_replay=True)
