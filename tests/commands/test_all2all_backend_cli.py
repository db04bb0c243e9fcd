"""`--all2all-backend` on simulate and plan, as a user runs them: a bad value is one `error:`
line naming the flag and the allowed values; a good one reaches the step model."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from ridgeline.sim.scenario import Scenario

RIDGELINE = Path(sys.executable).with_name("ridgeline")
ALLOWED = "allgather_reducescatter, deepep_high_throughput, deepep_low_latency"


@pytest.mark.parametrize("command", [["simulate", "-n", "10", "--rate", "1"],
                                     ["plan", "--slo", "tpot_ms:50"]])
def test_a_bad_backend_is_one_error_line(command: list[str], tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    with out.open("w") as f:
        proc = subprocess.run([str(RIDGELINE), *command, "--all2all-backend", "naive"],
                              stdout=f, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode != 0 and out.read_text() == ""
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [f"error: all2all-backend: got 'naive'; allowed: {ALLOWED}"]


def test_simulate_scenario_carries_the_backend_to_the_step() -> None:
    sc = Scenario(model="deepseek-v3", hardware="h200", tp=1, ep=8, attn_dp=8,
                  all2all_backend="deepep_low_latency")
    assert sc.step_model().parallel.ep_comm == "deepep_low_latency"
    # Without the flag: the engine preset's (SGLang's --moe-a2a-backend none).
    assert sc.replace(all2all_backend="", engine="sglang").step_model().parallel.ep_comm == \
        "allgather_reducescatter"


def _simulate_tpot_ms(tmp_path: Path, *extra: str) -> tuple[float, str]:
    out = tmp_path / f"sim{len(extra)}.json"
    with out.open("w") as f:
        proc = subprocess.run([str(RIDGELINE), "simulate", "deepseek-v3", "-g", "h200", "--tp",
                               "1", "--attention-dp", "8", "--ep", "8", "-n", "20",
                               "--concurrency", "8", "--prompt", "fixed:256", "--output",
                               "fixed:32", "--json", *extra],
                              stdout=f, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    return float(json.loads(text)["analysis"]["latency"]["tpot_ms"]["mean"]), text


def test_simulate_prices_the_chosen_backend(tmp_path: Path) -> None:
    """8 sequences in flight: the rows are few, so the step grows by the latencies, 58 MoE
    layers x (DeepEP normal dispatch + combine, each with its cost per expert of the 256,
    - NCCL all-gather - reduce-scatter over 8 H200s), read from the measured catalog."""
    cat = json.loads(resources.files("ridgeline.specs").joinpath(
        "data", "kernels_measured_attention_comm.json").read_text())["gpus"]["h200_sxm"]
    deepep = cat["engines"]["sglang"]["deepep_normal"]
    nccl = cat["nccl"]
    extra_us = 58 * (deepep["dispatch"]["latency_us"] + deepep["combine"]["latency_us"]
                     + 256 * (deepep["dispatch"].get("per_expert_us", 0.0)
                              + deepep["combine"].get("per_expert_us", 0.0))
                     - nccl["all_gather"]["by_gpus"]["8"]["latency_us"]
                     - nccl["reduce_scatter"]["by_gpus"]["8"]["latency_us"])
    base, text = _simulate_tpot_ms(tmp_path)
    assert "EP dispatch/combine: allgather_reducescatter" in text
    deep, text = _simulate_tpot_ms(tmp_path, "--all2all-backend", "deepep_high_throughput")
    assert "EP dispatch/combine: deepep_high_throughput" in text
    assert deep - base == pytest.approx(extra_us / 1e3, rel=0.05)
