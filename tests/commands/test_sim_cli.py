"""`ridgeline simulate` end to end (small runs)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ridgeline.cli import app

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, ["simulate", *args])


def test_simulate_json_summary_comes_from_analyze(tmp_path):
    trace = tmp_path / "t.jsonl"
    tl = tmp_path / "tl.csv"
    r = _run("--rate", "5", "--requests", "60", "--prompt", "fixed:200", "--output",
             "fixed:20", "--json", "--trace", str(trace), "--timeline", str(tl),
             "--slo", "ttft_ms<=500")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["simulation"]["finished"] == 60
    assert out["analysis"]["latency"]["ttft_ms"]["count"] > 0
    assert out["analysis"]["goodput"]["slos"] == ["ttft_ms<=500"]
    lines = trace.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["source"] == "simulate" and header["engine_config"]["max_num_seqs"] == 256
    rec = json.loads(lines[1])
    assert rec["token_count_source"] == "simulated" and len(rec["event_times_s"]) == 20
    assert rec["scheduled_s"] == rec["sent_s"]
    assert tl.read_text().startswith("replica,start_s,end_s,batch_size")


def test_simulate_rate_sweep_marks_knee():
    r = _run("--rate", "2,200", "--requests", "300", "--prompt", "fixed:500", "--output",
             "fixed:50", "--json", "--slo", "ttft_ms<=1000")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert [p["rate_req_s"] for p in out["sweep"]] == [2.0, 200.0]
    assert out["knee_rate_req_s"] == 2.0       # 200 req/s is far past capacity
    assert out["max_rate_meeting_slos_req_s"] == 2.0


def test_simulate_closed_loop_and_pd():
    r = _run("--concurrency", "4", "--requests", "40", "--pd", "1:1", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["simulation"]["instances"] == ["prefill", "decode"]


def test_pd_split_is_recorded_in_the_trace_header(tmp_path):
    """1 prefill and 2 decode instances: the header says which split ran, with the KV link."""
    trace = tmp_path / "pd.jsonl"
    r = _run("--rate", "5", "--requests", "20", "--pd", "1:2", "--json", "--trace", str(trace))
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["simulation"]["instances"] == ["prefill", "decode", "decode"]
    cfg = json.loads(trace.read_text().splitlines()[0])["engine_config"]
    assert (cfg["prefill_instances"], cfg["decode_instances"]) == (1, 2)
    assert cfg["link_bandwidth_bytes_s"] > 0 and cfg["kv_bytes_per_token"] > 0


def test_bad_input_is_one_line_error():
    from ridgeline.errors import RidgelineError

    for args in (["--rate", "5", "--prompt", "zipf:3"], ["--rate", "x"],
                 ["--rate", "5", "--concurrency", "3"], ["--rate", "5", "--router", "random"],
                 ["--rate", "5", "--pd", "2"], ["--rate", "5", "--think-time", "bogus"]):
        r = _run(*args, "--requests", "5")
        assert isinstance(r.exception, RidgelineError), (args, r.output)
