"""MoE routing model: the expected number of distinct experts a batch touches.

If each of B tokens picks k distinct experts of E independently and uniformly, an expert is
missed by every token with probability (1 - k/E)^B, so

    E[U] = E * (1 - (1 - k/E)^B)

and the layer's expert weight traffic is about E[U] * P_expert * b_w (each touched expert
read once). Real routing is correlated and uneven; this is the trend model the seed uses.

>>> round(float(expected_unique_experts(8, 2, 8)), 2)
7.2
"""

from __future__ import annotations

import numpy as np

from ridgeline.perf.step_time import ArrayLike


def expected_unique_experts(num_experts: int, experts_per_token: int,
                            tokens: ArrayLike) -> ArrayLike:
    """E[U] = E(1 - (1 - k/E)^B); broadcasts over `tokens`; 0 tokens touch 0 experts."""
    if num_experts <= 0:
        return np.zeros_like(np.asarray(tokens, dtype=np.float64)) if np.ndim(tokens) else 0.0
    miss = 1.0 - experts_per_token / num_experts
    return num_experts * (1.0 - miss ** np.asarray(tokens, dtype=np.float64))
