"""Performance regression gate: fail only when a regression beyond its threshold is proven.

For each rule ``metric=threshold`` (e.g. ``tpot_p95=5%``, the metrics chapter's "TPOT P95
up more than 5% blocks the merge"), the regression is the relative change in the bad
direction: (candidate − baseline) / baseline for latencies, (baseline − candidate) /
baseline for throughputs and rates. The gate fails when the whole 95% bootstrap CI of
that regression lies above the threshold. A CI that straddles it is "inconclusive" and
does not fail the gate (collect more samples to decide).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.metrics.analysis import AnalysisResult
from ridgeline.metrics.compare import compare_metric, parse_metric
from ridgeline.metrics.distribution import _clean
from ridgeline.theory.stats import DEFAULT_BOOTSTRAP_DRAWS, ci_from_draws


@dataclass(frozen=True)
class GateRule:
    metric: str
    max_regression: float  # fraction, 0.05 = 5%

    @property
    def text(self) -> str:
        return f"{self.metric}={self.max_regression * 100:g}%"


def parse_rule(text: str) -> GateRule:
    """Parse ``metric=5%`` (or ``metric=0.05``)."""
    if "=" not in text:
        raise RidgelineError(f"--max-regression: got {text!r}; allowed: METRIC=PERCENT, e.g. "
                             "tpot_p95=5%")
    name, _, value = text.partition("=")
    parse_metric(name)  # validates the metric name
    v = value.strip()
    try:
        frac = float(v[:-1]) / 100.0 if v.endswith("%") else float(v)
    except ValueError:
        raise RidgelineError(f"--max-regression: threshold {value!r} in {text!r} is not a "
                             "number (e.g. 5%)") from None
    if not (math.isfinite(frac) and frac >= 0):
        raise RidgelineError(f"--max-regression: threshold in {text!r} must be >= 0")
    return GateRule(metric=name.strip().lower(), max_regression=frac)


@dataclass
class GateRow:
    rule: GateRule
    unit: str
    baseline: float
    candidate: float
    regression: float  # fraction in the bad direction
    regression_ci: tuple[float, float]
    verdict: str  # "regression" | "inconclusive" | "ok" | "unavailable"

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.rule.metric, "unit": self.unit,
            "max_regression": self.rule.max_regression,
            "baseline": _clean(self.baseline), "candidate": _clean(self.candidate),
            "regression": _clean(self.regression),
            "regression_ci95": [_clean(self.regression_ci[0]), _clean(self.regression_ci[1])],
            "verdict": self.verdict,
        }


@dataclass
class GateResult:
    rows: list[GateRow]

    @property
    def failed(self) -> bool:
        return any(r.verdict == "regression" for r in self.rows)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def to_dict(self) -> dict[str, Any]:
        return {"failed": self.failed, "rows": [r.to_dict() for r in self.rows]}


def gate(
    baseline: AnalysisResult,
    candidate: AnalysisResult,
    rules: list[GateRule] | list[str],
    n_draws: int = DEFAULT_BOOTSTRAP_DRAWS,
) -> GateResult:
    """Evaluate every rule; see the module docstring for the decision."""
    parsed = [r if isinstance(r, GateRule) else parse_rule(r) for r in rules]
    rows = []
    for i, rule in enumerate(parsed):
        c = compare_metric(baseline, candidate, rule.metric, n_draws, stream=i)
        sign = -1.0 if c.higher_is_better else 1.0
        if c.verdict == "unavailable":
            rows.append(GateRow(rule, c.unit, c.a, c.b, math.nan, (math.nan, math.nan),
                                "unavailable"))
            continue
        with np.errstate(invalid="ignore", divide="ignore"):
            reg_draws = sign * (c.draws_b - c.draws_a) / c.draws_a
        lo, hi = ci_from_draws(reg_draws)
        reg = sign * c.rel
        if lo > rule.max_regression:
            verdict = "regression"
        elif hi > rule.max_regression:
            verdict = "inconclusive"
        else:
            verdict = "ok"
        rows.append(GateRow(rule, c.unit, c.a, c.b, reg, (lo, hi), verdict))
    return GateResult(rows)


def gate_markdown(result: GateResult, baseline_label: str, candidate_label: str) -> str:
    """Markdown summary for CI logs (and GitHub step summaries)."""
    from ridgeline.metrics.render import fmt

    head = ("❌ **FAIL**: a regression beyond its threshold is established"
            if result.failed else "✅ **PASS**: no regression beyond a threshold is established")
    out = [f"## ridgeline gate: {head}", "",
           f"baseline `{baseline_label}`, candidate `{candidate_label}`", "",
           "| metric | baseline | candidate | regression [95% CI] | max | verdict |",
           "|---|---|---|---|---|---|"]
    for r in result.rows:
        ci = (f"{_pct(r.regression)} [{_pct(r.regression_ci[0])}, "
              f"{_pct(r.regression_ci[1])}]")
        out.append(f"| {r.rule.metric} ({r.unit}) | {fmt(r.baseline)} | {fmt(r.candidate)} | "
                   f"{ci} | {r.rule.max_regression:.1%} | {r.verdict} |")
    out.append("")
    out.append("A rule fails only when the whole 95% bootstrap CI of the regression lies above "
               "its threshold; 'inconclusive' means the CI straddles it (more samples needed).")
    return "\n".join(out) + "\n"


def _pct(x: float) -> str:
    return f"{x:+.1%}" if math.isfinite(x) else "—"
