"""The `estimate`, `roofline`, `models` and `hardware` commands, through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from ridgeline.errors import RidgelineError
from ridgeline.perf.grid import parse_grid

# Keys whose numbers are counts or ratios named by what they count.
UNITLESS_OK = {"tp", "pp", "ep", "dp", "attn_dp", "gpus_per_instance", "m", "k", "n",
               "num_layers", "compute_efficiency",
               "bandwidth_efficiency", "bytes_per_element", "num_heads", "num_kv_heads",
               "head_dim", "hidden_size", "num_experts", "experts_per_token", "vocab_size",
               "bf16", "fp16", "fp32", "tf32", "fp8", "int8", "fp4", "m_at_ridge",
               "bytes", "flops", "families", "kernel_sigma_log",
               # an interval's source: residual counts, a conformal rank, a log-ratio half-width
               "scale_n", "rank", "halfwidth"}
UNIT_SUFFIXES = ("_s", "_bytes", "_tok_s", "_flops", "_flop_per_byte", "_tokens", "_seqs",
                 "_params", "_per_s", "_fraction", "_us", "_bf16", "_per_token",
                 "_per_token_per_gpu", "_experts", "_blocks")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from ridgeline.cli import main; main()",
                           *args], capture_output=True, text=True, timeout=60)


def run_json(*args: str) -> Any:
    proc = run(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def numeric_keys_without_unit(obj: Any, key: str = "") -> list[str]:
    bad: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            bad += numeric_keys_without_unit(v, k)
    elif isinstance(obj, list):
        for v in obj:
            bad += numeric_keys_without_unit(v, key)
    elif (isinstance(obj, (int, float)) and not isinstance(obj, bool)
          and key not in UNITLESS_OK and not key.endswith(UNIT_SUFFIXES)):
        bad.append(key)
    return bad


def test_estimate_single_point_json() -> None:
    out = run_json("estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
                   "--batch", "32", "--prompt", "1024", "--output", "256", "--ops")
    r = out["result"]
    assert r["e2e_s"] == pytest.approx(r["ttft_s"] + r["tpot_s"] * 255)
    assert r["decode_aggregate_tok_s"] == pytest.approx(32 / r["tpot_s"])
    assert r["decode_bound"] == "memory" and r["prefill_bound"] == "compute"
    assert {row["op"] for row in out["ops"]["decode"]} >= {"qkv_proj", "attn_decode", "lm_head"}
    assert sum(row["time_s"] for row in out["ops"]["decode"]) == pytest.approx(r["tpot_s"])
    assert any("GQA" in a for a in out["assumptions"])
    assert numeric_keys_without_unit(out) == []


def test_estimate_sweep_json_and_table() -> None:
    out = run_json("estimate", "--model", "qwen3-30b-a3b", "--hardware", "h100-sxm,h200",
                   "--batch", "1,8", "--prompt", "256:1024", "--output", "64")
    assert len(out["rows"]) == 2 * 2 * 3
    assert {r["hardware"] for r in out["rows"]} == {"h100-sxm", "h200"}
    assert numeric_keys_without_unit(out) == []
    text = run("estimate", "--batch", "1:4", "--context", "1000,2000").stdout
    assert "Sweep (6 points)" in text and "Assumptions" in text


def test_estimate_human_output_prints_assumptions_and_fit() -> None:
    proc = run("estimate", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--tp", "2",
               "--batch", "64", "--prompt", "8192", "--output", "1024")
    assert proc.returncode == 0, proc.stderr
    assert "does not fit" in proc.stdout and "GiB more KV" in proc.stdout
    assert "Assumptions" in proc.stdout and "all-reduce" not in proc.stdout
    full = run("estimate", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--tp", "2",
               "--assumptions")
    assert full.returncode == 0 and "all-reduce" in full.stdout


def test_roofline_table_json() -> None:
    out = run_json("roofline", "--hardware", "h100-sxm", "--m", "1,8,64,256,4096",
                   "--k", "4096", "--n", "4096")
    assert [f"{r['intensity_flop_per_byte']:.1f}" for r in out["rows"]] == [
        "1.0", "8.0", "62.1", "227.6", "1365.3"]
    assert [f"{r['attainable_flops_per_s'] / 1e12:.0f}" for r in out["rows"]] == [
        "3", "27", "208", "762", "989"]
    assert [r["bound"] for r in out["rows"]] == ["memory"] * 4 + ["compute"]
    assert round(out["m_at_ridge"]) == 345 and round(out["ridge_point_flop_per_byte"]) == 295
    assert numeric_keys_without_unit(out) == []


def test_catalog_commands() -> None:
    models = run_json("models")
    assert {m["name"] for m in models} >= {"llama-3.1-8b", "deepseek-v3"}
    hw = run_json("hardware")
    assert {h["name"] for h in hw} >= {"h100-sxm", "mi300x", "b200"}
    assert "h100-sxm" in run("hardware").stdout and "qwen2.5-7b" in run("models").stdout
    # Which measured kernels time each GPU by default (kernels.json's hardware map): H100 SXM
    # and A100 80GB have Vidur's own profiles; L40S (no data) takes the A40's, H200 H100's.
    km = {h["name"]: h["kernel_model"] for h in hw}
    assert km["h100-sxm"]["kernels"] == "h100" and km["h100-sxm"]["rule"].startswith("fitted")
    assert km["a100-80gb"]["kernels"] == "a100" and km["a100-80gb"]["rule"].startswith("fitted")
    assert km["l40s"]["kernels"] == "a40" and km["l40s"]["rule"].startswith("derived")
    assert km["h200"]["kernels"] == "h100" and km["h200"]["rule"].startswith("derived")
    assert [n for n in km if km[n] and not km[n]["derived"]] == ["a100-80gb", "h100-sxm"]
    table = " ".join(run("hardware").stdout.split())
    assert "derived from a40" in table and "fitted h100" in table


@pytest.mark.parametrize("args, field", [
    (("estimate", "--model", "nope"), "model"),
    (("estimate", "--hardware", "tpu"), "hardware"),
    (("estimate", "--batch", "0:4"), "--batch"),
    (("estimate", "--weights", "int2"), "weights"),
    (("estimate", "--activations", "fp8", "--hardware", "a100-80gb"), "activations"),
    (("roofline", "--dtype", "fp64"), "--dtype"),
])
def test_bad_input_exits_2_with_one_line(args: tuple[str, ...], field: str) -> None:
    proc = run(*args)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {field}") and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


def test_parse_grid() -> None:
    assert parse_grid("1,8,64", "batch") == [1, 8, 64]
    assert parse_grid("1:256", "batch") == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert parse_grid("1:100:x10", "batch") == [1, 10, 100]
    assert parse_grid("100:300:100", "prompt") == [100, 200, 300]
    for bad in ("a", "4:1", "1.5", "1:8:0", "1:8:x1", "nan", "inf", "1:inf", "1:8:xnan"):
        with pytest.raises(RidgelineError, match=r"^batch"):
            parse_grid(bad, "batch")
