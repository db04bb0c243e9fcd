"""`calibrate engine` against a vLLM server: recognition from /version and /metrics (canned
answers), the slots and token budget read from the server's metrics (the emulator started
with known flags, through the installed command), and `verify` saying when a measured point
ran above the profile's slots."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from ridgeline.calibrate.engine_detect import recognise
from ridgeline.serve.launcher import EmulatorProcess

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="32",cache_dtype="auto",gpu_memory_utilization="0.9",\
num_gpu_blocks="1000",max_num_seqs="48",max_num_batched_tokens="4096",engine="0"} 1.0
"""
# A vLLM that states only its cache config (the scheduler's settings take vLLM's defaults).
VLLM_CACHE_ONLY = """\
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:cache_config_info{block_size="16",num_gpu_blocks="2048",engine="0"} 1.0
"""
LLAMA_PROPS = {"total_slots": 4, "slot_n_ctx": 1024, "build_info": "b1-abc"}
LLAMA_METRICS = "llamacpp:prompt_tokens_total 10\nllamacpp:requests_processing 1\n"


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=timeout)


def test_recognises_vllm_and_reads_its_scheduler() -> None:
    e = recognise({"version": "0.10.1"}, VLLM_METRICS, {})
    assert e.engine == "vllm" and e.version == "0.10.1"
    assert (e.max_num_seqs, e.max_num_batched_tokens, e.block_size_tokens) == (48, 4096, 32)
    assert e.kv_capacity_tokens == 1000 * 32 and e.defaulted == []
    assert e.line().startswith("engine: vLLM 0.10.1, recognised from /version")


def test_vllm_without_scheduler_labels_takes_vllm_defaults() -> None:
    e = recognise({"version": "0.9.2"}, VLLM_CACHE_ONLY, {})
    assert (e.max_num_seqs, e.max_num_batched_tokens, e.block_size_tokens) == (256, 8192, 16)
    line = e.settings_line() or ""
    assert "defaults used: max_num_seqs 256, max_num_batched_tokens 8192" in line
    assert "read from /metrics: block_size 16, num_gpu_blocks 2048" in line


def test_llama_cpp_and_neither() -> None:
    e = recognise(None, LLAMA_METRICS, LLAMA_PROPS)
    assert e.engine == "llama.cpp" and "total_slots 4" in e.line()
    # A /version answer alone, or another engine's metrics, is not vLLM.
    for version, metrics in (({"version": "1.2.3"}, LLAMA_METRICS), (None, ""),
                             ({"version": "0.5"}, "sglang:num_running_reqs 0\n")):
        assert recognise(version, metrics, {}).engine == "unknown"


def test_calibrate_reads_vllm_emulator_then_verify_names_slots(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    trace = tmp_path / "c12.jsonl"
    with EmulatorProcess(extra_args=["--max-num-seqs", "48", "--max-num-batched-tokens",
                                     "4096", "--block-size", "32"]) as emu:
        metrics = urllib.request.urlopen(emu.base_url + "/metrics", timeout=10).read().decode()
        blocks = next(int(x.split('num_gpu_blocks="')[1].split('"')[0])
                      for x in metrics.splitlines() if x.startswith("vllm:cache_config_info"))
        r = _run("calibrate", "engine", "--base-url", emu.base_url, "--batches", "1,2,4",
                 "--prompt-tokens", "8", "--output-tokens", "12", "--context-tokens", "0",
                 "--prefill-tokens", "16,64", "--prefill-repeats", "2", "--open-requests", "0",
                 "--out", str(out))
        assert r.returncode == 0, r.stderr[-2000:]
        b = _run("bench", "--base-url", emu.base_url, "--concurrency", "12", "--requests",
                 "12", "--prompt", "fixed:8", "--output", "fixed:40", "--trace", str(trace))
        assert b.returncode == 0, b.stderr[-2000:]
    assert "engine: vLLM" in r.stderr and "recognised from /version" in r.stderr
    assert ("read from /metrics: max_num_seqs 48, max_num_batched_tokens 4096, block_size 32"
            in r.stderr)
    prof = json.loads(out.read_text())
    sched = prof["scheduling"]
    assert sched["preset"] == "vllm"
    assert (sched["max_num_seqs"], sched["max_num_batched_tokens"],
            sched["block_size_tokens"]) == (48, 4096, 32)
    assert prof["kv_capacity_tokens"] == blocks * 32
    # 12 in flight against 48 slots: no slots line.
    v = _run("verify", str(trace), "--calibration", str(out), "--json")
    assert v.returncode == 0, v.stderr
    assert not any("exceeds" in w for w in json.loads(v.stdout)["warnings"])
    # The same profile with 4 slots: the 12 requests sent together exceed them.
    sched["max_num_seqs"] = 4
    small = tmp_path / "p4.json"
    small.write_text(json.dumps(prof))
    v = _run("verify", str(trace), "--calibration", str(small))
    assert v.returncode == 0, v.stderr
    assert "measured concurrency 12 exceeds the profile's 4 slots" in v.stdout
    # The exit-code contract holds: a bound still fails with 1.
    v = _run("verify", str(trace), "--calibration", str(small), "--bound", "e2e_p50=0.0001%")
    assert v.returncode == 1 and "exceeds the profile's 4 slots" in v.stdout


@pytest.mark.parametrize("preset", ["llama.cpp"])
def test_explicit_preset_wins_over_recognition(tmp_path: Path, preset: str) -> None:
    out = tmp_path / "p.json"
    with EmulatorProcess(extra_args=["--max-num-seqs", "48"]) as emu:
        r = _run("calibrate", "engine", "--base-url", emu.base_url, "--preset", preset,
                 "--kv-unified", "--batches", "1,2", "--prompt-tokens", "8",
                 "--output-tokens", "8", "--context-tokens", "0", "--prefill-tokens", "16",
                 "--prefill-repeats", "1", "--open-requests", "0", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "engine: vLLM" in r.stderr
    sched = json.loads(out.read_text())["scheduling"]
    # llama.cpp's behaviour: slots from --max-batch's default (8), n_batch 2048.
    assert (sched["preset"], sched["max_num_seqs"], sched["max_num_batched_tokens"]) == \
        ("llama.cpp", 8, 2048)


def test_odd_labels_take_the_defaults() -> None:
    # Labels a profile could not hold (too large, fractional, not numbers) are not read.
    odd = ('vllm:cache_config_info{max_num_seqs="1e12",max_num_batched_tokens="2.5",'
           'block_size="abc",num_gpu_blocks="nan"} 1\n')
    e = recognise({"version": 3}, odd, {})
    assert e.engine == "vllm" and e.version is None
    assert (e.max_num_seqs, e.max_num_batched_tokens, e.block_size_tokens) == (256, 8192, 16)
    assert e.num_gpu_blocks is None and e.read == []


def test_gpu_probe_sizes_follow_the_servers_slots_and_budget() -> None:
    from ridgeline.commands.calibrate import _vllm_probe_defaults

    e = recognise({"version": "0.10.1"}, VLLM_METRICS, {})      # 48 slots, 4096 tokens
    d = _vllm_probe_defaults("vllm", e, None, None, None, None)
    assert d is not None
    assert d["batches"] == [1, 2, 4, 8, 16, 32, 48]             # powers of two, then the slots
    assert d["prefill_tokens"] == [128, 512, 1024, 2048, 4096]  # none above the budget
    d = _vllm_probe_defaults("vllm", e, 200, 1024, None, None)  # --slots, --n-batch given
    assert d is not None and d["batches"][-1] == 64 and d["prefill_tokens"][-1] == 1024
    assert "--slots and --n-batch given" in d["line"]
    assert _vllm_probe_defaults("llama.cpp", e, None, None, None, None) is None
