"""`ridgeline report`, `ridgeline plot ...`, `--report` on simulate/bench, `ridgeline ui`:
through the installed console script (exit codes, one-line errors, files written)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
SMALL = ["--requests", "80", "--prompt", "fixed:200", "--output", "fixed:16"]


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=timeout)


def assert_usage_error(r: subprocess.CompletedProcess[str], *words: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    for w in words:
        assert w in r.stderr, r.stderr


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("traces")
    r = run("simulate", "--rate", "4,8,16", *SMALL, "--trace", str(d / "sweep.jsonl"),
            "--timeline", str(d / "tl.csv"))
    assert r.returncode == 0, r.stderr
    r = run("simulate", "--concurrency", "4", *SMALL, "--trace", str(d / "closed.jsonl"))
    assert r.returncode == 0, r.stderr
    return {"a": d / "sweep.rate4.jsonl", "b": d / "sweep.rate8.jsonl",
            "sweep": d / "sweep.rate*.jsonl", "timeline": d / "tl.rate16.csv",
            "closed": d / "closed.jsonl", "dir": d}


@pytest.mark.parametrize("kind", ["roofline", "ops"])
def test_plot_estimate_figures(tmp_path, kind):
    out = tmp_path / f"{kind}.svg"
    r = run("plot", kind, "--model", "qwen2.5-7b", "--hardware", "h20", "--batch", "8",
            "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_text().lstrip().startswith("<?xml") and f"plot: {out}" in r.stdout


def test_plot_trace_figures(tmp_path, traces):
    for args, name in (((str(traces["a"]), str(traces["b"])), "cdf"),
                       ((str(traces["timeline"]),), "timeline"),
                       ((str(traces["sweep"]),), "load")):
        out = tmp_path / f"{name}.png"
        r = run("plot", name, *args, "--out", str(out))
        assert r.returncode == 0, r.stderr
        assert out.read_bytes().startswith(b"\x89PNG")


def test_report_html_and_markdown(tmp_path, traces):
    out = tmp_path / "r.html"
    r = run("report", str(traces["a"]), str(traces["b"]), "--sweep", str(traces["sweep"]),
            "--timeline", str(traces["timeline"]), "--estimate-model", "llama-3.1-8b",
            "--slo", "ttft_ms<=500", "--out", str(out))
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    for section in ("Prediction (roofline model)", "Latency vs load", "Runs and metrics",
                    "Distributions", "Comparison", "Timelines"):
        assert f">{section}</h2>" in html
    assert html.count("data:image/png;base64,") == 5  # roofline, ops, load, cdf, timeline
    assert "http://" not in html and "https://" not in html  # nothing to fetch
    md = tmp_path / "r.md"
    r = run("report", str(traces["a"]), str(traces["b"]), "--sweep", str(traces["sweep"]),
            "--estimate-model", "llama-3.1-8b", "--markdown", "--out", str(md))
    assert r.returncode == 0, r.stderr
    text = md.read_text()
    assert "## Run:" in text and "## ridgeline compare" in text
    assert "(r_files/cdf.png)" in text and (tmp_path / "r_files" / "cdf.png").exists()
    assert "## Prediction (roofline model)" in text and "## Latency vs load" in text
    # The sweep's table: a header, the separator, then one row per rate of the sweep.
    lines = text.splitlines()
    at = lines.index(next(x for x in lines if x.startswith("| series | rate (req/s) |")))
    head, sep, rows = lines[at], lines[at + 1], lines[at + 2:at + 5]
    n_cols = head.count(" | ") + 1
    assert head.endswith(" |") and sep == "|" + "---|" * n_cols and n_cols == 9
    assert [r.split(" | ")[1].split()[0] for r in rows] == ["4", "8", "16"] and lines[at + 5] == ""


def test_simulate_report_option(tmp_path):
    out = tmp_path / "sim.html"
    r = run("simulate", "--rate", "4,16", *SMALL, "--report", str(out))
    assert r.returncode == 0, r.stderr
    assert f"report: {out}" in r.stdout
    html = out.read_text()
    assert ">Latency vs load</h2>" in html and ">Timelines</h2>" in html
    assert ">Prediction (roofline model)</h2>" in html


@pytest.mark.slow
def test_bench_report_option(tmp_path):
    out = tmp_path / "bench.html"
    r = run("bench", "--target", "emulator", "--model", "llama-3.1-8b", "--rate", "8",
            "--requests", "30", "--prompt", "fixed:100", "--output", "fixed:8",
            "--trace", str(tmp_path / "b.jsonl"), "--no-progress", "--report", str(out),
            "--telemetry-interval-ms", "100")
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert "ridgeline-emulator" in html
    # the emulator's /metrics, sampled beside the trace, plotted on the run's time axis
    assert (tmp_path / "b.telemetry.jsonl").exists()
    assert f'alt="Server telemetry: {tmp_path / "b.jsonl"}"' in html
    from ridgeline.metrics.telemetry import telemetry_series
    from ridgeline.trace.reader import read_trace

    trace = read_trace(str(tmp_path / "b.jsonl"))
    names = {name for _, name, _ in telemetry_series(tmp_path / "b.jsonl", trace.header)}
    assert {"kv_usage", "running", "waiting"} <= names


@pytest.mark.parametrize("args,words", [
    (("plot", "roofline", "--out", "x.gif"), ("--out",)),
    (("plot", "cdf", "missing.jsonl", "--out", "x.png"), ("not found",)),
    (("plot", "timeline", "README.md", "--out", "x.png"), ("timeline",)),
    (("plot", "roofline", "--model", "nope", "--out", "x.png"), ("model",)),
    (("report", "missing.jsonl"), ("not found",)),
    (("report",), ("nothing to report",)),
    (("report", "--estimate-model", "llama-3.1-8b", "--out", "r.txt"), ("--out",)),
    (("report", "--estimate-model", "llama-3.1-8b", "--calibration", "README.md"),
     ("--calibration",)),
    (("report", "--sweep", "nothing*.jsonl"), ("--sweep",)),
    (("simulate", "--rate", "4", "--report", "r.txt"), ("--report",)),
    (("bench", "--target", "emulator", "--rate", "4", "--report", "r.pdf"), ("--report",)),
    (("ui", "--port", "70000"), ("--port",)),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words):
    r = subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])
    assert_usage_error(r, *words)


def test_sweep_trace_without_a_rate_is_refused(traces):
    r = run("report", "--sweep", str(traces["closed"]))
    assert_usage_error(r, "--sweep", "rate")


def test_report_of_a_peer_result_file(tmp_path):
    data = Path(__file__).parents[1] / "data"
    peers = sorted(p for p in data.rglob("*.json") if "vllm" in p.name.lower())
    if not peers:
        pytest.skip("no vLLM result file in tests/data")
    out = tmp_path / "peer.html"
    r = run("report", str(peers[0]), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert ">Runs and metrics</h2>" in out.read_text()


def test_ui_port_in_use_is_a_one_line_error():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        r = run("ui", "--port", str(s.getsockname()[1]), timeout=60)
        assert_usage_error(r, "--port")
    finally:
        s.close()


def test_estimate_json_of_the_report_matches_the_cli(tmp_path):
    """The report's prediction numbers are those of `ridgeline estimate --json`."""
    from ridgeline.report.estimate_view import estimate_view

    cli = json.loads(run("estimate", "--model", "mixtral-8x7b", "--hardware", "h200", "--tp",
                         "2", "--batch", "48", "--weights", "fp8", "--ops", "--json").stdout)
    v = estimate_view("mixtral-8x7b", "h200", tp=2, batch=48, weights="fp8")
    assert v["result"]["tpot_s"] == cli["result"]["tpot_s"]
    assert v["result"]["ttft_s"] == cli["result"]["ttft_s"]
    assert v["ops"]["decode"] == cli["ops"]["decode"]


def test_report_includes_the_advice_of_ridgeline_advise(tmp_path):
    """The report's advice section is what `ridgeline advise` prints for the same trace,
    word for word: the whole text, on a run with findings, recommendations and predictions."""
    import html
    import os
    import re

    hot = tmp_path / "hot.jsonl"  # saturated, memory-bound: three findings
    r = run("simulate", "--rate", "40", "--requests", "200", "--prompt", "fixed:3000",
            "--output", "fixed:64", "--trace", str(hot))
    assert r.returncode == 0, r.stderr
    width = 100
    cli = subprocess.run([RIDGELINE, "advise", str(hot)], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "COLUMNS": str(width)})
    assert cli.returncode == 0, cli.stderr
    assert "Predicted:" in cli.stdout and "3. [" in cli.stdout

    out = tmp_path / "a.md"
    assert run("report", str(hot), "--markdown", "--out", str(out)).returncode == 0
    md = out.read_text()
    start = md.index("## Advice\n\n") + len("## Advice\n\n")
    # The report's next section starts with "## "; advise's own headings are "## Advice:"
    # and "### ": the advice section is everything up to that next section.
    nxt = re.search(r"^## (?!Advice:)", md[start:], flags=re.M)
    section = md[start:start + nxt.start()] if nxt else md[start:]
    # Piped, advise prints its markdown as text (rich would render it cut to the width):
    # the report's advice section word for word.
    assert cli.stdout.strip() == section.strip()

    html_out = tmp_path / "a.html"
    assert run("report", str(hot), "--out", str(html_out)).returncode == 0
    page = html_out.read_text()
    assert '<h2 id="advice">Advice' in page
    div = page[page.index('<div class="advice">'):]
    div = div[:div.index("</div>")]
    inline = re.sub(r"</?(b|i|em|strong|code)>", "", div)  # inside a word's run of text
    shown = html.unescape(re.sub(r"<[^>]+>", " ", inline)).split()
    # The markdown's words without its markup (headings' #, bullets' -, ** and `).
    printed = [w for w in re.sub(r"\*\*|`", "", cli.stdout).split()
               if w != "-" and set(w) != {"#"}]
    assert shown == printed


def test_a_per_step_engine_cost_is_in_the_ops_and_in_the_report(tmp_path):
    """An engine costs file with 0.4 ms per step (as `calibrate fit` can write): the CLI's
    TPOT carries it, its `--ops` rows still sum to the TPOT (the cost is its own row, on no
    operator), and the report's and the UI's estimate (estimate_view) give the same numbers.
    The shipped vLLM file fits 0 per step, which hid both."""
    from ridgeline.report.estimate_view import estimate_view

    costs = tmp_path / "engine.json"
    costs.write_text(json.dumps({"engine": "mine", "costs": {
        "request_overhead_s": {"value": 0.0, "unit": "s"},
        "request_overhead_steps": {"value": 0.0, "unit": "steps"},
        "step_overhead_s": {"value": 0.0004, "unit": "s"}}}))
    args = ("estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--batch", "32",
            "--ops", "--json")
    with_cost = json.loads(run(*args, "--engine", str(costs)).stdout)
    gpu_only = json.loads(run(*args, "--no-engine-costs").stdout)
    tpot = with_cost["result"]["tpot_s"]
    assert tpot == pytest.approx(gpu_only["result"]["tpot_s"] + 0.0004, rel=1e-9)
    rows = with_cost["ops"]["decode"]
    assert sum(r["time_s"] for r in rows) == pytest.approx(tpot, rel=1e-9)
    assert [r["time_s"] for r in rows if r["kind"] == "engine"] == [pytest.approx(0.0004)]
    v = estimate_view("llama-3.1-8b", "h100-sxm", batch=32, engine=str(costs))
    assert v["result"]["tpot_s"] == tpot
    assert v["ops"]["decode"] == rows


def test_plot_roofline_refuses_a_calibration_file_over_64_mib(tmp_path):
    """The size cap is checked before reading: a sparse file one byte past 64 MiB is refused
    with the limit named; one of exactly 64 MiB gets past the cap (to the JSON parser)."""
    for size, words in (((64 << 20) + 1, ("--calibration", "at most 64 MiB")),
                        (64 << 20, ("--calibration",))):
        big = tmp_path / f"cal{size}.json"
        with big.open("wb") as fh:
            fh.truncate(size)
        r = run("plot", "roofline", "--model", "qwen2.5-7b", "--hardware", "h20",
                "--calibration", str(big), "--out", str(tmp_path / "r.svg"))
        assert_usage_error(r, *words)
        assert ("at most 64 MiB" in r.stderr) == (size > 64 << 20), r.stderr
