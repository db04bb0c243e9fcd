"""Compare two analyses: per metric both values, the difference and its bootstrap CI.

The two runs are independent samples, so the bootstrap draws of each are independent and
the draws of the difference are their differences. A difference whose 95% CI excludes 0
is "significant"; otherwise "within noise".

>>> import numpy as np
>>> from ridgeline.trace.table import Trace
>>> def run(ttft):
...     return Trace.from_records({"source": "doc"}, [
...         {"id": str(i), "sent_s": float(i), "event_times_s": [i + ttft], "end_s": i + ttft}
...         for i in range(300)])
>>> from ridgeline.metrics.analysis import analyze
>>> c = compare(analyze(run(0.1), window="all"), analyze(run(0.2), window="all"))
>>> row = c.row("ttft_p50")
>>> round(row.diff, 6), row.verdict
(100.0, 'significant')
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.jsonsafe import finite_or_none, json_safe
from ridgeline.metrics.analysis import AnalysisResult
from ridgeline.metrics.distribution import pct_key, statistic_draws
from ridgeline.metrics.render import fmt
from ridgeline.theory.stats import (
    DEFAULT_BOOTSTRAP_DRAWS,
    ci_from_draws,
    poisson_bootstrap_sum_draws,
)

# metric prefix → (sample key, unit, higher is better)
LATENCY_METRICS: dict[str, tuple[str, str, bool]] = {
    "ttft": ("ttft_ms", "ms", False),
    "tpot": ("tpot_ms", "ms", False),
    "itl": ("itl_ms", "ms", False),
    "itl_per_token": ("itl_per_token_ms", "ms", False),
    "e2e": ("e2e_ms", "ms", False),
    "queue": ("queue_ms", "ms", False),
    "decode_rate": ("decode_rate_tok_s", "tok/s", True),
}
STATS = ("mean", "p50", "p90", "p95", "p99", "p99.9")
THROUGHPUT_METRICS = {"output_tok_s": "tok/s", "requests_s": "req/s"}
DEFAULT_ROWS: tuple[str, ...] = (
    *(f"{m}_{s}" for m in ("ttft", "tpot", "itl", "e2e") for s in ("mean", "p50", "p90", "p99")),
    "output_tok_s",
    "requests_s",
)


@dataclass
class CompareRow:
    metric: str
    unit: str
    higher_is_better: bool
    a: float
    b: float
    diff: float  # b - a
    diff_ci: tuple[float, float]
    rel: float  # (b - a) / a
    rel_ci: tuple[float, float]
    verdict: str  # "significant" | "within noise" | "unavailable"
    draws_a: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    draws_b: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric, "unit": self.unit, "higher_is_better": self.higher_is_better,
            "a": finite_or_none(self.a), "b": finite_or_none(self.b),
            "diff": finite_or_none(self.diff), "diff_ci95": json_safe(self.diff_ci),
            "relative_change": finite_or_none(self.rel),
            "relative_change_ci95": json_safe(self.rel_ci),
            "verdict": self.verdict,
        }


@dataclass
class Comparison:
    a_label: str
    b_label: str
    rows: list[CompareRow]

    def row(self, metric: str) -> CompareRow:
        for r in self.rows:
            if r.metric == metric:
                return r
        raise KeyError(metric)

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a_label, "b": self.b_label, "rows": [r.to_dict() for r in self.rows],
                "confidence": "95% bootstrap CI of B - A (independent resamples of each run; "
                              "within a run, circular blocks of whole requests in send "
                              "order)"}


def parse_metric(name: str) -> tuple[str, str, str, bool]:
    """'tpot_p95' → (sample key, stat, unit, higher_is_better). Raises RidgelineError."""
    key = name.strip().lower()
    if key in THROUGHPUT_METRICS:
        return key, "throughput", THROUGHPUT_METRICS[key], True
    for prefix in sorted(LATENCY_METRICS, key=len, reverse=True):
        for stat in STATS:
            for form in (f"{prefix}_{stat}", f"{LATENCY_METRICS[prefix][0]}_{stat}"):
                if key == form:
                    sample, unit, hib = LATENCY_METRICS[prefix]
                    return sample, stat, unit, hib
    allowed = ", ".join(f"{p}_<{'|'.join(STATS)}>" for p in LATENCY_METRICS)
    raise RidgelineError(
        f"metric: got {name!r}; allowed: {allowed}, {', '.join(THROUGHPUT_METRICS)}"
    )


def metric_draws(
    result: AnalysisResult, name: str, n_draws: int = DEFAULT_BOOTSTRAP_DRAWS, stream: int = 0
) -> tuple[float, np.ndarray]:
    """Point value and bootstrap draws of a named metric of one analysis."""
    sample, stat, _, _ = parse_metric(name)
    seed = result.seed
    if stat == "throughput":
        w = result.window
        d = w.duration_s if w is not None else math.nan
        key = "_window_output_tokens" if name == "output_tok_s" else "_window_completed_ok"
        x = result.samples.get(key)
        if x is None or not (d > 0):
            return math.nan, np.full(n_draws, np.nan)
        rng = np.random.default_rng([seed, 2000 + stream])
        # Poisson bootstrap: how many requests fell in the window is random too.
        return float(x.sum() / d), poisson_bootstrap_sum_draws(x, n_draws, rng) / d
    values = result.samples.get(sample)
    if values is None:
        return math.nan, np.full(n_draws, np.nan)
    return statistic_draws(values, stat, seed=seed, stream=3000 + stream, n_draws=n_draws,
                           requests=result.request_samples.get(sample))


def compare_metric(
    a: AnalysisResult, b: AnalysisResult, name: str, n_draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    stream: int = 0,
) -> CompareRow:
    """One row: both values, B − A with its CI, the relative change with its CI."""
    _, _stat, unit, hib = parse_metric(name)
    va, da = metric_draws(a, name, n_draws, stream=2 * stream)
    vb, db = metric_draws(b, name, n_draws, stream=2 * stream + 1)
    diff = vb - va
    rel = diff / va if va else math.nan
    if not (math.isfinite(va) and math.isfinite(vb)):
        return CompareRow(name, unit, hib, va, vb, math.nan, (math.nan, math.nan), math.nan,
                          (math.nan, math.nan), "unavailable", da, db)
    diff_ci = ci_from_draws(db - da)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel_ci = ci_from_draws((db - da) / da)
    verdict = "significant" if (diff_ci[0] > 0 or diff_ci[1] < 0) else "within noise"
    return CompareRow(name, unit, hib, va, vb, diff, diff_ci, rel, rel_ci, verdict, da, db)


def compare(
    a: AnalysisResult,
    b: AnalysisResult,
    metrics: tuple[str, ...] | list[str] = DEFAULT_ROWS,
    n_draws: int = DEFAULT_BOOTSTRAP_DRAWS,
) -> Comparison:
    """Compare run B against run A on each metric."""
    rows = [compare_metric(a, b, m, n_draws, stream=i) for i, m in enumerate(metrics)]
    return Comparison(
        a_label=str(a.source.get("path") or a.source.get("source")),
        b_label=str(b.source.get("path") or b.source.get("source")),
        rows=rows,
    )


def comparison_markdown(c: Comparison) -> str:
    out = [f"## ridgeline compare: A = {c.a_label}, B = {c.b_label}", "",
           "| metric | A | B | B − A [95% CI] | change [95% CI] | verdict |",
           "|---|---|---|---|---|---|"]
    for r in c.rows:
        out.append(
            f"| {r.metric} ({r.unit}) | {fmt(r.a)} | {fmt(r.b)} | {fmt(r.diff)} "
            f"[{fmt(r.diff_ci[0])}, {fmt(r.diff_ci[1])}] | {_pct(r.rel)} "
            f"[{_pct(r.rel_ci[0])}, {_pct(r.rel_ci[1])}] | {r.verdict} |"
        )
    return "\n".join(out) + "\n"


def _pct(x: float) -> str:
    return f"{x:+.1%}" if math.isfinite(x) else "—"


def print_comparison(c: Comparison, console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    con = console if console is not None else Console()
    t = Table(title=f"ridgeline compare — A: {c.a_label}  B: {c.b_label}", title_justify="left")
    for h in ("metric", "A", "B", "B − A [95% CI]", "change [95% CI]", "verdict"):
        t.add_column(h, justify="left" if h in ("metric", "verdict") else "right")
    for r in c.rows:
        style = "bold" if r.verdict == "significant" else "dim"
        t.add_row(
            f"{r.metric} ({r.unit})", fmt(r.a), fmt(r.b),
            f"{fmt(r.diff)} [{fmt(r.diff_ci[0])}, {fmt(r.diff_ci[1])}]",
            f"{_pct(r.rel)} [{_pct(r.rel_ci[0])}, {_pct(r.rel_ci[1])}]",
            f"[{style}]{r.verdict}[/{style}]",
        )
    con.print(t)


__all__ = [
    "CompareRow",
    "Comparison",
    "compare",
    "compare_metric",
    "comparison_markdown",
    "metric_draws",
    "parse_metric",
    "pct_key",
    "print_comparison",
]
