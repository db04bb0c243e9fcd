"""Values made safe for JSON: the one rule every `--json` output and HTTP answer follows.

The rule:

- a float that is NaN, +inf or -inf becomes ``None`` (JSON ``null``): JSON has no spelling for
  them, and Python's ``json.dumps`` would otherwise write ``NaN`` / ``Infinity``, which strict
  parsers (``jq``, JavaScript's ``JSON.parse``, Go, Rust) refuse. A missing or unbounded figure
  (no knee found, a rate with no capacity, an empty sample) reads as ``null``;
- numpy scalars become the Python number they hold and numpy arrays nested lists (then the
  float rule applies to each element);
- dicts keep their keys and lists and tuples become lists, with the rule applied inside;
- everything else (str, int, bool, None) passes unchanged.

numpy is recognised by its ``tolist()`` method rather than imported, so a command that never
touches numpy does not pay for importing it.

>>> json_safe({"a": float("inf"), "b": [1.5, float("nan")], "c": (-float("inf"), 2)})
{'a': None, 'b': [1.5, None], 'c': [None, 2]}
>>> finite_or_none(float("-inf")) is None, finite_or_none(3)
(True, 3.0)
"""

from __future__ import annotations

import math
from typing import Any


def finite_or_none(x: float | None) -> float | None:
    """One number by the rule: a finite value as a Python float, None for NaN, ±inf or None."""
    if x is None:
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def json_safe(value: Any) -> Any:
    """`value` with the rule applied all the way down (see the module docstring)."""
    if isinstance(value, float):  # numpy's float64 is a float too
        return finite_or_none(value)
    if isinstance(value, (str, int)) or value is None:  # bool is an int
        return value
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars (float32, int64, bool_)
    if callable(tolist):
        return json_safe(tolist())
    return value


__all__ = ["finite_or_none", "json_safe"]
