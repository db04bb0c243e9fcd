"""The schema of a probe trace, as `calibrate fit` reads it (docs/calibration.md).

A probe trace is a ridgeline trace first: `read_probe_trace` reads it with the trace
reader (types, event order, finite numbers, unique ids, the .gz and line caps), then checks
what the fit itself reads with these models: the header's `calibration_probe` (kind, batch
and label of the probe point), its `load` and engine facts, and each successful request's
times (on the probe's own clock, from 0: a negative time is no measurement), token counts
and llama.cpp `engine_timings`. Every failure is one RidgelineError line naming the file,
the line and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ridgeline.errors import RidgelineError
from ridgeline.inputs import loads_json, validate_document
from ridgeline.trace.reader import open_trace_bytes, read_trace

MAX_BATCH = 65_536            # as `--max-num-seqs` allows
MAX_TIME_S = 1e10             # the trace reader's bound
MAX_TOKENS = 10**9
_Seconds = Annotated[float, Field(ge=0, le=MAX_TIME_S, allow_inf_nan=False)]
_Count = Annotated[int, Field(ge=0, le=MAX_TOKENS)]
_Text = Annotated[str, Field(max_length=2000)]
_Ms = Annotated[float, Field(ge=0, le=MAX_TIME_S * 1e3, allow_inf_nan=False)]


class ProbeMeta(BaseModel):
    """`calibration_probe` in the header: which probe point the trace measured."""

    model_config = ConfigDict(extra="forbid", strict=True)
    kind: Literal["decode", "context", "prefill", "open"]
    batch: int = Field(1, ge=1, le=MAX_BATCH)
    label: str = Field("", max_length=200)


class ProbeLoad(BaseModel):
    """The header's `load`: what the fit reads of it (a bench header has more: kept)."""

    model_config = ConfigDict(extra="allow", strict=True)
    pattern: _Text = "closed"
    concurrency: int | None = Field(None, ge=1, le=MAX_BATCH)
    rate_req_s: float | None = Field(None, gt=0, allow_inf_nan=False)


class ProbeHeader(BaseModel):
    """A probe trace's header: the fields the fit reads (the rest is the trace reader's)."""

    model_config = ConfigDict(extra="allow", strict=True)
    calibration_probe: ProbeMeta | None = None
    load: ProbeLoad | None = None
    engine: _Text | None = None
    engine_version: _Text | None = None
    model: _Text | None = None
    engine_config: dict[str, Any] | None = None


class EngineTimings(BaseModel):
    """llama.cpp's per-request `timings` (the fields the fit reads; the server's others kept)."""

    model_config = ConfigDict(extra="allow", strict=True)
    prompt_n: _Count | None = None
    prompt_ms: _Ms | None = None
    predicted_n: _Count | None = None
    predicted_ms: _Ms | None = None


class ProbeRecord(BaseModel):
    """A successful request of a probe: the fields the fit reads."""

    model_config = ConfigDict(extra="allow", strict=True)
    id: str | int
    sent_s: _Seconds
    end_s: _Seconds | None = None
    event_times_s: list[_Seconds] | None = None
    prompt_tokens: _Count | None = None
    output_tokens: _Count | None = None
    engine_timings: EngineTimings | None = None


def read_probe_trace(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, ok request records) of a probe trace, every rule above checked."""
    where = f"TRACES: {str(path)!r}"
    try:
        read_trace(path)  # the one trace reader: what any command refuses, fit refuses
    except RidgelineError as exc:
        raise RidgelineError(f"TRACES: {exc}") from None
    header: dict[str, Any] = {}
    recs: list[dict[str, Any]] = []
    try:
        # The trace reader's opener (a .gz is decompressed under its caps); the reader
        # above has checked the text.
        with open_trace_bytes(path) as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                obj = loads_json(line, f"{where} line {lineno}")
                if not isinstance(obj, dict):
                    raise RidgelineError(f"{where} line {lineno}: allowed: a JSON object "
                                         "(a ridgeline trace line)")
                if obj.get("type") == "header":
                    validate_document(ProbeHeader, obj, f"{where} line {lineno}: header")
                    header = obj
                elif obj.get("type", "request") == "request" and obj.get("status") == "ok":
                    validate_document(ProbeRecord, obj, f"{where} line {lineno}")
                    recs.append(obj)
    except OSError as exc:
        raise RidgelineError(f"{where}: cannot read ({exc.strerror})") from None
    if not header:
        raise RidgelineError(f"{where} has no header line (not a ridgeline trace)")
    return header, recs


__all__ = ["EngineTimings", "ProbeHeader", "ProbeLoad", "ProbeMeta", "ProbeRecord",
           "read_probe_trace"]
