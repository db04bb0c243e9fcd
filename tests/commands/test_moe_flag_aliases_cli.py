"""The MoE runner and expert-parallel dispatch choices on every command, in ridgeline's
(vLLM's) spelling and SGLang's, as a user runs them: each SGLang spelling prices exactly what
its canonical flag prices; a bad value or two spellings that disagree are one `error:` line
naming the flag and what is allowed, with a non-zero exit and nothing on stdout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RIDGELINE = Path(sys.executable).with_name("ridgeline")
# Qwen3-30B-A3B on B200 under SGLang: its default runner is FlashInfer's TensorRT-LLM MoE,
# so a Triton override moves the expert time (tests/perf/test_moe_backend.py).
RUNNER_ESTIMATE = ["estimate", "qwen3-30b-a3b", "--hardware", "b200", "--engine", "sglang",
                   "--batch", "1", "--prompt", "4096", "--output", "64", "--json"]
# DeepSeek-V3 over 8 H200s with expert parallelism: the dispatch/combine is priced.
EP_ESTIMATE = ["estimate", "deepseek-v3", "-g", "h200", "--tp", "1", "--attention-dp", "8",
               "--ep", "8", "--batch", "8", "--prompt", "256", "--output", "32", "--engine",
               "sglang", "--json"]
EP_SIMULATE = ["simulate", "deepseek-v3", "-g", "h200", "--tp", "1", "--attention-dp", "8",
               "--ep", "8", "-n", "20", "--concurrency", "8", "--prompt", "fixed:256",
               "--output", "fixed:32", "--engine", "sglang", "--json"]
RUNNER_SIMULATE = ["simulate", "qwen3-30b-a3b", "-g", "b200", "--engine", "sglang", "-n", "20",
                   "--concurrency", "4", "--prompt", "fixed:512", "--output", "fixed:16",
                   "--json"]
SGLANG_A2A = {"deepep_high_throughput": ["--moe-a2a-backend", "deepep", "--deepep-mode",
                                         "normal"],
              "deepep_low_latency": ["--moe-a2a-backend", "deepep", "--deepep-mode",
                                     "low_latency"],
              "allgather_reducescatter": ["--moe-a2a-backend", "none"]}


def _run(args: list[str], tmp: Path) -> tuple[int, str, str]:
    out = tmp / "out.txt"
    with out.open("w") as f:
        proc = subprocess.run([str(RIDGELINE), *args], stdout=f, stderr=subprocess.PIPE,
                              text=True, timeout=300)
    return proc.returncode, out.read_text(), proc.stderr


def _ok(args: list[str], tmp: Path) -> str:
    rc, out, err = _run(args, tmp)
    assert rc == 0, err
    return out


def test_estimate_runner_alias_prices_as_the_canonical_flag(tmp_path: Path) -> None:
    canonical = _ok([*RUNNER_ESTIMATE, "--moe-backend", "triton"], tmp_path)
    alias = _ok([*RUNNER_ESTIMATE, "--moe-runner-backend", "triton"], tmp_path)
    default = _ok(RUNNER_ESTIMATE, tmp_path)
    assert alias == canonical
    assert alias != default   # the alias took effect: the default runner is another
    line = next(a for a in json.loads(alias)["assumptions"] if a.startswith("MoE experts"))
    assert "triton runner" in line
    # Both spellings naming the same backend agree.
    assert _ok([*RUNNER_ESTIMATE, "--moe-backend", "triton", "--moe-runner-backend",
                "triton"], tmp_path) == canonical


def _ep_line(text: str) -> str:
    return next(a for a in json.loads(text)["key_assumptions"] if "EP dispatch/combine" in a)


@pytest.mark.parametrize("backend", list(SGLANG_A2A))
def test_estimate_sglang_a2a_spelling_prices_as_all2all_backend(backend: str,
                                                                 tmp_path: Path) -> None:
    canonical = _ok([*EP_ESTIMATE, "--all2all-backend", backend], tmp_path)
    alias = _ok([*EP_ESTIMATE, *SGLANG_A2A[backend]], tmp_path)
    assert alias == canonical
    assert f"EP dispatch/combine: {backend} (" in _ep_line(alias)


def test_simulate_takes_both_spellings(tmp_path: Path) -> None:
    def tpot_ms(text: str) -> float:
        return float(json.loads(text)["analysis"]["latency"]["tpot_ms"]["mean"])

    canonical = _ok([*EP_SIMULATE, "--all2all-backend", "deepep_low_latency"], tmp_path)
    alias = _ok([*EP_SIMULATE, *SGLANG_A2A["deepep_low_latency"]], tmp_path)
    default = _ok(EP_SIMULATE, tmp_path)
    assert tpot_ms(alias) == tpot_ms(canonical) != tpot_ms(default)
    assert "EP dispatch/combine: deepep_low_latency" in alias
    canonical = _ok([*RUNNER_SIMULATE, "--moe-backend", "triton"], tmp_path)
    alias = _ok([*RUNNER_SIMULATE, "--moe-runner-backend", "triton"], tmp_path)
    default = _ok(RUNNER_SIMULATE, tmp_path)
    assert tpot_ms(alias) == tpot_ms(canonical) != tpot_ms(default)
    assert "triton runner" in alias and "triton runner" not in default


def test_plan_launch_line_carries_the_runner(tmp_path: Path) -> None:
    """SGLang's launch line names the runner the plan priced (`--moe-runner-backend`)."""
    args = ["plan", "qwen3-30b-a3b", "--hardware", "b200", "--engine", "sglang", "--tp", "1",
            "--slo", "tpot_ms:50", "--rate", "2", "--max-num-seqs", "64",
            "--max-num-batched-tokens", "8192", "--requests", "300", "--no-pd"]
    launch = [ln for ln in _ok([*args, "--moe-runner-backend", "triton"], tmp_path)
              .splitlines() if "sglang.launch_server" in ln]
    assert launch and all(ln.endswith("--moe-runner-backend triton") for ln in launch)


RUNNERS = "auto, triton, flashinfer_trtllm, marlin"
BAD = [
    (["--moe-runner-backend", "cutlass"],
     f"error: moe-runner-backend: got 'cutlass'; allowed: {RUNNERS}"),
    (["--moe-backend", "triton", "--moe-runner-backend", "flashinfer_trtllm"],
     "error: moe-runner-backend: got 'flashinfer_trtllm', which conflicts with --moe-backend "
     "'triton'; allowed: one of them, or both naming the same backend"),
    (["--moe-a2a-backend", "mooncake"],
     "error: moe-a2a-backend: got 'mooncake'; allowed: none, deepep (with --deepep-mode "
     "normal or low_latency)"),
    (["--moe-a2a-backend", "deepep", "--deepep-mode", "auto"],
     "error: deepep-mode: got 'auto' with --moe-a2a-backend deepep; allowed: normal or "
     "low_latency with deepep (one mode per run: SGLang's auto switches per batch); none "
     "with no --deepep-mode"),
    (["--deepep-mode", "normal"],
     "error: deepep-mode: got 'normal' without --moe-a2a-backend; allowed: with "
     "--moe-a2a-backend deepep only"),
    (["--all2all-backend", "allgather_reducescatter", "--moe-a2a-backend", "deepep",
      "--deepep-mode", "normal"],
     "error: moe-a2a-backend: got deepep --deepep-mode normal (deepep_high_throughput), "
     "which conflicts with --all2all-backend 'allgather_reducescatter'; allowed: one of "
     "them, or both naming the same backend"),
]
COMMANDS = {"estimate": ["estimate", "qwen3-30b-a3b", "-g", "b200"],
            "simulate": ["simulate", "qwen3-30b-a3b", "-g", "b200", "-n", "10", "--rate", "1"],
            "plan": ["plan", "qwen3-30b-a3b", "--hardware", "b200", "--slo", "tpot_ms:50"],
            "serve": ["serve", "qwen3-30b-a3b", "-g", "b200", "--port", "1"]}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize(("flags", "error"), BAD)
def test_bad_value_or_conflict_is_one_error_line(command: str, flags: list[str], error: str,
                                                 tmp_path: Path) -> None:
    rc, out, err = _run([*COMMANDS[command], *flags], tmp_path)
    assert rc != 0 and out == ""
    assert [ln for ln in err.splitlines() if ln.startswith("error:")] == [error]
