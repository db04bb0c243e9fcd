"""RooflineStepTime: the step-time contract the simulator and emulator use."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ridgeline.errors import RidgelineError
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.step_time import BatchWork
from ridgeline.specs import Parallelism, load_hardware, load_model, resolve_precision


@pytest.fixture(scope="module")
def llama8b() -> RooflineStepTime:
    return RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")


def decode(b: float, t: float) -> BatchWork:
    return BatchWork(decode_seqs=b, decode_context_tokens=b * t)


def test_zero_work_takes_zero_seconds(llama8b: RooflineStepTime) -> None:
    assert llama8b.step_time_s(BatchWork()) == 0.0
    out = llama8b.step_time_s(BatchWork(decode_seqs=np.array([0.0, 4.0]),
                                        decode_context_tokens=np.array([0.0, 400.0])))
    assert out[0] == 0.0 and out[1] > 0.0


def test_scalar_returns_float_and_array_broadcasts(llama8b: RooflineStepTime) -> None:
    assert isinstance(llama8b.step_time_s(decode(8, 100)), float)
    b = np.array([1.0, 8.0, 64.0])[:, None]
    t = np.array([128.0, 4096.0])[None, :]
    grid = llama8b.step_time_s(BatchWork(decode_seqs=b, decode_context_tokens=b * t))
    assert grid.shape == (3, 2)
    for i in range(3):
        for j in range(2):
            assert grid[i, j] == pytest.approx(
                llama8b.step_time_s(decode(b[i, 0], t[0, j])), rel=1e-12)


def test_fast_forward_contexts_are_one_call(llama8b: RooflineStepTime) -> None:
    # docs/engine.md: k decode steps of B sequences = one call with T0 + B*arange(k).
    ctx = 32 * 500 + 32 * np.arange(10.0)
    many = llama8b.step_time_s(BatchWork(decode_seqs=32, decode_context_tokens=ctx))
    one_by_one = [llama8b.step_time_s(BatchWork(decode_seqs=32, decode_context_tokens=c))
                  for c in ctx]
    np.testing.assert_allclose(many, one_by_one, rtol=1e-12)
    assert np.all(np.diff(many) > 0)  # more context, more KV to read


def test_mixed_step_reads_weights_once(llama8b: RooflineStepTime) -> None:
    pre = BatchWork.for_chunks([512], [0], [])
    dec = BatchWork.for_chunks([], [], [1000] * 16)
    mixed = BatchWork.for_chunks([512], [0], [1000] * 16)
    t_pre, t_dec, t_mix = (llama8b.step_time_s(w) for w in (pre, dec, mixed))
    assert max(t_pre, t_dec) < t_mix < t_pre + t_dec


def test_decode_bytes_dense_hand_computed(llama8b: RooflineStepTime) -> None:
    """The decode read: D_dec = D_w + 2LB(T+1) d_kv b_kv + D_a, for Llama-3.1-8B in bf16."""
    d, L, ff, V, kv_dim = 4096, 32, 14336, 128256, 8 * 128
    layer_params = d * (d + 2 * kv_dim) + d * d + 3 * d * ff  # qkv, o, gate/up/down
    d_w = 2 * (L * layer_params + V * d)  # bf16; untied LM head read, embedding not
    assert d_w == 15_009_316_864

    def step_bytes(b: float, t: float) -> float:
        return float(llama8b.breakdown(decode(b, t)).bytes.sum())

    # Intercept in B (extrapolated to B=0) is the weight traffic, exactly.
    b1, b2 = step_bytes(1, 0), step_bytes(2, 0)
    assert 2 * b1 - b2 == pytest.approx(d_w, rel=1e-12)
    # KV term: 2 L B (T+1) d_kv b_kv; its context slope is 2 L B d_kv b_kv per token.
    for b in (1, 8):
        slope = (step_bytes(b, 2000) - step_bytes(b, 1000)) / 1000
        assert slope == pytest.approx(2 * L * b * kv_dim * 2, rel=1e-12)
    kv = 2 * L * 8 * (1000 + 1) * kv_dim * 2
    d_a = step_bytes(8, 1000) - d_w - kv
    # Other activation IO (~290 KB per token per layer: norms, GEMM in/out, SiLU) is small.
    assert 0 < d_a < 0.01 * d_w


def test_decode_bytes_moe_hand_computed() -> None:
    """Mixtral-8x7B, B=1: k=2 experts touched, E[U](1) = k exactly."""
    m = RooflineStepTime.from_names(model="mixtral-8x7b", hardware="h200")
    d, L, ff, V, kv_dim = 4096, 32, 14336, 32000, 8 * 128
    attn = d * (d + 2 * kv_dim) + d * d
    expert = 3 * d * ff
    router = d * 8
    d_w = 2 * (L * (attn + 2 * expert + router) + V * d)
    t = 4000
    kv = 2 * L * 1 * (t + 1) * kv_dim * 2
    total = float(m.breakdown(decode(1, t)).bytes.sum())
    assert total > d_w + kv
    assert total == pytest.approx(d_w + kv, rel=2e-3)
    # At B=8 tokens the layer touches E(1-(1-k/E)^8) = 7.20 experts on average.
    t8 = float(m.breakdown(decode(8, t)).bytes.sum())
    d_w8 = 2 * (L * (attn + 8 * (1 - 0.75**8) * expert + router) + V * d)
    assert t8 == pytest.approx(d_w8 + 8 * kv, rel=2e-3)


def test_mla_cache_hand_computed() -> None:
    """DeepSeek-V3 caches the 512 latent + 64 rope dims per layer, replicated on TP ranks."""
    m = RooflineStepTime.from_names(model="deepseek-v3", hardware="h200", weights="fp8",
                                    kv="bf16", tp=8)
    assert m.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272

    def step_bytes(b: float, t: float) -> float:
        return float(m.breakdown(decode(b, t)).bytes.sum())

    slope = (step_bytes(4, 3000) - step_bytes(4, 1000)) / 2000
    assert slope == pytest.approx(4 * 61 * 576 * 2, rel=1e-12)


def test_doubling_bandwidth_halves_memory_bound_time() -> None:
    # The plain roofline's law (the fitted kernel model adds floors that do not scale).
    hw = replace(load_hardware("h100-sxm").with_efficiency(kernel_overhead_us=0.0),
                 kernel_profile="")
    hw2 = replace(hw, memory_bandwidth_bytes_s=2 * hw.memory_bandwidth_bytes_s)
    spec, pr = load_model("llama-3.1-8b"), resolve_precision()
    slow_m = RooflineStepTime(spec, hw, pr, Parallelism())
    fast_m = RooflineStepTime(spec, hw2, pr, Parallelism())
    w = decode(1, 512)  # B=1 decode: every operator memory-bound
    assert fast_m.step_time_s(w) == pytest.approx(slow_m.step_time_s(w) / 2, rel=1e-12)


def test_more_batch_never_lowers_throughput_until_compute_bound(
        llama8b: RooflineStepTime) -> None:
    b = np.arange(1.0, 513.0)
    t = llama8b.step_time_s(decode(b, 1024.0))
    assert np.all(np.diff(b / t) > 0)


def test_kv_capacity_and_fit() -> None:
    m = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
    # By hand (vLLM's budget: util x memory, less weights, one pass's activations and a
    # runtime reserve; perf/memory.py), Llama-3.1-8B in bf16 on one H100 SXM (85,520,809,984
    # bytes), max_num_batched_tokens 8,192, max_num_seqs 256:
    #   weights: 32 layers x (4096 x 6144 qkv + 4096^2 o + 3 x 4096 x 14336 MLP + 2 x 4096
    #            norms) + 2 x 128,256 x 4,096 (embedding, untied head) + 4,096 (final norm)
    #            = 8,030,261,248 parameters x 2 bytes = 16,060,522,496
    #   workspace: 8,192 tokens x (2 x 4096 + 6144 + 4096 + 3 x 14336) x 2 bytes
    #            + 256 x 128,256 fp32 logits = 1,137,967,104
    #   reserve: 1 GiB; KV per token: 32 x 2 x 8 heads x 128 x 2 bytes = 131,072
    budget = 0.9 * 85_520_809_984
    weights = (32 * (4096 * 6144 + 4096**2 + 3 * 4096 * 14336 + 2 * 4096)
               + 2 * 128_256 * 4096 + 4096) * 2
    work = 8192 * (2 * 4096 + 6144 + 4096 + 3 * 14336) * 2 + 256 * 128_256 * 4
    assert (weights, work) == (16_060_522_496, 1_137_967_104)
    cap = m.kv_capacity_tokens(0.9)
    assert cap == int((budget - weights - work - 2**30) // 131_072) == 447_818
    budget_half = 0.5 * 85_520_809_984
    assert m.kv_capacity_tokens(0.5) == int((budget_half - weights - work - 2**30) // 131_072)
    with pytest.raises(RidgelineError, match=r"does not fit.*short by"):
        RooflineStepTime.from_names(model="llama-3.1-405b", hardware="h100-sxm")
    big = RooflineStepTime.from_names(model="llama-3.1-405b", hardware="h200", weights="fp8",
                                      tp=8)
    assert big.kv_capacity_tokens() > 0


@pytest.mark.parametrize("kwargs, field", [
    ({"model": "nope-1b"}, "model"),
    ({"hardware": "tpu-v9"}, "hardware"),
    ({"weights": "int3"}, "weights"),
    ({"kv": "int4"}, "kv"),
    ({"activations": "fp8", "hardware": "a100-80gb"}, "activations"),
    ({"tp": 3}, "tp"),
    ({"ep": 2}, "ep"),
    ({"compute_efficiency": 1.5}, "compute-efficiency"),
])
def test_bad_input_is_one_line_error(kwargs: dict, field: str) -> None:
    args = {"model": "llama-3.1-8b", "hardware": "h100-sxm", **kwargs}
    with pytest.raises(RidgelineError) as exc:
        RooflineStepTime.from_names(**args)
    assert str(exc.value).startswith(field) and "\n" not in str(exc.value)


def test_assumptions_and_describe(llama8b: RooflineStepTime) -> None:
    text = " ".join(llama8b.assumptions())
    for word in ("max(F/C_eff, D/beta_eff)", "GQA", "efficiency"):
        assert word in text
    moe = RooflineStepTime.from_names(model="qwen3-30b-a3b", hardware="h100-sxm", tp=2, ep=2)
    text = " ".join(moe.assumptions())
    assert "E[U] = E(1-(1-k/E)^n)" in text and "all-reduce" in text
    # TP x EP on vLLM's default backend: the tokens are on every TP rank, nothing gathered.
    assert "no gather, every TP rank holds the step's tokens" in text
    d = llama8b.describe()
    assert d["model"] == "llama-3.1-8b" and d["parallelism"]["tp"] == 1
    assert d["precision"] == {"weights": "bf16", "kv": "bf16", "activations": "bf16",
                              "scheme": "W16A16 (bf16)", "gemm_kernel_dtype": "bf16",
                              "source": "defaults (16-bit; the checkpoint has no "
                                        "quantization_config)"}


def test_tp_splits_work_and_adds_allreduce() -> None:
    one = RooflineStepTime.from_names(model="llama-3.1-70b", hardware="h100-sxm", tp=4,
                                      check_fit=False)
    two = RooflineStepTime.from_names(model="llama-3.1-70b", hardware="h100-sxm", tp=8)
    w = decode(16, 2048)
    assert two.step_time_s(w) < one.step_time_s(w)
    assert two.breakdown(w).comm_s > 0


def test_large_mixed_grid_equals_point_calls() -> None:
    """Grids larger than one evaluation block (4096 columns) give the scalar answers."""
    m = RooflineStepTime.from_names(model="qwen3-30b-a3b", hardware="h100-sxm")
    rng = np.random.default_rng(1)
    size = 10_000
    chunk = rng.integers(0, 600, size).astype(float)
    ctx = rng.integers(0, 4000, size).astype(float)
    dq = rng.integers(0, 64, size).astype(float)
    dc = dq * rng.integers(1, 8000, size)
    w = BatchWork(prefill_tokens=chunk, prefill_attn_pairs=chunk * ctx + chunk * (chunk + 1) / 2,
                  prefill_context_tokens=ctx, prefill_seqs=(chunk > 0).astype(float),
                  decode_seqs=dq, decode_context_tokens=dc)
    grid = m.step_time_s(w)
    for i in rng.choice(size, 25, replace=False):
        one = BatchWork(prefill_tokens=chunk[i], prefill_attn_pairs=w.prefill_attn_pairs[i],
                        prefill_context_tokens=ctx[i], prefill_seqs=float(chunk[i] > 0),
                        decode_seqs=dq[i], decode_context_tokens=dc[i])
        assert grid[i] == pytest.approx(m.step_time_s(one), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("moe", [False, True])
def test_large_grid_blocks_equal_the_whole_matrix(moe: bool) -> None:
    """A large grid's step times built block by block (`_grid_times`) equal, bit for bit,
    the times of its whole work-variable matrix (`_times`), whichever fields are arrays,
    scalars or zero (prefill_seqs zero: its row takes decode_seqs again in every block)."""
    m = RooflineStepTime.from_names(model="mixtral-8x7b" if moe else "llama-3.1-8b",
                                    hardware="h100-sxm", tp=2, check_fit=False)
    rng = np.random.default_rng(5)
    n = 70_001
    tok = rng.integers(1, 4000, n).astype(float)
    dq = rng.integers(0, 200, n).astype(float)
    for work in (BatchWork(prefill_tokens=tok, prefill_attn_pairs=tok * 30.0,
                           decode_seqs=dq, decode_context_tokens=dq * 900.0),
                 BatchWork(prefill_tokens=tok, prefill_attn_pairs=tok * tok / 2,
                           prefill_context_tokens=64.0, prefill_seqs=tok / 500.0,
                           decode_seqs=7.0, decode_context_tokens=3000.0),
                 BatchWork(prefill_tokens=tok.reshape(1, n), prefill_seqs=1.0,
                           decode_seqs=dq.reshape(n, 1)[:3], decode_context_tokens=0.0)):
        fields = [work.prefill_tokens, work.prefill_attn_pairs, work.prefill_context_tokens,
                  work.prefill_seqs, work.decode_seqs, work.decode_context_tokens]
        shape = np.broadcast_shapes(*(np.shape(x) for x in fields))
        got = m._grid_times(fields, shape)
        want = m._times(m.work_vars(work)[0])
        assert got.tobytes() == want.tobytes()
