"""event_tokens is an int32 column (memory); the sums over it must stay exact
int64 numbers when a request's tokens pass 2**31 - 1 (the int32 accumulation shortcut is
taken only when no request can overflow it)."""

from __future__ import annotations

import numpy as np

from ridgeline.metrics.analysis import _tokens_per_request, analyze
from ridgeline.metrics.per_request import request_metrics, token_sum_dtype
from ridgeline.trace.table import Trace

BIG = 2**31 - 1


def _trace(tokens: list[int]) -> Trace:
    recs = [{"id": "a", "sent_s": 0.0, "event_times_s": [0.1 * (k + 1) for k in
                                                          range(len(tokens))],
             "event_tokens": tokens, "end_s": 0.1 * len(tokens)},
            {"id": "b", "sent_s": 0.05, "event_times_s": [0.2, 0.3], "event_tokens": [3, 4],
             "end_s": 0.3}]
    return Trace.from_records({"source": "test", "has_event_tokens": True}, recs)


def test_sums_past_int32_are_exact() -> None:
    t = _trace([BIG, BIG, 5])
    assert t.event_tokens.dtype == np.int32
    assert token_sum_dtype(t) == np.int64  # 2**31 - 1 x 3 events cannot be held in int32
    rm = request_metrics(t)
    assert rm.output_tokens.tolist() == [2 * BIG + 5, 7]  # counted from the events
    per_req = _tokens_per_request(t, ev_in=np.ones(t.event_tokens.size, dtype=bool))
    assert per_req.tolist() == [2 * BIG + 5, 7]
    r = analyze(t, window="all")
    assert r.throughput.output_tokens_in_window == float(2 * BIG + 12)


def test_small_counts_take_the_int32_sum() -> None:
    t = _trace([1, 8, 8])
    assert token_sum_dtype(t) == np.int32
    assert request_metrics(t).output_tokens.tolist() == [17, 7]
    per_req = _tokens_per_request(t, ev_in=np.ones(t.event_tokens.size, dtype=bool))
    assert per_req.tolist() == [17, 7]
