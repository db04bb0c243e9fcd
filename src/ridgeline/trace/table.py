"""The columnar request table: a trace held as numpy arrays, so metrics are vectorized.

A trace file is one JSON object per request; metrics want one array per field. `Trace`
holds the header, the optional footer, the reader's warnings, and per-request columns.
Output events are flattened: request ``i`` owns ``event_times_s[event_offsets[i]:
event_offsets[i + 1]]`` (and the same slice of ``event_tokens``).

Missing values: float columns use NaN, token counts use -1.

>>> t = Trace.from_records({"source": "doc"}, [
...     {"id": "a", "sent_s": 0.0, "event_times_s": [0.2, 0.3], "end_s": 0.3},
...     {"id": "b", "sent_s": 0.1, "event_times_s": [0.5], "event_tokens": [4], "end_s": 0.5},
... ])
>>> len(t), t.event_offsets.tolist(), t.event_tokens.tolist()
(2, [0, 2, 3], [1, 1, 4])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.trace.schema import TraceFooter, TraceHeader

STATUSES: tuple[str, ...] = ("ok", "error", "cutoff", "rejected")
STATUS_CODE: dict[str, int] = {name: i for i, name in enumerate(STATUSES)}
TOKEN_SOURCES: tuple[str, ...] = (
    "usage", "tokenizer", "chunks", "requested", "simulated", "unknown",
)
TOKEN_SOURCE_CODE: dict[str, int] = {name: i for i, name in enumerate(TOKEN_SOURCES)}

# Tokens per event: int32 (a count far beyond any real chunk fits; int64 would double the
# largest column but one of a 1 M-request trace). A larger count is refused.
EVENT_TOKENS_DTYPE = np.int32
EVENT_TOKENS_MAX = int(np.iinfo(np.int32).max)
_FLOAT_FIELDS = ("scheduled_s", "sent_s", "end_s", "ttft_s", "tpot_s", "e2e_s")


class RecordError(ValueError):
    """A request record that cannot enter the table; `index` is its position in the batch."""

    def __init__(self, index: int, field_name: str, message: str) -> None:
        super().__init__(f"field '{field_name}': {message}")
        self.index = index
        self.field_name = field_name
        self.message = message


def _float_column(values: list[Any], name: str) -> np.ndarray:
    """None → NaN. Raises RecordError naming the first value that is not a number."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        for i, v in enumerate(values):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                raise RecordError(i, name, f"expected a number, got {v!r}") from None
        raise


def _int_column(values: list[Any], name: str) -> np.ndarray:
    """None → -1."""
    col = _float_column(values, name)
    with np.errstate(invalid="ignore"):
        bad = ~np.isnan(col) & ((col < 0) | (col != np.floor(col)) | (col > 1e18))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RecordError(i, name, f"expected a non-negative integer, got {values[i]!r}")
    return np.where(np.isnan(col), -1, col).astype(np.int64)


@dataclass
class _Columns:
    """Per-batch columns; concatenated into a Trace."""

    ids: list[str]
    scheduled_s: np.ndarray
    sent_s: np.ndarray
    end_s: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    status: np.ndarray
    token_source: np.ndarray
    error_kind: list[str | None]
    error: list[str | None]
    event_counts: np.ndarray
    event_times_s: np.ndarray
    event_tokens: np.ndarray


def build_columns(records: Sequence[Mapping[str, Any]]) -> _Columns:
    """Turn request dicts into columns. Raises RecordError naming the record and the field.

    This is the fast path: list comprehensions and one numpy conversion per field, no
    per-record model validation (the validator does that, `ridgeline validate`).
    """
    scalars = scalar_columns(records)
    counts, times, tokens = event_columns(
        [r.get("event_times_s") or () for r in records],
        [r.get("event_tokens") for r in records],
    )
    return _Columns(**scalars, event_counts=counts, event_times_s=times, event_tokens=tokens)


def _field(records: Sequence[Mapping[str, Any]], name: str, default: Any, dicts: bool) -> list:
    cols = getattr(records, "cols", None)
    if cols is not None:  # the msgspec reader's columns (defaults already applied)
        return list(cols[name])
    if dicts:  # plain dicts (the reader): dict.get through map, no Python frame per record
        return list(map(dict.get, records, repeat(name), repeat(default)))
    return [r.get(name, default) for r in records]


def scalar_columns(
    records: Sequence[Mapping[str, Any]], *, dicts: bool = False
) -> dict[str, Any]:
    """Every column of `build_columns` except the events, as keyword arguments of `_Columns`.

    `dicts=True` promises that every record is a plain `dict` (a faster way to read it).
    Raises RecordError like `build_columns`, in the same order.
    """
    cols = getattr(records, "cols", None)
    try:
        ids = (list(cols["id"]) if cols is not None else
               list(map(itemgetter("id"), records)) if dicts else [r["id"] for r in records])
    except KeyError:
        i = next(i for i, r in enumerate(records) if "id" not in r)
        raise RecordError(i, "id", "required field missing") from None
    if not dicts or set(map(type, ids)) != {str}:
        for i, v in enumerate(ids):
            if not isinstance(v, str):
                if isinstance(v, int) and not isinstance(v, bool):
                    ids[i] = str(v)  # integer ids are common in other tools' files
                else:
                    raise RecordError(i, "id", f"expected a string, got {v!r}")
    floats: dict[str, np.ndarray] = {}
    for name in _FLOAT_FIELDS:
        floats[name] = _float_column(_field(records, name, None, dicts), name)
    sent = floats["sent_s"]
    if np.isnan(sent).any():
        i = int(np.flatnonzero(np.isnan(sent))[0])
        raise RecordError(i, "sent_s", "required field missing (a number, seconds)")
    prompt = _int_column(_field(records, "prompt_tokens", None, dicts), "prompt_tokens")
    output = _int_column(_field(records, "output_tokens", None, dicts), "output_tokens")
    status = _code_column(_field(records, "status", "ok", dicts), "status", STATUS_CODE)
    source = _code_column(_field(records, "token_count_source", "unknown", dicts),
                          "token_count_source", TOKEN_SOURCE_CODE)
    return dict(
        ids=ids, scheduled_s=floats["scheduled_s"], sent_s=sent, end_s=floats["end_s"],
        ttft_s=floats["ttft_s"], tpot_s=floats["tpot_s"], e2e_s=floats["e2e_s"],
        prompt_tokens=prompt, output_tokens=output, status=status, token_source=source,
        error_kind=_field(records, "error_kind", None, dicts),
        error=_field(records, "error", None, dicts),
    )


def _code_column(values: list[Any], name: str, codes: dict[str, int]) -> np.ndarray:
    """Names → int8 codes. Raises RecordError naming the first value that is not one of
    them (also null, a number or a list: not only an unknown name)."""
    try:
        return np.array(list(map(codes.__getitem__, values)), dtype=np.int8)
    except (KeyError, TypeError):
        i = next(i for i, v in enumerate(values) if not (isinstance(v, str) and v in codes))
        raise RecordError(i, name, f"got {values[i]!r}; allowed: {', '.join(codes)}") from None


def event_columns(
    times_lists: list[Any], tok_lists: list[Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Event counts, flattened times and tokens from each record's ``event_times_s`` (falsy
    → no events) and ``event_tokens`` (None → one token per event). Raises RecordError."""
    n = len(times_lists)
    try:
        counts = np.fromiter(map(len, times_lists), dtype=np.int64, count=n)
    except TypeError:
        i = next(i for i, t in enumerate(times_lists) if not isinstance(t, list | tuple))
        raise RecordError(i, "event_times_s", "expected a list of numbers") from None
    total = int(counts.sum())
    try:
        times = np.fromiter(chain.from_iterable(times_lists), dtype=np.float64, count=total)
    except (TypeError, ValueError):
        i = next(
            i for i, t in enumerate(times_lists)
            if any(isinstance(x, bool) or not isinstance(x, int | float) for x in t)
        )
        raise RecordError(i, "event_times_s", "expected a list of numbers") from None
    if all(t is None for t in tok_lists):
        tokens = np.ones(total, dtype=EVENT_TOKENS_DTYPE)
    else:
        for i, t in enumerate(tok_lists):
            if t is not None and (not isinstance(t, list | tuple) or len(t) != counts[i]):
                raise RecordError(
                    i, "event_tokens",
                    f"needs one count per event ({int(counts[i])} events)",
                )
        tokens = np.fromiter(
            chain.from_iterable(
                t if t is not None else repeat(1, int(c))
                for t, c in zip(tok_lists, counts.tolist(), strict=True)
            ),
            dtype=np.int64, count=total,
        )
        if (tokens < 0).any():
            starts = np.concatenate(([0], np.cumsum(counts)))
            j = int(np.flatnonzero(tokens < 0)[0])
            i = int(np.searchsorted(starts, j, side="right") - 1)
            raise RecordError(i, "event_tokens", "token counts must be >= 0")
        if total and int(tokens.max()) > EVENT_TOKENS_MAX:
            starts = np.concatenate(([0], np.cumsum(counts)))
            j = int(np.flatnonzero(tokens > EVENT_TOKENS_MAX)[0])
            i = int(np.searchsorted(starts, j, side="right") - 1)
            raise RecordError(i, "event_tokens",
                              f"token counts must be <= {EVENT_TOKENS_MAX} per event")
        tokens = tokens.astype(EVENT_TOKENS_DTYPE)
    return counts, times, tokens


def _as_header(header: TraceHeader | Mapping[str, Any]) -> TraceHeader:
    if isinstance(header, TraceHeader):
        return header
    data = dict(header)
    data.setdefault("source", "unknown")
    return TraceHeader.model_validate(data)


@dataclass
class Trace:
    """A whole trace, columnar. Build with `Trace.from_records` or `read_trace`."""

    header: TraceHeader
    footer: TraceFooter | None
    warnings: list[str]
    ids: list[str]
    scheduled_s: np.ndarray
    sent_s: np.ndarray
    end_s: np.ndarray
    ttft_s: np.ndarray  # importer-supplied summaries (NaN when the events say it)
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    prompt_tokens: np.ndarray  # -1 = unknown
    output_tokens: np.ndarray  # -1 = unknown
    status: np.ndarray  # int8 codes into STATUSES
    token_source: np.ndarray  # int8 codes into TOKEN_SOURCES
    error_kind: list[str | None]
    error: list[str | None]
    event_offsets: np.ndarray  # int64, len n + 1
    event_times_s: np.ndarray
    event_tokens: np.ndarray
    path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # event_tokens is held as int32 (half of int64's 8 bytes on 23 M events, so that
        # analyze of 1 M requests < 1 GB); a trace built from other arrays is converted.
        tok = self.event_tokens
        if tok.dtype != EVENT_TOKENS_DTYPE:
            if tok.size and (int(tok.max()) > EVENT_TOKENS_MAX or int(tok.min()) < 0):
                raise RidgelineError(f"event_tokens: got a count outside 0..{EVENT_TOKENS_MAX}"
                                     "; allowed: 0 to that many tokens per event")
            self.event_tokens = tok.astype(EVENT_TOKENS_DTYPE)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def event_counts(self) -> np.ndarray:
        """Number of output events per request."""
        return np.diff(self.event_offsets)

    def status_names(self) -> list[str]:
        """Status of each request as text."""
        return [STATUSES[c] for c in self.status.tolist()]

    @classmethod
    def from_records(
        cls,
        header: TraceHeader | Mapping[str, Any],
        records: Iterable[Mapping[str, Any]],
        footer: TraceFooter | Mapping[str, Any] | None = None,
        warnings: list[str] | None = None,
    ) -> Trace:
        """Build a trace from request dicts shaped like `RequestRecord` (in memory)."""
        recs = list(records)
        try:
            cols = build_columns(recs)
        except RecordError as exc:
            raise RidgelineError(
                f"request {exc.index} (id {recs[exc.index].get('id')!r}): {exc}"
            ) from None
        foot = footer if footer is None or isinstance(footer, TraceFooter) else (
            TraceFooter.model_validate(dict(footer))
        )
        return cls.from_columns(_as_header(header), [cols], foot, list(warnings or []))

    @classmethod
    def from_columns(
        cls,
        header: TraceHeader,
        parts: list[_Columns],
        footer: TraceFooter | None,
        warnings: list[str],
        path: str | None = None,
    ) -> Trace:
        """Concatenate per-batch columns into one trace."""
        def cat(name: str, dtype: Any) -> np.ndarray:
            arrays = [getattr(p, name) for p in parts]
            return np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)

        counts = cat("event_counts", np.int64)
        offsets = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return cls(
            header=header,
            footer=footer,
            warnings=warnings,
            ids=list(chain.from_iterable(p.ids for p in parts)),
            scheduled_s=cat("scheduled_s", np.float64),
            sent_s=cat("sent_s", np.float64),
            end_s=cat("end_s", np.float64),
            ttft_s=cat("ttft_s", np.float64),
            tpot_s=cat("tpot_s", np.float64),
            e2e_s=cat("e2e_s", np.float64),
            prompt_tokens=cat("prompt_tokens", np.int64),
            output_tokens=cat("output_tokens", np.int64),
            status=cat("status", np.int8),
            token_source=cat("token_source", np.int8),
            error_kind=list(chain.from_iterable(p.error_kind for p in parts)),
            error=list(chain.from_iterable(p.error for p in parts)),
            event_offsets=offsets,
            event_times_s=cat("event_times_s", np.float64),
            event_tokens=cat("event_tokens", EVENT_TOKENS_DTYPE),
            path=path,
        )

    def record(self, i: int) -> dict[str, Any]:
        """Request ``i`` back as a dict (for display and round trips)."""
        lo, hi = int(self.event_offsets[i]), int(self.event_offsets[i + 1])
        out: dict[str, Any] = {"id": self.ids[i], "sent_s": float(self.sent_s[i])}
        for name in ("scheduled_s", "end_s", "ttft_s", "tpot_s", "e2e_s"):
            v = float(getattr(self, name)[i])
            if not np.isnan(v):
                out[name] = v
        out["event_times_s"] = self.event_times_s[lo:hi].tolist()
        toks = self.event_tokens[lo:hi]
        if (toks != 1).any():
            out["event_tokens"] = toks.tolist()
        for name in ("prompt_tokens", "output_tokens"):
            v = int(getattr(self, name)[i])
            if v >= 0:
                out[name] = v
        out["token_count_source"] = TOKEN_SOURCES[int(self.token_source[i])]
        out["status"] = STATUSES[int(self.status[i])]
        if self.error_kind[i] is not None:
            out["error_kind"] = self.error_kind[i]
        if self.error[i] is not None:
            out["error"] = self.error[i]
        return out


_REQUEST_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("scheduled_s", np.float64), ("sent_s", np.float64), ("end_s", np.float64),
    ("ttft_s", np.float64), ("tpot_s", np.float64), ("e2e_s", np.float64),
    ("prompt_tokens", np.int64), ("output_tokens", np.int64), ("status", np.int8),
    ("token_source", np.int8), ("event_counts", np.int64),
)
_EVENT_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("event_times_s", np.float64), ("event_tokens", EVENT_TOKENS_DTYPE),
)


class _ColumnSink:
    """The columns of a trace being read, filled batch by batch.

    Same result as `Trace.from_columns` on the list of batches, without holding the batches
    and the concatenation at once: each batch is copied into arrays reserved ahead (the
    reader reserves from the file size; pages never written cost no memory) and grown when
    short, then trimmed in place.
    """

    def __init__(self) -> None:
        self.n = 0
        self.n_events = 0
        self.arrays = {name: np.empty(0, dtype=dtype)
                       for name, dtype in _REQUEST_COLUMNS + _EVENT_COLUMNS}
        self.ids: list[str] = []
        self.error_kind: list[str | None] = []
        self.error: list[str | None] = []

    def reserve(self, n: int, n_events: int) -> None:
        """Make room for `n` requests and `n_events` events in all."""
        for columns, need, used in ((_REQUEST_COLUMNS, n, self.n),
                                    (_EVENT_COLUMNS, n_events, self.n_events)):
            for name, _ in columns:
                old = self.arrays[name]
                if old.size < need:
                    new = np.empty(need, dtype=old.dtype)
                    new[:used] = old[:used]
                    self.arrays[name] = new

    def columns(self) -> tuple[np.ndarray, ...]:
        """The arrays in `_REQUEST_COLUMNS` then `_EVENT_COLUMNS` order (the compiled
        scanner writes into them from `n` / `n_events` on)."""
        return tuple(self.arrays[name] for name, _ in _REQUEST_COLUMNS + _EVENT_COLUMNS)

    def grow(self) -> None:
        """More room (the scanner found the arrays full)."""
        self.reserve(max(self.n + 4096, self.arrays["sent_s"].size * 3 // 2),
                     max(self.n_events + (1 << 16), self.arrays["event_times_s"].size * 3 // 2))

    def truncate(self, n: int, n_events: int) -> None:
        """Drop what was written after `n` requests and `n_events` events."""
        self.n, self.n_events = n, n_events
        del self.ids[n:], self.error_kind[n:], self.error[n:]

    def append(self, cols: _Columns) -> None:
        n, ne = len(cols.ids), cols.event_times_s.size
        if self.n + n > self.arrays["sent_s"].size or \
                self.n_events + ne > self.arrays["event_times_s"].size:
            self.reserve(max(self.n + n, self.n * 3 // 2),
                         max(self.n_events + ne, self.n_events * 3 // 2))
        for name, _ in _REQUEST_COLUMNS:
            self.arrays[name][self.n:self.n + n] = getattr(cols, name)
        for name, _ in _EVENT_COLUMNS:
            self.arrays[name][self.n_events:self.n_events + ne] = getattr(cols, name)
        self.ids.extend(cols.ids)
        self.error_kind.extend(cols.error_kind)
        self.error.extend(cols.error)
        self.n += n
        self.n_events += ne

    def trace(self, header: TraceHeader, footer: TraceFooter | None, warnings: list[str],
              path: str | None = None) -> Trace:
        """The trace; the sink is empty afterwards."""
        arrays, self.arrays = self.arrays, {}
        for columns, used in ((_REQUEST_COLUMNS, self.n), (_EVENT_COLUMNS, self.n_events)):
            for name, _ in columns:
                if arrays[name].size != used:
                    arrays[name].resize(used, refcheck=False)  # realloc: shrinks in place
        counts = arrays.pop("event_counts")
        offsets = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        del counts
        return Trace(header=header, footer=footer, warnings=warnings, ids=self.ids,
                     error_kind=self.error_kind, error=self.error, event_offsets=offsets,
                     path=path, **arrays)
