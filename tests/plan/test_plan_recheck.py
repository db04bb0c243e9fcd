"""plan's verification (ridgeline.plan.recheck) and its choice rule: Wilson's interval against
published values, the design effect against series of known correlation, coverage of the
interval on correlated pass/fail series, the request count against `ridgeline theory
samples`, and the cheapest-verified choice with a failing screen winner."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ridgeline.plan import PlanRequest
from ridgeline.plan.execute import Outcome
from ridgeline.plan.recheck import (
    Verification,
    VerifyRun,
    attainment_interval,
    design_effect,
    verify_requests,
    wilson_interval,
)
from ridgeline.plan.search import Evaluated, PlanResult, _verify
from ridgeline.plan.space import Candidate
from ridgeline.sim.scenario import Scenario

CLI = str(Path(sys.executable).parent / "ridgeline")


def _score_interval_by_bisection(k: float, n: float, z: float = 1.959963984540054):
    """Wilson's interval from its definition, not its closed form: the p for which the score
    test does not reject, |k/n - p| <= z sqrt(p (1 - p) / n); each end found by bisection."""
    phat = k / n

    def inside(p: float) -> bool:
        return abs(phat - p) <= z * math.sqrt(p * (1 - p) / n)

    def edge(a: float, b: float) -> float:     # a inside, b outside
        for _ in range(200):
            m = (a + b) / 2
            a, b = (m, b) if inside(m) else (a, m)
        return a

    lo = 0.0 if phat == 0 else edge(phat, 0.0)
    hi = 1.0 if phat == 1 else edge(phat, 1.0)
    return lo, hi


@pytest.mark.parametrize("k, n", [(95, 100), (0, 20), (20, 20), (1500, 1522), (3, 7)])
def test_wilson_interval_is_the_score_test_inversion(k, n):
    lo, hi = wilson_interval(k, n)
    blo, bhi = _score_interval_by_bisection(k, n)
    assert lo == pytest.approx(blo, abs=1e-9) and hi == pytest.approx(bhi, abs=1e-9)
    assert (lo == 0.0) == (k == 0) and (hi == 1.0) == (k == n)


def test_design_effect_of_series_with_known_correlation():
    # Pass/fail constant over blocks of L requests (a burst fails all its neighbours): the
    # long-run variance is L times the variance, so n requests are worth n / L.
    rng = np.random.default_rng(0)
    iid = rng.random(6000) > 0.05
    assert design_effect(iid) == pytest.approx(1.0, abs=0.3)
    for L in (10, 40):
        d = [design_effect(np.repeat(rng.random(6000 // L) > 0.05, L)) for _ in range(5)]
        assert 0.5 * L < float(np.median(d)) < 2.0 * L, (L, d)
    assert design_effect(np.ones(500, dtype=bool)) == 1.0


def test_interval_covers_the_true_attainment_of_correlated_runs():
    # 300 runs of 6,000 requests failing in bursts of 40 (true attainment 95%): the 95%
    # interval should cover 0.95 about 95% of the time; plain Wilson (n = 6,000) covers it
    # far less often, which is why plan divides n by the design effect.
    rng = np.random.default_rng(1)
    cover = plain = 0
    reps = 300
    for _ in range(reps):
        x = np.repeat(rng.random(150) > 0.05, 40)
        lo, hi, _ = attainment_interval(x)
        cover += lo <= 0.95 <= hi
        wlo, whi = wilson_interval(float(x.sum()), x.size)
        plain += wlo <= 0.95 <= whi
    assert 0.88 <= cover / reps <= 0.995, cover / reps
    assert plain / reps < 0.5, plain / reps


def test_verify_requests_is_what_theory_samples_prints():
    r = subprocess.run([CLI, "theory", "samples", "--percentile", "99", "--half-width", "0.25",
                        "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    values = [v for v in (rows.values() if isinstance(rows, dict) else
                          [x.get("value") for x in rows])]
    assert 6086 in values, rows
    assert verify_requests(0.99) == 6086
    # 95%: P95 within +-1.25 points: 1.96^2 x 0.95 x 0.05 / 0.0125^2 = 1,167.4 -> 1,168
    assert verify_requests(0.95) == 1168
    with pytest.raises(Exception, match="strictly between 0 and 1"):
        verify_requests(1.0)


def _run(ci_low: float, seed: int = 1) -> VerifyRun:
    return VerifyRun(requests=1168, seed=seed, rate_req_s=1.0, judged_requests=1100,
                     good_requests=1100, attainment=min(1.0, ci_low + 0.01), ci_low=ci_low,
                     ci_high=1.0, design_effect=1.0, rejected=0, ttft_p99_ms=1.0,
                     tpot_p99_ms=1.0)


class _FakeJobs:
    """Runs nothing: each verification run's lower end comes from a table by replicas."""

    def __init__(self, lows: dict[int, float]) -> None:
        self.lows = lows
        self.calls: list[list[int]] = []

    def map(self, fn, items, progress=None):
        self.calls.append([sc.replicas for sc in items])
        return [_run(self.lows[sc.replicas], sc.seed) for sc in items]


def _result(lows: dict[int, float]) -> tuple[PlanResult, _FakeJobs]:
    req = PlanRequest(slos=("ttft_ms<=1000",), goodput_target=0.95)
    ok = Outcome(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0, 0, 150, judged_requests=150)
    sims = [Evaluated(Candidate(Scenario(replicas=k), "f", float(k)), ok) for k in sorted(lows)]
    return PlanResult(req, len(sims), sims, [], ["f"], 1168, (1, 2)), _FakeJobs(lows)


def test_choice_falls_to_the_next_when_the_screen_winner_fails_verification():
    res, jobs = _result({1: 0.90, 2: 0.96, 3: 0.97, 4: 0.99, 5: 0.99})
    _verify(jobs, res, "verifying", None)
    assert res.chosen is not None and res.chosen.candidate.scenario.replicas == 2
    # the winner and two runners-up verified; the dearest one never simulated again
    assert [e.candidate.scenario.replicas for e in res.verified] == [1, 2, 3, 4]
    assert jobs.calls == [[1, 1, 2, 2, 3, 3], [4, 4]]      # two seeds per candidate
    assert res.simulated[-1].verification is None


def test_no_choice_when_every_lower_end_misses():
    res, _ = _result({1: 0.90, 2: 0.949, 3: 0.5})
    _verify(_FakeJobs({1: 0.90, 2: 0.949, 3: 0.5}), res, "verifying", None)
    assert res.chosen is None and len(res.verified) == 3


def test_a_candidate_passes_only_if_every_run_does():
    target = 0.99
    assert Verification((_run(0.991), _run(0.995, 2))).meets(target)
    assert not Verification((_run(0.991), _run(0.989, 2))).meets(target)
    assert not Verification(()).meets(target)
    bad = VerifyRun(1168, 1, 1.0, 0, 0, math.nan, math.nan, math.nan, math.nan, 0,
                    math.nan, math.nan, "does not fit")
    assert not Verification((bad,)).meets(target)
