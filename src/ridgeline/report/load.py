"""Latency against load from a rate sweep: TTFT and TPOT P50/P99 with their 95 % CI bands,
throughput and goodput against the offered rate, the knee marked. Several series (simulated,
measured) share the axes.

Every number comes from `ridgeline.metrics.analysis.analyze` (the one metrics
implementation); `load_point` only reads an AnalysisResult.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure

from ridgeline.jsonsafe import json_safe
from ridgeline.report.style import color, new_figure

NAN = math.nan


@dataclass
class LoadPoint:
    """One rate's numbers; `*_ci` are (low, high) of the 95 % bootstrap CI."""

    rate_req_s: float
    ttft_p50_ms: float
    ttft_p50_ci: tuple[float, float]
    ttft_p99_ms: float
    ttft_p99_ci: tuple[float, float]
    tpot_p50_ms: float
    tpot_p50_ci: tuple[float, float]
    tpot_p99_ms: float
    tpot_p99_ci: tuple[float, float]
    throughput_req_s: float
    output_tok_s: float
    goodput_req_s: float = NAN
    # A closed-loop point (`bench --concurrency 1,8,32`): its concurrency; rate_req_s is then
    # NaN (nothing is offered: each user sends when its last answer ends).
    concurrency: float = NAN

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = json_safe(dict(self.__dict__))
        return out


def _pct(a: Any, key: str, p: str) -> tuple[float, tuple[float, float]]:
    d = a.latency.get(key)
    if d is None or d.unavailable or p not in d.percentiles:
        return NAN, (NAN, NAN)
    q = d.percentiles[p]
    return float(q.value), (float(q.ci_low), float(q.ci_high))


def load_point(rate_req_s: float, analysis: Any) -> LoadPoint:
    """The numbers of one analyzed run at an offered rate."""
    t50, t50c = _pct(analysis, "ttft_ms", "p50")
    t99, t99c = _pct(analysis, "ttft_ms", "p99")
    p50, p50c = _pct(analysis, "tpot_ms", "p50")
    p99, p99c = _pct(analysis, "tpot_ms", "p99")
    g = analysis.goodput
    return LoadPoint(rate_req_s, t50, t50c, t99, t99c, p50, p50c, p99, p99c,
                     float(analysis.throughput.requests_s),
                     float(analysis.throughput.output_tok_s),
                     float(g.requests_s) if g is not None and not g.unavailable else NAN)


def concurrency_point(concurrency: float, analysis: Any) -> LoadPoint:
    """The numbers of one analyzed closed-loop run at a concurrency."""
    p = load_point(NAN, analysis)
    p.concurrency = float(concurrency)
    return p


# One row per point, GuideLLM's benchmarks.csv in spirit: the load, then the numbers.
CSV_COLUMNS = ("series", "concurrency", "rate_req_s", "throughput_req_s", "output_tok_s",
               "goodput_req_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms")


def sweep_csv_rows(series: dict[str, list[LoadPoint]]) -> list[list[str]]:
    """Every point of every series, sorted numerically by concurrency, then rate."""
    def key(p: LoadPoint) -> tuple[float, float]:
        c, r = p.concurrency, p.rate_req_s
        return (c if math.isfinite(c) else math.inf, r if math.isfinite(r) else math.inf)

    rows = [list(CSV_COLUMNS)]
    for name, pts in series.items():
        for p in sorted(pts, key=key):
            vals = [getattr(p, c) for c in CSV_COLUMNS[1:]]
            rows.append([name] + ["" if not math.isfinite(v) else f"{v:.6g}" for v in vals])
    return rows


def plot_latency_vs_concurrency(series: dict[str, list[LoadPoint]],
                                title: str | None = None) -> Figure:
    """A closed-loop sweep: TTFT and TPOT P50/P99 against the concurrency (top row) and
    against the throughput it achieved (bottom row), points joined in concurrency order."""
    fig, axes = new_figure(12.5, 7.6, 2, 2)
    for i, (name, pts) in enumerate(series.items()):
        pts = sorted(pts, key=lambda p: p.concurrency)
        c = color(i)
        for row, (xkey, xlabel) in enumerate((("concurrency", "concurrency (requests in "
                                                              "flight)"),
                                              ("throughput_req_s", "achieved throughput "
                                                                   "(req/s)"))):
            x = [getattr(p, xkey) for p in pts]
            for col, key in enumerate(("ttft", "tpot")):
                ax = axes[row][col]
                for q, ls in (("p50", "-"), ("p99", "--")):
                    ax.plot(x, [getattr(p, f"{key}_{q}_ms") for p in pts], ls=ls, marker="o",
                            ms=3.5, color=c, label=f"{name} {q.upper()}",
                            gid=f"{key}:{q}:{xkey}:{name}")
                ax.set_xlabel(xlabel)
                ax.set_ylabel(f"{key.upper()} (ms)")
                ax.set_title(f"{key.upper()} vs {xlabel.split(' (')[0]}", loc="left",
                             fontsize=10)
                ax.grid(True, alpha=0.3)
                ax.legend(fontsize=7, frameon=False)
    fig.suptitle(title or "Latency vs concurrency (closed loop; P50 solid, P99 dashed)",
                 x=0.01, ha="left", fontsize=11)
    return fig


def knee_rate(points: list[LoadPoint]) -> float | None:
    """The knee by `ridgeline.metrics.knee.ttft_knee_index` (the rule `simulate` prints)."""
    from ridgeline.metrics.knee import ttft_knee_index as knee_index

    pts = sorted(points, key=lambda p: p.rate_req_s)
    k = knee_index([p.rate_req_s for p in pts], [p.ttft_p99_ms for p in pts])
    return pts[k].rate_req_s if k is not None else None


def plot_latency_vs_load(series: dict[str, list[LoadPoint]], title: str | None = None
                         ) -> Figure:
    """Three panels (TTFT, TPOT, throughput) of every series; knees as vertical lines with
    gid 'knee:<series>'; P50 lines solid, P99 dashed, CI bands shaded."""
    fig, axes = new_figure(12.5, 4.2, 1, 3)
    ax_ttft, ax_tpot, ax_thr = axes[0]
    max_rate = 0.0
    for i, (name, pts) in enumerate(series.items()):
        pts = sorted(pts, key=lambda p: p.rate_req_s)
        if not pts:
            continue
        c = color(i)
        r = [p.rate_req_s for p in pts]
        max_rate = max(max_rate, r[-1])
        for ax, key in ((ax_ttft, "ttft"), (ax_tpot, "tpot")):
            for q, ls in (("p50", "-"), ("p99", "--")):
                v = [getattr(p, f"{key}_{q}_ms") for p in pts]
                lo = [getattr(p, f"{key}_{q}_ci")[0] for p in pts]
                hi = [getattr(p, f"{key}_{q}_ci")[1] for p in pts]
                ax.plot(r, v, ls=ls, marker="o", ms=3.5, color=c, label=f"{name} {q.upper()}",
                        gid=f"{key}:{q}:{name}")
                ax.fill_between(r, lo, hi, color=c, alpha=0.15, lw=0)
        ax_thr.plot(r, [p.throughput_req_s for p in pts], "-o", ms=3.5, color=c,
                    label=f"{name} throughput", gid=f"throughput:{name}")
        good = [p.goodput_req_s for p in pts]
        if any(math.isfinite(g) for g in good):
            ax_thr.plot(r, good, ":s", ms=3.5, color=c, label=f"{name} goodput",
                        gid=f"goodput:{name}")
        knee = knee_rate(pts)
        if knee is not None:
            for ax in (ax_ttft, ax_tpot, ax_thr):
                ax.axvline(knee, color=c, lw=1.0, ls="-.", alpha=0.8, gid=f"knee:{name}")
            ax_thr.annotate(f"knee {knee:g} req/s", (knee, 0.03 + 0.1 * i),
                            xycoords=("data", "axes fraction"), xytext=(-4, 0), ha="right",
                            textcoords="offset points", fontsize=8, color=c)
    if max_rate > 0:
        ax_thr.plot([0, max_rate], [0, max_rate], color="0.6", lw=0.8, ls=":",
                    label="offered = achieved")
    for ax, ylabel, t in ((ax_ttft, "TTFT (ms)", "TTFT"), (ax_tpot, "TPOT (ms)", "TPOT"),
                          (ax_thr, "requests/s", "Throughput and goodput")):
        ax.set_xlabel("offered rate (req/s)")
        ax.set_ylabel(ylabel)
        ax.set_title(t, loc="left", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, frameon=False)
    if ax_ttft.get_lines():
        from matplotlib.ticker import LogFormatter

        ax_ttft.set_yscale("log")
        ax_ttft.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
        ax_ttft.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False,
                                                       minor_thresholds=(2, 0.5)))
    fig.suptitle(title or "Latency vs load (P50 solid, P99 dashed, bands: 95% CI)",
                 x=0.01, ha="left", fontsize=11)
    return fig
