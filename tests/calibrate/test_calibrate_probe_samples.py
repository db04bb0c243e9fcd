"""The llama.cpp probe's step samples and the profile fit's edges, by hand."""

from __future__ import annotations

import types

import pytest

from ridgeline.calibrate.fit import StepSample, fit_profile
from ridgeline.calibrate.probe import (
    ProbeDesign,
    classify,
    decode_sample,
    engine_decode_sample,
    open_rate_req_s,
    plan_points,
    prefill_sample,
)
from ridgeline.calibrate.slot_state import trace_start_unix_s
from ridgeline.sim.calibrated_profile import Scheduling


def test_engine_decode_sample_by_hand() -> None:
    # llama-server's timings: 5 tokens predicted in 40 ms are 4 decode steps of 10 ms; at
    # batch 2 with 100-token prompts the step reads 2 x (100 + 5 / 2) = 205 context pairs
    recs = [{"prompt_tokens": 100, "engine_timings": {"predicted_n": 5, "predicted_ms": 40.0}},
            {"prompt_tokens": 100, "engine_timings": {"predicted_n": 5, "predicted_ms": 48.0}},
            {"prompt_tokens": 100, "engine_timings": {"predicted_n": 2, "predicted_ms": 9.0}}]
    s = engine_decode_sample(recs, 2, "decode-b2")
    assert s is not None
    assert s.step_s == pytest.approx(0.011)          # median of 10 and 12 ms; n = 2 dropped
    assert s.pairs == pytest.approx(205.0) and s.samples == 2 and s.tokens == 2
    assert engine_decode_sample(recs[2:], 2, "x") is None


def test_prefill_sample_needs_every_prompt_length() -> None:
    # TTFT of a lone request is one step of its P tokens and P(P + 1) / 2 causal pairs
    recs = [{"sent_s": 0.0, "event_times_s": [0.05], "prompt_tokens": 64},
            {"sent_s": 1.0, "event_times_s": [1.07], "prompt_tokens": 64}]
    s = prefill_sample(recs, "prefill-p64")
    assert s is not None
    assert (s.tokens, s.pairs, s.step_s) == (64, 64 * 65 / 2, pytest.approx(0.06))
    # a record without its prompt length cannot say what the step held
    assert prefill_sample([*recs, {"sent_s": 2.0, "event_times_s": [2.1]}], "p") is None


def test_open_probe_rate_given_is_used_as_given() -> None:
    design = ProbeDesign(open_rate_req_s=3.5)
    assert open_rate_req_s(design, []) == 3.5      # no samples needed, none fitted


def test_open_probe_rate_aims_at_half_the_slots_by_hand() -> None:
    # Profile: 5 us per pair (the B = 1 pair at 100 and 500 pairs); T(4) = 40 ms;
    # T(65) = 80 ms - 5 us x 2145 = 69.275 ms. A 64-token prompt is one step of 65 tokens and
    # 64 x 65 / 2 = 2080 pairs (79.675 ms), then 64 decode steps at B = 8 / 2 = 4 (40 ms):
    # Little's law, 4 in flight / 2.639675 s = 1.5153 req/s.
    samples = [StepSample("decode-b1", 1, 100, 0.011, 9),
               StepSample("decode-b1-long", 1, 500, 0.013, 9),
               StepSample("decode-b4", 4, 400, 0.042, 9),
               StepSample("prefill-p65", 65, 65 * 66 / 2, 0.080, 3)]
    design = ProbeDesign(max_batch=8, open_prompt_tokens=64, open_output_tokens=64)
    life_s = (0.080 - 5e-6 * 2145 + 5e-6 * 2080) + 64 * 0.040
    assert open_rate_req_s(design, samples) == pytest.approx(4 / life_s, rel=1e-9)


def test_one_open_request_is_an_open_probe() -> None:
    kinds = [p.kind for p in plan_points(ProbeDesign(open_requests=1))]
    assert kinds.count("open") == 1
    assert "open" not in [p.kind for p in plan_points(ProbeDesign(open_requests=0))]


def test_decode_sample_with_exactly_three_clean_steps() -> None:
    # one stream (B = 1), events every 10 ms after a 32-token prompt: 3 clean decode gaps,
    # reading 32 + k context tokens at step k = 1..3 (median 34)
    recs = [{"prompt_tokens": 32, "event_times_s": [0.10, 0.11, 0.12, 0.13]}]
    s = decode_sample(recs, 1, "decode-b1")
    assert s is not None and s.samples == 3
    assert s.step_s == pytest.approx(0.010) and s.pairs == pytest.approx(34.0)


def test_classify_a_probe_trace_by_its_shape() -> None:
    closed = {"load": {"pattern": "closed", "concurrency": 2}}
    assert classify(closed, [{"output_tokens": 1}, {"output_tokens": 1}]) == (
        "prefill", 2, "prefill-c2")
    # output counts unknown: not evidence of one-token (prefill) requests
    assert classify(closed, [{}, {}]) == ("decode", 2, "decode-b2")
    assert classify({"load": {"pattern": "open", "rate_req_s": 2.0}}, []) == ("open", 0, "open")


def test_ubatch_equal_to_the_largest_probe_is_kept() -> None:
    samples = [StepSample("decode-b1", 1, 100, 0.010, 9), StepSample("decode-b4", 4, 400, 0.04, 9)]
    at = fit_profile(samples, scheduling=Scheduling(preset="llama.cpp", ubatch_tokens=4))
    assert at.scheduling.ubatch_tokens == 4
    above = fit_profile(samples, scheduling=Scheduling(preset="llama.cpp", ubatch_tokens=5))
    assert above.scheduling.ubatch_tokens is None   # beyond the probes: split off, noted


def test_trace_start_is_the_first_send_on_the_wall_clock() -> None:
    def trace(t0: float | None) -> object:
        return types.SimpleNamespace(header=types.SimpleNamespace(start_time_unix_s=t0),
                                     sent_s=[0.5, 0.2, float("nan")])

    assert trace_start_unix_s(trace(100.0)) == pytest.approx(100.2)
    assert trace_start_unix_s(trace(None)) is None
    assert trace_start_unix_s(trace(float("inf"))) is None
