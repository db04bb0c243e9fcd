"""The one JSON-safe rule (ridgeline.jsonsafe): NaN and ±inf become null, numpy becomes Python,
containers are walked; and the installed command's JSON parses under a strict parser."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ridgeline.jsonsafe import finite_or_none, json_safe


def strict_loads(text: str) -> Any:
    """json.loads that refuses NaN/Infinity, as jq, JSON.parse and Go's encoding/json do."""
    def refuse(constant: str) -> Any:
        raise ValueError(f"non-standard JSON constant {constant}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, np.float64("inf"),
                                 np.float32("-inf"), np.float16("nan")])
def test_non_finite_numbers_become_null(bad: Any) -> None:
    assert json_safe(bad) is None
    assert finite_or_none(bad) is None


def test_finite_numbers_and_plain_values_pass_unchanged() -> None:
    assert json_safe(1.5) == 1.5 and type(json_safe(1.5)) is float
    assert json_safe(7) == 7 and type(json_safe(7)) is int   # an int stays an int
    assert json_safe(True) is True and json_safe(None) is None and json_safe("inf") == "inf"
    assert json_safe(-0.0) == 0.0 and math.copysign(1, json_safe(-0.0)) == -1
    assert finite_or_none(3) == 3.0 and type(finite_or_none(3)) is float
    assert finite_or_none(None) is None


def test_numpy_scalars_become_python_numbers() -> None:
    cases = [(np.int64(5), 5, int), (np.int32(-2), -2, int), (np.float32(0.5), 0.5, float),
             (np.float64(2.25), 2.25, float), (np.bool_(True), True, bool)]
    for value, expected, kind in cases:
        out = json_safe(value)
        assert out == expected and type(out) is kind, (value, out)


def test_numpy_arrays_become_nested_lists_with_the_rule_inside() -> None:
    a = np.array([[1.0, np.inf], [np.nan, -np.inf]])
    assert json_safe(a) == [[1.0, None], [None, None]]
    assert json_safe(np.arange(3, dtype=np.int64)) == [0, 1, 2]
    assert json_safe(np.float64(np.nan).reshape(())) is None  # a 0-d array is one number


def test_containers_are_walked_keys_kept_tuples_become_lists() -> None:
    value = {"a": (1, math.inf), "b": [{"c": np.float32(np.nan)}, "x"], 3: {"d": -math.inf}}
    out = json_safe(value)
    assert out == {"a": [1, None], "b": [{"c": None}, "x"], 3: {"d": None}}
    # The result is standard JSON: a strict parser reads it back.
    assert strict_loads(json.dumps(out, allow_nan=False)) == {
        "a": [1, None], "b": [{"c": None}, "x"], "3": {"d": None}}


def test_the_input_is_not_modified() -> None:
    value = {"a": [math.inf]}
    json_safe(value)
    assert value["a"][0] == math.inf


def _ridgeline() -> str:
    exe = shutil.which("ridgeline", path=str(Path(sys.executable).parent))
    assert exe is not None, "the installed `ridgeline` command is missing"
    return exe


def test_installed_command_writes_null_for_an_undefined_figure() -> None:
    # One request: an arrival rate needs two arrivals, so Little's law has no λ; the JSON must
    # say null (strict JSON), never NaN.
    proc = subprocess.run([_ridgeline(), "simulate", "--requests", "1", "--rate", "1",
                           "--output", "1", "--json"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = strict_loads(proc.stdout)
    little = data["analysis"]["littles_law"]
    assert little["lambda_req_s"] is None and little["W_s"] is None


def test_installed_estimate_json_is_strict_json() -> None:
    proc = subprocess.run([_ridgeline(), "estimate", "--batch", "1,4", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert strict_loads(proc.stdout)
