"""Every family `plan` searched is in its text output with why it lost; at equal $/hour the
configuration with more SLO slack is chosen, and the tied candidates are verified;
--verify-requests below the floor runs with a warning."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.plan import PlanRequest, plan
from ridgeline.plan.execute import Outcome
from ridgeline.plan.families import VERDICTS, pruned_kind
from ridgeline.plan.recheck import Verification, VerifyRun
from ridgeline.plan.search import Evaluated, PlanResult, _verify
from ridgeline.plan.space import Candidate
from ridgeline.sim.scenario import Scenario

CLI = str(Path(sys.executable).parent / "ridgeline")

# Llama 3.1 8B on two GPUs, two precisions, TP 1-2; L40S at $0.90 and H100 at $2.50 per
# GPU-hour (the catalog); 70B on an L40S, whose bf16 weights (70.6e9 x 2 bytes = 141 GB)
# exceed its 48 GB even at TP 2 (70.6 GB per GPU).
REQ = PlanRequest(models=("llama-3.1-8b", "llama-3.1-70b"), hardware=("l40s", "h100-sxm"),
                  weights=("bf16", "fp8"), tp=(1, 2), max_num_seqs=(128,),
                  max_num_batched_tokens=(2048,), prompt="fixed:500", output="fixed:100",
                  rate_req_s=4.0, slos=("ttft_ms<=1000", "tpot_ms<=50"),
                  goodput_target=0.95, max_replicas=2, extra_replicas=0, pd=False,
                  requests=100)


@pytest.fixture(scope="module")
def result():
    return plan(REQ, workers=2, headroom_details=False)


def test_every_family_has_one_row_with_a_verdict_and_is_in_the_text(result):
    fams = [f"{m} on {hw}, {w}, tp={tp}" for m in REQ.models for hw in REQ.hardware
            for w in REQ.weights for tp in REQ.tp]
    assert [r.family for r in result.family_table] == fams
    assert all(r.verdict in VERDICTS for r in result.family_table)
    text = result.markdown()
    for r in result.family_table:
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {r.family} |"))
        assert f"| {r.verdict} |" in line and r.reason.replace("|", "/") in line


def test_verdicts_hold_by_hand(result):
    rows = {r.family: r for r in result.family_table}
    chosen = result.chosen
    assert chosen is not None and rows[chosen.candidate.family].verdict == "chosen"
    price = chosen.candidate.usd_per_hour
    for r in result.family_table:
        if r.family.startswith("llama-3.1-70b on l40s, bf16"):
            assert r.verdict == "memory", r            # 141 GB of weights, 48 GB per GPU
        if r.verdict == "cost":
            assert r.usd_per_hour > price, r           # dearer than the chosen, and served
        if r.verdict == "tie":
            assert r.usd_per_hour == pytest.approx(price)
    # a family that lost on cost has a configuration that passed the screen
    for r in result.family_table:
        if r.verdict == "cost":
            e = next(e for e in result.simulated if e.candidate.label == r.config)
            assert e.outcome.could_meet(REQ.goodput_target)
    # 8B on an H100 at TP 2 costs 2 x $2.50 and serves 4 req/s: lost on cost alone
    assert rows["llama-3.1-8b on h100-sxm, bf16, tp=2"].verdict == "cost"
    assert result.to_dict()["families"][0]["family"] == REQ.models[0] + " on l40s, bf16, tp=1"


def test_pruned_reasons_map_to_their_rule():
    assert pruned_kind("memory: weights 141 GB > 43 GB") == "memory"
    assert pruned_kind("throughput ceiling: needs >= 3 replicas") == "capacity"
    assert pruned_kind("Little's law: >= 300 requests in flight") == "capacity"
    assert pruned_kind("SLO floor: tpot_ms<=5: 100% of requests exceed it") == "slo"


def _run(slack: float, seed: int) -> VerifyRun:
    return VerifyRun(requests=1168, seed=seed, rate_req_s=1.0, judged_requests=1100,
                     good_requests=1100, attainment=1.0, ci_low=0.996, ci_high=1.0,
                     design_effect=1.0, rejected=0, ttft_p99_ms=1.0, tpot_p99_ms=1.0,
                     slo_slacks=((95.0, slack), (99.0, slack - 0.1)))


class _Jobs:
    """Runs nothing: every run passes; its SLO slack comes from a table by max_num_seqs."""

    def __init__(self, slack: dict[int, float]) -> None:
        self.slack = slack
        self.calls: list[list[int]] = []

    def map(self, fn, items, progress=None):
        self.calls.append([sc.max_num_seqs for sc in items])
        return [_run(self.slack[sc.max_num_seqs], sc.seed) for sc in items]


def test_a_tie_goes_to_the_most_slack_and_every_tied_one_is_verified():
    req = PlanRequest(slos=("ttft_ms<=1000",), goodput_target=0.95)
    ok = Outcome(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0, 0, 150, judged_requests=150)
    # five candidates at $2.50 (max_num_seqs 1..5), then two dearer ones
    prices = {1: 2.5, 2: 2.5, 3: 2.5, 4: 2.5, 5: 2.5, 6: 5.0, 7: 7.5}
    sims = [Evaluated(Candidate(Scenario(max_num_seqs=k), f"f{k}", p), ok)
            for k, p in prices.items()]
    res = PlanResult(req, len(sims), sims, [], [f"f{k}" for k in prices], 1168, (1, 2))
    slack = {1: 0.2, 2: 0.5, 3: 0.7, 4: 0.3, 5: 0.6, 6: 0.9, 7: 0.9}
    jobs = _Jobs(slack)
    _verify(jobs, res, "verifying", None)
    assert res.chosen is not None and res.chosen.candidate.scenario.max_num_seqs == 3
    # all five tied candidates verified (two seeds each), no dearer one needed
    assert [e.candidate.scenario.max_num_seqs for e in res.verified] == [1, 2, 3, 4, 5]
    # the slack judged is the target's percentile: 0.95 reads P95 (0.7), not P99 (0.6)
    assert res.chosen.verification.slack(0.95) == pytest.approx(0.7)
    assert res.chosen.verification.slack(0.99) == pytest.approx(0.6)
    assert math.isnan(Verification(()).slack(0.99))


def test_verify_requests_below_the_floor_runs_with_a_warning(tmp_path):
    args = [CLI, "plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", "1",
            "--max-num-seqs", "128", "--max-num-batched-tokens", "2048", "--rate", "4",
            "--prompt", "fixed:500", "--output", "fixed:100", "--slo", "ttft_ms<=1000",
            "-n", "100", "--workers", "1", "--max-replicas", "1", "--no-pd",
            "--goodput-target", "0.95", "--verify-requests", "600", "--json"]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # the 0.95 floor: 1,168 requests (tests/plan/test_plan_recheck.py derives it by hand)
    assert "warning: --verify-requests 600 is below the floor of 1168" in r.stderr
    out = json.loads(r.stdout)
    assert out["verification"]["requests"] == 600
    assert out["warnings"] and "1168" in out["warnings"][0]
    h = subprocess.run([CLI, "plan", "--help"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200"})
    assert "6086 for 0.99" in " ".join(h.stdout.split())


def test_the_chosen_stands_in_the_pareto_table(result):
    text = result.markdown()
    pareto = text.split("## Pareto frontier", 1)[1].split("## ", 1)[0]
    mark = "(chosen)" if result.chosen_on_pareto else "(chosen; off the frontier"
    line = next(ln for ln in pareto.splitlines() if result.chosen.candidate.label in ln)
    assert mark in line
    assert result.to_dict()["chosen_on_pareto"] == result.chosen_on_pareto


def test_verification_overrules_the_screen_on_the_frontier():
    # screened at 98.5% (under a 99% target), verified above it: it meets; and the reverse
    c = Candidate(Scenario(), "f", 1.0)
    low = Outcome(0.985, 1.0, 1.0, 1.0, 1.0, 1.0, 0, 0, 200, judged_requests=200)
    high = Outcome(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0, 0, 200, judged_requests=200)
    passed = Verification((_run(0.5, 1), _run(0.5, 2)))
    failed = Verification((VerifyRun(6086, 1, 1.0, 6000, 5000, 5 / 6, 0.8, 0.86, 1.0, 0,
                                     1.0, 1.0),))
    assert not Evaluated(c, low).meets(0.99) and Evaluated(c, low, passed).meets(0.99)
    assert Evaluated(c, high).meets(0.99) and not Evaluated(c, high, failed).meets(0.99)
