"""Engine timeline of a simulation (batch size, prefill tokens, KV blocks in use, queue
length per step) and server telemetry series of a run beside its latencies.

The timeline is `simulate --timeline FILE.csv` (columns `ridgeline.sim.event_loop.
TIMELINE_COLUMNS`) or a `SimResult.timeline` dict of arrays.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ridgeline.errors import RidgelineError
from ridgeline.inputs import decode_errors, non_regular_kind, open_text
from ridgeline.metrics.telemetry import telemetry_series
from ridgeline.report.style import color, new_figure
from ridgeline.sim.event_loop import TIMELINE_COLUMNS

TIMELINE_PANELS = (("batch_size", "batch size (seqs)"), ("prefill_tokens", "prefill tokens"),
                   ("kv_blocks_used", "KV blocks in use"), ("num_waiting", "queue length"))
MAX_POINTS = 3000  # per replica and panel; longer runs are averaged in time bins
MAX_PLOTTED_REPLICAS = 32


MAX_TIMELINE_ROWS = 5_000_000   # engine steps; 320 MB of columns
MAX_TIMELINE_VALUE = 1e12       # seconds, tokens, blocks: far beyond any real run


def read_timeline_csv(path: str | Path) -> dict[str, np.ndarray]:
    """A timeline CSV as columns; RidgelineError naming the file, row and column of what is
    missing or out of range (every value finite, >= 0; start_s <= end_s)."""
    from array import array

    p = Path(path)
    cols = {c: array("d") for c in TIMELINE_COLUMNS}
    with open_text(p, "timeline", newline="") as fh, decode_errors("timeline", p):
        reader = csv.reader(fh)
        head = next(reader, None)
        if not head or any(c not in head for c in TIMELINE_COLUMNS):
            raise RidgelineError(f"timeline: {p} lacks the columns "
                                 f"{', '.join(TIMELINE_COLUMNS)} (write one with `ridgeline "
                                 "simulate --timeline FILE.csv`)")
        where = [(c, head.index(c)) for c in TIMELINE_COLUMNS]
        for row_no, row in enumerate(reader, 2):
            if not row:
                continue
            if row_no > MAX_TIMELINE_ROWS + 1:
                raise RidgelineError(f"timeline: {p} has more than {MAX_TIMELINE_ROWS:,} rows;"
                                     " allowed: at most that many")
            if len(row) != len(head):
                raise RidgelineError(f"timeline: {p} row {row_no}: {len(row)} values for "
                                     f"{len(head)} columns")
            for c, i in where:
                try:
                    v = float(row[i])
                except ValueError:
                    v = math.nan
                if not 0 <= v <= MAX_TIMELINE_VALUE:
                    raise RidgelineError(f"timeline: {p} row {row_no}: {c}: got {row[i][:40]!r};"
                                         f" allowed: a finite number from 0 to "
                                         f"{MAX_TIMELINE_VALUE:g}")
                cols[c].append(v)
            if cols["end_s"][-1] < cols["start_s"][-1]:
                raise RidgelineError(f"timeline: {p} row {row_no}: end_s is before start_s")
    return {c: np.frombuffer(a, dtype=np.float64) if len(a) else np.zeros(0)
            for c, a in cols.items()}


def is_timeline_csv(path: str | Path) -> bool:
    p = Path(path)
    if p.suffix.lower() != ".csv":
        return False

    if non_regular_kind(p):
        return False
    try:
        with open(p, encoding="utf-8") as fh:
            first = fh.readline(1 << 16)
    except (OSError, UnicodeDecodeError):
        return False
    return "kv_blocks_used" in first and "batch_size" in first


def _thin(t: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Means over equal time bins when there are more than MAX_POINTS steps."""
    if t.size <= MAX_POINTS:
        return t, v
    edges = np.linspace(t[0], t[-1], MAX_POINTS + 1)
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, MAX_POINTS - 1)
    counts = np.bincount(idx, minlength=MAX_POINTS)
    sums = np.bincount(idx, weights=v, minlength=MAX_POINTS)
    keep = counts > 0
    mids = (edges[:-1] + edges[1:]) / 2
    return mids[keep], sums[keep] / counts[keep]


IDLE_ZERO = ("batch_size", "prefill_tokens")  # an idle engine runs nothing


def _steps(start: np.ndarray, end: np.ndarray, v: np.ndarray, col: str
           ) -> tuple[np.ndarray, np.ndarray]:
    """Step-function points: each step's value from its start; idle gaps between steps
    show 0 for batch and prefill tokens and keep the last value for KV and queue."""
    if start.size == 0:
        return start, v
    gap = start[1:] > end[:-1] + 1e-12
    idle_v = np.zeros(int(gap.sum())) if col in IDLE_ZERO else v[:-1][gap]
    t = np.concatenate([start, end[:-1][gap], end[-1:]])
    vv = np.concatenate([v, idle_v, v[-1:]])
    order = np.argsort(t, kind="stable")
    return t[order], vv[order]


def plot_engine_timeline(timeline: dict[str, Any], title: str | None = None) -> Figure:
    """Four panels sharing the time axis, one step line per replica (gid
    '<column>:<replica>')."""
    t_end = np.asarray(timeline["end_s"], dtype=np.float64)
    t_start = np.asarray(timeline.get("start_s", t_end), dtype=np.float64)
    rep = np.asarray(timeline.get("replica", np.zeros(t_end.size)), dtype=np.int64)
    fig, axes = new_figure(11, 7.5, len(TIMELINE_PANELS), 1, sharex=True)
    all_replicas = sorted(set(rep.tolist())) or [0]
    replicas = all_replicas[:MAX_PLOTTED_REPLICAS]  # past a few dozen lines nothing reads
    thinned = False
    for ax, (col, label) in zip(axes[:, 0], TIMELINE_PANELS, strict=True):
        v_all = np.asarray(timeline[col], dtype=np.float64)
        for j, r in enumerate(replicas):
            sel = rep == r
            t, v = _steps(t_start[sel], t_end[sel], v_all[sel], col)
            n = t.size
            t, v = _thin(t, v)
            thinned |= t.size < n
            ax.plot(t, v, lw=0.9, color=color(j), gid=f"{col}:{r}", drawstyle="steps-post",
                    label=f"replica {r}" if len(replicas) > 1 else None)
        ax.set_ylabel(label, fontsize=9)
        ax.grid(True, alpha=0.3)
        if len(replicas) > 1 and col == TIMELINE_PANELS[0][0]:
            ax.legend(fontsize=7, frameon=False, ncol=min(len(replicas), 6))
    axes[-1, 0].set_xlabel("simulated time (s)")
    note = " (time-bin means)" if thinned else ""
    if len(all_replicas) > len(replicas):
        note += f" (first {len(replicas)} of {len(all_replicas):,} replicas)"
    fig.suptitle((title or "Engine timeline (per engine step)") + note, x=0.01,
                 ha="left", fontsize=11)
    return fig


def group_series(rows: Iterable[tuple[float, str, float]]) -> dict[str, tuple[np.ndarray,
                                                                                np.ndarray]]:
    """Long-format (t_s, name, value) rows -> name -> (t_s array, value array), time-sorted."""
    acc: dict[str, tuple[list[float], list[float]]] = {}
    for t, name, v in rows:
        ts, vs = acc.setdefault(str(name), ([], []))
        ts.append(float(t))
        vs.append(float(v))
    out = {}
    for name, (ts, vs) in acc.items():
        t, v = np.asarray(ts), np.asarray(vs)
        order = np.argsort(t, kind="stable")
        out[name] = (t[order], v[order])
    return out


def plot_run_series(telemetry: Iterable[tuple[float, str, float]],
                    latency: dict[str, tuple[Any, Any]] | None = None,
                    title: str | None = None) -> Figure:
    """Server telemetry (KV usage, running/waiting, GPU utilization...) on the run's time
    axis, below the per-request latencies (`latency`: name -> (request send time s,
    value ms)). One panel per telemetry name (gid 'telemetry:<name>')."""
    series = group_series(telemetry)
    lat = latency or {}
    n = len(series) + (1 if lat else 0)
    if n == 0:
        raise RidgelineError("telemetry: no series to plot")
    fig, axes = new_figure(11, 1.9 * n + 0.8, n, 1, sharex=True)
    row = 0
    if lat:
        ax = axes[0, 0]
        for i, (name, (t, v)) in enumerate(lat.items()):
            ax.plot(t, v, ls="none", marker=".", ms=2.5, color=color(i), label=name,
                    gid=f"latency:{name}")
        ax.set_ylabel("ms", fontsize=9)
        ax.legend(fontsize=7, frameon=False, markerscale=3)
        ax.grid(True, alpha=0.3)
        row = 1
    for i, (name, (t, v)) in enumerate(series.items()):
        ax = axes[row + i, 0]
        ax.plot(t, v, lw=1.0, color=color(i + 2), gid=f"telemetry:{name}")
        ax.set_ylabel(name, fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel("run time (s)")
    fig.suptitle(title or "Server telemetry beside request latencies", x=0.01, ha="left",
                 fontsize=11)
    return fig


def telemetry_rows(trace: Any) -> list[tuple[float, str, float]]:
    """The server/GPU telemetry `bench` sampled beside a trace (its sidecar file), as
    (t_s, name, value) rows on the trace's clock; [] when there is none."""
    path = getattr(trace, "path", None)
    header = getattr(trace, "header", None)
    if not path or header is None:
        return []
    return telemetry_series(path, header)
