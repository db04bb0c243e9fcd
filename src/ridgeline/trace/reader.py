"""Read a ridgeline trace (JSONL, optionally .gz) into a columnar `Trace`.

Crash tolerance: a trace whose writer was killed has no footer and may end in a partial
line. Both are accepted and reported in `Trace.warnings`; every complete request is read.
A malformed line anywhere else is an error naming the line number and the field; a
request id given twice is an error naming both requests. The file is read through
`ridgeline.inputs.open_capped` (a `.gz` decompressed under a 1 GiB cap, every line under
64 MiB, a corrupt gzip one error line).

How it is fast (1,000,000 requests, 23 M events, 0.5 GB: see docs/BENCHMARKS.md):

* The file is read in large binary blocks, parsed in batches of lines, and every batch is
  copied straight into columns reserved for the whole file (no list of parts to join).
* First choice for a batch: the compiled scanner (`_scan.c`, `_feed_file`), straight into
  the sink's columns; it declines any batch it cannot read exactly as the exact path does,
  and that batch goes to the paths below, unchanged.
* Next, for a batch of request lines (after the header, before any footer): one
  msgspec decode of the whole batch into structs, the cyclic GC off meanwhile, the event
  lists gathered with `np.fromiter` (`_ms_columns`). Anything it cannot promise to read as
  the exact path would (a header or footer in the batch, a line that is not JSON, a missing
  id, an event field that is neither a list of numbers nor null, a token count outside the
  column) sends the batch on, unchanged, so errors, warnings and crash tolerance are the
  exact path's. (A build without the C extension reads with msgspec alone: about 3x the
  scanner's CPU time, docs/BENCHMARKS.md.)
* The exact path: the batch as one `json.loads` (line by line only to name a bad line) and
  `build_columns`, which produce every error message. It reads the header's and the
  footer's batches and whatever the faster paths decline.
* A large uncompressed file (PARALLEL_MIN_BYTES and up, 2+ CPUs; with the compiled
  scanner PARALLEL_MIN_BYTES_COMPILED, as it reads alone faster) is split in two at a line
  boundary: a worker process reads the second part while this process reads the first.
  An error in either part, a footer before the split, or a failure of the worker makes
  the whole file be read again in this process alone, so what comes out (values,
  warnings, errors) never depends on the split. ``RIDGELINE_READ_WORKER=0`` turns the
  worker off (one process, one core).

The pydantic models are only used to explain an error (and by `validate_trace`).

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

import gc
import json
import operator
import os
import pickle
import re
import subprocess
import sys
from collections.abc import Iterator
from itertools import chain
from pathlib import Path
from typing import IO, Any

import numpy as np
from pydantic import ValidationError

from ridgeline.errors import RidgelineError
from ridgeline.inputs import open_capped
from ridgeline.trace.formats import detect_format
from ridgeline.trace.schema import RequestRecord, TraceFooter, TraceHeader
from ridgeline.trace.table import (
    _EVENT_COLUMNS,
    EVENT_TOKENS_DTYPE,
    EVENT_TOKENS_MAX,
    RecordError,
    Trace,
    _Columns,
    _ColumnSink,
    build_columns,
    scalar_columns,
)

BATCH_LINES = 16_384
BLOCK_BYTES = 1 << 23  # read size; lines are cut out of these blocks
PARALLEL_MIN_BYTES = 64 << 20  # smaller files are read by this process alone
# With the compiled scanner (~650 MB/s) the worker's fixed costs (start-up, counting the
# lines before its part, handing 300 MB of columns back through a pipe: ~0.6 s) outweigh
# half the scan below a few GB: on the 517 MB 1M-request trace one process was faster
# (5.2-5.3 s vs 5.7 s for the whole analyze command) and took 0.5 CPU-s less.
PARALLEL_MIN_BYTES_COMPILED = 2 << 30
# Share of the file this process reads when a worker reads the rest: the worker first
# starts Python and counts the lines before its part.
PARALLEL_SHARE = 0.50
_EVENT_NAMES = frozenset(name for name, _ in _EVENT_COLUMNS)


def open_trace_bytes(path: str | Path) -> IO[bytes]:
    """Open a trace for reading as bytes; `.gz` files are decompressed on the fly."""
    p = Path(path)
    if not p.exists():
        raise RidgelineError(f"trace: file not found: {p}")
    if p.is_dir():
        raise RidgelineError(f"trace: {p} is a directory; give a trace file (JSONL)")
    # /dev/zero or a FIFO never ends; a gzip bomb or one endless line is refused at its cap
    return open_capped(p, "trace")


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


def _batches(
    fh: IO[bytes], *, no: int = 0, limit: int | None = None
) -> Iterator[tuple[list[int], list[bytes], bool]]:
    """Non-blank lines (stripped) in batches of BATCH_LINES: (line numbers, lines,
    is_last_batch). Reads large blocks and splits them, not a line at a time.

    `no`: lines before the file position (numbering starts after them). `limit`: read only
    this many bytes (the end of a line); the batches then end with is_last_batch False.
    """
    nos: list[int] = []
    lines: list[bytes] = []
    pending: tuple[list[int], list[bytes]] | None = None
    tail = b""
    left = limit
    while True:
        block = fh.read(BLOCK_BYTES if left is None else min(BLOCK_BYTES, left))
        if left is not None:
            left -= len(block)
        if block:
            buf = tail + block if tail else block
            cut = buf.rfind(b"\n")
            if cut < 0:
                tail = buf
                continue
            raw = buf[:cut].split(b"\n")
            tail = buf[cut + 1:]
        elif tail:
            raw, tail = [tail], b""  # last line, no newline after it
        else:
            break
        stripped = [r.strip() for r in raw]
        if b"" in stripped:
            kept = [(no + i, s) for i, s in enumerate(stripped, start=1) if s]
            nos.extend(k[0] for k in kept)
            lines.extend(k[1] for k in kept)
        else:
            nos.extend(range(no + 1, no + 1 + len(stripped)))
            lines.extend(stripped)
        no += len(raw)
        while len(lines) >= BATCH_LINES:
            if pending is not None:
                yield pending[0], pending[1], False
            pending = (nos[:BATCH_LINES], lines[:BATCH_LINES])
            del nos[:BATCH_LINES], lines[:BATCH_LINES]
    at_eof = limit is None
    if pending is not None:
        yield pending[0], pending[1], at_eof and not lines
    if lines:
        yield nos, lines, at_eof


class _NonFinite(ValueError):
    """NaN or Infinity in a trace line: not JSON, and not a time or a count."""


def _no_constant(name: str) -> Any:
    raise _NonFinite(name)


def _loads(text: bytes) -> Any:
    """json.loads, refusing NaN/Infinity (Python's reads them; ridgeline writes neither)."""
    return json.loads(text, parse_constant=_no_constant)


def _parse_batch(
    nos: list[int], lines: list[bytes], is_last: bool, spath: str, warnings: list[str]
) -> tuple[list[int], list[Any]]:
    """Parse a batch as one JSON array (much faster than a call per line); on failure,
    line by line to name the bad line. A bad final line of the file is a truncation."""
    try:
        objs = _loads(b"[" + b",".join(lines) + b"]")
        if len(objs) == len(lines):
            return nos, objs
    except (ValueError, RecursionError):
        pass
    objs = []
    for i, line in enumerate(lines):
        try:
            objs.append(_loads(line))
        except RecursionError:
            raise RidgelineError(f"{spath}: line {nos[i]}: JSON nested too deeply; allowed: a "
                                 "trace record (one flat JSON object)") from None
        except _NonFinite:
            raise RidgelineError(f"{spath}: line {nos[i]}: NaN or Infinity; allowed: finite "
                                 "numbers (JSON has no NaN; absent values are left out)"
                                 ) from None
        except ValueError as exc:
            if is_last and i == len(lines) - 1:
                warnings.append(
                    f"line {nos[i]}: truncated last line skipped ({len(line)} bytes; the "
                    "writer was probably killed mid-write)"
                )
                return nos[:i], objs
            raise RidgelineError(f"{spath}: line {nos[i]}: not valid JSON ({exc})") from None
    return nos, objs


class _Cannot(Exception):
    """A fast path cannot promise the exact path's result for this batch."""


def _tokens_fit(tokens: np.ndarray) -> bool:
    """Every count fits the int32 column (0..EVENT_TOKENS_MAX); else the exact path
    names the field."""
    return not tokens.size or (int(tokens.min()) >= 0 and int(tokens.max()) <= EVENT_TOKENS_MAX)


# ---- msgspec path: a batch of request lines in one decode ---------------------------------------

try:  # a required dependency; without it (a broken install) the exact path reads everything
    import msgspec as _msgspec
except ImportError:  # pragma: no cover
    _msgspec = None

_MISSING = object()
_SCALARS = ("type", "id", "scheduled_s", "sent_s", "end_s", "ttft_s", "tpot_s", "e2e_s",
            "prompt_tokens", "output_tokens", "token_count_source", "status", "error_kind",
            "error")

if _msgspec is not None:
    from typing import Any as _Any

    # Every scalar field typed Any: msgspec gives the values json.loads gives (int, float,
    # str, None, list, dict) and the checks stay scalar_columns' own. The event arrays are
    # typed: msgspec parses numbers correctly rounded, as float() does (a bool, a string, a
    # nested list or an integer past int64 is a ValidationError: the other paths decide).
    class _MsRecord(_msgspec.Struct, gc=False):
        type: _Any = "request"
        id: _Any = _MISSING
        scheduled_s: _Any = None
        sent_s: _Any = None
        end_s: _Any = None
        ttft_s: _Any = None
        tpot_s: _Any = None
        e2e_s: _Any = None
        prompt_tokens: _Any = None
        output_tokens: _Any = None
        token_count_source: _Any = "unknown"
        status: _Any = "ok"
        error_kind: _Any = None
        error: _Any = None
        event_times_s: list[float] | None = None
        event_tokens: list[int] | None = None

    _MS_DECODER = _msgspec.json.Decoder(list[_MsRecord])


class _AttrRecords:
    """The decoded structs seen through `scalar_columns`' dict interface, by column."""

    def __init__(self, objs: list[Any]) -> None:
        self.cols = {name: list(map(operator.attrgetter(name), objs)) for name in _SCALARS}


def _ms_columns(lines: list[bytes]) -> _Columns:
    """Columns of a batch of request lines decoded by msgspec; raises _Cannot whenever the
    fast or exact path might answer differently (then they read the batch)."""
    if _msgspec is None:
        raise _Cannot
    enabled = gc.isenabled()
    gc.disable()
    try:
        objs = _MS_DECODER.decode(b"[" + b",".join(lines) + b"]")
    except (_msgspec.DecodeError, _msgspec.ValidationError):
        raise _Cannot from None  # not JSON, not an object, a huge integer: the other paths
    finally:
        if enabled:
            gc.enable()
    if len(objs) != len(lines):
        raise _Cannot
    cols = _AttrRecords(objs).cols
    if set(cols["type"]) != {"request"} or _MISSING in cols["id"]:
        raise _Cannot  # a header or footer, or a record without id: the other paths
    tv = [t or () for t in map(operator.attrgetter("event_times_s"), objs)]
    kv = list(map(operator.attrgetter("event_tokens"), objs))
    n = len(objs)
    try:
        scalars = scalar_columns(_DictView(cols), dicts=True)
    except (RecordError, TypeError, KeyError):
        raise _Cannot from None
    counts = np.fromiter(map(len, tv), dtype=np.int64, count=n)
    total = int(counts.sum())
    times = np.fromiter(chain.from_iterable(tv), dtype=np.float64, count=total)
    if kv.count(None) == n:
        tokens = np.ones(total, dtype=EVENT_TOKENS_DTYPE)
    else:
        k_counts = np.fromiter((-1 if k is None else len(k) for k in kv), dtype=np.int64,
                               count=n)
        has_k = k_counts >= 0
        if not np.array_equal(counts[has_k], k_counts[has_k]):
            raise _Cannot  # event_tokens of another length: the exact path's error
        try:
            tokens_in = np.fromiter(chain.from_iterable(k for k in kv if k is not None),
                                    dtype=np.int64, count=int(k_counts[has_k].sum()))
        except OverflowError:
            raise _Cannot from None
        if not _tokens_fit(tokens_in):
            raise _Cannot
        if total == tokens_in.size:
            tokens = tokens_in.astype(EVENT_TOKENS_DTYPE)
        else:
            tokens = np.ones(total, dtype=EVENT_TOKENS_DTYPE)
            tokens[np.repeat(has_k, counts)] = tokens_in
    return _Columns(**scalars, event_counts=counts, event_times_s=times, event_tokens=tokens)


class _DictView(list):
    """A list of n rows whose columns are already lists: `scalar_columns(dicts=True)` reads
    it through `_column_of` without building a dict per record."""

    def __init__(self, cols: dict[str, list[Any]]) -> None:
        super().__init__(range(len(cols["id"])))
        self.cols = cols


# ---- compiled path: whole batches straight into the sink ----------------------------------------

try:  # optional, like the simulator's core: without a compiler the paths above read all
    from ridgeline.trace import _scan as _cscan
except ImportError:  # pragma: no cover - a build without the extension
    _cscan = None

_ST_DONE, _ST_NEED, _ST_CANNOT, _ST_FULL = 0, 1, 2, 3
# Blank lines (bytes.strip()'s whitespace), skipped in one step: a file of a billion empty
# lines is read at memory speed, not a line at a time.
_BLANK_RUN = re.compile(rb"[ \t\n\r\x0b\x0c]+")


class _Source:
    """Blocks of a file, at most `limit` bytes in all (None: to the end)."""

    def __init__(self, fh: IO[bytes], limit: int | None) -> None:
        self.fh, self.left = fh, limit

    def read(self) -> bytes:
        if self.left is None:
            return self.fh.read(BLOCK_BYTES)
        block = self.fh.read(min(BLOCK_BYTES, self.left))
        self.left -= len(block)
        return block


def _feed_file(rd: _Reader, fh: IO[bytes], *, no: int = 0, limit: int | None = None) -> None:
    """Every batch of the file (from its position; `no` lines before it, at most `limit`
    bytes) into `rd`, as ``for batch in _batches(...): rd.feed(*batch)`` does.

    The same batches of BATCH_LINES non-blank lines, each read by the compiled scanner
    (`_scan.c`) straight into the sink when the reader is past the header and before any
    footer and the scanner answers for every line of the batch; otherwise (the header's
    batch, the footer's, any line it does not answer for) what it wrote is dropped and
    the batch goes to `rd.feed` with the line numbers and `is_last` `_batches` gives it,
    so values, warnings and errors are the Python paths' own."""
    if (_cscan is None or not rd.fast
            or os.environ.get("RIDGELINE_READ_COMPILED", "1") == "0"):
        for batch in _batches(fh, no=no, limit=limit):
            rd.feed(*batch)
        return
    src = _Source(fh, limit)
    buf = b""
    eof = False
    sink = rd.sink
    loads = json.loads
    while True:
        if not buf and not eof:
            block = src.read()
            buf, eof = block, not block
        if not buf and eof:
            return
        done = False
        if rd.header is not None and rd.footer is None:
            n0, ne0 = sink.n, sink.n_events
            left, raw_lines, p = BATCH_LINES, 0, 0
            while True:
                st, p, nb, raw, sink.n, sink.n_events = _cscan.scan(
                    buf, p, eof, left, sink.columns(), sink.n, sink.n_events, sink.ids,
                    sink.error_kind, sink.error, loads)
                left -= nb
                raw_lines += raw
                if st == _ST_NEED and not eof:
                    if left == BATCH_LINES and p:
                        # Only blank lines in this batch so far: drop them (counted), or
                        # a run of blank lines is copied again with every block read.
                        rd.seen += p
                        no += raw_lines
                        raw_lines = 0
                        buf, p = buf[p:], 0
                    block = src.read()
                    if block:
                        buf += block  # the batch's start stays at 0
                    else:
                        eof = True
                elif st == _ST_FULL:
                    sink.grow()
                else:
                    break
            if st == _ST_CANNOT:
                sink.truncate(n0, ne0)
            else:
                done = True
                rd.seen += p
                rd.reserve_estimate()
                no += raw_lines
                buf = buf[p:]
        if done:
            continue
        # The Python paths: this batch's lines as `_batches` cuts them.
        nos: list[int] = []
        lines: list[bytes] = []
        p = 0
        while len(lines) < BATCH_LINES:
            blank = _BLANK_RUN.match(buf, p)  # a run of blank lines at once, counted
            if blank is not None:
                no += buf.count(b"\n", p, blank.end())
                p = blank.end()
            q = buf.find(b"\n", p)
            if q < 0:
                if not eof:
                    block = src.read()
                    if block:
                        buf, p = buf[p:] + block, 0  # the lines before p are copied out
                    else:
                        eof = True
                    continue
                if p >= len(buf):
                    break
                q = len(buf)  # the last line, no newline after it
            no += 1
            line = buf[p:q].strip()
            if line:
                nos.append(no)
                lines.append(line)
            p = q + 1
        buf = buf[p:]
        while not eof and not buf.strip():  # is_last: no non-blank line after the batch
            no += buf.count(b"\n")  # blank: dropped, its lines counted
            buf = src.read()
            eof = not buf
        if lines:
            rd.feed(nos, lines, limit is None and eof and not buf.strip())


# ---- reading ----------------------------------------------------------------------------------


class _Reader:
    """Reads batches in file order into a column sink: the header / request / footer logic
    and the errors, shared by both paths and by the worker process."""

    def __init__(self, spath: str, fast: bool, size: int, header: TraceHeader | None = None):
        self.spath = spath
        self.fast = fast
        self.size = size  # bytes this reader will see (0: unknown), to reserve columns
        self.seen = 0
        self.warnings: list[str] = []
        self.sink = _ColumnSink()
        self.header = header
        self.footer: TraceFooter | None = None
        self.footer_line = 0
        self.reserved = False

    def feed(self, nos: list[int], lines: list[bytes], is_last: bool) -> None:
        spath = self.spath
        if self.fast and self.header is not None and self.footer is None:
            try:
                ms = _ms_columns(lines)
            except _Cannot:
                ms = None
            if ms is not None:
                self.seen += sum(map(len, lines)) + len(lines)
                self._append(ms)
                return
        line_nos, objs = _parse_batch(nos, lines, is_last, spath, self.warnings)
        req_objs: list[Any] = []
        req_nos: list[int] = []
        for no, obj in zip(line_nos, objs, strict=True):
            kind = obj.get("type", "request") if isinstance(obj, dict) else None
            if kind == "request" and self.header is not None:
                if self.footer is not None:
                    self.warnings.append(f"line {no}: request after the footer (line "
                                         f"{self.footer_line}); read anyway")
                req_objs.append(obj)
                req_nos.append(no)
                continue
            if self.header is None:
                if kind != "header":
                    raise RidgelineError(
                        f"{spath}: line {no}: field 'type': the first line must be the "
                        f"trace header (type \"header\"){_format_hint(spath)}"
                    )
                self.header = _validated(TraceHeader, obj, no, spath, "header")
            elif kind == "footer":
                self.footer = _validated(TraceFooter, obj, no, spath, "footer")
                self.footer_line = no
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
        self.seen += sum(map(len, lines)) + len(lines)
        if not req_objs:
            return
        try:
            cols = build_columns(req_objs)
        except RecordError as exc:
            raise RidgelineError(
                f"{spath}: line {req_nos[exc.index]}: field '{exc.field_name}': "
                f"{exc.message}"
            ) from None
        self._append(cols)

    def _append(self, cols: _Columns) -> None:
        if self.sink.n == 0 and self.size:  # room for all, estimated from this batch
            scale = 1.1 * self.size / self.seen
            self.sink.reserve(int(len(cols.ids) * scale) + 1024,
                              int(cols.event_times_s.size * scale) + 1024)
            self.reserved = True
        self.sink.append(cols)

    def reserve_estimate(self) -> None:
        """Room for the whole part, estimated from what was read, once (`_feed_file`: the
        compiled scanner writes straight into the sink)."""
        if self.reserved or not self.size or not self.seen or not self.sink.n:
            return
        scale = 1.1 * self.size / self.seen
        self.sink.reserve(int(self.sink.n * scale) + 1024,
                          int(self.sink.n_events * scale) + 1024)
        self.reserved = True


def read_trace(path: str | Path) -> Trace:
    """Read a ridgeline trace file. Raises RidgelineError on a malformed file.

    Returns the columnar `Trace`; `warnings` lists what was skipped or missing (a truncated
    last line, a missing footer).
    """
    return _read_trace(path)


def _read_trace(path: str | Path, *, fast: bool = True, parallel: bool = True) -> Trace:
    """`read_trace`. `fast=False`: every batch by the exact path (for the tests).
    `parallel=False`: no worker process."""
    spath = str(path)
    with open_trace_bytes(path) as fh:  # the not-found / directory errors first
        gz = fh.compressed
        size = 0 if gz else os.fstat(fh.fileno()).st_size
        rd: _Reader | None = None
        min_bytes = PARALLEL_MIN_BYTES if _cscan is None else PARALLEL_MIN_BYTES_COMPILED
        if (parallel and fast and size >= min_bytes and _cpus() >= 2
                and os.environ.get("RIDGELINE_READ_WORKER", "1") != "0"):
            rd = _read_split(fh, spath, size)
        if rd is None:
            fh.seek(0)
            rd = _Reader(spath, fast, size)
            _feed_file(rd, fh)
    return _finish(rd)


def _finish(rd: _Reader) -> Trace:
    spath, warnings, header, footer = rd.spath, rd.warnings, rd.header, rd.footer
    if header is None:
        raise RidgelineError(f"{spath}: empty file (no trace header)")
    if footer is None:
        warnings.append(
            "no footer: the run did not end cleanly (crashed or killed); every complete "
            "request line was read"
        )
    elif footer.interrupted:
        warnings.append("footer says the run was interrupted before it finished")
    _check_unique_ids(rd.sink.ids, spath)
    trace = rd.sink.trace(header, footer, warnings, path=spath)
    if footer is not None and footer.requests_written != len(trace) and not footer.interrupted:
        warnings.append(
            f"footer says {footer.requests_written} requests were written, read {len(trace)}"
        )
    return trace


def _check_unique_ids(ids: list[str], spath: str) -> None:
    """A request id names one request: a trace that repeats one (two runs concatenated, a
    writer's bug) would have its requests counted twice by every metric."""
    if len(set(ids)) == len(ids):
        return
    first: dict[str, int] = {}
    for i, rid in enumerate(ids):
        if rid in first:
            raise RidgelineError(f"{spath}: field 'id': got {rid!r} again (requests "
                                 f"{first[rid] + 1:,} and {i + 1:,}); allowed: each request "
                                 "id once")
        first[rid] = i


# ---- two processes ------------------------------------------------------------------------------


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _read_split(fh: IO[bytes], spath: str, size: int) -> _Reader | None:
    """Read the file with a worker process taking the part after a line boundary near
    PARALLEL_SHARE of it. None when the file must be read by this process alone (no
    boundary, the worker did not start or failed, an error, a footer before the split)."""
    fh.seek(int(size * PARALLEL_SHARE))
    fh.readline()
    split = fh.tell()
    if split >= size:
        return None
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.abspath(p) if p else os.getcwd()
                                         for p in sys.path])
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from ridgeline.trace.reader import _worker_main; "
             "_worker_main()", spath, str(split), str(BATCH_LINES)],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=env,
        )
    except OSError:
        return None
    try:
        fh.seek(0)
        rd = _Reader(spath, True, size)
        try:
            _feed_file(rd, fh, limit=split)
        except Exception:
            return None  # read again alone: the same error, from the same batches
        if rd.header is None or rd.footer is not None:
            return None  # the requests after it need this part's state: read alone
        assert proc.stdout is not None
        return rd if _receive(proc.stdout, rd) and proc.wait() == 0 else None
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _receive(pipe: IO[bytes], rd: _Reader) -> bool:
    """Append the worker's columns (read from its stdout straight into the sink) and its
    footer and warnings to `rd`; False when the worker did not finish cleanly."""
    try:
        meta = pickle.load(pipe)
    except Exception:
        return False
    if not isinstance(meta, dict) or not meta.get("ok"):
        return False
    sink, n, ne = rd.sink, meta["n"], meta["n_events"]
    sink.reserve(sink.n + n, sink.n_events + ne)
    for name, length in meta["arrays"]:
        at = sink.n_events if name in _EVENT_NAMES else sink.n
        view = memoryview(sink.arrays[name][at:at + length]).cast("B")
        got = 0
        while got < view.nbytes:
            k = pipe.readinto(view[got:])
            if not k:
                return False
            got += k
    sink.ids.extend(meta["ids"])
    sink.error_kind.extend(meta["error_kind"])
    sink.error.extend(meta["error"])
    sink.n += n
    sink.n_events += ne
    rd.warnings.extend(meta["warnings"])
    if meta["footer"] is not None:
        rd.footer = TraceFooter.model_validate(meta["footer"])
        rd.footer_line = meta["footer_line"]
    return True


def _worker_main() -> None:
    """The worker: read the file from byte argv[2] (a line start) to the end, and write
    the columns to stdout (a pickled description, then the raw arrays)."""
    global BATCH_LINES
    spath, split = sys.argv[1], int(sys.argv[2])
    BATCH_LINES = int(sys.argv[3])
    out = sys.stdout.buffer
    try:
        with open(spath, "rb") as fh:
            no = 0
            while fh.tell() < split:  # lines before the part: the numbering goes on
                block = fh.read(min(BLOCK_BYTES, split - fh.tell()))
                if not block:
                    break
                no += int(np.count_nonzero(np.frombuffer(block, dtype=np.uint8) == 10))
            size = os.fstat(fh.fileno()).st_size - split
            fh.seek(split)
            # The header is in the first part: this part's lines are requests and footer.
            rd = _Reader(spath, True, size, header=TraceHeader(source="worker"))
            _feed_file(rd, fh, no=no)
        sink = rd.sink
        arrays = [(name, a[:sink.n_events if name in _EVENT_NAMES else sink.n])
                  for name, a in sink.arrays.items()]
        meta = {"ok": True, "n": sink.n, "n_events": sink.n_events,
                "arrays": [(name, a.size) for name, a in arrays],
                "ids": sink.ids, "error_kind": sink.error_kind, "error": sink.error,
                "warnings": rd.warnings, "footer_line": rd.footer_line,
                "footer": rd.footer.model_dump() if rd.footer is not None else None}
    except BaseException:
        pickle.dump({"ok": False}, out)
        out.flush()
        raise SystemExit(1) from None
    pickle.dump(meta, out, protocol=pickle.HIGHEST_PROTOCOL)
    for _, a in arrays:
        out.write(memoryview(np.ascontiguousarray(a)).cast("B"))
    out.flush()


def _validated(model: Any, obj: Any, no: int, spath: str, what: str) -> Any:
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        loc, msg = _pydantic_message(exc)
        raise RidgelineError(f"{spath}: line {no}: {what} field '{loc}': {msg}") from None


def _format_hint(path: str) -> str:
    """Suggest the importer when a file looks like another tool's output."""
    try:
        fmt = detect_format(path)
    except Exception:
        return ""
    if fmt and fmt != "ridgeline":
        return f" (this looks like a {fmt} file: use `--format {fmt}` or import_trace)"
    return ""
