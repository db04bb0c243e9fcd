"""Latency against load from a rate sweep: TTFT and TPOT P50/P99 with their 95 % CI bands,
throughput and goodput against the offered rate, the knee marked. Several series (simulated,
measured) share the axes.

Every number comes from `ridgeline.metrics.analysis.analyze` (the one metrics
implementation), read into `LoadPoint`s by `ridgeline.report.load_data`.
"""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from ridgeline.report.load_data import LoadPoint, knee_rate
from ridgeline.report.style import color, new_figure


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
