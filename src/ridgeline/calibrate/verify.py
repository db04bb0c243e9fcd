"""Predicted vs measured: replay a measured trace through the simulator with a profile.

For each trace (any format `analyze` reads): the requests' prompt and output lengths are
replayed through `ridgeline.sim.event_loop.simulate` with the profile as the step-time model and
its scheduling as the engine config. A closed-loop trace (the header says so, or its sends
follow its replies' ends) is replayed as its users by default, each sending when its
previous reply ended in the simulation (`calibrate/closed_loop.py`); otherwise, or with
`loop="open"`, the measured send times are the schedule. Both traces go through the one
metrics implementation (`analyze`); per metric the error is (predicted - measured) /
measured and `in_ci` says whether the prediction lies inside the measurement's own
bootstrap 95% CI. Each point's miss is split into queueing, prefill, decode and overhead
(`calibrate/explain.py`), naming the component that differs most.

>>> parse_bounds(["tpot_p50=10%", "ttft_p90=0.2"])
{'tpot_p50': 0.1, 'ttft_p90': 0.2}
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.calibrate.explain import explain, replay_measured
from ridgeline.calibrate.slot_state import (
    same_step_s_of,
    trace_requests,
    trace_start_unix_s,
)
from ridgeline.errors import RidgelineError
from ridgeline.metrics.analysis import analyze
from ridgeline.sim.slots import replay_requests
from ridgeline.trace.importers import load_trace
from ridgeline.trace.schema import TraceHeader
from ridgeline.trace.table import STATUS_CODE

METRICS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms", "itl": "itl_ms"}
DEFAULT_METRICS = ("ttft_p50", "tpot_p50", "e2e_p50")


def parse_bounds(items: list[str] | None) -> dict[str, float]:
    """`metric_pXX=10%` (or a fraction) -> {metric_pXX: 0.10}."""
    out: dict[str, float] = {}
    for item in items or []:
        key, sep, val = item.partition("=")
        key = key.strip()
        name, _, pct = key.partition("_p")
        ok = bool(sep) and name in METRICS and pct.replace(".", "", 1).isdigit()
        try:
            v = float(val.strip().rstrip("%")) / (100.0 if val.strip().endswith("%") else 1.0)
        except ValueError:
            ok = False
        if not ok or not (v > 0 and math.isfinite(v)):
            raise RidgelineError(f"--bound: got {item!r}; allowed: METRIC_pQ=PCT with METRIC "
                                 f"in {', '.join(METRICS)}, e.g. tpot_p50=10%")
        out[key] = v
    return out


@dataclass
class VerifyRow:
    point: str
    metric: str
    predicted: float
    measured: float
    ci_low: float
    ci_high: float
    error: float
    in_ci: bool
    bound: float | None = None
    within_bound: bool | None = None


@dataclass
class PointLoad:
    """How loaded the engine was at one point, predicted vs measured: time averages over the
    point's span (first send to last completion) of the requests in flight (sent, not yet
    complete) and of the requests decoding (first to last output event), i.e. the mean
    decode batch. A prediction that is too fast shows fewer of both (docs/calibration.md)."""

    point: str
    in_flight_predicted: float
    in_flight_measured: float
    decoding_predicted: float
    decoding_measured: float


@dataclass
class PointSlotOrder:
    """llama-server's LRU slot order a point was predicted from (slot-model profiles), and
    where that order came from."""

    point: str
    order: list[int]
    source: str

    def line(self) -> str:
        return f"{self.point}: slot order {' '.join(map(str, self.order))} ({self.source})"


@dataclass
class VerifyReport:
    rows: list[VerifyRow] = field(default_factory=list)
    loads: list[PointLoad] = field(default_factory=list)
    slot_orders: list[PointSlotOrder] = field(default_factory=list)
    bounds: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # Per point: how it was replayed (`ReplayPlan.to_dict`) and its miss by component.
    replays: list[dict[str, Any]] = field(default_factory=list)
    decompositions: list[tuple[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(r.within_bound is False for r in self.rows)

    def median_abs_error(self, metric: str) -> float:
        errs = [abs(r.error) for r in self.rows if r.metric == metric and
                math.isfinite(r.error)]
        return float(np.median(errs)) if errs else math.nan

    def summary_lines(self) -> list[str]:
        metrics = list(dict.fromkeys(r.metric for r in self.rows))
        out = [f"median |error| {m}: {self.median_abs_error(m):.1%}" for m in metrics]
        bad = [r for r in self.rows if r.within_bound is False]
        if self.bounds:
            out.append("bounds exceeded: " + ", ".join(f"{r.point} {r.metric} "
                                                        f"{r.error:+.1%}" for r in bad)
                       if bad else "all bounds met")
        out += [f"warning: {w}" for w in self.warnings]
        return out

    def to_dict(self) -> dict[str, Any]:
        def clean(x: Any) -> Any:
            return None if isinstance(x, float) and not math.isfinite(x) else x

        metrics = list(dict.fromkeys(r.metric for r in self.rows))
        return {"rows": [{k: clean(v) for k, v in asdict(r).items()} for r in self.rows],
                "loads": [{k: clean(v) for k, v in asdict(x).items()} for x in self.loads],
                "slot_orders": [asdict(x) for x in self.slot_orders],
                "bounds": self.bounds, "failed": self.failed, "warnings": self.warnings,
                "median_abs_error": {m: clean(self.median_abs_error(m)) for m in metrics},
                "replay": self.replays,
                "decomposition": [{"point": p, **d.to_dict()} for p, d in self.decompositions]}


def point_label(trace: Any) -> str:
    load = trace.header.load or {}
    pattern = str(load.get("pattern", ""))
    if pattern.startswith("closed"):
        return f"closed c={load.get('concurrency')}"
    rate = load.get("rate_req_s") or load.get("rate")
    if rate:
        return f"{load.get('arrival', load.get('kind', 'open'))} {float(rate):g} req/s"
    return Path(trace.path or "trace").stem


def occupancy(trace: Any) -> tuple[float, float]:
    """(mean requests in flight, mean requests decoding) of a trace's successful requests,
    time-averaged over [first send, last completion]; NaN when it has no span."""
    ok = np.flatnonzero((trace.status == STATUS_CODE["ok"]) & (trace.event_counts > 0))
    if ok.size == 0:
        return math.nan, math.nan
    first = trace.event_times_s[trace.event_offsets[ok]]
    last = trace.event_times_s[trace.event_offsets[ok + 1] - 1]
    sent = trace.sent_s[ok]
    end = np.where(np.isfinite(trace.end_s[ok]), trace.end_s[ok], last)
    span = float(np.nanmax(end) - np.nanmin(sent))
    if not span > 0:
        return math.nan, math.nan
    in_flight = float(np.nansum(end - sent)) / span
    decoding = float(np.nansum(last - first)) / span
    return in_flight, decoding


def peak_in_flight(trace: Any) -> int:
    """Most successful requests in flight at once (sent, not yet complete) in a trace: the
    concurrency the measured server was under. A request ending when another is sent is
    counted out first."""

    ok = np.flatnonzero(trace.status == STATUS_CODE["ok"])
    if ok.size == 0:
        return 0
    sent = trace.sent_s[ok]
    end = trace.end_s[ok].copy()
    has_events = trace.event_counts[ok] > 0
    last = np.full(ok.size, np.nan)
    last[has_events] = trace.event_times_s[trace.event_offsets[ok[has_events] + 1] - 1]
    end = np.where(np.isfinite(end), end, last)
    keep = np.isfinite(sent) & np.isfinite(end)
    if not np.any(keep):
        return 0
    times = np.concatenate([end[keep], sent[keep]])
    steps = np.concatenate([-np.ones(int(keep.sum())), np.ones(int(keep.sum()))])
    order = np.lexsort((steps, times))      # at equal times the -1 (an end) comes first
    return int(np.max(np.cumsum(steps[order])))


def slots_exceeded_line(label: str, concurrency: int, slots: int) -> str | None:
    """The line saying a point ran above the profile's slots, or None when it did not."""
    if concurrency <= slots:
        return None
    return (f"{label}: measured concurrency {concurrency} exceeds the profile's {slots} "
            "slots: the profile was calibrated for another server or setting (or the "
            f"server queued this load); predictions beyond the slots queue: requests above "
            f"{slots} wait in the simulated queue, which dominates this point's errors")


def _pct(analysis: Any, key: str, q: str) -> tuple[float, float, float]:
    d = analysis.latency.get(key)
    if d is None or d.unavailable or q not in d.percentiles:
        return math.nan, math.nan, math.nan
    p = d.percentiles[q]
    return float(p.value), float(p.ci_low), float(p.ci_high)


def _stat(analysis: Any, metric: str) -> tuple[float, float, float]:
    """(value, CI low, CI high) of `metric`: METRIC_pQ (a percentile) or METRIC_mean."""
    name, _, stat = metric.rpartition("_")
    if stat == "mean":
        d = analysis.latency.get(METRICS[name])
        if d is None or d.unavailable:
            return math.nan, math.nan, math.nan
        return float(d.mean), float(d.mean_ci[0]), float(d.mean_ci[1])
    return _pct(analysis, METRICS[name], stat)


def verify_trace(trace: Any, profile: Any, metrics: list[str], bounds: dict[str, float],
                 seed: int = 0, config: Any = None, closed_loop: bool = False,
                 loads: list[PointLoad] | None = None, loop: str = "auto",
                 report: VerifyReport | None = None) -> list[VerifyRow]:
    """Rows for one trace; `profile` is any step-time model (`config`: its EngineConfig,
    default the profile's own scheduling). `loop`: auto (a closed loop replayed as its
    users), closed or open (`closed_loop=True` is loop="closed"). With `report`, the replay
    and the miss's decomposition go there."""
    rep = replay_measured(trace, profile,
                          config if config is not None else profile.engine_config(),
                          "closed" if closed_loop else loop, peak_in_flight(trace))
    res = rep.result
    sim_header = TraceHeader(source="simulate", clock="virtual", engine="ridgeline-sim",
                             load=dict(trace.header.load or {}))
    sim_trace = res.to_trace(sim_header)
    predicted = analyze(sim_trace, seed=seed)
    measured = analyze(trace, seed=seed)
    label = point_label(trace)
    if loads is not None:
        (fp, dp), (fm, dm) = occupancy(sim_trace), occupancy(trace)
        loads.append(PointLoad(label, fp, fm, dp, dm))
    if report is not None:
        report.replays.append({"point": label, **rep.plan.to_dict()})
        report.decompositions.append((label, explain(trace, rep)))
    rows = []
    for m in metrics:
        pv, _, _ = _stat(predicted, m)
        mv, lo, hi = _stat(measured, m)
        err = (pv - mv) / mv if mv else math.nan
        bound = bounds.get(m)
        rows.append(VerifyRow(point=label, metric=m, predicted=pv, measured=mv, ci_low=lo,
                              ci_high=hi, error=err, in_ci=bool(lo <= pv <= hi),
                              bound=bound,
                              within_bound=None if bound is None else bool(abs(err) <= bound)))
    return rows


def verify(trace_paths: list[str], profile: Any, bounds: dict[str, float] | None = None,
           fmt: str = "auto", seed: int = 0, config: Any = None,
           closed_loop: bool = False,
           slot_orders: list[list[int] | None] | None = None,
           start_slot_order: list[int] | str | None = None,
           loop: str = "auto", metrics: list[str] | None = None) -> VerifyReport:
    """Predicted vs measured for every trace (one load point each), per metric: the
    DEFAULT_METRICS and the bounds' (`metrics`: these instead, METRIC_pQ or METRIC_mean).

    A slot-model profile (`scheduling.slot_graphs`) needs llama-server's LRU slot order at
    each point's start. `slot_orders`: per trace, read elsewhere (the server's log; None: a
    fresh server). Otherwise the order is chained: the first trace starts from
    `start_slot_order` (a list, or "fresh": a restarted server), else from the order the
    profile recorded after calibration, else fresh; the traces are taken in order of their
    wall-clock start (in the order given when one has no wall clock), and after each the
    order advances by replaying that trace's measured send and end times
    (`calibrate.slot_state`): the server's state, not the latencies being predicted."""
    bounds = bounds or {}
    metrics = list(dict.fromkeys([*(metrics or DEFAULT_METRICS), *bounds]))
    report = VerifyReport(bounds=bounds)
    traces = [load_trace(path, fmt) for path in trace_paths]
    slot_model = bool(getattr(getattr(profile, "scheduling", None), "slot_graphs", False))
    if slot_model and slot_orders is None:
        traces, starts = chain_slot_orders(traces, profile, start_slot_order, report.warnings)
    else:
        starts = [(None if slot_orders is None or i >= len(slot_orders) else slot_orders[i],
                   "given (server log)" if slot_orders is not None and i < len(slot_orders)
                   and slot_orders[i] is not None else "fresh server")
                  for i in range(len(traces))]
    for trace, (order, source) in zip(traces, starts, strict=True):
        prof = profile.with_slot_order(order) if slot_model else profile
        if slot_model:
            n = profile.scheduling.max_num_seqs
            report.slot_orders.append(PointSlotOrder(
                point_label(trace), list(order) if order is not None
                else list(range(n - 1, -1, -1)), source))
        report.rows.extend(verify_trace(trace, prof, metrics, bounds, seed, config,
                                        closed_loop, report.loads, loop, report))
        sched = config if config is not None else getattr(profile, "scheduling", None)
        slots = getattr(sched, "max_num_seqs", None)
        if isinstance(slots, int):
            over = slots_exceeded_line(point_label(trace), peak_in_flight(trace), slots)
            if over:
                report.warnings.append(over)
    if getattr(profile, "extrapolated_steps", 0):
        report.warnings.append(profile.assumptions()[-1])
    return report


def chain_slot_orders(traces: list[Any], profile: Any, start: list[int] | str | None,
                      warnings: list[str]) -> tuple[list[Any], list[tuple[list[int] | None, str]]]:
    """The traces in the order they ran, and the (slot order, its source) each starts from
    (see `verify`)."""
    sched = profile.scheduling
    n = sched.max_num_seqs
    starts_unix = [trace_start_unix_s(t) for t in traces]
    if all(s is not None for s in starts_unix):
        idx = sorted(range(len(traces)), key=lambda i: float(starts_unix[i] or 0.0))
        if idx != list(range(len(traces))):
            warnings.append("slot orders: traces taken in order of their start times: "
                            + ", ".join(point_label(traces[i]) for i in idx))
    else:
        idx = list(range(len(traces)))
        if len(traces) > 1:
            warnings.append("slot orders: a trace has no wall-clock start "
                            "(start_time_unix_s); chained in the order given")
    order: list[int] | None
    if isinstance(start, str):          # "fresh": a restarted server
        order, source = None, "fresh server (--slot-order fresh)"
    elif start is not None:
        order, source = list(start), "--slot-order"
    elif sched.slot_order_after_calibration is not None:
        order = list(sched.slot_order_after_calibration)
        source = "after calibration, " + (sched.slot_order_provenance or "recorded")
        at, first = sched.slot_order_at_unix_s, starts_unix[idx[0]] if idx else None
        if at is not None and first is not None and first < at:
            warnings.append(f"slot orders: {point_label(traces[idx[0]])} started "
                            f"{at - first:.3g} s before calibration ended; the order "
                            "calibration left is not the one it met")
    else:
        order, source = None, "fresh server (the profile records no slot order)"
    out: list[tuple[list[int] | None, str]] = []
    step_s = same_step_s_of(profile)
    for i in idx:
        out.append((order, source))
        order = replay_requests(trace_requests(traces[i]), n, order, step_s).order
        source = f"after {point_label(traces[i])}, replayed from its measured send/end times"
    return [traces[i] for i in idx], out


__all__ = ["DEFAULT_METRICS", "METRICS", "PointLoad", "PointSlotOrder", "VerifyReport",
           "VerifyRow", "chain_slot_orders", "occupancy", "parse_bounds", "peak_in_flight",
           "point_label", "slots_exceeded_line", "verify", "verify_trace"]
