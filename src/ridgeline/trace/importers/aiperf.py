"""Import AIPerf ``profile_export.jsonl`` (one ``MetricRecordInfo`` per line).

Each line: ``metadata`` (``request_start_ns``, ``request_end_ns``: wall-clock ns;
``benchmark_phase``; ``was_cancelled``), ``metrics`` (tag → ``{"value", "unit"}``, in
display units, e.g. ms), ``error`` (null or ``{code, type, message}``).

Mapping: TTFT = ``time_to_first_token``; events = start + TTFT, then + each
``inter_chunk_latency`` gap (AIPerf's per-chunk gaps, vLLM's "ITL"); AIPerf's
``inter_token_latency`` is a per-request (E2E − TTFT)/(OSL − 1), i.e. ridgeline's TPOT,
and is used only when no chunk gaps are recorded. Warm-up records are skipped.

Times are worked out in whole nanoseconds, AIPerf's own unit, and converted to seconds
once: the epoch-ns stamps (~1.8e18) are not exact as floats (a float64 step there is
256 ns), so start + TTFT + gaps computed in floating seconds could land a few hundred ns
past `request_end_ns` when AIPerf's integers say they are equal, and the trace would be
refused as out of order. Latencies in ms (ns / 1e6 in AIPerf) round back to their exact
ns; integer ns differences are exact, and dividing by 1e9 keeps equal times equal and
ordered times ordered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.inputs import loads_json
from ridgeline.trace.importers._common import check_order, checked_count, checked_num
from ridgeline.trace.schema import TraceHeader
from ridgeline.trace.table import Trace

_TO_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}
_NS_PER = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "sec": 1_000_000_000}


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


def _to_ns(v: float, unit: Any) -> int:
    """A latency in its display unit, as whole ns (AIPerf measures in integer ns)."""
    return round(v * _NS_PER.get(str(unit or "ms"), 1_000_000))


def _stamp_ns(x: Any, path: Path, where: str, field: str) -> int | None:
    """An epoch-ns stamp kept as an exact integer (a float loses up to 128 ns here)."""
    v = checked_num(x, path, where, field)
    if v is None:
        return None
    return x if isinstance(x, int) else round(v)


def import_aiperf(path: str | Path) -> Trace:
    """Import an AIPerf per-request export."""
    p = Path(path)
    rows: list[dict[str, Any]] = []
    with open(p, encoding="utf-8") as fh:
        for no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            obj = loads_json(line, f"{p}: line {no}")  # also too deep, as one line
            if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
                raise RidgelineError(f"{p}: line {no}: field 'metadata': missing (not an "
                                     "AIPerf profile_export.jsonl record)")
            rows.append(obj)
    notes: list[str] = []
    warmup = [r for r in rows if r["metadata"].get("benchmark_phase") == "warmup"]
    rows = [r for r in rows if r["metadata"].get("benchmark_phase") != "warmup"]
    if warmup:
        notes.append(f"{len(warmup)} warm-up records skipped")
    starts = [_stamp_ns(r["metadata"].get("request_start_ns"), p, f"record {i}",
                        "metadata.request_start_ns") for i, r in enumerate(rows)]
    known = [s for s in starts if s is not None]
    if len(known) != len(rows):
        raise RidgelineError(f"{p}: field 'metadata.request_start_ns': missing in "
                             f"{len(rows) - len(known)} records")
    t0 = min(known) if known else 0
    records: list[dict[str, Any]] = []
    any_chunks = False
    single_token_chunks = True
    for i, r in enumerate(rows):
        md = r["metadata"]
        metrics = r.get("metrics") or {}
        if not isinstance(metrics, dict):
            raise RidgelineError(f"{p}: record {i}: field 'metrics': got "
                                 f"{type(metrics).__name__}; allowed: an object of metrics")
        err = r.get("error")
        sent_ns = starts[i] - t0  # type: ignore[operator]
        sent = sent_ns / 1e9
        where = f"record {i}"
        end_ns = _stamp_ns(md.get("request_end_ns"), p, where, "metadata.request_end_ns")
        if end_ns is not None and end_ns < starts[i]:  # type: ignore[operator]
            # Integers compared exactly (AIPerf stamps a refused request's end = start).
            raise RidgelineError(f"{p}: {where}: field 'metadata.request_end_ns' ({end_ns} ns)"
                                 f" is before 'metadata.request_start_ns' ({starts[i]} ns); "
                                 "allowed: request_start_ns <= request_end_ns")
        rid = md.get("x_request_id") or str(md.get("session_num", i))
        rec: dict[str, Any] = {
            "id": str(rid), "sent_s": sent,
            "end_s": (end_ns - t0) / 1e9 if end_ns is not None else None,
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
            gaps_ns = [_to_ns(checked_num(g, p, where, f"metrics.inter_chunk_latency[{j}]")
                              or 0.0, icl_unit) for j, g in enumerate(icl_value)]
            ttft_value, ttft_unit = _metric(metrics, "time_to_first_token")
            first_ns = sent_ns + _to_ns(float(ttft_value), ttft_unit)
            times = np.cumsum([first_ns, *gaps_ns], dtype=np.int64) / 1e9
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
