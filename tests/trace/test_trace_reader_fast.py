"""The reader's fast paths (msgspec-decoded batches, a worker process for the second part of a
large file) give exactly what the exact path (`json.loads` per line) gives: the same columns
bit for bit, the same warnings, the same errors. (The compiled scanner: its own file.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import ridgeline.trace.reader as reader
from ridgeline.errors import RidgelineError
from ridgeline.trace.table import Trace

COLUMNS = ("scheduled_s", "sent_s", "end_s", "ttft_s", "tpot_s", "e2e_s", "prompt_tokens",
           "output_tokens", "status", "token_source", "event_offsets", "event_times_s",
           "event_tokens")

HEADER = json.dumps({"type": "header", "source": "test", "model": "m"})


def plain(i: int) -> str:
    """A request line as TraceWriter writes it (compact, times then tokens)."""
    t0 = 0.25 * i
    times = [round(t0 + 0.1 + 0.03 * k, 6) for k in range(1 + i % 5)]
    toks = [1] + [8] * (len(times) - 1)
    return json.dumps({"type": "request", "id": str(i), "scheduled_s": t0, "sent_s": t0,
                       "event_times_s": times, "event_tokens": toks, "end_s": times[-1],
                       "prompt_tokens": 100 + i, "output_tokens": sum(toks),
                       "token_count_source": "usage"}, separators=(",", ":"))


TRICKY = [
    # scientific notation, upper-case exponent, integers among floats
    '{"type":"request","id":"sci","sent_s":0.5,"event_times_s":[1e-05,2.5E+3,1.5e2,7],'
    '"event_tokens":[1,2,3,4]}',
    # negative zero: -0.0 stays negative, the integer -0 is json's int 0 (positive)
    '{"type":"request","id":"negzero","sent_s":0,"event_times_s":[-0.0,0.5,-0],"end_s":-0.0}',
    # empty event lists, with and without tokens
    '{"type":"request","id":"empty","sent_s":1.25,"event_times_s":[],"event_tokens":[]}',
    '{"type":"request","id":"empty2","sent_s":1.25,"event_times_s":[],"status":"error",'
    '"error_kind":"http_500"}',
    # event_tokens missing
    '{"type":"request","id":"notok","sent_s":1.25,"event_times_s":[1.5,2.5]}',
    # extra fields, one with nested arrays; unicode in the error, escaped (json.dumps'
    # default: spaces after separators too)
    json.dumps({"type": "request", "id": "extra", "sent_s": 2.0, "event_times_s": [2.1, 2.2],
                "status": "error", "error": "d\u00e9j\u00e0 vu \u2013 \U0001f600 \"q\" \\",
                "extra": {"m": [[1, 2], [3]], "s": "]["}}),
    # unicode raw (UTF-8)
    json.dumps({"type": "request", "id": "utf8", "sent_s": 2.0, "event_times_s": [2.1, 2.2],
                "error": "d\u00e9j\u00e0 \u2013 \u00fc"}, ensure_ascii=False),
    # a nested field named like the event arrays, before the record's own
    '{"type":"request","id":"nested","meta":{"event_times_s":[9.9],"event_tokens":[9]},'
    '"sent_s":3,"event_times_s":[3.5,3.75],"event_tokens":[2,2]}',
    # tokens before times
    '{"type":"request","id":"order","sent_s":3,"event_tokens":[4,5],'
    '"event_times_s":[3.5,3.75]}',
    # 17 significant digits, > 15 digits, huge numbers, zero tokens, the largest token
    # count (the int32 column's maximum)
    '{"type":"request","id":"digits","sent_s":3,"event_times_s":[3.1234567890123457,'
    '1.0000000000000002,100000000000000000000.5,12345.678901234],'
    '"event_tokens":[0,2147483647,1,1]}',
    # null arrays and a nested array in an extra field
    '{"type":"request","id":"nulls","sent_s":3,"event_times_s":null,"event_tokens":null,'
    '"x":[1,[2,[3]]]}',
    # our marks' text already in the file, leading / trailing spaces on the line
    '  {"type":"request","id":"mark","sent_s":3,"event_times_s":[3.5],'
    '"error":"\\u0001\\u0002"}  ',
    # duplicate key: json keeps the last one
    '{"type":"request","id":"dup","sent_s":3,"event_times_s":[1.0],"event_times_s":[2.0,3.0]}',
    # integer ids and times, spacing inside the arrays
    '{"type":"request","id":1017,"sent_s":3,"event_times_s":[ 4 , 5.5 ],'
    '"event_tokens":[ 1 , 2 ]}',
]


def write(path: Path, lines: list[str], end: str = "\n") -> None:
    path.write_bytes((end.join(lines) + end).encode("utf-8"))


def assert_same(a: Trace, b: Trace) -> None:
    for name in COLUMNS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert x.tobytes() == y.tobytes(), name  # bit for bit: NaN, -0.0 included
    assert a.ids == b.ids
    assert a.error_kind == b.error_kind
    assert a.error == b.error
    assert a.warnings == b.warnings
    assert a.header == b.header
    assert a.footer == b.footer


@pytest.mark.parametrize("batch", [1, 3, 7, 10_000])
def test_fast_path_equals_exact_path_on_a_tricky_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    monkeypatch.setattr(reader, "BATCH_LINES", batch)
    lines = [HEADER] + [plain(i) for i in range(20)] + TRICKY + [plain(i) for i in range(20, 40)]
    lines.insert(5, "")  # a blank line: numbering goes on
    lines.append(json.dumps({"type": "footer", "end_time_s": 99.0, "requests_written": 7}))
    p = tmp_path / "t.jsonl"
    write(p, lines, end="\r\n")
    exact = reader._read_trace(p, fast=False)
    assert len(exact) == 40 + len(TRICKY)
    assert_same(exact, reader._read_trace(p))
    assert_same(exact, reader.read_trace(p))


def test_tricky_values_are_json_values(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    write(p, [HEADER, *TRICKY])
    t = reader.read_trace(p)
    ids = t.ids

    def ev(rid: str) -> list[float]:
        i = ids.index(rid)
        return t.event_times_s[t.event_offsets[i]:t.event_offsets[i + 1]].tolist()

    assert ev("sci") == [1e-05, 2500.0, 150.0, 7.0]
    assert np.signbit(ev("negzero")).tolist() == [True, False, False]
    assert ev("empty") == [] and ev("nulls") == []
    assert ev("nested") == [3.5, 3.75] and ev("dup") == [2.0, 3.0]
    assert ev("digits")[0] == 3.1234567890123457
    assert t.error[ids.index("extra")] == "d\u00e9j\u00e0 vu \u2013 \U0001f600 \"q\" \\"
    assert ids[-1] == "1017"


@pytest.mark.parametrize("with_msgspec", [False, True])
def test_fast_path_reads_plain_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       with_msgspec: bool) -> None:
    """With msgspec only the header's batch goes through the exact path (msgspec decodes
    request lines only, a nested event_times_s among them); without it every batch does."""
    monkeypatch.setattr(reader, "_cscan", None)  # the Python paths (compiled: its own test)
    if not with_msgspec:
        monkeypatch.setattr(reader, "_msgspec", None)
    monkeypatch.setattr(reader, "BATCH_LINES", 10)
    calls: list[int] = []
    exact = reader._parse_batch

    def spy(nos, lines, *args):
        calls.append(nos[0])
        return exact(nos, lines, *args)

    monkeypatch.setattr(reader, "_parse_batch", spy)
    p = tmp_path / "t.jsonl"
    nested = next(t for t in TRICKY if '"id":"nested"' in t)
    write(p, [HEADER] + [plain(i) for i in range(35)] + [nested]
          + [plain(i) for i in range(35, 45)])
    t = reader.read_trace(p)
    # 46 lines in batches of 10: the header's batch starts at line 1
    assert calls == ([1] if with_msgspec else [1, 11, 21, 31, 41])
    i = list(t.ids).index("nested")
    assert t.event_times_s[t.event_offsets[i]:t.event_offsets[i + 1]].tolist() == [3.5, 3.75]


MALFORMED = [
    ('"event_times_s":[0.2,,0.5]', "not valid JSON"),
    ('"event_times_s":[.5]', "not valid JSON"),
    ('"event_times_s":[5.]', "not valid JSON"),
    ('"event_times_s":[01.5]', "not valid JSON"),
    ('"event_times_s":[1.2.3]', "not valid JSON"),
    ('"event_times_s":[0x10]', "not valid JSON"),
    ('"event_times_s":[1,]', "not valid JSON"),
    ('"event_times_s":[1.5,true]', None),  # numpy takes true as 1.0 and "2" as 2.0: read
    ('"event_times_s":[1.5,"2"]', None),
    ('"event_times_s":[1.5,2.5],"event_tokens":[1.5,2]', None),  # 1.5 tokens -> 1
    ('"event_times_s":"\\u0001"', "field 'event_times_s'"),
    ('"event_times_s":[1.5],"event_tokens":[1,2]', "field 'event_tokens'"),
    ('"event_times_s":[1.5],"event_tokens":[-1]', "field 'event_tokens'"),
    ('"event_times_s":[1.5],"event_tokens":[05]', "not valid JSON"),
    ('"event_times_s":[1.5],"event_tokens":"\\u0002"', "field 'event_tokens'"),
    ('"event_times_s":[1.5],"status":"maybe"', "field 'status'"),
    ('"event_times_s":[1.5]]', "not valid JSON"),
]


@pytest.mark.parametrize(("fields", "message"), MALFORMED)
def test_fast_path_raises_the_exact_paths_error(
    tmp_path: Path, fields: str, message: str | None
) -> None:
    bad = '{"type":"request","id":"bad","sent_s":1.0,' + fields + "}"
    p = tmp_path / "t.jsonl"
    write(p, [HEADER, plain(0), bad, plain(1)])
    if message is None:  # the exact path reads it: so does the fast one, the same way
        assert_same(reader._read_trace(p, fast=False), reader.read_trace(p))
        return
    with pytest.raises(RidgelineError) as exact:
        reader._read_trace(p, fast=False)
    assert f"line 3: {message}" in str(exact.value)
    with pytest.raises(RidgelineError) as fast:
        reader.read_trace(p)
    assert str(fast.value) == str(exact.value)


@pytest.mark.parametrize("cut", [10, 60, 95, -1])
def test_truncated_last_line_same_on_both_paths(tmp_path: Path, cut: int) -> None:
    last = plain(7)
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join([HEADER, plain(0), plain(1)]) + "\n" + last[:cut])
    exact = reader._read_trace(p, fast=False)
    assert_same(exact, reader.read_trace(p))
    assert any(w.startswith("line 4: truncated last line") for w in exact.warnings)


# ---- the worker process ----------------------------------------------------------------------


@pytest.fixture
def split_always(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Take the two-process path for any file; record whether the worker's part was used."""
    monkeypatch.setattr(reader, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(reader, "PARALLEL_MIN_BYTES_COMPILED", 0)
    monkeypatch.setattr(reader, "BATCH_LINES", 64)
    monkeypatch.setattr(reader, "_cpus", lambda: 2)
    used: list[bool] = []
    receive = reader._receive

    def spy(pipe, rd):
        used.append(receive(pipe, rd))
        return used[-1]

    monkeypatch.setattr(reader, "_receive", spy)
    return used


def big_file(path: Path, n: int, footer: bool = True, tail: str = "") -> None:
    lines = [HEADER]
    for i in range(n):
        # Each repeat of a tricky line gets its own id: a trace's ids are unique.
        lines.append(plain(i) if i % 97 else re.sub(
            r'"id":\s*(?:"([^"]*)"|(\d+))', lambda m, i=i: f'"id":"{m[1] or m[2]}-{i}"',
            TRICKY[i // 97 % len(TRICKY)], count=1))
        if i % 500 == 3:
            lines.append("")
    if footer:
        lines.append(json.dumps({"type": "footer", "end_time_s": 9e3, "requests_written": n}))
    path.write_text("\n".join(lines) + "\n" + tail)


def test_worker_process_gives_the_same_trace(tmp_path: Path, split_always: list[bool]) -> None:
    p = tmp_path / "t.jsonl"
    big_file(p, 3000)
    alone = reader._read_trace(p, parallel=False)
    both = reader.read_trace(p)
    assert split_always == [True]
    assert_same(alone, both)
    assert both.footer is not None and len(both) == 3000 and both.warnings == []


def test_worker_process_truncated_last_line_and_no_footer(
    tmp_path: Path, split_always: list[bool]
) -> None:
    p = tmp_path / "t.jsonl"
    big_file(p, 2500, footer=False, tail=plain(2500)[:40])
    alone = reader._read_trace(p, parallel=False)
    both = reader.read_trace(p)
    assert split_always == [True]
    assert_same(alone, both)
    assert both.warnings[0].startswith("line 2507: truncated last line")


@pytest.mark.parametrize("where", [0.2, 0.8])
def test_error_with_worker_process_is_the_sequential_error(
    tmp_path: Path, split_always: list[bool], where: float
) -> None:
    p = tmp_path / "t.jsonl"
    big_file(p, 2000)
    lines = p.read_text().splitlines()
    k = int(len(lines) * where)
    lines[k] = lines[k].replace('"sent_s"', '"sent_x"')
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(RidgelineError) as alone:
        reader._read_trace(p, parallel=False)
    assert f"line {k + 1}: field 'sent_s'" in str(alone.value)
    with pytest.raises(RidgelineError) as both:
        reader.read_trace(p)
    assert str(both.value) == str(alone.value)
    assert split_always == ([] if where < 0.5 else [False])


def test_worker_can_be_turned_off(
    tmp_path: Path, split_always: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RIDGELINE_READ_WORKER", "0")
    p = tmp_path / "t.jsonl"
    big_file(p, 500)
    assert len(reader.read_trace(p)) == 500
    assert split_always == []


def test_msgspec_path_equals_exact_path_on_random_numbers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """msgspec's number parsing against json's, bit for bit: 17-digit reprs, short
    decimals, exponents, integers, -0.0 (batches after the header's go through msgspec)."""
    if reader._msgspec is None:
        pytest.skip("msgspec not installed")
    monkeypatch.setattr(reader, "_cscan", None)  # else the compiled scanner reads them
    monkeypatch.setattr(reader, "BATCH_LINES", 100)
    used: list[int] = []
    ms_columns = reader._ms_columns

    def spy(lines: list[bytes]):  # type: ignore[no-untyped-def]
        cols = ms_columns(lines)
        used.append(len(lines))
        return cols

    monkeypatch.setattr(reader, "_ms_columns", spy)
    rng = np.random.default_rng(7)
    lines = [HEADER]
    for i in range(3000):
        k = int(rng.integers(0, 6))
        vals = rng.lognormal(0, 3, k)
        texts = [repr(float(v)) if j % 3 == 0 else f"{v:.{j % 9}f}" if j % 3 == 1
                 else f"{v:.6e}" for j, v in enumerate(vals)]
        if i % 97 == 0:
            texts.append("-0.0")
        if i % 89 == 0:
            texts.append(str(int(rng.integers(0, 10**15))))
        toks = ",".join(str(int(t)) for t in rng.integers(0, 50, len(texts)))
        lines.append(f'{{"type":"request","id":"r{i}","sent_s":{rng.random()!r},'
                     f'"event_times_s":[{",".join(texts)}],"event_tokens":[{toks}],'
                     f'"end_s":{rng.random() * 1e3:.9f}}}')
    p = tmp_path / "t.jsonl"
    write(p, lines)
    exact = reader._read_trace(p, fast=False)
    assert_same(exact, reader.read_trace(p))
    assert sum(used) >= 2900  # all but the header's batch
