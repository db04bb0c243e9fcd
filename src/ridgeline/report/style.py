"""Shared figure setup for every ridgeline plot: headless backend, sizes, colors, saving.

matplotlib is imported with the Agg backend (no display needed); every plot function returns
a `matplotlib.figure.Figure` so tests inspect its artists and callers choose the format.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ridgeline.errors import RidgelineError

FORMATS = ("png", "svg")
DPI = 110
SERIES_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
                 "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
PHASE_MARKERS = {"prefill": "o", "decode": "^"}


def new_figure(width_in: float, height_in: float, nrows: int = 1, ncols: int = 1,
               **kwargs: Any) -> tuple[Figure, Any]:
    """A figure detached from pyplot's global state (no leak across many plots)."""
    fig = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kwargs)
    return fig, axes


def op_color(i: int) -> str:
    """One of 20 distinct colors (matplotlib's tab20) for operators."""
    i %= 20
    # Dark shades first, then the light ones (tab20 pairs them).
    return matplotlib.colors.to_hex(matplotlib.colormaps["tab20"]((2 * i) % 20 + i // 10))


def color(i: int) -> str:
    return SERIES_COLORS[i % len(SERIES_COLORS)]


def figure_format(path: str | Path) -> str:
    """'png' or 'svg' from the file name; RidgelineError otherwise."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise RidgelineError(f"--out: got {str(path)!r}; allowed: a .png or .svg file name")
    return suffix


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write the figure as PNG or SVG (chosen by the file name's suffix)."""
    fmt = figure_format(path)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, format=fmt, dpi=DPI)
    return p


def png_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def png_data_uri(fig: Figure) -> str:
    """The figure as a base64 PNG data URI (the report inlines images: it opens offline)."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(fig)).decode("ascii")


def close(fig: Figure) -> None:
    plt.close(fig)


def human(x: float) -> str:
    """1.23e12 -> '1.23T' (axis annotations)."""
    ax = abs(x)
    for div, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if ax >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"
