"""Performance regression gate: fail only when a regression beyond its threshold is proven.

For each rule ``metric=threshold`` (e.g. ``tpot_p95=5%``, the metrics chapter's "TPOT P95
up more than 5% blocks the merge"), the regression is the relative change in the bad
direction: (candidate − baseline) / baseline for latencies, (baseline − candidate) /
baseline for throughputs and rates. The gate fails when the whole 95% bootstrap CI of
that regression lies above the threshold. A CI that straddles it is "inconclusive" and
does not fail the gate (collect more samples to decide).

Thresholds are written as a percentage (``5%``) or as a fraction below 1 (``0.05``). A
bare number of 1 or more (``tpot_p95=5``) is refused: it could mean 5% or 500%.

Three outcomes, one exit code each (``GateStatus``): ``pass`` (0), ``regression`` (1: some
rule's regression is established) and ``cannot evaluate`` (3: no rule failed, but some rule
could not be judged, e.g. a run has no successful request in its window, or the metric is
undefined for it). A gate that cannot see a run never passes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.jsonsafe import finite_or_none
from ridgeline.metrics.analysis import AnalysisResult
from ridgeline.metrics.compare import compare_metric, parse_metric
from ridgeline.metrics.render import fmt
from ridgeline.theory.stats import DEFAULT_BOOTSTRAP_DRAWS, ci_from_draws


@dataclass(frozen=True)
class GateRule:
    metric: str
    max_regression: float  # fraction, 0.05 = 5%

    @property
    def text(self) -> str:
        return f"{self.metric}={self.max_regression * 100:g}%"


class GateStatus(str, Enum):
    """The gate's outcome; `exit_code` is what the `gate` command exits with."""

    PASS = "pass"
    REGRESSION = "regression"
    CANNOT_EVALUATE = "cannot evaluate"

    @property
    def exit_code(self) -> int:
        return {"pass": 0, "regression": 1, "cannot evaluate": 3}[self.value]


def parse_rule(text: str) -> GateRule:
    """Parse ``metric=5%`` (or the fraction ``metric=0.05``; a bare number >= 1 is refused).

    >>> parse_rule("tpot_p95=5%").max_regression, parse_rule("tpot_p95=0.05").max_regression
    (0.05, 0.05)
    """
    if "=" not in text:
        raise RidgelineError(f"--max-regression: got {text!r}; allowed: METRIC=PERCENT, e.g. "
                             "tpot_p95=5%")
    name, _, value = text.partition("=")
    parse_metric(name)  # validates the metric name
    v = value.strip()
    pct = v.endswith("%")
    try:
        num = float(v[:-1].strip() if pct else v)
    except ValueError:
        raise RidgelineError(f"--max-regression: threshold {value!r} in {text!r} is not a "
                             "number; allowed: a percentage like 5% or a fraction like "
                             "0.05") from None
    if not (math.isfinite(num) and num >= 0):
        raise RidgelineError(f"--max-regression: threshold in {text!r} must be a finite "
                             "percentage >= 0, e.g. 5%")
    if not pct and num >= 1:
        # 5 could mean 5% or 500% (5 as a fraction): refuse rather than guess.
        raise RidgelineError(f"--max-regression: threshold {v!r} in {text!r} is ambiguous; "
                             f"write {num:g}% (percent) or a fraction below 1 like "
                             f"{num / 100:g}")
    frac = num / 100.0 if pct else num
    return GateRule(metric=name.strip().lower(), max_regression=frac)


@dataclass
class GateRow:
    rule: GateRule
    unit: str
    baseline: float
    candidate: float
    regression: float  # fraction in the bad direction
    regression_ci: tuple[float, float]
    verdict: str  # "regression" | "inconclusive" | "ok" | "cannot evaluate"
    reason: str = ""  # why a rule cannot be evaluated

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.rule.metric, "unit": self.unit,
            "max_regression": self.rule.max_regression,
            "baseline": finite_or_none(self.baseline), "candidate": finite_or_none(self.candidate),
            "regression": finite_or_none(self.regression),
            "regression_ci95": [finite_or_none(x) for x in self.regression_ci],
            "verdict": self.verdict, "reason": self.reason or None,
        }


@dataclass
class GateResult:
    """The gate's verdict: one row per rule and a `status` (pass, regression, cannot
    evaluate). A regression anywhere wins (the build fails for a proven reason); otherwise
    any rule that cannot be evaluated makes the whole gate "cannot evaluate"."""

    rows: list[GateRow]
    problems: list[str] = field(default_factory=list)  # run-level reasons (no samples...)

    @property
    def status(self) -> GateStatus:
        if any(r.verdict == "regression" for r in self.rows):
            return GateStatus.REGRESSION
        if self.problems or any(r.verdict == "cannot evaluate" for r in self.rows):
            return GateStatus.CANNOT_EVALUATE
        return GateStatus.PASS

    @property
    def failed(self) -> bool:
        return self.status is not GateStatus.PASS

    @property
    def exit_code(self) -> int:
        return self.status.exit_code

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "exit_code": self.exit_code,
                "failed": self.failed, "problems": self.problems,
                "rows": [r.to_dict() for r in self.rows]}


def _run_problems(result: AnalysisResult, label: str) -> list[str]:
    """Why a run cannot be judged at all: nothing successful measured in its window."""
    c = result.counts
    if c.get("requests", 0) == 0:
        return [f"{label} trace holds no requests"]
    if c.get("latency_population", 0) == 0:
        if c.get("successful", 0) == 0:
            return [f"{label} has no successful request"]
        return [f"{label}'s measurement window holds no successful request"]
    return []


def gate(
    baseline: AnalysisResult,
    candidate: AnalysisResult,
    rules: list[GateRule] | list[str],
    n_draws: int = DEFAULT_BOOTSTRAP_DRAWS,
) -> GateResult:
    """Evaluate every rule; see the module docstring for the decision."""
    parsed = [r if isinstance(r, GateRule) else parse_rule(r) for r in rules]
    problems = _run_problems(baseline, "baseline") + _run_problems(candidate, "candidate")
    rows = []
    for i, rule in enumerate(parsed):
        c = compare_metric(baseline, candidate, rule.metric, n_draws, stream=i)
        sign = -1.0 if c.higher_is_better else 1.0
        if problems or c.verdict == "unavailable" or not (c.a > 0):
            why = ("; ".join(problems) if problems else
                   f"{rule.metric} is undefined for "
                   + ("the baseline" if not math.isfinite(c.a) else
                      "the candidate" if not math.isfinite(c.b) else
                      "the baseline (zero: no relative change)"))
            rows.append(GateRow(rule, c.unit, c.a, c.b, math.nan, (math.nan, math.nan),
                                "cannot evaluate", why))
            continue
        with np.errstate(invalid="ignore", divide="ignore"):
            reg_draws = sign * (c.draws_b - c.draws_a) / c.draws_a
        lo, hi = ci_from_draws(reg_draws)
        reg = sign * c.rel
        if not (math.isfinite(lo) and math.isfinite(hi)):
            rows.append(GateRow(rule, c.unit, c.a, c.b, reg, (lo, hi), "cannot evaluate",
                                f"{rule.metric}: no finite bootstrap interval"))
            continue
        if lo > rule.max_regression:
            verdict = "regression"
        elif hi > rule.max_regression:
            verdict = "inconclusive"
        else:
            verdict = "ok"
        rows.append(GateRow(rule, c.unit, c.a, c.b, reg, (lo, hi), verdict))
    return GateResult(rows, problems)


def gate_markdown(result: GateResult, baseline_label: str, candidate_label: str) -> str:
    """Markdown summary for CI logs (and GitHub step summaries)."""
    head = {
        GateStatus.REGRESSION: "❌ **FAIL**: a regression beyond its threshold is established",
        GateStatus.CANNOT_EVALUATE: "⚠️ **CANNOT EVALUATE**: a rule could not be judged "
                                    "(the gate does not pass)",
        GateStatus.PASS: "✅ **PASS**: no regression beyond a threshold is established",
    }[result.status]
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
    for p in result.problems:
        out.append(f"- cannot evaluate: {p}")
    for r in result.rows:
        if r.reason and not result.problems:
            out.append(f"- {r.rule.metric}: cannot evaluate: {r.reason}")
    if result.status is GateStatus.CANNOT_EVALUATE:
        out.append("")
    out.append("A rule fails only when the whole 95% bootstrap CI of the regression lies above "
               "its threshold; 'inconclusive' means the CI straddles it (more samples needed). "
               "Exit codes: 0 pass, 1 regression, 3 cannot evaluate.")
    return "\n".join(out) + "\n"


def _pct(x: float) -> str:
    return f"{x:+.1%}" if math.isfinite(x) else "—"
