"""`ridgeline estimate` runs for every model and every GPU of the catalog, as a user types it.

The names come from the catalog's data folders (one JSON file each), so a file added there
is covered without touching this test; the current serving models and GPUs are named
explicitly, so one removed from the catalog fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RIDGELINE = str(Path(sys.executable).with_name("ridgeline"))
DATA = Path(__file__).parents[2] / "src" / "ridgeline" / "specs" / "data"
MODELS = sorted(p.stem for p in (DATA / "models").glob("*.json"))
HARDWARE = sorted(p.stem for p in (DATA / "hardware").glob("*.json"))

# Models and GPUs people serve today: each must be in the catalog.
CURRENT_MODELS = {"gpt-oss-20b", "gpt-oss-120b", "qwen3-32b", "qwen3-30b-a3b",
                  "qwen3-235b-a22b", "llama-4-scout-17b-16e", "llama-4-maverick-17b-128e",
                  "gemma-3-27b", "deepseek-v3", "deepseek-r1", "kimi-k2", "glm-4.5",
                  "glm-4.6", "minimax-m2"}
CURRENT_HARDWARE = {"b300", "gb300", "mi325x", "mi355x", "rtx-pro-6000", "l4"}


def _estimate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RIDGELINE, "estimate", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})


def test_the_current_models_and_gpus_are_in_the_catalog() -> None:
    assert set(MODELS) >= CURRENT_MODELS, CURRENT_MODELS - set(MODELS)
    assert set(HARDWARE) >= CURRENT_HARDWARE, CURRENT_HARDWARE - set(HARDWARE)


@pytest.mark.parametrize("model", MODELS)
def test_estimate_runs_for_every_catalog_model(model: str) -> None:
    run = _estimate("--model", model)
    assert run.returncode == 0, run.stderr
    assert model in run.stdout.splitlines()[0]


@pytest.mark.parametrize("hardware", HARDWARE)
def test_estimate_runs_for_every_catalog_gpu(hardware: str) -> None:
    run = _estimate("--hardware", hardware)
    assert run.returncode == 0, run.stderr
    assert f"on {hardware} x1" in run.stdout.splitlines()[0]
