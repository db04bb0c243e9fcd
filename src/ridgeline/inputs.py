"""Reading a user's file safely: one set of checks for every file ridgeline reads.

Every reader (profiles, replay files, traces, timelines, configs, datasets, telemetry
sidecars) opens its file through here, so each refuses the same things the same way, with
one `RidgelineError` line that names the option (or file) and what is allowed:

- not a regular file: a directory, `/dev/zero`, a FIFO or a socket (a device or a pipe
  never ends, and reading one whole would fill the memory or wait forever);
- a whole-file read past its stated size cap (`max_bytes`);
- not UTF-8 text: binary content (NUL bytes) or UTF-16 (a byte-order mark);
- JSON nested deeper than Python's parser goes, or numbers it refuses (a 5,000-digit int);
- a streamed file (a trace, `.gz` or not) past its caps: 1 GiB decompressed, 64 MiB a
  line; a corrupt or truncated gzip (`open_capped`).

A parsed document is then read by its schema through `validate_document`: one pydantic
model per kind of input, whose failure (an unknown field, a wrong type, a number out of
range) is one line naming the field's path (docs/cli.md, "Readers").

>>> import tempfile, os
>>> p = os.path.join(tempfile.mkdtemp(), "x.json")
>>> _ = open(p, "w").write('{"a": [1, 2]}')
>>> load_json(p, "--calibration")
{'a': [1, 2]}
>>> try:
...     load_json("/dev/zero", "--calibration")
... except RidgelineError as exc:
...     print(exc)
--calibration: '/dev/zero' is not a regular file (a character device); allowed: a file
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import IO, Any, cast

from ridgeline.errors import RidgelineError

# Whole-file reads (a profile, a config.json, a result JSON, a length list): far above any
# real one (a vLLM detailed result of 100k requests is ~60 MB), far below the memory.
MAX_JSON_BYTES = 256 << 20
_SNIFF_BYTES = 4096


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def non_regular_kind(path: str | os.PathLike[str]) -> str | None:
    """What `path` is when it exists and is not a regular file (else None)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return None if stat.S_ISREG(mode) else _kind(mode)


def check_input_file(path: str | os.PathLike[str], field: str) -> Path:
    """The path of a readable regular file, or a one-line RidgelineError naming `field`."""
    text = os.fspath(path)
    p = Path(text)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise RidgelineError(f"{field}: file {text!r} not found") from None
    except (OSError, ValueError) as exc:
        raise RidgelineError(f"{field}: cannot read {text!r} "
                             f"({getattr(exc, 'strerror', None) or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise RidgelineError(f"{field}: {text!r} is not a regular file "
                             f"({_kind(st.st_mode)}); allowed: a file")
    if not os.access(p, os.R_OK):
        raise RidgelineError(f"{field}: cannot read {text!r} (permission denied)")
    return p


def text_problem(head: bytes) -> str | None:
    """Why the first bytes of a file are not UTF-8 text (None when they may be)."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16 text (save it as UTF-8)"
    if b"\x00" in head:
        return "binary, not text"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not merely a character cut at the sniff's end
            return f"not UTF-8 text (byte {exc.start}: {head[exc.start]:#04x})"
    return None


def _check_text(p: Path, text: str, field: str) -> None:
    with open(p, "rb") as fh:
        problem = text_problem(fh.read(_SNIFF_BYTES))
    if problem:
        raise RidgelineError(f"{field}: {text!r} is {problem}; allowed: a UTF-8 text file")


def open_text(path: str | os.PathLike[str], field: str, newline: str | None = None
              ) -> IO[str]:
    """Open a regular UTF-8 text file for streaming (line by line), after the checks.

    A bad byte further in still raises UnicodeDecodeError while reading: wrap the loop in
    `decode_errors(field, path)`."""
    p = check_input_file(path, field)
    _check_text(p, os.fspath(path), field)
    return open(p, encoding="utf-8-sig", newline=newline)


class decode_errors:  # a context manager: reads like one
    """Turn a UnicodeDecodeError met while streaming a file into a one-line error."""

    def __init__(self, field: str, path: str | os.PathLike[str]) -> None:
        self.field, self.path = field, os.fspath(path)

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if isinstance(exc, UnicodeDecodeError):
            raise RidgelineError(f"{self.field}: {self.path!r} is not UTF-8 text past byte "
                                 f"{exc.start}; allowed: a UTF-8 text file") from None
        return False


def read_text(path: str | os.PathLike[str], field: str, max_bytes: int = MAX_JSON_BYTES
              ) -> str:
    """The whole text of a regular UTF-8 file no larger than `max_bytes`."""
    text_path = os.fspath(path)
    p = check_input_file(path, field)
    size = p.stat().st_size
    if size > max_bytes:
        # Bytes as well: a file just past the cap rounds to the cap in MiB.
        raise RidgelineError(f"{field}: {text_path!r} is {size:,} bytes "
                             f"({size / 2**20:,.1f} MiB); allowed: at most "
                             f"{max_bytes / 2**20:,.0f} MiB ({max_bytes:,} bytes)")
    with open(p, "rb") as fh:
        raw = fh.read(max_bytes + 1)
    problem = text_problem(raw[:_SNIFF_BYTES])
    if problem is None:
        try:
            return raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            problem = f"not UTF-8 text (byte {exc.start})"
    raise RidgelineError(f"{field}: {text_path!r} is {problem}; allowed: a UTF-8 text file")


def loads_json(text: str | bytes, source: str) -> Any:
    """json.loads whose failures (syntax, depth, oversized numbers) are one line naming
    `source` (e.g. "--replay: 'm.jsonl' line 3")."""
    try:
        return json.loads(text)
    except RecursionError:
        raise RidgelineError(f"{source}: JSON nested too deeply (Python's parser stops near "
                             "1,000 levels); allowed: ordinary JSON") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise RidgelineError(f"{source}: not valid JSON ({' '.join(str(exc).split())[:160]})"
                             ) from None


def load_json(path: str | os.PathLike[str], field: str, max_bytes: int = MAX_JSON_BYTES
              ) -> Any:
    """Parse a whole JSON file through the checks above."""
    text_path = os.fspath(path)
    return loads_json(read_text(path, field, max_bytes), f"{field}: {text_path!r}")


def validation_line(exc: Any, source: str, model: Any = None) -> RidgelineError:
    """One line from a pydantic ValidationError: the source, the field path (records by
    index), the value given and what is allowed. With the `model` class that failed, an
    unknown field's line lists the fields allowed at its place."""
    err = exc.errors()[0]
    loc_parts = tuple(err.get("loc", ()))
    loc = ".".join(str(x) for x in loc_parts)
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if not loc:  # a check across fields: its message says what and why
        return RidgelineError(f"{source}: {msg}")
    if err.get("type") == "extra_forbidden":
        names = _fields_at(model, loc_parts[:-1]) if model is not None else None
        allowed = ", ".join(names) if names else "the documented fields"
        return RidgelineError(f"{source}: {loc}: unknown field; allowed: {allowed}")
    if err.get("type") == "missing":
        return RidgelineError(f"{source}: {loc}: missing; allowed: a value (required)")
    got = err.get("input")
    got_text = "" if isinstance(got, (dict, list)) else f"got {_short(got)}; "
    msg = msg.removeprefix("Input should be ")
    return RidgelineError(f"{source}: {loc}: {got_text}allowed: {msg}")


def validate_document(model: Any, obj: Any, source: str) -> Any:
    """`model.model_validate(obj)` (a pydantic model class), its failure one RidgelineError
    line naming `source` and the field path: the one door every structured input (a
    profile, an engine costs file, a hardware file, a UI request, a probe header) passes."""
    from pydantic import ValidationError

    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise validation_line(exc, source, model) from None
    except RecursionError:
        raise RidgelineError(f"{source}: nested too deeply; allowed: ordinary JSON") from None


def _fields_at(model: Any, path: tuple[Any, ...]) -> list[str] | None:
    """The field names (aliases where set) of the pydantic model found at `path` inside
    `model` (list indexes and dict keys skipped), or None when no model is there."""
    cls = model
    for part in path:
        if isinstance(part, int):
            continue
        fields = getattr(cls, "model_fields", None)
        if fields is None:
            return None
        found = next((f for n, f in fields.items() if part in (n, f.alias)), None)
        if found is None:
            continue  # a dict key (a name chosen by the file) or a union's tag
        cls = _model_in(found.annotation)
    fields = getattr(cls, "model_fields", None)
    if fields is None:
        return None
    return [f.alias or n for n, f in fields.items()]


def _model_in(annotation: Any) -> Any:
    """The pydantic model class inside an annotation (`X`, `X | None`, `list[X]`)."""
    import typing

    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."



# Streamed inputs (traces, .gz or not): what one file may expand to, and one line's length.
# A 2 MB gzip can hold gigabytes of one repeated byte; a line of a trace is one request's
# record (a million output events is ~20 MB), so both caps sit far above any real file.
MAX_DECOMPRESSED_BYTES = 1 << 30
MAX_LINE_BYTES = 64 << 20


def _size_text(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 and not n % (1 << 30) else f"{n >> 20} MiB"


class CappedInput:
    """A binary file read through two caps, each stated in its error line: the bytes a
    compressed file expands to (`max_bytes`, gzip only) and a line's length; a corrupt or
    truncated gzip is one RidgelineError line too (it was an internal error, or read as an
    interrupt). Offers what the readers use: read, readline, seek, tell, fileno, close."""

    def __init__(self, fh: IO[bytes], path: str, field: str, compressed: bool,
                 max_bytes: int = MAX_DECOMPRESSED_BYTES,
                 max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.fh, self.path, self.field, self.compressed = fh, path, field, compressed
        self.max_bytes, self.max_line_bytes = max_bytes, max_line_bytes
        self.total = 0   # bytes handed out (decompressed)
        self.run = 0     # bytes since the last newline

    def _where(self) -> str:
        return f"{self.field}: {self.path!r}"

    def _call(self, fn: Any, *args: Any) -> Any:
        import zlib

        try:
            return fn(*args)
        except (zlib.error, EOFError) as exc:
            what = "ends early (a truncated .gz)" if isinstance(exc, EOFError) else \
                f"is corrupt ({_one_line_text(str(exc))})"
            raise RidgelineError(f"{self._where()}: the gzip data {what}; allowed: a "
                                 "complete gzip file") from None
        except OSError as exc:
            if not self.compressed or exc.errno is not None:
                raise
            raise RidgelineError(f"{self._where()}: the gzip data is corrupt "
                                 f"({_one_line_text(str(exc))}); allowed: a complete gzip "
                                 "file (or a name without .gz)") from None

    def _count(self, block: bytes) -> bytes:
        self.total += len(block)
        if self.compressed and self.total > self.max_bytes:
            raise RidgelineError(f"{self._where()}: decompressed size exceeds "
                                 f"{_size_text(self.max_bytes)}; allowed: at most that")
        cut = block.rfind(b"\n")
        self.run = self.run + len(block) if cut < 0 else len(block) - cut - 1
        if self.run > self.max_line_bytes:
            raise RidgelineError(f"{self._where()}: a line longer than "
                                 f"{_size_text(self.max_line_bytes)} (after byte "
                                 f"{self.total - self.run:,}); allowed: lines of at most "
                                 "that")
        return block

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:  # in blocks: the caps stop a bomb before it is all in memory
            return b"".join(iter(lambda: self.read(1 << 23), b""))
        return self._count(self._call(self.fh.read, n))

    def readline(self, limit: int = -1) -> bytes:
        cap = self.max_line_bytes + 1 if limit is None or limit < 0 else limit
        line = self._call(self.fh.readline, cap)
        self.run = 0
        if len(line) > self.max_line_bytes:
            self._count(line)  # raises: a line past the cap
        self.total += len(line)
        return line

    def __iter__(self) -> Any:
        return iter(self.readline, b"")

    def seek(self, offset: int, whence: int = 0) -> int:
        self.run = 0
        pos = int(self._call(self.fh.seek, offset, whence))
        self.total = pos
        return pos

    def tell(self) -> int:
        return int(self.fh.tell())

    def fileno(self) -> int:
        return self.fh.fileno()

    def close(self) -> None:
        self.fh.close()

    def __enter__(self) -> CappedInput:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _one_line_text(text: str) -> str:
    return " ".join(text.split())[:160]


def open_capped(path: str | os.PathLike[str], field: str) -> CappedInput:
    """A streamed input file (a trace), through the file checks and the caps above;
    `.gz` files are decompressed on the fly."""
    p = check_input_file(path, field)
    if p.suffix == ".gz":
        import gzip

        return CappedInput(cast(IO[bytes], gzip.open(p, "rb")), os.fspath(path), field,
                           compressed=True)
    return CappedInput(open(p, "rb"), os.fspath(path), field, compressed=False)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write a whole output file so that a reader (or a Ctrl-C) never sees half of it: a
    temporary file beside it, renamed over it when complete."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, p)
    finally:
        if tmp.exists():
            tmp.unlink()


__all__ = [
    "MAX_DECOMPRESSED_BYTES",
    "MAX_JSON_BYTES",
    "MAX_LINE_BYTES",
    "CappedInput",
    "check_input_file",
    "decode_errors",
    "load_json",
    "loads_json",
    "non_regular_kind",
    "open_capped",
    "open_text",
    "read_text",
    "text_problem",
    "validate_document",
    "validation_line",
    "write_text_atomic",
]
