"""Summary of the server and GPU telemetry a bench run sampled (bench/telemetry.py).

The samples live in a sidecar file named by the trace header's `telemetry.file`; their
`t_perf_s` is the raw perf_counter, mapped onto the trace's timeline with the header's
`t0_perf_counter_s`. The summary covers the run, [0, end] in trace seconds:

    peak_kv_usage       max of the server's KV-cache usage fraction
    peak_running/waiting max requests running / waiting in the server
    preemptions         counter increase over the run (last sample minus the one before t=0)
    prefix_cache_hit_rate  hits / queries increase over the run (tokens), when reported
    gpus[i]             mean utilization %, peak memory used (bytes), mean power (W)

>>> summarize_samples([{"source": "server", "t_perf_s": 10.0, "running": 2,
...                     "preemptions_total": 5},
...                    {"source": "server", "t_perf_s": 11.0, "running": 4,
...                     "preemptions_total": 7}], t0_perf_s=10.5, end_s=1.0)["server"]
{'samples': 1, 'peak_running': 4.0, 'preemptions': 2.0}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_samples(path: str | Path) -> list[dict[str, Any]]:
    """The sample lines of a sidecar file (a truncated last line is skipped)."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict) and obj.get("type") == "telemetry":
                out.append(obj)
    return out


def _delta(rows: list[dict[str, Any]], before: dict[str, Any] | None, key: str
           ) -> float | None:
    vals = [r[key] for r in rows if key in r]
    if not vals:
        return None
    start = before.get(key) if before is not None and key in before else vals[0]
    return float(vals[-1] - start)


def summarize_samples(samples: list[dict[str, Any]], t0_perf_s: float,
                      end_s: float | None) -> dict[str, Any]:
    server_all = [s for s in samples if s.get("source") == "server"]
    end = float("inf") if end_s is None else t0_perf_s + end_s
    server = [s for s in server_all if t0_perf_s <= s["t_perf_s"] <= end]
    before_rows = [s for s in server_all if s["t_perf_s"] < t0_perf_s]
    before = before_rows[-1] if before_rows else None
    out: dict[str, Any] = {}
    if server:
        srv: dict[str, Any] = {"samples": len(server)}
        for key, name in (("kv_usage", "peak_kv_usage"), ("running", "peak_running"),
                          ("waiting", "peak_waiting")):
            vals = [float(s[key]) for s in server if key in s]
            if vals:
                srv[name] = max(vals)
        pre = _delta(server, before, "preemptions_total")
        if pre is not None:
            srv["preemptions"] = pre
        hits = _delta(server, before, "prefix_hits_tokens_total")
        queries = _delta(server, before, "prefix_queries_tokens_total")
        if hits is not None and queries:
            srv["prefix_cache_hit_rate"] = hits / queries
        out["server"] = srv
    gpus: dict[int, list[dict[str, Any]]] = {}
    for s in samples:
        if s.get("source") == "gpu" and t0_perf_s <= s["t_perf_s"] <= end:
            gpus.setdefault(int(s.get("gpu", 0)), []).append(s)
    if gpus:
        rows = []
        for i in sorted(gpus):
            g = gpus[i]
            row: dict[str, Any] = {"gpu": i, "samples": len(g)}
            util = [float(s["util_pct"]) for s in g if "util_pct" in s]
            mem = [float(s["mem_used_bytes"]) for s in g if "mem_used_bytes" in s]
            power = [float(s["power_w"]) for s in g if "power_w" in s]
            if util:
                row["mean_util_pct"] = sum(util) / len(util)
            if mem:
                row["peak_mem_used_bytes"] = max(mem)
            if power:
                row["mean_power_w"] = sum(power) / len(power)
            rows.append(row)
        out["gpus"] = rows
    return out


def trace_telemetry(trace_path: str | Path, header: Any, end_s: float | None
                    ) -> dict[str, Any] | None:
    """The summary for a trace whose header names a telemetry file (None otherwise)."""
    extra = getattr(header, "model_extra", None) or {}
    tel = extra.get("telemetry") if isinstance(extra, dict) else None
    t0 = extra.get("t0_perf_counter_s") if isinstance(extra, dict) else None
    if not isinstance(tel, dict) or not tel.get("file") or t0 is None:
        return None
    path = Path(trace_path).with_name(str(tel["file"]))
    if not path.is_file():
        return {"missing": str(path)}
    summary = summarize_samples(read_samples(path), float(t0), end_s)
    summary["file"] = path.name
    return summary


def trace_telemetry_of(path: str | Path, trace: Any) -> dict[str, Any] | None:
    """`trace_telemetry` for a loaded trace (its footer's end time bounds the run)."""
    footer = getattr(trace, "footer", None)
    header = getattr(trace, "header", None)
    if header is None:
        return None
    return trace_telemetry(path, header, footer.end_time_s if footer is not None else None)


def trace_file_telemetry(path: str | Path) -> dict[str, Any] | None:
    """`trace_telemetry` reading only a plain JSONL trace's first and last lines."""
    from types import SimpleNamespace

    try:
        with open(path, "rb") as fh:
            header = json.loads(fh.readline())
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(size - 65536, 0))
            tail = fh.read().splitlines()
        footer = json.loads(tail[-1]) if tail else {}
    except (OSError, ValueError):
        return None
    if not isinstance(header, dict) or not isinstance(footer, dict):
        return None
    end_s = footer.get("end_time_s") if footer.get("type") == "footer" else None
    return trace_telemetry(path, SimpleNamespace(model_extra=header), end_s)


def telemetry_lines(summary: dict[str, Any] | None) -> list[str]:
    """Plain-text lines for the console."""
    if not summary:
        return []
    if "missing" in summary:
        return [f"telemetry: file {summary['missing']} not found"]
    lines = []
    srv = summary.get("server")
    if srv:
        parts = []
        if "peak_kv_usage" in srv:
            parts.append(f"peak KV usage {srv['peak_kv_usage']:.1%}")
        if "peak_running" in srv:
            parts.append(f"peak running {srv['peak_running']:g}")
        if "peak_waiting" in srv:
            parts.append(f"peak waiting {srv['peak_waiting']:g}")
        if "preemptions" in srv:
            parts.append(f"preemptions {srv['preemptions']:g}")
        if "prefix_cache_hit_rate" in srv:
            parts.append(f"prefix-cache hit rate {srv['prefix_cache_hit_rate']:.1%}")
        lines.append(f"server ({srv['samples']} samples): " + ", ".join(parts))
    for g in summary.get("gpus", []):
        parts = []
        if "mean_util_pct" in g:
            parts.append(f"mean utilization {g['mean_util_pct']:.0f}%")
        if "peak_mem_used_bytes" in g:
            parts.append(f"peak memory {g['peak_mem_used_bytes'] / 2**30:.2f} GiB")
        if "mean_power_w" in g:
            parts.append(f"mean power {g['mean_power_w']:.0f} W")
        lines.append(f"GPU {g['gpu']} ({g['samples']} samples): " + ", ".join(parts))
    if not lines:
        lines.append("telemetry: no samples inside the run")
    return lines


__all__ = [
    "read_samples",
    "summarize_samples",
    "telemetry_lines",
    "trace_file_telemetry",
    "trace_telemetry",
    "trace_telemetry_of",
]


SERIES_KEYS = {"server": ("kv_usage", "running", "waiting"),
               "gpu": ("util_pct", "mem_used_bytes", "power_w")}


def telemetry_series(trace_path: str | Path, header: Any) -> list[tuple[float, str, float]]:
    """The sidecar's samples as (t_s, name, value) rows on the trace's clock (seconds from the
    trace's t=0), for plots; [] when the header names no telemetry file or it is gone.
    Names: `kv_usage`, `running`, `waiting` (server) and `gpu<i> util_pct|mem_used_bytes|
    power_w`."""
    extra = getattr(header, "model_extra", None) or {}
    tel = extra.get("telemetry") if isinstance(extra, dict) else None
    t0 = extra.get("t0_perf_counter_s") if isinstance(extra, dict) else None
    if not isinstance(tel, dict) or not tel.get("file") or t0 is None:
        return []
    path = Path(trace_path).with_name(str(tel["file"]))
    if not path.is_file():
        return []
    rows: list[tuple[float, str, float]] = []
    for s in read_samples(path):
        source = s.get("source")
        prefix = f"gpu{s.get('gpu', 0)} " if source == "gpu" else ""
        t_s = float(s["t_perf_s"]) - float(t0)
        rows.extend((t_s, prefix + key, float(s[key]))
                    for key in SERIES_KEYS.get(str(source), ()) if s.get(key) is not None)
    return rows
