"""Token-length distributions, parsed from one compact syntax (simulate and bench share it).

Syntax (`--prompt` / `--output`):

    fixed:256            (or just 256)
    uniform:min=100,max=300
    normal:mean=500,std=100
    lognormal:mean=1000,sigma=0.6      (mean of the lengths; sigma of log-lengths)
    lognormal:median=800,sigma=0.6
    exponential:mean=200
    empirical:path=lengths.txt          (one integer per line, or a JSON list)

Every kind also takes `min=` and `max=` to clip (default min=1). Samples are integers >= 1.

>>> import numpy as np
>>> parse_lengths("fixed:7", "--output").sample(3, np.random.default_rng(0)).tolist()
[7, 7, 7]
>>> parse_lengths("uniform:min=5,max=5", "--prompt").mean_tokens
5.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.inputs import loads_json, read_text
from ridgeline.workload.spec_syntax import (
    check_keys,
    reject_unknown,
    split_spec,
    take_float,
)

KINDS = "fixed, uniform, normal, lognormal, exponential, empirical"
# The schema of a length spec: the keys each kind takes ("value": a positional number or
# path); min and max clip every kind's samples.
LENGTH_KEYS: dict[str, tuple[str, ...]] = {
    "fixed": ("value", "min", "max"), "uniform": ("min", "max"),
    "normal": ("mean", "std", "min", "max"),
    "lognormal": ("mean", "median", "sigma", "min", "max"),
    "exponential": ("mean", "min", "max"), "empirical": ("path", "value", "min", "max")}
# No length may exceed the largest context of any served model: a prompt of
# 2e9 tokens would be built in memory before anything else could refuse it. Samples are
# also clipped here when the spec sets no max (a lognormal's far tail).
MAX_LENGTH_TOKENS = 10_000_000
MAX_SIGMA = 10.0
_BOUND = {"hi": float(MAX_LENGTH_TOKENS)}


@dataclass(frozen=True)
class LengthDistribution:
    """A distribution of token counts. `sample(n, rng)` returns int64 lengths >= 1."""

    kind: str
    params: dict[str, float]
    spec: str
    min_tokens: int = 1
    max_tokens: int | None = None
    values: np.ndarray | None = field(default=None, repr=False, compare=False)

    def _raw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        p = self.params
        if self.kind == "fixed":
            return np.full(n, p["value"])
        if self.kind == "uniform":
            return rng.integers(int(p["min"]), int(p["max"]) + 1, size=n).astype(np.float64)
        if self.kind == "normal":
            return rng.normal(p["mean"], p["std"], size=n)
        if self.kind == "lognormal":
            return rng.lognormal(p["mu"], p["sigma"], size=n)
        if self.kind == "exponential":
            return rng.exponential(p["mean"], size=n)
        if self.kind == "empirical":
            assert self.values is not None
            return rng.choice(self.values, size=n, replace=True).astype(np.float64)
        raise AssertionError(self.kind)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Draw n integer lengths, rounded and clipped to [min, max]."""
        raw = np.rint(self._raw(n, rng))
        hi = self.max_tokens if self.max_tokens is not None else MAX_LENGTH_TOKENS
        return np.clip(raw, self.min_tokens, hi).astype(np.int64)

    @property
    def mean_tokens(self) -> float:
        """The mean before rounding and clipping (what the spec asked for)."""
        p = self.params
        if self.kind == "fixed":
            return p["value"]
        if self.kind == "uniform":
            return (p["min"] + p["max"]) / 2
        if self.kind in ("normal", "exponential"):
            return p["mean"]
        if self.kind == "lognormal":
            return math.exp(p["mu"] + p["sigma"] ** 2 / 2)
        assert self.values is not None
        return float(np.mean(self.values))


def _read_lengths_file(path_text: str, field_name: str) -> np.ndarray:
    text = read_text(path_text, field_name, max_bytes=256 << 20).strip()
    try:
        raw = loads_json(text, f"{field_name}: {path_text!r}") if text.startswith("[") else [
            line.split(",")[0] for line in text.splitlines() if line.strip()
        ]
        if not isinstance(raw, list):
            raise TypeError
        values = np.array([float(v) for v in raw], dtype=np.float64)
    except (ValueError, TypeError):
        raise RidgelineError(
            f"{field_name}: empirical file {path_text!r} must hold integers, one per line "
            "(or a JSON list)"
        ) from None
    if values.size == 0 or not np.all((values >= 1) & (values <= MAX_LENGTH_TOKENS)
                                      & (values == np.round(values))):
        raise RidgelineError(f"{field_name}: empirical file {path_text!r}: allowed: whole "
                             f"lengths from 1 to {MAX_LENGTH_TOKENS:,} tokens")
    return values


def parse_lengths(spec: str | int, field_name: str = "--prompt") -> LengthDistribution:
    """Parse a length spec; bad input raises RidgelineError naming the flag and the rule."""
    text = str(spec)
    kind, params = split_spec(text, field_name)
    if kind.replace(".", "", 1).isdigit():  # a bare number
        params, kind = {"value": kind}, "fixed"
    check_keys(kind, params, LENGTH_KEYS, field_name, "distribution",
               exclusive=(("mean", "median"), ("path", "value")))
    lo = int(take_float(params, "min", field_name, default=1.0, positive=True, **_BOUND))
    hi_raw = params.get("max") if kind != "uniform" else None
    hi = int(take_float(params, "max", field_name, positive=True, **_BOUND)) if hi_raw else None
    values = None
    if kind == "fixed":
        out = {"value": take_float(params, "value", field_name, positive=True, **_BOUND)}
    elif kind == "uniform":
        a = take_float(params, "min", field_name, default=float(lo), positive=True, **_BOUND)
        b = take_float(params, "max", field_name, positive=True, **_BOUND)
        if b < a:
            raise RidgelineError(f"{field_name}: uniform needs max >= min, got {a}..{b}")
        out = {"min": a, "max": b}
        lo, hi = int(a), int(b)
    elif kind == "normal":
        out = {
            "mean": take_float(params, "mean", field_name, positive=True, **_BOUND),
            "std": take_float(params, "std", field_name, nonnegative=True, **_BOUND),
        }
    elif kind == "lognormal":
        sigma = take_float(params, "sigma", field_name, nonnegative=True, hi=MAX_SIGMA)
        if "median" in params:
            mu = math.log(take_float(params, "median", field_name, positive=True, **_BOUND))
        else:
            mu = math.log(take_float(params, "mean", field_name, positive=True,
                                     **_BOUND)) - sigma**2 / 2
        out = {"mu": mu, "sigma": sigma}
    elif kind == "exponential":
        out = {"mean": take_float(params, "mean", field_name, positive=True, **_BOUND)}
    elif kind == "empirical":
        path = params.pop("path", None) or params.pop("value", None)
        if not path:
            raise RidgelineError(f"{field_name}: empirical needs path=FILE")
        values = _read_lengths_file(path, field_name)
        out = {}
    else:
        raise RidgelineError(f"{field_name}: unknown distribution {kind!r}; allowed: {KINDS}")
    reject_unknown(params, field_name, kind, "min, max and the kind's own parameters")
    if hi is not None and hi < lo:
        raise RidgelineError(f"{field_name}: max={hi} is below min={lo}")
    return LengthDistribution(kind, out, text, lo, hi, values)
