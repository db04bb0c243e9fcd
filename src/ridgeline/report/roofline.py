"""Roofline plot: compute roofs per dtype, the bandwidth slope, the ridge point, and the
operators of an estimate (prefill circles, decode triangles), with measured points
(`ridgeline calibrate` output or any JSON of measured kernels) overlaid when given.

>>> from ridgeline.report.estimate_view import estimate_view
>>> fig = plot_roofline(estimate_view("llama-3.1-8b", "h100-sxm")["roofline"])
>>> fig.axes[0].get_xscale(), fig.axes[0].get_yscale()
('log', 'log')
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ridgeline.errors import RidgelineError
from ridgeline.inputs import load_json
from ridgeline.report.style import PHASE_MARKERS, human, new_figure, op_color

# Keys accepted for a measured point (calibration files are read loosely: see docs/report.md).
_INTENSITY_KEYS = ("intensity_flop_per_byte", "intensity", "arithmetic_intensity")
_RATE_KEYS = ("achieved_flops_per_s", "measured_flops_per_s", "flops_per_s", "flop_s",
              "achieved_flops_s")
_ROOF_STYLES = ("-.", "-", "--", (0, (1, 1)))
_TIME_KEYS = ("measured_s", "time_s", "seconds", "median_s", "mean_s")


def _first(d: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for k in keys:
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


def _point(d: dict[str, Any]) -> dict[str, Any] | None:
    inten, rate = _first(d, _INTENSITY_KEYS), _first(d, _RATE_KEYS)
    if rate is None and isinstance(d.get("tflops"), (int, float)):
        rate = float(d["tflops"]) * 1e12
    flops, nbytes, t = _first(d, ("flops",)), _first(d, ("bytes",)), _first(d, _TIME_KEYS)
    if inten is None and flops and nbytes:
        inten = flops / nbytes
    if rate is None and flops and t:
        rate = flops / t
    if inten is None or rate is None or inten <= 0 or rate <= 0:
        return None
    label = str(d.get("name") or d.get("kind") or d.get("op") or "measured")
    return {"intensity_flop_per_byte": inten, "achieved_flops_per_s": rate, "label": label}


def measured_points(data: Any) -> list[dict[str, Any]]:
    """Every measured kernel found anywhere in a JSON document: an object with an intensity
    (or flops and bytes) and a rate (or flops and a time)."""
    out: list[dict[str, Any]] = []
    if isinstance(data, dict):
        p = _point(data)
        if p is not None:
            out.append(p)
            return out
        for v in data.values():
            out.extend(measured_points(v))
    elif isinstance(data, list):
        for v in data:
            out.extend(measured_points(v))
    return out


def load_measured_points(path: str | Path) -> list[dict[str, Any]]:
    """Measured points of a calibration/measurement JSON file; RidgelineError when none."""
    p = Path(path)
    data = load_json(p, "--calibration", max_bytes=64 << 20)
    try:
        points = measured_points(data)
    except RecursionError:
        raise RidgelineError(f"--calibration: {p}: JSON nested too deeply; allowed: "
                             "ordinary JSON") from None
    if not points:
        raise RidgelineError(f"--calibration: {p} holds no measured point; allowed: objects "
                             "with flops, bytes and measured_s (or intensity_flop_per_byte "
                             "and achieved_flops_per_s)")
    return points


def plot_roofline(data: dict[str, Any], measured: list[dict[str, Any]] | None = None,
                  title: str | None = None) -> Figure:
    """The roofline of `data` (`estimate_view(...)["roofline"]`).

    Artists tests rely on: one Line2D per operator point with gid 'op:<phase>:<name>', one
    per roof with gid 'roof:<dtype>', the slope 'bandwidth', the ridge marker 'ridge', and
    measured points 'measured'.
    """
    fig, axes = new_figure(9.5, 5.6)
    ax = axes[0, 0]
    bw = data["bandwidth_bytes_per_s"]
    roofs = data["roofs"]
    pts = data["points"]
    xs = [p["intensity_flop_per_byte"] for p in pts]
    xs += [p["intensity_flop_per_byte"] for p in measured or []]
    xs += [r["ridge_point_flop_per_byte"] for r in roofs]
    x_lo = 10 ** math.floor(math.log10(max(min(xs), 1e-3) / 2))
    x_hi = 10 ** math.ceil(math.log10(max(xs) * 3))
    x = np.logspace(math.log10(x_lo), math.log10(x_hi), 400)
    top = max(r["peak_flops_per_s"] for r in roofs)
    ax.plot(x, np.minimum(x * bw, top), color="0.45", lw=1.2, ls=":", gid="bandwidth",
            label=f"HBM {human(bw)}B/s")
    for i, r in enumerate(roofs):
        peak = r["peak_flops_per_s"]
        xr = x[x * bw >= peak * 0.999]
        ax.plot(np.concatenate([[peak / bw], xr]), np.full(xr.size + 1, peak),
                color="0.2", lw=1.5, ls=_ROOF_STYLES[i % len(_ROOF_STYLES)],
                gid=f"roof:{r['dtype']}",
                label=f"{r['dtype']} roof {human(peak)}FLOP/s")
    ridge = data["ridge_point_flop_per_byte"]
    ridge_y = ridge * bw
    ax.plot([ridge], [ridge_y], marker="D", ms=7, color="black", ls="none", gid="ridge")
    ax.axvline(ridge, color="0.6", lw=0.8, ls="--")
    ax.annotate(f"ridge point {ridge:.0f} FLOP/byte\n({data.get('compute_dtype', 'bf16')})",
                (ridge, ridge_y), xytext=(12, -34), textcoords="offset points", fontsize=8.5,
                arrowprops={"arrowstyle": "-", "color": "0.4"})
    order = list(data.get("op_order") or [])
    names = list(dict.fromkeys(p["op"] for p in pts))
    order += [n for n in names if n not in order]
    for p in pts:
        ci = order.index(p["op"])
        ax.plot([p["intensity_flop_per_byte"]], [p["attainable_flops_per_s"]], ls="none",
                marker=PHASE_MARKERS.get(p["phase"], "s"), ms=8, alpha=0.85,
                markerfacecolor=op_color(ci) if p["phase"] == "prefill" else "none",
                markeredgecolor=op_color(ci), markeredgewidth=1.6,
                gid=f"op:{p['phase']}:{p['op']}")
    if measured:
        ax.plot([m["intensity_flop_per_byte"] for m in measured],
                [m["achieved_flops_per_s"] for m in measured], ls="none", marker="x", ms=7,
                color="black", gid="measured", label=f"measured ({len(measured)})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ys = [p["attainable_flops_per_s"] for p in pts] + [x_lo * bw]
    ys += [m["achieved_flops_per_s"] for m in measured or []]
    ax.set_ylim(max(min(ys) / 3, 1e9), top * 3)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable FLOP/s")
    ax.set_title(title or f"Roofline: {data['hardware']}", loc="left", fontsize=11)
    ax.grid(True, which="major", alpha=0.3)
    handles, _labels = ax.get_legend_handles_labels()
    handles += [Line2D([], [], ls="none", marker="o", color="0.3", label="prefill op"),
                Line2D([], [], ls="none", marker="^", markerfacecolor="none",
                       markeredgecolor="0.3", label="decode op")]
    handles += [Line2D([], [], ls="none", marker="s", color=op_color(order.index(n)), label=n)
                for n in names]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False)
    return fig
