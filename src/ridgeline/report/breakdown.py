"""Per-operator time breakdown: one 100 % stacked bar per phase (prefill, decode).

Prefill and decode steps differ by orders of magnitude in time, so each bar shows shares of
its own step and its label carries the step's absolute time.
"""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from ridgeline.report.style import new_figure, op_color


def plot_op_breakdown(ops: dict[str, list[dict[str, Any]]], title: str | None = None
                      ) -> Figure:
    """Stacked bars of `estimate_view(...)["ops"]`. One BarContainer per operator (its
    label is the operator's name), one bar per phase; each bar sums to 100 %."""
    phases = [p for p in ("prefill", "decode") if ops.get(p)]
    # Same order (hence colors) as roofline_data's op_order.
    names = list(dict.fromkeys(r["op"] for p in ("prefill", "decode") for r in ops.get(p, [])))
    totals = {p: sum(r["time_s"] for r in ops[p]) for p in phases}
    fig, axes = new_figure(9.5, 3.2 + 0.15 * len(names))
    ax = axes[0, 0]
    labels = [f"{p}\n{totals[p] * 1e3:.3g} ms / step" for p in phases]
    bottom = [0.0] * len(phases)
    for i, name in enumerate(names):
        shares = []
        for p in phases:
            t = sum(r["time_s"] for r in ops[p] if r["op"] == name)
            shares.append(100.0 * t / totals[p] if totals[p] > 0 else 0.0)
        bars = ax.barh(labels, shares, left=bottom, color=op_color(i), label=name,
                       edgecolor="white", linewidth=0.5)
        for bar, share in zip(bars, shares, strict=True):
            if share >= 6:
                ax.text(bar.get_x() + bar.get_width() / 2, bar.get_y() + bar.get_height() / 2,
                        f"{share:.0f}%", ha="center", va="center", fontsize=8, color="white")
        bottom = [b + s for b, s in zip(bottom, shares, strict=True)]
    ax.set_xlim(0, 100)
    ax.invert_yaxis()
    ax.set_xlabel("share of the step time (%)")
    ax.set_ylabel("phase")
    ax.set_title(title or "Where the step time goes, per operator", loc="left", fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig
