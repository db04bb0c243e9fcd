"""End to end through the installed command: the emulator (timing = the simulator's) serves a
known calibration profile under a closed loop of 8 users; `ridgeline verify` of that trace
against the same profile with its decode steps priced 1.3x names the decode step first at
about +30%, and with its prefill steps priced 1.3x names the prefill. The closed-loop trace
is replayed as its users unless --open-loop."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.sim.calibrated_profile import CalibrationProfile, Scheduling

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
STEP_S = [0.010, 0.0105, 0.011, 0.012, 0.014, 0.016, 0.020, 0.025, 0.030, 0.050, 0.090, 0.170]
DECODE_MAX, PREFILL_MIN = 16, 256     # decode batches here stay <= 8; prompts are 512


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=timeout)


def _profile(path: Path, decode: float = 1.0, prefill: float = 1.0) -> Path:
    steps = [t * (decode if n <= DECODE_MAX else 1.0) * (prefill if n >= PREFILL_MIN else 1.0)
             for n, t in zip(TOKENS, STEP_S, strict=True)]
    CalibrationProfile.from_table(
        TOKENS, steps, kv_capacity_tokens=200_000,
        scheduling=Scheduling(preset="vllm", max_num_seqs=16, max_num_batched_tokens=2048),
    ).save(path)
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("explain")
    true = _profile(d / "true.json")
    trace = d / "run.jsonl"
    r = _run("bench", "--target", "emulator", "--calibration", str(true), "--concurrency", "8",
             "--requests", "40", "--prompt", "fixed:512", "--output", "fixed:64", "--trace",
             str(trace), "--seed", "3")
    assert r.returncode == 0, r.stderr[-2000:]
    return d, trace


def _verify_json(trace: Path, profile: Path, *extra: str) -> dict:
    v = _run("verify", str(trace), "--calibration", str(profile), "--json", *extra)
    assert v.returncode == 0, v.stdout[-2000:] + v.stderr[-2000:]
    return json.loads(v.stdout)


def test_mispriced_decode_step_is_named_first(run: tuple[Path, Path]) -> None:
    d, trace = run
    rep = _verify_json(trace, _profile(d / "decode13.json", decode=1.3))
    assert rep["replay"][0]["loop"] == "closed" and rep["replay"][0]["users"] == 8
    dec = rep["decomposition"][0]
    assert dec["culprit"] == "steps", dec["sentence"]
    assert 0.2 <= dec["culprit_relative"] <= 0.4, dec["sentence"]
    assert dec["sentence"].startswith("differs most: decode step +")
    # The JSON fields: one object per component, and the shares of the E2E difference add
    # up to 1 (the components add up to the E2E on each side).
    comps = {c["key"]: c for c in dec["components"]}
    assert set(comps) == {"queue", "prefill", "steps", "stalls", "overhead"}
    assert sum(c["share_of_e2e_difference"] for c in comps.values()) == pytest.approx(1.0)
    assert comps["steps"]["difference_ms"] == pytest.approx(
        comps["steps"]["predicted_ms"] - comps["steps"]["measured_ms"])
    # The measured side split queueing from prefill with the server's phase histograms.
    assert any("histograms" in s for s in dec["sources"]["measured"])


def test_mispriced_prefill_is_named_first(run: tuple[Path, Path]) -> None:
    d, trace = run
    rep = _verify_json(trace, _profile(d / "prefill13.json", prefill=1.3))
    dec = rep["decomposition"][0]
    assert dec["culprit"] == "prefill", dec["sentence"]
    assert dec["culprit_relative"] > 0.05, dec["sentence"]


def test_text_output_says_which_replay_and_names_the_component(run: tuple[Path, Path]) -> None:
    d, trace = run
    prof = _profile(d / "decode13b.json", decode=1.3)
    v = _run("verify", str(trace), "--calibration", str(prof), "--format", "plain")
    assert v.returncode == 0, v.stderr[-2000:]
    assert "replayed as closed loop: 8 users (from the trace header)" in v.stdout
    assert "differs most: decode step +" in v.stdout
    assert "share of E2E difference" in v.stdout
    o = _run("verify", str(trace), "--calibration", str(prof), "--format", "plain",
             "--open-loop")
    assert o.returncode == 0, o.stderr[-2000:]
    assert "replayed as open loop: the measured send times (--open-loop)" in o.stdout
    both = _run("verify", str(trace), "--calibration", str(prof), "--open-loop",
                "--closed-loop")
    assert both.returncode == 2 and both.stderr.startswith("error: --closed-loop/--open-loop")


def test_analyze_against_a_simulated_trace(run: tuple[Path, Path]) -> None:
    d, trace = run
    sim = d / "sim_decode13.jsonl"
    s = _run("simulate", "--calibration", str(_profile(d / "decode13c.json", decode=1.3)),
             "--concurrency", "8", "-n", "40", "--prompt", "fixed:512", "--output",
             "fixed:64", "--trace", str(sim))
    assert s.returncode == 0, s.stderr[-2000:]
    a = _run("analyze", str(trace), "--against", str(sim), "--json")
    assert a.returncode == 0, a.stderr[-2000:]
    dec = json.loads(a.stdout)["decomposition"]
    assert dec["culprit"] == "steps" and 0.2 <= dec["culprit_relative"] <= 0.4
    # A simulated trace file has no engine timestamps: both sides show time to first token.
    assert [c["key"] for c in dec["components"]] == ["ttft", "steps", "stalls", "overhead"]


def test_csv_and_json_formats_parse(run: tuple[Path, Path]) -> None:
    """`--format csv` is tables separated by blank lines, each with its header; every
    predicted/measured pair of the first table is the one `--json` reports."""
    d, trace = run
    prof = _profile(d / "same_csv.json")
    c = _run("verify", str(trace), "--calibration", str(prof), "--format", "csv")
    assert c.returncode == 0, c.stderr[-2000:]
    blocks = [b for b in c.stdout.strip().split("\n\n") if b.strip()]
    tables = [list(csv.DictReader(io.StringIO(b))) for b in blocks]
    assert len(tables) >= 3 and all(t for t in tables)
    first = {r["metric"]: r for r in tables[0]}
    assert {"ttft_p50", "tpot_p50", "e2e_p50"} <= set(first)
    assert any(r.get("component", "").startswith("decode steps") for t in tables for r in t)
    j = _run("verify", str(trace), "--calibration", str(prof), "--format", "json")
    assert j.returncode == 0, j.stderr[-2000:]
    doc = json.loads(j.stdout)
    assert isinstance(doc, (dict, list)) and doc
