"""The reader's compiled scanner (trace/_scan.c) gives exactly what the exact path
(`json.loads` per line + `build_columns`) gives: the same columns bit for bit, the same
warnings, the same errors, on real traces (`simulate`'s, a bench-shaped one) and on lines
made to trip it. Where it cannot promise that, it must decline (CANNOT) so that the Python
paths read the batch; the tests check both that it declines and that it really reads the
ordinary batches (a scanner that declined everything would pass the equality tests alone).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ridgeline.trace.reader as reader
from ridgeline.errors import RidgelineError
from ridgeline.trace.table import _ColumnSink
from tests.bench_shaped_trace import write_trace
from tests.trace.test_trace_reader_fast import HEADER, TRICKY, assert_same, plain, write

pytestmark = pytest.mark.skipif(reader._cscan is None, reason="compiled scanner not built")
EXE = Path(sys.executable).parent / "ridgeline"


class Spy:
    """Counts the scanner's answers (0 done, 1 need more, 2 cannot, 3 full)."""

    def __init__(self) -> None:
        self.status: list[int] = []

    def scan(self, *args):  # type: ignore[no-untyped-def]
        out = _SCAN(*args)
        self.status.append(out[0])
        return out


_SCAN = reader._cscan.scan if reader._cscan is not None else None


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    s = Spy()
    monkeypatch.setattr(reader, "_cscan", s)
    return s


def scan_one(line: str | bytes) -> tuple[int, _ColumnSink]:
    """The scanner's answer for one line, and what it wrote."""
    sink = _ColumnSink()
    sink.reserve(4, 64)
    data = line.encode() if isinstance(line, str) else line
    st, *_ = _SCAN(data + b"\n", 0, True, 10, sink.columns(), 0, 0, sink.ids,
                   sink.error_kind, sink.error, json.loads)
    return st, sink


def test_simulate_trace_compiled_equals_exact(tmp_path: Path, spy: Spy) -> None:
    """A real `simulate` trace (1 us times, one token per event): bit for bit."""
    p = tmp_path / "sim.jsonl"
    proc = subprocess.run([str(EXE), "simulate", "--requests", "3000", "--rate", "20",
                           "--prompt", "lognormal:mean=800,sigma=0.8",
                           "--output", "lognormal:mean=60,sigma=0.8", "--trace", str(p)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    exact = reader._read_trace(p, fast=False)
    assert len(exact) == 3000 and exact.footer is not None
    for batch in (7, 256, 100_000):
        spy.status.clear()
        reader.BATCH_LINES, old = batch, reader.BATCH_LINES
        try:
            assert_same(exact, reader._read_trace(p, parallel=False))
        finally:
            reader.BATCH_LINES = old
        # Every batch but the header's (not offered: no header yet) and the footer's
        # (declined) was the scanner's own.
        n_batches = -(-(len(exact) + 2) // batch)
        assert spy.status.count(2) == (0 if n_batches == 1 else 1)
        assert spy.status.count(0) + spy.status.count(1) >= n_batches - 2


def test_bench_shaped_trace_compiled_equals_exact(tmp_path: Path, spy: Spy,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/speed/bench_analyze.py's trace shape (8-token chunks, 1% HTTP errors), read
    by two processes as a large file is: bit for bit against the exact path."""
    p = tmp_path / "bench.jsonl"
    write_trace(p, 4000, seed=3)
    monkeypatch.setattr(reader, "PARALLEL_MIN_BYTES_COMPILED", 0)
    monkeypatch.setattr(reader, "BATCH_LINES", 300)
    monkeypatch.setattr(reader, "_cpus", lambda: 2)
    exact = reader._read_trace(p, fast=False)
    assert (exact.status != 0).sum() > 10
    assert_same(exact, reader.read_trace(p))
    assert spy.status.count(0) >= 5  # this process's part: read by the scanner


# Lines the scanner reads itself (the exact path reads them the same way).
ACCEPTED = [t for t in TRICKY if '"id":"dup"' not in t and '"id":1017' not in t] + [
    '{"type":"request","id":"","sent_s":1e-7,"event_times_s":[1E+2,1e400,-1e-400,123456789012'
    '34567890.25,0.30000000000000004],"prompt_tokens":5.0,"output_tokens":1e3}',
    '{"id":"no-type","sent_s":-0,"end_s":-0.0,"status":"cutoff","token_count_source":'
    '"simulated","error":null,"error_kind":"x"}',
    '{"type":"request","id":"s\\ud800\\"","sent_s":1,"error":"\\u00e9\\n\\t\\/"}',
    '\x0c{"type":"request","id":"ff","sent_s":1}\x0b',
    '{"type":"request","id":"deep","sent_s":1,"x":' + "[" * 30 + "]" * 30 + "}",
    '{"type":"request","id":"big","sent_s":1,"x":123456789012345678901234567890}',
]

# Lines it must decline: the exact path errs on them, or reads them in a way the scanner
# does not promise to reproduce (then the Python paths read the batch).
DECLINED = [
    '{"type":"request","id":"dup","sent_s":3,"sent_s":4}',
    '{"type":"request","id":17,"sent_s":3}',
    '{"type":"request","id":"nan","sent_s":NaN}',
    '{"type":"request","id":"inf","sent_s":1,"event_times_s":[Infinity]}',
    '{"type":"request","id":"ctl","sent_s":1,"error":"a\tb"}',
    '{"type":"request","id":"key","sent\\u005fs":1}',
    '{"type":"request","id":"st","sent_s":1,"status":null}',
    '{"type":"request","id":"neg","sent_s":1,"prompt_tokens":-1}',
    '{"type":"request","id":"frac","sent_s":1,"output_tokens":2.5}',
    '{"type":"request","id":"huge","sent_s":1,"output_tokens":1e19}',
    '{"type":"footer","end_time_s":1}',
    '{"type":"request","id":"more","sent_s":1} {"id":"x"}',
    '{"type":"request","id":"bool","sent_s":1,"event_times_s":[true]}',
    '{"type":"request","id":"false","sent_s":1,"event_times_s":false}',
    '{"type":"request","id":"tokf","sent_s":1,"event_times_s":[1],"event_tokens":[1.0]}',
    '{"type":"request","id":"tokn","sent_s":1,"event_times_s":[1],"event_tokens":[1,2]}',
    # past the int32 column: the exact path's error
    '{"type":"request","id":"tokbig","sent_s":1,"event_times_s":[1,2],'
    '"event_tokens":[1,2147483648]}',
    '{"type":"request","id":"deep","sent_s":1,"x":' + "[" * 40 + "]" * 40 + "}",
    '{"type":"request","id":"nosent"}',
    '{}',
    '{"type":"request","id":"lead","sent_s":01}',
    '{"type":"request","id":"trunc","sent_s":1',
    '\ufeff{"type":"request","id":"bom","sent_s":1}',
]


@pytest.mark.parametrize("line", ACCEPTED)
def test_scanner_reads_these_lines_as_json_does(line: str) -> None:
    st, sink = scan_one(line)
    assert st == 1, line  # read to the end (no CANNOT)
    obj = json.loads(line.strip(" \t\r\n\x0b\x0c"))
    assert sink.ids == [str(obj["id"])]
    assert sink.error == [obj.get("error")]
    assert sink.arrays["sent_s"][:1].tobytes() == np.array([obj["sent_s"]], float).tobytes()
    times = obj.get("event_times_s") or []
    assert sink.arrays["event_times_s"][:len(times)].tobytes() == \
        np.array(times, dtype=np.float64).tobytes()


@pytest.mark.parametrize("line", [*DECLINED, b'{"type":"request","id":"\xff","sent_s":1}',
                                  b'{"type":"request","id":"a","sent_s":1,"x":"\xc3"}'])
def test_scanner_declines_these_lines(line: str | bytes) -> None:
    st, sink = scan_one(line)
    assert st == 2, line
    assert sink.ids == []  # nothing of a declined line is kept


@pytest.mark.parametrize("batch", [1, 4, 1000])
@pytest.mark.parametrize("line", ACCEPTED + DECLINED + ["", "   "])
def test_reader_with_odd_line_equals_exact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          line: str, batch: int) -> None:
    """Any of these lines among ordinary ones, at any batch size: the same trace, or the
    same error, as the exact path."""
    monkeypatch.setattr(reader, "BATCH_LINES", batch)
    lines = [HEADER] + [plain(i) for i in range(6)] + [line] + [plain(i) for i in range(6, 12)]
    p = tmp_path / "t.jsonl"
    write(p, lines)
    try:
        exact = reader._read_trace(p, fast=False)
    except RidgelineError as exc:
        with pytest.raises(RidgelineError) as fast:
            reader.read_trace(p)
        assert str(fast.value) == str(exc)
        return
    assert_same(exact, reader.read_trace(p))


@pytest.mark.parametrize("cut", [1, 30, 90, -1])
@pytest.mark.parametrize("footer", [False, True])
def test_truncation_and_missing_footer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       cut: int, footer: bool) -> None:
    """Crash safety through the scanner: a cut last line is skipped with the same warning,
    a missing footer is reported, at batch edges too."""
    monkeypatch.setattr(reader, "BATCH_LINES", 5)
    lines = [HEADER] + [plain(i) for i in range(14)]
    if footer:
        lines.append(json.dumps({"type": "footer", "end_time_s": 9.0, "requests_written": 14}))
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n" + plain(99)[:cut])
    exact = reader._read_trace(p, fast=False)
    assert_same(exact, reader.read_trace(p))
    assert exact.warnings


def test_scanner_fills_full_columns_in_steps(spy: Spy, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A gzip trace has no size to reserve the columns from: they run out mid-batch, are
    grown and the batch goes on (FULL); the same values in the end."""
    import gzip

    monkeypatch.setattr(reader, "BATCH_LINES", 1000)

    p = tmp_path / "t.jsonl.gz"
    with gzip.open(p, "wt") as fh:
        fh.write("\n".join([HEADER] + [plain(i) for i in range(9000)]) + "\n")
    exact = reader._read_trace(p, fast=False)
    assert_same(exact, reader.read_trace(p))
    assert 3 in spy.status and spy.status.count(0) >= 1


@pytest.mark.parametrize("fast", [False, True])
def test_token_count_past_int32_is_one_error(tmp_path: Path, fast: bool) -> None:
    """event_tokens is an int32 column: a count above 2**31 - 1 is refused with the line and
    the field named (not wrapped around), by every path; the maximum itself is kept."""
    big = ('{"type":"request","id":"b","sent_s":1,"event_times_s":[1,2],'
           '"event_tokens":[2147483647,%d]}')
    p = tmp_path / "t.jsonl"
    write(p, [HEADER, plain(0), big % 2147483647])
    t = reader._read_trace(p, fast=fast)
    assert t.event_tokens.dtype == np.int32
    assert t.event_tokens[-2:].tolist() == [2147483647, 2147483647]
    write(p, [HEADER, plain(0), big % 2147483648])
    with pytest.raises(RidgelineError, match=r"line 3: field 'event_tokens': .*<= 2147483647"):
        reader._read_trace(p, fast=fast)
