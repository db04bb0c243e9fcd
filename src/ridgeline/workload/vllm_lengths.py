"""vLLM's random dataset lengths (`--random-input-len` with `--random-range-ratio`) as a
length spec: bench reads vLLM's flags with it, and `--workload` reads a vLLM command line.

>>> random_lengths(64, 0.5)
'uniform:min=32,max=96'
"""

from __future__ import annotations

import math

from ridgeline.errors import RidgelineError


def random_lengths(length: int, range_ratio: float) -> str:
    """vLLM's random dataset length: uniform on [floor(L(1-r)), ceil(L(1+r))], as vLLM's
    `--random-range-ratio` help says; fixed when r = 0."""
    if not 0 <= range_ratio < 1:
        raise RidgelineError(f"--random-range-ratio: got {range_ratio:g}; allowed: [0, 1)")
    if range_ratio == 0:
        return f"fixed:{length}"
    lo = max(1, math.floor(length * (1 - range_ratio)))
    hi = max(lo, math.ceil(length * (1 + range_ratio)))
    return f"uniform:min={lo},max={hi}"
