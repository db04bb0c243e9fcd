"""Latency against load: one simulation per arrival rate, the knee, the best rate under SLOs.

The knee: `ridgeline.metrics.knee.ttft_knee_index` (P99 TTFT <= 3x the lowest rate's).

The best rate under SLOs: the highest swept rate at which at least `attainment` of the
requests meet every SLO (goodput's per-request test, from `ridgeline.metrics`).

>>> best_rate_index([1, 2, 4, 8], [1.0, 0.995, 0.97, 0.2], 0.99)
1
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ridgeline.errors import RidgelineError
from ridgeline.workload.arrivals import MAX_RATE_REQ_S, MIN_RATE_REQ_S, RATE_TEXT

SWEEP_FRACTIONS = (0.2, 0.4, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1)


@dataclass
class SweepPoint:
    """One rate's headline numbers (all from `analyze`)."""

    rate_req_s: float
    throughput_req_s: float
    output_tok_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    goodput_req_s: float = math.nan
    attainment: float = math.nan
    preemptions: int = 0
    rejected: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
               for k, v in self.__dict__.items() if k != "extra"}
        out.update(self.extra)
        return out


MAX_SWEEP_RATES = 1000


def parse_rates(text: str) -> list[float] | None:
    """`8` -> [8.0]; `1,2,4` -> [1, 2, 4]; `sweep` -> None (rates chosen from capacity)."""
    t = text.strip().lower()
    if t == "sweep":
        return None
    try:
        rates = [float(x) for x in t.split(",") if x.strip()]
    except ValueError:
        raise RidgelineError(f"--rate: got {text!r}; allowed: a rate in req/s, a comma list "
                             "(1,2,4,8), or 'sweep'") from None
    if not rates or any(not (MIN_RATE_REQ_S <= r <= MAX_RATE_REQ_S) for r in rates):
        raise RidgelineError(f"--rate: got {text!r}; allowed: {RATE_TEXT} (or a comma list "
                             "of them, or 'sweep')")
    if len(rates) > MAX_SWEEP_RATES:
        raise RidgelineError(f"--rate: {len(rates)} rates; allowed: at most {MAX_SWEEP_RATES}")
    return sorted(set(rates))


def sweep_rates(capacity_req_s: float) -> list[float]:
    """Rates around a measured capacity, rounded to 3 significant figures."""
    out = []
    for f in SWEEP_FRACTIONS:
        r = capacity_req_s * f
        digits = 2 - math.floor(math.log10(r))
        out.append(round(r, digits))
    return sorted(set(out))


def best_rate_index(rates: Sequence[float], attainment: Sequence[float],
                    target: float) -> int | None:
    """Highest rate index with SLO attainment >= target (None if none)."""
    ok = [i for i, a in enumerate(attainment) if math.isfinite(a) and a >= target]
    return ok[-1] if ok else None
