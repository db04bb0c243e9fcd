"""Trace writer → reader round trips, crash tolerance and error messages."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from ridgeline.errors import RidgelineError
from ridgeline.trace.reader import read_trace
from ridgeline.trace.schema import TraceHeader
from ridgeline.trace.table import Trace
from ridgeline.trace.writer import TraceWriter

RECORDS = [
    {"id": "a", "scheduled_s": 0.0, "sent_s": 0.01, "event_times_s": [0.2, 0.3, 0.5],
     "event_tokens": [1, 4, 2], "end_s": 0.5, "prompt_tokens": 10, "output_tokens": 7,
     "token_count_source": "usage"},
    {"id": "b", "sent_s": 0.1, "event_times_s": [], "end_s": 0.15, "status": "error",
     "error_kind": "http_500", "error": "boom"},
    {"id": "c", "sent_s": 0.2, "event_times_s": [0.4], "end_s": 0.41, "output_tokens": 1},
]


def write(path: Path, records: list[dict], footer: bool = True) -> None:
    w = TraceWriter(path, TraceHeader(source="test", model="m", seed=3))
    for r in records:
        w.write_request(r)
    if footer:
        w.close(1.0)
    else:
        w._file.close()  # a crashed writer: no footer


def test_round_trip_columns(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    write(p, RECORDS)
    t = read_trace(p)
    assert len(t) == 3 and t.header.model == "m" and t.header.seed == 3
    assert t.footer is not None and t.footer.requests_written == 3
    assert t.warnings == []
    assert t.ids == ["a", "b", "c"]
    assert t.event_offsets.tolist() == [0, 3, 3, 4]
    assert t.event_times_s.tolist() == [0.2, 0.3, 0.5, 0.4]
    assert t.event_tokens.tolist() == [1, 4, 2, 1]
    assert t.output_tokens.tolist() == [7, -1, 1]
    assert np.isnan(t.scheduled_s[1]) and t.scheduled_s[0] == 0.0
    assert t.status_names() == ["ok", "error", "ok"]
    assert t.error_kind == [None, "http_500", None]
    for i, r in enumerate(RECORDS):
        back = t.record(i)
        for k, v in r.items():
            assert back[k] == v, k


def test_from_records_equals_file(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    write(p, RECORDS)
    a = read_trace(p)
    b = Trace.from_records({"source": "test"}, RECORDS)
    for name in ("sent_s", "event_times_s", "event_tokens", "event_offsets", "output_tokens"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_truncated_last_line_is_skipped_and_reported(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    write(p, RECORDS, footer=False)
    with open(p, "a") as fh:
        fh.write('{"type":"request","id":"d","sent_s":0.3,"event_ti')
    t = read_trace(p)
    assert len(t) == 3
    assert any(w.startswith("line 5: truncated last line") for w in t.warnings)
    assert any("no footer" in w for w in t.warnings)


def test_crashed_writer_without_footer_is_readable(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    with pytest.raises(RuntimeError), TraceWriter(p, TraceHeader(source="test")) as w:
        w.write_request(RECORDS[0])
        w.write_request(RECORDS[2])
        raise RuntimeError("killed")
    t = read_trace(p)
    assert t.footer is None and len(t) == 2
    assert any("no footer" in w for w in t.warnings)


def test_malformed_middle_line_names_line(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    write(p, RECORDS)
    lines = p.read_text().splitlines()
    lines[2] = lines[2][:-5]  # corrupt request "b" (line 3), not the last line
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(RidgelineError, match=r"line 3: not valid JSON"):
        read_trace(p)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r.pop("sent_s"), "sent_s"),
        (lambda r: r.update(sent_s="soon"), "sent_s"),
        (lambda r: r.update(status="maybe"), "status"),
        (lambda r: r.update(event_tokens=[1]), "event_tokens"),
        (lambda r: r.update(event_times_s=[0.2, "x", 0.5]), "event_times_s"),
        (lambda r: r.update(output_tokens=-3), "output_tokens"),
        (lambda r: r.pop("id"), "id"),
    ],
)
def test_bad_field_error_names_line_and_field(tmp_path: Path, change, field: str) -> None:
    recs = [dict(r) for r in RECORDS]
    change(recs[0])
    p = tmp_path / "t.jsonl"
    p.write_text(
        json.dumps({"type": "header", "source": "t"}) + "\n"
        + "\n".join(json.dumps({"type": "request", **r}) for r in recs) + "\n"
    )
    with pytest.raises(RidgelineError, match=rf"line 2: field '{field}'"):
        read_trace(p)


def test_first_line_must_be_header(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"type": "request", **RECORDS[0]}) + "\n")
    with pytest.raises(RidgelineError, match="line 1: field 'type'"):
        read_trace(p)


def test_gzip_and_many_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ridgeline.trace.reader as reader

    monkeypatch.setattr(reader, "BATCH_LINES", 7)  # force several column batches
    p = tmp_path / "t.jsonl.gz"
    n = 50
    with gzip.open(p, "wt") as fh:
        fh.write(json.dumps({"type": "header", "source": "t"}) + "\n")
        for i in range(n):
            fh.write(json.dumps({"type": "request", "id": str(i), "sent_s": float(i),
                                 "event_times_s": [i + 0.5] * (i % 3)}) + "\n")
    t = read_trace(p)
    assert len(t) == n
    assert t.event_counts.tolist() == [i % 3 for i in range(n)]
    assert t.sent_s.tolist() == [float(i) for i in range(n)]


def test_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(RidgelineError, match="not found"):
        read_trace(tmp_path / "nope.jsonl")
