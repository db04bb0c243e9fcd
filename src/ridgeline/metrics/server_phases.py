"""A run's mean request phases as the server measured them: vLLM's phase histograms.

vLLM exports, per finished request, `vllm:request_queue_time_seconds` (queued -> first
scheduled), `vllm:request_prefill_time_seconds` (-> first token),
`vllm:request_decode_time_seconds` (-> last token) and the per-request time per output token.
bench's telemetry sampler keeps each histogram's `_sum` and `_count` in its sidecar file
(`bench/telemetry.py`), the last scrape taken after the run ends; the increase over the run
(the last sample minus the last one before the run's t=0, or the first one) is the phase's
total over the run's requests, and sum / count their mean.

>>> phase_means([{"source": "server", "t_perf_s": 1.0, "queue_time_s_sum": 1.0,
...               "queue_time_s_count": 2, "prefill_time_s_sum": 0.5,
...               "prefill_time_s_count": 2},
...              {"source": "server", "t_perf_s": 9.0, "queue_time_s_sum": 1.6,
...               "queue_time_s_count": 5, "prefill_time_s_sum": 1.1,
...               "prefill_time_s_count": 5}], t0_perf_s=2.0)
{'requests': 3, 'queue_s': 0.2, 'prefill_s': 0.2, 'source': 'vllm phase histograms'}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ridgeline.metrics.telemetry import read_samples

PHASES = (("queue_s", "queue_time_s"), ("prefill_s", "prefill_time_s"),
          ("decode_s", "decode_time_s"), ("tpot_s", "tpot_s"), ("ttft_s", "ttft_s"),
          ("e2e_s", "e2e_s"))


def phase_means(samples: list[dict[str, Any]], t0_perf_s: float) -> dict[str, Any] | None:
    """Mean seconds per phase over the requests finished between the last server sample
    before t0 (the first sample when none is) and the last sample; None without them."""
    server = [s for s in samples if s.get("source") == "server"
              and "queue_time_s_count" in s]
    if len(server) < 2:
        return None
    before = [s for s in server if s["t_perf_s"] < t0_perf_s]
    a, b = (before[-1] if before else server[0]), server[-1]
    n = round(float(b["queue_time_s_count"]) - float(a["queue_time_s_count"]))
    if n <= 0:
        return None
    out: dict[str, Any] = {"requests": n}
    for key, name in PHASES:
        s_key, c_key = f"{name}_sum", f"{name}_count"
        if s_key in a and s_key in b and c_key in a and c_key in b:
            count = float(b[c_key]) - float(a[c_key])
            if count > 0:
                out[key] = round((float(b[s_key]) - float(a[s_key])) / count, 9)
    out["source"] = "vllm phase histograms"
    return out


def trace_phase_means(trace: Any) -> dict[str, Any] | None:
    """`phase_means` of a loaded bench trace whose header names a telemetry sidecar."""
    header = getattr(trace, "header", None)
    extra = getattr(header, "model_extra", None) or {}
    tel = extra.get("telemetry") if isinstance(extra, dict) else None
    t0 = extra.get("t0_perf_counter_s") if isinstance(extra, dict) else None
    path = getattr(trace, "path", None)
    if not isinstance(tel, dict) or not tel.get("file") or t0 is None or not path:
        return None
    side = Path(path).with_name(str(tel["file"]))
    if not side.is_file():
        return None
    return phase_means(read_samples(side), float(t0))


__all__ = ["PHASES", "phase_means", "trace_phase_means"]
