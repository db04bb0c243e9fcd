"""`ridgeline export`: per-request CSV/Parquet with the documented columns (values checked
by hand) and AIPerf/GuideLLM/vLLM files that ridgeline's own importers read back to the same
numbers."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ridgeline.bench.export import REQUEST_COLUMNS
from ridgeline.metrics.analysis import analyze
from ridgeline.trace.importers import load_trace
from ridgeline.trace.schema import TraceHeader
from ridgeline.trace.writer import TraceWriter

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")


def _hand_trace(path: Path) -> Path:
    with TraceWriter(path, TraceHeader(source="bench", model="m",
                                       start_time_unix_s=1_700_000_000.0)) as w:
        w.write_requests([
            {"id": "a", "scheduled_s": 0.0, "sent_s": 0.001, "end_s": 0.301,
             "event_times_s": [0.101, 0.201, 0.301], "event_tokens": [1, 2, 1],
             "prompt_tokens": 10, "output_tokens": 4, "token_count_source": "usage"},
            {"id": "b", "scheduled_s": 0.5, "sent_s": 0.5, "end_s": 0.6, "status": "error",
             "error_kind": "http_500", "error": "boom", "prompt_tokens": 7},
        ])
    return path


def _export(trace: Path, fmt: str, out: Path) -> None:
    res = subprocess.run([RIDGELINE, "export", str(trace), "--to", fmt, "-o", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_csv_columns_by_hand(tmp_path: Path) -> None:
    trace = _hand_trace(tmp_path / "t.jsonl")
    _export(trace, "csv", tmp_path / "t.csv")
    with open(tmp_path / "t.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == REQUEST_COLUMNS
    a, b = rows
    # TTFT = 0.101 - 0.001; TPOT = (0.301 - 0.101) / (4 - 1); E2E = 0.301 - 0.001
    assert float(a["ttft_ms"]) == pytest.approx(100.0)
    assert float(a["tpot_ms"]) == pytest.approx(200.0 / 3)
    assert float(a["e2e_ms"]) == pytest.approx(300.0)
    assert float(a["itl_max_ms"]) == pytest.approx(100.0)
    assert float(a["queue_ms"]) == pytest.approx(1.0)
    assert a["n_events"] == "3" and float(a["output_tokens"]) == 4 and a["prompt_tokens"] == "10"
    assert float(a["decode_rate_tok_s"]) == pytest.approx(3 / 0.2)
    assert b["status"] == "error" and b["error_kind"] == "http_500" and b["ttft_ms"] == ""


def test_parquet_has_the_same_columns(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    trace = _hand_trace(tmp_path / "t.jsonl")
    _export(trace, "parquet", tmp_path / "t.parquet")
    table = pq.read_table(tmp_path / "t.parquet")
    assert tuple(table.column_names) == REQUEST_COLUMNS
    assert table.column("ttft_ms").to_pylist()[0] == pytest.approx(100.0)


@pytest.fixture(scope="module")
def sim_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("sim")
    res = subprocess.run([RIDGELINE, "simulate", "--model", "llama-3.1-8b", "--hardware",
                          "h100-sxm", "--rate", "20", "--requests", "300", "--prompt",
                          "uniform:min=64,max=512", "--output", "uniform:min=1,max=64",
                          "--trace", str(d / "sim.jsonl")], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    return d / "sim.jsonl"


def _numbers(trace_path: Path, itl: bool) -> dict[str, float]:
    trace = load_trace(str(trace_path))
    # From the first send to the last end: the peers' files carry no run start (AIPerf's
    # records, GuideLLM's requests start the clock at the first request)
    ends = trace.end_s[np.isfinite(trace.end_s)]
    window = f"{float(np.min(trace.sent_s))}:{float(np.max(ends)) + 1e-3}"  # ns rounding
    d = analyze(trace, window=window).to_dict()
    out = {}
    for m in ("ttft_ms", "tpot_ms", "e2e_ms") + (("itl_ms",) if itl else ()):
        for q in ("p50", "p90", "p99"):
            out[f"{m}.{q}"] = d["latency"][m]["percentiles"][q]["value"]
        out[f"{m}.mean"] = d["latency"][m]["mean"]
    out["requests_ok"] = d["requests"]["ok"] if isinstance(d.get("requests"), dict) else 0
    out["output_tok_s"] = d["throughput"]["output_tok_s"]
    return out


@pytest.mark.parametrize(("fmt", "name", "itl"), [("aiperf", "profile_export.jsonl", True),
                                                   ("guidellm", "benchmarks.json", False),
                                                   ("vllm", "run.vllm.json", True)])
def test_peer_exports_reimport_to_the_same_numbers(sim_trace: Path, tmp_path: Path, fmt: str,
                                                   name: str, itl: bool) -> None:
    out = tmp_path / name
    _export(sim_trace, fmt, out)
    assert load_trace(str(out)).header.source == f"import:{fmt}"
    want, got = _numbers(sim_trace, itl), _numbers(out, itl)
    assert want.keys() == got.keys()
    for key, value in want.items():
        # 1e-3 ms: epoch-second floats (GuideLLM) hold ~0.2 us at today's dates
        assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-3), key
    assert np.isfinite(want["ttft_ms.p50"])
