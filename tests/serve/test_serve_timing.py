"""A single request at low load sees exactly the perf model's step times.

`ridgeline serve` runs in a subprocess (its own interpreter, as in real use) with the
real engine and the roofline step-time model for llama-3.1-8b on h100-sxm. A client
streams one request with a prompt given as token ids (exact length: 2,000 tokens at speed
1, 8,000 at speed 4) and `ignore_eos`, and timestamps every chunk.

Expected values come from the step-time model directly, not from the server:
- TTFT = one prefill step of the prompt (it fits one step's budget of 8,192 tokens), plus
  the HTTP round trip;
- each inter-token gap = one decode step of a single sequence whose context grows by one
  token per step.

Scheduling noise on a busy machine only ever delays a token (the server never writes
before its step boundary; the client never reads before the write), so the request is
sent 3 times (up to 6 if the machine disturbed all of them) and each token's time since
the send is taken as its minimum over the repeats: the least-disturbed timeline.
Tolerances on it, and why (this 2-core box is shared with other test runs):
- TTFT: strictly >= the prefill step (no early token is possible), and <= prefill + 5 %
  + 10 ms of wall time (HTTP handling and a request's parsing, ~1-3 ms, plus CPU
  contention: the least-disturbed of 6 runs on this box under load 10 was 8 ms late at
  speed 4). The slack is wall time, so it does not shrink with --speed: at speed 4 a
  2,000-token prefill is 11.7 ms of wall time and the slack would allow +91 %; the
  8,000-token prompt (a 202 ms prefill, 50 ms of wall time) keeps it to +25 %.
- TPOT (mean gap) within 5 %: (t_last - t_first) / (n - 1) carries only the first and
  last token's lateness: 2 x 7 ms over the 230 ms span of 39 steps at speed 1 (290 ms
  wall for 199 steps at speed 4) is < 5 %.
- Median gap within 10 % (speed 1): single gaps carry their tokens' lateness, under
  0.6 ms for most tokens on a quiet machine. At speed 4 a gap is 1.5 ms of wall time, too
  short to time one by one on a shared machine, so there only the mean is checked.
"""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest

from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.step_time import BatchWork
from ridgeline.serve.launcher import EmulatorProcess

MODEL, HARDWARE, PROMPT = "llama-3.1-8b", "h100-sxm", 2000


def _stream_times(base_url: str, prompt_tokens: int, max_tokens: int) -> np.ndarray:
    """perf_counter offsets of each token chunk from the moment the request was sent."""
    body = {"model": MODEL, "prompt": list(range(prompt_tokens)), "max_tokens": max_tokens,
            "ignore_eos": True, "stream": True}
    times: list[float] = []
    with httpx.Client(timeout=30) as client:
        client.get(base_url + "/health")  # open the connection before timing
        t0 = time.perf_counter()
        with client.stream("POST", base_url + "/v1/completions", json=body) as resp:
            assert resp.status_code == 200
            for line in resp.iter_lines():
                if line.startswith('data: {"id"'):
                    times.append(time.perf_counter() - t0)
    return np.asarray(times)


@pytest.mark.parametrize(("speed", "output_tokens", "prompt"),
                         [(1.0, 40, PROMPT), (4.0, 200, 4 * PROMPT)])
def test_single_request_matches_the_perf_model(speed: float, output_tokens: int,
                                               prompt: int) -> None:
    step = RooflineStepTime.from_names(model=MODEL, hardware=HARDWARE)
    prefill_s = float(step.step_time_s(BatchWork.for_chunks([prompt], [0], [])))
    contexts = prompt + np.arange(1, output_tokens)  # context of each decode step
    decode_s = np.asarray(step.step_time_s(BatchWork(
        decode_seqs=np.ones(contexts.size), decode_context_tokens=contexts.astype(float))))
    # Sanity of the hand-off: an 8B model on an H100 prefills 2k tokens in tens of ms and
    # decodes one token in ~6 ms (16 GB of weights / ~2.8 TB/s effective).
    scale = prompt / PROMPT
    assert 0.02 * scale < prefill_s < 0.1 * scale and 0.004 < decode_s[0] < 0.01

    def problems(emulated: np.ndarray) -> list[str]:
        ttft, gaps = emulated[0], np.diff(emulated)
        out = []
        if not prefill_s <= ttft <= prefill_s * 1.05 + 0.010 * speed:
            out.append(f"TTFT {ttft * 1e3:.2f} ms vs prefill step {prefill_s * 1e3:.2f} ms")
        if abs(gaps.mean() - decode_s.mean()) > 0.05 * decode_s.mean():
            out.append(f"TPOT {gaps.mean() * 1e3:.3f} ms vs {decode_s.mean() * 1e3:.3f} ms")
        if speed == 1.0 and abs(np.median(gaps) - np.median(decode_s)) > 0.10 * np.median(
                decode_s):
            out.append(f"median ITL {np.median(gaps) * 1e3:.3f} ms vs "
                       f"{np.median(decode_s) * 1e3:.3f} ms")
        return out

    runs: list[np.ndarray] = []
    # Each run repeats the prompt: without this the prefix cache (on by default, as in
    # vLLM) would serve the later runs' prefill.
    # --no-engine-costs: the bare step times (the per-request engine cost, which delays every
    # token, is checked against the data file in test_serve_engine_costs.py).
    with EmulatorProcess(model=MODEL, hardware=HARDWARE, speed=speed,
                         extra_args=["--no-enable-prefix-caching", "--no-engine-costs"]) as emu:
        # 3 runs; up to 6 when a busy machine disturbed them all (a systematic timing
        # error fails every run, so the extra runs cannot hide one).
        while True:
            wall = _stream_times(emu.base_url, prompt, output_tokens)
            assert wall.size == output_tokens  # one chunk per step at low load
            assert wall[0] * speed >= prefill_s  # never early, on any run
            runs.append(wall)
            if len(runs) < 3:
                continue
            found = problems(np.min(np.vstack(runs), axis=0) * speed)
            if not found or len(runs) == 6:
                break
    assert not found, found
