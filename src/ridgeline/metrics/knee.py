"""The two "knees" of a latency-vs-load curve, each under its own name.

- **knee (TTFT p99 <= 3x)** (`ttft_knee_index`), what `simulate`, `plan`, the report and a
  measured `bench --rate sweep` mark: the highest swept rate whose P99 TTFT is at most
  `KNEE_FACTOR` times the P99 TTFT at the lowest swept rate. Past it, queueing dominates
  TTFT (the 1/(1 - rho) blow-up of queueing theory).
- **max power (Kleinrock)** (`max_power_index`), what `bench` marks over its load points:
  the point of the highest output throughput per second of mean E2E latency. Below it more
  load buys throughput almost for free; above it latency grows faster than throughput.

Neither is claimed at the last point of the range: there the curve has not turned yet (every
point is within 3x, or the power still rises), so the knee lies beyond the range and the
answer is None ("no knee within the range").

>>> ttft_knee_index([1, 2, 4, 8], [0.10, 0.12, 0.2, 3.0])
2
>>> ttft_knee_index([1, 2, 4], [0.10, 0.12, 0.2]) is None   # still within 3x at the end
True
>>> max_power_index([100.0, 190.0, 260.0, 280.0], [1.0, 1.05, 1.3, 2.8])
2
"""

from __future__ import annotations

import math
from collections.abc import Sequence

KNEE_FACTOR = 3.0
KNEE_LABEL = f"knee (TTFT p99 <= {KNEE_FACTOR:g}x)"
POWER_LABEL = "max power (Kleinrock)"
NO_KNEE = "no knee within the range"


def ttft_knee_index(rates: Sequence[float], ttft_p99: Sequence[float]) -> int | None:
    """Index of the highest rate with P99 TTFT <= KNEE_FACTOR x the lowest rate's; None if
    the lowest rate's is undefined or no later point passes the bound (the knee is then
    beyond the range)."""
    if not rates or not math.isfinite(ttft_p99[0]) or ttft_p99[0] <= 0:
        return None
    bound = KNEE_FACTOR * ttft_p99[0]
    best = 0
    for i, v in enumerate(ttft_p99):
        if math.isfinite(v) and v <= bound:
            best = i
        else:
            break
    return None if best == len(ttft_p99) - 1 else best


def max_power_index(output_tok_s: Sequence[float | None],
                    mean_e2e_s: Sequence[float | None]) -> int | None:
    """Index of the point with the highest throughput / latency; None if none is finite or
    the highest is the range's last point (the power may still rise beyond it)."""
    best, best_i = -math.inf, None
    for i, (x, w) in enumerate(zip(output_tok_s, mean_e2e_s, strict=True)):
        if x is None or w is None or not (math.isfinite(x) and math.isfinite(w)) or w <= 0:
            continue
        power = x / w
        if power > best:
            best, best_i = power, i
    if best_i is not None and len(output_tok_s) > 1 and best_i == len(output_tok_s) - 1:
        return None
    return best_i


__all__ = ["KNEE_FACTOR", "KNEE_LABEL", "NO_KNEE", "POWER_LABEL", "max_power_index",
           "ttft_knee_index"]
