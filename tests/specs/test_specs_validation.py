"""Broken model configs, requests beyond the context window, and E[U] in `estimate`."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.errors import RidgelineError
from ridgeline.specs.model import from_hf_config, load_model, model_catalog

BASE = model_catalog()["llama-3.1-8b"]
EXE = Path(sys.executable).parent / "ridgeline"


@pytest.mark.parametrize(("change", "field", "allowed"), [
    ({"num_attention_heads": 0}, "num_attention_heads", "whole number from 1"),
    ({"hidden_size": float("nan")}, "hidden_size", "whole number"),
    ({"hidden_size": 1e30}, "hidden_size", "to 1,048,576"),
    ({"hidden_size": "4096"}, "hidden_size", "whole number"),
    ({"num_hidden_layers": 2.5}, "num_hidden_layers", "whole number"),
    ({"num_hidden_layers": True}, "num_hidden_layers", "whole number"),
    ({"vocab_size": -1}, "vocab_size", "whole number from 1"),
    ({"max_position_embeddings": 0}, "max_position_embeddings", "whole number from 1"),
    ({"num_key_value_heads": 64}, "num_key_value_heads", "divisor of num_attention_heads"),
    ({"num_key_value_heads": 5}, "num_key_value_heads", "divisor of num_attention_heads"),
    ({"head_dim": None, "hidden_size": 16}, "hidden_size", "at least num_attention_heads"),
    ({"model_type": ["llama"]}, "model_type", "supported"),
])
def test_broken_config_is_one_line_error(change: dict, field: str, allowed: str) -> None:
    cfg = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    with pytest.raises(RidgelineError) as e:
        from_hf_config(cfg)
    msg = str(e.value)
    assert "\n" not in msg and field in msg and allowed in msg, msg


def test_moe_experts_per_token_bounded_by_experts() -> None:
    cfg = {**model_catalog()["mixtral-8x7b"], "num_experts_per_tok": 9}
    with pytest.raises(RidgelineError, match=r"num_experts_per_tok.*1 to the number of experts"):
        from_hf_config(cfg)


def test_config_that_is_a_list(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    p.write_text("[1, 2]")
    with pytest.raises(RidgelineError, match="got a JSON list; allowed: a JSON object"):
        load_model(str(p))


def test_catalog_models_know_their_context_window() -> None:
    assert load_model("llama-3.1-8b").max_position_embeddings == 131072
    assert load_model("qwen2.5-7b").max_position_embeddings == 32768


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=120)


def test_bad_config_through_the_installed_command(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**BASE, "num_key_value_heads": 64}))
    proc = _run("estimate", "-m", str(p))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: config.json: field 'num_key_value_heads'")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_estimate_beyond_the_context_window_does_not_fit() -> None:
    # qwen2.5-7b: max_position_embeddings 32,768. 32,000 + 1,000 tokens is beyond it.
    proc = _run("estimate", "-m", "qwen2.5-7b", "-p", "32000", "-o", "1000")
    assert proc.returncode == 2 and "fits" not in proc.stdout
    assert "context window of 32,768" in proc.stderr and "Traceback" not in proc.stderr
    ok = _run("estimate", "-m", "qwen2.5-7b", "-p", "31768", "-o", "1000", "--json")
    assert ok.returncode == 0, ok.stderr
    r = json.loads(ok.stdout)["result"]
    assert r["within_context"] is True and r["context_window_tokens"] == 32768
    sweep = _run("estimate", "-m", "qwen2.5-7b", "-p", "31768,31769", "-o", "1000", "--json")
    rows = json.loads(sweep.stdout)["rows"]
    assert [row["within_context"] for row in rows] == [True, False]


def test_simulate_refuses_requests_beyond_the_context_window() -> None:
    proc = _run("simulate", "-m", "qwen2.5-7b", "--prompt", "fixed:32000", "--output",
                "fixed:1000", "-n", "5", "--rate", "1")
    assert proc.returncode == 2 and "5 of 5 requests" in proc.stderr
    assert "context window of 32,768" in proc.stderr and "Traceback" not in proc.stderr


def test_estimate_prints_expected_distinct_experts_per_phase() -> None:
    # Qwen3-30B-A3B: E = 128 experts, k = 8 per token (its config.json). Expected experts:
    # decode B = 8 tokens → 128 (1 - (120/128)^8) = 51.62; prefill 8 x 1000 tokens → 128.
    e, k = 128, 8
    decode = e * (1 - (1 - k / e) ** 8)
    prefill = e * (1 - (1 - k / e) ** 8000)
    proc = _run("estimate", "-m", "qwen3-30b-a3b", "-b", "8", "-p", "1000", "-o", "200",
                "--json")
    r = json.loads(proc.stdout)["result"]
    assert r["num_experts"] == e
    assert r["decode_expected_experts"] == pytest.approx(decode, rel=1e-12)
    assert r["prefill_expected_experts"] == pytest.approx(prefill, rel=1e-12)
    assert round(decode, 2) == 51.62
    text = _run("estimate", "-m", "qwen3-30b-a3b", "-b", "8", "-p", "1000", "-o", "200",
                "--details")  # the decode roofline terms are the details
    assert "E[U]" in text.stdout and "decode 51.62 of 128" in text.stdout
    assert "prefill 128.00 of 128" in text.stdout
    dense = json.loads(_run("estimate", "-m", "llama-3.1-8b", "--json").stdout)["result"]
    assert "decode_expected_experts" not in dense
    assert not math.isnan(dense["context_window_tokens"])


def test_hardware_file_bounds_at_zero(tmp_path: Path) -> None:
    """A GPU file may say a latency or a launch gap is 0; a bandwidth of 0 is refused."""
    from ridgeline.specs.hardware import hardware_catalog, load_hardware

    base = json.loads(json.dumps(hardware_catalog()["h100-sxm"]))
    ok = tmp_path / "zero-overheads.json"
    ok.write_text(json.dumps(base | {"interconnect_latency_s": 0.0, "kernel_overhead_us": 0.0}))
    hw = load_hardware(str(ok))
    assert (hw.interconnect_latency_s, hw.kernel_overhead_us) == (0.0, 0.0)
    bad = tmp_path / "no-bandwidth.json"
    bad.write_text(json.dumps(base | {"memory_bandwidth_bytes_s": 0.0}))
    with pytest.raises(RidgelineError,
                       match=r"memory_bandwidth_bytes_s: got 0.0; allowed: greater than 0"):
        load_hardware(str(bad))
