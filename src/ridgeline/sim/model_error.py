"""Model-error intervals of a simulated run: the held-out residuals
(ridgeline.metrics.prediction_interval) plus the step-time error carried through the queue.

Near the knee a small step-time error is a large queueing error. The run is simulated again
with every step `s` times longer, for `s` at both ends of the decode-time residual's 80% and
95% intervals, and each metric's interval is widened to cover those reruns. A run whose
steps all take `s` times longer is, on a clock running `s` times slower, the same engine
under arrivals `s` times denser: so the rerun is the same scenario at `s` x the rate (the
same seeded draws, scaled), with every latency multiplied by `s`. That holds for constant,
Poisson and gamma arrivals; a closed loop with no think time just scales (no rerun needed);
other arrival processes are not propagated (interval_source says so). The fixed per-request
engine cost is scaled with the rest, a small overstatement.

The reruns skip the analysis (its bootstrap CIs cost far more than the simulation) and hold at
most PROPAGATION_MAX_REQUESTS requests: each statistic is taken over the rerun's successful
requests, and the run's own figure is multiplied by the ratio of the scaled rerun's statistic
to an unscaled rerun's (the pooled ITL follows the per-request TPOT's ratio).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ridgeline.metrics.per_request import request_metrics
from ridgeline.metrics.prediction_interval import (
    CALIBRATED_NOTE,
    annotate_latency,
    distance_from_data,
    json_stat,
    regime_of,
    step_scales,
)
from ridgeline.metrics.render import fmt
from ridgeline.sim.event_loop import simulate
from ridgeline.sim.scenario_run import trace_header
from ridgeline.sim.workload import build_workload

METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
STATS = ("mean", "median", "p90", "p99")
RESCALABLE_ARRIVALS = ("poisson", "constant", "gamma")
PROPAGATION_MAX_REQUESTS = 10_000


def _stats(latency_json: dict[str, Any], scale: float) -> dict[str, dict[str, float]]:
    """Per metric, its mean, median, P90 and P99 (the analysis's JSON form) x `scale`."""
    out: dict[str, dict[str, float]] = {}
    for m in METRICS:
        d = latency_json.get(m)
        if not d or d.get("available") is False:
            continue
        vals = {}
        for stat in STATS:
            v = json_stat(d, stat)
            if v is not None:
                vals[stat] = v * scale
        out[m] = vals
    return out


def _rerun_stats(sc: Any, built: Any, rate_req_s: float, scale: float
                 ) -> dict[str, dict[str, float]]:
    """Per-request TTFT, TPOT and E2E statistics (ms) of `sc` at `rate_req_s` x `scale`,
    every latency x `scale`: the run with every step `scale` times longer."""
    import numpy as np

    n = min(sc.requests, PROPAGATION_MAX_REQUESTS)
    wl, load, dataset = build_workload(
        n, sc.prompt, sc.output, rate_req_s=rate_req_s * scale, arrival=sc.arrival,
        concurrency=None, think_time=sc.think_time, prefix_groups=sc.prefix_groups,
        prefix_tokens=sc.prefix_tokens, seed=sc.seed)
    res = simulate(wl, built.config, built.step_model, built.cluster, mode=sc.mode)
    rm = request_metrics(res.to_trace(trace_header(sc, built, load, dataset)))
    out: dict[str, dict[str, float]] = {}
    for m, arr in (("ttft_ms", rm.ttft_s), ("tpot_ms", rm.tpot_s), ("e2e_ms", rm.e2e_s)):
        v = arr[rm.ok & np.isfinite(arr)] * 1e3 * scale
        if v.size:
            p50, p90, p99 = np.percentile(v, [50, 90, 99])
            out[m] = {"mean": float(v.mean()), "median": float(p50), "p90": float(p90),
                      "p99": float(p99)}
    if "tpot_ms" in out:
        out["itl_ms"] = out["tpot_ms"]
    return out


def run_regime(latency_json: dict[str, Any]) -> str:
    """The run's regime from its predicted TTFT mean and P99 and ITL (the JSON form)."""
    t, i = latency_json.get("ttft_ms") or {}, latency_json.get("itl_ms") or {}
    vals = (json_stat(t, "mean"), json_stat(t, "p99"), json_stat(i, "mean"))
    if any(v is None for v in vals):
        return "below_knee"
    return regime_of(*(float(v) for v in vals if v is not None))


def add_model_error(run: Any, latency_json: dict[str, Any]) -> None:
    """Annotate `latency_json` (the run's analysis `to_dict()["latency"]`) in place."""
    add_model_error_for(run.scenario, run.built, run.rate_req_s, latency_json)


def add_model_error_for(sc: Any, built: Any, rate_req_s: float | None,
                        latency_json: dict[str, Any]) -> None:
    """Annotate `latency_json` (a run's `latency` in JSON form: the analysis's, or a streamed
    run's summary) of scenario `sc` built as `built`, run at `rate_req_s`, in place."""
    hw = getattr(built.step_model, "hardware", None)   # the catalog name, also for a path
    distance = distance_from_data(
        getattr(hw, "name", sc.hardware), sc.engine if sc.engine_costs else "none", sc.model,
        memory_bandwidth_bytes_s=getattr(hw, "memory_bandwidth_bytes_s", None))
    if sc.calibration:   # measured steps: the calibrated runs' residuals where they exist
        distance = dataclasses.replace(
            distance, hardware_kind="calibrated profile", kernel_sigma_log=0.0,
            kernel_source="a calibration profile times the steps; the fitted model's "
                          "held-out residuals stand in for the P90 and P99 (no calibrated "
                          "tails measured); the means and medians take the calibrated llama.cpp "
                          "runs' held-out median residuals")
    regime = run_regime(latency_json)
    scales = step_scales(regime, distance)
    kind = sc.arrival.split(":", 1)[0]
    closed = sc.concurrency is not None
    propagated: dict[str, dict[str, dict[int, tuple[float, float]]]] = {}
    how = "not propagated (think time, or an arrival process that cannot be time-rescaled)"
    if closed and str(sc.think_time).strip() in ("0", "0.0", ""):
        how = "closed loop without think time: latencies scale with the step time"
        reruns = {lv: (_stats(latency_json, a), _stats(latency_json, b))
                  for lv, (a, b) in scales.items()}
    elif not closed and rate_req_s and kind in RESCALABLE_ARRIVALS:
        how = ("reruns at rate x s, latencies x s, s at the step-time residual's interval "
               f"ends (first {min(sc.requests, PROPAGATION_MAX_REQUESTS):,} requests; the "
               "run's figures times the scaled/unscaled rerun ratio)")
        cache: dict[float, dict[str, dict[str, float]]] = {}

        def at(s: float) -> dict[str, dict[str, float]]:
            if s not in cache:
                cache[s] = _rerun_stats(sc, built, float(rate_req_s), s)
            return cache[s]

        main, base = _stats(latency_json, 1.0), at(1.0)

        def scaled(s: float) -> dict[str, dict[str, float]]:
            got = at(s)
            return {m: {k: v * got[m][k] / base[m][k] for k, v in stats.items()
                        if base.get(m, {}).get(k) and m in got and k in got[m]}
                    for m, stats in main.items()}

        reruns = {lv: (scaled(a), scaled(b)) for lv, (a, b) in scales.items()}
    else:
        reruns = {}
    for lv, (lo_run, hi_run) in reruns.items():
        for m, stats in lo_run.items():
            for stat, v_lo in stats.items():
                v_hi = hi_run.get(m, {}).get(stat)
                if v_hi is not None:
                    propagated.setdefault(m, {}).setdefault(stat, {})[lv] = (v_lo, v_hi)
    annotate_latency(latency_json, regime, distance, propagated,
                     calibrated=bool(sc.calibration))
    for m in METRICS:
        d = latency_json.get(m)
        if d and "interval_source" in d:
            d["interval_source"]["step_time_propagation"] = how
            d["interval_source"]["step_time_scales"] = {
                str(lv): [round(a, 4), round(b, 4)] for lv, (a, b) in scales.items()}
            d["interval_source"]["regime_predicted"] = regime


def annotated_latency(run: Any) -> dict[str, Any]:
    """A run's analysis `latency` in JSON form with its model-error intervals (one point of
    a rate sweep as `simulate --json` prints it)."""
    lat: dict[str, Any] = run.analysis.to_dict()["latency"]
    add_model_error(run, lat)
    return lat


def interval_origin(latency_json: dict[str, Any]) -> str:
    """Where a run's model-error intervals come from, for a text header: the replay's
    residuals, or (a calibrated profile) the calibrated llama.cpp runs' for means, medians
    and TTFT/E2E tails."""
    for m in METRICS:
        if ((latency_json.get(m) or {}).get("interval_source") or {}).get("note") \
                == CALIBRATED_NOTE:
            return ("means, medians and TTFT/E2E tails: held-out calibrated llama.cpp runs' "
                    "residuals; TPOT/ITL tails: replay residuals")
    return "held-out replay residuals"


def sweep_model_error_lines(rates: list[float], latencies: list[dict[str, Any]]) -> list[str]:
    """Per sweep point, its TTFT and TPOT P50/P99 nominal 80% model-error intervals:
    '  4 req/s: TTFT P50 [25.7, 32.2], P99 [42.5, 77.6]; TPOT P50 [..], P99 [..]'."""
    lines = []
    for rate, lat in zip(rates, latencies, strict=True):
        parts = []
        for m, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
            d = lat.get(m) or {}
            cells = [f"{label} [{fmt(iv[0])}, {fmt(iv[1])}]"
                     for label, iv in (("P50", d.get("median_interval80")),
                                       ("P99", d.get("p99_interval80")))
                     if iv and None not in iv]
            if cells:
                parts.append(f"{name} " + ", ".join(cells))
        if parts:
            lines.append(f"  {rate:g} req/s: " + "; ".join(parts))
    return lines


def model_error_cells_80(latency_json: dict[str, Any]) -> dict[str, str]:
    """Per metric key, its mean's and P99's nominal 80% model-error intervals as one table
    cell: 'mean [25.7, 32.2], P99 [42.5, 77.6]' (only the metrics that carry them)."""
    cells = {}
    for m in METRICS:
        d = latency_json.get(m) or {}
        parts = [f"{name} [{fmt(iv[0])}, {fmt(iv[1])}]"
                 for name, iv in (("mean", d.get("mean_interval80")),
                                  ("P99", d.get("p99_interval80")))
                 if iv and None not in iv]
        if parts:
            cells[m] = ", ".join(parts)
    return cells


def model_error_lines(latency_json: dict[str, Any]) -> list[str]:
    """Text lines: 'TTFT (ms): mean 27.8 model error 80%: [25.7, 30.9]; P50 ...'."""
    names = {"mean": "mean", "median": "P50", "p90": "P90", "p99": "P99"}
    lines = []
    for m in METRICS:
        d = latency_json.get(m)
        if not d or "interval_source" not in d:
            continue
        parts = []
        for stat in STATS:
            iv = d.get(f"{stat}_interval80")
            v = d.get("mean") if stat == "mean" else \
                (d.get("percentiles") or {}).get("p50" if stat == "median" else stat, {})
            v = v.get("value") if isinstance(v, dict) else v
            if iv and None not in iv and v is not None:
                parts.append(f"{names[stat]} {fmt(v)} model error 80%: "
                             f"[{fmt(iv[0])}, {fmt(iv[1])}]")
        if parts:
            lines.append(f"  {d['label']} ({d['unit']}): " + "; ".join(parts))
    return lines
