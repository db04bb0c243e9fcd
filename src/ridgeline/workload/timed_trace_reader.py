"""Timestamped production traces: BurstGPT CSV and Mooncake JSONL, read into arrays.

One parser for every consumer (simulate's `--arrival replay:`, bench datasets):

- BurstGPT CSV (header ``Timestamp,Model,Request tokens,Response tokens,Total tokens,
  Log Type``): Timestamp in seconds; BurstGPT_3's ``Session ID`` column, where present,
  gives each conversation's requests one session (API log rows have none).
- Mooncake JSONL (one object per line: ``timestamp`` in milliseconds, ``input_length``,
  ``output_length``, ``hash_ids``: shared leading ids become prefix groups,
  workload/prefix_groups.py).
- session traces (Qwen-Bailian JSONL: ``chat_id``, ``parent_chat_id``, ``timestamp`` in
  seconds, lengths, 16-token ``hash_ids``): sessions kept, blocks as prefix groups.
- the Azure LLM inference traces, Vidur's CSVs and ShareGPT JSON (workload/trace_formats.py)
  and load-test configs and results read as traces (workload/load_test_configs.py).

Times are sorted and shifted so the first request is at 0, then divided by `speedup`
(speedup=2 replays the trace at twice its rate: every inter-arrival time halves).

>>> import tempfile, os
>>> p = os.path.join(tempfile.mkdtemp(), "m.jsonl")
>>> _ = open(p, "w").write('{"timestamp": 1000, "input_length": 5, "output_length": 2}\\n'
...                        '{"timestamp": 3000, "input_length": 7, "output_length": 3}\\n')
>>> t = read_timed_trace(p, speedup=2.0)
>>> t.times_s.tolist(), t.prompt_tokens.tolist(), t.format
([0.0, 1.0], [5, 7], 'mooncake')
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.inputs import check_input_file, decode_errors, loads_json, open_text
from ridgeline.trace.reader import read_trace
from ridgeline.workload.load_test_configs import config_trace
from ridgeline.workload.prefix_groups import shared_prefix_groups
from ridgeline.workload.timed_trace import (
    CONFIG_FORMATS,
    FORMATS,
    MAX_REPLAY_ROWS,
    MAX_TIMESTAMP_S,
    OTHER_FORMATS,
    UNTIMED_FORMATS,
    TimedTrace,
    _count,
    _time,
)
from ridgeline.workload.trace_formats import (
    SESSION_BLOCK_TOKENS,
    bounded_lines,
    read_rows,
    session_ids,
    session_rows,
    sniff_header,
)

BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
# Bounds on a replay file: rows beyond these are corrupt, not traffic.
MAX_HASH_IDS = 20_000              # a 10 M-token prompt's 512-token blocks
MIN_SPEEDUP, MAX_SPEEDUP = 1e-6, 1e9
MOONCAKE_BLOCK_TOKENS = 512        # the prompt tokens one Mooncake hash id stands for


def sniff_format(path: Path, field: str = "--arrival") -> str:
    """'burstgpt', 'mooncake', a format of workload/trace_formats.py ('azure', 'vidur',
    'vidur-lengths', 'vidur-arrivals', 'sharegpt'), or 'other' (a trace or a column of
    seconds)."""
    with open_text(path, field) as fh, decode_errors(field, path):
        first = fh.readline(1 << 20).strip()
    if first.startswith("{"):
        try:
            obj = json.loads(first)
        except json.JSONDecodeError:
            return "other"
        if not isinstance(obj, dict):
            return "other"
        if "chat_id" in obj and "input_length" in obj:
            return "session"
        return "mooncake" if "timestamp" in obj and "input_length" in obj else "other"
    cols = [c.strip() for c in first.split(",")]
    if all(c in cols for c in BURSTGPT_COLUMNS):
        return "burstgpt"
    return sniff_header(first) or "other"


def read_replay_times(path_text: str, speedup: float = 1.0) -> tuple[float, ...]:
    """The arrival times of a file of bare timestamps (one a line, or the first CSV column),
    of JSON lines with `scheduled_s`/`sent_s`, or of a ridgeline trace; sorted, from 0,
    divided by `speedup`."""
    from array import array

    path = check_input_file(path_text, "--arrival")
    if _is_ridgeline_trace(path):
        return _trace_times(path_text, speedup)
    times = array("d")
    with open_text(path, "--arrival") as fh, decode_errors("--arrival", path_text):
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if len(times) >= MAX_REPLAY_ROWS:
                raise RidgelineError(f"--arrival: replay file {path_text!r} holds more than "
                                     f"{MAX_REPLAY_ROWS:,} timestamps; allowed: at most that "
                                     "many")
            if line.startswith("{"):
                try:
                    obj = json.loads(line)
                except (ValueError, RecursionError):
                    continue  # a truncated last line of a crashed trace
                if not isinstance(obj, dict) or obj.get("type", "request") != "request":
                    continue
                raw = obj.get("scheduled_s", obj.get("sent_s"))
                if raw is None:
                    continue
            else:
                raw = line.split(",")[0].strip()
            try:
                t = float(raw)
            except (TypeError, ValueError, OverflowError):
                if lineno == 1:
                    continue  # a CSV header
                raise RidgelineError(f"--arrival: replay file {path_text!r} line {lineno}: "
                                     f"{raw!r} is not seconds") from None
            if not -MAX_TIMESTAMP_S <= t <= MAX_TIMESTAMP_S:
                raise RidgelineError(f"--arrival: replay file {path_text!r} line {lineno}: "
                                     f"got {raw!r}; allowed: finite seconds (at most "
                                     f"{MAX_TIMESTAMP_S:g} in size)")
            times.append(t)
    if not times:
        raise RidgelineError(f"--arrival: replay file {path_text!r} holds no timestamps")
    arr = np.sort(np.asarray(times))
    return tuple(((arr - arr[0]) / speedup).tolist())


def _is_ridgeline_trace(path: Any) -> bool:
    with open_text(path, "--arrival") as fh, decode_errors("--arrival", path):
        first = fh.readline(1 << 20).strip()
    try:
        obj = json.loads(first) if first.startswith("{") else None
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and obj.get("type") == "header"


def _trace_times(path_text: str, speedup: float) -> tuple[float, ...]:
    """A ridgeline trace's arrival times (scheduled, else sent), read by the trace reader
    and its rules (types, order, finite numbers, unique ids, .gz caps): a trace that
    `analyze` refuses is not replayed either."""
    try:
        trace = read_trace(path_text)
    except RidgelineError as exc:
        raise RidgelineError(f"--arrival: {exc}") from None
    times = np.where(np.isfinite(trace.scheduled_s), trace.scheduled_s, trace.sent_s)
    times = times[np.isfinite(times)]
    if not times.size:
        raise RidgelineError(f"--arrival: replay file {path_text!r} holds no timestamps")
    if np.any(np.abs(times) > MAX_TIMESTAMP_S):
        raise RidgelineError(f"--arrival: replay file {path_text!r}: a time past "
                             f"{MAX_TIMESTAMP_S:g} s; allowed: finite seconds")
    arr = np.sort(times)
    return tuple(((arr - arr[0]) / speedup).tolist())


def _too_many(field: str, path_text: str) -> RidgelineError:
    return RidgelineError(f"{field}: {path_text!r} holds more than {MAX_REPLAY_ROWS:,} "
                          "requests; allowed: at most that many (split the file)")


def read_timed_trace(path_text: str, speedup: float = 1.0, field: str = "--arrival",
                     fmt: str | None = None, tokenizer: str | None = None, seed: int = 0
                     ) -> TimedTrace:
    """Read a BurstGPT CSV or Mooncake JSONL file (see the module docstring), or a format of
    workload/trace_formats.py or workload/load_test_configs.py; `fmt` overrides the format
    sniffed from the header, `tokenizer` counts ShareGPT's texts, `seed` draws a load-test
    config's arrivals.

    Every row is checked (finite times >= 0, whole token counts in range, at most
    MAX_REPLAY_ROWS rows); a bad one is one error line naming the file, line and field."""
    from array import array

    path = check_input_file(path_text, field)
    if not (MIN_SPEEDUP <= speedup <= MAX_SPEEDUP):
        raise RidgelineError(f"{field}: speedup={speedup:g}; allowed: {MIN_SPEEDUP:g} to "
                             f"{MAX_SPEEDUP:g}")
    fmt = fmt or sniff_format(path, field)
    if fmt in CONFIG_FORMATS:
        tr = config_trace(fmt, path_text, seed, field)
        tr.times_s = tr.times_s / speedup
        return tr  # type: ignore[no-any-return]
    t = array("d")
    p = array("q")
    o = array("q")
    h: list[tuple[int, ...]] = []
    chats: list[int] = []
    parents: list[int] = []
    session_names: dict[str, int] = {}
    if fmt == "burstgpt":
        with open_text(path, field, newline="") as fh, decode_errors(field, path_text):
            for lineno, row in enumerate(csv.DictReader(fh), 2):
                where = f"{field}: {path_text!r} line {lineno}"
                if lineno > MAX_REPLAY_ROWS + 1:
                    raise _too_many(field, path_text)
                try:
                    t.append(_time(row["Timestamp"], "Timestamp", where))
                    p.append(_count(row["Request tokens"] or None, "Request tokens", where))
                    o.append(_count(row["Response tokens"] or None, "Response tokens", where))
                    # BurstGPT_3's conversations (empty on API log rows: no session)
                    named = (row.get("Session ID") or "").strip()
                    if named:
                        chats.append(session_names.setdefault(named, len(session_names)))
                    elif "Session ID" in row:
                        chats.append(-1)
                except KeyError:
                    raise RidgelineError(f"{where}: not a BurstGPT row (Timestamp, Request "
                                         "tokens, Response tokens)") from None
    elif fmt == "mooncake":
        with open_text(path, field) as fh, decode_errors(field, path_text):
            for lineno, line in bounded_lines(fh, f"{field}: {path_text!r}"):
                if not line.strip():
                    continue
                where = f"{field}: {path_text!r} line {lineno}"
                if len(t) >= MAX_REPLAY_ROWS:
                    raise _too_many(field, path_text)
                rec = _mooncake_record(line, where, loads_json)
                t.append(_time(rec.timestamp, "timestamp", where, 1e-3))
                n_in = _count(rec.input_length, "input_length", where)
                p.append(n_in)
                o.append(_count(rec.output_length, "output_length", where))
                h.append(_hash_ids(rec.hash_ids, n_in, where))
    elif fmt == "session":
        for when_s, n_in, n_out, ids, chat, parent in session_rows(path, path_text, field):
            if len(t) >= MAX_REPLAY_ROWS:
                raise _too_many(field, path_text)
            t.append(when_s)
            p.append(n_in)
            o.append(n_out)
            h.append(ids)
            chats.append(chat)
            parents.append(parent)
    elif fmt in OTHER_FORMATS:
        for row_t, n_in, n_out in read_rows(fmt, path, path_text, field, tokenizer):
            if len(t) >= MAX_REPLAY_ROWS:
                raise _too_many(field, path_text)
            t.append(0.0 if row_t is None else row_t)
            p.append(n_in)
            o.append(n_out)
    else:
        raise RidgelineError(f"{field}: {path_text!r} is in none of the replay formats "
                             f"(format={fmt}); allowed: {', '.join(FORMATS)}")
    if not t:
        raise RidgelineError(f"{field}: replay file {path_text!r} holds no requests")
    times = np.frombuffer(t, dtype=np.float64)
    order = np.argsort(times, kind="stable")
    times = (times[order] - times[order[0]]) / speedup
    hashes = [h[i] for i in order] if fmt in ("mooncake", "session") else None
    block = SESSION_BLOCK_TOKENS if fmt == "session" else MOONCAKE_BLOCK_TOKENS
    out = TimedTrace(times, np.frombuffer(p, dtype=np.int64)[order],
                     np.frombuffer(o, dtype=np.int64)[order], fmt, hashes,
                     timed=fmt not in UNTIMED_FORMATS, block_tokens=block)
    if hashes is not None:
        out.prefix_group, out.prefix_tokens = shared_prefix_groups(
            hashes, out.prompt_tokens, block)
    if fmt == "session":
        out.session = np.asarray(session_ids(chats, parents), dtype=np.int64)[order]
        arrived = dict(zip(chats, t, strict=True))
        gaps = np.array([t[i] - arrived[q] if q in arrived else np.nan
                         for i, q in enumerate(parents)], dtype=np.float64)
        out.parent_gap_s = gaps[order] / speedup
    elif chats and len(chats) == len(t):   # BurstGPT_3's Session ID column
        out.session = np.asarray(chats, dtype=np.int64)[order]
    return out


class MooncakeRecord(msgspec.Struct, forbid_unknown_fields=True):
    """The schema of a Mooncake JSONL record (msgspec: a file may hold millions): the four
    fields of the published traces, of their JSON types; a field it does not know (a
    misspelt `output_lenght`, whose request would get no output) is refused. Ranges are
    checked by `_time`, `_count` and `_hash_ids`."""

    timestamp: int | float
    input_length: int | float | None = None
    output_length: int | float | None = None
    hash_ids: list[Any] | None = None


_MOONCAKE = msgspec.json.Decoder(MooncakeRecord)
MOONCAKE_FIELDS = MooncakeRecord.__struct_fields__


def _mooncake_record(line: str, where: str, loads_json: Any) -> MooncakeRecord:
    try:
        return _MOONCAKE.decode(line)
    except msgspec.ValidationError as exc:
        text = str(exc)
        if text.startswith("Object contains unknown field"):
            name = text.split("`")[1] if "`" in text else "?"
            raise RidgelineError(f"{where}: {name}: unknown field; allowed: "
                                 f"{', '.join(MOONCAKE_FIELDS)}") from None
        if text.startswith("Expected `object`") or "missing required field" in text:
            raise RidgelineError(f"{where}: not a Mooncake record (timestamp ms, "
                                 "input_length, output_length)") from None
        at = text.rsplit(" - at `$.", 1)
        name = at[1].rstrip("`").split("[")[0] if len(at) == 2 else "record"
        allowed = "a list of integer block ids" if name == "hash_ids" else "a number"
        raise RidgelineError(f"{where}: {name}: {at[0]}; allowed: {allowed}") from None
    except msgspec.DecodeError:
        loads_json(line, where)  # the JSON error, in its usual words
        raise RidgelineError(f"{where}: NaN, Infinity or a number past 64 bits; allowed: "
                             "finite JSON numbers") from None


def _hash_ids(value: object, input_length: int, where: str) -> tuple[int, ...]:
    """Mooncake block ids: integers, no more than the prompt's 512-token blocks (+1)."""
    if not value:
        return ()
    limit = min(MAX_HASH_IDS, max(input_length, 0) // 512 + 2)
    if not isinstance(value, list) or len(value) > limit or not all(
            isinstance(x, int) and not isinstance(x, bool) and abs(x) < 2**63 for x in value):
        raise RidgelineError(f"{where}: hash_ids: allowed: a list of at most {limit:,} "
                             "integer block ids (one per 512 prompt tokens)")
    return tuple(value)
