"""`plan`'s pruning rules and guards, one at a time, against numbers worked out by hand:
the batch-1 TPOT floor, the P/D split's bounds, the capacity probe's request bound, $/Mtok at
zero load, and a verification run with nothing to judge."""

from __future__ import annotations

import math

import pytest

from ridgeline.plan.limits import probe_requests_bound
from ridgeline.plan.recheck import verify
from ridgeline.plan.search import usd_per_million_output_tokens
from ridgeline.plan.space import PlanRequest, enumerate_space
from ridgeline.sim.scenario import Scenario

ONE = dict(models=("llama-3.1-8b",), weights=("bf16",), tp=(1,), max_num_seqs=(256,),
           max_num_batched_tokens=(8192,), requests=200)


def test_a_tpot_bound_no_idle_replica_meets_is_pruned_at_batch_1():
    # Llama 3.1 8B in bf16 on an L40S reads ~16 GB of weights per decode step: at 864 GB/s
    # that is ~19 ms at the very least, so no configuration decodes under 5 ms.
    req = PlanRequest(hardware=("l40s",), prompt="fixed:500", output="fixed:100",
                      rate_req_s=1.0, slos=("tpot_ms<=5",), **ONE)
    space = enumerate_space(req)
    assert space.candidates == []
    reasons = [why for _, _, why in space.pruned]
    assert reasons and all("100% of requests exceed it at batch 1" in r for r in reasons)
    median_ms = float(reasons[0].split("(")[1].split(" ms")[0])
    assert median_ms > 16.06e9 / 864e9 * 1e3


def test_a_loose_tpot_bound_prunes_nothing_at_batch_1():
    req = PlanRequest(hardware=("l40s",), prompt="fixed:500", output="fixed:100",
                      rate_req_s=1.0, slos=("tpot_ms<=200",), **ONE)
    assert not any("batch 1" in why for _, _, why in enumerate_space(req).pruned)


def test_pd_splits_keep_at_least_one_instance_of_each_kind():
    # 6,000-token prompts and 2 output tokens: prefill is ~all of the work, so the ideal
    # prefill share of 4 instances rounds up to 4; the split must stop at 3:1.
    req = PlanRequest(hardware=("h100-sxm",), prompt="fixed:6000", output="fixed:2",
                      rate_req_s=20.0, slos=("ttft_ms<=3000",), pd=True, max_replicas=4,
                      extra_replicas=2, **ONE)
    space = enumerate_space(req)
    splits = [c.scenario.pd for c in space.candidates if c.scenario.pd is not None]
    splits += [c.scenario.pd for c, _, _ in space.pruned
               if c is not None and c.scenario.pd is not None]
    assert (3, 1) in splits
    assert all(p >= 1 and d >= 1 for p, d in splits), splits


def test_capacity_probe_request_bound_by_hand():
    # 1.25 users per batch slot x 256 slots x 2 replicas = 640 users, + 8 = 648; 6 requests
    # each: 3,888 (above the 2,000 floor).
    req = PlanRequest(hardware=("h100-sxm",), max_replicas=2,
                      **{**ONE, "max_num_seqs": (64, 256)})
    assert probe_requests_bound(req) == 3888
    # one 64-slot replica: 80 + 8 = 88 users, 528 requests: the 2,000 floor applies
    small = PlanRequest(hardware=("h100-sxm",), max_replicas=1,
                        **{**ONE, "max_num_seqs": (64,)})
    assert probe_requests_bound(small) == 2000


def test_cost_per_million_tokens_by_hand_and_at_zero_load():
    # $3.50/h at 1 req/s x 200 output tokens = 720,000 tokens/h: $4.8611 per million
    assert usd_per_million_output_tokens(3.5, 1.0, 200) == pytest.approx(3.5 / 0.72)
    assert usd_per_million_output_tokens(3.5, 0.0, 200) == math.inf


def test_a_verification_run_without_slos_says_so():
    run = verify(Scenario(model="llama-3.1-8b", hardware="h100-sxm", requests=50,
                          rate_req_s=2.0, prompt="fixed:100", output="fixed:20", slos=()))
    assert run.error == "no SLOs to judge"
    assert not run.meets(0.5)
