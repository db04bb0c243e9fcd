"""The validator finds what makes metrics wrong, naming line and field."""

from __future__ import annotations

import json
from pathlib import Path

from ridgeline.trace.validator import validate_trace


def write(path: Path, records: list[dict], footer: bool = True) -> Path:
    lines = [json.dumps({"type": "header", "source": "t"})]
    lines += [json.dumps({"type": "request", **r}) for r in records]
    if footer:
        lines.append(json.dumps({"type": "footer", "end_time_s": 9.0,
                                 "requests_written": len(records)}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_clean_trace_is_valid(tmp_path: Path) -> None:
    r = validate_trace(write(tmp_path / "t.jsonl", [
        {"id": "a", "sent_s": 0.0, "event_times_s": [0.1, 0.2], "end_s": 0.2,
         "output_tokens": 2}]))
    assert r.ok and r.requests == 1 and r.warnings == []


def test_inconsistent_times_are_errors(tmp_path: Path) -> None:
    r = validate_trace(write(tmp_path / "t.jsonl", [
        {"id": "a", "sent_s": 0.0, "event_times_s": [0.3, 0.2], "end_s": 0.3},
        {"id": "b", "sent_s": 1.0, "event_times_s": [1.1], "end_s": 1.05},
        {"id": "b", "sent_s": 2.0, "event_times_s": [2.1], "event_tokens": [1, 2],
         "end_s": 2.2},
    ]))
    assert not r.ok
    text = "\n".join(r.errors)
    assert "line 2: field 'event_times_s': times go backwards" in text
    assert "line 3: field 'end_s'" in text and "before the last event" in text
    assert "line 4: field 'id': duplicate" in text
    assert "line 4: field 'event_tokens'" in text


def test_schema_errors_and_missing_footer(tmp_path: Path) -> None:
    r = validate_trace(write(tmp_path / "t.jsonl", [
        {"id": "a", "event_times_s": [0.1]},
        {"id": "b", "sent_s": 0.0, "status": "exploded"},
    ], footer=False))
    text = "\n".join(r.errors)
    assert "line 2: field 'sent_s'" in text
    assert "line 3: field 'status'" in text
    assert any("no footer" in w for w in r.warnings)


def test_token_count_disagreement_is_a_warning(tmp_path: Path) -> None:
    r = validate_trace(write(tmp_path / "t.jsonl", [
        {"id": "a", "sent_s": 0.0, "event_times_s": [0.1, 0.2], "event_tokens": [1, 3],
         "end_s": 0.2, "output_tokens": 5}]))
    assert r.ok
    assert any("field 'output_tokens'" in w for w in r.warnings)
