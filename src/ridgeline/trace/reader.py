"""Read a ridgeline trace (JSONL, optionally .gz) into a columnar `Trace`.

Crash tolerance: a trace whose writer was killed has no footer and may end in a partial
line. Both are accepted and reported in `Trace.warnings`; every complete request is read.
A malformed line anywhere else is an error naming the line number and the field.

The fast path parses with `json.loads` per line and builds numpy columns per batch; the
pydantic models are only used to explain an error (and by `validate_trace`).

>>> import os, tempfile
>>> p = os.path.join(tempfile.mkdtemp(), "t.jsonl")
>>> _ = open(p, "w").write('{"type":"header","source":"doc"}\\n'
...                        '{"type":"request","id":"r0","sent_s":0,"event_times_s":[0.1]}\\n'
...                        '{"type":"request","id":"r1","se')
>>> t = read_trace(p)
>>> len(t), t.warnings[0].startswith("line 3: truncated last line")
(1, True)
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from ridgeline.errors import RidgelineError
from ridgeline.trace.schema import RequestRecord, TraceFooter, TraceHeader
from ridgeline.trace.table import RecordError, Trace, _Columns, build_columns

BATCH_LINES = 16_384


def open_text(path: str | Path) -> IO[bytes]:
    """Open a trace for reading as bytes; `.gz` files are decompressed on the fly."""
    p = Path(path)
    if not p.exists():
        raise RidgelineError(f"trace: file not found: {p}")
    if p.is_dir():
        raise RidgelineError(f"trace: {p} is a directory; give a trace file (JSONL)")
    if p.suffix == ".gz":
        return gzip.open(p, "rb")
    return open(p, "rb")


def _pydantic_message(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err.get("loc", ())) or "(record)"
    return loc, err.get("msg", "invalid")


def _explain_record(obj: Any, line_no: int, path: str) -> RidgelineError:
    """Build the error for a record the fast path rejected, naming line and field."""
    if not isinstance(obj, dict):
        return RidgelineError(f"{path}: line {line_no}: expected a JSON object")
    try:
        RequestRecord.model_validate(obj)
    except ValidationError as exc:
        loc, msg = _pydantic_message(exc)
        return RidgelineError(f"{path}: line {line_no}: field '{loc}': {msg}")
    return RidgelineError(f"{path}: line {line_no}: invalid request record")


def _batches(fh: IO[bytes]) -> Iterator[tuple[list[int], list[bytes], bool]]:
    """Non-blank lines in batches: (line numbers, lines, is_last_batch)."""
    nos: list[int] = []
    lines: list[bytes] = []
    pending: tuple[list[int], list[bytes]] | None = None
    for no, raw in enumerate(fh, start=1):
        line = raw.strip()
        if not line:
            continue
        nos.append(no)
        lines.append(line)
        if len(lines) >= BATCH_LINES:
            if pending is not None:
                yield pending[0], pending[1], False
            pending = (nos, lines)
            nos, lines = [], []
    if pending is not None:
        yield pending[0], pending[1], not lines
    if lines:
        yield nos, lines, True


def _parse_batch(
    nos: list[int], lines: list[bytes], is_last: bool, spath: str, warnings: list[str]
) -> tuple[list[int], list[Any]]:
    """Parse a batch as one JSON array (much faster than a call per line); on failure,
    line by line to name the bad line. A bad final line of the file is a truncation."""
    try:
        return nos, json.loads(b"[" + b",".join(lines) + b"]")
    except ValueError:
        pass
    objs: list[Any] = []
    for i, line in enumerate(lines):
        try:
            objs.append(json.loads(line))
        except ValueError as exc:
            if is_last and i == len(lines) - 1:
                warnings.append(
                    f"line {nos[i]}: truncated last line skipped ({len(line)} bytes; the "
                    "writer was probably killed mid-write)"
                )
                return nos[:i], objs
            raise RidgelineError(f"{spath}: line {nos[i]}: not valid JSON ({exc})") from None
    return nos, objs


def read_trace(path: str | Path) -> Trace:
    """Read a ridgeline trace file. Raises RidgelineError on a malformed file.

    Returns the columnar `Trace`; `warnings` lists what was skipped or missing (a truncated
    last line, a missing footer).
    """
    spath = str(path)
    warnings: list[str] = []
    parts: list[_Columns] = []
    header: TraceHeader | None = None
    footer: TraceFooter | None = None
    footer_line = 0

    with open_text(path) as fh:
        for nos, lines, is_last in _batches(fh):
            line_nos, objs = _parse_batch(nos, lines, is_last, spath, warnings)
            req_objs: list[Any] = []
            req_nos: list[int] = []
            for no, obj in zip(line_nos, objs, strict=True):
                kind = obj.get("type", "request") if isinstance(obj, dict) else None
                if kind == "request" and header is not None:
                    if footer is not None:
                        warnings.append(f"line {no}: request after the footer (line "
                                        f"{footer_line}); read anyway")
                    req_objs.append(obj)
                    req_nos.append(no)
                    continue
                if header is None:
                    if kind != "header":
                        raise RidgelineError(
                            f"{spath}: line {no}: field 'type': the first line must be the "
                            f"trace header (type \"header\"){_format_hint(spath)}"
                        )
                    header = _validated(TraceHeader, obj, no, spath, "header")
                elif kind == "footer":
                    footer = _validated(TraceFooter, obj, no, spath, "footer")
                    footer_line = no
                elif kind == "header":
                    raise RidgelineError(
                        f"{spath}: line {no}: field 'type': a second header (traces cannot "
                        "be concatenated; analyze them separately)"
                    )
                elif not isinstance(obj, dict):
                    raise _explain_record(obj, no, spath)
                else:
                    raise RidgelineError(
                        f"{spath}: line {no}: field 'type': got {kind!r}; allowed: header, "
                        "request, footer"
                    )
            if req_objs:
                try:
                    parts.append(build_columns(req_objs))
                except RecordError as exc:
                    raise RidgelineError(
                        f"{spath}: line {req_nos[exc.index]}: field '{exc.field_name}': "
                        f"{exc.message}"
                    ) from None
    if header is None:
        raise RidgelineError(f"{spath}: empty file (no trace header)")
    if footer is None:
        warnings.append(
            "no footer: the run did not end cleanly (crashed or killed); every complete "
            "request line was read"
        )
    elif footer.interrupted:
        warnings.append("footer says the run was interrupted before it finished")
    trace = Trace.from_columns(header, parts, footer, warnings, path=spath)
    if footer is not None and footer.requests_written != len(trace) and not footer.interrupted:
        warnings.append(
            f"footer says {footer.requests_written} requests were written, read {len(trace)}"
        )
    return trace


def _validated(model: Any, obj: Any, no: int, spath: str, what: str) -> Any:
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        loc, msg = _pydantic_message(exc)
        raise RidgelineError(f"{spath}: line {no}: {what} field '{loc}': {msg}") from None


def _format_hint(path: str) -> str:
    """Suggest the importer when a file looks like another tool's output."""
    try:
        from ridgeline.trace.importers import detect_format

        fmt = detect_format(path)
    except Exception:
        return ""
    if fmt and fmt != "ridgeline":
        return f" (this looks like a {fmt} file: use `--format {fmt}` or import_trace)"
    return ""
