"""Real rows of the published LLM traces (tests/data/traces/published, sources in its
SOURCE.md) simulated through the installed command: the simulated trace's requests carry the
file's own lengths and times, checked against statistics computed here with csv/json."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
DATA = Path(__file__).parents[1] / "data" / "traces" / "published"


def _azure_seconds(text: str) -> float:
    whole, _, frac = text.partition(".")
    base = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").timestamp()
    return base + int(frac) / 10 ** len(frac)


def file_rows(name: str) -> tuple[list[float] | None, list[int], list[int]]:
    """(times in s from the first row or None, prompt lengths, output lengths), read here
    with csv/json only."""
    path = DATA / name
    if name.endswith(".jsonl"):
        recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        t0 = recs[0]["timestamp"]
        return ([(r["timestamp"] - t0) / 1e3 for r in recs], [r["input_length"] for r in recs],
                [r["output_length"] for r in recs])
    rows = list(csv.DictReader(path.open(newline="")))
    if "TIMESTAMP" in rows[0]:
        ts = [_azure_seconds(r["TIMESTAMP"]) for r in rows]
        return ([t - ts[0] for t in ts], [int(r["ContextTokens"]) for r in rows],
                [int(r["GeneratedTokens"]) for r in rows])
    times = [float(r["arrived_at"]) for r in rows] if "arrived_at" in rows[0] else None
    return (times, [int(r["num_prefill_tokens"]) for r in rows],
            [int(r["num_decode_tokens"]) for r in rows])


def simulate(tmp_path: Path, *args: str) -> list[dict]:
    trace = tmp_path / "sim.jsonl"
    out = subprocess.run([RIDGELINE, "simulate", *args, "--trace", str(trace)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return [r for r in map(json.loads, trace.read_text().splitlines())
            if r.get("type") == "request"]


@pytest.mark.parametrize("name", ["AzureLLMInferenceTrace_conv_head200.csv",
                                  "AzureLLMInferenceTrace_code_head200.csv",
                                  "vidur_splitwise_conv_head200.csv",
                                  "mooncake_conversation_trace_head200.jsonl"])
def test_simulated_lengths_and_times_are_the_files(name: str, tmp_path: Path) -> None:
    times, prompt, output = file_rows(name)
    assert times is not None and len(prompt) == 200
    n = 60 if name.startswith("mooncake") else 200   # Mooncake's prompts run to 120k tokens
    recs = simulate(tmp_path, "--workload", str(DATA / name), "--requests", str(n))
    assert len(recs) == n
    recs.sort(key=lambda r: int(r["id"]))
    order = np.argsort(np.asarray(times), kind="stable")[:n]
    want_p = np.asarray(prompt)[order]
    want_o = np.maximum(np.asarray(output)[order], 1)   # a zero-token response asked as 1
    got_p = np.array([r["prompt_tokens"] for r in recs])
    got_o = np.array([r["output_tokens"] for r in recs])
    assert got_p.tolist() == want_p.tolist()
    assert got_o.tolist() == want_o.tolist()
    for q in (50, 90, 99):
        assert np.percentile(got_p, q) == np.percentile(want_p, q)
    assert got_p.mean() == pytest.approx(want_p.mean()) and got_o.sum() == want_o.sum()
    sched = np.array([r["scheduled_s"] for r in recs])
    want_t = np.asarray(times)[order]
    assert sched == pytest.approx(want_t - want_t[0], abs=2e-6)


def test_vidur_length_file_lengths_at_a_given_rate(tmp_path: Path) -> None:
    _, prompt, output = file_rows("vidur_arxiv_summarization_head200.csv")
    recs = simulate(tmp_path, "--arrival",
                    f"replay:path={DATA / 'vidur_arxiv_summarization_head200.csv'}",
                    "--rate", "2", "--requests", "200")
    recs.sort(key=lambda r: int(r["id"]))
    assert [r["prompt_tokens"] for r in recs] == prompt
    assert [r["output_tokens"] for r in recs] == output
    assert np.mean([r["prompt_tokens"] for r in recs]) == pytest.approx(np.mean(prompt))


def test_a_file_without_timestamps_is_not_a_whole_workload(tmp_path: Path) -> None:
    out = subprocess.run([RIDGELINE, "simulate", "--workload",
                          str(DATA / "vidur_arxiv_summarization_head200.csv")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    errors = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "has no timestamps" in errors[0], out.stderr
    assert "vidur_arxiv_summarization_head200.csv" in errors[0]
