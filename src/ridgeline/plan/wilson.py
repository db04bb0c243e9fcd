"""Wilson's score interval for a proportion: the screen (`plan.execute`) and the
verification (`plan.recheck`) both judge an SLO attainment by it, so it lives here, apart
from either.

>>> lo, hi = wilson_interval(6000, 6000)
>>> round(lo, 4), hi
(0.9994, 1.0)
"""

from __future__ import annotations

import math

Z_95 = 1.959963984540054           # two-sided 95%


def wilson_interval(successes: float, n: float, z: float = Z_95) -> tuple[float, float]:
    """Wilson's score interval for a proportion (n may be an effective, non-integer size)."""
    if not n > 0:
        return (math.nan, math.nan)
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # At p = 0 or 1 one end is exactly 0 or 1 (rounding would leave 0.9999999999999999).
    lo = 0.0 if p <= 0 else max(0.0, centre - half)
    hi = 1.0 if p >= 1 else min(1.0, centre + half)
    return (lo, hi)
