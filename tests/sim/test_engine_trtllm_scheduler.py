"""TensorRT-LLM's preset: its KV pool rule, its limits and the GUARANTEED_NO_EVICT admission,
against numbers worked out by hand from TensorRT-LLM's own arithmetic (llm_args defaults,
KvCacheCreator's 0.9 x (memory - profiling peak), getRemainingBlocksToCompletion's
ceil((prompt + max new tokens) / tokens per block)), never against ridgeline's output.

The profiling peak is weights + activations of one max_num_tokens (8192) pass + the runtime
reserve (1 GiB). Activations per token, bf16: (2 x hidden + q + 2 x KV heads x head dim +
attention out + 3 x intermediate) x 2 B; plus one fp32 logits row per profiling request
(one request of 8192 tokens when the context is longer).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.perf.step_time import LinearStepTime
from ridgeline.sim.engine import Engine, EngineConfig, EngineRequest
from ridgeline.sim.scenario import Scenario

RIDGELINE = str(Path(sys.executable).with_name("ridgeline"))
GIB = 1 << 30
H100_B, H200_B = 85_520_809_984, 150_754_820_096


def _act(hidden: int, q: int, kv_heads: int, head_dim: int, inter: int, vocab: int) -> int:
    per_token = (2 * hidden + q + 2 * kv_heads * head_dim + q + 3 * inter) * 2
    return 8192 * per_token + vocab * 4 + GIB


# Llama-3.1-8B: 4096 hidden, 32 x 128 q, 8 KV heads, 14336 intermediate, 128256 vocab
LLAMA8 = (8_030_261_248 * 2, 32 * 8 * 128 * 2 * 2, _act(4096, 4096, 8, 128, 14336, 128256))
# Qwen2.5-7B: 3584 hidden, 28 x 128 q, 4 KV heads, 18944 intermediate, 152064 vocab
QWEN7 = (7_615_616_512 * 2, 28 * 4 * 128 * 2 * 2, _act(3584, 3584, 4, 128, 18944, 152064))


@pytest.mark.parametrize(("model", "hw", "cap", "spec"), [
    ("llama-3.1-8b", "h100-sxm", H100_B, LLAMA8),
    ("qwen2.5-7b", "h200", H200_B, QWEN7),
])
def test_kv_pool_by_hand(model: str, hw: str, cap: int, spec: tuple[int, int, int]) -> None:
    weights, per_tok, act = spec
    tokens = math.floor((cap - weights - act) * 0.9 / per_tok)
    sc = Scenario(engine="trtllm", model=model, hardware=hw)
    sm = sc.step_model()
    mem = sc.kv_memory(sm)
    assert mem.rule == "trtllm" and mem.fraction == 0.9 and mem.fraction_source == "default"
    assert mem.kv_capacity_tokens == tokens
    cfg = sc.engine_config(sm)
    # whole 32-token blocks of that pool
    assert cfg.num_kv_blocks == tokens // 32 and cfg.block_size_tokens == 32
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.chunked_prefill,
            cfg.capacity_policy, cfg.overlap_schedule) == (2048, 8192, False,
                                                           "guaranteed_no_evict", True)


def _run_all(policy: str, output: int) -> tuple[list[int], int, dict[str, int]]:
    """Five requests of 101 prompt + `output` tokens at once, 25 blocks of 32 tokens.
    Returns (requests started per step, preemptions, the step each request first emitted)."""
    cfg = EngineConfig(block_size_tokens=32, num_kv_blocks=25, max_num_seqs=2048,
                       max_num_batched_tokens=8192, chunked_prefill=False,
                       capacity_policy=policy)
    eng = Engine(cfg, LinearStepTime(base_s=0.01, per_prefill_token_s=1e-5))
    for i in range(5):
        eng.add_request(EngineRequest(f"r{i}", prompt_tokens=101, output_tokens=output))
    started, first, step = [], {}, 0
    while eng.has_unfinished() and step < 1000:
        r = eng.step(0.0)
        started.append(r.prefill_seqs)
        for rid, _ in r.emitted:
            first.setdefault(rid, step)
        step += 1
    return started, eng.stats().num_preemptions_total, first


def test_guaranteed_no_evict_one_waits_none_preempted() -> None:
    """60 outputs: GUARANTEED_NO_EVICT reserves ceil((101 + 60) / 32) = 6 blocks each, so 4
    fit in 25 (24) and the 5th waits (the KV they ever hold, 160 tokens, is 5 blocks: a
    reservation of what is held would have let all 5 in)."""
    started, preempted, first = _run_all("guaranteed_no_evict", 60)
    assert started[0] == 4 and preempted == 0
    # the four finish together after 60 tokens: step 0 emits the first, steps 1..59 the rest;
    # the fifth starts at step 60, once their reservations are released
    assert [first[f"r{i}"] for i in range(4)] == [0, 0, 0, 0]
    assert first["r4"] == 60 and sum(started) == 5


def test_max_utilization_admits_all_and_preempts() -> None:
    """MAX_UTILIZATION admits on the blocks of the moment (4 each for 101 tokens: 20 of 25)
    and must pause requests when their KV outgrows the pool (each holds up to 101 + 61 - 1
    = 161 tokens, 6 blocks: 5 x 6 > 25)."""
    started, preempted, _ = _run_all("max_utilization", 61)
    assert started[0] == 5 and preempted > 0


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=300,
                          env=env)


def test_simulate_engine_trtllm_shows_its_policy_and_limits() -> None:
    weights, per_tok, act = LLAMA8
    tokens = math.floor((H100_B - weights - act) * 0.9 / per_tok)
    p = _cli("simulate", "--engine", "trtllm", "--requests", "30", "--rate", "4",
             "--prompt", "fixed:200", "--output", "fixed:40", "--json")
    assert p.returncode == 0, p.stderr
    eng = json.loads(p.stdout)["engine"]
    c = eng["config"]
    assert (c["capacity_policy"], c["max_num_seqs"], c["max_num_batched_tokens"],
            c["block_size_tokens"], c["chunked_prefill"], c["overlap_schedule"]) == (
        "guaranteed_no_evict", 2048, 8192, 32, False, True)
    assert eng["kv_memory"]["free_gpu_memory_fraction"] == 0.9
    assert eng["kv_memory"]["kv_capacity_tokens"] == tokens
    assert eng["kv_capacity_tokens"] == tokens // 32 * 32
    t = _cli("simulate", "--engine", "trtllm", "--requests", "30", "--rate", "4",
             "--prompt", "fixed:200", "--output", "fixed:40")
    assert t.returncode == 0, t.stderr
    assert "admission GUARANTEED_NO_EVICT" in t.stdout
    assert "free_gpu_memory_fraction 0.9 (default)" in t.stdout
    assert f"-> {tokens:,} KV tokens" in t.stdout


def test_simulate_trtllm_never_preempts_where_vllm_does() -> None:
    """60 requests of 200 + 300 tokens at once in 4096 KV tokens: each needs 500 tokens for its
    life, so GUARANTEED_NO_EVICT runs 8 at a time (8 x 16 blocks of 32 = 128 = 4096 / 32)
    and preempts none; vLLM admits on prompts and must preempt."""
    common = ("--requests", "60", "--rate", "1000", "--prompt", "fixed:200", "--output",
              "fixed:300", "--num-kv-blocks", "128", "--block-size", "32", "--json")
    t = _cli("simulate", "--engine", "trtllm", *common)
    v = _cli("simulate", "--engine", "vllm", *common)
    assert t.returncode == 0 and v.returncode == 0, t.stderr + v.stderr
    ts, vs = json.loads(t.stdout)["simulation"], json.loads(v.stdout)["simulation"]
    assert ts["preemptions"] == 0 and ts["finished"] == 60
    assert vs["preemptions"] > 0


def test_max_utilization_through_an_engine_file(tmp_path: Path) -> None:
    doc = json.loads((Path(__file__).parents[2] / "src/ridgeline/specs/data/engines/"
                      "trtllm.json").read_text())
    doc["scheduler"]["capacity_policy"]["value"] = "max_utilization"
    f = tmp_path / "trtllm-maxutil.json"
    f.write_text(json.dumps(doc))
    p = _cli("simulate", "--engine", str(f), "--requests", "60", "--rate", "1000",
             "--prompt", "fixed:200", "--output", "fixed:300", "--num-kv-blocks", "128",
             "--block-size", "32", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["engine"]["config"]["capacity_policy"] == "max_utilization"
    assert out["simulation"]["preemptions"] > 0
    doc["scheduler"]["capacity_policy"]["value"] = "evict_all"
    f.write_text(json.dumps(doc))
    bad = _cli("simulate", "--engine", str(f), "--requests", "5", "--rate", "1")
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines()[-1].startswith("error:")
    assert "scheduler.capacity_policy" in bad.stderr and "max_utilization" in bad.stderr


def test_serve_engine_trtllm_sizes_and_admits_as_trtllm() -> None:
    """`ridgeline serve --engine trtllm` builds the engine with TensorRT-LLM's pool and limits
    (as /ridgeline/stats reports them) and says the pool on start."""
    import httpx

    from ridgeline.serve.launcher import EmulatorProcess

    weights, per_tok, act = LLAMA8
    tokens = math.floor((H100_B - weights - act) * 0.9 / per_tok)
    with EmulatorProcess(command=[RIDGELINE, "serve", "--model", "llama-3.1-8b",
                                  "--hardware", "h100-sxm", "--engine", "trtllm", "--host",
                                  "127.0.0.1", "--port", "0", "--speed", "20"]) as emu, \
            httpx.Client(timeout=60) as client:
        cfg = client.get(emu.base_url + "/ridgeline/stats").json()["engine_config"]
        body = {"model": "llama-3.1-8b", "prompt": list(range(300)), "max_tokens": 8,
                "ignore_eos": True}
        resp = client.post(emu.base_url + "/v1/completions", json=body)
        stderr = emu.stderr_text()
    assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens"] == 8
    assert (cfg["capacity_policy"], cfg["max_num_seqs"], cfg["block_size_tokens"],
            cfg["chunked_prefill"], cfg["num_kv_blocks"]) == (
        "guaranteed_no_evict", 2048, 32, False, tokens // 32)
    assert "admission GUARANTEED_NO_EVICT" in stderr
    assert f"-> {tokens:,} KV tokens" in stderr


def test_plan_engine_trtllm_launches_with_its_default_fraction() -> None:
    p = _cli("plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", "1",
             "--max-num-seqs", "128", "--max-num-batched-tokens", "2048", "--rate", "4",
             "--prompt", "fixed:500", "--output", "fixed:100", "--slo", "ttft_ms<=1000",
             "-n", "100", "--workers", "1", "--max-replicas", "1", "--no-pd",
             "--goodput-target", "0.95", "--json", "--engine", "trtllm")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    argv = out["launch"]["argv"]
    flags = dict(itertools.pairwise(argv))
    assert flags["--kv_cache_free_gpu_memory_fraction"] == "0.900"
    assert flags["--max_batch_size"] == "128" and flags["--max_num_tokens"] == "2048"
    assert out["chosen"]["sim_preemptions"] == 0
