"""vLLM's engine arguments on estimate, simulate, serve and plan: the same options under
vLLM's names (`--tensor-parallel-size`, `--kv-cache-dtype`, `--quantization`, prefix caching
and chunked prefill under both spellings, `--max-model-len`, `--served-model-name`) and the
model as a positional argument, as `vllm serve MODEL` takes it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from ridgeline.specs.precision import precision_from_vllm_quantization

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")


def _params(command: str, args: list[str]) -> dict:
    """The values click parses for `ridgeline COMMAND ARGS` (nothing runs)."""
    from ridgeline import cli

    group = typer.main.get_command(cli.app_for([command]))
    cmd = group.commands[command]  # type: ignore[attr-defined]
    ctx = cmd.make_context(command, list(args))
    return dict(ctx.params)


@pytest.mark.parametrize("command", ["estimate", "simulate", "serve"])
def test_vllm_names_are_the_same_options(command: str) -> None:
    vllm = _params(command, ["org/Some-Model", "--tensor-parallel-size", "2",
                             "--pipeline-parallel-size", "2", "--kv-cache-dtype", "fp8_e4m3",
                             "--quantization", "awq"])
    assert vllm["model_arg"] == "org/Some-Model"
    # --quantization is --weights: vLLM's method name reaches the precision resolver as is
    assert (vllm["tp"], vllm["pp"], vllm["kv"], vllm["weights"]) == (2, 2, "fp8", "awq")
    assert _params(command, ["-tp", "4", "--kv-cache-dtype", "auto"])["tp"] == 4
    assert _params(command, ["--kv-cache-dtype", "auto"])["kv"] is None  # model's dtype


@pytest.mark.parametrize(("command", "name"), [("simulate", "prefix_caching"),
                                               ("serve", "enable_prefix_caching"),
                                               ("estimate", "prefix_caching")])
def test_prefix_caching_both_spellings(command: str, name: str) -> None:
    for flag, value in (("--prefix-caching", True), ("--no-prefix-caching", False),
                        ("--enable-prefix-caching", True),
                        ("--no-enable-prefix-caching", False)):
        assert _params(command, [flag])[name] is value
    assert _params(command, [])[name] is True  # vLLM V1's default
    for flag, value in (("--enable-chunked-prefill", True), ("--no-chunked-prefill", False)):
        assert _params(command, [flag])["chunked_prefill"] is value


def test_plan_takes_vllms_names() -> None:
    p = _params("plan", ["org/M", "--tensor-parallel-size", "2,4", "--kv-cache-dtype",
                         "fp8_e5m2", "--quantization", "fp8", "--no-enable-chunked-prefill"])
    assert (p["model_arg"], p["tp"], p["kv"], p["weights"]) == ("org/M", "2,4", "fp8", "fp8")
    assert p["enable_chunked_prefill"] is False
    assert _params("plan", ["--no-enable-prefix-caching"])["prefix_caching"] is False


def test_quantization_table_by_hand() -> None:
    # vLLM's method -> the weight dtype its checkpoints store
    for name, dtype in (("fp8", "fp8"), ("awq", "int4"), ("gptq", "int4"),
                        ("modelopt_fp4", "fp4"), ("mxfp4", "mxfp4"), ("AWQ", "int4")):
        assert precision_from_vllm_quantization(name)[0] == dtype


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=120)


def test_estimate_with_vllms_names_is_the_same_estimate() -> None:
    ours = _run(["estimate", "--model", "llama-3.1-8b", "--tp", "2", "--weights", "int4",
                 "--kv", "fp8", "--json"])
    theirs = _run(["estimate", "llama-3.1-8b", "--tensor-parallel-size", "2",
                   "--quantization", "awq", "--kv-cache-dtype", "fp8_e4m3",
                   "--served-model-name", "my-llama", "--json"])
    assert ours.returncode == 0 and theirs.returncode == 0, theirs.stderr
    assert json.loads(ours.stdout)["result"] == json.loads(theirs.stdout)["result"]


@pytest.mark.parametrize(("args", "field"), [
    (["estimate", "llama-3.1-8b", "--model", "qwen3-8b"], "MODEL"),
    (["estimate", "--quantization", "int3"], "weights"),
    (["estimate", "--prefix", "100", "--no-enable-prefix-caching"], "--prefix"),
    # 1024-token prompts + 256-token outputs do not fit a 1000-token context
    (["estimate", "--prompt", "1024", "--output", "256", "--max-model-len", "1000"],
     "--max-model-len"),
    (["simulate", "--rate", "1", "--prompt", "fixed:900", "--output", "fixed:200",
      "--max-model-len", "1000"], "--max-model-len"),
])
def test_bad_engine_args_are_one_line_errors(args: list[str], field: str) -> None:
    out = _run(args)
    assert out.returncode == 2, out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and field in errors[0], out.stderr


def test_max_model_len_that_fits_runs() -> None:
    out = _run(["estimate", "--prompt", "1024", "--output", "256", "--max-model-len", "1280",
                "--json"])
    assert out.returncode == 0, out.stderr
