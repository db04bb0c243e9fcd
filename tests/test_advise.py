"""`advise`: synthetic traces built to show one symptom each get that diagnosis first; a
healthy trace gets none. Traces come from the simulator through the scenario library."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.advise import advise, amdahl_time_factor, parse_prometheus
from ridgeline.sim.scenario import Scenario, run_scenario

CLI = str(Path(sys.executable).parent / "ridgeline")


def _trace(tmp_path: Path, name: str, **kw) -> Path:
    from ridgeline.commands.simulate import _write_trace

    sc = Scenario(seed=1, **kw)
    run = run_scenario(sc)
    path = tmp_path / f"{name}.jsonl"
    _write_trace(str(path), run.header, run.result)
    return path


def test_saturation_is_ttft_queueing_first(tmp_path):
    p = _trace(tmp_path, "sat", rate_req_s=40, requests=500, prompt="fixed:1000",
               output="fixed:200")
    adv = advise(p)
    assert adv.diagnoses[0] == "ttft_queueing"
    assert adv.facts["ttft_queue_share"] > 0.9


def test_memory_bound_decode_is_tpot_first(tmp_path):
    # An 8B model in bf16 on an L40S (864 GB/s) at a trickle: every decode step streams
    # 16 GB of weights, ~20 ms; intensity ~1 FLOP/B, far below the ridge.
    p = _trace(tmp_path, "mb", hardware="l40s", rate_req_s=0.5, requests=80,
               prompt="fixed:500", output="fixed:100")
    adv = advise(p, slos=["tpot_ms<=15"])
    assert adv.diagnoses == ["tpot_memory_bound"]
    f = adv.facts
    assert f["decode_intensity_flop_per_byte"] < f["ridge_flop_per_byte"]
    recs = {r.technique: r for r in adv.findings[0].recommendations}
    assert "speedup" not in recs  # names are techniques
    assert recs["weight-only quantization (fp8)"].predicted


def test_preemption_storm_is_memory_first(tmp_path):
    p = _trace(tmp_path, "pre", rate_req_s=20, requests=300, num_kv_blocks=300,
               prompt="fixed:1000", output="fixed:400")
    adv = advise(p)
    assert adv.diagnoses[0] == "memory_pressure"
    assert adv.facts["preemptions"] > 0


def test_interference_is_a_tail_finding(tmp_path):
    p = _trace(tmp_path, "int", rate_req_s=3, requests=250, chunked_prefill=False,
               prompt="uniform:min=100,max=8000", output="fixed:300")
    adv = advise(p, slos=["ttft_ms<=5000"])
    assert adv.diagnoses[0] == "tail_interference"
    assert adv.facts["itl_spikes_aligned_with_prefill"] > 0.9
    assert adv.findings[0].recommendations[0].technique == "chunked prefill"


def test_healthy_trace_gets_no_finding(tmp_path):
    p = _trace(tmp_path, "ok", rate_req_s=2, requests=200)
    adv = advise(p)
    assert adv.findings == []
    d = json.loads(adv.to_json())
    assert d["findings"] == [] and "No symptom" in adv.markdown()


def test_amdahl_and_prometheus():
    # Half the time sped up 2x: 0.5 + 0.25 = 0.75 of the old time.
    assert amdahl_time_factor(0.5, 2.0) == pytest.approx(0.75)
    text = ('# HELP x\nvllm:num_preemptions_total{model_name="m"} 3.0\n'
            'vllm:num_preemptions_total{model_name="n"} 4\nvllm:kv_cache_usage_perc 0.97\n')
    m = parse_prometheus(text)
    assert m["vllm:num_preemptions_total"] == 7 and m["vllm:kv_cache_usage_perc"] == 0.97


def test_metrics_file_shows_kv_pressure(tmp_path):
    p = _trace(tmp_path, "ok2", rate_req_s=2, requests=100)
    adv = advise(p, metrics_text="vllm:kv_cache_usage_perc 0.99\n")
    assert adv.diagnoses[0] == "memory_pressure"


def test_cli_json_and_bad_input(tmp_path):
    p = _trace(tmp_path, "cli", rate_req_s=2, requests=60)
    r = subprocess.run([CLI, "advise", str(p), "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["findings"] == []
    for args in (["advise", str(tmp_path / "missing.jsonl")],
                 ["advise", str(p), "--slo", "ttft<=bogus"],
                 ["advise", str(p), "--metrics", str(tmp_path / "none.txt")]):
        r = subprocess.run([CLI, *args], capture_output=True, text=True)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr
        assert [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
