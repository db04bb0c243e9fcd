"""Per-request metrics, computed once for every request of a trace (vectorized).

Definitions (chapter 10 §1 of the seeds; docs/metrics.md):

* TTFT = time of the first output event − ``sent_s`` (the client's send time). The gap
  ``sent_s − scheduled_s`` (when the load pattern's intended time is known) is reported
  separately as the queue / scheduling lag, so TTFT never hides a late client.
* TPOT = (t_last − t_first) / (N − 1) for N > 1, N the request's output token count and
  t_first / t_last the first and last output event times. Undefined for N ≤ 1 and for a
  request whose N > 1 tokens all arrived in one event (no decode timing is visible).
* ITL = the gap between consecutive output events of one request (per event). The
  per-token view divides each gap by the number of tokens in the event that ends it.
* E2E = ``end_s − sent_s``.
* Decode rate = (N − 1) / (t_last − t_first) tokens/s = 1 / TPOT.

Sources without per-event times (some importers) give TTFT/TPOT/E2E per request; those
values are used only where the events are missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.trace.table import STATUS_CODE, Trace


@dataclass
class RequestMetrics:
    """Per-request metric arrays (seconds; NaN where undefined) and counts of why."""

    ok: np.ndarray  # bool
    n_events: np.ndarray
    output_tokens: np.ndarray  # float, NaN unknown
    first_event_s: np.ndarray
    last_event_s: np.ndarray
    end_s: np.ndarray  # effective end: end_s, else last event, else sent + imported e2e
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    queue_s: np.ndarray
    decode_rate_tok_s: np.ndarray
    tpot_single_token: int  # ok requests with N <= 1 (TPOT undefined by definition)
    tpot_single_event: int  # ok requests with N > 1 delivered in one event
    ttft_imported: int  # requests whose TTFT came from the source's summary, not events
    tokens_from_events: int  # requests whose N was counted from event_tokens
    # The largest ITL per request, worked out on first use (`itl_max_s`): only an itl_max
    # SLO and the per-request export read it, and it is a pass over every event (~0.2 s
    # of `analyze` on a 1M-request trace).
    _itl_trace: Trace | None = field(default=None, repr=False, compare=False)
    _itl_max_s: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def itl_max_s(self) -> np.ndarray:
        """Largest gap between consecutive events of each request (NaN below two)."""
        if self._itl_max_s is None:
            assert self._itl_trace is not None
            self._itl_max_s = _itl_max(self._itl_trace)
            self._itl_trace = None  # (not held once done)
        return self._itl_max_s


def _first_last(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    counts = trace.event_counts
    has = counts > 0
    first = np.full(len(trace), np.nan)
    last = np.full(len(trace), np.nan)
    starts = trace.event_offsets[:-1]
    ends = trace.event_offsets[1:]
    first[has] = trace.event_times_s[starts[has]]
    last[has] = trace.event_times_s[ends[has] - 1]
    return first, last, has


def token_sum_dtype(trace: Trace) -> type[np.integer]:
    """The dtype to sum one request's event tokens in: the int32 column itself when no
    request can pass 2**31 - 1 (largest count x most events), else int64. numpy would
    cast the int32 column to int64 value by value (~40 ms per pass over 23 M events)."""
    tok = trace.event_tokens
    counts = trace.event_counts
    if not tok.size or not counts.size:
        return np.int32
    bound = int(tok.max()) * int(counts.max())
    return np.int32 if bound <= np.iinfo(np.int32).max else np.int64


def event_gaps(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Gaps between consecutive events of the same request, in trace order, and the
    number of gaps of each request (``np.repeat(mask, counts)`` selects by request).
    """
    times = trace.event_times_s
    gap_counts = np.maximum(trace.event_counts - 1, 0)
    if times.size < 2:
        return np.zeros(0), gap_counts
    diffs = np.diff(times)
    valid = np.ones(diffs.size, dtype=bool)
    boundary = trace.event_offsets[1:-1] - 1  # last event of a request → next request
    boundary = boundary[(boundary >= 0) & (boundary < diffs.size)]
    valid[boundary] = False
    return diffs[valid], gap_counts


EVENT_CHUNK = 1 << 20  # events per step (8 MB temporaries: reused from the heap, not mmapped)


def _itl_max(trace: Trace) -> np.ndarray:
    """Largest gap between consecutive events of each request (NaN below two events).

    In request-aligned chunks of about EVENT_CHUNK events: no event-sized temporary. A max
    does not round, so this equals one `np.maximum.reduceat` over all the gaps.
    """
    offsets = trace.event_offsets
    times = trace.event_times_s
    itl_max = np.full(len(trace), np.nan)
    multi = np.flatnonzero(trace.event_counts >= 2)
    if multi.size == 0:
        return itl_max
    starts = offsets[multi]
    cuts = np.unique(np.append(
        np.searchsorted(starts, np.arange(0, int(offsets[-1]), EVENT_CHUNK)), multi.size))
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        lo, hi = int(starts[a]), int(offsets[multi[b - 1] + 1])
        gaps = np.diff(times[lo:hi])
        # A gap into another request's first event is not a gap of the request before it.
        firsts = offsets[np.searchsorted(offsets, lo, side="right"):
                         np.searchsorted(offsets, hi, side="left")]
        gaps[firsts - lo - 1] = -np.inf
        itl_max[multi[a:b]] = np.maximum.reduceat(gaps, starts[a:b] - lo)
    return itl_max


TIME_TOLERANCE_S = 1e-9  # as `ridgeline validate` (trace/validator.py)


def _backward_events(times: np.ndarray, tol: float) -> np.ndarray:
    """Indices i >= 1 with ``times[i] - times[i - 1] < -tol``, as
    ``np.flatnonzero(np.diff(times) < -tol) + 1``, in cache-sized chunks: no event-sized
    temporaries (a difference and a mask per event cost more than the comparison)."""
    n = times.size - 1
    chunk = 1 << 16
    diff_buf = np.empty(min(chunk, n))
    mask_buf = np.empty(min(chunk, n), dtype=bool)
    parts = [np.zeros(0, dtype=np.intp)]
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        d = np.subtract(times[lo + 1:hi + 1], times[lo:hi], out=diff_buf[:hi - lo])
        m = np.less(d, -tol, out=mask_buf[:hi - lo])
        if m.any():
            parts.append(np.flatnonzero(m) + (lo + 1))
    return np.concatenate(parts)


def check_times(trace: Trace, first: np.ndarray, last: np.ndarray, has: np.ndarray) -> None:
    """Refuse a trace whose times contradict each other, as `ridgeline validate` does:
    an event before the send (a negative TTFT), an end before the send or before the last
    event, events going backwards, negative imported latencies. Metrics from such a trace
    would be wrong while looking right. Raises RidgelineError naming the first request."""
    tol = TIME_TOLERANCE_S
    sent = trace.sent_s
    with np.errstate(invalid="ignore"):
        checks = [
            (has & (first < sent - tol), "its first event ({first:g} s) is before sent_s "
             "({sent:g} s): a negative TTFT"),
            (np.isfinite(trace.end_s) & (trace.end_s < sent - tol), "end_s ({end:g} s) is "
             "before sent_s ({sent:g} s)"),
            (has & np.isfinite(trace.end_s) & (trace.end_s < last - tol), "end_s ({end:g} s) "
             "is before its last event ({last:g} s)"),
        ]
        for name in ("ttft_s", "tpot_s", "e2e_s"):
            v = getattr(trace, name)
            checks.append((v < -tol, f"{name} is negative"))
        times = trace.event_times_s
        if times.size > 1:
            back = _backward_events(times, tol)
            starts = trace.event_offsets[:-1]  # sorted: membership by bisection
            at = np.minimum(np.searchsorted(starts, back), starts.size - 1)
            back = back[starts[at] != back]  # a request's first event starts afresh
            if back.size:
                bad = np.zeros(len(trace), dtype=bool)
                bad[np.searchsorted(trace.event_offsets, back, side="right") - 1] = True
                checks.append((bad, "its event times go backwards"))
    for mask, what in checks:
        idx = np.flatnonzero(mask)
        if idx.size:
            i = int(idx[0])
            where = f"{trace.path}: " if trace.path else ""
            text = what.format(first=first[i], sent=sent[i], end=trace.end_s[i], last=last[i])
            more = f" ({idx.size - 1} more like it)" if idx.size > 1 else ""
            raise RidgelineError(
                f"{where}request {trace.ids[i]!r}: {text}{more}; the trace is invalid "
                "(`ridgeline validate` lists every problem)")


def request_metrics(trace: Trace) -> RequestMetrics:
    """Compute every per-request metric of `trace` (after `check_times`)."""
    n = len(trace)
    ok = trace.status == STATUS_CODE["ok"]
    counts = trace.event_counts
    first, last, has = _first_last(trace)
    check_times(trace, first, last, has)

    # Tokens per request: one sum per non-empty request (no event-sized temporaries).
    tok_sum = np.zeros(n, dtype=np.float64)
    if has.any():
        tok_sum[has] = np.add.reduceat(trace.event_tokens, trace.event_offsets[:-1][has],
                                       dtype=token_sum_dtype(trace))
    declared = trace.output_tokens.astype(np.float64)
    known = trace.output_tokens >= 0
    from_events = ~known & has & bool(trace.header.has_event_tokens)
    n_tok = np.where(known, declared, np.where(from_events, tok_sum, np.nan))

    ttft = np.where(has, first - trace.sent_s, trace.ttft_s)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot_events = (last - first) / (n_tok - 1.0)
    decodable = has & (counts >= 2) & (n_tok > 1)
    tpot = np.where(decodable, tpot_events, np.where(has, np.nan, trace.tpot_s))
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(tpot > 0, 1.0 / tpot, np.nan)

    end = np.where(
        np.isfinite(trace.end_s),
        trace.end_s,
        np.where(has, last, trace.sent_s + trace.e2e_s),
    )
    e2e = np.where(np.isfinite(trace.end_s), trace.end_s - trace.sent_s, trace.e2e_s)
    e2e = np.where(np.isnan(e2e) & has, last - trace.sent_s, e2e)
    queue = trace.sent_s - trace.scheduled_s

    ok_single_token = ok & (n_tok <= 1)
    ok_single_event = ok & (n_tok > 1) & (counts == 1)
    return RequestMetrics(
        ok=ok,
        n_events=counts,
        output_tokens=n_tok,
        first_event_s=first,
        last_event_s=last,
        end_s=end,
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=e2e,
        queue_s=queue,
        decode_rate_tok_s=rate,
        tpot_single_token=int(ok_single_token.sum()),
        tpot_single_event=int(ok_single_event.sum()),
        ttft_imported=int((~has & np.isfinite(trace.ttft_s)).sum()),
        tokens_from_events=int(from_events.sum()),
        _itl_trace=trace,
    )
