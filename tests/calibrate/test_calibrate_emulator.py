"""End to end on a fake backend with a known step-time table: the emulator serving a known
profile. `ridgeline calibrate engine` probes it over HTTP through the bench client and must
recover the table (including the drop from 4 to 8 sequences); `ridgeline verify` then checks
a held-out closed-loop point. All through the installed console script.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.perf.step_time import BatchWork
from ridgeline.serve.launcher import EmulatorProcess
from ridgeline.sim.calibrated_profile import CalibrationProfile, Scheduling

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
KNOWN_TOKENS = [1, 2, 4, 8, 16, 64]
KNOWN_STEP_S = [0.020, 0.030, 0.060, 0.045, 0.080, 0.200]


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("known")
    prof = CalibrationProfile.from_table(
        KNOWN_TOKENS, KNOWN_STEP_S, kv_capacity_tokens=65536,
        scheduling=Scheduling(preset="llama.cpp", max_num_seqs=8, max_num_batched_tokens=2048))
    prof.save(d / "known.json")
    return d / "known.json"


def test_calibrate_recovers_known_table_then_verify(known: Path, tmp_path: Path) -> None:
    out = tmp_path / "fitted.json"
    with EmulatorProcess(extra_args=["--calibration", str(known)]) as emu:
        r = _run("calibrate", "engine", "--base-url", emu.base_url, "--batches", "1,2,4,8",
                 "--prompt-tokens", "8", "--output-tokens", "12", "--rounds", "2",
                 "--context-tokens", "0", "--prefill-tokens", "16,64", "--prefill-repeats",
                 "2", "--preset", "llama.cpp", "--kv-unified", "--out", str(out))
        assert r.returncode == 0, r.stderr[-2000:]
        held_out = tmp_path / "c3.jsonl"
        b = _run("bench", "--base-url", emu.base_url, "--concurrency", "3", "--requests", "9",
                 "--prompt", "fixed:8", "--output", "fixed:12", "--trace", str(held_out),
                 "--seed", "5")
        assert b.returncode == 0, b.stderr[-2000:]
    fitted = CalibrationProfile.load(out)
    known_prof = CalibrationProfile.load(known)
    # Every decode point within 15% of the known table (wall-clock noise of a shared box).
    for b in (1, 2, 4, 8):
        got = fitted.step_time_s(BatchWork(decode_seqs=b))
        want = known_prof.step_time_s(BatchWork(decode_seqs=b))
        assert got == pytest.approx(want, rel=0.15), (b, got, want)
    # The non-monotonic point survives calibration.
    assert fitted.step_time_s(BatchWork(decode_seqs=8)) < \
        0.85 * fitted.step_time_s(BatchWork(decode_seqs=4))
    # Prefill points: at whatever token count the emulator counted, the known table's value.
    for n, t in zip(fitted.tokens, fitted.step_s, strict=True):
        if n > 8:
            want = known_prof.step_time_s(BatchWork(prefill_tokens=n))
            assert t == pytest.approx(want, rel=0.2, abs=0.01), (n, t, want)
    # 5 lockstep/prefill points and the open-loop probe. The emulator serving a
    # one-graph table is a llama.cpp with one KV stream (--kv-unified): no slot model.
    assert len(fitted.provenance.probe_traces) == 6 + 1
    assert not fitted.scheduling.slot_graphs
    assert fitted.provenance.probe_traces[-1].point == "open-poisson"
    # verify: the held-out closed loop at 3, predicted by the fitted profile.
    v = _run("verify", str(held_out), "--calibration", str(out), "--bound", "tpot_p50=15%",
             "--json")
    assert v.returncode == 0, v.stdout + v.stderr
    rep = json.loads(v.stdout)
    tpot = next(r for r in rep["rows"] if r["metric"] == "tpot_p50")
    assert abs(tpot["error"]) <= 0.15 and tpot["point"] == "closed c=3"
    # A bound nothing can meet fails the installed command with exit 1, not a traceback.
    args = ["verify", str(held_out), "--calibration", str(out), "--bound", "tpot_p50=0.0001%"]
    v = _run(*args)
    assert "bounds exceeded: closed c=3 tpot_p50" in v.stdout and "Traceback" not in v.stderr
    assert v.returncode == 1, (v.returncode, v.stderr[-1000:])


def test_bad_input_exits_2(tmp_path: Path, known: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    for args in (["verify", str(bad), "--calibration", str(bad)],
                 ["verify", str(bad), "--calibration", str(known), "--bound", "foo=1"],
                 ["simulate", "--calibration", str(bad), "--rate", "1", "-n", "5"],
                 ["calibrate", "fit", str(bad), "--out", str(tmp_path / "o.json")],
                 ["calibrate", "engine", "--base-url", "http://127.0.0.1:9", "--preset", "x"]):
        r = _run(*args)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        assert "error:" in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_simulate_and_estimate_take_the_profile(known: Path) -> None:
    # Closed loop of one user, 5 tokens: TTFT is one prefill step of the prompt, TPOT T(1).
    r = _run("simulate", "--calibration", str(known), "--concurrency", "1", "-n", "3",
             "--prompt", "fixed:16", "--output", "fixed:5", "--json")
    assert r.returncode == 0, r.stderr
    lat = json.loads(r.stdout)["analysis"]["latency"]
    assert lat["ttft_ms"]["percentiles"]["p50"]["value"] == pytest.approx(80.0, rel=1e-6)
    assert lat["tpot_ms"]["percentiles"]["p50"]["value"] == pytest.approx(20.0, rel=1e-6)
    r = _run("estimate", "--calibration", str(known), "--batch", "4,8", "--prompt", "16",
             "--output", "5", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert [round(x["tpot_s"], 6) for x in rows] == [0.06, 0.045]


def test_bench_emulator_takes_the_profile(known: Path, tmp_path: Path) -> None:
    # One user: TPOT is T(1) = 20 ms of the known table on the wall clock (+ small overhead).
    r = _run("bench", "--target", "emulator", "--calibration", str(known), "--concurrency",
             "1", "--requests", "3", "--prompt", "fixed:16", "--output", "fixed:6",
             "--trace", str(tmp_path / "t.jsonl"), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    lat = json.loads(r.stdout)["analysis"]["latency"]
    assert lat["tpot_ms"]["percentiles"]["p50"]["value"] == pytest.approx(20.0, rel=0.25)
    r = _run("bench", "--calibration", str(known), "--requests", "1")
    assert r.returncode == 2 and "--calibration" in r.stderr
