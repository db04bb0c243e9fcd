"""Think time of closed-loop users: seconds a user waits after a response before the next request.

Syntax (`--think-time`), the same compact form as lengths and arrivals, in seconds:

    0                         no think time (default): the next request goes out at once
    fixed:1.5  (or just 1.5)  always 1.5 s
    exponential:mean=2        exponential with mean 2 s (users acting independently)
    uniform:min=1,max=3       uniform between 1 and 3 s

>>> import numpy as np
>>> parse_think_time("fixed:1.5").sample(2, np.random.default_rng(0)).tolist()
[1.5, 1.5]
>>> parse_think_time("0").mean_s
0.0
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.workload.spec_syntax import reject_unknown, split_spec, take_float

MAX_THINK_S = 86_400.0   # a user who thinks a day between requests has left

KINDS = "fixed, exponential, uniform (seconds)"


@dataclass(frozen=True)
class ThinkTime:
    """A parsed think-time distribution, in seconds."""

    kind: str
    a_s: float = 0.0
    b_s: float = 0.0
    spec: str = "0"

    @property
    def mean_s(self) -> float:
        return (self.a_s + self.b_s) / 2 if self.kind == "uniform" else self.a_s

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "exponential":
            return rng.exponential(self.a_s, size=n)
        if self.kind == "uniform":
            return rng.uniform(self.a_s, self.b_s, size=n)
        return np.full(n, self.a_s)


def parse_think_time(spec: str | float) -> ThinkTime:
    """Parse a think-time spec; RidgelineError names the flag and what is allowed."""
    field = "--think-time"
    text = str(spec).strip()
    kind, params = split_spec(text, field)
    if kind.replace(".", "", 1).isdigit():
        params, kind = {"value": kind}, "fixed"
    if kind == "fixed":
        out = ThinkTime("fixed", take_float(params, "value", field, nonnegative=True,
                                            hi=MAX_THINK_S), spec=text)
    elif kind == "exponential":
        out = ThinkTime("exponential", take_float(params, "mean", field, positive=True,
                                                  hi=MAX_THINK_S),
                        spec=text)
    elif kind == "uniform":
        lo = take_float(params, "min", field, nonnegative=True, hi=MAX_THINK_S)
        hi = take_float(params, "max", field, nonnegative=True, hi=MAX_THINK_S)
        if hi < lo:
            raise RidgelineError(f"{field}: uniform needs max >= min, got {lo}..{hi}")
        out = ThinkTime("uniform", lo, hi, spec=text)
    else:
        raise RidgelineError(f"{field}: unknown kind {kind!r}; allowed: {KINDS}")
    reject_unknown(params, field, kind, "value (fixed), mean (exponential), min and max "
                   "(uniform)")
    return out
