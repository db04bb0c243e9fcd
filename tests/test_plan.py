"""`plan` on small searches: the chosen configuration meets the SLOs when simulated again with
another seed, and no cheaper configuration of the space does (every one simulated here,
pruned or not); Ray and local processes give the same answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.plan import PlanRequest, plan
from ridgeline.plan.execute import evaluate
from ridgeline.plan.search import Evaluated, pareto_front
from ridgeline.plan.space import Candidate
from ridgeline.sim.scenario import Scenario

CLI = str(Path(sys.executable).parent / "ridgeline")

REQ = PlanRequest(models=("llama-3.1-8b",), hardware=("l40s", "h100-sxm"), weights=("bf16",),
                  tp=(1, 2), max_num_seqs=(16, 128), max_num_batched_tokens=(2048,),
                  prompt="fixed:1500", output="fixed:150", rate_req_s=6.0,
                  slos=("ttft_ms<=800", "tpot_ms<=40"), goodput_target=0.95, headroom=0.2,
                  max_replicas=4, extra_replicas=1, requests=150, seed=0)


@pytest.fixture(scope="module")
def result():
    return plan(REQ, workers=2, headroom_details=False)


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


def test_chosen_meets_slos_with_another_seed(result):
    assert result.chosen is not None
    sc = result.chosen.candidate.scenario.replace(seed=7, rate_req_s=REQ.rate_req_s,
                                                  requests=300)
    assert evaluate(sc).meets(REQ.goodput_target)


def test_no_cheaper_configuration_meets_the_slos(result):
    cost = result.chosen.candidate.usd_per_hour
    cheaper = list(_all_shapes(REQ, cost))
    assert cheaper, "the space should hold cheaper configurations for the test to mean much"
    from ridgeline.plan.execute import run_all

    outs = run_all(cheaper, workers=2)
    passing = [sc for sc, o in zip(cheaper, outs, strict=True) if o.meets(REQ.goodput_target)]
    assert passing == []


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


def test_cli_plan_json_and_bad_input(tmp_path):
    args = [CLI, "plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", "1",
            "--max-num-seqs", "128", "--max-num-batched-tokens", "2048", "--rate", "4",
            "--prompt", "fixed:500", "--output", "fixed:100", "--slo", "ttft_ms<=1000",
            "--slo", "tpot_ms<=50", "-n", "100", "--workers", "1", "--max-replicas", "2",
            "--price", "h100-sxm=3", "--json"]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["chosen"]["usd_per_hour"] == 3.0
    h = out["chosen_headroom"]
    assert 0 < h["utilization"] < 1 and h["usd_per_million_output_tokens"] > 0
    for bad in (["--price", "h100-sxm"], ["--tp", "x"], ["--slo", "nope<=1"],
                ["--hardware", "nope-gpu"], ["--chunked-prefill", "maybe"]):
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
