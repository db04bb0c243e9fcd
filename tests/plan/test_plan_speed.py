"""What made `plan` fast changes none of its numbers: its runs analyze without bootstrap
intervals, kept samples or the pooled ITL distributions, and candidates that differ only in
cluster shape, rate or seed share one step-time model. Each shortcut is compared with the
full path on the same runs (every point value equal, bit for bit)."""

from __future__ import annotations

import math

import numpy as np

from ridgeline.plan.execute import LEAN, built_for, evaluate
from ridgeline.sim.scenario import Built, Scenario
from ridgeline.sim.scenario_run import probe_capacity, run_scenario

SC = Scenario(requests=1500, rate_req_s=30.0, prompt="lognormal:mean=500,sigma=0.8,max=4096",
              output="lognormal:mean=200,sigma=0.8,max=1024",
              slos=("ttft_ms<=1000", "tpot_ms<=50"), seed=3)


def test_lean_analysis_has_the_full_analysis_point_values():
    full = run_scenario(SC)
    lean = run_scenario(SC, **LEAN)
    assert lean.sweep_point() == full.sweep_point()
    assert set(lean.analysis.latency) == set(LEAN["latency_keys"])
    for key, d in lean.analysis.latency.items():
        f = full.analysis.latency[key]
        assert (d.count, d.mean, d.std, d.min, d.max) == (f.count, f.mean, f.std, f.min, f.max)
        for q, p in d.percentiles.items():
            assert p.value == f.percentiles[q].value, (key, q)
            assert math.isnan(p.ci_low) and math.isfinite(f.percentiles[q].ci_low)
    g, h = lean.analysis.goodput, full.analysis.goodput
    assert (g.attainment, g.judged_requests, g.good_requests) == (
        h.attainment, h.judged_requests, h.good_requests)
    assert np.array_equal(g.good_in_send_order, h.good_in_send_order)
    t, u = lean.analysis.throughput, full.analysis.throughput
    assert (t.requests_s, t.output_tok_s) == (u.requests_s, u.output_tok_s)


def test_a_shared_step_model_gives_what_a_fresh_one_gives():
    a = SC.replace(replicas=2, seed=5)
    b = SC.replace(pd=(1, 1), rate_req_s=20.0)
    built_for(SC)                           # the cache now holds SC's family and batching
    for sc in (a, b):
        shared = built_for(sc)
        assert shared.step_model is built_for(SC).step_model
        assert shared.cluster.replicas == sc.replicas and shared.cluster.pd == sc.pd
        fresh = run_scenario(sc, built=Built.of(sc), **LEAN).sweep_point()
        assert run_scenario(sc, built=shared, **LEAN).sweep_point() == fresh
    assert evaluate(a).attainment == run_scenario(a).sweep_point().attainment
    # another batch cap is another engine: not shared
    assert built_for(SC.replace(max_num_seqs=64)).config.max_num_seqs == 64
    assert probe_capacity(a, built_for(a)) == probe_capacity(a)
