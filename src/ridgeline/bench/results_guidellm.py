"""Bench traces as GuideLLM's report (`guidellm benchmark --output-path`), with GuideLLM's
own metric definitions, so a GuideLLM user reads the numbers they know:

    time_to_first_token_ms    first text chunk - request start
    inter_token_latency_ms    (last - first token time) / (output_tokens - 1),
                              distribution weighted by output_tokens - 1
    time_per_output_token_ms  (last token time - request start) / output_tokens: TTFT
                              included, distribution weighted by output_tokens
    request_latency           end - start, seconds
    requests_per_second       successful requests / the run's duration (mean only)

Percentiles come from a weighted empirical CDF without interpolation (numpy's
`searchsorted(side="left")`, as GuideLLM). Only the `successful` breakdown of each metric
is filled. `.json` and `.yaml` get the same text (JSON is YAML); `.csv` gets one row per
benchmark; a folder gets `benchmarks.json`.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.bench.results_peer import _ok, _per_request
from ridgeline.trace.reader import read_trace

PERCENTILES = {"p001": 0.1, "p01": 1, "p05": 5, "p10": 10, "p25": 25, "p50": 50, "p75": 75,
               "p90": 90, "p95": 95, "p99": 99, "p999": 99.9}


def weighted_stats(values: list[float], weights: list[float] | None = None) -> dict[str, Any]:
    """GuideLLM's distribution summary: weighted mean, median and percentiles read off the
    weighted CDF (the first value whose cumulative weight reaches p).

    >>> weighted_stats([1.0, 2.0, 3.0, 4.0])["percentiles"]["p50"]
    2.0
    """
    v = np.asarray(values, dtype=np.float64)
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=np.float64)
    keep = w > 0
    v, w = v[keep], w[keep]
    if v.size == 0:
        return {"mean": 0.0, "median": 0.0, "min": 0.0, "max": 0.0, "count": 0,
                "total_sum": 0.0, "percentiles": {k: 0.0 for k in PERCENTILES}}
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    cdf = np.cumsum(w) / w.sum()

    def pct(p: float) -> float:
        return float(v[min(int(np.searchsorted(cdf, p / 100.0, side="left")), v.size - 1)])

    mean = float((v * w).sum() / w.sum())
    return {"mean": mean, "median": pct(50), "min": float(v[0]), "max": float(v[-1]),
            "std_dev": float(np.sqrt((w * (v - mean) ** 2).sum() / w.sum())),
            "count": int(v.size), "total_sum": float((v * w).sum()),
            "percentiles": {k: pct(p) for k, p in PERCENTILES.items()}}


def benchmark(trace_path: str | Path, strategy: str, rate: float | None) -> dict[str, Any]:
    """One GuideLLM `generative_benchmark` entry for one bench trace."""
    trace = read_trace(trace_path)
    rows = _per_request(trace)
    duration = (trace.footer.end_time_s if trace.footer is not None else 0.0) or 1e-9
    ttft = _ok(rows, "ttfts")
    lat = _ok(rows, "latencies")
    outs = _ok(rows, "output_lens")
    ins = _ok(rows, "input_lens")
    itl, itl_w, tpot = [], [], []
    for t, e2e, n in zip(ttft, lat, outs, strict=True):
        if n > 1:
            itl.append((e2e - t) / (n - 1) * 1e3)
            itl_w.append(n - 1)
        if n > 0:
            tpot.append(e2e / n * 1e3)
    statuses = trace.status_names()
    completed = sum(rows["ok"])
    incomplete = sum(1 for s in statuses if s == "cutoff")
    errored = len(trace) - completed - incomplete
    total_out = float(sum(outs))

    def succ(stats: dict[str, Any]) -> dict[str, Any]:
        return {"successful": stats}

    return {
        "type_": "generative_benchmark",
        "config": {"strategy": {"type_": strategy, "rate": rate}},
        "duration": duration,
        "metrics": {
            "request_totals": {"successful": completed, "errored": errored,
                               "incomplete": incomplete, "total": len(trace)},
            "requests_per_second": succ({"mean": completed / duration}),
            "request_latency": succ(weighted_stats(lat)),
            "time_to_first_token_ms": succ(weighted_stats([t * 1e3 for t in ttft])),
            "inter_token_latency_ms": succ(weighted_stats(itl, itl_w)),
            "time_per_output_token_ms": succ(weighted_stats(
                tpot, [float(n) for n in outs if n > 0])),
            "prompt_token_count": succ(weighted_stats([float(x) for x in ins])),
            "output_token_count": succ(weighted_stats([float(x) for x in outs])),
            "output_tokens_per_second": succ({"mean": total_out / duration}),
            "tokens_per_second": succ({"mean": (total_out + sum(ins)) / duration}),
        },
        "ridgeline_trace": Path(trace_path).name,
    }


def _strategy(point: Any, rate_type: str | None) -> tuple[str, float | None]:
    if rate_type in ("synchronous", "throughput"):
        return rate_type, None
    if point.rate_req_s is not None:
        return rate_type if rate_type in ("constant", "poisson") else "poisson", \
            point.rate_req_s
    return "concurrent", float(point.concurrency or 1)


_CSV_COLUMNS = (("strategy", None), ("rate", None), ("successful", None), ("errored", None),
                ("requests_per_second", "mean"), ("output_tokens_per_second", "mean"),
                ("time_to_first_token_ms", "mean"), ("time_to_first_token_ms", "median"),
                ("time_to_first_token_ms", "p99"), ("inter_token_latency_ms", "mean"),
                ("inter_token_latency_ms", "median"), ("inter_token_latency_ms", "p99"),
                ("time_per_output_token_ms", "mean"), ("request_latency", "mean"),
                ("request_latency", "p99"))


def _csv_row(b: dict[str, Any]) -> list[Any]:
    m = b["metrics"]
    out: list[Any] = [b["config"]["strategy"]["type_"], b["config"]["strategy"]["rate"],
                      m["request_totals"]["successful"], m["request_totals"]["errored"]]
    for name, stat in _CSV_COLUMNS[4:]:
        s = m[name]["successful"]
        out.append(s["percentiles"][stat] if stat.startswith("p") else s[stat])
    return out


def write_guidellm_report(points: list[Any], traces: list[Path], output_path: str | Path,
                          rate_type: str | None) -> Path:
    """GuideLLM's report for the run's points at `output_path` (by its suffix)."""
    benchmarks = []
    for point, trace in zip(points, traces, strict=True):
        strategy, rate = _strategy(point, rate_type)
        benchmarks.append(benchmark(trace, strategy, rate))
    path = Path(output_path)
    if path.is_dir() or not path.suffix:
        path.mkdir(parents=True, exist_ok=True)
        path = path / "benchmarks.json"
    if path.suffix.lower() == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow([n if s is None else f"{n}_{s}" for n, s in _CSV_COLUMNS])
            w.writerows(_csv_row(b) for b in benchmarks)
        return path
    report = {"metadata": {"version": 2, "generator": "ridgeline bench"},
              "benchmarks": benchmarks}
    path.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return path


__all__ = ["benchmark", "weighted_stats", "write_guidellm_report"]
