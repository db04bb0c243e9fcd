"""The value grids `estimate` evaluates: `--batch`, `--prompt`, `--output`, `--context`
(and `roofline --m`), parsed once for the command and for `estimate --calibration`.

Syntax: a value (32), a comma list (1,8,64), a doubling range a:b (1:256), a linear range
a:b:step (100:1000:100) or a geometric one a:b:xF (1:4096:x4); several can be joined with
commas. Values are non-negative integers; at most MAX_GRID_VALUES of them.
"""

from __future__ import annotations

import math

from ridgeline.errors import RidgelineError

GRID_HELP = ("a value, a comma list (1,8,64), a doubling range a:b (1:256), a linear range "
             "a:b:step or a geometric one a:b:xF")
MAX_GRID_VALUES = 1_000_000
MAX_GRID_NUMBER = 1e15


def parse_grid(text: str, field: str) -> list[float]:
    """Parse `--batch`-style values: 32 | 1,8,64 | 1:256 | 100:1000:100 | 1:4096:x4.

    >>> parse_grid("1:16", "--batch"), parse_grid("100:300:100", "--prompt")
    ([1.0, 2.0, 4.0, 8.0, 16.0], [100.0, 200.0, 300.0])
    """
    def num(t: str) -> float:
        # nan and inf are not sizes, nor is anything past 1e15 (the CLI's number bound)
        if not math.isfinite(v := float(t)) or abs(v) > MAX_GRID_NUMBER:
            raise ValueError(t)
        return v

    values: list[float] = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            if ":" not in part:
                values.append(num(part))
                continue
            bits = part.split(":")
            lo, hi = num(bits[0]), num(bits[1])
            step = bits[2] if len(bits) > 2 else "x2"
            if len(bits) > 3 or lo <= 0 or hi < lo:
                raise ValueError
            if step.startswith("x"):
                factor = num(step[1:])
                if factor <= 1:
                    raise ValueError
                v = lo
                while v <= hi * (1 + 1e-12) and len(values) <= MAX_GRID_VALUES:
                    values.append(v)
                    v *= factor
            else:
                inc = num(step)
                if inc <= 0:
                    raise ValueError
                v = lo
                while v <= hi * (1 + 1e-12) and len(values) <= MAX_GRID_VALUES:
                    values.append(v)
                    v += inc
        except ValueError:
            raise RidgelineError(f"{field}: got {text!r}; allowed: {GRID_HELP}") from None
    if not values or any(v != int(v) or v < 0 for v in values):
        raise RidgelineError(f"{field}: got {text!r}; allowed: non-negative integers, "
                             f"{GRID_HELP}")
    if len(values) > MAX_GRID_VALUES:
        raise RidgelineError(f"{field}: got {text!r}, more than {MAX_GRID_VALUES:,} values; "
                             f"allowed: at most {MAX_GRID_VALUES:,}")
    return values


__all__ = ["GRID_HELP", "MAX_GRID_VALUES", "parse_grid"]
