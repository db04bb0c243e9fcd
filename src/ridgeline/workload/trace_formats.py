"""Readers for the public LLM traces beyond BurstGPT and Mooncake, one per format, streamed.

Each reader yields rows (time or None, prompt tokens, output tokens) one at a time, so a
multi-gigabyte file is never held whole; `replay.read_timed_trace` collects them into arrays
and checks the row cap. Every bad row is one error line naming the file, the line, the field,
what it held and what is allowed.

- Azure LLM inference traces, 2023 and 2024 (``TIMESTAMP,ContextTokens,GeneratedTokens``):
  TIMESTAMP a date and time such as ``2023-11-16 18:15:46.0180360`` (any number of
  fractional digits, an optional ``+00:00`` or ``Z``), read as seconds after the first row.
- Vidur's CSVs: request lengths ``num_prefill_tokens,num_decode_tokens``, with an arrival
  column ``arrived_at`` (seconds) when the file is a full trace (its ``splitwise_*.csv``);
  or an arrival trace with an ``arrival_time`` column (a date and time, or seconds).
- Session traces: the Qwen-Bailian KVCache traces (Alibaba, an agentic coder service among
  them: JSONL ``chat_id, parent_chat_id, timestamp, input_length, output_length, type,
  turn, hash_ids``): ``timestamp`` in seconds from the trace's start, ``parent_chat_id``
  -1 for a session's first request and otherwise the request it follows (a session is a
  chain from its root), ``hash_ids`` the prompt's 16-token blocks (equal ids, equal text).
  Each request keeps its session (the root's chat_id) and the gap after its parent's
  arrival (the think time plus the parent's own serving time, as the trace recorded it).
- ShareGPT JSON (a list of ``{"conversations": [{"from": "human", "value": ...},
  {"from": "gpt", "value": ...}, ...]}``): the first human turn is the prompt and the gpt
  turn after it the output, both counted with a tokenizer (cl100k by default). ShareGPT has
  no timestamps: the arrivals come from the arrival process (`--rate`, `cv=`).

>>> round(_seconds_of("2023-11-16 18:15:46.0180361") - _seconds_of("2023-11-16 18:15:45.5"), 8)
0.5180361
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from ridgeline.errors import RidgelineError
from ridgeline.inputs import decode_errors, loads_json, open_text
from ridgeline.tokenizers import load_tokenizer
from ridgeline.workload.timed_trace import _count, _time

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
VIDUR_LENGTH_COLUMNS = ("num_prefill_tokens", "num_decode_tokens")
VIDUR_ARRIVAL_COLUMNS = ("arrived_at", "arrival_time")
# A ShareGPT conversation larger than this is not a conversation (the whole public file,
# 90k conversations, is 640 MB: 7 KB each on average).
MAX_SHAREGPT_RECORD_BYTES = 64 << 20
_READ_CHARS = 1 << 20
_ZERO = datetime(2020, 1, 1)

Row = tuple[float | None, int, int]
SESSION_BLOCK_TOKENS = 16          # the Qwen-Bailian traces' hash block
MAX_SESSION_HASH_IDS = 700_000     # a 10 M-token prompt's 16-token blocks
# a line of a JSONL trace longer than this is not a request (700k ids of 8 digits: 6 MB)
MAX_JSONL_LINE_CHARS = 16 << 20


class SessionRecord(msgspec.Struct):
    """One request of a session trace (Qwen-Bailian): the fields read, of their JSON types;
    other fields are kept out (the files add some, e.g. a time to the parent chat)."""

    chat_id: int
    timestamp: int | float
    input_length: int | float
    output_length: int | float
    parent_chat_id: int = -1
    turn: int | None = None
    type: str | None = None
    hash_ids: list[Any] | None = None


_SESSION = msgspec.json.Decoder(SessionRecord)
SESSION_FIELDS = ("chat_id", "parent_chat_id", "timestamp", "input_length",
                  "output_length", "turn", "type", "hash_ids")
SessionRow = tuple[float, int, int, tuple[int, ...], int, int]


def session_rows(path: Path, path_text: str, field: str) -> Iterator[SessionRow]:
    """(time s, prompt tokens, output tokens, hash ids, chat id, parent chat id) per line of
    a session trace, in file order; a bad line is one error naming the line and field."""
    with open_text(path, field) as fh, decode_errors(field, path_text):
        for lineno, line in bounded_lines(fh, f"{field}: {path_text!r}"):
            if not line.strip():
                continue
            where = f"{field}: {path_text!r} line {lineno}"
            rec = _session_record(line, where)
            n_in = _count(rec.input_length, "input_length", where)
            yield (_time(rec.timestamp, "timestamp", where), n_in,
                   _count(rec.output_length, "output_length", where),
                   _block_ids(rec.hash_ids, n_in, where), rec.chat_id, rec.parent_chat_id)


def bounded_lines(fh: Any, where: str, limit: int = MAX_JSONL_LINE_CHARS
                  ) -> Iterator[tuple[int, str]]:
    """(line number, line) of a text file, refusing a line past `limit` characters before
    it is read whole (a corrupt or binary file can be one multi-gigabyte line)."""
    lineno = 0
    while True:
        line = fh.readline(limit + 1)
        if not line:
            return
        lineno += 1
        if len(line) > limit:
            raise RidgelineError(f"{where} line {lineno}: longer than {limit:,} characters; "
                                 "allowed: one JSON record a line")
        yield lineno, line


def _session_record(line: str, where: str) -> SessionRecord:
    try:
        return _SESSION.decode(line)
    except msgspec.ValidationError as exc:
        text = str(exc)
        if text.startswith("Expected `object`") or "missing required field" in text:
            missing = text.split("`")[1] if "missing required field" in text else "record"
            raise RidgelineError(f"{where}: {missing}: missing; allowed: a session record "
                                 f"({', '.join(SESSION_FIELDS)})") from None
        at = text.rsplit(" - at `$.", 1)
        name = at[1].rstrip("`").split("[")[0] if len(at) == 2 else "record"
        allowed = {"hash_ids": "a list of integer block ids", "type": "a string",
                   "chat_id": "an integer", "parent_chat_id": "an integer (-1: a root)",
                   "turn": "an integer"}.get(name, "a number")
        raise RidgelineError(f"{where}: {name}: {at[0]}; allowed: {allowed}") from None
    except msgspec.DecodeError:
        loads_json(line, where)  # the JSON error, in its usual words
        raise RidgelineError(f"{where}: NaN, Infinity or a number past 64 bits; allowed: "
                             "finite JSON numbers") from None


def _block_ids(value: list[Any] | None, input_length: int, where: str) -> tuple[int, ...]:
    """Block ids: integers, no more than the prompt's 16-token blocks (+1)."""
    if not value:
        return ()
    limit = min(MAX_SESSION_HASH_IDS, input_length // SESSION_BLOCK_TOKENS + 2)
    if len(value) > limit or not all(
            isinstance(x, int) and not isinstance(x, bool) and abs(x) < 2**63 for x in value):
        raise RidgelineError(f"{where}: hash_ids: got {len(value):,} ids; allowed: a list of "
                             f"at most {limit:,} integer block ids (one per "
                             f"{SESSION_BLOCK_TOKENS} prompt tokens)")
    return tuple(value)


def session_ids(chat_ids: list[int], parents: list[int]) -> list[int]:
    """The session (root chat_id) of each request, following parent_chat_id chains in file
    order; a parent that is not an earlier request of the file starts its own session (a
    trace cut from a longer one)."""
    root_of: dict[int, int] = {}
    out = []
    for chat, parent in zip(chat_ids, parents, strict=True):
        root = root_of.get(parent, chat) if parent >= 0 else chat
        root_of[chat] = root
        out.append(root)
    return out


def sniff_header(first_line: str) -> str | None:
    """The format a CSV header line or the start of a JSON file names, or None."""
    if first_line.lstrip().startswith("["):
        return "sharegpt"
    if first_line.lstrip().startswith("{"):
        return "session" if '"chat_id"' in first_line and '"input_length"' in first_line \
            else None
    cols = [c.strip().strip('"') for c in first_line.split(",")]
    if all(c in cols for c in AZURE_COLUMNS):
        return "azure"
    if all(c in cols for c in VIDUR_LENGTH_COLUMNS):
        return "vidur" if "arrived_at" in cols else "vidur-lengths"
    if "arrival_time" in cols:
        return "vidur-arrivals"
    return None


def _seconds_of(text: str) -> float:
    """Seconds after 2020-01-01 UTC of 'YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM|Z]'.

    The fraction is read digit for digit (Python's datetime takes at most 6 digits; the
    Azure traces write 7), and the count starts in 2020 rather than 1970 so a float keeps
    those 100 ns (near 1.7e9 s a float64 steps by 240 ns)."""
    t = text.strip()
    if t.endswith("Z"):
        t = t[:-1]
    offset_s = 0.0
    tail = t[19:]
    for sign in ("+", "-"):
        if sign in tail:
            k = 19 + tail.index(sign)
            hh, _, mm = t[k + 1:].partition(":")
            offset_s = (int(hh) * 3600 + int(mm or 0) * 60) * (1 if sign == "+" else -1)
            t = t[:k]
            break
    whole, _, frac = t.partition(".")
    if frac and not frac.isdigit():
        raise ValueError(text)
    base = datetime.strptime(whole.replace("T", " "), "%Y-%m-%d %H:%M:%S") - _ZERO
    secs = base.days * 86400 + base.seconds - offset_s
    return secs + (int(frac) / 10 ** len(frac) if frac else 0.0)


def _datetime_seconds(value: str, what: str, where: str) -> float:
    try:
        return _seconds_of(value)
    except (ValueError, OverflowError):
        raise RidgelineError(f"{where}: {what}: got {_short(value)}; allowed: a date and time "
                             "'YYYY-MM-DD HH:MM:SS[.fraction]'") from None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _csv_rows(path: Path, field: str, path_text: str) -> Iterator[tuple[int, dict[str, str]]]:
    with open_text(path, field, newline="") as fh, decode_errors(field, path_text):
        reader = csv.DictReader(fh)
        try:
            for row in reader:
                # the line the row ended on (a quoted field may span lines)
                yield reader.line_num, row
        except csv.Error as exc:  # a NUL byte, a field past the csv module's size limit
            raise RidgelineError(f"{field}: {path_text!r} line {reader.line_num}: not CSV "
                                 f"({exc}); allowed: a CSV file of the header's columns"
                                 ) from None


def read_rows(fmt: str, path: Path, path_text: str, field: str,
              tokenizer: str | None = None) -> Iterator[Row]:
    """The rows of a file in one of this module's formats (see the module docstring)."""
    if fmt == "sharegpt":
        yield from _sharegpt_rows(path, path_text, field, tokenizer)
        return
    t: float | None
    for lineno, row in _csv_rows(path, field, path_text):
        where = f"{field}: {path_text!r} line {lineno}"
        if None in row or any(v is None for v in row.values()):
            given = sum(v is not None for k, v in row.items() if k is not None) + len(
                row.get(None) or ())  # type: ignore[call-overload]
            columns = len(row) - (None in row)
            raise RidgelineError(f"{where}: fields: got {given}; allowed: {columns} (one per "
                                 f"header column of the {fmt} CSV)")
        if fmt == "azure":
            t = _datetime_seconds(row["TIMESTAMP"], "TIMESTAMP", where)
            yield (t, _count(row["ContextTokens"], "ContextTokens", where),
                   _count(row["GeneratedTokens"], "GeneratedTokens", where))
        elif fmt in ("vidur", "vidur-lengths"):
            t = _time(row["arrived_at"], "arrived_at", where) if fmt == "vidur" else None
            yield (t, _count(row["num_prefill_tokens"], "num_prefill_tokens", where),
                   _count(row["num_decode_tokens"], "num_decode_tokens", where))
        elif fmt == "vidur-arrivals":
            raw = row["arrival_time"].strip()
            try:
                t = _time(float(raw), "arrival_time", where)
            except ValueError:
                t = _datetime_seconds(raw, "arrival_time", where)
            yield (t, -1, -1)
        else:  # pragma: no cover - the caller dispatches only this module's formats
            raise RidgelineError(f"{field}: format {fmt!r} has no reader here")


def _json_items(path: Path, path_text: str, field: str) -> Iterator[tuple[int, Any]]:
    """The items of a JSON list file, one at a time (with the line each starts on), reading
    1 MiB at a time: a 2 GB ShareGPT dump is never held whole."""
    dec = json.JSONDecoder()
    with open_text(path, field) as fh, decode_errors(field, path_text):
        buf = fh.read(_READ_CHARS).lstrip()
        line = 1
        if not buf.startswith("["):
            raise RidgelineError(f"{field}: {path_text!r} line 1: got {_short(buf[:20])}; "
                                 "allowed: a JSON list of conversations (ShareGPT)")
        pos = 1
        eof = False
        while True:
            # skip separators, reading more when the buffer runs dry
            while True:
                while pos < len(buf) and buf[pos] in " \t\r\n,":
                    line += buf[pos] == "\n"
                    pos += 1
                if pos < len(buf) or eof:
                    break
                buf, pos = fh.read(_READ_CHARS), 0
                eof = not buf
            if pos >= len(buf):
                raise RidgelineError(f"{field}: {path_text!r} line {line}: the JSON list is "
                                     "not closed; allowed: a whole ShareGPT JSON file")
            if buf[pos] == "]":
                return
            while True:
                try:
                    obj, end = dec.raw_decode(buf, pos)
                    break
                except json.JSONDecodeError as exc:
                    if eof or len(buf) - pos > MAX_SHAREGPT_RECORD_BYTES:
                        raise RidgelineError(
                            f"{field}: {path_text!r} line {line + exc.lineno - 1}: not valid "
                            f"JSON ({exc.msg}); allowed: a ShareGPT JSON list") from None
                    more = fh.read(_READ_CHARS)
                    eof = not more
                    buf, pos = buf[pos:] + more, 0
                except RecursionError:
                    raise RidgelineError(f"{field}: {path_text!r} line {line}: JSON nested "
                                         "too deeply; allowed: ordinary JSON") from None
            yield line, obj
            line += buf.count("\n", pos, end)
            pos = end


def _turn_text(turn: Any) -> tuple[str | None, str | None]:
    if not isinstance(turn, dict):
        return None, None
    who = turn.get("from", turn.get("role"))
    text = turn.get("value", turn.get("content"))
    return (who if isinstance(who, str) else None), (text if isinstance(text, str) else None)


def _sharegpt_rows(path: Path, path_text: str, field: str, tokenizer: str | None
                   ) -> Iterator[Row]:
    """Prompt = the first human turn, output = the gpt turn right after it; conversations
    without such a pair are skipped (vLLM's benchmark skips them too)."""
    tok = load_tokenizer(tokenizer or "tiktoken:cl100k_base")
    assert tok is not None
    for line, obj in _json_items(path, path_text, field):
        where = f"{field}: {path_text!r} line {line}"
        turns = obj.get("conversations", obj.get("conversation")) if isinstance(
            obj, dict) else None
        if not isinstance(turns, list):
            raise RidgelineError(f"{where}: conversations: got {_short(turns)}; allowed: a "
                                 "list of {\"from\": \"human\"|\"gpt\", \"value\": TEXT} turns")
        for k in range(len(turns) - 1):
            who, prompt = _turn_text(turns[k])
            who_next, reply = _turn_text(turns[k + 1])
            if who in ("human", "user") and who_next in ("gpt", "assistant") and prompt \
                    and reply:
                yield None, tok.count(prompt), tok.count(reply)
                break


__all__ = ["AZURE_COLUMNS", "SESSION_BLOCK_TOKENS", "bounded_lines", "read_rows", "session_ids",
           "session_rows", "sniff_header"]
