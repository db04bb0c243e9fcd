"""Crash-safe incremental trace writer.

Each record is one complete line, written and flushed as soon as the request finishes,
so a run killed at any moment leaves every finished request readable. `fsync` is
optional (off by default: a flush survives a process crash, fsync only matters for a
machine crash).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from ridgeline import __version__
from ridgeline.trace.schema import RequestRecord, TraceFooter, TraceHeader


class TraceWriter:
    """Write a trace line by line.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "t.jsonl")
    >>> with TraceWriter(path, TraceHeader(source="doc")) as w:
    ...     w.write_request({"id": "r0", "sent_s": 0.0, "event_times_s": [0.1], "end_s": 0.1})
    >>> sum(1 for _ in open(path))
    3
    """

    def __init__(
        self, path: str | Path, header: TraceHeader, *, fsync: bool = False
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not header.tool_version:
            header.tool_version = __version__
        self._file: IO[str] = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
        self._fsync = fsync
        self.requests_written = 0
        self._last_end_s: float | None = None
        self._write_line(header.model_dump(exclude_none=True))

    def _write_line(self, obj: dict[str, Any]) -> None:
        self._file.write(json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n")
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def write_request(self, record: RequestRecord | dict[str, Any]) -> None:
        """Append one finished (or failed) request and flush it to the OS."""
        if isinstance(record, RequestRecord):
            obj = record.model_dump(exclude_none=True)
        else:
            obj = {"type": "request", **record}
        self._note_end(obj)
        self._write_line(obj)
        self.requests_written += 1

    def write_requests(self, records: list[dict[str, Any]]) -> None:
        """Append many request dicts with one flush (for simulators writing in bulk)."""
        dumps = json.dumps
        for r in records:
            self._note_end(r)
        lines = [
            dumps({"type": "request", **r}, separators=(",", ":"), allow_nan=False)
            for r in records
        ]
        if lines:
            self._file.write("\n".join(lines) + "\n")
            self._file.flush()
        self.requests_written += len(lines)

    def _note_end(self, obj: dict[str, Any]) -> None:
        end = obj.get("end_s")
        if end is not None and (self._last_end_s is None or end > self._last_end_s):
            self._last_end_s = float(end)

    def close(self, end_time_s: float | None = None, *, interrupted: bool = False,
              notes: list[str] | None = None) -> None:
        """Write the footer (if the end time is known) and close the file."""
        if self._file.closed:
            return
        if end_time_s is not None:
            footer = TraceFooter(
                end_time_s=end_time_s,
                requests_written=self.requests_written,
                interrupted=interrupted,
                notes=notes or [],
            )
            self._write_line(footer.model_dump())
        self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # On an exception the file is closed without a footer: readers treat that as
        # "interrupted" and still read every finished request.
        if exc_type is None:
            self.close(self._last_end_s if self._last_end_s is not None else 0.0)
        else:
            self._file.close()
