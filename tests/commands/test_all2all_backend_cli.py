"""`--all2all-backend` on simulate and plan, as a user runs them: a bad value is one `error:`
line naming the flag and the allowed values; a good one reaches the step model."""

from __future__ import annotations

import subprocess
import sys
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
