"""The recheck of plan's choice (its "verification"): long runs on new seeds, an interval on
their attainment.

A short screening run cannot tell 99% from 97%: the attainment target is a percentile (99% of
requests within the SLOs is "P99 within the bound"), and a stable P99 needs
thousands of samples. Near saturation it is worse: a queue relaxes slowly, failures come in
bursts hundreds of requests long, and the first thousand requests of a run, started empty,
fail less than the rest (a P/D split of plan's worked example: 25% of 1,522-request runs pass
every request, none of 3,000-request ones do; 6,000 requests give 91.5% and 97.9%). So the
cheapest candidates that pass the screen are simulated again:

- at the planning rate lambda x (1 + headroom);
- on `VERIFY_RUNS` (2) seeds that are not the screen's (`verify_seeds`): independent
  replications, so one lucky sample path cannot carry the choice;
- with `verify_requests(target)` requests each: enough for the sample percentile that the
  target judges (P99 for 99%) to be within a quarter of its tail of the true one (+-0.25
  percentile points for P99) and for 10 requests beyond it (`theory.stats.
  samples_for_rank_precision`, `min_samples_for_percentile`: what `ridgeline theory samples`
  prints): 6,086 for a 99% target, so that a configuration at 99.5% passes;
- judged by the lower end of a 95% interval on each run's attainment: a configuration passes
  only if every run's lower end is >= the target.

The interval is Wilson's score interval for a proportion, with the sample size divided by
the design effect of correlated requests: requests behind one queue fail together (a burst
delays all its neighbours), so n requests carry less information than n independent ones.
The design effect is the long-run variance of the per-request pass/fail series (circular
block bootstrap, Politis-White block length: `theory.stats.block_length`,
`block_bootstrap_variance`) over its plain variance, at least 1. When every request passes
(or every one fails) there is no variance to inflate and the plain Wilson interval is used:
6,000 passes out of 6,000 gives [99.94%, 100%].

>>> lo, hi = wilson_interval(6000, 6000)
>>> round(lo, 4), hi
(0.9994, 1.0)
>>> verify_requests(0.99), verify_requests(0.95), verify_requests(0.999)
(6086, 1168, 61405)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.jsonsafe import finite_or_none, json_safe
from ridgeline.metrics.distribution import PERCENTILES, pct_key
from ridgeline.metrics.slo import parse_slos
from ridgeline.plan.execute import LEAN, built_for
from ridgeline.plan.wilson import Z_95, wilson_interval
from ridgeline.sim.scenario import Scenario
from ridgeline.sim.scenario_run import run_scenario
from ridgeline.theory.stats import (
    block_bootstrap_variance,
    block_length,
    min_samples_for_percentile,
    samples_for_rank_precision,
)

VERIFY_RUNS = 2                    # independent replications per verified candidate
TAIL_SAMPLES = 10                  # requests beyond the judged percentile, at least
TAIL_PRECISION = 4                 # the percentile within 1/4 of its tail (+-0.25 for P99)


def verify_requests(target: float, tail_samples: int = TAIL_SAMPLES) -> int:
    """Requests a verification run needs for an attainment target in (0, 1)."""
    if not 0 < target < 1:
        raise RidgelineError(f"--goodput-target: got {target}; allowed: strictly between 0 "
                             "and 1 (no finite run can show that 100% of requests meet the "
                             "SLOs; use e.g. 0.999)")
    q = 100.0 * target
    return max(min_samples_for_percentile(q, tail_samples),
               samples_for_rank_precision(q, (100.0 - q) / TAIL_PRECISION))


def verify_seeds(seed: int, runs: int = VERIFY_RUNS) -> tuple[int, ...]:
    """Seeds of the verification runs: the screen's seed + 1, + 2, ..."""
    return tuple(seed + k for k in range(1, runs + 1))


def design_effect(good_in_order: np.ndarray) -> float:
    """Long-run variance / variance of the 0/1 series (>= 1; 1 when it is constant)."""
    x = np.asarray(good_in_order, dtype=np.float64)
    var = float(np.var(x)) if x.size else 0.0
    if not var > 0:
        return 1.0
    e = x - x.mean()
    return max(1.0, block_bootstrap_variance(e, block_length(e)) / var)


def attainment_interval(good_in_order: np.ndarray, z: float = Z_95
                        ) -> tuple[float, float, float]:
    """(low, high, design effect): Wilson's interval at the effective sample size."""
    x = np.asarray(good_in_order, dtype=bool)
    n = int(x.size)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    deff = design_effect(x)
    n_eff = n / deff
    lo, hi = wilson_interval(float(x.sum()) / n * n_eff, n_eff, z)
    return (lo, hi, deff)


@dataclass(frozen=True)
class VerifyRun:
    """One long run of a candidate: what it showed and whether it meets the target."""

    requests: int
    seed: int
    rate_req_s: float
    judged_requests: int
    good_requests: int
    attainment: float
    ci_low: float
    ci_high: float
    design_effect: float
    rejected: int
    ttft_p99_ms: float
    tpot_p99_ms: float
    error: str | None = None
    # the smallest margin to an SLO bound, as a fraction of the bound, at each percentile
    # analyze computes: ((q, 1 - P_q / bound), ...); `slack(target)` reads the judged one
    slo_slacks: tuple[tuple[float, float], ...] = ()

    def meets(self, target: float) -> bool:
        """The interval's lower end reaches the target (and nothing was rejected)."""
        return (self.error is None and self.rejected == 0 and math.isfinite(self.ci_low)
                and self.ci_low >= target)

    def slack(self, target: float) -> float:
        """1 - P_q / bound of the tightest upper-bound SLO, q the first computed percentile
        at or above the target's (P99 for 0.99); NaN when no SLO has a distribution."""
        for q, v in self.slo_slacks:
            if q >= 100.0 * target - 1e-9:
                return v
        return self.slo_slacks[-1][1] if self.slo_slacks else math.nan

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = json_safe(asdict(self))
        d["slo_slacks"] = {f"p{q:g}": finite_or_none(v) for q, v in self.slo_slacks}
        return d

    def text(self) -> str:
        if self.error:
            return f"simulation error: {self.error}"
        return (f"{self.attainment:.2%} [95% CI {self.ci_low:.2%}, {self.ci_high:.2%}] of "
                f"{self.judged_requests:,} judged requests ({self.requests:,} simulated at "
                f"{self.rate_req_s:g} req/s, seed {self.seed})")


def verify(sc: Scenario) -> VerifyRun:
    """Simulate `sc` as given (its rate, requests, seed) and judge its attainment."""
    nan = math.nan
    try:
        run = run_scenario(sc, built=built_for(sc), **LEAN)
    except RidgelineError as exc:
        return VerifyRun(sc.requests, sc.seed, sc.rate_req_s or nan, 0, 0, nan, nan, nan,
                            nan, 0, nan, nan, str(exc))
    g = run.analysis.goodput
    p = run.sweep_point()
    if g is None or g.good_in_send_order is None or g.unavailable:
        why = g.unavailable if g is not None and g.unavailable else "no SLOs to judge"
        return VerifyRun(sc.requests, sc.seed, sc.rate_req_s or nan, 0, 0, nan, nan, nan,
                            nan, p.rejected, p.ttft_p99_ms, p.tpot_p99_ms, why)
    lo, hi, deff = attainment_interval(g.good_in_send_order)
    return VerifyRun(
        requests=sc.requests, seed=sc.seed, rate_req_s=float(sc.rate_req_s or nan),
        judged_requests=g.judged_requests, good_requests=g.good_requests,
        attainment=g.attainment, ci_low=lo, ci_high=hi, design_effect=deff,
        rejected=p.rejected, ttft_p99_ms=p.ttft_p99_ms, tpot_p99_ms=p.tpot_p99_ms,
        slo_slacks=tuple((q, slo_slack(run.analysis, sc.slos, q))
                         for q in _slack_percentiles()))


def _slack_percentiles() -> tuple[float, ...]:
    return tuple(q for q in PERCENTILES if q >= 90.0)


# latency distributions `analyze` computes, by SLO metric (upper bounds only)
_SLACK_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms", "queue": "queue_ms"}


def slo_slack(analysis: Any, slos: tuple[str, ...], q: float) -> float:
    """min over the upper-bound SLOs of 1 - P_q(metric) / bound (NaN when none applies):
    0.4 means the tightest SLO's P_q is at 60% of its bound."""
    out = math.inf
    for slo in parse_slos(list(slos)):
        key = _SLACK_KEYS.get(slo.metric)
        d = analysis.latency.get(key) if key else None
        if slo.op not in ("<=", "<") or d is None or d.unavailable:
            continue
        pct = d.percentiles.get(pct_key(q))
        bound_ms = slo.bound_base * 1e3
        if pct is not None and math.isfinite(pct.value) and bound_ms > 0:
            out = min(out, 1.0 - pct.value / bound_ms)
    return out if math.isfinite(out) else math.nan


@dataclass(frozen=True)
class Verification:
    """All verification runs of one candidate; it passes when every run does."""

    runs: tuple[VerifyRun, ...]

    def meets(self, target: float) -> bool:
        return bool(self.runs) and all(r.meets(target) for r in self.runs)

    @property
    def ci_low(self) -> float:
        """The lowest lower end over the runs (what the choice rests on)."""
        lows = [r.ci_low for r in self.runs if math.isfinite(r.ci_low)]
        return min(lows) if lows and len(lows) == len(self.runs) else math.nan

    def slack(self, target: float) -> float:
        """The smallest SLO slack over the runs (NaN when a run has none)."""
        vals = [r.slack(target) for r in self.runs]
        return min(vals) if vals and all(math.isfinite(v) for v in vals) else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {"runs": [r.to_dict() for r in self.runs]}

    def text(self) -> str:
        return "; ".join(r.text() for r in self.runs)


__all__ = ["VERIFY_RUNS", "Verification", "VerifyRun", "attainment_interval", "design_effect",
           "verify", "verify_requests", "verify_seeds", "wilson_interval"]
