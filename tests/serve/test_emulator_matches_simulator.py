"""The emulator's wall-clock driver and `simulate` run one engine and one scheduler: given
the same arrivals they must schedule every request into the same steps.

The driver runs in-process on the wall clock; its requests' arrivals are whatever the event
loop produced (several users submitting at once, each next request right after a reply).
`simulate` then replays exactly those arrivals (open loop). Step starts and ends are computed
on the emulated timeline (each step starts where the previous ended), so agreement is exact
up to float rounding whatever the host load: a request that joined a step which started
before it arrived shows as a difference of a whole step. The expected values come from the
simulator, an independent drive of the engine (its own event loop, no wall clock)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from ridgeline.serve.driver import EngineDriver, Stream
from ridgeline.sim.calibrated_profile import CalibrationProfile, Scheduling
from ridgeline.sim.engine import Engine, EngineRequest
from ridgeline.sim.event_loop import Workload, simulate

TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
STEP_S = [0.010, 0.0105, 0.011, 0.012, 0.014, 0.016, 0.020, 0.025, 0.030, 0.050, 0.090, 0.170]
PROMPT, OUTPUT = 512, 8


def _profile() -> CalibrationProfile:
    return CalibrationProfile.from_table(
        TOKENS, STEP_S, kv_capacity_tokens=200_000,
        scheduling=Scheduling(preset="vllm", max_num_seqs=16, max_num_batched_tokens=2048))


def _drive(profile: CalibrationProfile, users: int, requests: int,
           pause_s: float) -> list[Stream]:
    """A closed loop on the driver: every user submits at once, then again `pause_s` after
    each reply ends (0: right at the step boundary, while the driver starts the next step)."""
    async def main() -> list[Stream]:
        drv = EngineDriver(Engine(profile.engine_config(), profile), EngineRequest,
                           speed=4.0)
        drv.start()
        streams: list[Stream] = []
        left = [requests]

        async def user() -> None:
            while left[0] > 0:
                left[0] -= 1
                s = drv.submit(PROMPT, OUTPUT, OUTPUT)
                streams.append(s)
                await s.done.wait()
                if pause_s:
                    await asyncio.sleep(pause_s)

        await asyncio.gather(*(user() for _ in range(users)))
        await drv.stop()
        return streams
    return asyncio.run(main())


@pytest.mark.parametrize(("users", "pause_s"), [(4, 0.0), (8, 0.0), (8, 0.002)])
def test_driver_phases_equal_simulate_on_the_same_arrivals(users: int,
                                                            pause_s: float) -> None:
    profile = _profile()
    streams = sorted(_drive(profile, users, 3 * users, pause_s),
                     key=lambda s: s.arrival_emu_s)
    arrival = np.array([s.arrival_emu_s for s in streams])
    scheduled = np.array([s.scheduled_emu_s for s in streams], dtype=np.float64)
    first = np.array([s.first_token_emu_s for s in streams], dtype=np.float64)
    last = np.array([s.last_token_emu_s for s in streams], dtype=np.float64)
    assert all(s.tokens_emitted == OUTPUT for s in streams)

    n = len(streams)
    wl = Workload(np.full(n, PROMPT), np.full(n, OUTPUT), arrival_s=arrival - arrival[0])
    res = simulate(wl, profile.engine_config(), profile, record_scheduled=True)
    assert res.scheduled_engine_s is not None
    off = res.event_offsets
    sim_sched = res.scheduled_engine_s + arrival[0]
    sim_first = res.event_times_s[off[:-1]] + arrival[0]
    sim_last = res.event_times_s[off[1:] - 1] + arrival[0]

    # per request: queueing, prefill, decode (emulated seconds)
    np.testing.assert_allclose(scheduled - arrival, sim_sched - arrival, atol=1e-9)
    np.testing.assert_allclose(first - scheduled, sim_first - sim_sched, atol=1e-9)
    np.testing.assert_allclose(last - first, sim_last - sim_first, atol=1e-9)
    # the first step is one prompt alone (the others arrived after it started): its
    # prefill is the 512-token step of the table, 50 ms
    assert first[0] - scheduled[0] == pytest.approx(0.050, abs=1e-9)
