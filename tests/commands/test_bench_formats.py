"""`ridgeline bench --format table|plain|markdown|csv|json|vllm` through the installed command,
stdout a pipe: csv and json parse (the numbers checked against the trace by hand), markdown
is pipe tables with vLLM's block in a text block, plain is whole rows, vllm is vLLM's block
alone, and a wrong name is one `error:` line."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).with_name("ridgeline")
RIDGELINE = str(BIN) if BIN.exists() else shutil.which("ridgeline") or "ridgeline"
BOX = set("│┃━─┏┓┗┛┡┩└┘├┤╇╋┼")
VLLM_HEAD = "============ Serving Benchmark Result ============"
POINT = ["--target", "emulator", "--rate", "20", "--requests", "10", "--output", "fixed:8",
         "--prompt", "fixed:64", "--no-progress"]


def bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([RIDGELINE, "bench", *args], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return proc


def hand_ttft_ms(trace: Path) -> list[float]:
    """TTFT of each ok request from the trace's own times: first output event - send."""
    out = []
    for line in trace.open():
        r = json.loads(line)
        if r.get("type") == "request" and r["status"] == "ok":
            out.append((r["event_times_s"][0] - r["sent_s"]) * 1e3)
    return out


def test_csv_is_one_table_whose_numbers_are_the_traces(tmp_path: Path) -> None:
    proc = bench(tmp_path, *POINT, "--trace", "t.jsonl", "--format", "csv")
    rows = list(csv.reader(io.StringIO(proc.stdout)))
    # Every line of stdout is a row of one table: no text lines, no vLLM block.
    assert VLLM_HEAD not in proc.stdout and len({len(r) for r in rows}) == 1, proc.stdout
    table = [dict(zip(rows[0], r, strict=True)) for r in rows[1:]]
    ttft = next(r for r in table if r["metric"] == "ttft_ms")
    hand = hand_ttft_ms(tmp_path / "t.jsonl")
    assert len(hand) == 10
    # A run this short has no steady part to cut: the window is the whole run.
    assert int(ttft["n"]) == len(hand)
    assert abs(float(ttft["mean"]) - sum(hand) / len(hand)) < 1e-6
    assert abs(float(ttft["max"]) - max(hand)) < 1e-6
    assert float(ttft["mean_ci_low"]) <= float(ttft["mean"]) <= float(ttft["mean_ci_high"])
    # the lines that are not the table went to stderr
    assert "trace: " in proc.stderr and "windowed" in proc.stderr


def test_json_parses_and_markdown_fences_vllms_block(tmp_path: Path) -> None:
    js = json.loads(bench(tmp_path, *POINT, "--trace", "j.jsonl", "--format", "json").stdout)
    n_ok = len(hand_ttft_ms(tmp_path / "j.jsonl"))
    assert js["analysis"]["latency"]["ttft_ms"]["count"] <= n_ok == 10
    md = bench(tmp_path, *POINT, "--format", "markdown").stdout
    lines = md.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("| metric |"))
    assert lines[head + 1].startswith("|---|---:|") and lines[head + 2].startswith("| TTFT")
    start = lines.index("```text")
    assert lines[start + 1] == VLLM_HEAD and "```" in lines[start + 2:]
    assert not BOX & set(md)


def test_plain_rows_whole_then_vllms_block_and_vllm_alone(tmp_path: Path) -> None:
    plain = bench(tmp_path, *POINT, "--format", "plain").stdout
    assert "…" not in plain and not BOX & set(plain)
    lines = plain.splitlines()
    ttft = next(ln for ln in lines if ln.startswith("TTFT (ms)"))
    assert ttft.split()[2] == "10"  # the n column, whole
    assert lines.index(VLLM_HEAD) > lines.index(ttft)
    only = bench(tmp_path, *POINT, "--format", "vllm").stdout.splitlines()
    assert only[0] == VLLM_HEAD and only[-1] == "=" * 50
    assert not any(ln.startswith("TTFT (ms)") for ln in only)
    # Nothing asked for (no --trace, --save-result, --result-dir): nothing written here.
    assert list(tmp_path.iterdir()) == []


def test_sweep_csv_one_row_per_point_in_order(tmp_path: Path) -> None:
    proc = bench(tmp_path, "--target", "emulator", "--concurrency", "1,2", "--requests", "6",
                 "--output", "fixed:8", "--prompt", "fixed:64", "--no-progress",
                 "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [r["point"] for r in rows] == ["concurrency=1", "concurrency=2"]
    assert [int(r["ok"]) + int(r["failed"]) for r in rows] == [6, 6]
    assert VLLM_HEAD not in proc.stdout


def test_unknown_format_is_one_error_line(tmp_path: Path) -> None:
    proc = subprocess.run([RIDGELINE, "bench", "--target", "emulator", "--format", "yaml"],
                          capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert proc.returncode == 2
    errs = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errs) == 1 and "--format" in errs[0]
    assert all(f in errs[0] for f in ("plain", "markdown", "csv", "json", "vllm"))
    assert list(tmp_path.iterdir()) == []  # a refused run writes nothing
