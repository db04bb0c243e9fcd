"""`analyze`: every metric of a trace, with confidence intervals, in one result.

One implementation used by every command (analyze, compare, gate, simulate, bench).

>>> from ridgeline.trace.table import Trace
>>> t = Trace.from_records({"source": "doc"}, [
...     {"id": str(i), "sent_s": i * 0.5, "event_times_s": [i * 0.5 + 0.1, i * 0.5 + 0.2],
...      "end_s": i * 0.5 + 0.2, "output_tokens": 2} for i in range(20)])
>>> r = analyze(t, window=(0.0, 10.0))
>>> round(r.latency["ttft_ms"].median, 6), round(r.throughput.output_tok_s, 6)
(100.0, 4.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.jsonsafe import finite_or_none
from ridgeline.metrics.distribution import (
    STD_LEAF,
    Distribution,
    sort_in_place,
    sorted_finite,
    summarize_sorted,
)
from ridgeline.metrics.per_request import RequestMetrics, request_metrics, token_sum_dtype
from ridgeline.metrics.select import select_finite
from ridgeline.metrics.slo import SLO, parse_slo
from ridgeline.theory.stats import (
    DEFAULT_BOOTSTRAP_DRAWS,
    MIN_TAIL_SAMPLES,
    RequestSample,
    _counts_at_most,
    bootstrap_fraction_draws,
    ci_from_draws,
    min_samples_for_percentile,
)
from ridgeline.trace.table import STATUSES, Trace

LITTLE_TOLERANCE = 0.10  # |L / (λW) − 1| above this is flagged
# Overloaded: more than this fraction of the offered requests is not completed inside the
# arrival window (a stationary queue completes what arrives, up to edge effects of about
# W / window), and the number in system grew beyond its noise (OVERLOAD_SIGMAS · sqrt(L+1)).
OVERLOAD_DEFICIT = 0.10
OVERLOAD_SIGMAS = 3.0
CONCURRENCY_BINS = 60
MIN_AUTO_WINDOW_REQUESTS = 20


@dataclass
class Window:
    start_s: float
    end_s: float
    how: str  # "given", "auto: ...", "whole run", "source duration"

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self) -> dict[str, Any]:
        return {"start_s": finite_or_none(self.start_s), "end_s": finite_or_none(self.end_s),
                "duration_s": finite_or_none(self.duration_s), "how": self.how}


@dataclass
class Throughput:
    requests_s: float = math.nan
    output_tok_s: float = math.nan
    total_tok_s: float = math.nan
    completed_in_window: int = 0
    output_tokens_in_window: float = math.nan
    prompt_tokens_in_window: float = math.nan
    token_counting: str = "events inside the window"
    unavailable: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests_per_s": finite_or_none(self.requests_s),
            "output_tok_s": finite_or_none(self.output_tok_s),
            "total_tok_s": finite_or_none(self.total_tok_s),
            "completed_in_window": self.completed_in_window,
            "output_tokens_in_window": finite_or_none(self.output_tokens_in_window),
            "prompt_tokens_in_window": finite_or_none(self.prompt_tokens_in_window),
            "token_counting": self.token_counting,
            "unavailable": self.unavailable,
        }


@dataclass
class Concurrency:
    mean_in_flight: float = math.nan
    max_in_flight: int = 0
    series_t_s: list[float] = field(default_factory=list)
    series_in_flight: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mean_in_flight": finite_or_none(self.mean_in_flight),
            "max_in_flight": self.max_in_flight,
            "series": {"t_s": self.series_t_s, "mean_in_flight": self.series_in_flight},
        }


@dataclass
class LittleCheck:
    """Little's law over the ARRIVAL window (the measurement window cut at the last send):
    λ = arrivals per second in it, W = mean time in system of those arrivals (their whole
    stay, also after the window), L = time-averaged number in system over it (requests
    that arrived before it and those still in the system at its end count too). Over the
    whole run (first send to last end) L = λW holds by arithmetic, so that window is never
    used. The offered (arrival) and completed (departure) rates over the same window, and
    the growth of the number in system, tell an overloaded run from a stationary one."""

    l_in_flight: float = math.nan  # time-averaged number in system over the arrival window
    lambda_req_s: float = math.nan  # arrivals per second in the arrival window (offered)
    w_s: float = math.nan  # mean time in system of those arrivals
    ratio: float = math.nan  # L / (λ·W)
    ok: bool | None = None  # True only when "consistent"
    status: str = "unavailable"  # "consistent" | "inconsistent" | "overloaded" | "unavailable"
    completed_req_s: float = math.nan  # departures per second in the arrival window
    in_system_start: int = 0  # number in system at the start of the arrival window
    in_system_end: int = 0  # ... and at its end
    window_start_s: float = math.nan
    window_end_s: float = math.nan
    note: str = ""
    # Inconsistent, but the arrival window is shorter than 10 mean latencies: requests
    # straddling its edges can explain the gap (said in the note, not shouted).
    edge_effect: bool = False

    @property
    def backlog_growth(self) -> int:
        return self.in_system_end - self.in_system_start

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "arrival_window": {"start_s": finite_or_none(self.window_start_s),
                               "end_s": finite_or_none(self.window_end_s)},
            "L_in_flight": finite_or_none(self.l_in_flight),
            "lambda_req_s": finite_or_none(self.lambda_req_s),
            "W_s": finite_or_none(self.w_s),
            "lambda_W": finite_or_none(self.lambda_req_s * self.w_s),
            "ratio_L_over_lambda_W": finite_or_none(self.ratio),
            "offered_req_s": finite_or_none(self.lambda_req_s),
            "completed_req_s": finite_or_none(self.completed_req_s),
            "in_system_start": self.in_system_start,
            "in_system_end": self.in_system_end,
            "ok": self.ok,
            "note": self.note,
        }


@dataclass
class Goodput:
    slos: list[str] = field(default_factory=list)
    good_requests: int = 0
    judged_requests: int = 0
    requests_s: float = math.nan
    output_tok_s: float = math.nan
    attainment: float = math.nan
    attainment_ci: tuple[float, float] = (math.nan, math.nan)
    unavailable: str | None = None
    # Per judged request in send order, whether it met every SLO (not serialized): for an
    # interval that allows for correlated neighbours (ridgeline.plan.recheck).
    good_in_send_order: np.ndarray | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "slos": self.slos,
            "good_requests": self.good_requests,
            "judged_requests": self.judged_requests,
            "requests_per_s": finite_or_none(self.requests_s),
            "output_tok_s": finite_or_none(self.output_tok_s),
            "attainment": finite_or_none(self.attainment),
            "attainment_ci95": [finite_or_none(x) for x in self.attainment_ci],
            "unavailable": self.unavailable,
        }


@dataclass
class AnalysisResult:
    """Everything `analyze` computes. `to_dict()` is JSON-safe with units in the keys."""

    source: dict[str, Any]
    counts: dict[str, Any]
    window: Window | None
    latency: dict[str, Distribution]
    throughput: Throughput
    concurrency: Concurrency
    little: LittleCheck
    goodput: Goodput | None
    definitions: dict[str, str]
    warnings: list[str]
    seed: int
    # Per-request samples behind `latency` (not serialized): compare and gate use them.
    samples: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    # The same samples grouped by request in send order, for the block bootstrap.
    request_samples: dict[str, RequestSample] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "counts": self.counts,
            "window": self.window.to_dict() if self.window else None,
            "latency": {k: d.to_dict() for k, d in self.latency.items()},
            "throughput": self.throughput.to_dict(),
            "concurrency": self.concurrency.to_dict(),
            "littles_law": self.little.to_dict(),
            "goodput": self.goodput.to_dict() if self.goodput else None,
            "definitions": self.definitions,
            "percentile_method": "numpy linear (Hyndman-Fan type 7)",
            "confidence_intervals": (
                f"95% percentile bootstrap, {DEFAULT_BOOTSTRAP_DRAWS} draws, seed {self.seed}: "
                "circular blocks of whole requests in send order (ITL gaps stay with their "
                "request; block length by the Politis-White rule), see docs/metrics.md"
            ),
            "warnings": self.warnings,
        }


DEFINITIONS = {
    "ttft_ms": "first output event time - sent_s (client send time), successful requests",
    "tpot_ms": "(t_last_event - t_first_event) / (N - 1), N = output tokens; N > 1 and >= 2 "
               "events; one value per request",
    "itl_ms": "gap between consecutive output events of a request, pooled over all events "
              "(vLLM's 'ITL'); one value per gap",
    "itl_per_token_ms": "each event gap divided by the tokens in the event that ends it; one "
                        "value per gap",
    "e2e_ms": "end_s - sent_s",
    "queue_ms": "sent_s - scheduled_s: how late the client sent vs the load pattern",
    "decode_rate_tok_s": "(N - 1) / (t_last_event - t_first_event) per request = 1/TPOT",
    "requests_per_s": "successful requests that end inside the window / window duration",
    "output_tok_s": "output tokens of events inside the window (any final status) / window "
                    "duration",
    "total_tok_s": "(output tokens in the window + prompt tokens of requests whose first event "
                   "is in the window) / window duration",
}


def _parse_window(window: tuple[float, float] | str | None) -> tuple[float, float] | str | None:
    if window is None or isinstance(window, tuple):
        return window
    text = window.strip()
    if text in ("auto", ""):
        return None
    if text in ("all", "whole"):
        return "all"
    parts = text.split(":")
    if len(parts) != 2:
        raise RidgelineError(f"--window: got {window!r}; allowed: START:END in seconds, "
                             "'auto' or 'all'")
    try:
        start = float(parts[0]) if parts[0] else -math.inf
        end = float(parts[1]) if parts[1] else math.inf
    except ValueError:
        raise RidgelineError(f"--window: got {window!r}; START and END must be seconds") from None
    # Bounded as trace times are (1e10 s): past that the series edges overflow to inf.
    if any(p and not (math.isfinite(v) and abs(v) <= 1e10)
           for p, v in zip(parts, (start, end), strict=True)):
        raise RidgelineError(f"--window: got {window!r}; allowed: finite seconds of at most "
                             "1e10 in size (leave one out for an open end)")
    if not end > start:
        raise RidgelineError(f"--window: got {window!r}; END must be after START")
    return (start, end)


def choose_window(trace: Trace, rm: RequestMetrics) -> Window:
    """The steady part of the run: warm-up and cool-down cut off.

    Start: first send + the median E2E (about one request lifetime: the time the number in
    flight needs to fill up). End: the last send (after it nothing arrives, the system only
    drains). When that leaves less than a quarter of the run (e.g. every request sent at
    t=0), or fewer than half of the sends (or 20), the whole run is used instead: first
    send to last end.
    """
    sent = trace.sent_s
    end = rm.end_s[np.isfinite(rm.end_s)]
    first_send, last_send = float(sent.min()), float(sent.max())
    last_end = float(end.max()) if end.size else last_send
    span = max(last_end - first_send, 0.0)
    e2e_ok = rm.e2e_s[rm.ok & np.isfinite(rm.e2e_s)]
    warm_s = float(np.median(e2e_ok)) if e2e_ok.size else 0.0
    start, stop = first_send + warm_s, last_send
    inside = int(((sent >= start) & (sent <= stop)).sum())
    if span > 0 and stop - start >= 0.25 * span and inside >= max(
        MIN_AUTO_WINDOW_REQUESTS, 0.5 * sent.size
    ):
        return Window(start, stop, "auto: first send + median E2E (warm-up) to last send "
                                   "(cool-down cut)")
    if span <= 0:
        return Window(first_send, first_send + 1e-9, "whole run (zero length)")
    return Window(first_send, last_end, "whole run: first send to last end (no steady "
                                        "part long enough to cut warm-up/cool-down)")


def _in_window(t: np.ndarray, w: Window) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return (t >= w.start_s) & (t < w.end_s) if math.isfinite(w.end_s) else (t >= w.start_s)


def _in_window_closed(t: np.ndarray, w: Window) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return (t >= w.start_s) & (t <= w.end_s)


def _concurrency(sent: np.ndarray, end: np.ndarray, w: Window) -> Concurrency:
    """In-flight count over time, by a sweep over send (+1) and end (−1) times."""
    ok = np.isfinite(end)
    times = np.concatenate([sent[ok], end[ok]])
    delta = np.concatenate([np.ones(ok.sum()), -np.ones(ok.sum())])
    order = np.argsort(times, kind="stable")
    times, delta = times[order], delta[order]
    level = np.cumsum(delta)  # in flight just after each change
    # Area under the step function at each change point.
    area = np.concatenate(([0.0], np.cumsum(level[:-1] * np.diff(times)))) if times.size else \
        np.zeros(0)
    c = Concurrency()
    d = w.duration_s
    if times.size == 0 or not (d > 0):
        return c

    def area_at(t: np.ndarray) -> np.ndarray:
        # Piecewise linear between change points (the level is constant between them).
        idx = np.searchsorted(times, t, side="right") - 1
        base = np.where(idx >= 0, area[np.clip(idx, 0, None)], 0.0)
        lvl = np.where(idx >= 0, level[np.clip(idx, 0, None)], 0.0)
        t0 = np.where(idx >= 0, times[np.clip(idx, 0, None)], t)
        return base + lvl * (t - t0)

    edges = np.linspace(w.start_s, w.end_s, CONCURRENCY_BINS + 1)
    a = area_at(edges)
    c.mean_in_flight = float((a[-1] - a[0]) / d)
    c.series_t_s = [float(x) for x in (edges[:-1] + edges[1:]) / 2]
    c.series_in_flight = [float(x) for x in np.diff(a) / np.diff(edges)]
    inside = (times >= w.start_s) & (times < w.end_s)
    idx0 = np.searchsorted(times, w.start_s, side="right") - 1
    at_start = level[idx0] if idx0 >= 0 else 0.0
    c.max_in_flight = int(max(at_start, level[inside].max() if inside.any() else 0.0))
    return c


def _in_system(sent: np.ndarray, end: np.ndarray, t: float) -> int:
    """Requests in the system at time t (sent <= t < end)."""
    return int(np.count_nonzero((sent <= t) & (end > t)))


def _little(sent: np.ndarray, end_s: np.ndarray, w: Window) -> LittleCheck:
    """Little's law and the overload test over the arrival window; see `LittleCheck`."""
    lc = LittleCheck()
    finite_end = np.isfinite(end_s)
    # A request with no end is still in the system when the trace stops: its stay is
    # censored at the last time the trace knows (W is then a lower bound).
    t_last = float(max(np.nanmax(end_s) if finite_end.any() else -math.inf,
                       float(sent.max())))
    end = np.where(finite_end, end_s, t_last)
    a0 = w.start_s
    a1 = min(w.end_s, float(sent.max()))
    lc.window_start_s, lc.window_end_s = a0, a1
    d = a1 - a0
    if not (d > 0):
        lc.note = ("unavailable: no arrival window (every request in the window was sent at "
                   "the same time; L = λW over the whole run holds by arithmetic)")
        return lc
    arrive = (sent >= a0) & (sent <= a1)
    n_arr = int(arrive.sum())
    if n_arr == 0:
        lc.note = "unavailable: no arrivals inside the window"
        return lc
    area = float(np.clip(np.minimum(end, a1) - np.maximum(sent, a0), 0.0, None).sum())
    lc.l_in_flight = area / d
    lc.lambda_req_s = n_arr / d
    lc.w_s = float(np.mean(end[arrive] - sent[arrive]))
    lc.completed_req_s = float(np.count_nonzero((end >= a0) & (end <= a1))) / d
    lc.in_system_start = _in_system(sent, end, a0)
    lc.in_system_end = _in_system(sent, end, a1)
    lw = lc.lambda_req_s * lc.w_s
    lc.ratio = lc.l_in_flight / lw if lw > 0 else math.nan
    deficit = 1.0 - lc.completed_req_s / lc.lambda_req_s
    # The deficit a server shows from the window's edge alone: a request sent in the last
    # `stay` seconds of the window cannot finish inside it. It is allowed for only while
    # no queue builds (W within twice the shortest stay): an overload's stays grow with
    # its queue, a short run's do not (a window shorter than one stay judges nothing).
    min_stay_s = float(np.min(end[arrive] - sent[arrive]))
    edge_deficit = min_stay_s / d if lc.w_s <= 2.0 * min_stay_s else 0.0
    grew = lc.backlog_growth > OVERLOAD_SIGMAS * math.sqrt(lc.l_in_flight + 1.0)
    censored = int(np.count_nonzero(arrive & ~finite_end))
    if deficit - edge_deficit > OVERLOAD_DEFICIT and grew:
        lc.status, lc.ok = "overloaded", False
        lc.note = (f"overloaded: offered {lc.lambda_req_s:.4g} req/s, completed "
                   f"{lc.completed_req_s:.4g} req/s ({deficit:.0%} not served in the arrival "
                   f"window); the number in system grew from {lc.in_system_start} to "
                   f"{lc.in_system_end}: the queue grows, latencies depend on the run length "
                   f"(L/(λW) = {lc.ratio:.3f})")
    elif not math.isfinite(lc.ratio):
        lc.note = "unavailable: zero time in system"
        return lc
    elif abs(lc.ratio - 1.0) <= LITTLE_TOLERANCE:
        lc.status, lc.ok = "consistent", True
        lc.note = f"L/(λW) = {lc.ratio:.3f}: consistent"
    else:
        lc.status, lc.ok = "inconsistent", False
        edge = lc.edge_effect = d < 10 * lc.w_s
        lc.note = (
            f"L/(λW) = {lc.ratio:.3f}: off by more than {LITTLE_TOLERANCE:.0%}; "
            + ("the arrival window is shorter than 10 mean latencies, so edge effects may "
               "explain it" if edge else "the trace is broken or the run was not stationary")
        )
    if censored:
        lc.note += f" ({censored} arrivals never ended: their time in system is censored)"
    return lc


def analyze(
    trace: Trace,
    slos: tuple[SLO | str, ...] | list[SLO | str] = (),
    window: tuple[float, float] | str | None = None,
    seed: int = 0,
    keep_samples: bool = True,
    bootstrap: bool = True,
    latency_keys: tuple[str, ...] | None = None,
) -> AnalysisResult:
    """Compute every metric of `trace`.

    `window`: (start_s, end_s) on the trace clock, "START:END", "all", or None to choose
    the steady part automatically. `slos`: SLO objects or texts like "ttft_ms<=500".
    Bootstrap draws are seeded by `seed` (same seed, same CIs).
    `keep_samples=False`: the pooled ITL samples (one value per event) are left out of
    `samples` and `request_samples` (compare, gate and report need them; the numbers are
    the same either way), and `analyze` holds one event-sized array instead of three.
    `bootstrap=False`: no confidence intervals (NaN), the same point values; for callers
    that read only those (plan's screening runs), the draws being most of the cost.
    `latency_keys`: only these latency distributions (None: all); leaving out the pooled
    ITL ones saves their event-sized sorts.
    """
    slo_list = [s if isinstance(s, SLO) else parse_slo(s) for s in slos]
    header = trace.header
    warnings: list[str] = [f"trace: {w}" for w in trace.warnings]
    rm = request_metrics(trace)
    source = _source(trace, warnings)
    win = _window(trace, rm, window, warnings)
    # Latency population: successful requests sent inside the window (warm-up requests are
    # not representative); all of them when there is no usable window.
    if win is not None and header.has_send_times:
        measured = _in_window_closed(trace.sent_s, win)
    else:
        measured = np.ones(len(trace), dtype=bool)
    pop = rm.ok & measured
    counts = _counts(trace, rm, measured, pop, warnings)
    one_token = bool(header.has_event_tokens and (trace.event_tokens == 1).all())
    latency, samples, request_samples = _latency(trace, rm, pop, seed, keep_samples,
                                                 one_token, bootstrap, latency_keys)
    warnings.extend(_thin_tail_warnings(latency))
    thr, conc, little, window_tokens = _throughput(trace, rm, win, one_token, samples,
                                                   warnings)
    goodput: Goodput | None = None
    if slo_list:
        goodput = _goodput(trace, rm, slo_list, measured, win, seed, window_tokens,
                           bootstrap)
        if goodput.unavailable:
            warnings.append(f"goodput: {goodput.unavailable}")
    return AnalysisResult(
        source=source, counts=counts, window=win, latency=latency, throughput=thr,
        concurrency=conc, little=little, goodput=goodput, definitions=dict(DEFINITIONS),
        warnings=warnings, seed=seed, samples=samples, request_samples=request_samples,
    )


# ---- source ------------------------------------------------------------------------------

def _source(trace: Trace, warnings: list[str]) -> dict[str, Any]:
    """Where the trace came from (and its notes, also as warnings)."""
    header = trace.header
    source = {
        "path": trace.path,
        "source": header.source,
        "tool": header.tool,
        "tool_version": header.tool_version,
        "model": header.model,
        "hardware": header.hardware,
        "engine": header.engine,
        "engine_version": header.engine_version,
        "has_event_times": header.has_event_times,
        "has_event_tokens": header.has_event_tokens,
        "has_send_times": header.has_send_times,
        "ttft_reference": "sent_s (client send time); queue lag reported separately",
        "notes": list(header.notes),
    }
    for note in header.notes:
        warnings.append(f"source: {note}")
    return source


# ---- window ------------------------------------------------------------------------------

def _window(trace: Trace, rm: RequestMetrics, window: tuple[float, float] | str | None,
            warnings: list[str]) -> Window | None:
    """The measurement window: asked (`window`), the whole run, or chosen automatically."""
    header, n = trace.header, len(trace)
    win_arg = _parse_window(window)
    win: Window | None
    if n == 0:
        win = None
    elif not header.has_send_times:
        win = (Window(0.0, float(header.duration_s), "source-reported duration")
               if header.duration_s else None)
        if win is None:
            warnings.append("the source records no send times and no run duration: "
                            "throughput, concurrency and Little's law are unavailable")
        elif window is not None:
            warnings.append("--window ignored: the source records no send times")
    elif win_arg == "all":
        end_f = rm.end_s[np.isfinite(rm.end_s)]
        win = Window(float(trace.sent_s.min()),
                     float(end_f.max()) if end_f.size else float(trace.sent_s.max()),
                     "whole run (asked): first send to last end")
    elif isinstance(win_arg, tuple):
        end_f = rm.end_s[np.isfinite(rm.end_s)]
        s0 = win_arg[0] if math.isfinite(win_arg[0]) else float(trace.sent_s.min())
        s1 = win_arg[1] if math.isfinite(win_arg[1]) else (
            float(end_f.max()) if end_f.size else float(trace.sent_s.max()))
        win = Window(s0, s1, "given")
    else:
        win = choose_window(trace, rm)

    return win


# ---- counts ------------------------------------------------------------------------------

def _counts(trace: Trace, rm: RequestMetrics, measured: np.ndarray, pop: np.ndarray,
            warnings: list[str]) -> dict[str, Any]:
    """Requests by status and error kind, and who is in the latency population."""
    status_counts = {name: int((trace.status == i).sum()) for i, name in enumerate(STATUSES)}
    errors_by_kind: dict[str, int] = {}
    for i in np.flatnonzero(~rm.ok).tolist():
        kind = trace.error_kind[i] or STATUSES[int(trace.status[i])]
        errors_by_kind[kind] = errors_by_kind.get(kind, 0) + 1
    counts: dict[str, Any] = {
        "requests": len(trace),
        "by_status": status_counts,
        "successful": status_counts["ok"],
        "errors_by_kind": errors_by_kind,
        "sent_in_window": int(measured.sum()),
        "latency_population": int(pop.sum()),
        "excluded_outside_window": int((rm.ok & ~measured).sum()),
        "tpot_undefined_single_token": rm.tpot_single_token,
        "tpot_undefined_single_event": rm.tpot_single_event,
        "output_tokens_counted_from_events": rm.tokens_from_events,
    }
    if counts["excluded_outside_window"]:
        warnings.append(
            f"{counts['excluded_outside_window']} successful requests sent outside the "
            "measurement window are left out of the latency statistics"
        )
    if rm.tpot_single_token:
        warnings.append(f"TPOT undefined for {rm.tpot_single_token} successful requests "
                        "with N <= 1 output tokens (counted, not included)")
    if rm.tpot_single_event:
        warnings.append(f"TPOT undefined for {rm.tpot_single_event} successful requests "
                        "whose N > 1 tokens arrived in a single event (non-streaming?)")
    return counts


# ---- latency distributions ---------------------------------------------------------------

LATENCY_SPECS = [
    ("ttft_ms", "TTFT", "ms", DEFINITIONS["ttft_ms"]),
    ("tpot_ms", "TPOT (per request)", "ms", DEFINITIONS["tpot_ms"]),
    ("itl_ms", "ITL (pooled, per event)", "ms", DEFINITIONS["itl_ms"]),
    ("itl_per_token_ms", "ITL (pooled, per token)", "ms", DEFINITIONS["itl_per_token_ms"]),
    ("e2e_ms", "E2E", "ms", DEFINITIONS["e2e_ms"]),
    ("queue_ms", "Queue lag (sent - scheduled)", "ms", DEFINITIONS["queue_ms"]),
    ("decode_rate_tok_s", "Decode rate (per request)", "tok/s",
     DEFINITIONS["decode_rate_tok_s"]),
    ("output_tokens", "Output tokens", "tokens", "N per successful request"),
    ("prompt_tokens", "Prompt tokens", "tokens", "prompt length per successful request"),
]


def _pooled_itl(trace: Trace, pop: np.ndarray, gaps_per_req: np.ndarray,
                send_pop: np.ndarray | None
                ) -> tuple[dict[str, RequestSample], dict[str, np.ndarray]]:
    """The pooled ITL samples kept for compare, gate and report, per event and per token,
    with their per-request groupings."""
    header = trace.header
    # Tokens per event unknown: no per-token view, not a guess.
    itl_ms, itl_tok_ms = _itl_samples(trace, pop, per_token=header.has_event_tokens,
                                      keep_nan=True)
    itl_sample = _grouped_sample(itl_ms, gaps_per_req, send_pop)[0]
    request_samples = {
        "itl_ms": itl_sample,
        # One token per event: the same values, so the same sample (its per-request
        # sums and block length are then computed once for both metrics).
        "itl_per_token_ms": (itl_sample if itl_tok_ms is itl_ms else
                             _grouped_sample(itl_tok_ms, gaps_per_req, send_pop)[0]),
    }
    if itl_tok_ms.size and itl_tok_ms is not itl_ms and not np.isfinite(itl_tok_ms).all():
        # (The shared array keeps its non-finite values, as itl_ms does: every reader
        # of `samples` drops them. Kept the same object, it is ordered once below.)
        itl_tok_ms = itl_tok_ms[np.isfinite(itl_tok_ms)]
    return request_samples, {"itl_ms": itl_ms, "itl_per_token_ms": itl_tok_ms}


def _latency(trace: Trace, rm: RequestMetrics, pop: np.ndarray, seed: int,
             keep_samples: bool, one_token: bool, bootstrap: bool = True,
             latency_keys: tuple[str, ...] | None = None
             ) -> tuple[dict[str, Distribution], dict[str, np.ndarray],
                        dict[str, RequestSample]]:
    """Every latency distribution of the population `pop` (with CIs), the samples and the
    per-request samples they came from."""
    header = trace.header
    # Requests in send order (trace order when the source has no send times), so the CIs
    # can resample blocks of consecutive requests (theory/stats.py).
    send_pop = trace.sent_s[pop] if header.has_send_times else None
    gaps_per_req = np.maximum(trace.event_counts[pop] - 1, 0)
    request_samples: dict[str, RequestSample] = {}
    pooled_samples: dict[str, np.ndarray] = {}
    if keep_samples:
        request_samples, pooled_samples = _pooled_itl(trace, pop, gaps_per_req, send_pop)

    def per_request_samples() -> dict[str, np.ndarray]:
        return {
            "ttft_ms": rm.ttft_s[pop] * 1e3,
            "tpot_ms": rm.tpot_s[pop] * 1e3,
            **pooled_samples,
            "e2e_ms": rm.e2e_s[pop] * 1e3,
            "queue_ms": rm.queue_s[pop] * 1e3,
            "decode_rate_tok_s": rm.decode_rate_tok_s[pop],
            "output_tokens": rm.output_tokens[pop],
            "prompt_tokens": np.where(trace.prompt_tokens[pop] >= 0,
                                      trace.prompt_tokens[pop], np.nan).astype(np.float64),
        }

    # Without keep_samples the pooled samples go first, before the per-request ones exist
    # (their buffer is the largest array analyze holds); each metric keeps its own random
    # stream, so the order of the work changes no draw.
    samples = per_request_samples() if keep_samples else {}
    send_order = (np.argsort(send_pop, kind="stable") if send_pop is not None and keep_samples
                  else None)
    specs = LATENCY_SPECS
    if latency_keys is not None:
        specs = [spec for spec in specs if spec[0] in latency_keys]
    latency: dict[str, Distribution] = {}
    # One buffer as long as the largest sample holds each sorted copy in turn, and a
    # small scratch the standard deviation's squared deviations (`std_into`): no fresh
    # sample-sized arrays per metric (the pooled ITL samples hold one value per event).
    size = max(int(np.count_nonzero(pop)), int(gaps_per_req.sum()))
    buf = np.empty(size)
    scratch = np.empty(min(size, STD_LEAF))
    # Without `keep_samples`, each pooled ITL sample is computed into `buf` in request
    # order, its per-request sums are taken, and it is sorted where it lies; its
    # per-request counts below the percentiles are worked out again from the event times
    # (`_regroup`). One event-sized array instead of three (analyze of 1 M requests < 1 GB).
    # Each sample is ordered once, by selection around the ranks the percentiles read
    # (metrics/select.py: a full sort when small); a sample that is the same array as the
    # one before (per-token ITL when every event holds one token) reuses its ordering.
    prev_key: str | None = None
    xs = None
    pooled = shrink = False
    work = list(enumerate(specs))
    if not keep_samples:
        work.sort(key=lambda e: e[1][0] not in ("itl_ms", "itl_per_token_ms"))
    for stream, (key, label, unit, desc) in work:
        lean = not keep_samples and key in ("itl_ms", "itl_per_token_ms")
        if lean:
            same = key == "itl_per_token_ms" and one_token and xs is not None
            if not same:
                # The previous pooled sample's per-request arrays go first (not held
                # while this one is built).
                rs = xs = None
                per_token = key == "itl_per_token_ms"
                vals = (_itl_into(trace, pop, per_token, buf) if header.has_event_tokens
                        or not per_token else buf[:0])
                rs, idx = _grouped_sample(vals, gaps_per_req, send_pop)
                del vals
                pooled = rs.pooled
                if pooled:
                    rs.value_sums()  # kept in its cache, before the values are reordered
                    rs.regroup = _Regroup(trace, np.flatnonzero(pop)[idx], per_token)
                    del idx
                    xs = rs.values
                    sort_in_place(xs)
                else:
                    xs = sorted_finite(rs.values)
            shrink = key == "itl_per_token_ms"
        else:
            if shrink:
                # Past the pooled samples: a request-sized buffer from here on, the
                # event-sized one handed back (only the pooled values needed it).
                del xs, rs
                buf = np.empty(int(np.count_nonzero(pop)))
                xs, shrink = None, False
            if not samples:
                samples.update(per_request_samples())
                send_order = (np.argsort(send_pop, kind="stable") if send_pop is not None
                              else None)
            if key not in request_samples:
                request_samples[key] = RequestSample.per_request(samples[key], send_pop,
                                                                 send_order)
            rs = request_samples[key]
            same = (xs is not None and prev_key is not None and key in samples
                    and prev_key in samples and samples[key] is samples[prev_key])
            if not same:
                # A pooled sample (several values per request) is sorted outright: its
                # block draws of a percentile reach ranks far outside the selection's
                # windows (P50 +-4.5% of the 25 M ITL gaps of a 100k-request run), which
                # forced a full sort after the selection anyway, and one sort costs less
                # than the selection (numpy's SIMD sort; a partition at a dozen ranks is
                # not vectorized).
                pooled = rs.pooled
                xs = (sorted_finite if pooled else select_finite)(samples[key], out=buf)
        assert xs is not None
        d = summarize_sorted(key, label, xs, unit=unit, description=desc, seed=seed,
                             stream=stream, scratch=scratch,
                             requests=rs, sorted_fully=pooled,
                             n_draws=DEFAULT_BOOTSTRAP_DRAWS if bootstrap else 0,
                             moments=((latency[prev_key].mean, latency[prev_key].std)
                                      if same and prev_key is not None else None))
        prev_key = key
        if d.unavailable:
            d.unavailable = _why_unavailable(key, trace, pop)
        latency[key] = d
    latency = {key: latency[key] for key, *_ in specs}  # in the order of specs
    return latency, samples, request_samples


def _thin_tail_warnings(latency: dict[str, Distribution]) -> list[str]:
    """Per latency metric, its percentiles with fewer than MIN_TAIL_SAMPLES beyond them."""
    warnings: list[str] = []
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        d = latency.get(key)
        if d is None or d.unavailable:
            continue
        thin = [k for k, p in d.percentiles.items() if not p.supported]
        if thin:
            need = {k: min_samples_for_percentile(d.percentiles[k].q) for k in thin}
            warnings.append(
                f"{d.label}: {', '.join(thin)} from {d.count} samples have fewer than "
                f"{MIN_TAIL_SAMPLES} samples beyond them (need "
                + ", ".join(f"{k} >= {v:,}" for k, v in need.items())
                + "): treat them as noise; see the CI"
            )
    return warnings


# ---- throughput, concurrency, Little ------------------------------------------------------

def _throughput(trace: Trace, rm: RequestMetrics, win: Window | None, one_token: bool,
                samples: dict[str, np.ndarray], warnings: list[str]
                ) -> tuple[Throughput, Concurrency, LittleCheck, np.ndarray | None]:
    """Throughput over the window, concurrency and Little's law; the per-request tokens of
    the window (for goodput) and their bootstrap contributions (into `samples`)."""
    header, n = trace.header, len(trace)
    thr = Throughput()
    conc = Concurrency()
    little = LittleCheck()
    window_tokens: np.ndarray | None = None  # per request: output tokens of its events in it
    if win is None or not (win.duration_s > 0):
        thr.unavailable = "no measurement window (no send times or zero-length run)"
        little.note = "unavailable: no measurement window"
    else:
        d = win.duration_s
        if header.has_send_times:
            ended = _in_window_closed(rm.end_s, win)
        else:
            ended = np.ones(n, dtype=bool)
        done_ok = rm.ok & ended
        thr.completed_in_window = int(done_ok.sum())
        thr.requests_s = thr.completed_in_window / d
        use_events = (header.has_event_times and header.has_event_tokens
                      and header.has_send_times and trace.event_times_s.size > 0)
        if use_events:
            per_req_tok = window_tokens = _tokens_per_request(trace, window=win,
                                                              one_token=one_token)
            out_tok = float(per_req_tok.sum())
            first_in = _in_window_closed(rm.first_event_s, win)
        else:
            thr.token_counting = ("at completion: each successful request's output tokens "
                                  "counted when it ends (the source has no per-event tokens)")
            per_req_tok = np.where(done_ok, np.nan_to_num(rm.output_tokens), 0.0)
            out_tok = float(per_req_tok.sum())
            first_in = done_ok
            warnings.append("output tokens/s counts tokens at request completion: the source "
                            "has no per-event token times")
        prompt = np.where(trace.prompt_tokens >= 0, trace.prompt_tokens, 0)
        prm_tok = float(prompt[first_in].sum())
        thr.output_tokens_in_window = out_tok
        thr.prompt_tokens_in_window = prm_tok
        thr.output_tok_s = out_tok / d
        thr.total_tok_s = (out_tok + prm_tok) / d
        # Per-request contributions, so compare/gate can bootstrap throughput too.
        samples["_window_output_tokens"] = per_req_tok.astype(np.float64)
        samples["_window_completed_ok"] = done_ok.astype(np.float64)
        if header.has_send_times:
            conc = _concurrency(trace.sent_s, rm.end_s, win)
            little = _little(trace.sent_s, rm.end_s, win)
            if little.ok is False and not little.edge_effect:
                warnings.append(f"Little's law: {little.note}")
        else:
            little.note = "unavailable: the source records no send times"

    return thr, conc, little, window_tokens


EVENT_CHUNK = 1 << 20  # events per step (8 MB temporaries: reused from the heap, not mmapped)


def _grouped_sample(flat: np.ndarray, counts: np.ndarray, send_s: np.ndarray | None
                    ) -> tuple[RequestSample, np.ndarray]:
    """Pooled per-event values (request by request) as a RequestSample: non-finite values
    dropped, requests left with none left out, the rest ordered by send time; and the
    indices (into `counts`) of the requests it keeps."""
    has = counts > 0
    if flat.size == 0 or not has.any():
        return (RequestSample(np.zeros(0), np.zeros(0, dtype=np.int64),
                              np.zeros(0, dtype=np.int64)), np.zeros(0, dtype=np.int64))
    c = counts[has]
    fin = np.isfinite(flat)
    if not fin.all():
        starts = np.concatenate(([0], np.cumsum(c)[:-1]))
        c = np.add.reduceat(fin.astype(np.int64), starts)
        flat = flat[fin]
    del fin
    keep = c > 0
    send = send_s[has][keep] if send_s is not None else None
    order = (np.argsort(send, kind="stable") if send is not None
             else np.arange(int(keep.sum())))
    return (RequestSample(flat, np.asarray(c[keep], dtype=np.int64), order),
            np.flatnonzero(has)[keep])


try:  # analyze's compiled kernel (metrics/_kernels.c); the numpy path below without it
    from ridgeline.metrics import _kernels
except ImportError:  # pragma: no cover - a build without the extension
    _kernels = None


class _Regroup:
    """`RequestSample.regroup` of a pooled ITL sample sorted in place: per request (trace
    indices `req`, the sample's requests in trace order), how many of its ITL values are
    at or below each threshold, the values worked out again from the event times."""

    def __init__(self, trace: Trace, req: np.ndarray, per_token: bool) -> None:
        self.trace, self.per_token = trace, per_token
        self.req = np.asarray(req, dtype=np.int64)

    def __call__(self, thresholds: list[float]) -> list[np.ndarray]:
        t = self.trace
        if _kernels is not None:
            out = np.zeros((len(thresholds), self.req.size), dtype=np.int32)
            _kernels.counts_at_most(t.event_times_s, t.event_offsets, self.req,
                                    t.event_tokens if self.per_token else None,
                                    np.asarray(thresholds, dtype=np.float64), out)
            return list(out)
        # numpy: the values again in request order (one more event-sized array)
        sub = np.zeros(len(t), dtype=bool)
        sub[self.req] = True
        gaps = np.maximum(t.event_counts[sub] - 1, 0)
        vals = _itl_into(t, sub, self.per_token, np.empty(int(gaps.sum())))
        rs = _grouped_sample(vals, gaps, None)[0]
        bounds = np.zeros(rs.counts.size + 1, dtype=np.int64)
        np.cumsum(rs.counts, out=bounds[1:])
        return _counts_at_most(rs.values, bounds, list(thresholds))


def _gap_ends(trace: Trace, pop: np.ndarray) -> np.ndarray:
    """ends[p]: event p + 1 ends a gap of a request in `pop` (it is not a request's first)."""
    ends = np.repeat(pop, trace.event_counts)
    ends[trace.event_offsets[:-1][trace.event_counts > 0]] = False
    return ends[1:]


def _itl_into(trace: Trace, pop: np.ndarray, per_token: bool, out: np.ndarray) -> np.ndarray:
    """The pooled ITL values of `_itl_samples` (per event, or per token with its non-finite
    quotients kept), one of the two, in the first elements of `out`: the same operations
    in the same order, so the same values bit for bit."""
    times = trace.event_times_s
    if times.size < 2:
        return out[:0]
    if _kernels is not None:  # one pass, no event-sized mask
        n = _kernels.itl_values(times, trace.event_offsets, np.flatnonzero(pop).astype(np.int64),
                                trace.event_tokens if per_token else None, out)
        return out[:n]
    ends = _gap_ends(trace, pop)
    res = out[:int(np.count_nonzero(ends))]
    if per_token:
        _fill_gaps(trace, ends, None, res)
        with np.errstate(invalid="ignore"):
            res *= 1e3
    else:
        _fill_gaps(trace, ends, res, None)
    return res


def _fill_gaps(trace: Trace, ends: np.ndarray, ms_out: np.ndarray | None,
               per_token_out: np.ndarray | None) -> None:
    """One pass over the events in chunks (no event-sized temporaries): each gap between
    consecutive events of a request (`ends`, from `_gap_ends`) in ms into `ms_out`, and in
    seconds divided by the tokens of the event that ends it into `per_token_out`."""
    times, tokens = trace.event_times_s, trace.event_tokens
    k = 0
    with np.errstate(invalid="ignore", divide="ignore"):
        for lo in range(0, ends.size, EVENT_CHUNK):
            hi = min(lo + EVENT_CHUNK, ends.size)
            sel = ends[lo:hi]
            gaps = (times[lo + 1:hi + 1] - times[lo:hi])[sel]
            if per_token_out is not None:
                np.divide(gaps, tokens[lo + 1:hi + 1][sel],
                          out=per_token_out[k:k + gaps.size])
            if ms_out is not None:
                # To ms here, while in cache, not in another pass over the whole array.
                np.multiply(gaps, 1e3, out=ms_out[k:k + gaps.size])
            k += gaps.size


def _itl_samples(trace: Trace, pop: np.ndarray, per_token: bool, keep_nan: bool = False
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Pooled ITL samples of the requests in `pop`, in ms: each gap between consecutive
    events of a request (`event_gaps` order), and each gap divided by the tokens of the
    event that ends it (non-finite quotients dropped unless `keep_nan`; empty unless
    `per_token`).

    Computed in chunks into arrays of the exact size: no event-sized temporaries besides
    one mask. Same values as ``gaps[np.repeat(pop, gap_counts)] * 1e3``.
    """
    times = trace.event_times_s
    if times.size < 2:
        return np.zeros(0), np.zeros(0)
    ends = _gap_ends(trace, pop)
    itl = np.empty(int(np.count_nonzero(ends)))
    tokens = trace.event_tokens
    # One token per event (a simulated trace): the per-token gaps are the per-event gaps
    # (x / 1 == x exactly); the same array, not a copy, so analyze orders it once.
    same = per_token and bool((tokens == 1).all())
    if same:
        per_token = False
    itl_tok = np.empty(itl.size if per_token else 0)
    _fill_gaps(trace, ends, itl, itl_tok if per_token else None)
    del ends
    if per_token and not keep_nan:
        finite = np.isfinite(itl_tok)
        if not finite.all():
            itl_tok = itl_tok[finite]
        del finite
    if per_token:
        itl_tok *= 1e3
    return itl, (itl if same else itl_tok)


def _tokens_per_request(trace: Trace, ev_in: np.ndarray | None = None,
                        window: Window | None = None, one_token: bool = False) -> np.ndarray:
    """Sum of ``event_tokens`` over the events in `ev_in`, per request (int64), in chunks
    of requests (no event-sized temporary). Instead of `ev_in`, `window`: the events inside
    it (`_in_window_closed`), tested chunk by chunk (no event-sized mask either).
    `one_token`: every event holds one token (the caller checked), so the sum is the count
    of events inside: the mask summed, without reading the tokens (same integers)."""
    offsets = trace.event_offsets
    out = np.zeros(len(trace), dtype=np.int64)
    nonempty = np.flatnonzero(trace.event_counts > 0)
    if nonempty.size == 0:
        return out
    starts = offsets[nonempty]
    # Request-aligned chunks of about EVENT_CHUNK events.
    cuts = np.unique(np.append(
        np.searchsorted(starts, np.arange(0, int(offsets[-1]), EVENT_CHUNK)), nonempty.size))
    acc = token_sum_dtype(trace)  # exact either way: int32 when no request can overflow it
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        lo, hi = int(starts[a]), int(offsets[nonempty[b - 1] + 1])
        if ev_in is not None:
            inside = ev_in[lo:hi]
        else:
            assert window is not None
            inside = _in_window_closed(trace.event_times_s[lo:hi], window)
        vals = inside if one_token else np.where(inside, trace.event_tokens[lo:hi], 0)
        out[nonempty[a:b]] = np.add.reduceat(vals, starts[a:b] - lo, dtype=acc)
    return out


def _why_unavailable(key: str, trace: Trace, pop: np.ndarray) -> str:
    h = trace.header
    if not pop.any():
        return "no successful requests in the measurement window"
    if key in ("itl_ms", "itl_per_token_ms") and not h.has_event_times:
        return "the source records no per-event times"
    if key == "itl_per_token_ms" and not h.has_event_tokens:
        return "the source does not record tokens per event"
    if key == "queue_ms":
        return "no scheduled times in the trace"
    if key in ("tpot_ms", "decode_rate_tok_s"):
        return "no request with N > 1 tokens over >= 2 events"
    return "not recorded by the source"


SLO_SOURCES = {
    "ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s", "itl_max": "itl_max_s",
    "queue": "queue_s", "decode_rate": "decode_rate_tok_s",
}


def _goodput(
    trace: Trace, rm: RequestMetrics, slos: list[SLO], measured: np.ndarray,
    win: Window | None, seed: int, window_tokens: np.ndarray | None = None,
    bootstrap: bool = True,
) -> Goodput:
    """Requests meeting every SLO. Undefined TPOT/decode rate (N ≤ 1) do not fail an SLO
    (as in vLLM: there is no decode gap to violate it); any other missing value does."""
    g = Goodput(slos=[s.text for s in slos])
    good = rm.ok.copy()
    for s in slos:
        values = getattr(rm, SLO_SOURCES[s.metric])
        if s.metric in ("ttft", "e2e", "queue") and np.isnan(values[rm.ok]).all():
            g.unavailable = f"{s.text}: the trace has no {s.metric} values"
            return g
        meets = s.holds(values)
        if s.metric in ("tpot", "decode_rate", "itl_max"):
            vacuous = rm.ok & np.isnan(values) & ((rm.output_tokens <= 1) | (rm.n_events <= 1))
            meets = meets | vacuous
        good &= meets
    judged = measured
    g.judged_requests = int(judged.sum())
    g.good_requests = int((good & judged).sum())
    order = np.argsort(trace.sent_s[judged], kind="stable")
    g.good_in_send_order = good[judged][order]
    if g.judged_requests:
        g.attainment = g.good_requests / g.judged_requests
    if g.judged_requests and bootstrap:
        rng = np.random.default_rng([seed, 1000])
        g.attainment_ci = ci_from_draws(
            bootstrap_fraction_draws(g.good_requests, g.judged_requests,
                                     DEFAULT_BOOTSTRAP_DRAWS, rng)
        )
    if win is not None and win.duration_s > 0:
        d = win.duration_s
        ended = (_in_window_closed(rm.end_s, win) if trace.header.has_send_times
                 else np.ones(len(trace), dtype=bool))
        g.requests_s = float((good & ended).sum() / d)
        h = trace.header
        if window_tokens is not None:  # the throughput's per-request window tokens
            # (int64 sums: exact, the same total as summing the good events in the window)
            g.output_tok_s = float(window_tokens[good].sum() / d)
        elif h.has_event_times and h.has_event_tokens and h.has_send_times and \
                trace.event_times_s.size:
            ev_in = _in_window_closed(trace.event_times_s, win)
            ev_in &= np.repeat(good, trace.event_counts)
            g.output_tok_s = float(trace.event_tokens.sum(where=ev_in) / d)
        else:
            g.output_tok_s = float(np.nansum(rm.output_tokens[good & ended]) / d)
    return g
