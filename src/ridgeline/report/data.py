"""What a report holds (`ReportData`, one `Run` each): the collector (`report/build.py`)
fills it and the writers (`report/html.py`) lay it out, each importing only this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ridgeline.report.load_data import LoadPoint


@dataclass
class Run:
    """One analyzed run: where it came from, its header (dict) and its AnalysisResult."""

    label: str
    header: dict[str, Any]
    analysis: Any
    telemetry: list[tuple[float, str, float]] = field(default_factory=list)
    latency_series: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    trace: Any = None  # the loaded Trace, for `ridgeline.advise`


@dataclass
class ReportData:
    title: str
    runs: list[Run] = field(default_factory=list)
    sweeps: dict[str, list[LoadPoint]] = field(default_factory=dict)
    # closed-loop sweeps: one point per concurrency (LoadPoint.concurrency)
    concurrency_sweeps: dict[str, list[LoadPoint]] = field(default_factory=dict)
    estimate: dict[str, Any] | None = None
    measured: list[dict[str, Any]] | None = None
    timelines: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    comparisons: list[Any] = field(default_factory=list)
    advice_markdown: str | None = None
    inputs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
