"""vLLM's hybrid KV allocator for sliding-window models, against hand computations.

The facts (vLLM v1, `kv_cache_utils._get_kv_cache_groups_uniform_page_size`,
`single_type_kv_cache_manager.SlidingWindowManager`, `KVCacheManager.allocate_slots`):
layers of one kind form groups of `group_size` layers (the fewest of a kind, or the most if
under 1.5x the fewest), one pool of memory // (page x group_size) blocks serves every
group, a full-attention group holds cdiv(T, B) blocks per sequence and a sliding-window
group frees the whole blocks before its window: skipped tokens max(0, C - w + 1) after C
computed tokens. A window group then holds at most ceil(w / B) + 1 blocks per sequence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.step_time import BatchWork, LinearStepTime
from ridgeline.sim.engine import Engine, EngineConfig, EngineRequest, kv_blocks_from_memory
from ridgeline.sim.kv_cache import BlockPool, KVLayout, kv_layout
from ridgeline.sim.sequence import DECODE
from ridgeline.specs import load_model
from ridgeline.specs.model import from_hf_config

DATA = Path(__file__).parents[1] / "data" / "hf_configs"
B = 16


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class _Timed:
    """A hand-timed step model (10 ms a step) that carries a real model's layers."""

    def __init__(self, name: str) -> None:
        self.model = load_model(str(DATA / f"{name}.json"))
        self._lin = LinearStepTime(base_s=0.01)

    def step_time_s(self, work: BatchWork) -> Any:
        return self._lin.step_time_s(work)


def _run(engine: Engine, requests: list[EngineRequest]) -> list[tuple[int, Any]]:
    """Step to the end; (step, StepResult) of every step."""
    for r in requests:
        engine.add_request(r)
    out, t, n = [], 0.0, 0
    while engine.has_unfinished():
        r = engine.step(t)
        assert r.duration_s > 0 or r.preempted, "the engine stalled"
        out.append((n, r))
        t += r.duration_s
        n += 1
        assert n < 5000
    return out


# --- the groups ------------------------------------------------------------------------------

def test_groups_follow_vllms_rule() -> None:
    def of(name: str) -> KVLayout:
        return kv_layout(_Timed(name), B)

    m = of("mistralai--Mistral-7B-v0.1")       # one kind: one window group of 32 layers
    assert (m.full_groups, m.window_groups, m.group_layers, m.window_tokens) == (0, 1, 32, 4096)
    g = of("google--gemma-2-9b-it")             # 21 + 21: two groups of 21
    assert (g.full_groups, g.window_groups, g.group_layers) == (1, 1, 21)
    o = of("openai--gpt-oss-20b")               # 12 + 12 (window 128)
    assert (o.full_groups, o.window_groups, o.group_layers, o.window_tokens) == (1, 1, 12, 128)
    # Gemma-3-1b: 22 sliding + 4 global -> group size 4, 6 window groups (2 padding layers).
    assert KVLayout.for_layers(B, 4, 22, 512) == KVLayout(B, 1, 6, 512, 4)
    # 12 sliding + 13 full (gpt-oss + a drafter, vLLM's own example): 13 < 1.5 x 12 -> 13.
    assert KVLayout.for_layers(B, 13, 12, 128).group_layers == 13
    # Chunked local attention stays in full groups; no window: a plain paged cache.
    assert of("RedHatAI--Llama-4-Scout-17B-16E-Instruct-FP8-dynamic") == KVLayout(B)
    assert of("meta-llama--Meta-Llama-3.1-8B") == KVLayout(B)


def test_window_group_holds_at_most_ceil_w_over_b_plus_one() -> None:
    lay = KVLayout.for_layers(B, 0, 32, 4096)
    # During a decode step (slots T + 1 after T computed) and between steps (T after T).
    during = [lay.held(t + 1, t) for t in range(4000, 40_000)]
    after = [lay.held(t, t) for t in range(4000, 40_000)]
    assert max(during) == _cdiv(4096, B) + 1 == 257 and min(during[1000:]) == 256
    assert max(after) == 257
    # A window that is not a multiple of B (Phi-3's 2047): still ceil(w / B) + 1 at most.
    odd = KVLayout.for_layers(B, 0, 32, 2047)
    assert max(odd.held(t + 1, t) for t in range(2000, 9000)) == _cdiv(2047, B) + 1


def test_pool_size_is_vllms_memory_over_page_times_group_size() -> None:
    """Gemma-2-9b on one H200: vLLM's pool has memory // (page x 21) blocks of 16 tokens,
    each block one group's 21 layers; ridgeline's KV capacity counts tokens of all 42."""
    sm = RooflineStepTime.from_names(model=str(DATA / "google--gemma-2-9b-it.json"),
                                     hardware="h200")
    kv_tokens = sm.kv_capacity_tokens(0.9)
    page = B * 2 * 8 * 256 * 2                             # bytes per block per layer
    kv_bytes = kv_tokens * 42 * 2 * 8 * 256 * 2
    assert kv_blocks_from_memory(sm, 0.9, B) == kv_bytes // (page * 21)
    assert kv_blocks_from_memory(sm, 0.9, B) == 2 * (kv_tokens // B) + (kv_tokens % B) // 8
    # One kind of layer (Mistral): the same count as a plain cache.
    ms = RooflineStepTime.from_names(model=str(DATA / "mistralai--Mistral-7B-v0.1.json"),
                                     hardware="h200")
    assert kv_blocks_from_memory(ms, 0.9, B) == ms.kv_capacity_tokens(0.9) // B


# --- one sequence, block by block -------------------------------------------------------------

def _tokens_after_each_step(prompt: int, output: int, chunk: int) -> list[int]:
    """KV tokens of a lone sequence after each step: prefill chunks, then one per decode;
    its last step finishes it (the blocks go back)."""
    out, t = [], 0
    while t < prompt:
        t = min(prompt, t + chunk)
        out.append(t)
    out.extend(prompt + i for i in range(1, output))
    return out


@pytest.mark.parametrize(("name", "full", "window"), [
    ("mistralai--Mistral-7B-v0.1", 0, 1),
    ("google--gemma-2-9b-it", 1, 1),
])
def test_blocks_of_one_sequence_by_hand(name: str, full: int, window: int) -> None:
    prompt, output, chunk = 10_000, 300, 2048
    eng = Engine(EngineConfig(num_kv_blocks=5000, block_size_tokens=B,
                              max_num_batched_tokens=chunk, max_num_seqs=4), _Timed(name))
    steps = _run(eng, [EngineRequest("a", prompt_tokens=prompt, output_tokens=output)])
    tokens = _tokens_after_each_step(prompt, output, chunk)
    assert len(steps) == len(tokens)
    # By hand: each full group cdiv(T, B); each window group cdiv(T, B) less the whole
    # blocks before the last w - 1 tokens.
    hand = [full * _cdiv(t, B) + window * (_cdiv(t, B) - max(0, t - 4096 + 1) // B)
            for t in tokens]
    got = [r.kv_blocks_used for _, r in steps]
    assert got[:-1] == hand[:-1]
    assert got[-1] == 0 and not steps[-1][1].preempted
    if full == 0:
        assert max(got) == 257
    # Fewer than every token on every layer, (full + window) x cdiv(T, B), past the window.
    assert all(g < (full + window) * _cdiv(t, B) for g, t in zip(got, tokens, strict=True)
               if t >= 4096 + B)


# --- capacity in sequences and preemption -----------------------------------------------------

def _two_long_decodes(num_blocks: int) -> int:
    """Two 4100-token prompts decoding 300 tokens on a window-4096 model (Mistral), both
    admitted at once; returns the preemptions."""
    eng = Engine(EngineConfig(num_kv_blocks=num_blocks, block_size_tokens=B,
                              max_num_batched_tokens=8200, max_num_seqs=2),
                 _Timed("mistralai--Mistral-7B-v0.1"))
    steps = _run(eng, [EngineRequest(i, prompt_tokens=4100, output_tokens=300)
                       for i in ("a", "b")])
    assert eng.stats().num_finished_total == 2
    assert max(r.kv_blocks_used for _, r in steps) <= num_blocks
    return eng.stats().num_preemptions_total


def test_preemption_follows_the_window_bound() -> None:
    """By hand: a decoding sequence past its window needs 257 blocks while its step
    allocates (256 + 1 unless T + 1 is a multiple of 16), so two need 514: none is preempted
    with 514 blocks, one is with 513. Counting every token (no frees), each would need
    cdiv(4399, 16) = 275 blocks, 550 for the two."""
    assert _two_long_decodes(514) == 0
    assert _two_long_decodes(513) >= 1


def test_eight_30k_sequences_decode_together() -> None:
    """Mistral at 30k context: each decoding sequence holds <= 257 blocks, a prefill chunk
    of 2048 past the window <= cdiv(4095 + 2048, 16) + 1 = 385; 7 x 257 + 385 = 2184 <= 2200
    blocks run all 8 at once, where holding every token (1878 blocks each) fits one."""
    eng = Engine(EngineConfig(num_kv_blocks=2200, block_size_tokens=B,
                              max_num_batched_tokens=2048, max_num_seqs=8),
                 _Timed("mistralai--Mistral-7B-v0.1"))
    steps = _run(eng, [EngineRequest(str(i), prompt_tokens=30_000, output_tokens=200)
                       for i in range(8)])
    assert eng.stats().num_preemptions_total == 0
    assert max(r.decode_seqs for _, r in steps) == 8


# --- the event-driven engine agrees with the step-by-step one --------------------------------

def test_windowed_fast_forward_equals_step_by_step() -> None:
    """`simulate` on a windowed roofline model: the fast mode (decode runs between events,
    frees accumulated per step) equals the step-by-step reference bit for bit, with the
    pool tight enough that the frees decide admissions and preemptions."""
    from ridgeline.sim.event_loop import Workload, simulate

    sm = RooflineStepTime.from_names(model=str(DATA / "mistralai--Mistral-7B-v0.1.json"),
                                     hardware="h100-sxm", max_num_seqs=16,
                                     max_num_batched_tokens=2048)
    rng = np.random.default_rng(11)
    n = 40
    wl = Workload(prompt_tokens=rng.integers(3000, 9000, n),
                  output_tokens=rng.integers(50, 400, n),
                  arrival_s=np.sort(rng.uniform(0, 10, n)))
    cfg = EngineConfig(max_num_seqs=16, max_num_batched_tokens=2048, num_kv_blocks=1800)
    fast = simulate(wl, cfg, sm, mode="fast")
    ref = simulate(wl, cfg, sm, mode="step")
    assert np.array_equal(fast.end_s, ref.end_s) and np.array_equal(fast.sent_s, ref.sent_s)
    assert fast.preemptions.sum() > 0          # the tight pool preempts: the frees matter
    assert np.array_equal(fast.preemptions, ref.preemptions)


def test_shared_prefix_blocks_stay_consistent() -> None:
    """Prefix caching on Gemma-2 (one full + one window group): a cached block is one key
    of 2 pool blocks, held in both groups while used. Chunks of 8192 pass the 4096 window,
    so some prefix blocks are registered after the window group freed them (and are taken
    back). After every step the pool's used blocks equal, by hand, each running sequence's
    private blocks, cdiv(T, B) - s + cdiv(T, B) - max(s, skip(T)) with s shared, plus 2 per
    referenced key; at the end everything is free again (evictable keys count 2)."""
    eng = Engine(EngineConfig(num_kv_blocks=6000, block_size_tokens=B,
                              max_num_batched_tokens=8192, max_num_seqs=4,
                              enable_prefix_caching=True), _Timed("google--gemma-2-9b-it"))
    for i in range(6):
        eng.add_request(EngineRequest(str(i), prompt_tokens=10_000, output_tokens=40,
                                      arrival_s=0.0, prefix_group="p", prefix_tokens=9000))
    sch = eng.scheduler
    pool: BlockPool = sch.pool
    t, steps = 0.0, 0
    while eng.has_unfinished():
        r = eng.step(t)
        t += r.duration_s
        steps += 1
        assert steps < 5000
        private = 0
        for seq in sch.running:
            kv = seq.a + sch.step_index if seq.state == DECODE else seq.num_computed
            sh = len(seq.shared)
            skip = max(0, kv - 4096 + 1) // B
            private += (_cdiv(kv, B) - sh) + (_cdiv(kv, B) - max(sh, skip))
        referenced = sum(1 for v in pool.cached.values() if v > 0)
        assert pool.used_blocks == private + 2 * referenced
        pool.check()
    assert pool.key_blocks == 2 and pool.used_blocks == 0
    assert pool.free_blocks == pool.num_blocks and len(pool.evictable) > 0
    assert eng.stats().prefix_cache_hits_tokens_total > 0


def test_plain_models_keep_one_group() -> None:
    m = from_hf_config(json_llama())
    assert kv_layout(type("S", (), {"model": m})(), B) == KVLayout(B)


def json_llama() -> dict[str, Any]:
    import json

    return json.loads((DATA / "meta-llama--Meta-Llama-3.1-8B.json").read_text())
