"""Validate a trace file thoroughly: schema of every line, then consistency of the times.

The reader accepts anything it can compute metrics from; the validator also checks what
makes metrics wrong (times going backwards, events before the send, token counts that
disagree). Every problem names the line and the field.

>>> import os, tempfile
>>> p = os.path.join(tempfile.mkdtemp(), "t.jsonl")
>>> _ = open(p, "w").write('{"type":"header","source":"doc"}\\n'
...     '{"type":"request","id":"a","sent_s":1.0,"event_times_s":[0.5],"end_s":0.6}\\n')
>>> report = validate_trace(p)
>>> report.errors[0]
"line 2: field 'event_times_s': first event 0.5 is before sent_s 1.0"
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ridgeline.trace.reader import open_trace_bytes
from ridgeline.trace.schema import RequestRecord, TraceFooter, TraceHeader

MAX_ERRORS = 50
TIME_TOLERANCE_S = 1e-9


@dataclass
class ValidationReport:
    path: str
    requests: int = 0
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def add_error(self, text: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(text)
        elif len(self.errors) == MAX_ERRORS:
            self.errors.append("... more errors not shown")


def _check_request(rec: RequestRecord, no: int, report: ValidationReport) -> None:
    times = rec.event_times_s
    for name in ("sent_s", "scheduled_s", "end_s"):
        v = getattr(rec, name)
        if v is not None and not math.isfinite(v):
            report.add_error(f"line {no}: field '{name}': not finite")
    if any(not math.isfinite(t) for t in times):
        report.add_error(f"line {no}: field 'event_times_s': not finite")
        return
    if any(b < a - TIME_TOLERANCE_S for a, b in itertools.pairwise(times)):
        report.add_error(f"line {no}: field 'event_times_s': times go backwards")
    if times and times[0] < rec.sent_s - TIME_TOLERANCE_S:
        report.add_error(f"line {no}: field 'event_times_s': first event {times[0]} is "
                         f"before sent_s {rec.sent_s}")
    if rec.end_s is not None:
        if rec.end_s < rec.sent_s - TIME_TOLERANCE_S:
            report.add_error(f"line {no}: field 'end_s': {rec.end_s} is before sent_s "
                             f"{rec.sent_s}")
        if times and rec.end_s < times[-1] - TIME_TOLERANCE_S:
            report.add_error(f"line {no}: field 'end_s': {rec.end_s} is before the last "
                             f"event {times[-1]}")
    elif rec.status == "ok":
        report.warnings.append(f"line {no}: field 'end_s': missing on a successful request")
    if rec.event_tokens is not None:
        if len(rec.event_tokens) != len(times):
            report.add_error(f"line {no}: field 'event_tokens': {len(rec.event_tokens)} "
                             f"counts for {len(times)} events")
        elif any(k < 0 for k in rec.event_tokens):
            report.add_error(f"line {no}: field 'event_tokens': negative count")
    n_events_tokens = sum(rec.event_tokens) if rec.event_tokens is not None else len(times)
    if (rec.output_tokens is not None and times and rec.event_tokens is not None
            and n_events_tokens != rec.output_tokens):
        report.warnings.append(
            f"line {no}: field 'output_tokens': {rec.output_tokens} but events carry "
            f"{n_events_tokens} tokens"
        )
    if rec.status != "ok" and not rec.error_kind:
        report.warnings.append(f"line {no}: field 'error_kind': missing on a "
                               f"'{rec.status}' request")
    if rec.scheduled_s is not None and rec.sent_s < rec.scheduled_s - TIME_TOLERANCE_S:
        report.warnings.append(f"line {no}: field 'sent_s': sent before its scheduled time")


def validate_trace(path: str | Path) -> ValidationReport:
    """Check every line of a trace; never raises for content problems (they are reported)."""
    report = ValidationReport(path=str(path))
    header_seen = False
    footer_seen = False
    ids: set[str] = set()
    bad_json: tuple[int, str] | None = None
    with open_trace_bytes(path) as fh:
        for no, raw in enumerate(fh, start=1):
            if bad_json is not None:
                report.add_error(f"line {bad_json[0]}: not valid JSON ({bad_json[1]})")
                bad_json = None
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except ValueError as exc:
                bad_json = (no, str(exc))
                continue
            except RecursionError:
                bad_json = (no, "nested too deeply")
                continue
            if not isinstance(obj, dict):
                report.add_error(f"line {no}: expected a JSON object")
                continue
            kind = obj.get("type", "request")
            try:
                if not header_seen:
                    if kind != "header":
                        report.add_error(f"line {no}: field 'type': the first line must be "
                                         "the header")
                        return report
                    TraceHeader.model_validate(obj)
                    header_seen = True
                    continue
                if kind == "header":
                    report.add_error(f"line {no}: field 'type': second header")
                elif kind == "footer":
                    TraceFooter.model_validate(obj)
                    footer_seen = True
                elif kind == "request":
                    rec = RequestRecord.model_validate(obj)
                    report.requests += 1
                    if rec.id in ids:
                        report.add_error(f"line {no}: field 'id': duplicate id {rec.id!r}")
                    ids.add(rec.id)
                    _check_request(rec, no, report)
                else:
                    report.add_error(f"line {no}: field 'type': got {kind!r}; allowed: "
                                     "header, request, footer")
            except ValidationError as exc:
                for err in exc.errors()[:3]:
                    loc = ".".join(str(x) for x in err.get("loc", ())) or "(record)"
                    report.add_error(f"line {no}: field '{loc}': {err.get('msg')}")
    if bad_json is not None:
        report.warnings.append(f"line {bad_json[0]}: truncated last line (skipped by readers)")
    if not header_seen:
        report.add_error("empty file: no header")
    elif not footer_seen:
        report.warnings.append("no footer: the writer did not finish (crash or kill)")
    return report
