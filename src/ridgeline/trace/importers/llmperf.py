"""Import LLMPerf ``*_individual_responses.json`` (a list of per-request dicts).

Fields: ``error_code``, ``error_msg``, ``ttft_s``, ``end_to_end_latency_s``,
``inter_token_latency_s``, ``number_output_tokens``, ``number_input_tokens``, ...
LLMPerf records no send times and no event times, so throughput, concurrency, Little's law
and ITL are unavailable. Its ``inter_token_latency_s`` includes TTFT (≈ e2e / N), so
ridgeline derives TPOT = (e2e − TTFT) / (N − 1) instead; LLMPerf's e2e ends after the
stream is drained and N is counted with a fixed Llama tokenizer, so TPOT is approximate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ridgeline.errors import RidgelineError
from ridgeline.trace.importers._common import (
    check_order,
    checked_count,
    checked_num,
    read_json,
)
from ridgeline.trace.schema import TraceHeader
from ridgeline.trace.table import Trace


def import_llmperf(path: str | Path) -> Trace:
    """Import LLMPerf individual responses."""
    p = Path(path)
    data = read_json(p, "LLMPerf individual responses")
    if not isinstance(data, list):
        raise RidgelineError(f"{p}: expected a JSON list of per-request results (LLMPerf "
                             "*_individual_responses.json)")
    records: list[dict[str, Any]] = []
    for i, r in enumerate(data):
        if not isinstance(r, dict):
            raise RidgelineError(f"{p}: item {i}: expected an object")
        failed = bool(r.get("error_code")) or bool(r.get("error_msg"))
        where = f"item {i}"
        ttft = checked_num(r.get("ttft_s"), p, where, "ttft_s")
        e2e = checked_num(r.get("end_to_end_latency_s"), p, where, "end_to_end_latency_s")
        n_out = checked_count(r.get("number_output_tokens"), p, where, "number_output_tokens")
        if not failed:
            check_order(ttft, e2e, p, where, "ttft_s", "end_to_end_latency_s")
        rec: dict[str, Any] = {
            "id": str(i), "sent_s": 0.0,
            "prompt_tokens": checked_count(r.get("number_input_tokens"), p, where,
                                           "number_input_tokens"),
            "output_tokens": None if failed else n_out,
            "token_count_source": "tokenizer",
            "status": "error" if failed else "ok",
        }
        if failed:
            rec["error_kind"] = str(r.get("error_code") or "error")
            rec["error"] = str(r.get("error_msg") or "")[:500]
        else:
            rec["ttft_s"] = ttft
            rec["e2e_s"] = e2e
            if ttft is not None and e2e is not None and n_out is not None and n_out > 1:
                rec["tpot_s"] = (e2e - ttft) / (n_out - 1)
        records.append(rec)
    header = TraceHeader(
        source="import:llmperf",
        tool="llmperf",
        clock="time.monotonic",
        has_event_times=False,
        has_event_tokens=False,
        has_send_times=False,
        has_scheduled_times=False,
        notes=[
            "LLMPerf records no send or event times: throughput, concurrency, Little's law "
            "and ITL are unavailable",
            "TPOT derived as (e2e - TTFT)/(N - 1); LLMPerf's own inter_token_latency_s "
            "includes TTFT and is not used",
            "output tokens counted by LLMPerf with a fixed Llama tokenizer",
        ],
    )
    trace = Trace.from_records(header, records)
    trace.path = str(p)
    return trace
