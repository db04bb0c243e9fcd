"""The simulator's event loop: conservation, fast == step-by-step, cluster, P/D, closed loop."""

from __future__ import annotations

import numpy as np
import pytest

from ridgeline.perf.step_time import LinearStepTime
from ridgeline.sim.cluster import ClusterConfig
from ridgeline.sim.engine import EngineConfig
from ridgeline.sim.event_loop import Workload, simulate
from ridgeline.sim.workload import build_workload

MODEL = LinearStepTime(base_s=0.005, per_prefill_token_s=2e-5, per_attn_pair_s=1e-9,
                       per_decode_seq_s=2e-5, per_context_token_s=1e-8)


def random_workload(n: int, seed: int, rate: float = 30.0, prefix: bool = False) -> Workload:
    rng = np.random.default_rng(seed)
    kw = {}
    if prefix:
        kw = dict(prefix_group=np.arange(n) % 3, prefix_tokens=np.full(n, 48))
    prompt = rng.integers(1, 600, n) + (48 if prefix else 0)
    return Workload(prompt_tokens=prompt, output_tokens=rng.integers(1, 300, n),
                    arrival_s=np.cumsum(rng.exponential(1 / rate, n)), **kw)


CASES = [
    # tight KV (preemptions), small budget, chunked prefill
    (EngineConfig(num_kv_blocks=200, max_num_seqs=64, max_num_batched_tokens=512), None),
    # no chunked prefill, 3 replicas
    (EngineConfig(num_kv_blocks=300, max_num_seqs=32, max_num_batched_tokens=1024,
                  chunked_prefill=False), ClusterConfig(replicas=3, router="least-outstanding")),
    # prefix caching, least-kv router
    (EngineConfig(num_kv_blocks=250, enable_prefix_caching=True),
     ClusterConfig(replicas=2, router="least-kv")),
    # P/D disaggregation with a KV transfer
    (EngineConfig(num_kv_blocks=400, max_num_seqs=48),
     ClusterConfig(pd=(1, 2), kv_bytes_per_token=1e5, link_bandwidth_bytes_s=1e10,
                   kv_transfer_latency_s=1e-3)),
]


@pytest.mark.parametrize(("config", "cluster"), CASES)
def test_fast_and_step_by_step_traces_are_identical(config, cluster):
    wl = random_workload(600, seed=1, prefix=config.enable_prefix_caching)
    fast = simulate(wl, config, MODEL, cluster, mode="fast")
    ref = simulate(wl, config, MODEL, cluster, mode="step")
    # Bit-identical: step ends are sums added one step at a time in both modes, and every
    # step duration comes from the same vectorized step-time evaluation (>= 2 columns).
    assert np.array_equal(fast.event_offsets, ref.event_offsets)
    assert np.array_equal(fast.event_times_s, ref.event_times_s)
    assert np.array_equal(fast.end_s, ref.end_s, equal_nan=True)
    assert fast.status == ref.status
    assert np.array_equal(fast.preemptions, ref.preemptions)
    for key in fast.timeline:
        assert np.array_equal(fast.timeline[key], ref.timeline[key]), key


def test_identical_traces_with_the_roofline_model():
    serving_model = pytest.importorskip("ridgeline.perf.roofline_step")
    model = serving_model.RooflineStepTime.from_names(model="llama-3.1-8b",
                                                      hardware="h100-sxm")
    wl, _, _ = build_workload(400, "lognormal:mean=250,sigma=1.0", "lognormal:mean=200,"
                              "sigma=0.8", rate_req_s=50.0, seed=3)
    config = EngineConfig(num_kv_blocks=1500, max_num_seqs=128, max_num_batched_tokens=2048)
    fast = simulate(wl, config, model, mode="fast")
    ref = simulate(wl, config, model, mode="step")
    assert fast.preemptions.sum() > 0      # the case exercises preemption
    assert np.array_equal(fast.event_times_s, ref.event_times_s)
    assert np.array_equal(fast.event_offsets, ref.event_offsets)


@pytest.mark.parametrize("num_kv_blocks", [120, 4000])
def test_long_decode_runs_on_arrays_are_bit_identical(num_kv_blocks, monkeypatch):
    # Sparse arrivals and long outputs: decode runs of hundreds of steps go through the
    # array path of decode_run (`_decode_run_arrays`); with 120 blocks they also stop for
    # lack of KV blocks inside a chunk (preemptions follow).
    serving_model = pytest.importorskip("ridgeline.perf.roofline_step")
    from ridgeline.sim import fast_forward

    monkeypatch.setenv("RIDGELINE_SIM_CORE", "python")   # the Python engine's array path
    calls = []
    real = fast_forward._decode_run_arrays
    monkeypatch.setattr(fast_forward, "_decode_run_arrays",
                        lambda *a: calls.append(a[1] - a[0]) or real(*a))
    model = serving_model.RooflineStepTime.from_names(model="llama-3.1-8b",
                                                      hardware="h100-sxm")
    wl, _, _ = build_workload(120, "lognormal:mean=300,sigma=0.8", "uniform:min=200,max=1500",
                              rate_req_s=4.0, seed=5)
    config = EngineConfig(num_kv_blocks=num_kv_blocks, max_num_seqs=32,
                          max_num_batched_tokens=1024)
    cluster = ClusterConfig(replicas=2, router="least-outstanding")
    fast = simulate(wl, config, model, cluster, mode="fast")
    assert len(calls) > 10 and max(calls) > 300
    ref = simulate(wl, config, model, cluster, mode="step")
    if num_kv_blocks == 120:
        assert fast.preemptions.sum() > 0
    assert np.array_equal(fast.event_offsets, ref.event_offsets)
    assert np.array_equal(fast.event_times_s, ref.event_times_s)
    assert np.array_equal(fast.end_s, ref.end_s, equal_nan=True)
    for key in fast.timeline:
        assert np.array_equal(fast.timeline[key], ref.timeline[key]), key


@pytest.mark.parametrize(("config", "cluster"), CASES)
def test_conservation(config, cluster):
    wl = random_workload(500, seed=2, prefix=config.enable_prefix_caching)
    # one request that can never fit the KV cache of a replica
    wl.prompt_tokens[17] = config.num_kv_blocks * config.block_size_tokens + 5
    res = simulate(wl, config, MODEL, cluster)
    status = np.array(res.status)
    assert status[17] == "rejected"
    assert set(res.status) <= {"ok", "rejected"}
    ok = status == "ok"
    assert ok.sum() == len(wl) - 1
    # every request appears once, with exactly the tokens it asked for
    assert len(res) == len(wl)
    assert np.array_equal(res.tokens_out[ok], wl.output_tokens[ok])
    assert res.tokens_out[17] == 0
    # event times increase within each request and start after its arrival
    for i in np.flatnonzero(ok):
        ev = res.events_s(i)
        assert ev[0] > res.sent_s[i] and np.all(np.diff(ev) > 0)
        assert ev[-1] == res.end_s[i]
    # all KV blocks return to the pools; engine counters agree with the trace
    assert all(s["kv_blocks_used"] == 0 for s in res.engine_stats)
    assert all(s["num_running"] == 0 and s["num_waiting"] == 0 for s in res.engine_stats)
    gen = sum(s["generation_tokens_total"] for s in res.engine_stats)
    assert gen == res.tokens_out.sum()
    assert sum(s["num_preemptions_total"] for s in res.engine_stats) == res.preemptions.sum()


def test_timeline_matches_the_trace():
    wl = random_workload(300, seed=4)
    res = simulate(wl, EngineConfig(num_kv_blocks=200, max_num_seqs=64), MODEL)
    tl = res.timeline
    assert np.all(tl["end_s"] > tl["start_s"])
    # Each step emits one token per decoding sequence plus one per finished prefill. A
    # request's prefill finishes once, plus once more after each preemption that struck it
    # while decoding (recompute: the re-prefill of prompt + generated tokens samples the
    # next token); a preemption during a (chunked) prefill adds none. So
    #   tokens = decode slots + ok requests + preemptions of decoding sequences,
    # bounded by decode slots + ok requests (+ all preemptions).
    ok = np.array(res.status) == "ok"
    dec = int(tl["decode_seqs"].sum())
    assert dec + ok.sum() <= res.tokens_out.sum() <= dec + ok.sum() + res.preemptions.sum()
    assert np.all(np.isin(res.event_times_s, tl["end_s"]))
    assert tl["kv_blocks_used"].max() <= 200


def test_tokens_out_identity_exact_without_chunked_prefill():
    # Without chunked prefill a prefill completes in the step that admits it, so every
    # preemption strikes a decoding sequence: the identity above is exact.
    wl = random_workload(300, seed=4)
    res = simulate(wl, EngineConfig(num_kv_blocks=200, max_num_seqs=64,
                                    chunked_prefill=False), MODEL)
    tl = res.timeline
    ok = np.array(res.status) == "ok"
    assert res.preemptions.sum() > 50  # the preemption term is exercised
    assert res.tokens_out.sum() == tl["decode_seqs"].sum() + ok.sum() + res.preemptions.sum()


def test_pd_handoff_hand_computed():
    # Prefill on instance 0: 10 ms + 100 * 0.1 ms = 20 ms -> first token at 20 ms. KV of
    # 100 tokens x 1000 B over 1 MB/s = 100 ms. Decode instance: two decode steps of 10 ms.
    model = LinearStepTime(base_s=0.010, per_prefill_token_s=1e-4)
    wl = Workload(prompt_tokens=np.array([100]), output_tokens=np.array([3]),
                  arrival_s=np.array([0.0]))
    res = simulate(wl, EngineConfig(num_kv_blocks=100), model,
                   ClusterConfig(pd=(1, 1), kv_bytes_per_token=1000.0,
                                 link_bandwidth_bytes_s=1e6))
    assert res.events_s(0) == pytest.approx([0.020, 0.130, 0.140])
    assert res.replica[0] == 1 and res.roles == ["prefill", "decode"]


def test_round_robin_spreads_requests():
    wl = Workload(prompt_tokens=np.full(6, 10), output_tokens=np.full(6, 5),
                  arrival_s=np.arange(6) * 0.001)
    res = simulate(wl, EngineConfig(num_kv_blocks=100), MODEL,
                   ClusterConfig(replicas=3, router="round-robin"))
    assert res.replica.tolist() == [0, 1, 2, 0, 1, 2]


def test_closed_loop_users_and_think_time():
    # Interactive response-time law (closed systems): N = X * (R + Z) for N users,
    # throughput X, mean response time R and think time Z.
    wl, load, _ = build_workload(2000, "fixed:200", "exponential:mean=50", concurrency=8,
                                 think_time="fixed:0.5", seed=5)
    res = simulate(wl, EngineConfig(num_kv_blocks=2000), MODEL)
    assert load["pattern"] == "closed-loop"
    r_mean = float(np.mean(res.end_s - res.sent_s))
    span = float(np.max(res.end_s))
    x = len(wl) / span
    assert x * (r_mean + 0.5) == pytest.approx(8, rel=0.02)
    # never more than 8 requests in flight
    order = np.argsort(np.concatenate([res.sent_s, res.end_s]), kind="stable")
    steps = np.concatenate([np.ones(len(wl)), -np.ones(len(wl))])[order]
    assert np.cumsum(steps).max() <= 8


def test_workload_prefix_groups_add_prefix_tokens():
    wl, _, data = build_workload(6, "fixed:10", "fixed:2", rate_req_s=1.0, prefix_groups=2,
                                 prefix_tokens=32, seed=0)
    assert wl.prompt_tokens.tolist() == [42] * 6
    assert wl.prefix_group.tolist() == [0, 1, 0, 1, 0, 1]
    assert data["prefix_tokens"] == 32


def test_compiled_scheduler_timing_equals_the_step_time_function():
    """The scheduler's in-loop timing of RooflineStepTime must give exactly the values of
    `step_time_s` (the one step-time function): compare with a wrapper that hides the
    compiled path, so the engine times every step through `step_time_s` itself."""
    serving_model = pytest.importorskip("ridgeline.perf.roofline_step")
    model = serving_model.RooflineStepTime.from_names(model="llama-3.1-8b",
                                                      hardware="h100-sxm")

    class Opaque:
        def step_time_s(self, work):
            return model.step_time_s(work)

    wl, _, _ = build_workload(400, "lognormal:mean=250,sigma=1.0", "lognormal:mean=200,"
                              "sigma=0.8", rate_req_s=50.0, seed=5, prefix_groups=4,
                              prefix_tokens=64)
    config = EngineConfig(num_kv_blocks=1500, max_num_seqs=128, max_num_batched_tokens=2048,
                          enable_prefix_caching=True)
    compiled = simulate(wl, config, model, mode="fast")
    plain = simulate(wl, config, Opaque(), mode="fast")
    assert compiled.preemptions.sum() > 0
    assert np.array_equal(compiled.event_offsets, plain.event_offsets)
    assert np.array_equal(compiled.event_times_s, plain.event_times_s)
    for key in compiled.timeline:
        assert np.array_equal(compiled.timeline[key], plain.timeline[key]), key


@pytest.mark.parametrize("router", ["least-outstanding", "round-robin"])
def test_lazy_replicas_give_the_eager_trace(router, monkeypatch):
    # `_run_lazy` advances a replica only when a request can leave it before the next
    # arrival; `_run_heap` advances every busy replica to every arrival. Same trace, same
    # routing, on a fleet where most replicas idle between arrivals (and some preempt).
    serving_model = pytest.importorskip("ridgeline.perf.roofline_step")
    from ridgeline.sim import event_loop

    model = serving_model.RooflineStepTime.from_names(model="llama-3.1-8b",
                                                      hardware="h100-sxm")
    wl, _, _ = build_workload(3000, "lognormal:mean=800,sigma=0.8",
                              "lognormal:mean=250,sigma=0.8", rate_req_s=300.0, seed=11)
    config = EngineConfig(num_kv_blocks=700, max_num_seqs=64, max_num_batched_tokens=2048)
    cluster = ClusterConfig(replicas=48, router=router)
    monkeypatch.setenv("RIDGELINE_SIM_CORE", "python")   # the Python engine's two loops
    lazy_calls = []
    real_lazy = event_loop._Sim._run_lazy
    monkeypatch.setattr(event_loop._Sim, "_run_lazy",
                        lambda self: lazy_calls.append(1) or real_lazy(self))
    lazy = simulate(wl, config, model, cluster)
    assert lazy_calls
    monkeypatch.setattr(event_loop, "LAZY_ROUTERS", frozenset())
    eager = simulate(wl, config, model, cluster)
    assert len(lazy_calls) == 1
    assert lazy.preemptions.sum() > 0
    assert np.array_equal(lazy.replica, eager.replica)
    assert np.array_equal(lazy.event_offsets, eager.event_offsets)
    assert np.array_equal(lazy.event_times_s, eager.event_times_s)
    assert np.array_equal(lazy.end_s, eager.end_s, equal_nan=True)
    for key in lazy.timeline:
        assert np.array_equal(lazy.timeline[key], eager.timeline[key]), key


def test_lazy_loop_ends_when_arrivals_fall_on_step_ends():
    # Step times of exactly 0.25 s and arrivals on multiples of 0.25 s: a replica's clock
    # equals the next arrival. An earlier `_run_lazy` re-queued such a replica just below its
    # clock and popped it again for the same arrival forever. Run in a subprocess with a
    # timeout, so a hang fails the test instead of the suite.
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from ridgeline.perf.step_time import LinearStepTime\n"
        "from ridgeline.sim.cluster import ClusterConfig\n"
        "from ridgeline.sim.engine import EngineConfig\n"
        "from ridgeline.sim.event_loop import Workload, simulate\n"
        "n = 400\n"
        "wl = Workload(prompt_tokens=np.full(n, 8), output_tokens=np.full(n, 5),\n"
        "              arrival_s=np.arange(n) * 0.25)\n"
        "res = simulate(wl, EngineConfig(num_kv_blocks=64), LinearStepTime(base_s=0.25),\n"
        "               ClusterConfig(replicas=3, router='least-outstanding'))\n"
        "print(int(np.isfinite(res.end_s).sum()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "400"
