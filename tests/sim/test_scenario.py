"""The typed scenario (ridgeline.sim.scenario) and the engine what-ifs (ridgeline.perf.whatif)."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from ridgeline.commands import simulate as sim_cmd
from ridgeline.errors import RidgelineError
from ridgeline.perf.step_time import BatchWork, LinearStepTime
from ridgeline.perf.whatif import WhatIf, WhatIfStepTime, expected_tokens_per_step
from ridgeline.sim import scenario as scn
from ridgeline.sim import scenario_run as scr
from ridgeline.sim.sweep import sweep_rates


def test_command_defaults_are_the_library_defaults():
    assert sim_cmd.DEFAULT_PROMPT == scn.DEFAULT_PROMPT
    assert sim_cmd.DEFAULT_OUTPUT == scn.DEFAULT_OUTPUT


def test_scenario_is_picklable_and_runs():
    sc = scn.Scenario(requests=40, prompt="fixed:100", output="fixed:10", rate_req_s=2.0,
                      slos=("ttft_ms<=500",), whatif=WhatIf(spec_k=2))
    sc2 = pickle.loads(pickle.dumps(sc))
    assert sc2 == sc
    run = scr.run_scenario(sc2)
    s = run.summary()
    assert s["finished"] == 40 and s["requests"] == 40
    assert run.header.engine_config["whatif"]["spec_k"] == 2
    assert run.sweep_point().attainment == pytest.approx(1.0)


def test_rate_sweep_knee_and_best_rate():
    sc = scn.Scenario(requests=150, prompt="fixed:500", output="fixed:50",
                      slos=("ttft_ms<=1000",))
    sw = scr.rate_sweep(sc, [2.0, 200.0])
    assert sw.rates == [2.0, 200.0]
    assert sw.knee_rate_req_s == 2.0 and sw.max_rate_meeting_slos_req_s == 2.0
    assert sw.to_dict()["slos"] == ["ttft_ms<=1000"]


class _ConstantStep(LinearStepTime):
    """Every busy step takes base_s, whatever it holds (a closed form for the capacity)."""

    def describe(self) -> dict:
        return {}

    def assumptions(self) -> list:
        return []


@pytest.mark.parametrize("replicas", [1, 3])
def test_probe_capacity_is_the_saturation_throughput_by_hand(replicas):
    # Constant 10 ms steps, 8 slots per replica, every running sequence gains one token per
    # step (the prefill step gives the first): a request with N output tokens holds a slot
    # for N steps. Saturated, the slots never idle, so mu = replicas x 8 / (E[N] x 10 ms)
    # = 25 req/s per replica for N uniform on 8..56 (mean 32). A burst of the same requests
    # over its makespan (the old probe) counts the drain too and reads low.
    from ridgeline.sim.cluster import ClusterConfig
    from ridgeline.sim.engine import EngineConfig

    sc = scn.Scenario(max_num_seqs=8, max_num_batched_tokens=512, prompt="fixed:16",
                      output="uniform:min=8,max=56", replicas=replicas)
    built = scn.Built(_ConstantStep(base_s=0.01),
                      EngineConfig(max_num_seqs=8, max_num_batched_tokens=512,
                                   num_kv_blocks=4096), ClusterConfig(replicas=replicas))
    assert scr.capacity_probe_users(sc, built) == math.ceil(1.25 * 8 * replicas) + 8
    assert scr.probe_capacity(sc, built) == pytest.approx(25.0 * replicas, rel=0.015)
    sw = scr.rate_sweep(sc.replace(requests=200), built=built, keep_runs=False)
    assert sw.capacity_req_s == scr.probe_capacity(sc.replace(requests=200), built)
    assert sw.rates == sweep_rates(sw.capacity_req_s)
    assert sw.to_dict()["capacity_req_s"] == sw.capacity_req_s


@pytest.mark.parametrize("k,alpha", [(1, 0.5), (4, 0.8), (7, 0.3), (3, 0.0)])
def test_speculative_tokens_closed_form(k, alpha):
    # sum_{i=0..k} alpha^i: token i+1 is produced when the first i drafts are all accepted.
    assert expected_tokens_per_step(k, alpha) == pytest.approx(sum(alpha**i for i in
                                                                   range(k + 1)))
    assert expected_tokens_per_step(k, 1.0) == k + 1


def test_speculative_step_time_by_hand():
    base = LinearStepTime(base_s=0.01, per_prefill_token_s=1e-4, per_context_token_s=1e-6)
    m = WhatIfStepTime(base, WhatIf(spec_k=3, spec_alpha=0.5))
    # Decode-only step, 4 sequences, 4000 context tokens: verify = 16 tokens on 4000 KV.
    verify_s = 0.01 + 1e-4 * 16 + 1e-6 * 4000
    e = (1 - 0.5**4) / (1 - 0.5)
    t = m.step_time_s(BatchWork(decode_seqs=4, decode_context_tokens=4000))
    assert t == pytest.approx(verify_s / e)
    # Draft model charged k decode steps per round.
    draft = LinearStepTime(base_s=0.002, per_decode_seq_s=1e-5)
    m2 = WhatIfStepTime(base, WhatIf(spec_k=3, spec_alpha=0.5), draft)
    t2 = m2.step_time_s(BatchWork(decode_seqs=4, decode_context_tokens=4000))
    assert t2 == pytest.approx((verify_s + 3 * (0.002 + 4e-5)) / e)
    # An idle step stays 0 s; arrays broadcast.
    assert m.step_time_s(BatchWork()) == 0.0
    arr = m.step_time_s(BatchWork(decode_seqs=np.array([4, 4]),
                                  decode_context_tokens=np.array([4000, 4000])))
    assert np.allclose(arr, verify_s / e)


def test_cpu_stages_add_to_the_step():
    base = LinearStepTime(base_s=0.01)
    m = WhatIfStepTime(base, WhatIf(cpu_tokenize_us_per_token=2.0,
                                    cpu_detokenize_us_per_event=50.0))
    w = BatchWork(prefill_tokens=1000, prefill_seqs=1, decode_seqs=9)
    assert m.step_time_s(w) == pytest.approx(0.01 + 1000 * 2e-6 + 10 * 50e-6)


def test_eager_mode_raises_kernel_overhead():
    a = scn.Scenario().step_model()
    b = scn.Scenario(whatif=WhatIf(enforce_eager=True)).step_model()
    assert b.kernel_overhead_s == pytest.approx(4 * a.kernel_overhead_s)


def test_whatif_validation():
    for bad in (WhatIf(spec_k=-1), WhatIf(spec_alpha=1.5), WhatIf(spec_draft_model="x")):
        with pytest.raises(RidgelineError):
            bad.validate()
    assert not math.isnan(expected_tokens_per_step(0, 0.5))


def test_estimate_and_simulate_take_the_whatif_flags():
    import json

    from typer.testing import CliRunner

    from ridgeline.cli import app
    from ridgeline.perf.roofline_step import RooflineStepTime

    runner = CliRunner()
    base = json.loads(runner.invoke(app, ["estimate", "-b", "1", "--json"]).stdout)["result"]
    r = runner.invoke(app, ["estimate", "-b", "1", "--json", "--spec-k", "3",
                            "--spec-alpha", "1.0"])
    assert r.exit_code == 0, r.output
    spec = json.loads(r.stdout)["result"]
    # alpha = 1: every round yields k + 1 = 4 tokens; the round is one verify pass of 4
    # tokens on the mean context, logits for all 4 positions (prefill_seqs counts logit rows),
    # so TPOT = t_verify / 4 (TTFT unchanged).
    m = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
    t_ctx = base["decode_context_tokens"]
    verify = BatchWork(prefill_tokens=4, prefill_attn_pairs=4 * t_ctx + 4 * 5 / 2,
                       prefill_context_tokens=t_ctx, prefill_seqs=4)
    assert spec["tpot_s"] == pytest.approx(m.step_time_s(verify) / 4)
    assert spec["ttft_s"] == pytest.approx(base["ttft_s"])
    r = runner.invoke(app, ["simulate", "--rate", "2", "-n", "30", "--json",
                            "--cpu-detokenize-us-per-event", "1000"])
    assert r.exit_code == 0, r.output
    tpot = json.loads(r.stdout)["analysis"]["latency"]["tpot_ms"]["percentiles"]["p50"]["value"]
    r0 = runner.invoke(app, ["simulate", "--rate", "2", "-n", "30", "--json"])
    tpot0 = json.loads(r0.stdout)["analysis"]["latency"]["tpot_ms"]["percentiles"]["p50"][
        "value"]
    assert tpot - tpot0 >= 1.0   # at least one event's 1 ms per decode step


def test_run_scenario_without_samples_has_the_same_figures():
    """`keep_samples=False` (what `simulate` asks for without --report) leaves the pooled ITL
    samples out and changes no figure: the analysis equals the full one, key for key."""
    import json

    sc = scn.Scenario(requests=400, rate_req_s=40.0, slos=("ttft_ms<=200",), seed=3)
    built = scn.Built.of(sc)
    full = scr.run_scenario(sc, built=built)
    lean = scr.run_scenario(sc, built=built, keep_samples=False)
    assert "itl_ms" in full.analysis.samples and "itl_ms" not in lean.analysis.samples
    assert full.analysis.latency["itl_ms"].count > 10 * full.summary()["finished"]
    assert json.dumps(lean.analysis.to_dict()) == json.dumps(full.analysis.to_dict())
    assert lean.summary()["finished"] == full.summary()["finished"] == 400


def test_simulate_keeps_the_itl_samples_only_for_the_report(monkeypatch, tmp_path):
    """The report's CDF plots read the pooled ITL samples: `simulate --report` keeps them,
    a plain `simulate` does not build them."""
    from typer.testing import CliRunner

    from ridgeline.cli import app
    from ridgeline.commands import report as report_cmd

    seen: dict[str, bool] = {}

    def fake_report(runs, step_model, out):
        seen["report"] = "itl_ms" in runs[0].analysis.samples
        return out

    def fake_one(run, step_model, json_out, *_):
        seen["plain"] = "itl_ms" in run.analysis.samples

    monkeypatch.setattr(report_cmd, "write_report_for_simulation", fake_report)
    args = ["simulate", "--rate", "5", "--requests", "40", "--prompt", "fixed:100",
            "--output", "fixed:10"]
    r = CliRunner().invoke(app, [*args, "--report", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    monkeypatch.setattr(sim_cmd, "_report_one", fake_one)
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert seen == {"report": True, "plain": False}
