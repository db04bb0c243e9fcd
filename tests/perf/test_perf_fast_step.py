"""The compiled step-time path (ridgeline.perf.fast_step) against the per-operator reference.

`RooflineStepTime.step_time_s` evaluates scalars and calls of a few steps with a generated
straight-line function and a decode-only table; `breakdown(work)` keeps the per-operator
matrix computation. They must agree to floating-point reassociation, and the compiled path
must give every step the same bits whatever else is in the call (the simulator's
event-driven and step-by-step modes rely on it).
"""

from __future__ import annotations

import numpy as np
import pytest

from ridgeline.perf.fast_step import MAX_SCALAR_COLUMNS, MAX_TABLE_SEQS
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.step_time import BatchWork

CONFIGS = {
    "dense-mha": ("llama-2-7b", "a100-80gb", {}),
    "gqa": ("llama-3.1-8b", "h100-sxm", {}),
    "gqa-bias-tp2": ("qwen2.5-7b", "h100-sxm", {"tp": 2}),
    "gqa-tp4-pp2": ("llama-3.1-70b", "h100-sxm", {"tp": 4, "pp": 2}),
    "moe-mixtral-tp2-ep2": ("mixtral-8x7b", "h100-sxm", {"tp": 2, "ep": 2}),
    "moe-qwen3": ("qwen3-30b-a3b", "h100-sxm", {}),
    "mla-deepseek-tp8": ("deepseek-v3", "h200", {"tp": 8, "weights": "fp8"}),
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def model(request: pytest.FixtureRequest) -> RooflineStepTime:
    name, hw, kw = CONFIGS[request.param]
    return RooflineStepTime.from_names(name, hw, **kw)


def random_work(rng: np.random.Generator, shape: tuple[int, ...], p_zero: float = 0.4
                ) -> BatchWork:
    """Independent random fields (each zero with probability p_zero), whole-number counts."""

    def field(hi: float) -> np.ndarray:
        x = np.floor(rng.random(shape) * hi)
        return np.where(rng.random(shape) < p_zero, 0.0, x)

    pt = field(8192)
    ps = np.minimum(field(16), np.maximum(pt, 1.0))
    pc = field(30000)
    pairs = np.where(pt > 0, pt * (pt + 1) / 2 + pt * np.floor(pc / np.maximum(ps, 1)), 0.0)
    dq = field(300)
    dc = dq * field(8000) + field(50)
    return BatchWork(pt, pairs, pc, ps, dq, dc)


def assert_matches_reference(model: RooflineStepTime, work: BatchWork, got: object) -> None:
    ref = model.breakdown(work).total_s
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-12, atol=0.0)


def test_compiled_path_applies_to_every_catalog_shape(model: RooflineStepTime) -> None:
    assert model._fast.applicable


@pytest.mark.parametrize("shape", [(), (1,), (2,), (3, 4), (MAX_SCALAR_COLUMNS,), (257,)])
def test_random_grids_equal_the_per_operator_reference(model: RooflineStepTime,
                                                       shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(hash(shape) % 2**32)
    for _ in range(5):
        work = random_work(rng, shape, p_zero=0.4 if len(shape) and shape[0] <= 16 else 0.97)
        direct = model._fast.evaluate(work)
        if shape == () or np.count_nonzero(
                np.asarray(work.prefill_tokens) + np.asarray(work.prefill_attn_pairs)
                + np.asarray(work.prefill_context_tokens) + np.asarray(work.prefill_seqs)
        ) <= MAX_SCALAR_COLUMNS:
            assert direct is not None  # the compiled path, not the matrix fallback
            assert_matches_reference(model, work, direct)
        out = model.step_time_s(work)
        assert np.shape(out) == shape
        assert isinstance(out, float) if shape == () else isinstance(out, np.ndarray)
        assert_matches_reference(model, work, out)


def test_scalars_mixed_with_arrays(model: RooflineStepTime) -> None:
    dc = np.array([0.0, 100.0, 5000.0, 40000.0])
    for work in (BatchWork(decode_seqs=8, decode_context_tokens=dc),
                 BatchWork(prefill_tokens=512, prefill_attn_pairs=512 * 513 / 2,
                           prefill_seqs=1, decode_seqs=np.array([0.0, 1, 8, 64]),
                           decode_context_tokens=dc),
                 BatchWork(decode_seqs=np.array([[1.0], [32.0]]),
                           decode_context_tokens=np.array([[10.0, 1e5]]))):
        assert_matches_reference(model, work, model.step_time_s(work))


def test_simulator_pattern_is_exact_per_step(model: RooflineStepTime) -> None:
    """A mixed step then decode-only runs (the scheduler's look-ahead): every step gets the
    same bits alone, in a pair, or anywhere in a wide call."""
    k = 40
    w = np.zeros((6, k))
    w[:4, 0] = (700.0, 700 * 701 / 2 + 700 * 300, 300.0, 2.0)
    w[4, 0], w[5, 0] = 37.0, 37 * 900.0
    w[4, 1:25], w[4, 25:] = 38.0, 35.0
    w[5, 1:25] = 38 * 910 + 38 * np.arange(24.0)
    w[5, 25:] = 35 * 930 + 35 * np.arange(15.0)
    wide = model.step_time_s(BatchWork(*w))
    assert_matches_reference(model, BatchWork(*w), wide)
    for j in range(k):
        alone = model.step_time_s(BatchWork(*(float(x) for x in w[:, j])))
        pair = model.step_time_s(BatchWork(*np.repeat(w[:, j:j + 1], 2, axis=1)))
        shifted = model.step_time_s(BatchWork(*np.roll(w, -j, axis=1)))
        assert alone == wide[j] and pair[0] == pair[1] == wide[j] and shifted[0] == wide[j]


def test_no_work_is_exactly_zero(model: RooflineStepTime) -> None:
    assert model.step_time_s(BatchWork()) == 0.0
    t = model.step_time_s(BatchWork(decode_seqs=np.zeros(3), decode_context_tokens=np.zeros(3)))
    assert t.tolist() == [0.0, 0.0, 0.0]


def test_fallbacks_still_equal_the_reference() -> None:
    m = RooflineStepTime.from_names("qwen3-30b-a3b", "h100-sxm")
    f = m._fast
    cases = {
        "fractional decode_seqs": BatchWork(decode_seqs=np.array([2.5, 3.0]),
                                            decode_context_tokens=np.array([100.0, 200.0])),
        "negative decode_seqs": BatchWork(decode_seqs=np.array([-3.0, 3.0]),
                                          decode_context_tokens=np.array([0.0, 200.0])),
        "beyond the table": BatchWork(decode_seqs=np.array([8.0, MAX_TABLE_SEQS + 1.0]),
                                      decode_context_tokens=np.array([800.0, 1e7])),
        "prefill in many steps": BatchWork(prefill_tokens=np.arange(1.0, 40.0),
                                           prefill_attn_pairs=np.arange(1.0, 40.0),
                                           prefill_seqs=1.0),
    }
    for name, work in cases.items():
        assert f.evaluate(work) is None, name
        assert_matches_reference(m, work, m.step_time_s(work))
    # A decode batch above the initial table grows it (same values as single steps).
    big = BatchWork(decode_seqs=np.array([4000.0, 4001.0]),
                    decode_context_tokens=np.array([4e6, 4.1e6]))
    assert f.evaluate(big) is not None
    out = m.step_time_s(big)
    assert_matches_reference(m, big, out)
    assert out[1] == m.step_time_s(BatchWork(decode_seqs=4001.0, decode_context_tokens=4.1e6))
