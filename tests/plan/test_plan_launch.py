"""The deployable answer of `plan`: the engine command line carries every setting of the
chosen configuration, checked flag by flag against the configuration's fields by hand (the
model id from the catalog's source, the longest request the length specs allow, the
precision flags only where not default)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.plan.launch import launch_commands
from ridgeline.sim.scenario import Scenario

CLI = str(Path(sys.executable).parent / "ridgeline")


def _flags(argv: tuple[str, ...] | list[str]) -> dict[str, str | bool]:
    """--name value / --name (bare) -> dict, by hand."""
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[a] = argv[i + 1]
                i += 2
                continue
            out[a] = True
        i += 1
    return out


def test_vllm_flags_of_a_70b_fp8_configuration_by_hand():
    sc = Scenario(model="llama-3.1-70b", hardware="h200", weights="fp8", tp=4,
                  max_num_seqs=64, max_num_batched_tokens=2048, chunked_prefill=False,
                  replicas=3, prompt="lognormal:mean=500,sigma=0.8,max=4096",
                  output="lognormal:mean=200,sigma=0.8,max=1024")
    launch = launch_commands(sc)
    (cmd,) = launch.commands
    assert cmd.argv[:3] == ("vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct")
    f = _flags(cmd.argv[3:])
    assert f["--tensor-parallel-size"] == "4"
    assert f["--pipeline-parallel-size"] == "1"
    assert f["--max-num-seqs"] == "64"
    assert f["--max-num-batched-tokens"] == "2048"
    assert f["--max-model-len"] == str(4096 + 1024)       # the longest prompt + output
    assert f["--gpu-memory-utilization"] == "0.9"
    assert f["--quantization"] == "fp8"                   # vLLM quantizes bf16 weights at load
    assert f["--enable-prefix-caching"] is True
    assert f["--no-enable-chunked-prefill"] is True
    assert "--kv-cache-dtype" not in f                     # KV stays 16-bit (vLLM's auto)
    assert cmd.count == 3 and launch.gpus_per_instance == 4
    text = launch.text()
    assert "# 3 replicas of 4 GPUs" in text
    assert "--data-parallel-size" not in text        # 3 x 4 GPUs: more than one node holds
    two = launch_commands(sc.replace(replicas=2)).text()
    assert "--data-parallel-size 2" in two           # 2 x 4 = 8: one node
    assert cmd.shell == shlex.join(cmd.argv) and cmd.shell in text.splitlines()


def test_defaults_leave_precision_flags_out_and_fp8_kv_adds_one():
    plain = _flags(launch_commands(Scenario(prompt="fixed:1000", output="fixed:200"))
                   .argv)
    assert "--quantization" not in plain and "--kv-cache-dtype" not in plain
    assert plain["--max-model-len"] == "1200"
    assert "--no-enable-chunked-prefill" not in plain
    kv = _flags(launch_commands(Scenario(kv="fp8", prefix_caching=False)).argv)
    assert kv["--kv-cache-dtype"] == "fp8" and kv["--no-enable-prefix-caching"] is True
    # no upper bound on the prompt: the model's context window (131,072 for Llama 3.1)
    assert _flags(launch_commands(Scenario(prompt="exponential:mean=300",
                                           output="fixed:10")).argv)[
        "--max-model-len"] == "131072"


def test_pd_split_is_a_prefill_and_a_decode_command():
    launch = launch_commands(Scenario(pd=(1, 2), tp=2, prompt="fixed:100", output="fixed:10"))
    roles = [(c.role, c.count) for c in launch.commands]
    assert roles == [("prefill", 1), ("decode", 2)]
    for c in launch.commands:
        f = _flags(c.argv)
        assert f["--tensor-parallel-size"] == "2"
        assert json.loads(str(f["--kv-transfer-config"]))["kv_connector"] == "NixlConnector"


def test_trtllm_and_sglang_spell_the_same_settings():
    sc = Scenario(tp=2, max_num_seqs=32, max_num_batched_tokens=4096, kv="fp8",
                  prompt="fixed:1000", output="fixed:24")
    t = launch_commands(sc.replace(engine="trtllm")).commands[0]
    f = _flags(t.argv)
    assert t.argv[0] == "trtllm-serve"
    assert (f["--tp_size"], f["--max_batch_size"], f["--max_num_tokens"],
            f["--max_seq_len"]) == ("2", "32", "4096", "1024")
    assert t.config_file is not None and "dtype: fp8" in t.config_file[1]
    # the plan simulated TensorRT-LLM's own rule: its default free_gpu_memory_fraction
    assert float(f["--kv_cache_free_gpu_memory_fraction"]) == 0.9
    # TensorRT-LLM's default (no chunked context), as simulated
    assert "enable_chunked_prefill: false" in t.config_file[1]
    s = launch_commands(sc.replace(engine="sglang")).commands[0]
    f = _flags(s.argv)
    assert s.argv[:3] == ("python", "-m", "sglang.launch_server")
    assert (f["--tp-size"], f["--max-running-requests"], f["--chunked-prefill-size"],
            f["--context-length"], f["--kv-cache-dtype"]) == ("2", "32", "4096", "1024",
                                                              "fp8_e4m3")
    # SGLang's rule on an H100 (81,559 MiB) at TP2 with a 4096 chunk: 512 + 4096 x 1.5 +
    # 256 x 2 + 2/8 x 1024 = 7424 MiB, raised to the 10 GiB floor: (81559 - 10240) / 81559
    assert f["--mem-fraction-static"] == "0.874"


def test_cli_prints_and_json_carries_the_launch_of_the_chosen_configuration():
    args = [CLI, "plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", "1",
            "--max-num-seqs", "128", "--max-num-batched-tokens", "2048", "--rate", "4",
            "--prompt", "fixed:500", "--output", "fixed:100", "--slo", "ttft_ms<=1000",
            "-n", "100", "--workers", "1", "--max-replicas", "1", "--no-pd",
            "--goodput-target", "0.95"]
    r = subprocess.run([*args, "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    ch, launch = out["chosen"], out["launch"]
    f = _flags(launch["argv"])
    assert launch["argv"][:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert f["--tensor-parallel-size"] == str(ch["tp"]) == "1"
    assert f["--max-num-seqs"] == str(ch["max_num_seqs"]) == "128"
    assert f["--max-num-batched-tokens"] == str(ch["max_num_batched_tokens"]) == "2048"
    assert f["--max-model-len"] == "600"
    assert launch["shell"] == shlex.join(launch["argv"])
    assert launch["instances"] == ch["replicas"] == 1
    text = subprocess.run(args, capture_output=True, text=True)
    assert text.returncode == 0, text.stderr
    # piped: the command stands whole on one line, to be copied
    assert launch["shell"] in text.stdout.splitlines()


@pytest.mark.parametrize("weights", ["int4"])
def test_weights_the_engine_cannot_quantize_at_load_say_so(weights):
    launch = launch_commands(Scenario(weights=weights, prompt="fixed:10", output="fixed:10"))
    assert "--quantization" not in launch.argv
    assert any("already quantized" in n for n in launch.notes)


def test_a_plan_on_trtllm_launches_trtllm_and_an_unknown_engine_is_refused():
    args = [CLI, "plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", "1",
            "--max-num-seqs", "128", "--max-num-batched-tokens", "2048", "--rate", "4",
            "--prompt", "fixed:500", "--output", "fixed:100", "--slo", "ttft_ms<=1000",
            "-n", "100", "--workers", "1", "--max-replicas", "1", "--no-pd",
            "--goodput-target", "0.95", "--json"]
    r = subprocess.run([*args, "--engine", "trtllm"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["launch"]["engine"] == "trtllm" and out["launch"]["argv"][0] == "trtllm-serve"
    f = _flags(out["launch"]["argv"])
    assert f["--max_batch_size"] == str(out["chosen"]["max_num_seqs"]) == "128"
    assert [x["family"] for x in out["families"]] == [
        "llama-3.1-8b on h100-sxm, bf16, tp=1, trtllm"]
    assert out["chosen"]["engine"] == "trtllm"
    # sglang is an engine preset now (sim/engine_presets.py): the unknown one is another
    bad = subprocess.run([*args, "--engine", "lmdeploy"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --engine: got 'lmdeploy'")


def test_the_ep_backend_is_spelt_as_each_engine_takes_it():
    """A chosen EP backend reaches the launch line: vLLM's own flag, SGLang's DeepEP mode
    (its "normal" is DeepEP's high-throughput kernels); the default adds nothing."""
    sc = Scenario(model="deepseek-v3", hardware="h200", tp=1, ep=8, attn_dp=8,
                  prompt="fixed:100", output="fixed:10")
    vllm = launch_commands(sc.replace(all2all_backend="deepep_low_latency")).commands[0].argv
    assert vllm[vllm.index("--all2all-backend") + 1] == "deepep_low_latency"
    assert "--all2all-backend" not in launch_commands(sc).commands[0].argv
    sg = launch_commands(sc.replace(engine="sglang", all2all_backend="deepep_high_throughput")
                         ).commands[0].argv
    assert sg[sg.index("--moe-a2a-backend") + 1] == "deepep"
    assert sg[sg.index("--deepep-mode") + 1] == "normal"
    ll = launch_commands(sc.replace(engine="sglang", all2all_backend="deepep_low_latency")
                         ).commands[0].argv
    assert ll[ll.index("--deepep-mode") + 1] == "low_latency"
    assert "--moe-a2a-backend" not in launch_commands(sc.replace(engine="sglang")
                                                      ).commands[0].argv
