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
"""

from __future__ import annotations

from typing import Any

from ridgeline.metrics.prediction_interval import (
    annotate_latency,
    distance_from_data,
    regime_of,
    step_scales,
)

METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
STATS = ("mean", "median", "p90", "p99")
RESCALABLE_ARRIVALS = ("poisson", "constant", "gamma")


def _stats(latency: dict[str, Any], scale: float) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for m in METRICS:
        d = latency.get(m)
        if d is None or d.unavailable:
            continue
        vals = {"mean": d.mean}
        for stat, key in (("median", "p50"), ("p90", "p90"), ("p99", "p99")):
            p = d.percentiles.get(key)
            if p is not None:
                vals[stat] = p.value
        out[m] = {k: v * scale for k, v in vals.items()}
    return out


def run_regime(latency: dict[str, Any]) -> str:
    """The run's regime from its predicted TTFT mean and P99 and ITL."""
    t, i = latency.get("ttft_ms"), latency.get("itl_ms")
    if t is None or i is None or t.unavailable or i.unavailable or "p99" not in t.percentiles:
        return "below_knee"
    return regime_of(t.mean, t.percentiles["p99"].value, i.mean)


def add_model_error(run: Any, latency_json: dict[str, Any]) -> None:
    """Annotate `latency_json` (the run's analysis `to_dict()["latency"]`) in place."""
    from ridgeline.sim.scenario import run_scenario

    sc = run.scenario
    distance = distance_from_data(sc.hardware, sc.engine, sc.model)
    regime = run_regime(run.analysis.latency)
    scales = step_scales(regime, distance)
    kind = sc.arrival.split(":", 1)[0]
    closed = sc.concurrency is not None
    propagated: dict[str, dict[str, dict[int, tuple[float, float]]]] = {}
    how = "not propagated (arrival process cannot be time-rescaled)"
    if closed and str(sc.think_time).strip() in ("0", "0.0", ""):
        how = "closed loop without think time: latencies scale with the step time"
        reruns = {lv: (_stats(run.analysis.latency, a), _stats(run.analysis.latency, b))
                  for lv, (a, b) in scales.items()}
    elif not closed and run.rate_req_s and kind in RESCALABLE_ARRIVALS:
        how = "reruns at rate x s, latencies x s, s at the step-time residual's interval ends"
        cache: dict[float, dict[str, dict[str, float]]] = {}

        def at(s: float) -> dict[str, dict[str, float]]:
            if s not in cache:
                r = run_scenario(sc, run.rate_req_s * s, built=run.built, keep_samples=False)
                cache[s] = _stats(r.analysis.latency, s)
            return cache[s]

        reruns = {lv: (at(a), at(b)) for lv, (a, b) in scales.items()}
    else:
        reruns = {}
    for lv, (lo_run, hi_run) in reruns.items():
        for m, stats in lo_run.items():
            for stat, v_lo in stats.items():
                v_hi = hi_run.get(m, {}).get(stat)
                if v_hi is not None:
                    propagated.setdefault(m, {}).setdefault(stat, {})[lv] = (v_lo, v_hi)
    annotate_latency(latency_json, regime, distance, propagated)
    for m in METRICS:
        d = latency_json.get(m)
        if d and "interval_source" in d:
            d["interval_source"]["step_time_propagation"] = how
            d["interval_source"]["step_time_scales"] = {
                str(lv): [round(a, 4), round(b, 4)] for lv, (a, b) in scales.items()}
            d["interval_source"]["regime_predicted"] = regime


def model_error_lines(latency_json: dict[str, Any]) -> list[str]:
    """Text lines: 'TTFT (ms): mean 27.8 model error 80%: [25.7, 30.9]; P50 ...'."""
    from ridgeline.metrics.render import fmt

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
