"""`ridgeline demo` prints the few assumptions that change the answer once, not once per
step (its steps share the model, the GPU and the engine); `--assumptions` prints all of them,
each once too. Through the installed command, stdout a pipe."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).with_name("ridgeline")
RIDGELINE = str(BIN) if BIN.exists() else shutil.which("ridgeline") or "ridgeline"


def demo(tmp_path: Path, *extra: str) -> list[str]:
    proc = subprocess.run([RIDGELINE, "demo", "--quick", "--out-dir", str(tmp_path / "d"),
                           *extra], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def items(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.startswith("  - ")]


def test_demo_prints_each_key_assumption_once(tmp_path: Path) -> None:
    lines = demo(tmp_path)
    got = items(lines)
    for topic in ("  - precision:", "  - engine:", "  - kernel model:"):
        assert sum(a.startswith(topic) for a in got) == 1, (topic, got)
    # Two steps define TTFT differently (a static batch's prefill vs. serving under load):
    # each says its own, beside its own numbers.
    ttft = [a for a in got if a.startswith("  - TTFT:")]
    assert len(ttft) == 2 and ttft[0] != ttft[1]
    assert "  - (and 3 as printed above)" in got
    assert 4 <= len(got) <= 8
    assert "--assumptions for all" in "\n".join(lines)


def test_demo_all_assumptions_each_once_without_internal_paths(tmp_path: Path) -> None:
    got = items(demo(tmp_path, "--assumptions"))
    named = [a for a in got if not a.startswith("  - (and ")]
    assert len(named) > 8 and len(named) == len(set(named)), got
    text = "\n".join(got)
    assert "shared/data" not in text and "seed 0" not in text and "issue " not in text
