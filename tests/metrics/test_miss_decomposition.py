"""The per-component split of a miss (metrics/decomposition.py) on hand-built requests: each
component equals the value computed by hand from the send, scheduling, token and end times,
and the named component follows the attribution rules (queueing follows a slower step,
decode stalls follow a slower prefill)."""

from __future__ import annotations

import numpy as np
import pytest

from ridgeline.metrics.decomposition import Side, decode_concurrency, decompose, side_from_events
from ridgeline.metrics.server_phases import phase_means


def _hand_side() -> Side:
    # R0: sent 0, scheduled 0.05, engine first token 0.20 (seen 0.21), tokens at 0.21, 0.31,
    #     0.41, 0.71, end 0.75.  R1: sent 0.10, scheduled 0.10, first token 0.30, tokens at
    #     0.30, 0.40, 0.50, end 0.52.
    return side_from_events(
        "measured", sent_s=np.array([0.0, 0.10]), end_s=np.array([0.75, 0.52]),
        event_offsets=np.array([0, 4, 7]),
        event_times_s=np.array([0.21, 0.31, 0.41, 0.71, 0.30, 0.40, 0.50]),
        event_tokens=np.ones(7, dtype=np.int64), scheduled_s=np.array([0.05, 0.10]),
        first_engine_s=np.array([0.20, 0.30]))


def test_components_equal_hand_computed_values() -> None:
    m = _hand_side().means_s
    # R0: queue 0.05, prefill 0.15, median gap 0.1 x 3 gaps = 0.3 steps, decode 0.5 ->
    #     stalls 0.2, overhead 0.01 before the first token + 0.04 tail.
    # R1: queue 0, prefill 0.2, steps 0.1 x 2 = 0.2, stalls 0, overhead 0.02.
    want = {"queue": 0.025, "prefill": 0.175, "steps": 0.25, "stalls": 0.10,
            "overhead": 0.035, "e2e": 0.585}
    for k, v in want.items():
        assert m[k] == pytest.approx(v, abs=1e-12), k
    # The components add up to the E2E latency.
    assert sum(m[k] for k in ("queue", "prefill", "steps", "stalls", "overhead")) == \
        pytest.approx(m["e2e"])
    assert m["front_overhead"] == pytest.approx(0.005) and m["tail_overhead"] == \
        pytest.approx(0.03)


def test_chunked_events_count_each_token_as_a_step() -> None:
    # One event carrying 2 tokens 0.2 s after the first: two steps of 0.1 s.
    s = side_from_events("x", np.array([0.0]), np.array([0.3]), np.array([0, 3]),
                         np.array([0.0, 0.2, 0.3]), np.array([1, 2, 1]))
    assert s.step_s == pytest.approx(0.1)
    assert s.means_s["steps"] == pytest.approx(0.3) and s.means_s["stalls"] == \
        pytest.approx(0.0, abs=1e-12)


def test_decode_batch_is_the_time_average_of_requests_decoding() -> None:
    # Spans [0.21, 0.71] and [0.30, 0.50]: R0 sees 2 for 0.2 of its 0.5 s -> 1.4; R1 2.
    b = decode_concurrency(np.array([0.21, 0.30]), np.array([0.71, 0.50]))
    assert b.tolist() == pytest.approx([1.4, 2.0])


def _side(label: str, step_s: float, **means: float) -> Side:
    base = {"queue": 0.010, "prefill": 0.100, "steps": 1.000, "stalls": 0.050,
            "overhead": 0.005}
    base.update(means)
    base["e2e"] = sum(base.values())
    return Side(label, 10, base, step_s, 8.0, True)


def test_a_slower_decode_step_is_named_and_the_queueing_follows() -> None:
    measured = _side("measured", 0.010)
    predicted = _side("predicted", 0.013, steps=1.300, queue=0.040)
    d = decompose(predicted, measured)
    assert d.culprit == "steps" and d.culprit_relative == pytest.approx(0.3)
    assert "the queueing" in d.follows
    rows = {r.key: r for r in d.rows}
    # Shares of the E2E difference (0.33 s): steps 0.30, queue 0.03.
    assert rows["steps"].share_of_e2e_difference == pytest.approx(0.30 / 0.33)
    assert rows["queue"].difference_ms == pytest.approx(30.0)
    assert sum(r.share_of_e2e_difference for r in d.rows) == pytest.approx(1.0)
    assert "decode step +30%" in d.sentence and "queueing follows" in d.sentence


def test_a_slower_prefill_is_named_with_the_stalls_behind_it() -> None:
    measured = _side("measured", 0.010)
    # The stalls grow more than the prefill itself (every decode waits on others' prefills).
    predicted = _side("predicted", 0.010, prefill=0.130, stalls=0.200)
    d = decompose(predicted, measured)
    assert d.culprit == "prefill" and d.culprit_relative == pytest.approx(0.3)
    assert d.follows == ["the decode stalls behind prefills"]


def test_queueing_with_no_step_difference_is_named_itself() -> None:
    measured = _side("measured", 0.010)
    predicted = _side("predicted", 0.0101, queue=0.200)
    d = decompose(predicted, measured)
    assert d.culprit == "queue" and d.follows == []


def test_unsplit_side_folds_both_into_time_to_first_token() -> None:
    split = _hand_side()
    unsplit = side_from_events(
        "predicted", np.array([0.0, 0.10]), np.array([0.75, 0.52]), np.array([0, 4, 7]),
        np.array([0.21, 0.31, 0.41, 0.71, 0.30, 0.40, 0.50]), np.ones(7, dtype=np.int64))
    d = decompose(unsplit, split)
    keys = [r.key for r in d.rows]
    assert keys == ["ttft", "steps", "stalls", "overhead"]
    # The same requests on both sides: no difference anywhere, E2E 0.585 s.
    assert all(r.difference_ms == pytest.approx(0.0, abs=1e-9) for r in d.rows)
    assert d.e2e_measured_ms == pytest.approx(585.0)


def test_server_phase_means_are_histogram_deltas() -> None:
    samples = [{"source": "server", "t_perf_s": 1.0, "queue_time_s_sum": 0.5,
                "queue_time_s_count": 1, "prefill_time_s_sum": 0.2,
                "prefill_time_s_count": 1},
               {"source": "server", "t_perf_s": 2.5, "queue_time_s_sum": 0.9,
                "queue_time_s_count": 2, "prefill_time_s_sum": 0.3,
                "prefill_time_s_count": 2},
               {"source": "server", "t_perf_s": 9.0, "queue_time_s_sum": 1.5,
                "queue_time_s_count": 5, "prefill_time_s_sum": 0.9,
                "prefill_time_s_count": 5}]
    # The run starts at 3.0: the sample at 2.5 is the one before it; 3 requests since.
    got = phase_means(samples, t0_perf_s=3.0)
    assert got is not None and got["requests"] == 3
    assert got["queue_s"] == pytest.approx(0.2) and got["prefill_s"] == pytest.approx(0.2)
