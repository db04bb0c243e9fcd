"""Empirical CDFs of TTFT, TPOT, ITL and E2E for one or several runs (one line per run).

The samples are those `analyze` computed its percentiles from (`AnalysisResult.samples`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ridgeline.report.style import color, new_figure

CDF_METRICS = (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("itl_ms", "ITL (ms)"),
               ("e2e_ms", "E2E (ms)"))
MAX_POINTS = 4000  # per line; a CDF drawn from more points looks the same


def ecdf(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """(sorted finite values, fraction <= each), thinned to at most MAX_POINTS points."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    x = x[np.isfinite(x)]
    y = np.arange(1, x.size + 1) / max(x.size, 1)
    if x.size > MAX_POINTS:
        idx = np.unique(np.linspace(0, x.size - 1, MAX_POINTS).astype(np.int64))
        x, y = x[idx], y[idx]
    return x, y


def plot_cdfs(runs: list[tuple[str, Any]], title: str | None = None) -> Figure:
    """`runs`: (label, AnalysisResult). Panels in CDF_METRICS order; each line has gid
    'cdf:<metric>:<label>'. A metric a run lacks is left out of that panel."""
    fig, axes = new_figure(11, 7.2, 2, 2)
    for ax, (key, label) in zip(axes.ravel(), CDF_METRICS, strict=True):
        spans = []
        for i, (name, a) in enumerate(runs):
            vals = a.samples.get(key)
            if vals is None:
                continue
            x, y = ecdf(vals)
            if x.size == 0:
                continue
            ax.step(x, y, where="post", color=color(i), lw=1.4, label=name,
                    gid=f"cdf:{key}:{name}")
            spans.append((x[0], x[-1]))
        if spans and min(s[0] for s in spans) > 0 and \
                max(s[1] for s in spans) / min(s[0] for s in spans) > 100:
            ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of samples ≤ x")
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
        ax.set_title(label.split(" ")[0], loc="left", fontsize=10)
        if spans:
            ax.legend(fontsize=7, frameon=False, loc="lower right")
        else:
            ax.text(0.5, 0.5, "not available", transform=ax.transAxes, ha="center")
    fig.suptitle(title or "Latency distributions (empirical CDF)", x=0.01, ha="left",
                 fontsize=11)
    return fig
