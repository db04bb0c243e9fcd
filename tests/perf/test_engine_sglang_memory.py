"""SGLang's memory sizing and retraction, against numbers worked out by hand from SGLang's own
arithmetic (server_args' mem_fraction_static rule, model_runner's KV pool and request pool,
schedule_batch's retract_decode), never against ridgeline's output.

Hand inputs: GPU memory as the device reports it (H100 SXM 81,559 MiB = 85,520,809,984 B;
H200 143,771 MiB = 150,754,820,096 B; L4 23,034 MiB); weights = parameters x 2 bytes
(Llama-3.1-8B 8,030,261,248; Qwen2.5-7B 7,615,616,512); KV bytes per token = layers x KV heads
x head dim x 2 (K, V) x 2 bytes (Llama-3.1-8B 32 x 8 x 128 x 4 = 131,072; Qwen2.5-7B
28 x 4 x 128 x 4 = 57,344).
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

from ridgeline.perf.engine_memory import (
    sglang_gpu_defaults,
    sglang_max_running_requests,
    sglang_mem_fraction_static,
)
from ridgeline.perf.step_time import LinearStepTime
from ridgeline.sim.engine import Engine, EngineConfig, EngineRequest
from ridgeline.sim.scenario import Scenario

RIDGELINE = str(Path(sys.executable).with_name("ridgeline"))
H100_B, H200_B = 85_520_809_984, 150_754_820_096
LLAMA8_W, QWEN7_W = 8_030_261_248 * 2, 7_615_616_512 * 2
LLAMA8_KV, QWEN7_KV = 32 * 8 * 128 * 2 * 2, 28 * 4 * 128 * 2 * 2


@pytest.mark.parametrize(("mib", "tp", "chunk", "graph_bs", "fraction"), [
    # H100, TP1: 512 + 8192 x 1.5 + 256 x 2 + 1/8 x 1024 = 13,440 MiB (over the 10 GiB floor)
    (81559, 1, 8192, 256, round((81559 - 13440) / 81559, 3)),
    # H100, TP8: graphs to 512; 512 + 12288 + 1024 + 1024 = 14,848 MiB
    (81559, 8, 8192, 512, round((81559 - 14848) / 81559, 3)),
    # H200, TP1: same tier as the H100 (below 160 GiB)
    (143771, 1, 8192, 256, round((143771 - 13440) / 143771, 3)),
    # L4 (below 35 GiB): chunk 2048, graphs to 24; 512 + 3072 + 48 + 128 = 3,760 MiB, no floor
    (23034, 1, 2048, 24, round((23034 - 3760) / 23034, 3)),
    # B200 (above 160 GiB): chunk 16384, graphs to 512; 512 + 24576 + 1024 + 128 = 26,240
    (171661, 1, 16384, 512, round((171661 - 26240) / 171661, 3)),
])
def test_sglang_defaults_by_gpu_memory_and_tp(mib: int, tp: int, chunk: int, graph_bs: int,
                                              fraction: float) -> None:
    assert sglang_gpu_defaults(mib, tp) == (chunk, graph_bs)
    assert sglang_mem_fraction_static(mib, tp, 1, chunk, graph_bs) == fraction


def test_the_10_gib_floor_applies_above_60_gib_only() -> None:
    # H100 TP2 with a 2048 chunk: 512 + 3072 + 512 + 256 = 4,352 MiB, raised to 10,240
    assert sglang_mem_fraction_static(81559, 2, 1, 2048, 256) == round(
        (81559 - 10240) / 81559, 3)
    # A 48 GiB GPU keeps its own 512 + 6144 + 64 + 128 = 6,848 MiB
    assert sglang_mem_fraction_static(46068, 1, 1, 4096, 32) == round(
        (46068 - 6848) / 46068, 3)


@pytest.mark.parametrize(("model", "hw", "cap", "w", "per_tok", "mib", "ctx", "seqs"), [
    ("llama-3.1-8b", "h100-sxm", H100_B, LLAMA8_W, LLAMA8_KV, 81559, 131072, None),
    ("qwen2.5-7b", "h200", H200_B, QWEN7_W, QWEN7_KV, 143771, 32768, None),
    ("llama-3.1-8b", "h200", H200_B, LLAMA8_W, LLAMA8_KV, 143771, 131072, None),
])
def test_kv_pool_and_request_pool_by_hand(model: str, hw: str, cap: int, w: int,
                                          per_tok: int, mib: int, ctx: int,
                                          seqs: int | None) -> None:
    """KV tokens = (memory x mem_fraction_static - weights) / bytes per token (page size 1);
    request pool = min(max(KV tokens / context x 512, 2048), 4096)."""
    frac = round((mib - 13440) / mib, 3)
    tokens = math.floor((cap * frac - w) / per_tok)
    pool = min(max(int(tokens / ctx * 512), 2048), 4096)
    sc = Scenario(engine="sglang", model=model, hardware=hw)
    sm = sc.step_model()
    cfg = sc.engine_config(sm)
    assert cfg.kv_memory_rule == "sglang" and cfg.block_size_tokens == 1
    assert cfg.num_kv_blocks == tokens
    assert cfg.max_num_seqs == pool and cfg.max_num_batched_tokens == 8192
    mem = sc.kv_memory(sm)
    assert mem.fraction == frac and mem.fraction_source == "default"
    assert sglang_max_running_requests(tokens, ctx) == pool


def test_request_pool_lands_between_the_clamps_for_an_8b_on_an_h200() -> None:
    # 0.907 x 150,754,820,096 - 16,060,522,496 = 120,674,099,191 B / 131,072 = 920,670 tokens;
    # 920,670 / 131,072 x 512 = 3,596 (inside [2048, 4096])
    tokens = math.floor((H200_B * 0.907 - LLAMA8_W) / LLAMA8_KV)
    assert tokens == 920670
    cfg = Scenario(engine="sglang", hardware="h200").engine_config(
        Scenario(engine="sglang", hardware="h200").step_model())
    assert cfg.max_num_seqs == 3596


def test_a_set_fraction_replaces_the_rule() -> None:
    sc = Scenario(engine="sglang", gpu_memory_utilization=0.8)
    sm = sc.step_model()
    mem = sc.kv_memory(sm)
    assert mem.fraction == 0.8 and mem.fraction_source == "set"
    assert sc.engine_config(sm).num_kv_blocks == math.floor((H100_B * 0.8 - LLAMA8_W)
                                                            / LLAMA8_KV)


def _sglang_engine(pool_tokens: int, order: str) -> Engine:
    """SGLang's batching without the new-token reservation (admission on free KV only)."""
    cfg = EngineConfig(block_size_tokens=1, num_kv_blocks=pool_tokens, max_num_seqs=64,
                       max_num_batched_tokens=4096, prefill_first=True,
                       preemption_order=order)
    return Engine(cfg, LinearStepTime(base_s=0.01, per_prefill_token_s=1e-5))


def _retraction_case(pool_tokens: int, prompts: tuple[int, int, int], order: str
                     ) -> tuple[list[str], list[str]]:
    """A (prompt a) prefills at step 0 and decodes 4 steps (KV a + 4); B prefills at step 5,
    C at step 6 (prefill batches: the decodes wait); step 7 decodes all three (+3 KV:
    A has 6 outputs, B and C 2 each). D (too large to admit) arrives before step 8, where
    the decodes need 3 tokens of KV and fewer are free. Returns (retracted at step 8, the
    waiting queue after it)."""
    a, b, c = prompts
    eng = _sglang_engine(pool_tokens, order)
    # outputs: as long as a request alone fits the pool (a longer one is refused at arrival)
    eng.add_request(EngineRequest("A", prompt_tokens=a, output_tokens=pool_tokens - a))
    for _ in range(5):
        eng.step(0.0)
    eng.add_request(EngineRequest("B", prompt_tokens=b, output_tokens=pool_tokens - b))
    eng.step(0.0)
    eng.add_request(EngineRequest("C", prompt_tokens=c, output_tokens=pool_tokens - c))
    eng.step(0.0)
    r7 = eng.step(0.0)
    assert r7.decode_seqs == 3 and not r7.preempted
    assert r7.kv_blocks_used == a + 4 + b + c + 3
    eng.add_request(EngineRequest("D", prompt_tokens=pool_tokens - 10, output_tokens=5))
    r8 = eng.step(0.0)
    return r8.preempted, [s.request_id for s in eng.scheduler.waiting]


def test_retraction_takes_the_fewest_outputs_longest_prompt_to_the_back() -> None:
    """Prompts 50/60/40, pool 158: step 8 has 1 token free for 3 decodes. B and C have 2
    outputs each, A 6: B goes first (the longer prompt of the tie). B's 61 tokens free
    62 >= 2 remaining x 20, so B alone; it waits behind D. vLLM's order takes C, the newest,
    to the head of the queue."""
    preempted, waiting = _retraction_case(158, (50, 60, 40), "fewest_outputs")
    assert preempted == ["B"] and waiting == ["D", "B"]
    preempted, waiting = _retraction_case(158, (50, 60, 40), "newest")
    assert preempted == ["C"] and waiting == ["C", "D"]


def test_retraction_keeps_20_tokens_per_remaining_request() -> None:
    """Prompts 50/30/20, pool 108: B goes first (tie at 2 outputs, longer prompt) and frees
    31 tokens: 32 free < 2 x 20, so C (2 outputs) goes too: 53 free for A alone."""
    preempted, waiting = _retraction_case(108, (50, 30, 20), "fewest_outputs")
    assert preempted == ["B", "C"] and waiting == ["D", "B", "C"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=300,
                          env=env)


def test_simulate_engine_sglang_names_its_kv_pool() -> None:
    frac = round((81559 - 13440) / 81559, 3)
    tokens = math.floor((H100_B * frac - LLAMA8_W) / LLAMA8_KV)
    p = _run("simulate", "--engine", "sglang", "--requests", "30", "--rate", "4",
             "--prompt", "fixed:200", "--output", "fixed:40", "--json")
    assert p.returncode == 0, p.stderr
    eng = json.loads(p.stdout)["engine"]
    assert eng["name"] == "sglang"
    assert eng["kv_memory"]["mem_fraction_static"] == frac == 0.835
    assert eng["kv_memory"]["kv_capacity_tokens"] == tokens == eng["kv_capacity_tokens"]
    c = eng["config"]
    assert (c["preemption_order"], c["kv_memory_rule"], c["max_num_seqs"],
            c["max_num_batched_tokens"], c["block_size_tokens"]) == (
        "fewest_outputs", "sglang", 2048, 8192, 1)
    t = _run("simulate", "--engine", "sglang", "--hardware", "l4", "--model", "qwen2.5-7b",
             "--requests", "10", "--rate", "1", "--prompt", "fixed:200", "--output",
             "fixed:20")
    assert t.returncode == 0, t.stderr
    # the L4 tier: chunk 2048; (23,034 - 3,760) / 23,034 -> 0.837
    assert "engine sglang: scheduler chunked prefill 2048 tokens" in t.stdout
    l4_tokens = math.floor((24_152_899_584 * 0.837 - QWEN7_W) / QWEN7_KV)
    assert "mem_fraction_static 0.837 (default)" in t.stdout
    assert f"-> {l4_tokens:,} KV tokens" in t.stdout


def test_serve_engine_sglang_sizes_its_pool_as_sglang() -> None:
    import httpx

    from ridgeline.serve.launcher import EmulatorProcess

    tokens = math.floor((H100_B * 0.835 - LLAMA8_W) / LLAMA8_KV)
    with EmulatorProcess(command=[RIDGELINE, "serve", "--model", "llama-3.1-8b",
                                  "--hardware", "h100-sxm", "--engine", "sglang", "--host",
                                  "127.0.0.1", "--port", "0", "--speed", "20"]) as emu, \
            httpx.Client(timeout=60) as client:
        cfg = client.get(emu.base_url + "/ridgeline/stats").json()["engine_config"]
        stderr = emu.stderr_text()
    assert (cfg["num_kv_blocks"], cfg["block_size_tokens"], cfg["max_num_seqs"],
            cfg["preemption_order"], cfg["kv_memory_rule"]) == (
        tokens, 1, 2048, "fewest_outputs", "sglang")
    assert "mem_fraction_static 0.835 (default) x 79.65 GiB" in stderr
    assert f"-> {tokens:,} KV tokens" in stderr


def test_plan_engine_sglang_launches_with_the_fraction_it_sized_with() -> None:
    """plan --engine sglang simulates SGLang's pool and launches SGLang with that pool's
    fraction: a 2048 chunk on an H100 at TP1 reserves 512 + 3072 + 512 + 128 = 4,224 MiB,
    raised to the 10 GiB floor: round((81559 - 10240) / 81559, 3) = 0.874."""
    p = _run("plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", "1",
             "--max-num-seqs", "128", "--max-num-batched-tokens", "2048", "--rate", "4",
             "--prompt", "fixed:500", "--output", "fixed:100", "--slo", "ttft_ms<=1000",
             "-n", "100", "--workers", "1", "--max-replicas", "1", "--no-pd",
             "--goodput-target", "0.95", "--json", "--engine", "sglang")
    assert p.returncode == 0, p.stderr
    argv = json.loads(p.stdout)["launch"]["argv"]
    flags = dict(itertools.pairwise(argv))
    assert flags["--mem-fraction-static"] == str(round((81559 - 10240) / 81559, 3)) == "0.874"
    assert flags["--max-running-requests"] == "128"
