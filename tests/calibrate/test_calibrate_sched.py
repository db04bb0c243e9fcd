"""The llama.cpp preset schedules as llama.cpp's server does (closed forms, by hand)."""

from __future__ import annotations

import numpy as np
import pytest

from ridgeline.calibrate.presets import preset_scheduling
from ridgeline.errors import RidgelineError
from ridgeline.sim.calibrated_profile import CalibrationProfile
from ridgeline.sim.event_loop import Workload, simulate

# A compute-proportional engine: 2 ms per token in the step, probed up to 512 tokens.
TOKENS = [1, 8, 64, 512]
STEP_S = [0.002 * n for n in TOKENS]


def _profile(slots: int = 8) -> CalibrationProfile:
    return CalibrationProfile.from_table(TOKENS, STEP_S, kv_capacity_tokens=65536,
                                         scheduling=preset_scheduling("llama.cpp", slots))


def test_requests_arriving_together_are_prefilled_in_one_step() -> None:
    # 4 prompts of 100 tokens at t=0: one step of 400 tokens, TTFT = 0.8 s = 4 x one prefill.
    prof = _profile()
    wl = Workload(np.full(4, 100), np.full(4, 2), arrival_s=np.zeros(4))
    res = simulate(wl, prof.engine_config(), prof)
    first = [res.events_s(i)[0] for i in range(4)]
    assert first == pytest.approx([0.8] * 4)
    assert first[0] == pytest.approx(4 * prof.step_time_s_of(prefill_tokens=100))


def test_new_prompt_joins_running_decodes_and_lengthens_their_step() -> None:
    # r0 decodes alone (2 ms steps); r1's 50-token prompt arrives at 0.5 s: the step that
    # prefills it also decodes r0 and takes T(51) = 102 ms; r0 is not paused.
    prof = _profile()
    wl = Workload(np.array([10, 50]), np.array([400, 3]), arrival_s=np.array([0.0, 0.5]))
    res = simulate(wl, prof.engine_config(), prof)
    gaps = np.diff(res.events_s(0))
    assert gaps.max() == pytest.approx(0.102)
    assert np.count_nonzero(gaps > 0.01) == 1
    assert res.events_s(1)[0] - 0.5 <= 0.102 + 0.004


def test_prompt_longer_than_n_batch_is_split_and_ubatch_timed() -> None:
    # 3000 tokens > n_batch 2048: steps of 2048 (4 ubatches) and 952 (1 ubatch + 440).
    prof = _profile(slots=1)
    wl = Workload(np.array([3000]), np.array([1]), arrival_s=np.zeros(1))
    res = simulate(wl, prof.engine_config(), prof)
    want = 4 * 0.002 * 512 + (0.002 * 512 + 0.002 * 440)
    assert res.events_s(0)[0] == pytest.approx(want)
    assert prof.extrapolated_steps == 0


def test_presets_and_bad_name() -> None:
    assert preset_scheduling("llama.cpp", 8).max_num_seqs == 8
    v = preset_scheduling("vllm")
    assert (v.max_num_seqs, v.max_num_batched_tokens, v.ubatch_tokens) == (256, 8192, None)
    with pytest.raises(RidgelineError, match="--preset"):
        preset_scheduling("tgi")
