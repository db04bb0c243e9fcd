"""The engine API of docs/engine.md, with event times computed by hand."""

from __future__ import annotations

import pytest

from ridgeline.errors import RidgelineError
from ridgeline.perf.step_time import LinearStepTime
from ridgeline.sim.engine import Engine, EngineConfig, EngineRequest


def drive(engine: Engine, t: float = 0.0, arrivals: dict | None = None):
    """Step the engine back to back from t; returns (event times per id, step results)."""
    arrivals = dict(arrivals or {})
    events: dict[str, list[float]] = {}
    results = []
    while engine.has_unfinished() or arrivals:
        for at, req in sorted(arrivals.items()):
            if at <= t:
                engine.add_request(req)
                del arrivals[at]
        r = engine.step(t)
        results.append((t, r))
        if r.duration_s == 0 and not r.preempted:
            assert arrivals, "engine idle with nothing to come"
            t = min(arrivals)
            continue
        t = t + r.duration_s
        for rid, n in r.emitted:
            events.setdefault(rid, []).extend([t] * n)
    return events, results


def test_two_requests_hand_computed():
    # step = 10 ms + 1 ms per prefill token + 2 ms per decoding sequence
    m = LinearStepTime(base_s=0.010, per_prefill_token_s=0.001, per_decode_seq_s=0.002)
    eng = Engine(EngineConfig(num_kv_blocks=100), m)
    eng.add_request(EngineRequest("A", prompt_tokens=10, output_tokens=3, arrival_s=0.0))
    r0 = eng.step(0.0)                      # A's prefill (10 tokens): 10 + 10 = 20 ms
    assert r0.duration_s == pytest.approx(0.020)
    assert r0.emitted == [("A", 1)]
    # B arrives at 5 ms, while step 0 is in flight: it joins step 1.
    eng.add_request(EngineRequest("B", prompt_tokens=20, output_tokens=2, arrival_s=0.005))
    r1 = eng.step(0.020)                    # A decodes, B prefills 20: 10 + 20 + 2 = 32 ms
    assert r1.duration_s == pytest.approx(0.032)
    assert sorted(r1.emitted) == [("A", 1), ("B", 1)]
    r2 = eng.step(0.052)                    # both decode: 10 + 2*2 = 14 ms
    assert r2.duration_s == pytest.approx(0.014)
    assert sorted(r2.finished) == ["A", "B"]
    assert not eng.has_unfinished()
    # A's tokens at 20, 52, 66 ms; B's at 52, 66 ms.
    assert eng.step(0.066).duration_s == 0.0
    s = eng.stats()
    assert (s.prompt_tokens_total, s.generation_tokens_total) == (30, 5)
    assert s["num_running"] == 0 and s.kv_usage_fraction == 0.0


def test_chunked_prefill_hand_computed():
    # Budget 8 tokens per step: a 20-token prompt is prefilled in chunks 8, 8, 4.
    m = LinearStepTime(base_s=0.010, per_prefill_token_s=0.001, per_attn_pair_s=1e-5,
                       per_decode_seq_s=0.002, per_context_token_s=1e-6)
    eng = Engine(EngineConfig(max_num_seqs=4, max_num_batched_tokens=8, num_kv_blocks=100), m)
    eng.add_request(EngineRequest("A", prompt_tokens=20, output_tokens=2))
    events, results = drive(eng)
    # chunk c after p computed tokens: pairs = c*p + c(c+1)/2, context read = p
    d0 = 0.010 + 8 * 0.001 + 1e-5 * (8 * 0 + 36) + 1e-6 * 0
    d1 = 0.010 + 8 * 0.001 + 1e-5 * (8 * 8 + 36) + 1e-6 * 8
    d2 = 0.010 + 4 * 0.001 + 1e-5 * (4 * 16 + 10) + 1e-6 * 16
    d3 = 0.010 + 0.002 + 1e-6 * 20          # decode reading 20 tokens of KV
    assert [r.prefill_tokens for _, r in results] == [8, 8, 4, 0]
    assert [r.emitted for _, r in results] == [[], [], [("A", 1)], [("A", 1)]]
    assert events["A"] == pytest.approx([d0 + d1 + d2, d0 + d1 + d2 + d3])


def test_preemption_hand_computed():
    # 4 blocks of 4 tokens. A and B (prompt 4, output 6) take 1 block each for the prompt
    # and a 2nd at step 1 (KV of token 5). At step 5 both need a 3rd block and none is free:
    # B (admitted last) is preempted and recomputes its prompt + 5 generated tokens (9
    # tokens, 3 blocks) once A has finished.
    m = LinearStepTime(base_s=0.010, per_prefill_token_s=0.001, per_decode_seq_s=0.002)
    eng = Engine(EngineConfig(max_num_seqs=4, max_num_batched_tokens=64,
                              block_size_tokens=4, num_kv_blocks=4), m)
    eng.add_request(EngineRequest("A", 4, 6))
    eng.add_request(EngineRequest("B", 4, 6))
    events, results = drive(eng)
    e0 = 0.010 + 8 * 0.001                  # both prefills
    e = [e0]
    for _ in range(4):                      # steps 1-4: two decodes
        e.append(e[-1] + 0.010 + 2 * 0.002)
    e5 = e[-1] + 0.010 + 0.002              # step 5: A alone (B preempted)
    e6 = e5 + 0.010 + 9 * 0.001             # step 6: B recomputes 4 + 5 tokens
    assert [r.preempted for _, r in results][5] == ["B"]
    assert events["A"] == pytest.approx([*e, e5])
    assert events["B"] == pytest.approx([*e, e6])
    assert eng.stats().num_preemptions_total == 1
    assert eng.stats().kv_blocks_used == 0
    assert eng.scheduler.pool.free_blocks == 4


def test_rejected_abort_and_empty_step():
    m = LinearStepTime(base_s=0.01)
    eng = Engine(EngineConfig(block_size_tokens=4, num_kv_blocks=4), m)
    assert eng.step(0.0).duration_s == 0.0 and not eng.has_unfinished()
    eng.add_request(EngineRequest("big", prompt_tokens=10, output_tokens=8))  # 17 > 16 tokens
    eng.add_request(EngineRequest("ok", prompt_tokens=6, output_tokens=5))
    r = eng.step(0.0)
    assert r.rejected == ["big"] and r.emitted == [("ok", 1)]
    assert eng.stats().kv_blocks_used == 2
    assert eng.abort_request("ok") and not eng.abort_request("ok")
    assert eng.stats().kv_blocks_used == 0 and not eng.has_unfinished()
    assert eng.stats().num_rejected_total == 1


def test_prefix_cache_hit_skips_cached_blocks():
    m = LinearStepTime(base_s=0.01, per_prefill_token_s=0.001)
    eng = Engine(EngineConfig(num_kv_blocks=64, enable_prefix_caching=True), m)
    # prompt = 64-token shared prefix (4 blocks of 16) + 10 own tokens
    eng.add_request(EngineRequest("a", 74, 2, prefix_group="sys", prefix_tokens=64))
    _, ra = drive(eng)
    eng.add_request(EngineRequest("b", 74, 2, prefix_group="sys", prefix_tokens=64))
    _, rb = drive(eng, t=1.0)
    assert ra[0][1].prefill_tokens == 74
    assert rb[0][1].prefill_tokens == 10    # 4 cached blocks reused
    assert rb[0][1].duration_s == pytest.approx(0.01 + 10 * 0.001)
    s = eng.stats()
    assert (s.prefix_cache_queries_tokens_total, s.prefix_cache_hits_tokens_total) == (148, 64)
    assert s.kv_blocks_used == 0            # cached blocks are free (evictable)


def test_no_chunked_prefill_waits_for_budget():
    # Without chunked prefill a prompt must fit the remaining budget whole.
    m = LinearStepTime(base_s=0.01, per_prefill_token_s=0.001)
    eng = Engine(EngineConfig(max_num_seqs=4, max_num_batched_tokens=16,
                              chunked_prefill=False, num_kv_blocks=64), m)
    eng.add_request(EngineRequest("a", 10, 3))
    eng.add_request(EngineRequest("b", 10, 2))
    r0 = eng.step(0.0)
    assert r0.emitted == [("a", 1)] and r0.prefill_tokens == 10   # b: 10 > 6 left
    r1 = eng.step(r0.duration_s)
    assert r1.prefill_tokens == 10 and sorted(r1.emitted) == [("a", 1), ("b", 1)]
    eng.add_request(EngineRequest("huge", 17, 2))
    assert eng.step(1.0).rejected == ["huge"]


def test_config_validation():
    with pytest.raises(RidgelineError, match="max_num_batched_tokens"):
        EngineConfig(max_num_seqs=256, max_num_batched_tokens=128)
    with pytest.raises(RidgelineError, match="num_kv_blocks"):
        EngineConfig(num_kv_blocks=0)


def test_one_token_prompt_and_one_token_output_is_the_smallest_request():
    # A 1-token prompt is a valid request: one step prices 10 + 1 ms and emits its one token.
    m = LinearStepTime(base_s=0.010, per_prefill_token_s=0.001, per_decode_seq_s=0.002)
    eng = Engine(EngineConfig(num_kv_blocks=10), m)
    eng.add_request(EngineRequest("A", prompt_tokens=1, output_tokens=1))
    r = eng.step(0.0)
    assert r.duration_s == pytest.approx(0.011)
    assert r.emitted == [("A", 1)] and r.finished == ["A"]
    for bad in ({"prompt_tokens": 0, "output_tokens": 1}, {"prompt_tokens": 1, "output_tokens": 0}):
        with pytest.raises(ValueError, match="must be >= 1"):
            EngineRequest("B", **bad)
