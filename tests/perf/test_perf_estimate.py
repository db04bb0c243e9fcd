"""Phase-level estimate: grids equal point calls, memory fit, prefix cache, parallelism."""

from __future__ import annotations

import numpy as np
import pytest

from ridgeline.errors import RidgelineError
from ridgeline.perf.estimate import decode_work, estimate, mean_decode_context, prefill_work
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.step_time import BatchWork


@pytest.fixture(scope="module")
def m8b() -> RooflineStepTime:
    return RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")


def test_batch_context_grid_equals_point_calls(m8b: RooflineStepTime) -> None:
    b = np.array([1.0, 4.0, 32.0, 128.0])[:, None]
    s = np.array([128.0, 2048.0, 8192.0])[None, :]
    grid = estimate(m8b, b, s, 64)
    assert grid["tpot_s"].shape == (4, 3)
    for i in range(4):
        for j in range(3):
            one = estimate(m8b, b[i, 0], s[0, j], 64)
            for key in ("ttft_s", "tpot_s", "e2e_s", "decode_bytes", "kv_capacity_tokens",
                        "kv_crossover_context_tokens"):
                assert grid[key][i, j] == pytest.approx(float(one[key]), rel=1e-12), key


def test_prefill_work_matches_for_chunks() -> None:
    w = prefill_work(3, 100, 40)
    ref = BatchWork.for_chunks([60] * 3, [40] * 3, [])
    for f in ("prefill_tokens", "prefill_attn_pairs", "prefill_context_tokens", "prefill_seqs"):
        assert float(getattr(w, f)) == getattr(ref, f)
    d = decode_work(4, 1000)
    assert float(d.decode_context_tokens) == 4000 and float(d.decode_seqs) == 4


def test_mean_context_is_mean_over_decode_steps() -> None:
    s, n = 100, 11  # decode steps read 100, 101, ..., 109 tokens
    assert mean_decode_context(s, n) == np.mean(np.arange(100, 110))
    assert mean_decode_context(s, 1) == 100


def test_tpot_at_mean_context_is_exact_when_memory_bound(m8b: RooflineStepTime) -> None:
    # Every decode operator is memory-bound at B=4, so time is affine in T: the step at the
    # mean context equals the mean of the N-1 step times.
    s, n = 1000, 65
    steps = m8b.step_time_s(BatchWork(decode_seqs=4,
                                      decode_context_tokens=4 * (s + np.arange(n - 1.0))))
    r = estimate(m8b, 4, s, n)
    assert float(r["tpot_s"]) == pytest.approx(float(np.mean(steps)), rel=1e-9)


def test_prefix_cache_cuts_ttft(m8b: RooflineStepTime) -> None:
    cold = estimate(m8b, 8, 4096, 16)
    warm = estimate(m8b, 8, 4096, 16, prefix_tokens=3072)
    assert float(warm["ttft_s"]) < 0.4 * float(cold["ttft_s"])
    with pytest.raises(RidgelineError, match=r"^prefix"):
        estimate(m8b, 8, 4096, 16, prefix_tokens=4096)


def test_does_not_fit_reports_shortfall() -> None:
    m = RooflineStepTime.from_names(model="llama-3.1-70b", hardware="h100-sxm", tp=4,
                                    check_fit=False)
    r = estimate(m, np.array([1.0, 4096.0]), 8192, 1024)
    assert bool(r["memory_fits"][0]) and not bool(r["memory_fits"][1])
    mem = m.memory()
    need = (4096 * (8192 + 1024) * r["kv_bytes_per_token_per_gpu"][1] + mem.weight_bytes
            + r["workspace_bytes"][1] + mem.reserve_bytes)
    assert r["memory_shortfall_bytes"][1] == pytest.approx(need - 0.9 * 81559 * 2**20)
    assert r["max_concurrent_seqs"][0] == r["kv_capacity_tokens"][0] // (8192 + 1024)


def test_weights_per_gpu_split_by_tp_and_pp() -> None:
    one = RooflineStepTime.from_names(model="llama-3.1-70b", hardware="h200", tp=1,
                                      check_fit=False).memory()
    four = RooflineStepTime.from_names(model="llama-3.1-70b", hardware="h200", tp=4).memory()
    pp2 = RooflineStepTime.from_names(model="llama-3.1-70b", hardware="h200", tp=2,
                                      pp=2).memory()
    assert one.weight_bytes == pytest.approx(70.55e9 * 2, rel=0.002)
    assert four.weight_bytes == pytest.approx(one.weight_bytes / 4, rel=0.01)
    assert pp2.weight_bytes == pytest.approx(one.weight_bytes / 4, rel=0.02)
    assert not one.fits and one.shortfall_bytes > 0


def test_fp8_weights_speed_up_memory_bound_decode(m8b: RooflineStepTime) -> None:
    # The plain roofline (the system-model chapter): bytes alone set a memory-bound step.
    fp8 = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm", weights="fp8",
                                      kernel_model=False)
    int4 = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm",
                                       weights="int4", kernel_model=False)
    m16 = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm",
                                      kernel_model=False)
    w = BatchWork(decode_seqs=1, decode_context_tokens=512)
    t16, t8, t4 = (x.step_time_s(w) for x in (m16, fp8, int4))
    assert t4 < t8 < t16
    assert t8 / t16 == pytest.approx(0.55, abs=0.08)  # ~half the bytes, LM head stays bf16


def test_fp8_compute_doubles_compute_bound_prefill() -> None:
    # The plain roofline: one efficiency for every dtype (the fitted model's fp8 rule is
    # tested in test_perf_kernels.py).
    a = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm",
                                    kernel_overhead_us=0, kernel_model=False)
    b = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm", weights="fp8",
                                    activations="fp8", kernel_overhead_us=0,
                                    kernel_model=False)
    w = BatchWork.for_chunks([8192], [0], [])
    pa, pb = a.breakdown(w), b.breakdown(w)
    i = pa.names.index("gate_up_proj")
    assert pb.time_s[i] == pytest.approx(pa.time_s[i] * 989.4 / 1978.9, rel=1e-9)


def test_moe_decode_reads_more_experts_with_batch() -> None:
    m = RooflineStepTime.from_names(model="qwen3-30b-a3b", hardware="h100-sxm")
    r = estimate(m, np.array([1.0, 8.0, 64.0, 512.0]), 512, 2)
    w = r["decode_weight_bytes"]
    assert np.all(np.diff(w) > 0)
    assert w[-1] == pytest.approx(2 * (30.53e9 - 151936 * 2048), rel=0.01)  # ~all experts


def test_pipeline_adds_transfers_and_dp_multiplies_cluster_throughput() -> None:
    base = RooflineStepTime.from_names(model="llama-3.1-70b", hardware="h100-sxm", tp=4)
    pp = RooflineStepTime.from_names(model="llama-3.1-70b", hardware="h100-sxm", tp=2, pp=2)
    w = BatchWork(decode_seqs=8, decode_context_tokens=8 * 1000)
    assert pp.breakdown(w).comm_s > 0
    from ridgeline.perf.roofline_step import RooflineStepTime as R
    from ridgeline.specs import Parallelism

    dp = R(base.model, base.hardware, base.precision, Parallelism(tp=4, dp=3))
    r = estimate(dp, 8, 1000, 10, details=False)
    assert r["cluster_decode_tok_s"] == pytest.approx(3 * r["decode_aggregate_tok_s"])


def test_h20_vs_h100_against_hand_rooflines() -> None:
    # The roofline: a low-compute, high-bandwidth part (H20) moves the ridge far left.
    # Kernel overhead off, so each phase is its roofline time alone (same efficiencies on
    # both parts: 70% of dense BF16 peak, 85% of HBM bandwidth).
    h100 = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm",
                                       kernel_overhead_us=0, kernel_model=False)
    h20 = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h20",
                                      kernel_overhead_us=0, kernel_model=False)
    # B = 1: decode is memory-bound on both; bytes read by hand: the 8.030e9 parameters
    # less the 128,256 x 4,096 embedding table (a lookup reads one row) at 2 bytes, 15.01 GB,
    # plus KV of T + 1 = 2,056 tokens x 32 layers x 2 x 1,024 x 2 bytes = 0.27 GB.
    r100, r20 = estimate(h100, 1, 2048, 16), estimate(h20, 1, 2048, 16)
    hand_bytes = (8.030e9 - 128_256 * 4096) * 2 + 2056 * 32 * 2 * 1024 * 2
    assert float(r100["tpot_s"]) == pytest.approx(hand_bytes / (3.35e12 * 0.85), rel=0.005)
    # Same bytes on both: the TPOT ratio is the bandwidth ratio, H20 faster.
    assert float(r20["tpot_s"] / r100["tpot_s"]) == pytest.approx(3.35 / 4.0, rel=1e-9)
    # B = 64: H20's linear layers turn compute-bound (intensity ~64 FLOP/byte is above its
    # ridge 148 x 0.7 / (4.0 x 0.85) = 30), so H20 is now SLOWER: 2 x 7.505e9 x 64 FLOPs at
    # 103.6 TFLOP/s = 9.27 ms, plus attention's KV reads 64 x 0.2695 GB at 3.4 TB/s = 5.07 ms.
    r100, r20 = estimate(h100, 64, 2048, 16), estimate(h20, 64, 2048, 16)
    linear_flops = 2 * (8.030e9 - 128_256 * 4096) * 64
    kv_bytes = 64 * 2056 * 32 * 2 * 1024 * 2
    hand_h20 = linear_flops / (148e12 * 0.7) + kv_bytes / (4.0e12 * 0.85)
    assert float(r20["tpot_s"]) == pytest.approx(hand_h20, rel=0.02)
    assert float(r20["tpot_s"]) > 1.2 * float(r100["tpot_s"])
    assert r20["decode_bound"] == "compute" and r100["decode_bound"] == "memory"
    # Prefill is compute-bound: at most the peak ratio 989.4/148 = 6.69 (memory-bound
    # parts such as norms and the KV write dilute it).
    ratio = float(r20["prefill_s"] / r100["prefill_s"])
    assert 5.5 < ratio <= 989.4 / 148


def _same_bits(a: object, b: object) -> bool:
    x, y = np.asarray(a), np.asarray(b)
    return (type(a) is type(b) and x.shape == y.shape and x.dtype == y.dtype
            and x.tobytes() == y.tobytes())


@pytest.mark.parametrize("model", ["llama-3.1-8b", "mixtral-8x7b", "gemma-3-27b"])
def test_large_grid_on_its_axes_equals_the_broadcast_grid(monkeypatch, model: str) -> None:
    """A large grid computed on its axes as given (a (B, 1) batch, a (1, S) prompt), with
    the work variables built block by block and decode-only steps in blocks, gives every
    key bit for bit as the same grid computed on broadcast arrays in one piece."""
    import ridgeline.perf.estimate as est
    import ridgeline.perf.fast_step as fast_step
    import ridgeline.perf.roofline_step as roofline_step

    m = RooflineStepTime.from_names(model=model, hardware="h100-sxm", tp=2, check_fit=False)
    b = np.arange(1.0, 181.0)[:, None]
    s = np.linspace(64, 8192, 150).round()[None, :]
    for kwargs in ({}, {"prefix_tokens": 32.0}, {"details": False},
                   {"context_tokens": np.arange(150.0)[None, :] * 7 + 100}):
        got = estimate(m, b, s, np.array([[64.0]]), **kwargs)
        with monkeypatch.context() as mp:
            mp.setattr(est, "GRID_AS_AXES_MIN", 1 << 62)
            mp.setattr(fast_step, "DECODE_BLOCK", 1 << 62)
            mp.setattr(roofline_step.RooflineStepTime, "_grid_times", lambda self, vals, shape:
                       self._times(self.work_vars(BatchWork(*vals))[0]))
            want = estimate(m, *np.broadcast_arrays(b, s, np.array([[64.0]])), **kwargs)
        assert got.keys() == want.keys()
        bad = [k for k in got if not _same_bits(got[k], want[k])]
        assert not bad, (model, kwargs, bad)
