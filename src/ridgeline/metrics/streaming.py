"""Metrics of a run whose requests arrive in chunks (a streaming simulation, merged shards).

Each chunk is a columnar `Trace` of finished requests; its per-request metrics come from the
one implementation (`request_metrics`, the pooled ITL of `analyze`, the SLO test of
goodput), so the definitions are those of `analyze`. What is kept across chunks:

- counts and sums (requests by status, good requests, tokens, first send, last end): exact;
- each latency series: its values while the series holds at most `exact_max` of them, so
  its percentiles and CIs are those of `summarize` (exact, the same function as `analyze`),
  and always a `LogSketch`; beyond the cap the values are dropped and percentiles come from
  the sketch, within its stated relative error. Bootstrap CIs need the sample: for a
  sketch they are reported unavailable (NaN), not invented; the mean's CI is the normal
  one (sd / sqrt(n), from exact sums).

The measurement window is the whole run (first send to last end): the automatic steady-state
window of `analyze` needs the whole sample. `analyze(trace, window="all")` of the merged
trace gives the same counts, means and exact percentiles (tests check it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ridgeline.metrics.analysis import SLO_SOURCES, _itl_samples
from ridgeline.metrics.distribution import PERCENTILES, Distribution, Percentile, pct_key, summarize
from ridgeline.metrics.per_request import request_metrics
from ridgeline.metrics.sketch import DEFAULT_RELATIVE_ERROR, LogSketch
from ridgeline.metrics.slo import SLO, parse_slo
from ridgeline.theory.stats import MIN_TAIL_SAMPLES, min_samples_for_percentile
from ridgeline.trace.table import STATUSES

DEFAULT_EXACT_MAX = 5_000_000   # values per series kept for exact percentiles (40 MB)

SERIES = (
    ("ttft_ms", "TTFT", "ms"),
    ("tpot_ms", "TPOT (per request)", "ms"),
    ("itl_ms", "ITL (pooled, per event)", "ms"),
    ("e2e_ms", "E2E", "ms"),
    ("decode_rate_tok_s", "Decode rate (per request)", "tok/s"),
    ("output_tokens", "Output tokens", "tokens"),
    ("prompt_tokens", "Prompt tokens", "tokens"),
)


class StreamingSeries:
    """One metric's values, added a chunk at a time."""

    def __init__(self, exact_max: int, relative_error: float) -> None:
        self.exact_max = exact_max
        self.sketch = LogSketch(relative_error)
        self.kept: list[np.ndarray] | None = []
        self.kept_n = 0
        self.sum = 0.0
        self.sumsq = 0.0

    def add(self, values: np.ndarray) -> None:
        x = np.asarray(values, dtype=np.float64)
        x = x[np.isfinite(x)]
        self.sketch.add(x)
        self.sum += float(x.sum())
        self.sumsq += float(np.dot(x, x))
        if self.kept is not None:
            if self.kept_n + x.size <= self.exact_max:
                self.kept.append(x.copy())
                self.kept_n += x.size
            else:
                self.kept = None   # over the cap: sketch only from here on

    def merge(self, other: StreamingSeries) -> None:
        self.sketch.merge(other.sketch)
        self.sum += other.sum
        self.sumsq += other.sumsq
        if self.kept is not None and other.kept is not None \
                and self.kept_n + other.kept_n <= self.exact_max:
            self.kept.extend(other.kept)
            self.kept_n += other.kept_n
        else:
            self.kept = None

    @property
    def exact(self) -> bool:
        return self.kept is not None

    def summarize(self, key: str, label: str, unit: str, seed: int, stream: int
                  ) -> Distribution:
        if self.kept is not None:
            values = np.concatenate(self.kept) if self.kept else np.zeros(0)
            return summarize(key, label, values, unit=unit, seed=seed, stream=stream)
        s = self.sketch
        d = Distribution(name=key, label=label, unit=unit, description="")
        d.count = s.count
        d.mean = self.sum / s.count
        var = max(self.sumsq / s.count - d.mean * d.mean, 0.0)
        d.std = math.sqrt(var)
        half = 1.96 * d.std / math.sqrt(s.count)
        d.mean_ci = (d.mean - half, d.mean + half)
        d.min, d.max = s.min, s.max
        for q in PERCENTILES:
            d.percentiles[pct_key(q)] = Percentile(
                q=q, value=s.percentile(q), ci_low=math.nan, ci_high=math.nan,
                supported=s.count >= min_samples_for_percentile(q, MIN_TAIL_SAMPLES))
        return d


@dataclass
class StreamingMetrics:
    """Accumulates chunks of finished requests (see the module docstring)."""

    slos: tuple[Any, ...] = ()
    exact_max: int = DEFAULT_EXACT_MAX
    relative_error: float = DEFAULT_RELATIVE_ERROR
    series: dict[str, StreamingSeries] = field(default_factory=dict)
    requests: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    good_requests: int = 0
    good_output_tokens: float = 0.0
    output_tokens: float = 0.0
    prompt_tokens: float = 0.0
    first_sent_s: float = math.inf
    last_end_s: float = -math.inf
    sum_e2e_s: float = 0.0     # over successful requests (Little's law: L = sum W / T)

    def __post_init__(self) -> None:
        self.slos = tuple(s if isinstance(s, SLO) else parse_slo(s) for s in self.slos)
        for key, _, _ in SERIES:
            self.series.setdefault(key, StreamingSeries(self.exact_max, self.relative_error))

    def add_trace(self, trace: Any) -> None:
        """Add a chunk (a columnar `Trace` of finished requests)."""
        n = len(trace)
        if n == 0:
            return
        rm = request_metrics(trace)
        pop = rm.ok
        self.requests += n
        for i, name in enumerate(STATUSES):
            c = int((trace.status == i).sum())
            if c:
                self.by_status[name] = self.by_status.get(name, 0) + c
        s = self.series
        s["ttft_ms"].add(rm.ttft_s[pop] * 1e3)
        s["tpot_ms"].add(rm.tpot_s[pop] * 1e3)
        s["e2e_ms"].add(rm.e2e_s[pop] * 1e3)
        s["decode_rate_tok_s"].add(rm.decode_rate_tok_s[pop])
        s["output_tokens"].add(rm.output_tokens[pop])
        s["prompt_tokens"].add(np.where(trace.prompt_tokens[pop] >= 0,
                                        trace.prompt_tokens[pop], np.nan))
        itl_ms, _ = _itl_samples(trace, pop, per_token=False)
        s["itl_ms"].add(itl_ms)
        self.first_sent_s = min(self.first_sent_s, float(np.nanmin(trace.sent_s)))
        end = rm.end_s[np.isfinite(rm.end_s)]
        if end.size:
            self.last_end_s = max(self.last_end_s, float(end.max()))
        self.output_tokens += float(trace.event_tokens.sum())
        self.prompt_tokens += float(np.where(trace.prompt_tokens >= 0,
                                             trace.prompt_tokens, 0).sum())
        self.sum_e2e_s += float(np.nansum(rm.e2e_s[pop]))
        if self.slos:
            good = pop.copy()
            for slo in self.slos:
                values = getattr(rm, SLO_SOURCES[slo.metric])
                meets = slo.holds(values)
                if slo.metric in ("tpot", "decode_rate", "itl_max"):
                    meets = meets | (pop & np.isnan(values)
                                     & ((rm.output_tokens <= 1) | (rm.n_events <= 1)))
                good &= meets
            self.good_requests += int(good.sum())
            self.good_output_tokens += float(np.nansum(rm.output_tokens[good]))

    def merge(self, other: StreamingMetrics) -> None:
        """Add another accumulator (a shard): counts and sums add, series merge."""
        self.requests += other.requests
        for k, v in other.by_status.items():
            self.by_status[k] = self.by_status.get(k, 0) + v
        for name in ("good_requests", "good_output_tokens", "output_tokens", "prompt_tokens",
                     "sum_e2e_s"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.first_sent_s = min(self.first_sent_s, other.first_sent_s)
        self.last_end_s = max(self.last_end_s, other.last_end_s)
        for key, ser in self.series.items():
            ser.merge(other.series[key])

    def result(self, seed: int = 0) -> dict[str, Any]:
        """The metrics as a dict (JSON-ready) plus the Distributions under "latency"."""
        dur = self.last_end_s - self.first_sent_s
        ok = self.by_status.get("ok", 0)
        latency = {}
        methods = {}
        for stream, (key, label, unit) in enumerate(SERIES):
            ser = self.series[key]
            latency[key] = ser.summarize(key, label, unit, seed, stream)
            methods[key] = ("exact (sorted sample; bootstrap CIs)" if ser.exact else
                            f"sketch (log buckets; each percentile within "
                            f"{self.relative_error:.0%} relative of exact; CIs unavailable)")
        out: dict[str, Any] = {
            "requests": self.requests,
            "by_status": dict(self.by_status),
            "window": {"start_s": self.first_sent_s, "end_s": self.last_end_s,
                       "duration_s": dur, "how": "whole run: first send to last end"},
            "throughput": {
                "requests_per_s": ok / dur if dur > 0 else math.nan,
                "output_tok_s": self.output_tokens / dur if dur > 0 else math.nan,
                "total_tok_s": (self.output_tokens + self.prompt_tokens) / dur
                if dur > 0 else math.nan,
            },
            "mean_in_flight": self.sum_e2e_s / dur if dur > 0 else math.nan,
            "percentile_method": methods,
            "latency": latency,
        }
        if self.slos:
            out["goodput"] = {
                "slos": [s.text for s in self.slos],
                "good_requests": self.good_requests,
                "judged_requests": ok + sum(v for k, v in self.by_status.items() if k != "ok"),
                "requests_per_s": self.good_requests / dur if dur > 0 else math.nan,
                "output_tok_s": self.good_output_tokens / dur if dur > 0 else math.nan,
                "attainment": self.good_requests / self.requests if self.requests else math.nan,
            }
        return out
