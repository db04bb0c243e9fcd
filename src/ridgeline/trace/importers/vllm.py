"""Import `vllm bench serve` results (``--save-result``, ``--append-result``,
``--save-detailed``).

Per-request lists are in seconds: ``start_times`` (perf_counter at send), ``ttfts``,
``itls`` (one list per request: gaps between consecutive token-bearing SSE chunks),
``latencies`` (E2E), ``input_lens``, ``output_lens``, ``errors`` ("" on success).
Events are rebuilt as send + TTFT, then + each ITL gap. vLLM does not record how many
tokens each chunk carried; when a request's chunk count equals its output length the
chunks were single tokens, otherwise tokens per event are unknown (per-token ITL and
event-based token throughput are then unavailable).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.trace.importers._common import (
    check_order,
    checked_count,
    checked_num,
    json_objects,
    num,
    pick,
)
from ridgeline.trace.schema import TraceHeader
from ridgeline.trace.table import Trace

# Aggregates vLLM printed, kept in the header so a user can put them beside ours.
_PEER_KEYS_PREFIXES = ("mean_", "median_", "std_", "p")


def _peer_summary(obj: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in obj.items():
        if isinstance(v, int | float) and not isinstance(v, bool) and (
            k.startswith(_PEER_KEYS_PREFIXES) or k in (
                "duration", "completed", "failed", "request_throughput", "output_throughput",
                "total_token_throughput", "request_goodput", "max_concurrent_requests",
                "total_input_tokens", "total_output_tokens",
            )
        ):
            out[k] = v
    return out


def import_vllm(path: str | Path, select: int | None = None) -> Trace:
    """Import a vLLM bench-serve result file into a trace."""
    p = Path(path)
    notes: list[str] = []
    objs = [o for o in json_objects(p, "vLLM result") if isinstance(o, dict)]
    obj = pick(objs, select, "vLLM result object", notes)

    ttfts = obj.get("ttfts")
    itls = obj.get("itls")
    latencies = obj.get("latencies")
    lists = [x for x in (ttfts, latencies, obj.get("output_lens"), obj.get("input_lens"))
             if isinstance(x, list)]
    if not lists:
        raise RidgelineError(
            f"{p}: vLLM result has no per-request lists (ttfts, latencies, ...): rerun "
            "`vllm bench serve` with --save-result --save-detailed"
        )
    n = len(lists[0])
    for name in ("ttfts", "itls", "latencies", "output_lens", "input_lens", "errors",
                 "start_times"):
        v = obj.get(name)
        if v is not None and not isinstance(v, list):
            raise RidgelineError(f"{p}: field '{name}': got {type(v).__name__}; allowed: a "
                                 "list with one entry per request")
        if isinstance(v, list) and len(v) != n:
            raise RidgelineError(f"{p}: field '{name}': {len(v)} entries, expected {n} "
                                 "(one per request)")

    errors = obj.get("errors") or [""] * n
    starts = obj.get("start_times")
    if isinstance(starts, list):
        for i, st in enumerate(starts):
            checked_num(st, p, f"request {i}", "start_times", minimum=None,
                        allowed="a finite number (seconds)")
    has_send = isinstance(starts, list) and all(num(s) is not None for s in starts)
    t0 = min(float(s) for s in starts) if has_send and n else 0.0
    has_events = isinstance(ttfts, list) and isinstance(itls, list)
    if not has_send:
        notes.append("no start_times: send times unknown, so the measurement window, "
                     "concurrency and Little's law are unavailable; throughput uses vLLM's "
                     "duration")
    if not has_events:
        notes.append("no ttfts/itls lists (run with --save-detailed): per-event times "
                     "unavailable")

    out_lens = obj.get("output_lens") or [None] * n
    in_lens = obj.get("input_lens") or [None] * n
    records: list[dict[str, Any]] = []
    single_token_chunks = True
    for i in range(n):
        err = errors[i] if i < len(errors) else ""
        ok = not err
        sent = float(starts[i]) - t0 if has_send else 0.0
        where = f"request {i}"
        n_in = checked_count(in_lens[i], p, where, "input_lens")
        n_out_rec = checked_count(out_lens[i], p, where, "output_lens")
        rec: dict[str, Any] = {
            "id": str(i), "sent_s": sent,
            "prompt_tokens": n_in,
            "output_tokens": n_out_rec if ok else None,
            "token_count_source": "unknown",
            "status": "ok" if ok else "error",
        }
        if not ok:
            rec["error_kind"] = "error"
            rec["error"] = str(err)[:500]
        # Negative or non-numeric latencies are refused (vLLM writes 0.0 for failed
        # requests, which passes): they would import as "ok" and give negative metrics.
        ttft = (checked_num(ttfts[i], p, where, "ttfts", allowed="a finite number >= 0 "
                            "(seconds)") if isinstance(ttfts, list) else None)
        lat = (checked_num(latencies[i], p, where, "latencies", allowed="a finite number >= 0 "
                           "(seconds)") if isinstance(latencies, list) else None)
        row_itls = itls[i] if isinstance(itls, list) else None
        if row_itls is not None and not isinstance(row_itls, list):
            raise RidgelineError(f"{p}: {where}: field 'itls': got {type(row_itls).__name__}; "
                                 "allowed: a list of gaps in seconds")
        gap_list = [checked_num(g, p, where, f"itls[{j}]", allowed="a finite number >= 0 "
                                "(seconds)") for j, g in enumerate(row_itls or [])]
        if ok:
            check_order(ttft, lat, p, where, "ttfts", "latencies")
            if ttft is not None and lat is not None and gap_list:
                check_order(ttft + sum(g or 0.0 for g in gap_list), lat + 1e-3, p, where,
                            "ttfts + sum(itls)", "latencies")
        if ok and has_events and ttft is not None:
            gaps = np.asarray([g or 0.0 for g in gap_list], dtype=np.float64)
            first = sent + ttft
            times = np.concatenate(([first], first + np.cumsum(gaps)))
            rec["event_times_s"] = times.tolist()
            n_out = rec["output_tokens"]
            if n_out is not None and n_out != times.size:
                single_token_chunks = False
        elif ok:
            rec["ttft_s"] = ttft
        if lat is not None and ok:
            rec["end_s"] = sent + lat
            rec["e2e_s"] = lat
        records.append(rec)
    if has_events and not single_token_chunks:
        notes.append("vLLM's ITL list has one gap per SSE chunk and some chunks carried "
                     "several tokens; tokens per chunk are not recorded (per-token ITL "
                     "unavailable)")
    notes.append("vLLM's output_lens come from server usage when sent, else re-tokenized text")

    load = {k: obj.get(k) for k in ("request_rate", "burstiness", "max_concurrency",
                                    "num_prompts", "ramp_up_strategy") if k in obj}
    header = TraceHeader(
        source="import:vllm",
        tool="vllm bench serve",
        tool_version=str(obj.get("vllm_version") or ""),
        model=obj.get("model_id"),
        engine=obj.get("backend"),
        load=load,
        dataset={k: obj[k] for k in ("dataset_name", "label") if obj.get(k) is not None},
        has_event_times=has_events,
        has_event_tokens=has_events and single_token_chunks,
        has_send_times=has_send,
        has_scheduled_times=False,
        duration_s=num(obj.get("duration")),
        notes=notes,
        peer_reported=_peer_summary(obj),
        peer_date=obj.get("date"),
    )
    trace = Trace.from_records(header, records)
    trace.path = str(p)
    return trace
