"""Calibration recovers a known step-time table from fake probe traces.

The traces are written by hand from a known engine (a table T(n) with a non-monotonic point
at 8 tokens, a per-pair attention cost and lockstep batching), not by ridgeline's simulator,
so the fit is checked against independently derived numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ridgeline.calibrate.engine import calibrate_from_traces
from ridgeline.calibrate.fit import StepSample, fit_profile
from ridgeline.errors import RidgelineError
from ridgeline.perf.step_time import BatchWork
from ridgeline.sim.calibrated_profile import CalibrationProfile

# The fake engine: T(n) seconds for a step of n tokens (drop at 8, as llama.cpp on CPU).
TRUE_T = {1: 0.0116, 2: 0.0205, 3: 0.031, 4: 0.0427, 5: 0.033, 6: 0.030, 7: 0.028, 8: 0.0269,
          16: 0.040, 64: 0.120, 128: 0.230, 256: 0.450}
PER_PAIR_S = 2e-7


def true_step_s(n: int, pairs: float) -> float:
    return TRUE_T[n] + PER_PAIR_S * pairs


def _header(kind: str, batch: int, label: str) -> dict:
    return {"type": "header", "schema_version": 1, "source": "bench", "model": "fake",
            "engine": "fake-llama", "load": {"pattern": "closed", "concurrency": batch},
            "calibration_probe": {"kind": kind, "batch": batch, "label": label}}


def write_decode_trace(path: Path, batch: int, prompt: int, output: int, rounds: int,
                       rng: np.random.Generator, jitter: float = 0.0) -> None:
    """B streams in lockstep: one batched prefill, then one decode step per token."""
    recs, t = [], 0.0
    for r in range(rounds):
        sent = t
        t += TRUE_T[16] * batch * prompt / 16 + 0.001     # some prefill time
        events = [t]
        for k in range(1, output):
            t += true_step_s(batch, batch * (prompt + k)) * (1 + jitter * rng.standard_normal())
            events.append(t)
        for b in range(batch):
            recs.append({"type": "request", "id": f"{r}-{b}", "sent_s": sent,
                         "event_times_s": events, "end_s": t, "prompt_tokens": prompt,
                         "output_tokens": output, "status": "ok"})
        t += 0.002
    _write(path, _header("decode" if prompt < 100 else "context", batch,
                         f"decode-b{batch}" if prompt < 100 else "context-b1"), recs)


def write_prefill_trace(path: Path, prompt: int, repeats: int) -> None:
    recs, t = [], 0.0
    for i in range(repeats):
        first = t + true_step_s(prompt, prompt * (prompt + 1) / 2)
        recs.append({"type": "request", "id": str(i), "sent_s": t, "event_times_s": [first],
                     "end_s": first, "prompt_tokens": prompt, "output_tokens": 1,
                     "status": "ok"})
        t = first + 0.01
    _write(path, _header("prefill", 1, f"prefill-p{prompt}"), recs)


def _write(path: Path, header: dict, recs: list[dict]) -> None:
    path.write_text("\n".join(json.dumps(x) for x in [header, *recs]) + "\n")


def fake_probe(tmp_path: Path, jitter: float = 0.0) -> list[str]:
    rng = np.random.default_rng(1)
    paths = []
    for b in range(1, 9):
        p = tmp_path / f"d{b}.jsonl"
        write_decode_trace(p, b, 32, 24, 2, rng, jitter)
        paths.append(str(p))
    p = tmp_path / "ctx.jsonl"
    write_decode_trace(p, 1, 400, 24, 2, rng, jitter)
    paths.append(str(p))
    for n in (16, 64, 128, 256):
        p = tmp_path / f"p{n}.jsonl"
        write_prefill_trace(p, n, 3)
        paths.append(str(p))
    return paths


def test_fit_recovers_known_table_and_attention_cost(tmp_path: Path) -> None:
    prof = calibrate_from_traces(fake_probe(tmp_path), preset="llama.cpp", n_ubatch=256)
    assert prof.tokens == sorted(TRUE_T)
    assert prof.per_pair_s == pytest.approx(PER_PAIR_S, rel=1e-6)
    for n, t in zip(prof.tokens, prof.step_s, strict=True):
        assert t == pytest.approx(TRUE_T[n], rel=1e-6), n
    # The drop after 4 is kept: step at 8 sequences faster than at 4 (non-monotonic).
    t4 = prof.step_time_s(BatchWork(decode_seqs=4, decode_context_tokens=4 * 40))
    t8 = prof.step_time_s(BatchWork(decode_seqs=8, decode_context_tokens=8 * 40))
    assert t8 < t4 * 0.7
    assert max(abs(r.rel_error) for r in prof.residuals) < 1e-6
    assert prof.scheduling.max_num_seqs == 8 and prof.provenance.probe_traces
    assert all(len(r.sha256) == 64 for r in prof.provenance.probe_traces)


def test_fit_with_noise_stays_close(tmp_path: Path) -> None:
    prof = calibrate_from_traces(fake_probe(tmp_path, jitter=0.03))
    for n, t in zip(prof.tokens, prof.step_s, strict=True):
        assert t == pytest.approx(TRUE_T[n], rel=0.05), n


def test_interpolation_ubatch_and_extrapolation_warning() -> None:
    prof = CalibrationProfile.from_table([1, 4, 8, 512], [0.01, 0.04, 0.03, 0.5])
    # Linear between probes: halfway from 4 to 8.
    assert prof.step_time_s(BatchWork(decode_seqs=6)) == pytest.approx(0.035)
    assert prof.step_time_s(BatchWork()) == 0.0
    assert prof.extrapolated_steps == 0
    # Beyond the largest probe without a ubatch: proportional, counted, and said.
    assert prof.step_time_s(BatchWork(prefill_tokens=1024)) == pytest.approx(1.0)
    assert prof.extrapolated_steps == 1
    assert "WARNING" in prof.assumptions()[-1]
    # With a ubatch of 512 (llama.cpp): 1100 tokens = 2 graphs of 512 + one of 76.
    sched = prof.scheduling.model_copy(update={"ubatch_tokens": 512})
    p2 = CalibrationProfile.from_table([1, 4, 8, 512], [0.01, 0.04, 0.03, 0.5],
                                       scheduling=sched)
    t76 = 0.03 + (0.5 - 0.03) * (76 - 8) / (512 - 8)
    assert p2.step_time_s(BatchWork(prefill_tokens=1100)) == pytest.approx(2 * 0.5 + t76)
    assert p2.extrapolated_steps == 0
    # Vectorized: arrays in, arrays out.
    out = prof.step_time_s(BatchWork(decode_seqs=np.array([0, 1, 4]),
                                     decode_context_tokens=np.zeros(3)))
    assert out.tolist() == [0.0, 0.01, 0.04]


def test_profile_round_trip_and_bad_files(tmp_path: Path) -> None:
    prof = fit_profile([StepSample("a", 1, 10, 0.01), StepSample("b", 2, 20, 0.015)])
    path = tmp_path / "p.json"
    prof.save(path)
    again = CalibrationProfile.load(path)
    assert again.step_s == prof.step_s and again.tokens == [1, 2]
    (tmp_path / "bad.json").write_text('{"kind": "other"}')
    with pytest.raises(RidgelineError, match=r"--calibration: .* is not a calibration profile"):
        CalibrationProfile.load(tmp_path / "bad.json")
    obj = json.loads(path.read_text())
    obj["step_s"] = [0.01, -1]
    (tmp_path / "neg.json").write_text(json.dumps(obj))
    with pytest.raises(RidgelineError, match=r"--calibration: .*step_s"):
        CalibrationProfile.load(tmp_path / "neg.json")
    with pytest.raises(RidgelineError, match=r"--calibration: file .* not found"):
        CalibrationProfile.load(tmp_path / "missing.json")
