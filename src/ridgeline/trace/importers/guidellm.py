"""Import GuideLLM ``benchmarks.json`` (a ``GenerativeBenchmarksReport``).

Each benchmark holds ``requests.{successful, errored, incomplete}``: per-request stats with
``info.timings`` (epoch seconds: ``request_start``, ``first_token_iteration``,
``last_token_iteration``, ``request_end``, ``token_iterations``) and token counts in
``input_metrics`` / ``output_metrics`` (``total_tokens``). GuideLLM keeps only the first
and last token times, not every event: TTFT, TPOT and E2E are exact, ITL is unavailable.
GuideLLM may store a sample of the requests (``sample_size``); the trace then holds
only those.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ridgeline.errors import RidgelineError
from ridgeline.trace.importers._common import (
    check_order,
    checked_count,
    checked_num,
    int_or_none,
    num,
    pick,
    read_json,
)
from ridgeline.trace.schema import TraceHeader
from ridgeline.trace.table import Trace

_STATUS = {"successful": "ok", "errored": "error", "incomplete": "cutoff"}


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def import_guidellm(path: str | Path, select: int | None = None) -> Trace:
    """Import one benchmark of a GuideLLM report."""
    p = Path(path)
    report = read_json(p, "GuideLLM report")
    if not isinstance(report, dict) or not isinstance(report.get("benchmarks"), list):
        raise RidgelineError(f"{p}: field 'benchmarks': missing (not a GuideLLM report)")
    notes: list[str] = []
    bench = pick(report["benchmarks"], select, "GuideLLM benchmark", notes)
    reqs = bench.get("requests") or {}
    rows: list[tuple[str, dict[str, Any]]] = [
        (status, r) for status in ("successful", "errored", "incomplete")
        for r in (reqs.get(status) or []) if isinstance(r, dict)
    ]
    if not rows:
        raise RidgelineError(f"{p}: benchmark has no per-request stats under 'requests'")

    def start_of(r: dict[str, Any]) -> float | None:
        return num(_get(r, "info", "timings", "request_start")) or num(r.get("request_start_time"))

    starts = [start_of(r) for _, r in rows]
    known = [s for s in starts if s is not None]
    if not known:
        raise RidgelineError(f"{p}: field 'info.timings.request_start': missing in every "
                             "request")
    t0 = min(known)
    records: list[dict[str, Any]] = []
    for i, (status, r) in enumerate(rows):
        tim = _get(r, "info", "timings") or {}
        start = starts[i]
        if start is None:
            continue
        where = f"request {i}"
        for key in ("request_start", "request_end", "first_token_iteration",
                    "last_token_iteration"):
            checked_num(tim.get(key), p, where, f"info.timings.{key}")
        end = num(tim.get("request_end")) or num(r.get("request_end_time"))
        first = num(tim.get("first_token_iteration"))
        last = num(tim.get("last_token_iteration"))
        # Times must come in order: a first token before the send gives a negative TTFT.
        check_order(start, first, p, where, "request_start", "first_token_iteration")
        check_order(first, last, p, where, "first_token_iteration", "last_token_iteration")
        check_order(start, end, p, where, "request_start", "request_end")
        n_out = checked_count(_get(r, "output_metrics", "total_tokens"), p, where,
                              "output_metrics.total_tokens")
        source = "usage"
        if n_out is None:
            n_out = int_or_none(r.get("output_tokens")) or int_or_none(tim.get("token_iterations"))
            source = "chunks"
        rec: dict[str, Any] = {
            "id": str(r.get("request_id") or i),
            "sent_s": start - t0,
            "end_s": end - t0 if end is not None else None,
            "prompt_tokens": int_or_none(_get(r, "input_metrics", "total_tokens"))
            or int_or_none(r.get("prompt_tokens")),
            "output_tokens": n_out,
            "token_count_source": source,
            "status": _STATUS[status],
        }
        if status != "successful":
            rec["error_kind"] = status
            info_err = _get(r, "info", "error")
            if info_err:
                rec["error"] = str(info_err)[:500]
        if first is not None:
            rec["ttft_s"] = first - start
            if last is not None and n_out is not None and n_out > 1:
                rec["tpot_s"] = (last - first) / (n_out - 1)
        if end is not None:
            rec["e2e_s"] = end - start
        records.append(rec)
    totals = _get(bench, "metrics", "request_totals") or {}
    total = num(totals.get("total"))
    if total is not None and total > len(records):
        notes.append(f"GuideLLM stored {len(records)} of {int(total)} requests (sampled): "
                     "percentiles come from the sample")
    notes.append("GuideLLM records first and last token times only: ITL unavailable; output "
                 "tokens counted at request completion")
    sm = bench.get("scheduler_metrics") or {}
    m0, m1 = num(sm.get("measure_start_time")), num(sm.get("measure_end_time"))
    duration = (m1 - m0) if m0 is not None and m1 is not None and m1 > m0 else None
    if m0 is not None and m1 is not None:
        notes.append(f"GuideLLM's own measurement window: {m0 - t0:.3f}–{m1 - t0:.3f} s on "
                     "this trace's clock (use --window to apply it)")
    strategy = _get(bench, "config", "strategy") or {}
    header = TraceHeader(
        source="import:guidellm",
        tool="guidellm",
        tool_version=str(_get(report, "metadata", "guidellm_version") or ""),
        clock="time.time (wall clock)",
        start_time_unix_s=t0,
        load={k: v for k, v in strategy.items() if isinstance(v, str | int | float)},
        has_event_times=False,
        has_event_tokens=False,
        has_scheduled_times=False,
        duration_s=duration,
        notes=notes,
    )
    trace = Trace.from_records(header, records)
    trace.path = str(p)
    return trace
