"""A measured run replayed through the simulator, and its miss explained by component.

`replay_measured` replays a trace's successful requests (their lengths; a closed loop as its
users, otherwise the measured send times: `calibrate/closed_loop.py`) with the engine's first
scheduling of each request recorded. `explain` splits both sides into queueing, prefill,
decode steps, decode stalls and per-request overhead (`metrics/decomposition.py`): the
predicted side from the simulator's own records (exact), the measured side from the trace's
events and, where bench sampled them, the server's vLLM phase histograms
(`metrics/server_phases.py`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from ridgeline.calibrate.closed_loop import ReplayPlan, plan_replay
from ridgeline.errors import RidgelineError
from ridgeline.metrics.decomposition import (
    Decomposition,
    Side,
    decompose,
    side_from_events,
    with_server_phases,
)
from ridgeline.metrics.server_phases import trace_phase_means
from ridgeline.sim.engine_costs import EngineCosts, apply_request_overhead
from ridgeline.sim.event_loop import Workload, simulate
from ridgeline.trace.table import STATUS_CODE


@dataclass
class Replayed:
    """A replay: the simulation, how it was replayed, which trace rows it replays (in send
    order: row `rows[j]` of the trace is request j of the simulation), and each simulated
    request's first token before any per-request overhead."""

    result: Any
    plan: ReplayPlan
    rows: np.ndarray
    first_engine_s: np.ndarray


def measured_end_s(trace: Any, rows: np.ndarray) -> np.ndarray:
    """End of each row's reply: its end time, else its last output event."""
    end = trace.end_s[rows].astype(np.float64)
    counts = trace.event_counts[rows]
    has = counts > 0
    last = np.full(rows.size, np.nan)
    last[has] = trace.event_times_s[trace.event_offsets[rows[has] + 1] - 1]
    return np.where(np.isfinite(end), end, last)


def replay_measured(trace: Any, profile: Any, config: Any, loop: str = "auto",
                    in_flight_peak: int = 0) -> Replayed:
    """Simulate the trace's successful requests (see the module docstring)."""
    ok = np.flatnonzero((trace.status == STATUS_CODE["ok"]) & (trace.prompt_tokens > 0)
                        & (trace.output_tokens > 0))
    if ok.size == 0:
        raise RidgelineError(f"TRACE: {trace.path}: no successful requests with known prompt "
                             "and output token counts to replay")
    rows = ok[np.argsort(trace.sent_s[ok], kind="stable")]
    prompt, output = trace.prompt_tokens[rows], trace.output_tokens[rows]
    sent = trace.sent_s[rows].astype(np.float64)
    plan = plan_replay(sent, measured_end_s(trace, rows), dict(trace.header.load or {}), loop,
                       in_flight_peak)
    if plan.closed and plan.user_info is not None:
        u = plan.user_info
        wl = Workload(prompt, output, concurrency=plan.users, think_s=u.think_s,
                      user_of=u.user_of, user_start_s=u.start_s - sent[0])
    else:
        wl = Workload(prompt, output, arrival_s=sent - sent[0])
    # The per-request overhead is applied after the engine (it shifts token times only):
    # applied here instead, so the engine's own first-token times are kept.
    costs = None
    if getattr(config, "request_overhead_s", 0) or getattr(config, "request_overhead_steps", 0):
        costs = EngineCosts(request_overhead_s=config.request_overhead_s,
                            request_overhead_steps=config.request_overhead_steps)
        config = dataclasses.replace(config, request_overhead_s=0.0,
                                     request_overhead_steps=0.0)
    res = simulate(wl, config, profile, record_scheduled=True)
    if plan.closed and plan.user_info is not None and costs is not None:
        res = simulate(_after_own_reply(wl, res, costs), config, profile,
                       record_scheduled=True)
    counts = np.diff(res.event_offsets)
    first = np.full(len(res), np.nan)
    first[counts > 0] = res.event_times_s[res.event_offsets[:-1][counts > 0]]
    res = apply_request_overhead(res, costs)
    return Replayed(res, plan, rows, first)


def _after_own_reply(wl: Workload, res: Any, costs: EngineCosts) -> Workload:
    """The closed loop of `wl` with each user's next request sent after its previous reply
    reached the client: the per-request overhead (applied after the engine, it moves the
    reply's end at the client: `apply_request_overhead`, here from the first replay's mean
    decode step) is added to the measured pause after that reply. Without it a replayed
    user would send before its predicted reply had arrived."""
    if wl.user_of is None or wl.think_s is None:
        return wl
    probe = dataclasses.replace(res, event_times_s=np.array(res.event_times_s, copy=True),
                                end_s=np.array(res.end_s, copy=True))
    apply_request_overhead(probe, costs)
    shift = np.nan_to_num(np.asarray(probe.end_s) - np.asarray(res.end_s))
    think = np.array(wl.think_s, dtype=np.float64, copy=True)
    last: dict[int, int] = {}
    for j, u in enumerate(wl.user_of.tolist()):   # send order: a user's previous request
        if u in last:
            think[j] += float(shift[last[u]])
        last[u] = j
    return dataclasses.replace(wl, think_s=think)


def predicted_side(rep: Replayed) -> Side:
    """The simulation's side: exact queueing (to the first scheduling) and prefill."""
    res = rep.result
    return side_from_events(
        "predicted", res.sent_s, res.end_s, res.event_offsets, res.event_times_s,
        np.ones(res.event_times_s.size, dtype=np.int64), scheduled_s=res.scheduled_engine_s,
        first_engine_s=rep.first_engine_s,
        sources=["the simulator's records: first scheduling, token times, step timeline"])


def measured_side(trace: Any, rows: np.ndarray | None = None) -> Side:
    """The trace's side (its successful requests, or `rows`): events, and the server's phase
    histograms when bench sampled them."""
    keep = np.zeros(len(trace), dtype=bool)
    if rows is None:
        keep[trace.status == STATUS_CODE["ok"]] = True
    else:
        keep[rows] = True
    side = side_from_events("measured", trace.sent_s, trace.end_s, trace.event_offsets,
                            trace.event_times_s, trace.event_tokens, keep=keep,
                            sources=["the trace's events: send, first token, token times, "
                                     "end"])
    phases = trace_phase_means(trace)
    out = with_server_phases(side, phases)
    if phases and phases.get("requests") != side.requests and out.split:
        out.sources.append(f"the server finished {phases.get('requests')} requests in the "
                           f"run, the trace holds {side.requests}: its means cover those")
    if out.split and phases and phases.get("decode_s") is not None:
        client = out.means_s["steps"] + out.means_s["stalls"]
        out.sources.append(f"the server's own mean decode {phases['decode_s'] * 1e3:.2f} ms "
                           f"(the client saw {client * 1e3:.2f} ms first to last token)")
    if not out.split:
        out.sources.append("queueing and prefill not apart: no server phase histograms "
                           "(bench samples them from a vLLM-compatible /metrics)")
    return out


def explain(trace: Any, rep: Replayed) -> Decomposition:
    """Predicted against measured for one replayed trace."""
    return decompose(predicted_side(rep), measured_side(trace, rep.rows))


def explain_traces(measured: Any, predicted: Any) -> Decomposition:
    """A bench trace against a trace of a simulation of the same workload (both read from
    files: the predicted side has no engine timestamps, so queueing and prefill show as the
    time to first token unless both sides have them)."""
    pred = side_from_events("predicted", predicted.sent_s, predicted.end_s,
                            predicted.event_offsets, predicted.event_times_s,
                            predicted.event_tokens,
                            keep=predicted.status == STATUS_CODE["ok"],
                            sources=["the predicted trace's events"])
    return decompose(pred, measured_side(measured))


__all__ = ["Replayed", "explain", "explain_traces", "measured_end_s", "measured_side",
           "predicted_side", "replay_measured"]
