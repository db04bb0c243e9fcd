"""`ridgeline analyze / compare / gate / validate / theory` end to end on generated traces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ridgeline.cli import app
from ridgeline.metrics.analysis import analyze
from ridgeline.metrics.compare import compare
from ridgeline.metrics.gate import gate, parse_rule
from ridgeline.trace.reader import read_trace
from ridgeline.trace.schema import TraceHeader
from ridgeline.trace.writer import TraceWriter

runner = CliRunner()


def make_trace(path: Path, n: int, tpot_ms: float, seed: int, ttft_ms: float = 100.0) -> Path:
    """Poisson arrivals at 20 req/s; 20 output tokens in 5 chunks of 4; lognormal TPOT."""
    rng = np.random.default_rng(seed)
    sent = np.cumsum(rng.exponential(1 / 20, n))
    ttft = rng.lognormal(np.log(ttft_ms / 1e3), 0.3, n)
    tpot = rng.lognormal(np.log(tpot_ms / 1e3), 0.2, n)
    with TraceWriter(path, TraceHeader(source="test", seed=seed)) as w:
        for i in range(n):
            first = sent[i] + ttft[i]
            # Chunks of 4 tokens: token k (0-based) arrives at first + k * tpot; a chunk is
            # visible with its last token (tokens 0, 4, 8, 12, 16 lead; ends at 19).
            times = first + tpot[i] * np.array([0, 4, 8, 12, 19])
            w.write_request({"id": str(i), "scheduled_s": float(sent[i]),
                             "sent_s": float(sent[i]), "event_times_s": times.tolist(),
                             "event_tokens": [1, 4, 4, 4, 7], "end_s": float(times[-1]),
                             "prompt_tokens": 100, "output_tokens": 20,
                             "token_count_source": "usage"})
    return path


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("traces")
    return {
        "base": make_trace(d / "base.jsonl", 2000, 20.0, seed=1),
        "same": make_trace(d / "same.jsonl", 2000, 20.0, seed=2),
        "slow": make_trace(d / "slow.jsonl", 2000, 24.0, seed=3),
        "tiny_base": make_trace(d / "tiny_base.jsonl", 40, 20.0, seed=4),
        "tiny_slow": make_trace(d / "tiny_slow.jsonl", 40, 21.5, seed=5),
    }


def test_tpot_is_chunk_aware(traces: dict[str, Path]) -> None:
    r = analyze(read_trace(traces["base"]))
    # Each request's TPOT is exactly its generated per-token gap: 19 gaps over N - 1 = 19.
    assert r.latency["tpot_ms"].median == pytest.approx(20.0, rel=0.03)
    # Per-event ITL pools each request's 4 gaps of 4, 4, 4 and 7 token-times: its mean is
    # exactly (4 + 4 + 4 + 7) / 4 = 4.75 times the mean TPOT.
    tpot = r.latency["tpot_ms"]
    assert r.latency["itl_ms"].count == 4 * tpot.count
    assert r.latency["itl_ms"].mean == pytest.approx(4.75 * tpot.mean)
    # Per token, every gap divided by its chunk's tokens is the request's TPOT (4 copies):
    # the same median and mean.
    assert r.latency["itl_per_token_ms"].median == pytest.approx(tpot.median)
    assert r.latency["itl_per_token_ms"].mean == pytest.approx(tpot.mean)


def test_analyze_json(traces: dict[str, Path]) -> None:
    res = runner.invoke(app, ["analyze", str(traces["base"]), "--json", "--slo",
                              "ttft_ms<=200", "--slo", "tpot_ms<=25"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["latency"]["tpot_ms"]["percentiles"]["p99"]["ci95_low"] is not None
    assert 0.8 < d["goodput"]["attainment"] <= 1.0
    assert d["throughput"]["requests_per_s"] == pytest.approx(20.0, rel=0.1)
    assert d["littles_law"]["ok"] is True


def test_analyze_table_and_markdown(traces: dict[str, Path]) -> None:
    res = runner.invoke(app, ["analyze", str(traces["base"])])
    assert res.exit_code == 0 and "TTFT" in res.output and "Little" in res.output
    res = runner.invoke(app, ["analyze", str(traces["base"]), "--markdown", "--window", "10:60"])
    assert res.exit_code == 0 and res.output.startswith("## ridgeline analyze")
    assert "given" in res.output


def test_compare_significant_and_noise(traces: dict[str, Path]) -> None:
    a = analyze(read_trace(traces["base"]))
    b = analyze(read_trace(traces["slow"]))
    c = analyze(read_trace(traces["same"]))
    slow = compare(a, b, ["tpot_p50", "ttft_p50"])
    assert slow.row("tpot_p50").verdict == "significant"
    assert slow.row("tpot_p50").rel == pytest.approx(0.2, abs=0.03)
    assert slow.row("ttft_p50").verdict == "within noise"  # TTFT did not change
    same = compare(a, c, ["tpot_p50", "tpot_p95"])
    assert all(r.verdict == "within noise" for r in same.rows)
    res = runner.invoke(app, ["compare", str(traces["base"]), str(traces["slow"]),
                              "--markdown"])
    assert res.exit_code == 0 and "significant" in res.output


def test_gate_exit_codes(traces: dict[str, Path]) -> None:
    rules = ["--max-regression", "tpot_p95=5%", "--max-regression", "ttft_p99=10%"]
    fail = runner.invoke(app, ["gate", str(traces["base"]), str(traces["slow"]), *rules])
    assert fail.exit_code == 1, fail.output
    assert "FAIL" in fail.output and "regression" in fail.output
    ok = runner.invoke(app, ["gate", str(traces["base"]), str(traces["same"]), *rules])
    assert ok.exit_code == 0, ok.output
    assert "PASS" in ok.output


def test_gate_is_inconclusive_on_small_samples(traces: dict[str, Path]) -> None:
    # +7.5% TPOT on 40 requests: the CI is far too wide to establish a >5% regression.
    r = gate(analyze(read_trace(traces["tiny_base"])), analyze(read_trace(traces["tiny_slow"])),
             [parse_rule("tpot_p50=5%")])
    assert r.rows[0].verdict in ("inconclusive", "ok")
    assert r.exit_code == 0


def test_gate_throughput_rule_direction(traces: dict[str, Path]) -> None:
    # Output tokens/s is higher-is-better: a slower TPOT does not lower it much at a fixed
    # arrival rate (open loop), so a 50% throughput-drop rule never fires.
    r = gate(analyze(read_trace(traces["base"])), analyze(read_trace(traces["slow"])),
             [parse_rule("output_tok_s=50%")])
    assert r.rows[0].verdict == "ok"


def test_gate_summary_file(traces: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "summary.md"
    res = runner.invoke(app, ["gate", str(traces["base"]), str(traces["same"]),
                              "--max-regression", "e2e_p50=5%", "--summary-file", str(out)])
    assert res.exit_code == 0
    assert out.read_text().startswith("## ridgeline gate")


def test_validate_command(traces: dict[str, Path], tmp_path: Path) -> None:
    res = runner.invoke(app, ["validate", str(traces["base"])])
    assert res.exit_code == 0 and "valid" in res.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type":"header","source":"t"}\n{"type":"request","id":"a"}\n')
    res = runner.invoke(app, ["validate", str(bad)])
    assert res.exit_code == 1


def test_theory_command() -> None:
    res = runner.invoke(app, ["theory", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["Little L = 20 req/s × 8 s (requests)"] == 160
    res = runner.invoke(app, ["theory", "amdahl", "--fraction", "0.3", "--speedup", "2",
                              "--json"])
    assert json.loads(res.output)["overall speedup (×)"] == pytest.approx(1 / 0.85)
    res = runner.invoke(app, ["theory", "fanout", "--calls", "10", "--json"])
    assert json.loads(res.output)["P(some call > its P99)"] == pytest.approx(1 - 0.99**10)


def test_user_errors_are_one_line(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text('{"type":"header","source":"t"}\n')
    for args in (["analyze", str(p), "--slo", "ttft<=5"],
                 ["analyze", str(p), "--window", "5:1"],
                 ["analyze", str(tmp_path / "missing.jsonl")],
                 ["gate", str(p), str(p), "--max-regression", "nonsense=5%"],
                 ["theory", "mm1", "--arrival-rate", "12", "--service-rate", "10"]):
        proc = subprocess.run([sys.executable, "-m", "ridgeline.cli", *args],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


# ---- gate outcomes: typed status, exit codes 0 / 1 / 3 ------------------------------------

def _failed_trace(path: Path, n: int = 50) -> Path:
    """Every request failed (HTTP 500): nothing successful to measure."""
    with TraceWriter(path, TraceHeader(source="test")) as w:
        for i in range(n):
            w.write_request({"id": str(i), "sent_s": i * 0.05, "end_s": i * 0.05 + 0.01,
                             "status": "error", "error_kind": "http_500"})
    return path


def test_gate_threshold_must_be_unambiguous() -> None:
    from ridgeline.errors import RidgelineError

    assert parse_rule("tpot_p95=5%").max_regression == pytest.approx(0.05)
    assert parse_rule("tpot_p95=0.05").max_regression == pytest.approx(0.05)
    assert parse_rule("tpot_p95=150%").max_regression == pytest.approx(1.5)
    for bad in ("tpot_p95=5", "tpot_p95=1", "tpot_p95=-5%", "tpot_p95=nan%", "tpot_p95=x"):
        with pytest.raises(RidgelineError) as e:
            parse_rule(bad)
        assert "\n" not in str(e.value) and "--max-regression" in str(e.value)
    with pytest.raises(RidgelineError, match="write 5%"):
        parse_rule("tpot_p95=5")


def test_gate_cannot_evaluate_a_run_without_successes(traces: dict[str, Path],
                                                      tmp_path: Path) -> None:
    from ridgeline.metrics.gate import GateStatus

    dead = _failed_trace(tmp_path / "dead.jsonl")
    base = analyze(read_trace(traces["base"]))
    for rule in ("tpot_p95=5%", "output_tok_s=5%"):
        r = gate(base, analyze(read_trace(dead)), [rule])
        assert r.status is GateStatus.CANNOT_EVALUATE and r.exit_code == 3
        assert r.rows[0].verdict == "cannot evaluate"
        assert "candidate has no successful request" in r.problems[0]
    # A window that holds no request of the candidate: cannot evaluate either.
    empty = analyze(read_trace(traces["same"]), window="1000000:1000001")
    assert gate(base, empty, ["tpot_p95=5%"]).status is GateStatus.CANNOT_EVALUATE
    # An undefined metric (no per-token times → no per-token ITL... here: queue lag is
    # defined, but a baseline without it is not): one rule cannot be judged.
    ok = gate(base, analyze(read_trace(traces["same"])), ["tpot_p95=5%"])
    assert ok.status is GateStatus.PASS and ok.exit_code == 0
    slow = gate(base, analyze(read_trace(traces["slow"])), ["tpot_p95=5%"])
    assert slow.status is GateStatus.REGRESSION and slow.exit_code == 1


def test_gate_command_raises_exit_with_the_status_code(traces: dict[str, Path],
                                                       tmp_path: Path) -> None:
    import typer

    from ridgeline.commands.analyze import gate_cmd

    dead = str(_failed_trace(tmp_path / "dead.jsonl"))
    cases = [(traces["same"], 0), (traces["slow"], 1), (dead, 3)]
    for cand, code in cases:
        with pytest.raises(typer.Exit) as e:
            gate_cmd(str(traces["base"]), str(cand), ["tpot_p95=5%"], window=None,
                     json_out=True, summary_file=None, fmt="auto", seed=0)
        assert e.value.exit_code == code, cand


def test_gate_exit_codes_through_the_installed_command(traces: dict[str, Path],
                                                       tmp_path: Path) -> None:
    """Exit codes as a CI job sees them: 0 pass, 1 regression, 3 cannot evaluate, 2 bad rule."""
    exe = Path(sys.executable).parent / "ridgeline"
    dead = str(_failed_trace(tmp_path / "dead.jsonl"))
    cases = [([str(traces["same"]), "--max-regression", "tpot_p95=5%"], 0),
             ([str(traces["slow"]), "--max-regression", "tpot_p95=5%"], 1),
             ([dead, "--max-regression", "tpot_p95=5%"], 3),
             ([str(traces["slow"]), "--max-regression", "tpot_p95=5"], 2)]
    for args, code in cases:
        proc = subprocess.run([str(exe), "gate", str(traces["base"]), *args],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == code, (args, proc.stdout[-500:], proc.stderr[-500:])
        assert "Traceback" not in proc.stderr
        if code == 2:
            assert proc.stderr.startswith("error: ") and "5%" in proc.stderr
        if code == 3:
            assert "CANNOT EVALUATE" in proc.stdout
