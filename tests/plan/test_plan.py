"""`plan` on small searches: the chosen configuration meets the target when simulated again,
independently, with many requests on new seeds; every cheaper configuration of the space was
ruled out for a reason that holds (pruned or screened out: fails a long run too; verified:
its interval's lower end is under the target); the cost per million tokens, the capacity and
the knee agree with hand computations and with `ridgeline simulate`; Ray and local processes
give the same answer."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.plan import PlanRequest, plan
from ridgeline.plan.search import Evaluated, pareto_front
from ridgeline.plan.space import Candidate
from ridgeline.sim.scenario import Scenario
from ridgeline.sim.scenario_run import run_scenario

CLI = str(Path(sys.executable).parent / "ridgeline")

# plan's worked search, smaller: one batch cap, at most 2 replicas. Under the old
# perf model its cheapest screen survivor, L40S with P/D 1:1 ($1.80/h), met 100% of 200
# requests and missed the 99% target in long runs (91.5% and 97.9% of 6,000 requests at
# 10.8 req/s).
REQ = PlanRequest(models=("llama-3.1-8b",), hardware=("l40s", "h100-sxm"), weights=("bf16",),
                  tp=(1, 2), max_num_seqs=(256,), max_num_batched_tokens=(2048,),
                  prompt="fixed:1200", output="fixed:180", rate_req_s=9.0,
                  slos=("ttft_ms<=1000", "tpot_ms<=45"), goodput_target=0.99, headroom=0.2,
                  max_replicas=2, extra_replicas=1, requests=200, seed=0)


@pytest.fixture(scope="module")
def result():
    return plan(REQ, workers=2)


def _all_shapes(req: PlanRequest, max_cost: float):
    """Every configuration of the space cheaper than max_cost (cluster shapes included)."""
    for hw in req.hardware:
        price = req.price_of(hw)
        for tp in req.tp:
            for mns in req.max_num_seqs:
                for mbt in req.max_num_batched_tokens:
                    for n in range(1, req.max_replicas + 1):
                        if n * tp * price >= max_cost - 1e-9:
                            break
                        shapes = [(n, None)] + ([(1, (p, n - p)) for p in range(1, n)]
                                                if req.pd else [])
                        for reps, pd in shapes:
                            yield Scenario(model=req.models[0], hardware=hw, tp=tp,
                                           max_num_seqs=mns, max_num_batched_tokens=mbt,
                                           replicas=reps, pd=pd, prompt=req.prompt,
                                           output=req.output, requests=req.requests,
                                           rate_req_s=req.planning_rate_req_s,
                                           slos=req.slos, seed=req.seed)


def test_chosen_meets_the_target_resimulated_independently(result):
    # The bar: the library entry point `ridgeline simulate` calls, 6,000 requests at
    # 10.8 req/s (the planning rate), on two seeds plan never used (screen 0; verify 1, 2).
    # Choosing the cheapest screen survivor (the old rule) fails this: 91.5%, 97.9%.
    assert result.chosen is not None
    assert result.verify_seeds == (1, 2) and result.verify_requests == 6086
    for seed in (101, 202):
        sc = result.chosen.candidate.scenario.replace(seed=seed, requests=6000,
                                                      rate_req_s=10.8)
        g = run_scenario(sc).analysis.goodput
        assert g.judged_requests > 5900 and g.attainment >= REQ.goodput_target, (seed, g)


# L40S only, up to 3 replicas: the cheapest screen survivor (tp=1, P/D 1:2, $2.70/h: 98.5% of
# the 200 screen requests, its Wilson upper end above 99%) misses the target in the long runs
# under the fitted kernel model (~91% and ~95% of 6,086 requests).
# 8.5 req/s: the cheapest screen survivor ($2.70/h) fails the long runs under the measured
# L40S kernels (from 9 req/s the $2.70/h shapes no longer survive the screen, and the first
# survivor passes).
REQ_L40S = dataclasses.replace(REQ, hardware=("l40s",), max_replicas=3, rate_req_s=8.5)


@pytest.fixture(scope="module")
def result_l40s():
    return plan(REQ_L40S, workers=2)


def test_a_screen_winner_that_fails_verification_is_not_chosen(result_l40s):
    # The cheapest survivor of the screen fails the long runs; the choice falls to the next
    # one, and two runners-up are verified after it.
    result = result_l40s
    first = result.verified[0]
    assert first.outcome.could_meet(REQ_L40S.goodput_target)   # it survived the screen
    assert first.verification is not None
    assert not first.verification.meets(REQ_L40S.goodput_target)
    assert result.chosen is not None and result.chosen is not first
    assert first.candidate.usd_per_hour < result.chosen.candidate.usd_per_hour
    assert result.chosen.verification.meets(REQ_L40S.goodput_target)
    i = result.verified.index(result.chosen)
    assert len(result.verified) - 1 - i == 2
    for run in result.chosen.verification.runs:
        assert run.requests == 6086 and run.ci_low >= REQ_L40S.goodput_target
        assert run.rate_req_s == pytest.approx(REQ_L40S.planning_rate_req_s)


def test_every_cheaper_configuration_was_ruled_out_for_a_reason_that_holds(result):
    cost = result.chosen.candidate.usd_per_hour
    cheaper = list(_all_shapes(REQ, cost))
    assert len(cheaper) >= 4, "the space should hold cheaper configurations"
    by_scenario = {e.candidate.scenario: e for e in result.simulated}
    long_runs = []
    for sc in cheaper:
        e = by_scenario.get(sc)
        if e is not None and e.outcome.could_meet(REQ.goodput_target):
            # survived the screen: it was verified (it is cheaper) and failed
            assert e.verification is not None and not e.verification.meets(REQ.goodput_target)
        else:
            long_runs.append(sc.replace(requests=2000, seed=7))
    assert long_runs
    from ridgeline.plan.execute import run_all

    # pruned or screened out: a long run on another seed misses the target too
    for sc, o in zip(long_runs, run_all(long_runs, workers=2), strict=True):
        assert not o.meets(REQ.goodput_target), sc


def test_cost_per_million_tokens_is_the_offered_rate_by_hand(result):
    # $/hour / (3600 s x 9 req/s x 180 tokens / 1e6): the offered load, not a run's throughput
    d = result.details
    usd = result.chosen.candidate.usd_per_hour
    assert d.mean_output_tokens == 180.0
    assert d.usd_per_million_output_tokens == pytest.approx(
        usd / (3600 * 9.0 * 180 / 1e6), rel=1e-12)
    assert d.offered_output_tok_s == pytest.approx(1620.0)


def test_capacity_and_knee_are_simulates(result, tmp_path):
    # The same definitions: `ridgeline simulate --rate sweep` on the chosen configuration
    # (1,522 requests per rate, plan's sweep seed) finds the same knee; its capacity is
    # probe_capacity's and above the planning rate the configuration was verified at.
    from ridgeline.sim.scenario_run import probe_capacity

    d = result.details
    sc = result.chosen.candidate.scenario
    assert d.capacity_req_s == probe_capacity(sc.replace(seed=d.sweep_seed))
    assert d.utilization == pytest.approx(REQ.rate_req_s / d.capacity_req_s)
    assert d.planning_utilization < 1.0
    shape = ["--pd", f"{sc.pd[0]}:{sc.pd[1]}"] if sc.pd else ["--replicas", str(sc.replicas)]
    r = subprocess.run(
        [CLI, "simulate", "--hardware", sc.hardware, "--tp", str(sc.tp),
         "--max-num-seqs", str(sc.max_num_seqs),
         "--max-num-batched-tokens", str(sc.max_num_batched_tokens), *shape,
         "--prompt", REQ.prompt, "--output", REQ.output, "--rate", "sweep",
         "-n", str(d.sweep_requests), "--seed", str(d.sweep_seed),
         *[a for s in REQ.slos for a in ("--slo", s)], "--json"],
        capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [p["rate_req_s"] for p in out["sweep"]] == d.sweep_rates_req_s
    assert out["knee_rate_req_s"] == d.knee_rate_req_s


def test_rejected_families_say_why(result):
    r = plan(REQ.replace(models=("llama-3.1-70b",), hardware=("l40s",)), workers=1)
    assert r.chosen is None and not r.simulated
    assert set(r.rejected_families) == {"llama-3.1-70b on l40s, bf16, tp=1",
                                        "llama-3.1-70b on l40s, bf16, tp=2"}
    assert all("memory" in why for why in r.rejected_families.values())
    assert "No configuration" in r.markdown()
    d = result.to_dict()
    assert d["chosen"]["usd_per_hour"] == result.chosen.candidate.usd_per_hour
    assert d["space_size"] == len(result.simulated) + len(result.pruned)


def test_pareto_front_by_hand():
    from ridgeline.plan.execute import Outcome

    def ev(tok_s, gpus, tpot_ms):
        c = Candidate(Scenario(tp=gpus), "f", 1.0)
        return Evaluated(c, Outcome(1.0, 1.0, tok_s, 1.0, tpot_ms, tpot_ms, 0, 0, 10))

    a, b, c, d = ev(1000, 1, 20), ev(1000, 2, 10), ev(900, 2, 20), ev(1000, 4, 5)
    # per GPU: a 1000, b 500, c 450, d 250; per user: a 50, b 100, c 50, d 200
    assert pareto_front([a, b, c, d]) == [a, b, d]


def test_ray_and_local_agree(result):
    pytest.importorskip("ray")
    r = plan(REQ, ray_address="local", headroom_details=False)
    assert r.chosen.candidate == result.chosen.candidate
    assert [e.outcome for e in r.simulated] == [e.outcome for e in result.simulated]
    assert [e.verification for e in r.verified] == [e.verification for e in result.verified]


def test_cli_plan_json_and_bad_input(tmp_path):
    args = [CLI, "plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", "1",
            "--max-num-seqs", "128", "--max-num-batched-tokens", "2048", "--rate", "4",
            "--prompt", "fixed:500", "--output", "fixed:100", "--slo", "ttft_ms<=1000",
            "--slo", "tpot_ms<=50", "-n", "100", "--workers", "1", "--max-replicas", "1",
            "--price", "h100-sxm=3", "--goodput-target", "0.95", "--no-pd", "--json"]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["chosen"]["usd_per_hour"] == 3.0 and out["partial"] is False
    d = out["chosen_details"]
    # $3/hour over 3600 s x 4 req/s x 100 tokens = 1.44 M tokens per hour
    assert d["usd_per_million_output_tokens"] == pytest.approx(3.0 / 1.44, rel=1e-12)
    assert d["utilization"] == pytest.approx(4.0 / d["capacity_req_s"])
    v = out["verification"]
    assert v["requests"] == 1168 and v["seeds"] == [1, 2]
    runs = out["chosen"]["verification"]["runs"]
    assert [x["seed"] for x in runs] == [1, 2]
    assert all(x["requests"] == 1168 and x["ci_low"] >= 0.95 for x in runs)
    for bad in (["--price", "h100-sxm"], ["--tp", "x"], ["--slo", "nope<=1"],
                ["--hardware", "nope-gpu"], ["--chunked-prefill", "maybe"],
                ["--goodput-target", "1"], ["--verify-requests", "0"]):
        r = subprocess.run([CLI, "plan", "--slo", "ttft_ms<=500", "--workers", "1", *bad],
                           capture_output=True, text=True)
        assert r.returncode == 2, (bad, r.stderr)
        assert "Traceback" not in r.stderr
        assert [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]


def test_plot_is_written(result, tmp_path):
    pytest.importorskip("matplotlib")
    from ridgeline.plan.search import plot_pareto

    out = tmp_path / "pareto.png"
    plot_pareto(result, str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
