"""One seed, one request list: bench plans exactly the workload simulate runs."""

from __future__ import annotations

import numpy as np
import pytest

from ridgeline.bench.client import EndpointConfig
from ridgeline.bench.load import LoadSpec
from ridgeline.bench.single_run import BenchConfig, plan_requests
from ridgeline.sim.workload import build_workload
from ridgeline.workload.arrivals import parse_arrival
from ridgeline.workload.lengths import parse_lengths


@pytest.mark.parametrize("seed", [0, 7])
def test_bench_plan_equals_simulated_workload(seed: int) -> None:
    n, prompt, output = 40, "lognormal:mean=300,sigma=0.5", "uniform:min=10,max=90"
    wl, _, _ = build_workload(n, prompt, output, rate_req_s=5.0, arrival="poisson", seed=seed)
    cfg = BenchConfig(
        endpoint=EndpointConfig(base_url="http://127.0.0.1:9", model="m"),
        load=LoadSpec(concurrency=None, arrival=parse_arrival("poisson", 5.0), requests=n),
        prompt=parse_lengths(prompt, "--prompt"),
        output=parse_lengths(output, "--output"),
        seed=seed,
    )
    _pool, source = plan_requests(cfg)
    planned = [source.get(i) for i in range(len(source))]
    assert len(planned) == n
    assert [r.prompt_tokens for r in planned] == wl.prompt_tokens.tolist()
    assert [r.max_tokens for r in planned] == wl.output_tokens.tolist()
    np.testing.assert_array_equal([r.scheduled_s for r in planned], wl.arrival_s)
    # A different seed gives a different list (the check can fail).
    wl2, _, _ = build_workload(n, prompt, output, rate_req_s=5.0, seed=seed + 1)
    assert wl2.prompt_tokens.tolist() != wl.prompt_tokens.tolist()
