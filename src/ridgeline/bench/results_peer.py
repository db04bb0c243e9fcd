"""A bench trace written as peers' result files, so existing dashboards read ridgeline runs.

`--save-result vllm` writes the JSON `vllm bench serve --save-result --save-detailed` writes
(keys from vLLM's `benchmarks/serve.py`; the peers' documented result formats), with
vLLM's own definitions, not ridgeline's:

    ttft      first output event - send, per request (ms in aggregates, s in `ttfts`)
    tpot      (e2e - ttft) / (output_len - 1) per request with output_len > 1
    itl       gaps between consecutive output events, pooled over requests
    e2el      end - send
    duration  the run's length (trace footer's end time; t = 0 is the first dispatch)
    percentiles numpy linear; std with ddof = 0; keys p{N}_{metric}_ms

`--save-result aiperf-csv` writes AIPerf's `profile_export_aiperf.csv` layout: a table of
per-request distributions (`Metric,avg,min,max,p1,...,p99,std`; AIPerf's "Inter Token
Latency" is the per-request (e2e - ttft) / (osl - 1), i.e. vLLM's TPOT), a blank line,
then `Metric,Value` summary rows.

Only requests with status "ok" count as completed; the rest are vLLM's `failed`/`errors`.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.bench.peer_flags import ResultFileSpec, write_result_json
from ridgeline.metrics.slo import parse_slos
from ridgeline.trace.reader import read_trace

DEFAULT_PERCENTILES = (99.0,)
AIPERF_PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)


def _per_request(trace: Any) -> dict[str, Any]:
    """vLLM's per-request lists from a trace: every request in order (a failure has
    ttft 0, no itls, output_len 0 and its message in `errors`), and `ok` flags."""
    status = trace.status_names()
    offs = trace.event_offsets
    ev = trace.event_times_s
    rows: dict[str, list[Any]] = {k: [] for k in ("input_lens", "output_lens", "ttfts", "itls",
                                                   "latencies", "start_times", "errors",
                                                   "tpots", "ok")}
    t0 = float((trace.header.model_extra or {}).get("t0_perf_counter_s") or 0.0)
    for i in range(len(trace)):
        times = ev[offs[i]:offs[i + 1]]
        sent = float(trace.sent_s[i])
        ok = status[i] == "ok" and times.size > 0
        end = float(trace.end_s[i]) if np.isfinite(trace.end_s[i]) else (
            float(times[-1]) if times.size else sent)
        rows["ok"].append(ok)
        rows["start_times"].append(t0 + sent)
        rows["input_lens"].append(int(trace.prompt_tokens[i]) if trace.prompt_tokens[i] >= 0
                                  else 0)
        rows["latencies"].append(end - sent if ok else 0.0)
        if not ok:
            rows["errors"].append(trace.error[i] or status[i])
            rows["output_lens"].append(0)
            rows["ttfts"].append(0.0)
            rows["itls"].append([])
            rows["tpots"].append(None)
            continue
        out_len = int(trace.output_tokens[i]) if trace.output_tokens[i] >= 0 else times.size
        ttft = float(times[0] - sent)
        rows["errors"].append("")
        rows["output_lens"].append(out_len)
        rows["ttfts"].append(ttft)
        rows["itls"].append(np.diff(times).tolist())
        rows["tpots"].append((end - sent - ttft) / (out_len - 1) if out_len > 1 else None)
    return rows


def _ok(rows: dict[str, Any], key: str) -> list[Any]:
    return [v for v, ok in zip(rows[key], rows["ok"], strict=True) if ok]


def _stats(prefix: str, values_ms: list[float], percentiles: tuple[float, ...]
           ) -> dict[str, float]:
    arr = np.asarray(values_ms, dtype=np.float64)
    if arr.size == 0:
        arr = np.zeros(1)  # vLLM reports 0 for an empty list (np.mean(x or 0))
    out = {f"mean_{prefix}_ms": float(arr.mean()), f"median_{prefix}_ms": float(
        np.median(arr)), f"std_{prefix}_ms": float(arr.std())}
    for p in percentiles:
        key = str(int(p)) if float(p).is_integer() else f"{p:g}"
        out[f"p{key}_{prefix}_ms"] = float(np.percentile(arr, p))
    return out


def _max_concurrent(starts: list[float], ends: list[float]) -> int:
    events = sorted([(s, 1) for s in starts] + [(e, -1) for e in ends],
                    key=lambda x: (x[0], x[1]))
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def vllm_burstiness(load: dict[str, Any]) -> float | str:
    """vLLM's `burstiness` for a trace header's `load`: the gamma shape of the gaps, 1/cv**2
    (vLLM's get_request). Poisson gaps are gamma with shape 1, so poisson (and the
    Poisson-based ramp and diurnal) is 1.0, which is also what vLLM writes when no rate
    applies (its default); evenly spaced arrivals are vLLM's burstiness = inf, written as
    the string "inf" like its request_rate."""
    kind = load.get("arrival")
    if kind == "gamma" and load.get("cv"):
        return 1.0 / float(load["cv"]) ** 2
    if kind == "constant":
        return "inf"
    return 1.0


def vllm_result(trace_path: str | Path, slos: tuple | list = (),
                percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
                spec: ResultFileSpec | None = None) -> dict[str, Any]:
    """The vLLM `--save-result --save-detailed` object for one bench trace.

    `spec` carries vLLM's `--label`, `--backend`, `--metadata` (top-level keys after
    `num_prompts`, as vLLM writes them) and `--percentile-metrics` (default: all four)."""
    spec = spec or ResultFileSpec()
    trace = read_trace(trace_path)
    h = trace.header
    extra = h.model_extra or {}
    rows = _per_request(trace)
    ends = [float(x) for x in trace.end_s if np.isfinite(x)]
    duration = (trace.footer.end_time_s if trace.footer is not None else
                (max(ends) if ends else 0.0)) or 1e-9
    completed = sum(rows["ok"])
    total_in = int(sum(_ok(rows, "input_lens")))
    total_out = int(sum(_ok(rows, "output_lens")))
    ttfts, lats = _ok(rows, "ttfts"), _ok(rows, "latencies")
    tpots = [t for t in _ok(rows, "tpots") if t is not None]
    itls = [g for r in _ok(rows, "itls") for g in r]
    load = h.load or {}
    rate = load.get("rate_req_s")
    good = None
    if slos:
        parsed = [s for s in parse_slos(list(slos)) if s.metric in ("ttft", "tpot", "e2e")]
        n_good = 0
        for ttft, tpot, lat in zip(ttfts, _ok(rows, "tpots"), lats, strict=True):
            values = {"ttft": ttft, "tpot": tpot or 0.0, "e2e": lat}
            if all(bool(s.holds(np.asarray([values[s.metric]]))[0]) for s in parsed):
                n_good += 1
        good = n_good / duration
    t0 = float(extra.get("t0_perf_counter_s") or 0.0)
    starts_rel = [s - t0 for s in _ok(rows, "start_times")]
    # Output events per 1-s bucket, from each request's events (vLLM builds the same from
    # ttft + itls): the busiest second.
    buckets: dict[int, int] = {}
    for s, ttft, gaps in zip(starts_rel, ttfts, _ok(rows, "itls"), strict=True):
        t = s + ttft
        for k, g in enumerate([0.0, *gaps]):
            t = t + g if k else t
            buckets[int(t)] = buckets.get(int(t), 0) + 1
    api = (h.engine_config or {}).get("api", "completions")
    backend = spec.backend or ("openai-chat" if api == "chat" else "openai")
    result: dict[str, Any] = {
        "date": time.strftime("%Y%m%d-%H%M%S", time.localtime(h.start_time_unix_s or
                                                                  time.time())),
        "endpoint_type": backend,
        "backend": backend,
        "label": spec.label,
        "model_id": h.model,
        "tokenizer_id": (h.engine_config or {}).get("tokenizer") or h.model,
        "num_prompts": len(trace),
        **dict(spec.metadata),
        "request_rate": float(rate) if rate is not None else "inf",
        "burstiness": vllm_burstiness(load),
        "max_concurrency": load.get("concurrency"),
        "duration": float(duration),
        "completed": completed,
        "failed": len(trace) - completed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": completed / duration,
        "request_goodput": good,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_in + total_out) / duration,
        "max_output_tokens_per_s": float(max(buckets.values())) if buckets else 0.0,
        "max_concurrent_requests": _max_concurrent(
            starts_rel, [s + lat for s, lat in zip(starts_rel, lats, strict=True)]),
        "rtfx": 0.0,  # vLLM's inverse real-time factor: ASR benchmarks only
    }
    chosen = spec.percentile_metrics or ("ttft", "tpot", "itl", "e2el")
    for name, vals in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", lats)):
        if name in chosen:
            result.update(_stats(name, [v * 1e3 for v in vals], percentiles))
    result.update({
        "input_lens": rows["input_lens"], "output_lens": rows["output_lens"],
        "ttfts": rows["ttfts"], "itls": rows["itls"], "latencies": rows["latencies"],
        "start_times": rows["start_times"],
        # vLLM's client_queue_time: the client's own wait before sending (here: send time
        # minus the time the load pattern scheduled it; 0 where no schedule was recorded).
        "queue_times": [max(float(sent - sch), 0.0) if np.isfinite(sch) else 0.0
                        for sent, sch in zip(trace.sent_s, trace.scheduled_s, strict=True)],
        "generated_texts": [""] * len(trace),  # bench does not keep the texts
        "errors": rows["errors"],
        "ridgeline_trace": Path(trace_path).name,
    })
    return result


# vLLM's default --percentile-metrics for what it prints (the file here keeps all four).
VLLM_PRINTED_METRICS = ("ttft", "tpot", "itl")
_VLLM_METRIC_NAMES = (("ttft", "TTFT", "Time to First Token"),
                      ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
                      ("itl", "ITL", "Inter-token Latency"),
                      ("e2el", "E2EL", "End-to-end Latency"))


def vllm_result_block(result: dict[str, Any], percentiles: tuple[float, ...] = (99.0,),
                      metrics: tuple[str, ...] | None = None, goodput: bool = False
                      ) -> list[str]:
    """The block `vllm bench serve` prints after a run (its labels, units and layout:
    `{:<40} {:<10}`), from a `vllm_result` object."""
    def row(label: str, value: Any, fmt: str = "") -> str:
        return f"{label:<40} {value:<10{fmt}}"

    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="),
             row("Successful requests:", result["completed"]),
             row("Failed requests:", result["failed"])]
    if result.get("max_concurrency") is not None:
        lines.append(row("Maximum request concurrency:", result["max_concurrency"]))
    if result.get("request_rate") not in (None, "inf"):
        lines.append(row("Request rate configured (RPS):", float(result["request_rate"]),
                         ".2f"))
    lines += [row("Benchmark duration (s):", result["duration"], ".2f"),
              row("Total input tokens:", result["total_input_tokens"]),
              row("Total generated tokens:", result["total_output_tokens"]),
              row("Request throughput (req/s):", result["request_throughput"], ".2f")]
    if goodput and result.get("request_goodput") is not None:
        lines.append(row("Request goodput (req/s):", result["request_goodput"], ".2f"))
    lines += [row("Output token throughput (tok/s):", result["output_throughput"], ".2f"),
              row("Peak output token throughput (tok/s):",
                  result["max_output_tokens_per_s"], ".2f"),
              row("Peak concurrent requests:", float(result["max_concurrent_requests"]),
                  ".2f"),
              row("Total Token throughput (tok/s):", result["total_token_throughput"], ".2f")]
    chosen = metrics or VLLM_PRINTED_METRICS
    for key, name, title in _VLLM_METRIC_NAMES:
        if key not in chosen or f"mean_{key}_ms" not in result:
            continue
        lines.append("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        lines.append(row(f"Mean {name} (ms):", result[f"mean_{key}_ms"], ".2f"))
        lines.append(row(f"Median {name} (ms):", result[f"median_{key}_ms"], ".2f"))
        for p in percentiles:
            word = str(int(p)) if float(p).is_integer() else f"{p:g}"
            lines.append(row(f"P{word} {name} (ms):", result[f"p{word}_{key}_ms"], ".2f"))
    lines.append("=" * 50)
    return lines


def _dist_row(name: str, values: list[float]) -> list[str]:
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return [name] + [""] * 13
    stats = [arr.mean(), arr.min(), arr.max(),
             *np.percentile(arr, AIPERF_PERCENTILES), arr.std()]
    return [name] + [f"{v:.2f}" for v in stats]


def aiperf_csv_rows(trace_path: str | Path) -> list[list[str]]:
    """Rows of AIPerf's profile_export_aiperf.csv for one bench trace."""
    trace = read_trace(trace_path)
    rows = _per_request(trace)
    duration = (trace.footer.end_time_s if trace.footer is not None else
                max([0.0, *[float(x) for x in trace.end_s if np.isfinite(x)]])) or 1e-9
    ttft_ms = [t * 1e3 for t in _ok(rows, "ttfts")]
    lat_ms = [t * 1e3 for t in _ok(rows, "latencies")]
    itl_ms = [t * 1e3 for t in _ok(rows, "tpots") if t is not None]
    second = [(t + g[0]) * 1e3 for t, g in zip(_ok(rows, "ttfts"), _ok(rows, "itls"),
                                               strict=True) if g]
    per_user = [1e3 / x for x in itl_ms if x > 0]
    out: list[list[str]] = [["Metric", "avg", "min", "max",
                             *[f"p{p}" for p in AIPERF_PERCENTILES], "std"]]
    out.append(_dist_row("Request Latency (ms)", lat_ms))
    out.append(_dist_row("Time to First Token (ms)", ttft_ms))
    out.append(_dist_row("Time to Second Token (ms)", second))
    out.append(_dist_row("Inter Token Latency (ms)", itl_ms))
    out.append(_dist_row("Output Token Throughput Per User (tokens/sec/user)", per_user))
    out.append(_dist_row("Output Sequence Length (tokens)",
                         [float(x) for x in _ok(rows, "output_lens")]))
    out.append(_dist_row("Input Sequence Length (tokens)",
                         [float(x) for x in _ok(rows, "input_lens")]))
    out.append([])
    completed = sum(rows["ok"])
    total_out = sum(_ok(rows, "output_lens"))
    out.append(["Metric", "Value"])
    for name, value in (
            ("Benchmark Duration (sec)", duration),
            ("Request Throughput (requests/sec)", completed / duration),
            ("Request Count", completed),
            ("Error Request Count", len(trace) - completed),
            ("Output Token Throughput (tokens/sec)", total_out / duration),
            ("Total Output Sequence Length (tokens)", total_out),
            ("Total Input Sequence Length (tokens)", sum(_ok(rows, "input_lens")))):
        out.append([name, f"{float(value):.2f}"])
    return out


def write_peer_results(trace_path: str | Path, formats: list[str], slos: list | tuple = (),
                       percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
                       spec: ResultFileSpec | None = None, point_tag: str = "",
                       folder: str | Path | None = None) -> list[Path]:
    """Write each asked-for format as `<trace stem>.<format>` in `folder` (default: the
    trace's), the vLLM file where `spec` says (vLLM's `--result-dir`/`--result-filename`/
    `--append-result`); returns the paths."""
    p = Path(trace_path)
    stem = p.name[: -len(".jsonl")] if p.name.endswith(".jsonl") else p.name
    beside = Path(folder) / p.name if folder is not None else p
    written = []
    for fmt in formats:
        if fmt == "vllm":
            result = vllm_result(p, slos, percentiles, spec)
            if spec is not None and spec.custom_path:
                rate = result["request_rate"]
                path = spec.path_for(str(result["model_id"] or "model"),
                                     None if rate == "inf" else float(rate),
                                     result["max_concurrency"], point_tag)
                write_result_json(path, result, spec.append)
            else:
                path = beside.with_name(stem + ".vllm.json")
                path.write_text(json.dumps(result), encoding="utf-8")
        else:
            path = beside.with_name(stem + ".aiperf.csv")
            with open(path, "w", newline="", encoding="utf-8") as fh:
                csv.writer(fh).writerows(aiperf_csv_rows(p))
        written.append(path)
    return written


def aiperf_json(trace_path: str | Path) -> dict[str, Any]:
    """AIPerf's profile_export_aiperf.json (its metric tags, each {unit, avg, p1..p99, min,
    max, std}) from the same rows as the CSV."""
    rows = aiperf_csv_rows(trace_path)
    tags = {"Request Latency (ms)": ("request_latency", "ms"),
            "Time to First Token (ms)": ("time_to_first_token", "ms"),
            "Time to Second Token (ms)": ("time_to_second_token", "ms"),
            "Inter Token Latency (ms)": ("inter_token_latency", "ms"),
            "Output Token Throughput Per User (tokens/sec/user)":
                ("output_token_throughput_per_user", "tokens/sec/user"),
            "Output Sequence Length (tokens)": ("output_sequence_length", "tokens"),
            "Input Sequence Length (tokens)": ("input_sequence_length", "tokens"),
            "Benchmark Duration (sec)": ("benchmark_duration", "sec"),
            "Request Throughput (requests/sec)": ("request_throughput", "requests/sec"),
            "Request Count": ("request_count", "requests"),
            "Error Request Count": ("error_request_count", "requests"),
            "Output Token Throughput (tokens/sec)": ("output_token_throughput", "tokens/sec"),
            "Total Output Sequence Length (tokens)": ("total_osl", "tokens"),
            "Total Input Sequence Length (tokens)": ("total_isl", "tokens")}
    stats = rows[0][1:]
    out: dict[str, Any] = {}
    for r in rows[1:]:
        if not r or r[0] not in tags:
            continue
        tag, unit = tags[r[0]]
        if len(r) == 2:  # a summary value
            out[tag] = {"unit": unit, "avg": float(r[1])}
        elif r[1] != "":
            out[tag] = {"unit": unit, **{k: float(v) for k, v in zip(stats, r[1:],
                                                                      strict=True)}}
    out["input_config"] = {"generator": "ridgeline bench",
                           "ridgeline_trace": Path(trace_path).name}
    return out


def write_aiperf_artifacts(trace_path: str | Path, folder: str | Path) -> list[Path]:
    """AIPerf's `--artifact-dir` files for one trace: profile_export_aiperf.csv and .json."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "profile_export_aiperf.csv"
    with open(csv_path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(aiperf_csv_rows(trace_path))
    json_path = out / "profile_export_aiperf.json"
    json_path.write_text(json.dumps(aiperf_json(trace_path), indent=2), encoding="utf-8")
    return [csv_path, json_path]


__all__ = ["aiperf_csv_rows", "aiperf_json", "vllm_result", "vllm_result_block",
           "write_aiperf_artifacts", "write_peer_results"]
