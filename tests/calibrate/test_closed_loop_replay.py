"""A closed-loop measurement replayed as its users (calibrate/closed_loop.py,
calibrate/explain.py): the send times of a hand-built 2-user trace, replayed through an
engine whose every step takes 10 ms, equal the ones computed by hand from the simulated
replies; the user reconstruction and the loop detection on hand-built send/end times."""

from __future__ import annotations

import numpy as np
import pytest

from ridgeline.calibrate.closed_loop import assign_users, plan_replay
from ridgeline.calibrate.explain import replay_measured
from ridgeline.errors import RidgelineError
from ridgeline.perf.step_time import LinearStepTime
from ridgeline.sim.engine import EngineConfig
from ridgeline.trace.table import Trace


def _trace(load: dict) -> Trace:
    # user 0: r0 sent 0.00 ended 0.50, then r2 sent 0.55 (a 50 ms pause) ended 1.00
    # user 1: r1 sent 0.10 ended 0.60, then r3 sent 0.60 (no pause) ended 1.10
    rows = [("r0", 0.00, 0.50), ("r1", 0.10, 0.60), ("r2", 0.55, 1.00), ("r3", 0.60, 1.10)]
    recs = [{"id": i, "sent_s": s, "end_s": e, "event_times_s": [s + 0.1, e - 0.1, e],
             "prompt_tokens": 10, "output_tokens": 3, "status": "ok"} for i, s, e in rows]
    return Trace.from_records({"source": "bench", "load": load}, recs)


def test_closed_loop_replay_sends_each_users_next_request_at_its_simulated_reply() -> None:
    rep = replay_measured(_trace({"pattern": "closed", "concurrency": 2}),
                          LinearStepTime(base_s=0.01), EngineConfig(num_kv_blocks=64))
    assert rep.plan.closed and rep.plan.users == 2
    # By hand, every step 10 ms, a request's first token at the end of its first step:
    # r0 sent 0 -> tokens 0.01 0.02 0.03 (ends 0.03); r2 (user 0) 0.05 later: sent 0.08 ->
    # 0.09 0.10 0.11; r1 sent 0.10 (its measured first send) joins the step at 0.10 ->
    # 0.11 0.12 0.13; r3 (user 1, no pause) sent 0.13 -> 0.14 0.15 0.16.
    res = rep.result
    assert res.sent_s.tolist() == pytest.approx([0.0, 0.10, 0.08, 0.13])
    assert res.end_s.tolist() == pytest.approx([0.03, 0.13, 0.11, 0.16])
    # The engine's first scheduling: r1 waits for nothing (idle engine at 0.10), r2 either.
    assert res.scheduled_engine_s.tolist() == pytest.approx([0.0, 0.10, 0.08, 0.13])


def test_open_loop_forced_keeps_the_measured_send_times() -> None:
    rep = replay_measured(_trace({"pattern": "closed", "concurrency": 2}),
                          LinearStepTime(base_s=0.01), EngineConfig(num_kv_blocks=64),
                          loop="open")
    assert not rep.plan.closed
    assert rep.result.sent_s.tolist() == pytest.approx([0.0, 0.10, 0.55, 0.60])


def test_users_are_read_back_from_sends_and_ends() -> None:
    u = assign_users(np.array([0.0, 0.1, 0.55, 0.6]), np.array([0.5, 0.6, 1.0, 1.1]), 2)
    assert u is not None
    assert u.user_of.tolist() == [0, 1, 0, 1]
    assert u.start_s.tolist() == [0.0, 0.1]
    assert u.think_s.tolist() == pytest.approx([0.0, 0.0, 0.05, 0.0])


def test_loop_detection_without_a_header() -> None:
    sent = np.array([0.0, 0.1, 0.5, 0.6, 1.0])
    end = np.array([0.5, 0.6, 1.0, 1.1, 1.4])
    plan = plan_replay(sent, end, {}, "auto", in_flight_peak=2)
    assert plan.closed and plan.users == 2 and "detected" in plan.how
    # Sends that wait long after every reply: an open loop.
    late = np.array([0.0, 0.1, 0.9, 1.6, 2.5])
    assert not plan_replay(late, end, {}, "auto", in_flight_peak=2).closed
    # A header saying open wins over the send times.
    assert not plan_replay(sent, end, {"pattern": "open", "rate": 5.0}, "auto", 2).closed
    with pytest.raises(RidgelineError, match="--closed-loop"):
        plan_replay(late, end, {}, "closed", in_flight_peak=2)


def test_predicted_side_is_exact_with_a_per_request_overhead() -> None:
    from ridgeline.calibrate.explain import predicted_side

    rep = replay_measured(_trace({"pattern": "closed", "concurrency": 2}),
                          LinearStepTime(base_s=0.01),
                          EngineConfig(num_kv_blocks=64, request_overhead_s=0.005))
    m = predicted_side(rep).means_s
    # The engine as in the next test (each user waits for its reply to reach it): r1 waits
    # 5 ms for the step at 0.105 (queue 5 ms / 4 requests); each prefill is one 10 ms step;
    # decode: two 10 ms steps each; and the 5 ms overhead comes before the first token.
    assert m["queue"] == pytest.approx(0.005 / 4)
    assert m["prefill"] == pytest.approx(0.010)
    assert m["steps"] == pytest.approx(0.020) and m["stalls"] == pytest.approx(0.0, abs=1e-12)
    assert m["front_overhead"] == pytest.approx(0.005) and m["overhead"] == pytest.approx(0.005)
    assert m["e2e"] == pytest.approx(0.035 + 0.005 / 4)


def test_a_replayed_user_sends_after_its_reply_reached_it() -> None:
    """With a per-request overhead (the reply reaches the client 5 ms after the engine's last
    token), a replayed user's next request leaves 5 ms later than the engine's end plus its
    measured pause: never before its own predicted reply arrived."""
    rep = replay_measured(_trace({"pattern": "closed", "concurrency": 2}),
                          LinearStepTime(base_s=0.01),
                          EngineConfig(num_kv_blocks=64, request_overhead_s=0.005))
    res = rep.result
    # By hand, every step 10 ms: r0 sent 0 -> engine tokens 0.01 0.02 0.03, at the client
    # 5 ms later (ends 0.035); r2 (user 0, pause 50 ms) sent 0.035 + 0.05 = 0.085 -> steps
    # 0.085-0.095, 0.095-0.105; r1 sent 0.10 (its measured first send) waits for the step
    # at 0.105, which ends 0.115 with r2's last token and r1's first -> r2 ends 0.115 + 0.005;
    # r1's tokens 0.115 0.125 0.135, ends 0.14 at the client; r3 (user 1, no pause) sent
    # 0.14 -> 0.15 0.16 0.17, ends 0.175.
    assert res.sent_s.tolist() == pytest.approx([0.0, 0.10, 0.085, 0.14])
    assert res.end_s.tolist() == pytest.approx([0.035, 0.14, 0.12, 0.175])
    # no user sends before its previous reply ended at the client
    assert res.sent_s[2] >= res.end_s[0] + 0.05 - 1e-12
    assert res.sent_s[3] >= res.end_s[1] - 1e-12
