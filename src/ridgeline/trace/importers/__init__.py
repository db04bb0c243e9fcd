"""Importers: other tools' result files become ridgeline traces.

Each importer maps one format's per-request data onto `RequestRecord` fields and states in
the header what the format lacks (``has_event_times``, ``has_event_tokens``,
``has_send_times`` and ``notes``); metrics that need a missing piece are then reported as
unavailable instead of guessed.

>>> FORMATS
('ridgeline', 'vllm', 'aiperf', 'guidellm', 'llmperf')
"""

from __future__ import annotations

from pathlib import Path

from ridgeline.errors import RidgelineError
from ridgeline.inputs import check_input_file, non_regular_kind

# Format detection lives in trace/formats.py (shared with the reader), re-exported here.
from ridgeline.trace.formats import FORMATS, detect_format
from ridgeline.trace.importers.aiperf import import_aiperf
from ridgeline.trace.importers.guidellm import import_guidellm
from ridgeline.trace.importers.llmperf import import_llmperf
from ridgeline.trace.importers.vllm import import_vllm
from ridgeline.trace.reader import read_trace
from ridgeline.trace.table import Trace

__all__ = [
    "FORMATS",
    "MAX_TRACE_TIME_S",
    "MAX_TRACE_TOKENS",
    "check_bounds",
    "detect_format",
    "load_trace",
]

# Sizes no real run reaches: past them the metrics overflow into inf and garbage.
MAX_TRACE_TIME_S = 1e10          # 317 years
MAX_TRACE_TOKENS = 10**9


def check_bounds(trace: Trace) -> Trace:
    """Refuse a trace whose times or token counts are past any real run, naming the first
    request and field (after either reader path or any importer)."""
    import numpy as np

    for name in ("scheduled_s", "sent_s", "end_s", "event_times_s"):
        col = np.asarray(getattr(trace, name), dtype=np.float64)
        with np.errstate(invalid="ignore"):
            bad = np.abs(col) > MAX_TRACE_TIME_S  # NaN (absent) passes: it compares False
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            if name == "event_times_s":
                i = int(np.searchsorted(trace.event_offsets, i, side="right")) - 1
            raise RidgelineError(f"{trace.path or 'trace'}: request {trace.ids[i]!r}: field "
                                 f"'{name}': allowed: seconds of at most "
                                 f"{MAX_TRACE_TIME_S:g} in size")
    for name in ("prompt_tokens", "output_tokens"):
        col = np.asarray(getattr(trace, name))
        bad = col > MAX_TRACE_TOKENS
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise RidgelineError(f"{trace.path or 'trace'}: request {trace.ids[i]!r}: field "
                                 f"'{name}': allowed: at most {MAX_TRACE_TOKENS:,} tokens")
    return trace


def load_trace(path: str | Path, fmt: str = "auto", select: int | None = None) -> Trace:
    """Read a ridgeline trace or import another tool's result file.

    `fmt`: "auto" (detect) or one of FORMATS. `select`: which run to take from a file that
    holds several (vLLM --append-result objects, GuideLLM benchmarks); default the first.
    """
    p = Path(path)
    if not p.exists():
        raise RidgelineError(f"trace: file not found: {p}")
    if p.is_dir():
        raise RidgelineError(f"trace: {p} is a directory; give a file")
    if non_regular_kind(p):
        check_input_file(p, "trace")  # a device or FIFO: refused with its kind
    if fmt == "auto":
        detected = detect_format(p)
        if detected is None:
            raise RidgelineError(
                f"--format: cannot tell the format of {p}; allowed: {', '.join(FORMATS)}"
            )
        fmt = detected
    if fmt == "ridgeline":
        return check_bounds(read_trace(p))
    if fmt == "vllm":
        return check_bounds(import_vllm(p, select=select))
    if fmt == "aiperf":
        return check_bounds(import_aiperf(p))
    if fmt == "guidellm":
        return check_bounds(import_guidellm(p, select=select))
    if fmt == "llmperf":
        return check_bounds(import_llmperf(p))
    raise RidgelineError(f"--format: got {fmt!r}; allowed: auto, {', '.join(FORMATS)}")
