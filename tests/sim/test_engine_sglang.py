"""`--engine sglang`: SGLang's scheduling as options of the one scheduler, checked by hand.

Every expected number below is worked out from SGLang's rules (prefill-first batches, the
new-token-ratio reservation, lpm, page size 1, overlap scheduling), not read back from
ridgeline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ridgeline.errors import RidgelineError
from ridgeline.perf.step_time import LinearStepTime
from ridgeline.sim.engine import Engine, EngineConfig, EngineRequest
from ridgeline.sim.engine_presets import load_scheduler

RIDGELINE = str(Path(sys.executable).with_name("ridgeline"))
# one step = 10 ms, plus 0.1 ms per prefill token
STEP = LinearStepTime(base_s=0.01, per_prefill_token_s=1e-4)


def _sglang(**kw: object) -> EngineConfig:
    base: dict[str, object] = dict(num_kv_blocks=1000, block_size_tokens=1, prefill_first=True,
                                   max_num_batched_tokens=100, max_num_seqs=8)
    base.update(kw)
    return EngineConfig(**base)  # type: ignore[arg-type]


def _steps(eng: Engine, k: int) -> list[tuple[int, int, list[str], list[str]]]:
    """(prefill tokens, decode seqs, emitted ids, finished ids) of k steps."""
    out = []
    t = 0.0
    for _ in range(k):
        r = eng.step(t)
        t += r.duration_s
        out.append((r.prefill_tokens, r.decode_seqs, sorted(rid for rid, _ in r.emitted),
                    r.finished))
    return out


# ---- prefill-first batching ----------------------------------------------------------------

def test_prefill_first_step_sequence_of_three_requests() -> None:
    eng = Engine(_sglang(), STEP)
    eng.add_request(EngineRequest("a", prompt_tokens=50, output_tokens=4))
    first = eng.step(0.0)
    assert (first.prefill_tokens, first.decode_seqs, first.emitted) == (50, 0, [("a", 1)])
    eng.add_request(EngineRequest("b", prompt_tokens=80, output_tokens=3))
    eng.add_request(EngineRequest("c", prompt_tokens=30, output_tokens=2))
    # By hand: a prefill batch whenever one can be formed, 100 tokens a batch.
    # 1: b (80) + the first 20 of c; a waits.  2: c's last 10; a waits.
    # 3..5: decode batches: a, b, c (c's 2nd token, done); a, b (b's 3rd, done); a (4th).
    assert _steps(eng, 6) == [
        (100, 0, ["b"], []),
        (10, 0, ["c"], []),
        (0, 3, ["a", "b", "c"], ["c"]),
        (0, 2, ["a", "b"], ["b"]),
        (0, 1, ["a"], ["a"]),
        (0, 0, [], []),
    ]


def test_vllm_mixes_the_same_requests() -> None:
    """The default (vLLM) loop on the same input: a's decode rides with the prefill, the
    budget is 100 - 1 decode = 99 tokens: b 80 + c 19."""
    eng = Engine(_sglang(prefill_first=False), STEP)
    eng.add_request(EngineRequest("a", prompt_tokens=50, output_tokens=4))
    eng.step(0.0)
    eng.add_request(EngineRequest("b", prompt_tokens=80, output_tokens=3))
    eng.add_request(EngineRequest("c", prompt_tokens=30, output_tokens=2))
    assert _steps(eng, 2) == [(99, 1, ["a", "b"], []), (11, 2, ["a", "b", "c"], [])]


def test_prefill_first_step_times_and_token_times() -> None:
    """Token times follow the paused decodes: a's tokens at the end of steps 0, 2 and 3."""
    eng = Engine(_sglang(), STEP)
    eng.add_request(EngineRequest("a", prompt_tokens=50, output_tokens=4))
    eng.add_request(EngineRequest("b", prompt_tokens=100, output_tokens=2))
    t, times = 0.0, []
    for _ in range(4):
        r = eng.step(t)
        t += r.duration_s
        times.append((round(t, 9), sorted(rid for rid, _ in r.emitted)))
    # step 0: a (50) + 50 of b: 10 + 100 x 0.1 = 20 ms; step 1: b's last 50, a waits:
    # 15 ms; then 10 ms decode steps
    assert times == [(0.02, ["a"]), (0.035, ["b"]), (0.045, ["a", "b"]), (0.055, ["a"])]


def test_kv_blocks_of_paused_decodes() -> None:
    """4-token blocks. a (6 prompt tokens) holds 2 blocks; its decodes write slots 7, 8, ...
    and take a 3rd block with slot 9. b (4 tokens) is prefilled in step 2, so a writes no
    slot there: slot 8 in step 3, slot 9 (the 3rd block) in step 4, one step later than
    without the pause. b writes slot 5 (its 2nd block) in step 3 and finishes in step 6
    (tokens in steps 2 to 6), freeing its 2 blocks."""
    eng = Engine(_sglang(block_size_tokens=4, num_kv_blocks=100), STEP)
    eng.add_request(EngineRequest("a", prompt_tokens=6, output_tokens=10))
    used = [eng.step(0.0).kv_blocks_used, eng.step(0.0).kv_blocks_used]
    eng.add_request(EngineRequest("b", prompt_tokens=4, output_tokens=5))
    used += [eng.step(0.0).kv_blocks_used for _ in range(5)]
    assert used == [2, 2, 3, 4, 5, 5, 3]


@pytest.mark.parametrize("prefill_first", [False, True])
def test_window_blocks_of_paused_decodes(prefill_first: bool) -> None:
    """One sliding-window group (window 8 tokens, 4-token blocks). A request with t tokens
    of KV holds ceil(t / 4) blocks less the whole blocks before its window,
    max(0, t - 7) // 4. After every step the pool holds the sum of that over the running
    requests (t = prompt + tokens out - 1), whether or not prefill batches pause decodes."""
    from types import SimpleNamespace

    class WindowedStep(LinearStepTime):
        pass

    sm = WindowedStep(base_s=0.01)
    sm.model = SimpleNamespace(  # type: ignore[attr-defined]
        is_windowed=True, window_kind="sliding", is_mla=False, num_full_attention_layers=0,
        num_window_layers=1, sliding_window=8)
    eng = Engine(EngineConfig(num_kv_blocks=100, block_size_tokens=4, max_num_seqs=4,
                              max_num_batched_tokens=64, prefill_first=prefill_first), sm)
    prompt = {"a": 3, "b": 10, "c": 3}
    out = {"b": 6, "c": 4}
    eng.add_request(EngineRequest("a", prompt["a"], 20))
    tokens: dict[str, int] = {}
    paused = 0
    for step in range(24):
        if step in (5, 9):
            rid = "b" if step == 5 else "c"
            eng.add_request(EngineRequest(rid, prompt[rid], out[rid]))
        r = eng.step(0.0)
        paused += bool(r.prefill_tokens and not r.decode_seqs and tokens)
        for rid, k in r.emitted:
            tokens[rid] = tokens.get(rid, 0) + k
        for rid in r.finished:
            del tokens[rid]
        t = {rid: prompt[rid] + g - 1 for rid, g in tokens.items()}
        want = sum(-(-x // 4) - max(0, x - 7) // 4 for x in t.values())
        assert r.kv_blocks_used == want, (step, t)
    assert paused == (2 if prefill_first else 0)


def test_a_transferred_request_joins_the_decode_batch() -> None:
    """P/D: on the decode instance a request arrives with its prompt KV and first token; its
    first step is a decode, taken with the running decodes (SGLang's decode server), not a
    prefill batch that would pause them."""
    eng = Engine(_sglang(), STEP)
    eng.add_request(EngineRequest("a", prompt_tokens=10, output_tokens=5))
    eng.step(0.0)
    eng.add_request(EngineRequest("t", prompt_tokens=100, output_tokens=5,
                                  kv_ready_tokens=100, generated_tokens=1))
    r = eng.step(0.0)
    assert (r.prefill_tokens, r.decode_seqs, sorted(rid for rid, _ in r.emitted)) == \
        (0, 2, ["a", "t"])


# ---- the new-token-ratio reservation ------------------------------------------------------

def _reserve_case(ratio: float) -> Engine:
    eng = Engine(_sglang(num_kv_blocks=200, max_num_batched_tokens=200,
                         new_token_ratio_init=ratio, new_token_ratio_min=ratio), STEP)
    eng.add_request(EngineRequest("r1", prompt_tokens=50, output_tokens=100))
    eng.step(0.0)        # r1: 50 + 100 = 150 < 200 free: admitted, 1 token out
    eng.add_request(EngineRequest("r2", prompt_tokens=60, output_tokens=50))
    return eng


def test_admission_blocked_by_the_reservation() -> None:
    # Before step 1: 200 - 50 = 150 tokens free; r1 keeps 0.5 x (100 - 1) = 49.5 for its
    # future tokens; r2 needs 60 + 50 = 110 >= 150 - 49.5 = 100.5: it waits.
    eng = _reserve_case(0.5)
    assert eng.scheduler.reserved_new_tokens(1) == pytest.approx(49.5)
    r = eng.step(0.0)
    assert (r.prefill_tokens, r.decode_seqs, r.num_waiting) == (0, 1, 1)
    # Free tokens fall 1 a step, the reservation only 0.5: r2 waits until r1 is done
    # (its 100th token at step 99), and is prefilled at step 100.
    steps = _steps(eng, 100)        # steps 2 .. 101
    assert [i + 2 for i, s in enumerate(steps) if s[0]] == [100]
    assert steps[99 - 2][3] == ["r1"]


def test_smaller_ratio_admits() -> None:
    # 0.3 x 99 = 29.7 kept: 110 < 150 - 29.7 = 120.3: r2 is prefilled at step 1.
    eng = _reserve_case(0.3)
    assert eng.scheduler.reserved_new_tokens(1) == pytest.approx(29.7)
    r = eng.step(0.0)
    assert (r.prefill_tokens, r.decode_seqs, r.num_waiting) == (60, 0, 0)


def test_without_reservation_vllm_admits_on_blocks_alone() -> None:
    eng = _reserve_case(0.0)
    assert eng.step(0.0).prefill_tokens == 60


def test_ratio_decays_per_decode_step_and_restarts_when_idle() -> None:
    eng = Engine(_sglang(new_token_ratio_init=0.7, new_token_ratio_min=0.098,
                         new_token_ratio_decay_steps=600), STEP)
    eng.add_request(EngineRequest("a", prompt_tokens=10, output_tokens=12))
    for _ in range(11):     # 1 prefill step + 10 decode steps
        eng.step(0.0)
    # 0.7 - 10 x (0.7 - 0.098) / 600
    assert eng.scheduler.new_token_ratio() == pytest.approx(0.7 - 10 * 0.602 / 600)
    eng.step(0.0)           # the last decode: the 11th
    eng.step(0.0)           # idle
    assert eng.scheduler.new_token_ratio() == 0.7


# ---- lpm and token-granularity prefix matching ----------------------------------------------

def _admission_order(policy: str, prefill_first: bool = True) -> list[str]:
    eng = Engine(_sglang(max_num_seqs=1, enable_prefix_caching=True, schedule_policy=policy,
                         prefill_first=prefill_first), STEP)
    eng.add_request(EngineRequest("seed", 40, 1, prefix_group="sys", prefix_tokens=30))
    eng.step(0.0)           # cached: the 30 prefix tokens of group "sys"
    eng.add_request(EngineRequest("x", 40, 1))                                    # 0 cached
    eng.add_request(EngineRequest("y", 40, 1, prefix_group="sys", prefix_tokens=10))  # 10
    eng.add_request(EngineRequest("z", 40, 1, prefix_group="sys", prefix_tokens=30))  # 30
    order = []
    for _ in range(3):
        order += [rid for rid, _ in eng.step(0.0).emitted]
    return order


def test_lpm_takes_the_longest_cached_prefix_first() -> None:
    assert _admission_order("lpm") == ["z", "y", "x"]
    assert _admission_order("fcfs") == ["x", "y", "z"]
    assert _admission_order("lpm", prefill_first=False) == ["z", "y", "x"]   # mixed chunks


@pytest.mark.parametrize(("block_size", "hit_tokens"), [(16, 16), (1, 20)])
def test_prefix_hits_by_token_not_by_block(block_size: int, hit_tokens: int) -> None:
    """A 20-token shared prefix: vLLM's 16-token blocks reuse one full block (16 tokens);
    SGLang's page size 1 reuses all 20."""
    eng = Engine(EngineConfig(num_kv_blocks=1000, block_size_tokens=block_size,
                              enable_prefix_caching=True), STEP)
    eng.add_request(EngineRequest("a", 40, 1, prefix_group="doc", prefix_tokens=20))
    eng.step(0.0)
    eng.add_request(EngineRequest("b", 40, 1, prefix_group="doc", prefix_tokens=20))
    assert eng.step(0.0).prefill_tokens == 40 - hit_tokens
    assert eng.stats().prefix_cache_hits_tokens_total == hit_tokens


# ---- overlap scheduling ---------------------------------------------------------------------

@pytest.mark.parametrize(("cpu_s", "step_s"), [(0.025, 0.025), (0.004, 0.01)])
def test_overlap_step_is_max_of_gpu_and_cpu(cpu_s: float, step_s: float) -> None:
    """GPU 10 ms a decode step; CPU 25 ms: the step takes 25 ms; CPU 4 ms: hidden, 10 ms."""
    eng = Engine(_sglang(overlap_schedule=True, step_cpu_s=cpu_s), STEP)
    eng.add_request(EngineRequest("a", prompt_tokens=10, output_tokens=3))
    eng.step(0.0)           # prefill: 10 + 1 ms GPU
    assert eng.step(0.0).duration_s == pytest.approx(step_s)


def test_the_sglang_preset_file() -> None:
    s = load_scheduler("sglang")
    # chunked prefill and the request pool: derived per GPU (test_engine_sglang_memory.py)
    assert s["max_num_batched_tokens"] == "auto" and s["block_size_tokens"] == 1
    assert s["prefill_first"] and s["overlap_schedule"] and s["enable_prefix_caching"]
    assert s["new_token_ratio_init"] == 0.7
    assert s["new_token_ratio_min"] == pytest.approx(0.7 * 0.14)
    assert load_scheduler("vllm") == {}
    assert load_scheduler("trtllm")["capacity_policy"] == "guaranteed_no_evict"
    from ridgeline.sim.engine_costs import load_engine_costs

    c = load_engine_costs("sglang")    # CPU costs not fitted: 0; the overlap lag: 1 step
    assert (c.request_overhead_s, c.step_overhead_s, c.mixed_step_s) == (0.0, 0.0, 0.0)
    assert c.request_overhead_steps == 1.0
    with pytest.raises(RidgelineError, match="schedule_policy"):
        EngineConfig(schedule_policy="random")


def test_overlap_moves_the_cpu_step_cost_out_of_the_step_sum(tmp_path: Path) -> None:
    """An engine file with 50 ms of CPU per step: summed into vLLM's step; SGLang's overlap
    takes max(GPU, 50 ms) instead."""
    from ridgeline.sim.scenario import Scenario

    sg = json.loads((Path(__file__).parents[2] / "src/ridgeline/specs/data/engines/"
                     "sglang.json").read_text())
    sg["costs"]["step_overhead_s"]["value"] = 0.05
    f = tmp_path / "sg50.json"
    f.write_text(json.dumps(sg))
    sc = Scenario(engine=str(f), num_kv_blocks=4096)
    sm = sc.step_model()
    cfg = sc.engine_config(sm)
    assert cfg.overlap_schedule and cfg.step_cpu_s == 0.05
    eng = Engine(cfg, sm)
    eng.add_request(EngineRequest("a", prompt_tokens=10, output_tokens=3))
    eng.step(0.0)
    assert eng.step(0.0).duration_s == 0.05      # an 8B decode step is < 50 ms on an H100
    del sg["scheduler"]
    f.write_text(json.dumps(sg))
    vl = Scenario(engine=str(f), num_kv_blocks=4096)
    gpu = Scenario(engine=str(f), engine_costs=False, num_kv_blocks=4096).step_model()
    e1, e2 = Engine(vl.engine_config(vl.step_model()), vl.step_model()), Engine(
        EngineConfig(num_kv_blocks=4096), gpu)
    for e in (e1, e2):
        e.add_request(EngineRequest("a", prompt_tokens=10, output_tokens=3))
        e.step(0.0)
    assert e1.step(0.0).duration_s == pytest.approx(e2.step(0.0).duration_s + 0.05)


# ---- the simulator: both modes agree; the command ---------------------------------------

@pytest.mark.parametrize(("kw", "preempted"), [
    ({"requests": 60, "prompt": "fixed:300", "output": "fixed:60"}, False),
    # sliding windows, 32-token blocks and a pool so small that decodes run out of KV
    ({"model": "gpt-oss-20b", "block_size": 32, "num_kv_blocks": 150, "requests": 30,
      "prompt": "fixed:300", "output": "fixed:600"}, True),
    # full attention, one-token pages: retracted requests come back to their cached prompts
    # (some pages evicted in between)
    ({"model": "qwen2.5-0.5b", "num_kv_blocks": 3000, "requests": 40, "prompt": "fixed:300",
      "output": "fixed:600"}, True),
])
def test_step_and_fast_modes_agree_under_sglang(kw: dict, preempted: bool) -> None:
    from ridgeline.sim.event_loop import simulate
    from ridgeline.sim.scenario import Built, Scenario
    from ridgeline.sim.workload import build_workload

    sc = Scenario(engine="sglang", **kw)
    built = Built.of(sc)
    wl, _, _ = build_workload(sc.requests, sc.prompt, sc.output, rate_req_s=8.0, seed=1)
    a = simulate(wl, built.config, built.step_model, built.cluster, mode="step")
    b = simulate(wl, built.config, built.step_model, built.cluster, mode="fast")
    assert np.array_equal(a.event_offsets, b.event_offsets)
    assert np.array_equal(a.event_times_s, b.event_times_s)
    assert b.core == "python"
    assert bool(np.sum(a.preemptions)) == preempted
    # prefill-first: every request's first token comes after it was sent
    first = a.event_times_s[np.asarray(a.event_offsets)[:-1]]
    assert np.all(first > a.sent_s)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=300,
                          env=env)


def test_simulate_engine_sglang_command() -> None:
    p = _run("simulate", "--engine", "sglang", "--requests", "40", "--rate", "4",
             "--prompt", "fixed:200", "--output", "fixed:40")
    assert p.returncode == 0, p.stderr
    # the request pool: Llama-3.1-8B's ~422k KV tokens / 131072 context x 512 = 1649 ->
    # at least 2048 (SGLang's clamp)
    assert ("engine sglang: scheduler chunked prefill 8192 tokens; at most 2048 running "
            "requests; page size 1 token(s) (radix cache on); prefill-first batches"
            in p.stdout)
    assert "new-token ratio 0.7 decaying to 0.098 over 600 decode steps" in p.stdout
    assert "overlap scheduling (step = max(GPU, CPU))" in p.stdout
    j = _run("simulate", "--engine", "sglang", "--requests", "40", "--rate", "4",
             "--prompt", "fixed:200", "--output", "fixed:40", "--json")
    assert j.returncode == 0, j.stderr
    out = json.loads(j.stdout)
    assert out["simulation"]["engine_core"] == "python"
    assert out["assumptions"][0].startswith("engine sglang: scheduler")


def test_bad_scheduler_field_in_an_engine_file(tmp_path: Path) -> None:
    f = tmp_path / "bad.json"
    f.write_text(json.dumps({"engine": "sglang", "costs": {
        k: {"value": 0.0} for k in ("request_overhead_s", "request_overhead_steps",
                                    "step_overhead_s")},
        "scheduler": {"prefill_first": {"value": "yes"}}}))
    p = _run("simulate", "--engine", str(f), "--requests", "5", "--rate", "1")
    assert p.returncode == 2
    assert p.stderr.strip() == ("error: --engine: bad: scheduler.prefill_first: got 'yes'; "
                                "allowed: {\"value\": true or false}")


def test_serve_engine_sglang_runs_the_sglang_scheduler() -> None:
    """`ridgeline serve --engine sglang` builds the engine with the preset's scheduler (as
    /ridgeline/stats reports it) and streams a request through it."""
    import httpx

    from ridgeline.serve.launcher import EmulatorProcess

    with EmulatorProcess(command=[RIDGELINE, "serve", "--model", "llama-3.1-8b",
                                  "--hardware", "h100-sxm", "--engine", "sglang", "--host",
                                  "127.0.0.1", "--port", "0", "--speed", "20"]) as emu, \
            httpx.Client(timeout=60) as client:
        cfg = client.get(emu.base_url + "/ridgeline/stats").json()["engine_config"]
        body = {"model": "llama-3.1-8b", "prompt": list(range(300)), "max_tokens": 8,
                "ignore_eos": True}
        resp = client.post(emu.base_url + "/v1/completions", json=body)
        stderr = emu.stderr_text()
    assert "engine sglang: scheduler chunked prefill 8192 tokens" in stderr
    assert resp.status_code == 200
    assert resp.json()["usage"]["completion_tokens"] == 8
    # the request pool from the KV pool: 2048 (SGLang's clamp) for an 8B on an H100
    assert (cfg["block_size_tokens"], cfg["max_num_seqs"], cfg["max_num_batched_tokens"]) == \
        (1, 2048, 8192)
    assert cfg["prefill_first"] and cfg["overlap_schedule"] and cfg["enable_prefix_caching"]
    assert cfg["new_token_ratio_init"] == 0.7 and cfg["schedule_policy"] == "fcfs"


# ---- a retracted request's prefix stays in the radix cache ---------------------------------

def _retract_engine(prefix_caching: bool) -> Engine:
    """Pool of 120 one-token pages, SGLang's batching without the new-token reservation."""
    cfg = EngineConfig(block_size_tokens=1, num_kv_blocks=120, max_num_seqs=8,
                       max_num_batched_tokens=4096, prefill_first=True,
                       preemption_order="fewest_outputs",
                       enable_prefix_caching=prefix_caching)
    return Engine(cfg, STEP)


def _retract_case(prefix_caching: bool, with_c: bool) -> list[tuple[int, list[str]]]:
    """A (prompt 55, 4 outputs) and B (prompt 60, 20 outputs) prefill together at step 0
    (115 of 120 pages); C (prompt 100, 1 output) waits, too large. Steps 1-2 decode both
    (+2 pages each: 119 used). Step 3: C still does not fit, the decodes need 2 pages and 1
    is free: A and B have 3 outputs each, so B (the longer prompt) is retracted, holding
    60 + 2 = 62 tokens; A decodes its 4th token and finishes. (prefill tokens, retracted)
    of every step from step 3 to the step that re-admits B."""
    eng = _retract_engine(prefix_caching)
    eng.add_request(EngineRequest("A", prompt_tokens=55, output_tokens=4))
    eng.add_request(EngineRequest("B", prompt_tokens=60, output_tokens=20))
    if with_c:
        eng.add_request(EngineRequest("C", prompt_tokens=100, output_tokens=1))
    assert eng.step(0.0).prefill_tokens == 115
    for _ in range(2):
        assert eng.step(0.0).decode_seqs == 2
    out = []
    for _ in range(3):
        r = eng.step(0.0)
        out.append((r.prefill_tokens, r.preempted))
        if "B" in [rid for rid, _ in r.emitted] and r.prefill_tokens:
            break
    eng.scheduler.pool.check()
    return out


def test_a_retracted_prompt_is_a_cache_hit_when_readmitted() -> None:
    """Without C: B comes back at step 4 with 60 + 3 = 63 tokens. Its prompt's 60 tokens
    stayed in the radix cache (SGLang frees only what is not in the tree: the 2 tokens it
    decoded), so it computes 63 - 60 = 3; with the radix cache off, all 63."""
    assert _retract_case(True, with_c=False) == [(0, ["B"]), (3, [])]
    assert _retract_case(False, with_c=False) == [(0, ["B"]), (63, [])]


def test_evicted_pages_of_a_retracted_prompt_are_recomputed() -> None:
    """With C queued ahead of B: at step 4 A is gone, 60 pages are free and B's 60 cached
    ones evictable; C takes 100, evicting 40 of B's (the tail first, as the radix tree
    evicts leaves), and finishes at once (one output). B does not fit beside it (its 20
    cached pages are all that is free). Step 5 re-admits B: 63 - 20 = 43 tokens."""
    assert _retract_case(True, with_c=True) == [(0, ["B"]), (100, []), (43, [])]
    assert _retract_case(False, with_c=True) == [(0, ["B"]), (100, []), (63, [])]


@pytest.mark.parametrize(("flag", "recomputed"), [("--prefix-caching", 3),
                                                  ("--no-prefix-caching", 63)])
def test_simulate_readmits_a_retracted_request_from_the_radix_cache(
        tmp_path: Path, flag: str, recomputed: int) -> None:
    """Through the installed command, SGLang's preset without the new-token reservation (an
    engine file): two users send a 60-token prompt for 4 outputs at once into a pool of 124
    one-token pages. Step 0 prefills both (120), steps 1-2 decode both (124: full), step 3
    retracts the second (3 outputs, 62 tokens of KV) while the first decodes its last
    token, step 4 re-admits it with 60 + 3 tokens: 3 to compute with its prompt cached, 63
    without the radix cache."""
    preset = json.loads((Path(__file__).parents[2] / "src/ridgeline/specs/data/engines"
                         / "sglang.json").read_text())
    preset["scheduler"]["new_token_ratio_init"]["value"] = 0.0
    preset["scheduler"]["new_token_ratio_min"]["value"] = 0.0
    engine = tmp_path / "sglang-no-reserve.json"
    engine.write_text(json.dumps(preset))
    timeline = tmp_path / "timeline.csv"
    p = _run("simulate", "--engine", str(engine), "--requests", "2", "--concurrency", "2",
             "--prompt", "fixed:60", "--output", "fixed:4", "--num-kv-blocks", "124", flag,
             "--timeline", str(timeline), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["simulation"]["preemptions"] == 1
    rows = timeline.read_text().splitlines()
    head = rows[0].split(",")
    steps = [dict(zip(head, r.split(","), strict=True)) for r in rows[1:]]
    assert [int(s["prefill_tokens"]) for s in steps] == [120, 0, 0, 0, recomputed]
    assert [int(s["decode_seqs"]) for s in steps] == [0, 2, 2, 1, 0]


@pytest.mark.parametrize(("ratio", "admitted"), [(0.5, False), (0.4, True)])
def test_a_matched_prefix_is_locked_before_the_reservation_check(ratio: float,
                                                                  admitted: bool) -> None:
    """SGLang's PrefillAdder locks the matched prefix (`_lock_node`) and checks again: its
    evictable pages stop counting as free. A 200-page pool; "seed" leaves the 30 prefix
    pages of group "doc" cached and evictable; r1 (50 + 100 outputs) runs. Before step 2:
    120 fresh + 30 evictable pages free, r1 keeps ratio x 99. r2 (60 tokens, the 30 cached,
    50 outputs) needs 30 + 50 = 80 < 150 - 99 ratio before the lock, and after it
    80 < 120 - 99 ratio: at 0.5, 70.5 (refused; 100.5 before the lock would admit it); at
    0.4, 80.4 (admitted)."""
    eng = Engine(_sglang(num_kv_blocks=200, enable_prefix_caching=True,
                         new_token_ratio_init=ratio, new_token_ratio_min=ratio), STEP)
    eng.add_request(EngineRequest("seed", 40, 1, prefix_group="doc", prefix_tokens=30))
    assert eng.step(0.0).finished == ["seed"]
    eng.add_request(EngineRequest("r1", prompt_tokens=50, output_tokens=100))
    assert eng.step(0.0).prefill_tokens == 50
    eng.add_request(EngineRequest("r2", 60, 50, prefix_group="doc", prefix_tokens=30))
    assert eng.scheduler.reserved_new_tokens(2) == pytest.approx(99 * ratio)
    assert eng.scheduler.pool.free_blocks == 150
    r = eng.step(0.0)
    assert r.prefill_tokens == (30 if admitted else 0)
