"""Import AIPerf ``profile_export.jsonl`` (one ``MetricRecordInfo`` per line).

Each line: ``metadata`` (``request_start_ns``, ``request_end_ns``: wall-clock ns;
``benchmark_phase``; ``was_cancelled``), ``metrics`` (tag → ``{"value", "unit"}``, in
display units, e.g. ms), ``error`` (null or ``{code, type, message}``).

Mapping: TTFT = ``time_to_first_token``; events = start + TTFT, then + each
``inter_chunk_latency`` gap (AIPerf's per-chunk gaps, vLLM's "ITL"); AIPerf's
``inter_token_latency`` is a per-request (E2E − TTFT)/(OSL − 1), i.e. ridgeline's TPOT,
and is used only when no chunk gaps are recorded. Warm-up records are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.trace.importers._common import check_order, checked_count, checked_num
from ridgeline.trace.schema import TraceHeader
from ridgeline.trace.table import Trace

_TO_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}


def _metric(metrics: dict[str, Any], tag: str) -> Any:
    m = metrics.get(tag)
    if isinstance(m, dict):
        return m.get("value"), m.get("unit")
    return None, None


def _seconds(metrics: dict[str, Any], tag: str, path: Path, where: str) -> float | None:
    """A latency metric in seconds; negative or non-numeric values are errors."""
    value, unit = _metric(metrics, tag)
    v = checked_num(value, path, where, f"metrics.{tag}.value")
    if v is None:
        return None
    return v * _TO_SECONDS.get(str(unit or "ms"), 1e-3)


def import_aiperf(path: str | Path) -> Trace:
    """Import an AIPerf per-request export."""
    p = Path(path)
    rows: list[dict[str, Any]] = []
    with open(p, encoding="utf-8") as fh:
        for no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise RidgelineError(f"{p}: line {no}: not valid JSON ({exc})") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
                raise RidgelineError(f"{p}: line {no}: field 'metadata': missing (not an "
                                     "AIPerf profile_export.jsonl record)")
            rows.append(obj)
    notes: list[str] = []
    warmup = [r for r in rows if r["metadata"].get("benchmark_phase") == "warmup"]
    rows = [r for r in rows if r["metadata"].get("benchmark_phase") != "warmup"]
    if warmup:
        notes.append(f"{len(warmup)} warm-up records skipped")
    starts = [checked_num(r["metadata"].get("request_start_ns"), p, f"record {i}",
                          "metadata.request_start_ns") for i, r in enumerate(rows)]
    known = [s for s in starts if s is not None]
    if len(known) != len(rows):
        raise RidgelineError(f"{p}: field 'metadata.request_start_ns': missing in "
                             f"{len(rows) - len(known)} records")
    t0 = min(known) if known else 0.0
    records: list[dict[str, Any]] = []
    any_chunks = False
    single_token_chunks = True
    for i, r in enumerate(rows):
        md = r["metadata"]
        metrics = r.get("metrics") or {}
        err = r.get("error")
        sent = (starts[i] - t0) * 1e-9
        where = f"record {i}"
        end_ns = checked_num(md.get("request_end_ns"), p, where, "metadata.request_end_ns")
        check_order(starts[i], end_ns, p, where, "request_start_ns", "request_end_ns",
                    slack_s=0.0)
        rid = md.get("x_request_id") or str(md.get("session_num", i))
        rec: dict[str, Any] = {
            "id": str(rid), "sent_s": sent,
            "end_s": (end_ns - t0) * 1e-9 if end_ns is not None else None,
            "prompt_tokens": checked_count(_metric(metrics, "input_sequence_length")[0], p,
                                           where, "metrics.input_sequence_length.value"),
            "token_count_source": "tokenizer",
        }
        if err or md.get("was_cancelled"):
            rec["status"] = "cutoff" if md.get("was_cancelled") else "error"
            if isinstance(err, dict):
                rec["error_kind"] = str(err.get("type") or err.get("code") or "error")
                rec["error"] = str(err.get("message") or "")[:500]
            records.append(rec)
            continue
        osl = checked_count(_metric(metrics, "output_sequence_length")[0], p, where,
                            "metrics.output_sequence_length.value")
        if osl is None:
            osl = checked_count(_metric(metrics, "output_token_count")[0], p, where,
                                "metrics.output_token_count.value")
        rec["output_tokens"] = osl
        ttft = _seconds(metrics, "time_to_first_token", p, where)
        icl_value, icl_unit = _metric(metrics, "inter_chunk_latency")
        if ttft is not None and isinstance(icl_value, list):
            any_chunks = True
            scale = _TO_SECONDS.get(str(icl_unit or "ms"), 1e-3)
            gaps = np.asarray([checked_num(g, p, where, f"metrics.inter_chunk_latency[{j}]")
                               or 0.0 for j, g in enumerate(icl_value)],
                              dtype=np.float64) * scale
            first = sent + ttft
            times = np.concatenate(([first], first + np.cumsum(gaps)))
            rec["event_times_s"] = times.tolist()
            if osl is not None and osl != times.size:
                single_token_chunks = False
        else:
            rec["ttft_s"] = ttft
            rec["tpot_s"] = _seconds(metrics, "inter_token_latency", p, where)
        lat = _seconds(metrics, "request_latency", p, where)
        check_order(ttft, lat, p, where, "time_to_first_token", "request_latency")
        if lat is not None:
            rec["e2e_s"] = lat
        records.append(rec)
    if not any_chunks:
        notes.append("no inter_chunk_latency lists: per-event times unavailable; TTFT and "
                     "TPOT (AIPerf's per-request 'inter_token_latency') taken as reported")
    elif not single_token_chunks:
        notes.append("some chunks carried several tokens; AIPerf does not record tokens per "
                     "chunk (per-token ITL unavailable)")
    notes.append("AIPerf counts output tokens by client re-tokenization (default)")
    header = TraceHeader(
        source="import:aiperf",
        tool="aiperf",
        clock="time_ns (wall clock)",
        start_time_unix_s=t0 * 1e-9 if known else None,
        has_event_times=any_chunks,
        has_event_tokens=any_chunks and single_token_chunks,
        has_scheduled_times=False,
        notes=notes,
    )
    trace = Trace.from_records(header, records)
    trace.path = str(p)
    return trace
