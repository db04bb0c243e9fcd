"""What people read: the installed `ridgeline` command with stdout a pipe (as in a CI log or
`| cat`) prints full-width plain tables, no cell cut; `--format csv|json|markdown` parse;
the default estimate is short and shows the model's error."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.commands.options import OUTPUT_FORMATS
from ridgeline.report.tables import FORMATS

BIN = Path(sys.executable).with_name("ridgeline")
RIDGELINE = str(BIN) if BIN.exists() else shutil.which("ridgeline") or "ridgeline"
BOX = set("│┃━─┏┓┗┛┡┩└┘├┤╇╋┼")


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The installed command, stdout and stderr pipes (not a terminal)."""
    return subprocess.run([RIDGELINE, *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def ok(*args: str) -> str:
    proc = run(*args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def assert_uncut(text: str) -> None:
    """No ellipsis (a cut cell) and no box drawing (a rich table) in piped output."""
    assert "…" not in text, text
    assert not BOX & set(text), text


def test_formats_agree() -> None:
    assert OUTPUT_FORMATS == FORMATS


def test_estimate_sweep_piped_is_plain_and_whole() -> None:
    text = ok("estimate", "-m", "llama-3.1-70b", "--tp", "4", "-b", "1,8,64",
              "-g", "h100-sxm,h200")
    assert_uncut(text)
    # Every row whole: the GPU name, the batch and the fits column on one line.
    rows = [ln for ln in text.splitlines() if ln.startswith(("h100-sxm ", "h200 "))]
    assert len(rows) == 6 and all(ln.rstrip().endswith(("yes", "GiB)")) for ln in rows)
    header = next(ln for ln in text.splitlines() if ln.startswith("hardware"))
    assert "TTFT serving ms" in header and "static prefill ms" in header


def test_estimate_csv_and_json_parse() -> None:
    text = ok("estimate", "-b", "1,8", "-p", "512,1024", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 4
    assert {r["B"] for r in rows} == {"1", "8"} and {r["S"] for r in rows} == {"512", "1024"}
    assert all(float(r["TPOT ms"]) > 0 for r in rows)
    js = json.loads(ok("estimate", "-b", "1,8", "--format", "json"))
    assert len(js["rows"]) == 2
    one = json.loads(ok("estimate", "--format", "json"))
    assert one["result"]["batch_seqs"] == 32


def test_single_estimate_csv_has_every_table() -> None:
    text = ok("estimate", "--details", "--format", "csv")
    blocks = [list(csv.reader(io.StringIO(b))) for b in text.split("\n\n") if b.strip()]
    assert len(blocks) == 3 and all(b[0][0] == "table" for b in blocks)
    phases = blocks[0]
    assert phases[0][1:3] == ["phase", "time"]
    assert any(r[1].startswith("static-batch prefill") for r in phases[1:])


def test_markdown_table() -> None:
    text = ok("estimate", "-b", "1,8", "--format", "markdown")
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("| hardware"))
    assert lines[head + 1].startswith("|---") and lines[head + 2].startswith("| h100-sxm")


def test_bad_format_is_one_line_exit_2() -> None:
    proc = run("estimate", "--format", "yaml")
    assert proc.returncode == 2
    errs = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errs) == 1 and "--format" in errs[0] and "csv" in errs[0]


def test_default_estimate_is_short_and_shows_model_error() -> None:
    text = ok("estimate")
    assert len(text.splitlines()) <= 20, text
    assert "model error (CV)" in text and "±" in text
    assert "shared/data" not in text and "seed 0" not in text and ".csv" not in text
    full = ok("estimate", "--assumptions")
    assert len(full.splitlines()) > len(text.splitlines())
    assert "shared/data" not in full and "seed 0" not in full and "mlp.csv" not in full


def test_estimate_memory_sized_as_the_engine() -> None:
    """The workspace is that of one max_num_batched_tokens step (8,192 tokens), by hand for
    Llama-3.1-8B (hidden 4096, 32 q heads, 8 KV heads of 128, MLP 14336, vocab 128256):
    (2*4096 + 4096 + 2*1024 + 4096 + 3*14336) * 2 B per token * 8192 + 256 rows of fp32
    logits; so B=32 fits and the KV capacity is the vLLM start-up log's (within a block)."""
    d = json.loads(ok("estimate", "--json"))
    per_token = (2 * 4096 + 4096 + 2 * 1024 + 4096 + 3 * 14336) * 2
    assert d["result"]["workspace_bytes"] == pytest.approx(per_token * 8192 + 256 * 128256 * 4)
    assert abs(d["result"]["kv_capacity_tokens"] - d["vllm_kv_log"]["kv_cache_tokens"]) < 16
    big = json.loads(ok("estimate", "-m", "llama-3.1-70b", "--tp", "4", "-b", "64", "--json"))
    # 64 x 1,280 tokens x 320 KiB / 4 GPUs = 6.25 GiB of KV per GPU: it fits.
    assert big["result"]["memory_fits"]
    # Serving TTFT (one request, chunked, joining running decodes) is far below the
    # static-batch prefill of all 64 prompts, and above one prompt's own prefill.
    r = big["result"]
    assert r["serving_ttft_s"] < r["prefill_s"] / 8


AIPERF = Path(__file__).parents[1] / "data" / "peers" / "aiperf" / "clean"


def test_simulate_single_point_is_short_with_model_error() -> None:
    text = ok("simulate", "--rate", "5", "-n", "300")
    assert_uncut(text)
    assert len(text.splitlines()) <= 20, text
    assert "sampling CI" in text and "model error (80% interval / CV)" in text
    ttft = next(ln for ln in text.splitlines() if ln.startswith("TTFT (ms)"))
    # the model's error on the TTFT row itself: its mean's and P99's 80% intervals
    assert re.search(r"mean \[[0-9.]+, [0-9.]+\], P99 \[[0-9.]+, [0-9.]+\]", ttft), ttft
    assert "shared/data" not in text and "0.000 ms" not in text


def test_simulate_csv_has_the_model_error_column() -> None:
    rows = list(csv.DictReader(io.StringIO(ok("simulate", "--rate", "5", "-n", "200",
                                              "--format", "csv"))))
    ttft = next(r for r in rows if r["metric"] == "ttft_ms")
    assert float(ttft["p50"]) > 0
    lo, hi = map(float, re.match(r"mean \[([0-9.,]+), ([0-9.,]+)\]",
                                 ttft["model_error"]).groups())  # type: ignore[union-attr]
    assert lo < float(ttft["mean"]) < hi   # the mean's 80% model-error interval holds it


def test_simulate_sweep_csv_and_knee_names() -> None:
    rows = list(csv.DictReader(io.StringIO(ok("simulate", "--rate", "2,4", "-n", "150",
                                              "--format", "csv"))))
    assert [r["rate (req/s)"] for r in rows] == ["2", "4"]
    assert all(float(r["TTFT P99 (ms)"]) > 0 for r in rows)
    text = ok("simulate", "--rate", "2,4", "-n", "150")
    assert_uncut(text)
    # Two light loads: P99 TTFT stays within 3x, so no knee is claimed at the range's end.
    assert "knee (TTFT p99 <= 3x): no knee within the range" in text
    assert "◀" not in text


def test_analyze_piped_warns_once_and_gives_the_whole_run_figure() -> None:
    trace = str(AIPERF / "profile_export.jsonl")
    text = ok("analyze", trace)
    assert_uncut(text)
    thin = [ln for ln in text.splitlines() if "fewer than 10 samples beyond" in ln]
    assert len(thin) == 1 and "P99.9" not in text
    # Every event one token: one ITL row, not two identical ones.
    assert sum(ln.startswith("ITL") for ln in text.splitlines()) == 1
    # AIPerf's own mean TTFT over all 40 requests, from its per-record export.
    recs = [json.loads(ln) for ln in (AIPERF / "profile_export.jsonl").open()]
    mean_ms = sum(r["metrics"]["time_to_first_token"]["value"] for r in recs) / len(recs)
    window = next(ln for ln in text.splitlines() if "--window all" in ln)
    assert f"TTFT mean {mean_ms:.3g} ms" in window
    assert "INCONSISTENT" not in text


def test_analyze_formats_parse_and_input_format_still_works() -> None:
    trace = str(AIPERF / "profile_export.jsonl")
    rows = list(csv.DictReader(io.StringIO(ok("analyze", trace, "--format", "csv"))))
    js = json.loads(ok("analyze", trace, "--format", "json"))["latency"]["ttft_ms"]
    assert rows[0]["metric"] == "ttft_ms" and rows[0]["n"] == "35" and js["count"] == 35
    # One number per cell: the same values as the JSON, the CI around each.
    assert float(rows[0]["mean"]) == js["mean"]
    assert float(rows[0]["p99"]) == js["percentiles"]["p99"]["value"]
    assert float(rows[0]["p50_ci_low"]) <= float(rows[0]["p50"]) <= float(rows[0]["p50_ci_high"])
    assert rows[0]["p99_thin_tail"] == "yes" and rows[0]["p50_thin_tail"] == ""
    # An input format's name given to --format is still read as the input format.
    assert "TTFT (ms)" in ok("analyze", trace, "--format", "aiperf")
    assert "TTFT (ms)" in ok("analyze", trace, "-f", "aiperf", "--format", "plain")
    proc = run("analyze", trace, "--format", "bogus")
    assert proc.returncode == 2 and "--format" in proc.stderr


def test_plan_piped_logs_progress_and_its_tables_parse_as_csv() -> None:
    env = {**os.environ, "RIDGELINE_PROGRESS_INTERVAL_S": "0"}
    proc = subprocess.run([RIDGELINE, "plan", "--rate", "2", "--slo", "ttft_ms:2000",
                           "--goodput-target", "0.5", "--requests", "200",
                           "--verify-requests", "200", "--tp", "1", "--max-replicas", "1",
                           "--format", "csv"], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, env=env)
    assert proc.returncode == 0, proc.stderr
    # In a log: lines on stderr with the stage, done/total and an ETA; no bar drawing.
    progress = [ln for ln in proc.stderr.splitlines() if ln.startswith("plan: screening")]
    assert progress and any("ETA" in ln for ln in progress)
    assert "━" not in proc.stderr
    blocks = [list(csv.reader(io.StringIO(b))) for b in proc.stdout.split("\n\n") if b.strip()]
    verified = next(b for b in blocks if b[0][:3] == ["table", "config", "$/hour"])
    assert len(verified) >= 2 and verified[1][2] == "2.50"


def test_log_progress_line_and_eta() -> None:
    from ridgeline.report.progress import LogProgress

    log = io.StringIO()
    ticks = iter([0.0, 0.0, 2.0, 8.0, 40.0])
    with LogProgress("simulate", every_s=5.0, stream=log, clock=ticks.__next__) as p:
        t = p.add_task("simulating 4 req/s", total=1000)
        p.update(t, completed=100)   # 2 s: within the interval, no line
        p.update(t, completed=200)   # 8 s: 20% in 8 s -> 32 s to go
        p.update(t, completed=1000)  # 40 s: done
    assert log.getvalue().splitlines() == [
        "simulate: simulating 4 req/s 200/1,000 (20%), 8 s elapsed, ETA 32 s",
        "simulate: simulating 4 req/s 1,000/1,000 (100%), 40 s elapsed"]


def test_bench_piped_prints_whole_plain_tables(tmp_path: Path) -> None:
    proc = subprocess.run([RIDGELINE, "bench", "--target", "emulator", "--rate", "8",
                           "--requests", "20", "--output", "fixed:8", "--no-progress",
                           "--trace", str(tmp_path / "b.jsonl")], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert_uncut(proc.stdout)
    header = next(ln for ln in proc.stdout.splitlines() if ln.startswith("metric"))
    assert "P99 [sampling CI]" in header
    ttft = next(ln for ln in proc.stdout.splitlines() if ln.startswith("TTFT (ms)"))
    assert ttft.split()[2] == "20"  # n, whole: the row is not cut


def test_simulate_sweep_logs_progress_when_piped() -> None:
    env = {**os.environ, "RIDGELINE_PROGRESS_INTERVAL_S": "0"}
    proc = subprocess.run([RIDGELINE, "simulate", "--rate", "2,4", "-n", "3000"],
                          capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("simulate: simulating")]
    assert any("4 req/s" in ln and "/6,000" in ln for ln in lines), proc.stderr
    assert "━" not in proc.stderr


def test_littles_law_edge_effect_is_explained_not_shouted() -> None:
    """11 requests sent 1 s apart, each 2 s in the system, measured over 10 s: by hand
    L = (9 x 2 + 1 + 0) / 10 = 1.9, lambda W = 1.1 x 2 = 2.2, L/(lambda W) = 0.864 (off by
    more than 10%), the number in system grows by 1 only (not overloaded), and the window
    is shorter than 10 W: an edge effect, said in words, not as INCONSISTENT."""
    import numpy as np

    from ridgeline.metrics.analysis import Window, _little
    from ridgeline.metrics.render import _little_status

    sent = np.arange(11, dtype=np.float64)
    lt = _little(sent, sent + 2.0, Window(0.0, 10.0, "given"))
    assert lt.ratio == pytest.approx(1.9 / 2.2)
    assert lt.status == "inconsistent" and lt.edge_effect
    assert "edge effects explain" in _little_status(lt) and "INCONSISTENT" not in \
        _little_status(lt)
    lt.edge_effect = False
    assert _little_status(lt) == "INCONSISTENT"
