"""Service-level objectives: a bound on one per-request metric, e.g. ``ttft_ms:500``.

An SLO bounds every request, not a percentile: goodput counts the requests that meet all
of them. The metric name carries its unit; the value is in that unit.

Two spellings. ``METRIC:LIMIT`` is shell-safe (as vLLM's ``--goodput ttft:500``) and means
"no worse than LIMIT": at most for latencies, at least for ``decode_rate_tok_s``. The
operator form ``ttft_ms<=500`` (also ``<``, ``>=``, ``>``) needs quotes in a shell, where
``<`` and ``>`` redirect. Results print the operator form, which says the direction.

>>> slo = parse_slo("ttft_ms:500")
>>> slo.metric, slo.op, slo.bound_base
('ttft', '<=', 0.5)
>>> parse_slo("decode_rate_tok_s:20").text
'decode_rate_tok_s>=20'
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ridgeline.errors import RidgelineError

# metric -> (unit suffix -> factor to the metric's base unit)
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
SLO_METRICS: dict[str, dict[str, float]] = {
    "ttft": _TIME_UNITS,
    "tpot": _TIME_UNITS,
    "e2e": _TIME_UNITS,
    "itl_max": _TIME_UNITS,
    "queue": _TIME_UNITS,
    "decode_rate": {"tok_s": 1.0},
}
_OPS = ("<=", ">=", "<", ">")
_PATTERN = re.compile(r"^\s*([a-z][a-z0-9_]*)\s*(<=|>=|<|>|:)\s*([-+0-9.eE]+)\s*$")
# The direction METRIC:LIMIT means (no worse than LIMIT); latencies not listed are "<=".
_GOOD_DIRECTION = {"decode_rate": ">="}
ALLOWED_TEXT = (
    "METRIC:LIMIT (no worse than LIMIT) with METRIC one of ttft_ms|ttft_s, tpot_ms|tpot_s, "
    "e2e_ms|e2e_s, itl_max_ms|itl_max_s, queue_ms|queue_s, decode_rate_tok_s; e.g. "
    "ttft_ms:500 (or a quoted operator form such as 'ttft_ms<=500')"
)


@dataclass(frozen=True)
class SLO:
    """One bound. `bound_base` is in the metric's base unit (seconds, or tokens/s)."""

    metric: str
    unit: str
    op: str
    value: float

    @property
    def bound_base(self) -> float:
        return self.value * SLO_METRICS[self.metric][self.unit]

    @property
    def text(self) -> str:
        return f"{self.metric}_{self.unit}{self.op}{self.value:g}"

    def holds(self, values_base: np.ndarray) -> np.ndarray:
        """Which requests meet the bound. NaN (undefined) values are handled by the caller."""
        b = self.bound_base
        with np.errstate(invalid="ignore"):
            if self.op == "<=":
                return values_base <= b
            if self.op == "<":
                return values_base < b
            if self.op == ">=":
                return values_base >= b
            return values_base > b


def parse_slo(text: str) -> SLO:
    """Parse ``<metric>_<unit>:<value>`` or ``<metric>_<unit><op><value>``.

    Raises RidgelineError on bad text.
    """
    m = _PATTERN.match(text)
    if not m:
        raise RidgelineError(f"--slo: got {text!r}; allowed: {ALLOWED_TEXT}")
    name, op, value_text = m.groups()
    if re.match(r"^p\d", name):
        raise RidgelineError(
            f"--slo: got {text!r}; an SLO bounds each request (e.g. ttft_ms:500), not a "
            "percentile; use `gate --max-regression` for percentile thresholds"
        )
    for metric in sorted(SLO_METRICS, key=len, reverse=True):
        for unit in SLO_METRICS[metric]:
            if name == f"{metric}_{unit}":
                try:
                    value = float(value_text)
                except ValueError:
                    raise RidgelineError(
                        f"--slo: value {value_text!r} in {text!r} is not a number"
                    ) from None
                if not (math.isfinite(value) and value >= 0):
                    raise RidgelineError(f"--slo: got {text!r}; allowed: a finite limit >= 0")
                if op == ":":
                    op = _GOOD_DIRECTION.get(metric, "<=")
                return SLO(metric=metric, unit=unit, op=op, value=value)
    raise RidgelineError(f"--slo: unknown metric {name!r} in {text!r}; allowed: {ALLOWED_TEXT}")


def parse_slos(texts: list[str] | tuple[str, ...] | None) -> tuple[SLO, ...]:
    """Parse every ``--slo`` (None → none)."""
    return tuple(parse_slo(t) for t in (texts or ()))
