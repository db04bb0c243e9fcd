"""A trace written out: per-request tables (CSV, Parquet) and peers' result formats.

Per-request columns (`REQUEST_COLUMNS`, the same for CSV and Parquet; times in seconds on
the trace's clock, latencies in ms, NaN/empty where undefined, by ridgeline's definitions in
docs/metrics.md):

    id, status, error_kind          as in the trace
    scheduled_s, sent_s, end_s      when the load pattern meant to send it, sent, ended
    first_token_s                   the first output event
    ttft_ms, tpot_ms, e2e_ms        per-request TTFT, TPOT = (last - first) / (N - 1), E2E
    itl_max_ms                      the longest gap between two output events
    queue_ms                        send time minus scheduled time (the client's own wait)
    prompt_tokens, output_tokens    -1 / NaN when unknown
    n_events                        output events (chunks) received
    decode_rate_tok_s               (N - 1) / (last - first)

Peers' formats, each read back by ridgeline's own importer to the same numbers
(tests/trace/test_trace_export.py):

    aiperf     AIPerf `profile_export.jsonl`: one record per request, latencies in ms,
               `inter_chunk_latency` the gaps between events
    guidellm   GuideLLM `benchmarks.json`: one benchmark, requests by outcome with
               `info.timings` (epoch seconds: start, first and last token, end)
    vllm       `vllm bench serve --save-result --save-detailed` JSON (bench/results_peer.py)
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ridgeline import __version__
from ridgeline.bench.results_peer import vllm_result
from ridgeline.errors import RidgelineError
from ridgeline.metrics.per_request import request_metrics
from ridgeline.trace.importers import load_trace
from ridgeline.trace.table import Trace

REQUEST_COLUMNS = ("id", "status", "error_kind", "scheduled_s", "sent_s", "first_token_s",
                   "end_s", "ttft_ms", "tpot_ms", "e2e_ms", "itl_max_ms", "queue_ms",
                   "prompt_tokens", "output_tokens", "n_events", "decode_rate_tok_s")
FORMATS = ("csv", "parquet", "aiperf", "guidellm", "vllm")


def request_table(trace: Trace) -> dict[str, Any]:
    """The per-request columns, as numpy arrays (strings as lists)."""
    rm = request_metrics(trace)
    ms = 1e3
    return {
        "id": list(trace.ids),
        "status": trace.status_names(),
        "error_kind": [k or "" for k in trace.error_kind],
        "scheduled_s": np.asarray(trace.scheduled_s, dtype=np.float64),
        "sent_s": np.asarray(trace.sent_s, dtype=np.float64),
        "first_token_s": rm.first_event_s,
        "end_s": rm.end_s,
        "ttft_ms": rm.ttft_s * ms,
        "tpot_ms": rm.tpot_s * ms,
        "e2e_ms": rm.e2e_s * ms,
        "itl_max_ms": rm.itl_max_s * ms,
        "queue_ms": rm.queue_s * ms,
        "prompt_tokens": np.asarray(trace.prompt_tokens, dtype=np.int64),
        "output_tokens": rm.output_tokens,
        "n_events": np.asarray(rm.n_events, dtype=np.int64),
        "decode_rate_tok_s": rm.decode_rate_tok_s,
    }


def _cell(v: Any) -> str:
    if isinstance(v, float | np.floating):
        return "" if not math.isfinite(v) else repr(float(v))
    return str(v)


def write_csv(trace: Trace, path: str | Path) -> Path:
    table = request_table(trace)
    cols = [table[c] for c in REQUEST_COLUMNS]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(REQUEST_COLUMNS)
        for row in zip(*cols, strict=True):
            w.writerow([_cell(v) for v in row])
    return Path(path)


def write_parquet(trace: Trace, path: str | Path) -> Path:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise RidgelineError("export parquet: pyarrow is not installed (pip install "
                             "'ridgeline[parquet]')") from None
    table = request_table(trace)
    pq.write_table(pa.table({c: table[c] for c in REQUEST_COLUMNS}), str(path))
    return Path(path)


def _t0_unix_s(trace: Trace) -> float:
    """The wall-clock time of t = 0. A trace without one (simulate) is written from epoch
    1 s: peers' readers (ridgeline's GuideLLM importer among them) take a time of 0 for
    a missing one."""
    return float(trace.header.start_time_unix_s or 1.0)


def _events(trace: Trace, i: int) -> np.ndarray:
    return trace.event_times_s[trace.event_offsets[i]:trace.event_offsets[i + 1]]


def aiperf_records(trace: Trace) -> list[dict[str, Any]]:
    """AIPerf `profile_export.jsonl` records (metadata in wall-clock ns, metrics in ms)."""
    rm = request_metrics(trace)
    status = trace.status_names()
    t0_ns = _t0_unix_s(trace) * 1e9
    out = []
    for i, rid in enumerate(trace.ids):
        sent = float(trace.sent_s[i])
        end = float(rm.end_s[i]) if np.isfinite(rm.end_s[i]) else sent
        md = {"session_num": i, "x_request_id": rid,
              "request_start_ns": round(t0_ns + sent * 1e9),
              "request_end_ns": round(t0_ns + end * 1e9),
              "benchmark_phase": "profiling", "was_cancelled": status[i] == "cutoff",
              "cancellation_time_ns": None}
        metrics: dict[str, Any] = {}
        if trace.prompt_tokens[i] >= 0:
            metrics["input_sequence_length"] = {"value": int(trace.prompt_tokens[i]),
                                                "unit": "tokens"}
        error = None
        if status[i] != "ok":
            if status[i] != "cutoff":
                error = {"code": None, "type": trace.error_kind[i] or status[i],
                         "message": trace.error[i] or ""}
        else:
            ev = _events(trace, i)
            if np.isfinite(rm.output_tokens[i]):
                metrics["output_sequence_length"] = {"value": int(rm.output_tokens[i]),
                                                     "unit": "tokens"}
            if np.isfinite(rm.ttft_s[i]):
                metrics["time_to_first_token"] = {"value": float(rm.ttft_s[i] * 1e3),
                                                  "unit": "ms"}
            if ev.size:
                metrics["inter_chunk_latency"] = {"value": (np.diff(ev) * 1e3).tolist(),
                                                  "unit": "ms"}
            if np.isfinite(rm.tpot_s[i]):
                metrics["inter_token_latency"] = {"value": float(rm.tpot_s[i] * 1e3),
                                                  "unit": "ms"}
            if np.isfinite(rm.e2e_s[i]):
                metrics["request_latency"] = {"value": float(rm.e2e_s[i] * 1e3), "unit": "ms"}
        out.append({"metadata": md, "metrics": metrics, "error": error})
    return out


def guidellm_report(trace: Trace) -> dict[str, Any]:
    """A GuideLLM `benchmarks.json` with one benchmark holding every request."""
    rm = request_metrics(trace)
    status = trace.status_names()
    t0 = _t0_unix_s(trace)
    groups: dict[str, list[dict[str, Any]]] = {"successful": [], "errored": [],
                                                "incomplete": []}
    for i, rid in enumerate(trace.ids):
        sent = t0 + float(trace.sent_s[i])
        end = t0 + float(rm.end_s[i]) if np.isfinite(rm.end_s[i]) else None
        timings: dict[str, Any] = {"request_start": sent, "request_end": end}
        if np.isfinite(rm.first_event_s[i]):
            timings["first_token_iteration"] = t0 + float(rm.first_event_s[i])
            timings["last_token_iteration"] = t0 + float(rm.last_event_s[i])
            timings["token_iterations"] = int(rm.n_events[i])
        req: dict[str, Any] = {"request_id": rid, "info": {"timings": timings}}
        if trace.prompt_tokens[i] >= 0:
            req["input_metrics"] = {"total_tokens": int(trace.prompt_tokens[i])}
        if np.isfinite(rm.output_tokens[i]):
            req["output_metrics"] = {"total_tokens": int(rm.output_tokens[i])}
        kind = {"ok": "successful", "cutoff": "incomplete"}.get(status[i], "errored")
        if kind != "successful" and trace.error[i]:
            req["info"]["error"] = trace.error[i]
        groups[kind].append(req)

    return {"metadata": {"guidellm_version": "", "exported_by": f"ridgeline {__version__}"},
            "benchmarks": [{"config": {"strategy": dict(trace.header.load or {})},
                            "requests": groups,
                            "metrics": {"request_totals": {"total": len(trace)}}}]}


def export_trace(trace_path: str | Path, fmt: str, out: str | Path) -> Path:
    """Write trace `trace_path` (any format `analyze` reads) as `fmt` to `out`."""
    if fmt not in FORMATS:
        raise RidgelineError(f"--to: got {fmt!r}; allowed: {', '.join(FORMATS)}")
    if fmt == "vllm":
        Path(out).write_text(json.dumps(vllm_result(trace_path)), encoding="utf-8")
        return Path(out)
    trace = load_trace(str(trace_path))
    if fmt == "csv":
        return write_csv(trace, out)
    if fmt == "parquet":
        return write_parquet(trace, out)
    if fmt == "aiperf":
        with open(out, "w", encoding="utf-8") as fh:
            for rec in aiperf_records(trace):
                fh.write(json.dumps(rec) + "\n")
        return Path(out)
    Path(out).write_text(json.dumps(guidellm_report(trace)), encoding="utf-8")
    return Path(out)


__all__ = ["FORMATS", "REQUEST_COLUMNS", "aiperf_records", "export_trace", "guidellm_report",
           "request_table", "write_csv", "write_parquet"]
