"""Open-loop calibration pieces, against a hand-written engine, not the simulator.

- `open_loop_steps` / `open_loop_samples` recover the step times of a fake llama.cpp-like
  engine (known T_decode(B) per batch, prompts that join running decodes as a separate graph)
  from nothing but the client's chunk times of a Poisson run;
- `prefill_own_graph`: a mixed step costs T(decodes) + T(prompt), not T(decodes + prompt);
- `verify`'s per-point load (requests in flight, decoding) equals hand-computed averages.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ridgeline.calibrate.engine import calibrate_from_traces
from ridgeline.calibrate.probe import classify, open_loop_samples, open_loop_steps
from ridgeline.perf.step_time import BatchWork
from ridgeline.sim.calibrated_profile import CalibrationProfile, Scheduling

# Decode step by batch (non-monotonic, as llama.cpp with scattered slots), and a prompt graph.
T_DEC = {1: 0.030, 2: 0.034, 3: 0.052, 4: 0.058, 5: 0.070, 6: 0.075, 7: 0.080, 8: 0.060,
         9: 0.09, 10: 0.1, 11: 0.11, 12: 0.12}
T_PROMPT_PER_TOKEN_S = 0.0025


def fake_open_run(rate_req_s: float, n: int, prompt: int, output: int, seed: int,
                  jitter_s: float = 0.0005) -> tuple[list[dict], list[tuple[float, int, int]]]:
    """An engine loop: every step decodes all running streams and prefills every waiting
    prompt (own graph); each stream's chunk arrives at the step end (+ client jitter)."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate_req_s, n))
    recs = [{"type": "request", "id": str(i), "sent_s": float(a), "event_times_s": [],
             "prompt_tokens": prompt, "output_tokens": output, "status": "ok"}
            for i, a in enumerate(arrivals)]
    t, nxt, running, truth = 0.0, 0, [], []
    while nxt < n or running:
        waiting = [i for i in range(nxt, n) if arrivals[i] <= t]
        if not running and not waiting:
            t = float(arrivals[nxt])
            continue
        nxt += len(waiting)
        b = len(running)
        dt = (T_DEC[b] if b else 0.0) + len(waiting) * prompt * T_PROMPT_PER_TOKEN_S
        t += dt
        if b:
            truth.append((dt, b, len(waiting)))
        for i in running + waiting:
            recs[i]["event_times_s"].append(t + float(rng.uniform(0, jitter_s)))
        running = [i for i in running + waiting if len(recs[i]["event_times_s"]) < output]
        for i in set(range(n)) - set(running):
            if recs[i]["event_times_s"] and "end_s" not in recs[i] and \
                    len(recs[i]["event_times_s"]) == output:
                recs[i]["end_s"] = recs[i]["event_times_s"][-1]
    return recs, truth


def test_open_loop_steps_are_recovered_from_chunk_times() -> None:
    recs, truth = fake_open_run(0.8, 60, 32, 48, seed=3)
    got = open_loop_steps(recs)
    assert len(got) == len(truth)
    for (dt, b, new), (tdt, tb, tnew) in zip(got, truth, strict=True):
        assert (b, new) == (tb, tnew)
        assert dt == pytest.approx(tdt, abs=0.0006)     # the client jitter
    samples = {s.tokens: s for s in open_loop_samples(recs, "open")}
    assert samples, "no batch size had enough steps"
    for b, s in samples.items():
        assert s.step_s == pytest.approx(T_DEC[b], abs=0.0006), b
        assert s.samples >= 12


def test_unresolvable_steps_give_no_samples() -> None:
    recs, _ = fake_open_run(1.2, 30, 32, 24, seed=1)
    for r in recs:       # a 100x faster engine: steps below the client's resolution
        r["event_times_s"] = [x / 100 for x in r["event_times_s"]]
    assert open_loop_steps(recs) == [] and open_loop_samples(recs, "open") == []


def test_open_probe_replaces_lockstep_decode_in_the_fit(tmp_path: Path) -> None:
    recs, _ = fake_open_run(0.8, 60, 32, 48, seed=3)
    head = {"type": "header", "schema_version": 1, "source": "bench", "engine": "fake",
            "load": {"pattern": "open", "arrival": "poisson", "rate_req_s": 1.2}}
    op = tmp_path / "open.jsonl"
    op.write_text("\n".join(json.dumps(x) for x in [head, *recs]) + "\n")
    assert classify(head, recs)[0] == "open"
    # A lockstep probe at B=3 that saw a different (faster) slot layout: 0.040 s.
    ev = [0.1 + 0.040 * k for k in range(24)]
    lock = [{"type": "request", "id": str(i), "sent_s": 0.0, "event_times_s": ev,
             "end_s": ev[-1], "prompt_tokens": 32, "output_tokens": 24, "status": "ok"}
            for i in range(3)]
    lh = {"type": "header", "schema_version": 1, "source": "bench", "engine": "fake",
          "load": {"pattern": "closed", "concurrency": 3},
          "calibration_probe": {"kind": "decode", "batch": 3, "label": "decode-b3"}}
    lp = tmp_path / "b3.jsonl"
    lp.write_text("\n".join(json.dumps(x) for x in [lh, *lock]) + "\n")
    # One KV stream (-kvu): no slot model, the open-loop average replaces the lockstep T(3).
    prof = calibrate_from_traces([str(lp), str(op)], preset="llama.cpp", slots=8,
                                 kv_unified=True)
    assert not prof.scheduling.prefill_own_graph and not prof.scheduling.slot_graphs
    i3 = prof.tokens.index(3)
    assert prof.step_s[i3] == pytest.approx(T_DEC[3], abs=0.0006)   # open-loop, not 0.040
    assert any("replace the lockstep" in n for n in prof.fit_notes)
    # Per-slot KV (the default): the slot model times layouts itself, so T(3) stays the
    # (pinned, one-graph) lockstep probe's, and the open-loop steps are residuals only.
    ev1 = [0.1 + 0.025 * k for k in range(24)]
    lh1 = {**lh, "load": {"pattern": "closed", "concurrency": 1},
           "calibration_probe": {"kind": "decode", "batch": 1, "label": "decode-b1"}}
    lp1 = tmp_path / "b1.jsonl"
    lp1.write_text("\n".join(json.dumps(x) for x in [lh1, {**lock[0], "event_times_s": ev1,
                                                          "end_s": ev1[-1]}]) + "\n")
    slot = calibrate_from_traces([str(lp1), str(lp), str(op)], preset="llama.cpp", slots=8)
    assert slot.scheduling.slot_graphs and slot.scheduling.prefill_own_graph
    assert slot.step_s[slot.tokens.index(3)] == pytest.approx(0.040, abs=1e-9)
    assert any("not in the table" in n for n in slot.fit_notes)


def test_prefill_own_graph_step_time() -> None:
    tok, ts = [1, 4, 8, 64, 128], [0.03, 0.05, 0.06, 0.17, 0.33]
    one = CalibrationProfile.from_table(tok, ts, scheduling=Scheduling(preset="x"))
    own = CalibrationProfile.from_table(tok, ts, scheduling=Scheduling(
        preset="x", prefill_own_graph=True))
    mixed = BatchWork(prefill_tokens=128, decode_seqs=4)
    # One graph of 132 tokens: extrapolated 0.33 * 132/128; own graphs: T(4) + T(128).
    assert one.step_time_s(mixed) == pytest.approx(0.33 * 132 / 128)
    assert own.step_time_s(mixed) == pytest.approx(0.05 + 0.33)
    # Pure steps are unchanged by the flag.
    for w in (BatchWork(decode_seqs=4), BatchWork(prefill_tokens=64), BatchWork()):
        assert own.step_time_s(w) == one.step_time_s(w)


def test_verify_reports_in_flight_and_decoding(tmp_path: Path) -> None:
    from ridgeline.calibrate.verify import occupancy, verify
    from ridgeline.trace.importers import load_trace

    # Two requests: sent 0 and 5, first tokens at 1 and 6, done at 10; span 10 s.
    recs = [{"type": "request", "id": "a", "sent_s": 0.0, "event_times_s": [1.0, 4.0, 10.0],
             "end_s": 10.0, "prompt_tokens": 8, "output_tokens": 3, "status": "ok"},
            {"type": "request", "id": "b", "sent_s": 5.0, "event_times_s": [6.0, 8.0, 10.0],
             "end_s": 10.0, "prompt_tokens": 8, "output_tokens": 3, "status": "ok"}]
    head = {"type": "header", "schema_version": 1, "source": "bench",
            "load": {"pattern": "open", "arrival": "poisson", "rate_req_s": 0.2}}
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in [head, *recs]) + "\n")
    in_flight, decoding = occupancy(load_trace(str(p)))
    assert in_flight == pytest.approx((10 + 5) / 10)
    assert decoding == pytest.approx((9 + 4) / 10)
    prof = CalibrationProfile.from_table([1, 8], [0.5, 0.6])
    rep = verify([str(p)], prof)
    (ld,) = rep.loads
    assert ld.in_flight_measured == pytest.approx(1.5)
    assert ld.decoding_measured == pytest.approx(1.3)
    assert ld.in_flight_predicted > 0 and "loads" in rep.to_dict()


def test_capacity_of_a_llamacpp_like_engine() -> None:
    from ridgeline.calibrate.real_loop import capacity_req_s

    # T(8 decodes) = 0.06 s, T(129 prompt tokens) = 0.33 s, no attention term: each request
    # costs its prefill step plus 128/8 full-batch decode steps = 0.33 + 128 * 0.06 / 8.
    prof = CalibrationProfile.from_table([1, 8, 129], [0.03, 0.06, 0.33])
    assert capacity_req_s(prof, 8, 128, 128) == pytest.approx(1 / (0.33 + 0.96))
