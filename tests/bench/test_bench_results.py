"""`bench --save-result vllm|aiperf-csv`: peers' result files, checked by hand and round-tripped
through ridgeline's own vLLM importer."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ridgeline.metrics.analysis import analyze
from ridgeline.trace.importers.vllm import import_vllm
from ridgeline.trace.reader import read_trace

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("results")
    out = subprocess.run(
        [RIDGELINE, "bench", "--target", "emulator", "--model", "llama-3.1-8b",
         "--concurrency", "4", "--requests", "24", "--prompt", "uniform:min=32,max=256",
         "--output", "uniform:min=1,max=40", "--trace", str(d / "run.jsonl"),
         "--save-result", "vllm", "--save-result", "aiperf-csv",
         "--metric-percentiles", "50,90,99.9", "--slo", "ttft_ms<=30", "--no-server-metrics"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return d


def _records(path: Path) -> list[dict]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return [x for x in lines if x.get("type") == "request"]


def test_vllm_file_has_vllms_keys_and_hand_computed_values(run_dir: Path) -> None:
    res = json.loads((run_dir / "run.vllm.json").read_text())
    for key in ("date", "endpoint_type", "backend", "model_id", "tokenizer_id", "num_prompts",
                "request_rate", "burstiness", "max_concurrency", "duration", "completed",
                "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
                "request_goodput", "output_throughput", "total_token_throughput",
                "max_output_tokens_per_s", "max_concurrent_requests", "input_lens",
                "output_lens", "ttfts", "itls", "latencies", "start_times", "generated_texts",
                "errors"):
        assert key in res, key
    for m in ("ttft", "tpot", "itl", "e2el"):
        for s in ("mean", "median", "std", "p50", "p90", "p99.9"):
            assert f"{s}_{m}_ms" in res
    recs = _records(run_dir / "run.jsonl")
    footer = json.loads((run_dir / "run.jsonl").read_text().splitlines()[-1])
    ttft = np.array([r["event_times_s"][0] - r["sent_s"] for r in recs])
    e2e = np.array([r["end_s"] - r["sent_s"] for r in recs])
    n_out = np.array([r["output_tokens"] for r in recs])
    multi = n_out > 1
    tpot = (e2e[multi] - ttft[multi]) / (n_out[multi] - 1)
    gaps = np.concatenate([np.diff(r["event_times_s"]) for r in recs])
    assert res["completed"] == 24 and res["failed"] == 0 and res["num_prompts"] == 24
    assert res["request_rate"] == "inf" and res["max_concurrency"] == 4
    assert res["duration"] == pytest.approx(footer["end_time_s"])
    assert res["mean_ttft_ms"] == pytest.approx(ttft.mean() * 1e3)
    assert res["p90_ttft_ms"] == pytest.approx(np.percentile(ttft, 90) * 1e3)
    assert res["std_e2el_ms"] == pytest.approx(e2e.std() * 1e3)
    assert res["median_tpot_ms"] == pytest.approx(np.median(tpot) * 1e3)
    assert res["p99.9_itl_ms"] == pytest.approx(np.percentile(gaps, 99.9) * 1e3)
    assert res["total_output_tokens"] == n_out.sum()
    assert res["output_throughput"] == pytest.approx(n_out.sum() / footer["end_time_s"])
    good = sum(1 for t in ttft if t * 1e3 <= 30)
    assert res["request_goodput"] == pytest.approx(good / footer["end_time_s"])
    assert 1 <= res["max_concurrent_requests"] <= 4


def test_vllm_file_reimports_to_the_same_numbers(run_dir: Path) -> None:
    original = analyze(read_trace(run_dir / "run.jsonl"), window="all").to_dict()
    again = analyze(import_vllm(run_dir / "run.vllm.json"), window="all").to_dict()
    for metric in ("ttft_ms", "e2e_ms", "tpot_ms"):
        a, b = original["latency"][metric], again["latency"][metric]
        assert b["mean"] == pytest.approx(a["mean"], rel=1e-6), metric
        for p in ("p50", "p90"):
            assert b["percentiles"][p]["value"] == pytest.approx(
                a["percentiles"][p]["value"], rel=1e-6), (metric, p)
    assert again["counts"] == original["counts"]


def test_aiperf_csv_layout_and_values(run_dir: Path) -> None:
    with open(run_dir / "run.aiperf.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["Metric", "avg", "min", "max", "p1", "p5", "p10", "p25", "p50", "p75",
                       "p90", "p95", "p99", "std"]
    blank = rows.index([])
    assert rows[blank + 1] == ["Metric", "Value"]
    dist = {r[0]: r[1:] for r in rows[1:blank]}
    summary = {r[0]: float(r[1]) for r in rows[blank + 2:]}
    recs = _records(run_dir / "run.jsonl")
    ttft_ms = np.array([(r["event_times_s"][0] - r["sent_s"]) * 1e3 for r in recs])
    assert float(dist["Time to First Token (ms)"][0]) == pytest.approx(ttft_ms.mean(), abs=0.01)
    assert float(dist["Time to First Token (ms)"][7]) == pytest.approx(
        np.percentile(ttft_ms, 50), abs=0.01)
    assert summary["Request Count"] == 24
    assert summary["Total Output Sequence Length (tokens)"] == sum(
        r["output_tokens"] for r in recs)


@pytest.mark.parametrize(("arrival", "expected"), [
    ("poisson", 1.0), ("gamma:cv=2", 0.25), ("gamma:cv=0.5", 4.0), ("constant", "inf"),
    ("ramp:start=1,end=16", 1.0),
])
def test_vllm_burstiness_is_the_gamma_shape(arrival: str, expected: float | str) -> None:
    """vLLM's --burstiness is the shape of its gamma gaps (1/cv**2): Poisson is 1.0."""
    from ridgeline.bench.results_peer import vllm_burstiness
    from ridgeline.workload.arrivals import parse_arrival

    assert vllm_burstiness(parse_arrival(arrival, rate_req_s=4.0).describe()) == expected


def test_vllm_file_of_a_poisson_run_says_burstiness_1(tmp_path: Path) -> None:
    out = subprocess.run(
        [RIDGELINE, "bench", "--target", "emulator", "--model", "llama-3.1-8b",
         "--rate", "50", "--arrival", "poisson", "--requests", "6", "--prompt", "fixed:32",
         "--output", "fixed:4", "--trace", str(tmp_path / "p.jsonl"), "--save-result", "vllm",
         "--no-server-metrics"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    res = json.loads((tmp_path / "p.vllm.json").read_text())
    assert res["request_rate"] == 50.0 and res["burstiness"] == 1.0


def _crashed_trace(path: Path) -> Path:
    """A bench trace cut by a crash (no footer), by hand: t = 0 is perf_counter 0.5 s.

    r0: sent 0, events 0.6 / 0.7 / 0.8, 10 prompt tokens; r1: sent 0.05, one event at
    1.1, its prompt length unknown; r2: failed at 0.3 with HTTP 500."""
    header = {"type": "header", "source": "bench", "start_time_unix_s": 1.7e9,
              "t0_perf_counter_s": 0.5, "model": "m", "has_scheduled_times": False,
              "load": {"pattern": "closed", "concurrency": 2}}
    reqs = [
        {"type": "request", "id": "r0", "sent_s": 0.0, "event_times_s": [0.6, 0.7, 0.8],
         "end_s": 0.8, "prompt_tokens": 10, "output_tokens": 3, "status": "ok"},
        {"type": "request", "id": "r1", "sent_s": 0.05, "event_times_s": [1.1],
         "end_s": 1.1, "output_tokens": 1, "status": "ok"},
        {"type": "request", "id": "r2", "sent_s": 0.2, "end_s": 0.3, "prompt_tokens": 7,
         "status": "error", "error_kind": "http", "error": "HTTP 500: boom"},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in [header, *reqs]))
    return path


def test_vllm_file_of_a_crashed_run_by_hand(tmp_path: Path) -> None:
    import time

    from ridgeline.bench.results_peer import vllm_result

    res = vllm_result(_crashed_trace(tmp_path / "crash.jsonl"))
    # no footer: the run lasted until its last end, 1.1 s
    assert res["duration"] == pytest.approx(1.1)
    assert (res["completed"], res["failed"]) == (2, 1)
    assert res["request_throughput"] == pytest.approx(2 / 1.1)
    assert res["output_throughput"] == pytest.approx(4 / 1.1)
    # an unknown prompt length is vLLM's 0; a failure keeps its length; totals count the ok
    assert res["input_lens"] == [10, 0, 7] and res["total_input_tokens"] == 10
    assert res["errors"] == ["", "", "HTTP 500: boom"]
    # the busiest second of output, on the trace's clock: r0's 3 events in [0, 1)
    # (measured from t0, not from perf_counter 0, where r1's event would join them in [1, 2))
    assert res["max_output_tokens_per_s"] == 3.0
    assert res["date"] == time.strftime("%Y%m%d-%H%M%S", time.localtime(1.7e9))


def test_aiperf_files_of_a_crashed_run_by_hand(tmp_path: Path) -> None:
    from ridgeline.bench.results_peer import aiperf_csv_rows

    trace = _crashed_trace(tmp_path / "crash.jsonl")
    rows = aiperf_csv_rows(trace)
    blank = rows.index([])
    summary = {r[0]: float(r[1]) for r in rows[blank + 2:]}
    assert summary["Benchmark Duration (sec)"] == pytest.approx(1.1)
    assert summary["Request Throughput (requests/sec)"] == pytest.approx(2 / 1.1, abs=0.005)
    assert summary["Error Request Count"] == 1
    # AIPerf's profile_export.jsonl keeps the failure's kind and message
    out = tmp_path / "profile_export.jsonl"
    done = subprocess.run([RIDGELINE, "export", str(trace), "--to", "aiperf", "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    records = [json.loads(x) for x in out.read_text().splitlines()]
    failed = [r for r in records if r.get("error")]
    assert len(failed) == 1
    assert failed[0]["error"]["type"] == "http"
    assert failed[0]["error"]["message"] == "HTTP 500: boom"
